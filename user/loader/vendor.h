/* SPDX-License-Identifier: MIT */
/*
 * The GPU vendors, one row each (CUDA's the only one today), holding what is a vendor's in the
 * loader: the libraries whose calls make GPU steps (libhooks.h tables, hooked by uprobes.c), the
 * sampler of its devices (sampler.h, started by trace.c), and its device-time library (found in
 * a process's maps by uprobes.c, injected by `tokenscope run`: run.c). The loader's files take
 * the vendor's pieces from here and name none of them; tokenscope check prints a row's lines.
 *
 * Nothing past the loader is a vendor's: the records (include/events.h, whose call kinds are
 * named after CUDA's), the device-time probes and their ABI (include/devtime_abi.h), the device
 * sample, the pipeline and the outputs. The BPF programs at a hooked function's entry and return
 * (bpf/lib/cuda.bpf.h) read the arguments as CUDA lays them out: a vendor whose functions take
 * theirs otherwise needs a module of its own in bpf/lib/ and its programs in kernel.h's
 * enum kernel_probe.
 */
#ifndef TS_VENDOR_H
#define TS_VENDOR_H

#include <stddef.h>

#include "loader/libhooks.h"
#include "loader/sampler.h"

/* Rows the registry may hold: the bits of uprobes.gpu_mapped, the notes of trace_opts. */
#define VENDORS_MAX 4

/* A vendor's device-time library: a library its runtime loads into a process at start, that
 * fires the probes of include/devtime_abi.h (cupti/ is CUDA's). A vendor without one leaves
 * every field NULL. */
struct vendor_devtime {
	const char *what;	 /* its source, said with a process's device times ("CUPTI") */
	const char *check_name;	 /* tokenscope check's line ("cupti") */
	const char *file_prefix; /* the start of its file name in a process's maps */
	const char *file_name;	 /* the file tokenscope run looks for beside itself */
	const char *path_env;	 /* the variable that names it elsewhere */
	const char *inject_env;	 /* the variable the vendor's runtime loads it from */
};

struct vendor {
	const char *name;	/* its libraries' kind, in messages ("CUDA") */
	const char *check_name; /* tokenscope check's line about its libraries ("cuda") */
	/* its libraries, each of kind name (libhooks.what: trace.c asks what was hooked by it) */
	const struct libhooks *libs;
	size_t nlibs;
	const struct sampler_ops *sampler; /* NULL: no sampler */
	struct vendor_devtime devtime;
};

/* The rows, by index (0 .. vendor_count() - 1). */
size_t vendor_count(void);
const struct vendor *vendor_row(size_t i);
/* The index of the vendor whose library table l is, or -1 (not a GPU's: TLS). */
int vendor_of(const struct libhooks *l);
/* The vendors' names joined by " or " ("CUDA"), for what is said of every GPU library. */
void vendor_names(char *out, size_t n);

#endif
