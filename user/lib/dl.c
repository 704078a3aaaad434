// SPDX-License-Identifier: MIT
#include <dlfcn.h>
#include <stdio.h>

#include "lib/dl.h"

const char *dl_bind(const char *soname, const struct dl_fn *fns, size_t n, char *why, size_t len)
{
	void *h = NULL;

	if (dl_possible() && !(h = dlopen(soname, RTLD_NOW | RTLD_LOCAL))) {
		snprintf(why, len, "%s", dlerror());
		return why;
	}
	for (size_t i = 0; i < n; i++) {
		*fns[i].slot = h ? dlsym(h, fns[i].name) : fns[i].linked;
		if (*fns[i].slot)
			continue;
		if (h)
			snprintf(why, len, "%s has no %s", soname, fns[i].name);
		else
			snprintf(why, len, "%s is not linked into this static build", fns[i].name);
		for (size_t k = 0; k < n; k++)
			*fns[k].slot = NULL;
		if (h)
			dlclose(h);
		return why;
	}
	return NULL;
}
