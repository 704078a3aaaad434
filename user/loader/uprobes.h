/* SPDX-License-Identifier: MIT */
/*
 * Finding and hooking the libraries whose calls tokenscope traces with uprobes: each GPU
 * vendor's (vendor.h; CUDA's runtime and driver, every copy of libcudart.so* / libcuda.so* a
 * traced process maps: PyTorch ships its own), the TLS library (libssl.so*), and an executable
 * that links a GPU runtime or OpenSSL in statically (Node links OpenSSL in), found through
 * /proc/PID/maps and opened through /proc/PID/root so that processes in containers work.
 *
 * The uprobes are attached for each traced process alone (a perf event bound to it): the kernel
 * puts its breakpoints in that process's memory only, so another process mapping the same file
 * never traps, and two tracers of different processes do not run each other's programs on each
 * call. Where each function lies in a file is read once per file (one pass over its symbols);
 * a process's probes go when it exits (uprobes_forget).
 *
 * A process that loaded a vendor's device-time library (CUPTI's injection library for CUDA) gets
 * that library's USDT probes attached for it alone too: attaching turns the library's collection
 * on in that process (the probes' semaphores), so processes nobody traces pay nothing.
 */
#ifndef TS_UPROBES_H
#define TS_UPROBES_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "loader/kernel.h"
#include "loader/libhooks.h"

/* Library files looked at, and (process, file) pairs hooked; beyond them, nothing is hooked
 * (counted, and said once). */
#define UPROBES_MAX_FILES 64
#define UPROBES_MAX_HOOKS 256
/* Links of one hook: an entry per function (LIBHOOKS_FNS_MAX at most) and a return per CUDA
 * host wait and per TLS call, or for Go a probe per RET instruction (crypto/tls's Read, Write
 * and handshakeContext have up to a dozen together) */
#define UPROBES_HOOK_LINKS 48

struct kernel;
struct bpf_link;

struct uprobes_file {
	dev_t dev;
	ino_t ino;
	const struct libhooks *table;	 /* the library looked for in it */
	int nfns;			 /* of its functions, defined in it: 0 for none */
	bool by_name;			 /* its symbols could not be read here: libbpf finds each */
	bool hooked;			 /* hooked for some process at some time */
	uint64_t offs[LIBHOOKS_FNS_MAX]; /* file offset of each function, 0 where absent */
	uint64_t sizes[LIBHOOKS_FNS_MAX]; /* and its size (the symbol's) */
	uint32_t skips[LIBHOOKS_FNS_MAX]; /* where its entry is probed, from its start (Go) */
	/* Its probes shared by every process (tracefs.h), made at its first hook: nprobes 0
	 * before, -1 when they cannot be (a PMU probe per process then). Each probe's
	 * tracepoint id, and the attachment of its program to a perf event bound to tokenscope
	 * (the link owns that event's descriptor). */
	int nprobes;
	int shared_fns; /* the functions they hook */
	int ids[UPROBES_HOOK_LINKS];
	struct bpf_link *carried[UPROBES_HOOK_LINKS];
};

/* The probes of one process in one file (file: an index in files; -1 - v for the device-time
 * library of vendor v, an index in vendor.h's rows). */
struct uprobes_hook {
	uint32_t pid;
	int file;
	int nlinks;
	struct bpf_link *links[UPROBES_HOOK_LINKS]; /* PMU probes of this process */
	int nfds;
	int fds[UPROBES_HOOK_LINKS]; /* or its events on the file's shared probes */
	bool mapped;		     /* the process mapped the file when it was hooked */
};

/* What a missing permission kept from a scan (the first such refusal), for the loader to put
 * in words: another process's maps, its library through /proc/PID/root, or a uprobe on it. */
enum uprobes_denied {
	UPROBES_DENIED_NONE,
	UPROBES_DENIED_MAPS,
	UPROBES_DENIED_ROOT,
	UPROBES_DENIED_UPROBE
};

struct uprobes_denial {
	enum uprobes_denied what;
	const char *kind;   /* the library's libhooks.what; NULL for the maps */
	const char *traces; /* and its libhooks.traces */
	int err;	    /* the errno */
	uint32_t pid;
	char path[4096 + 64]; /* the library, as the process maps it */
};

/* A file seen (the dynamic loader's caches read: uprobes.c's cache_candidates). */
struct uprobes_seen {
	dev_t dev;
	ino_t ino;
};
#define UPROBES_MAX_CACHES 16
/* Children whose inherited probes are remembered (uprobes_fork): a ring, the oldest forgotten. */
#define UPROBES_MAX_INHERITED 1024

