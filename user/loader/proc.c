// SPDX-License-Identifier: MIT
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/grow.h"
#include "loader/proc.h"

int proc_check(uint32_t pid)
{
	char path[32];

	snprintf(path, sizeof(path), "/proc/%u", pid);
	return access(path, F_OK) == 0 ? 0 : -ESRCH;
}

ssize_t proc_read_file(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	if (fd < 0)
		return -errno;
	r = read(fd, buf, n - 1);
	close(fd);
	if (r < 0)
		return -errno;
	buf[r] = 0;
	return r;
}

void proc_comm(uint32_t pid, char *out, size_t n)
{
	char path[40];

	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	if (proc_read_file(path, out, n) <= 0) {
		snprintf(out, n, "?");
		return;
	}
	out[strcspn(out, "\n")] = 0;
}

int proc_parse_stat(const char *text, uint32_t *pid, uint32_t *ppid)
{
	/* comm may hold spaces and parentheses: the state follows the last ')'. */
	const char *close = strrchr(text, ')');
	char state;
	unsigned int pp;

	if (!close || sscanf(text, "%u", pid) != 1)
		return -EINVAL;
	if (sscanf(close + 1, " %c %u", &state, &pp) != 2)
		return -EINVAL;
	*ppid = pp;
	return 0;
}

struct pair {
	uint32_t pid, ppid;
};

int proc_descendants(uint32_t root, void (*cb)(void *ctx, uint32_t pid), void *ctx)
{
	DIR *d = opendir("/proc");
	struct pair *all = NULL, *m;
	size_t n = 0, cap = 0;
	uint32_t *todo = NULL;
	size_t head = 0, tail = 0;
	struct dirent *de;
	int found = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char path[300], text[512];
		struct pair p;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		if (proc_read_file(path, text, sizeof(text)) <= 0 ||
		    proc_parse_stat(text, &p.pid, &p.ppid))
			continue; /* exited meanwhile */
		m = grow(all, &cap, n + 1, sizeof(*m), 512);
		if (!m) {
			found = -ENOMEM;
			goto out;
		}
		all = m;
		all[n++] = p;
	}
	todo = malloc((n + 1) * sizeof(*todo));
	if (!todo) {
		found = -ENOMEM;
		goto out;
	}
	todo[tail++] = root;
	while (head < tail) {
		uint32_t parent = todo[head++];

		for (size_t i = 0; i < n; i++) {
			if (all[i].ppid != parent || all[i].pid == root)
				continue;
			todo[tail++] = all[i].pid;
			all[i].ppid = 0; /* visit once */
			cb(ctx, all[i].pid);
			found++;
		}
	}
out:
	closedir(d);
	free(all);
	free(todo);
	return found;
}
