/* SPDX-License-Identifier: MIT */
/*
 * Finding and hooking the CUDA runtime and driver that traced processes use: every copy of
 * libcudart.so* / libcuda.so* mapped by a traced process (PyTorch ships its own), and an
 * executable with the runtime linked in statically, found through /proc/PID/maps and opened
 * through /proc/PID/root so that processes in containers work. Each library file (device and
 * inode) is hooked once, for every process; the BPF programs keep only traced processes.
 *
 * A process that loaded tokenscope's CUPTI injection library gets that library's USDT probes
 * attached for it alone: attaching turns the library's collection on in that process (the
 * probes' semaphores), so processes nobody traces pay nothing.
 */
#ifndef TS_CUDA_H
#define TS_CUDA_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define CUDA_MAX_FILES 64
/* Processes whose CUPTI injection library (libtokenscope_cupti.so) probes are attached. */
#define CUDA_MAX_CUPTI 64
#define CUDA_CUPTI_LIB "libtokenscope_cupti"

struct tokenscope_bpf;
struct bpf_link;

struct cuda_file {
	dev_t dev;
	ino_t ino;
	int hooked; /* functions hooked in it; 0 for a file looked at and found without CUDA */
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
	struct tokenscope_bpf *skel;
	struct cuda_file files[CUDA_MAX_FILES];
	int nfiles;
	struct bpf_link **links;
	int nlinks;
	size_t cap;
	bool verbose;
	bool kernels; /* --kernels: the library's per-operation probe too */
	struct cuda_denial denied;
	uint32_t cupti_pids[CUDA_MAX_CUPTI]; /* probes attached (or found failing) for these */
	int ncupti;
	int cupti_attached; /* of those, attached */
};

void cuda_init(struct cuda_attach *ca, struct tokenscope_bpf *skel, bool verbose);
/* Hooks the CUDA libraries pid maps that are not hooked yet; returns how many functions it
 * hooked now (0 when nothing new), or -errno. */
int cuda_scan(struct cuda_attach *ca, uint32_t pid);
int cuda_hooked_files(const struct cuda_attach *ca);
void cuda_detach(struct cuda_attach *ca);

#endif
