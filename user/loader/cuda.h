/* SPDX-License-Identifier: MIT */
/*
 * Finding and hooking the CUDA runtime and driver that traced processes use: every copy of
 * libcudart.so* / libcuda.so* mapped by a traced process (PyTorch ships its own), and an
 * executable with the runtime linked in statically, found through /proc/PID/maps and opened
 * through /proc/PID/root so that processes in containers work.
 *
 * The uprobes are attached for each traced process alone (a perf event bound to it): the kernel
 * puts its breakpoints in that process's memory only, so another process mapping the same file
 * never traps, and two tracers of different processes do not run each other's programs on each
 * call. Where each function lies in a file is read once per file (one pass over its symbols);
 * a process's probes go when it exits (cuda_forget).
 *
 * A process that loaded tokenscope's CUPTI injection library gets that library's USDT probes
 * attached for it alone too: attaching turns the library's collection on in that process (the
 * probes' semaphores), so processes nobody traces pay nothing.
 */
#ifndef TS_CUDA_H
#define TS_CUDA_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Library files looked at, and (process, file) pairs hooked; beyond them, nothing is hooked
 * (counted, and said once). */
#define CUDA_MAX_FILES 64
#define CUDA_MAX_HOOKS 256
/* Functions of the longest table (runtime or driver), and links of one hook: a probe per
 * function and a return probe per host wait. */
#define CUDA_FNS_MAX 14
#define CUDA_HOOK_LINKS 24
#define CUDA_CUPTI_LIB "libtokenscope_cupti"

struct kernel;
struct bpf_link;

struct cuda_fn;

struct cuda_file {
	dev_t dev;
	ino_t ino;
	const struct cuda_fn *table; /* the functions looked for in it */
	size_t n;
	int nfns;		     /* of those, defined in it: 0 for a file without CUDA */
	bool by_name;		     /* its symbols could not be read here: libbpf finds each */
	bool hooked;		     /* hooked for some process at some time */
	uint64_t offs[CUDA_FNS_MAX]; /* file offset of each function, 0 where absent */
};

/* The probes of one process in one file (file: an index in files; -1 for the CUPTI
 * library's). */
struct cuda_hook {
	uint32_t pid;
	int file;
	int nlinks;
	struct bpf_link *links[CUDA_HOOK_LINKS];
};

/* What a missing permission kept from a scan (the first such refusal), for the loader to put
 * in words: another process's maps, its library through /proc/PID/root, or a uprobe on it. */
enum cuda_denied { CUDA_DENIED_NONE, CUDA_DENIED_MAPS, CUDA_DENIED_ROOT, CUDA_DENIED_UPROBE };

struct cuda_denial {
	enum cuda_denied what;
	int err; /* the errno */
	uint32_t pid;
	char path[4096 + 64]; /* the library, as the process maps it */
};

struct cuda_attach {
	struct kernel *k; /* attaches the probes (kernel.h) */
	struct cuda_file files[CUDA_MAX_FILES];
	int nfiles;
	struct cuda_hook *hooks; /* CUDA_MAX_HOOKS, allocated with the first */
	int nhooks;
	bool hooks_full, files_full; /* a cap was reached: said once, nothing more hooked */
	bool verbose;
	bool kernels; /* --kernels: the library's per-operation probe too */
	struct cuda_denial denied;
	int cupti_attached; /* processes whose CUPTI library probes were attached */
};

void cuda_init(struct cuda_attach *ca, struct kernel *k, bool verbose);
/* Hooks the CUDA libraries pid maps that are not hooked yet; returns how many functions it
 * hooked now (0 when nothing new), or -errno. */
int cuda_scan(struct cuda_attach *ca, uint32_t pid);
/* Library files hooked for some process so far. */
int cuda_hooked_files(const struct cuda_attach *ca);
/* A process that exited: its probes are detached (a later process with its pid is a new one). */
void cuda_forget(struct cuda_attach *ca, uint32_t pid);
void cuda_detach(struct cuda_attach *ca);

#endif
