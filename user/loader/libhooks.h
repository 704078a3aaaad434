/* SPDX-License-Identifier: MIT */
/*
 * A library whose calls are hooked with uprobes, as a table: what it is, the start of its file
 * names, and each function with the programs at its entry and return. uprobes.c hooks every
 * table it is given: the TLS libraries' (its own) and each GPU vendor's (vendor.h: CUDA's in
 * cuda.c). A type alone, so that a vendor's tables and the code that hooks them depend on it and
 * not on each other.
 */
#ifndef TS_LIBHOOKS_H
#define TS_LIBHOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loader/kernel.h"

/* Functions of the longest table (CUDA's runtime or driver): uprobes.h keeps where each lies in
 * a file, per function. */
#define LIBHOOKS_FNS_MAX 14

/* A function to hook: its name, the cookie its programs read (enum ts_cuda_fn, enum ts_tls_fn),
 * the program at its entry and the one at its return (KERNEL_PROBE_NONE: none). */
struct libhooks_fn {
	const char *name;
	uint32_t cookie;
	enum kernel_probe entry, ret;
};

/* A kind of library: what it is ("CUDA", "TLS"), what is not traced without it ("GPU steps",
 * "TLS plaintext"), the start of its file names, whether an executable may link it in, and the
 * functions hooked in it (n at most LIBHOOKS_FNS_MAX). */
struct libhooks {
	/* file_prefix NULL: looked for in executables alone */
	const char *what, *traces, *file_prefix;
	bool exe_too;
	const struct libhooks_fn *fns;
	size_t n;
};

/* A table's functions and their count, for a struct libhooks. */
#define LIBHOOKS_FNS(fns) fns, sizeof(fns) / sizeof(fns[0])

#endif