/* A child and the files (a bit per index in uprobes.files) whose probes it inherited at fork. */
struct uprobes_inherited {
	uint32_t pid;
	uint64_t files;
};

/* What a device-time library (CUPTI's injection library) collects (--device-times): which of
 * its probes is attached (include/devtime_abi.h). */
enum uprobes_device {
	UPROBES_DEVICE_SAMPLED, /* "runs": eager kernels in windows of a duty cycle */
	UPROBES_DEVICE_ALL,	/* "all": every step */
	UPROBES_DEVICE_OFF,	/* none: no device times */
};

struct uprobes {
	struct kernel *k; /* attaches the probes (kernel.h) */
	struct uprobes_file files[UPROBES_MAX_FILES];
	int nfiles;
	struct uprobes_hook *hooks; /* UPROBES_MAX_HOOKS, allocated with the first */
	int nhooks;
	bool hooks_full, files_full; /* a cap was reached: said once, nothing more hooked */
	bool verbose;
	bool kernels;		    /* --kernels: the library's per-operation probe */
	enum uprobes_device device; /* --device-times: which of the library's probes */
	struct uprobes_denial denied;
	int devtime_attached; /* processes whose device-time library probes were attached */
	bool shared;	      /* probes shared through tracefs, inherited at fork (tracefs.h) */
	/* A process that maps a library is held until hooked (hold.h): the dynamic loader's
	 * cache is not made ready ahead (its probes would cost every run, used or not). */
	bool held_mappings;
	struct uprobes_seen caches[UPROBES_MAX_CACHES];
	int ncaches;
	struct uprobes_inherited *inherited; /* UPROBES_MAX_INHERITED, with the first fork */
	uint32_t ninherited;		     /* forks remembered, the ring's next slot modulo */
	/* Hooks made by the once-a-second scan for a file the process had mapped: it may have
	 * called the library before (uprobes_scan's late). */
	int late_hooks;
	/* The longest time from a library's mapping (TS_EV_PROC_MAP) to its hook, and how many
	 * were hooked so */
	uint64_t map_window_max_ns;
	int map_hooks;
	/* A bit per GPU vendor (its index in vendor.h's rows): a traced process has one of its
	 * libraries hooked */
	uint32_t gpu_mapped;
};

void uprobes_init(struct uprobes *u, struct kernel *k, bool verbose);
/* Hooks the libraries pid maps that are not hooked yet; returns how many functions it hooked
 * now (0 when nothing new), or -errno. late: the once-a-second scan, whose finds are counted
 * (late_hooks) as the process may have called them before. With shared probes, pid is also
 * given its events on every library file known so far, mapped or not, so that one it maps
 * later (dlopen) has its breakpoints from the kernel at once. */
int uprobes_scan(struct uprobes *u, uint32_t pid, bool late);
/* A TS_EV_PROC_FORK record: child was forked by thread ptid of parent. Forked by parent's main
 * thread with shared probes, it carries the probes parent held (tracefs.h), remembered so that
 * the scan that gives it probes of its own does not count them late; otherwise (no shared
 * probes, or a thread that may have been running at attach) it is scanned now. */
void uprobes_fork(struct uprobes *u, uint32_t parent, uint32_t ptid, uint32_t child);
/* A TS_EV_PROC_MAP record: pid mapped a file executable at mapped_ns; scanned now, and the
 * time from the mapping to each hook it makes is kept (map_window_max_ns), unless held(ctx, pid)
 * says, once the hooks are in, that the process is stopped at a mapping (hold.h): then no call
 * was missed. held NULL: it is. */
int uprobes_mapped(struct uprobes *u, uint32_t pid, uint64_t mapped_ns,
		   bool (*held)(void *ctx, uint32_t pid), void *ctx);
/* Library files of that kind ("CUDA", "TLS") hooked for some process so far. */
int uprobes_hooked_files(const struct uprobes *u, const char *what);
/* A process that exited: its probes are detached (a later process with its pid is a new one). */
void uprobes_forget(struct uprobes *u, uint32_t pid);
/* Probes to remove: each removal waits for the kernel (trace.h). */
int uprobes_count(const struct uprobes *u);
/* Removes every probe, one after another while stop(ctx) says no (stop NULL: all of them):
 * true when all are gone; false when it stopped, the rest still attached (for release.h). */
bool uprobes_detach(struct uprobes *u, bool (*stop)(void *ctx), void *ctx);

#endif
