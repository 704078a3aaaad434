/* SPDX-License-Identifier: MIT */
/*
 * What this kernel offers the BPF programs, probed when tokenscope starts (docs/building.md,
 * "Kernels"): each feature the programs use past Linux 5.10, with BTF, and what stands in for it
 * where the kernel lacks it. One table (FEATURES) names each feature, the first kernel that has
 * it, what depends on it, and whether it is probed by a map, a helper, an instruction or a BTF
 * type; the loader sets the programs' switches from the results (kernel.c), `tokenscope check`
 * prints them, and the JSON summary and /metrics report them.
 *
 * Probing loads nothing that stays: each probe is a map made and closed, or a two-instruction
 * program loaded and closed (libbpf's probes), or a look into the kernel's BTF.
 */
#ifndef TS_LOADER_FEATURES_H
#define TS_LOADER_FEATURES_H

#include <stdbool.h>
#include <stddef.h>

/*
 * X(id, name, since, what, without, lost):
 *   id       the member of struct features;
 *   name     its name in outputs (`tokenscope check`, JSON, the Prometheus label);
 *   since    the first Linux release with it;
 *   what     what tokenscope uses it for;
 *   without  what it does in its place;
 *   lost     what outputs lack without it (NULL: the stand-in is an equivalent).
 */
#define FEATURES(X)                                                                               \
	X(task_storage, "task_storage", "5.11",                                                   \
	  "per-thread state in the task (a syscall between its entry and exit)",                  \
	  "a hash map keyed by thread id, emptied at each thread's exit", NULL)                   \
	X(task_btf, "task_btf", "5.11", "the current task's fields read by plain loads",          \
	  "the same fields read through bpf_probe_read_kernel", NULL)                             \
	X(atomics, "atomics", "5.12", "atomic or, and, exchange and fetch-and-add",               \
	  "the traced-process bitmap off (a hash lookup per syscall), ids from per-CPU counters", \
	  NULL)                                                                                   \
	X(cookie, "bpf_cookie", "5.15", "one uprobe program for every CUDA and TLS function",     \
	  "a program per function kind", NULL)                                                    \
	X(loop, "bpf_loop", "5.17", "copying a syscall's bytes in any number of pieces",          \
	  "a bounded loop over the pieces (the same limits)", NULL)                               \
	X(rx_ready, "sk_data_ready", "6.3",                                                       \
	  "the sk_data_ready tracepoint: when a request's bytes reached the socket",              \
	  "nothing: no tracepoint tells when bytes reach a socket",                               \
	  "received_ns and socket_wait_ms are null")

struct features {
#define FEATURE_MEMBER(id, name, since, what, without, lost) bool id;
	FEATURES(FEATURE_MEMBER)
#undef FEATURE_MEMBER
	char release[65]; /* uname -r */
	bool btf;	  /* /sys/kernel/btf/vmlinux: without it nothing loads */
	/* A function's address as a value in a program (5.13, with bpf_for_each_map_elem): the
	 * default object holds one (bpf_loop's callback), so where it is missing, as where
	 * atomics are, the legacy object is loaded (features_legacy). */
	bool callbacks;
	/* Programs on the followed syscalls' own functions (fentry/fexit, Linux 5.5 on x86_64):
	 * where they attach, a process nobody traces pays nothing on the other syscalls, as it
	 * does on every syscall under the raw syscall tracepoints. fentry_err says why not (a
	 * negative errno). Not a feature row: nothing is lost without it, only cost. */
	bool fentry;
	int fentry_err;
	bool forced; /* some turned off by TOKENSCOPE_FEATURES_OFF (tests) */
	/* The kernel answered the probes (a hash map could be made): without CAP_BPF it answers
	 * none, and every feature reads as off. */
	bool probed;
};

/* Whether this kernel needs the legacy object (bpf/lib/common.bpf.h, TS_LEGACY). */
static inline bool features_legacy(const struct features *f)
{
	return !f->atomics || !f->callbacks;
}

/* A feature's row of FEATURES, by index (0 .. features_count() - 1). */
struct feature_row {
	const char *name, *since, *what, *without, *lost;
	size_t offset; /* of its bool in struct features */
};

size_t features_count(void);
const struct feature_row *features_row(size_t i);
bool features_has(const struct features *f, size_t i);

/* Features named here (a comma-separated list) are taken as missing even where the kernel has
 * them: how the fallbacks are tested on a new kernel (tests/bpf, tests/kernels). */
#define FEATURES_OFF_ENV "TOKENSCOPE_FEATURES_OFF"

/* Probes this kernel: fills f (every feature false when the kernel cannot be asked), then turns
 * off those FEATURES_OFF_ENV names. */
void features_probe(struct features *f);
/* Turns off the features of a comma-separated list of names; unknown names are ignored. */
void features_force_off(struct features *f, const char *names);
/* The start's message about the features that are off (tokenscope: Linux R lacks a (5.11), ...:
 * what outputs lack), wrapped within 100 columns, into buf; "" when none is. */
void features_off_text(const struct features *f, char *buf, size_t n);

#endif
