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

#endif
