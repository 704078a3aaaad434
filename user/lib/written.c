// SPDX-License-Identifier: MIT
#include <string.h>
#include <sys/stat.h>

#include "lib/written.h"

void say_written(FILE *f, const char *what, const char *path)
{
	struct stat st;
	double size;

	if (!path || !strcmp(path, "-") || stat(path, &st) || !S_ISREG(st.st_mode))
		return;
	size = (double)st.st_size;
	if (size < 1024)
		fprintf(f, "tokenscope: wrote %s to %s (%.0f bytes)\n", what, path, size);
	else if (size < 1024 * 1024)
		fprintf(f, "tokenscope: wrote %s to %s (%.1f KiB)\n", what, path, size / 1024);
	else
		fprintf(f, "tokenscope: wrote %s to %s (%.1f MiB)\n", what, path,
			size / (1024 * 1024));
}
