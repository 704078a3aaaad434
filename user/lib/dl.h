/* SPDX-License-Identifier: MIT */
/*
 * Whether this tokenscope can load shared libraries: libcurl for --otlp and NVML for GPU
 * metrics are opened with dlopen when they are wanted.
 *
 * A statically linked tokenscope (make STATIC=1) does not try. glibc's dlopen in a static
 * executable works only where the very glibc it was linked with is installed, and what it
 * loads brings a second C library into the process (its own malloc, threads and locale); the
 * bare container or debug image a static binary is for has neither libcurl nor glibc. The
 * linker defines _DYNAMIC only in an executable that has a dynamic section, so a weak reference
 * tells the two builds apart at run time, from the same objects.
 */
#ifndef TS_DL_H
#define TS_DL_H

#include <stdbool.h>
#include <stddef.h>

extern const char _DYNAMIC[] __attribute__((weak));

/* The message part that says why, where dl_possible() is false. */
#define DL_STATIC_WHY "a static tokenscope cannot load shared libraries: use the dynamic build"

static inline bool dl_possible(void)
{
	return _DYNAMIC != NULL;
}

/*
 * A function a module takes from a library that the dynamic build opens when first needed and
 * the static build links in: its name, where its address goes, and its address in this
 * executable (a weak reference: null where the library is not linked in).
 */
struct dl_fn {
	const char *name;
	void **slot;
	void *linked;
};

#define DL_FN(slot, fn)                             \
	{                                           \
#fn, (void **)&(slot), (void *)(fn) \
	}

/*
 * Fills every slot of fns: in a static tokenscope with the linked functions, else with those of
 * soname, opened with dlopen. NULL when every one is there; else why not, written into why's
 * len bytes, and every slot is NULL.
 */
const char *dl_bind(const char *soname, const struct dl_fn *fns, size_t n, char *why, size_t len);

#endif
