/* SPDX-License-Identifier: MIT */
/*
 * The loader's kernel side: the only code that touches the BPF skeleton (tokenscope.skel.h)
 * and the maps and programs in it. It opens the object and sets what the programs read as
 * constants (capture bytes, GPU call records, traffic discovery, the tracer's own tgid, the
 * ring buffer's size and wake-up bytes), loads and attaches it, reads the per-CPU counters
 * (map `stats`), forgets an exited process's connections (map `conns`), adds a process to
 * map `traced`, drains map `traffic_seen` for --all, maps and drains the ring buffer (map
 * `events`) into a record callback, and attaches the CUDA uprobes and the CUPTI library's
 * USDT probes for one process at a time.
 *
 * trace.c and uprobes.c decide what to trace and say what went wrong (privs.c, where a
 * permission was missing); they see no skeleton and no map. Functions that can fail return 0
 * or a negative errno (the kernel's or libbpf's, as it was), and print nothing themselves.
 */
#ifndef TS_KERNEL_H
#define TS_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loader/features.h"

struct kernel;
struct bpf_link;
struct tokenscope_bpf;
struct ts_traffic_seen;

/* What the BPF programs read as constants, set before they are loaded. */
struct kernel_config {
	uint32_t capture_bytes;	  /* payload bytes copied per syscall */
	bool gpu_calls;		  /* a record per CUDA launch and copy (--kernels) */
	bool discover_traffic;	  /* --all: look at untraced processes' writes (map traffic_seen) */
	uint32_t self_tgid;	  /* the tracer's own process, never traced */
	uint32_t ring_mb;	  /* ring buffer size in MiB, a power of two */
	struct features features; /* what this kernel has (features.h) */
};

/* Whether the syscall programs are on the syscalls' own functions (fentry/fexit) rather than the
 * raw syscall tracepoints, once loaded; else why not (a negative errno). */
struct kernel;
bool kernel_syscall_fentry(const struct kernel *k, int *why_not);

/* libbpf's messages: warnings and information to stderr when verbose, none otherwise. */
void kernel_log_verbose(bool verbose);
/* The possible CPUs (the per-CPU maps' width), or a negative errno. */
int kernel_ncpus(void);

/* Opens the BPF object built for this kernel's features (f: the legacy object where atomics are
 * missing): *kp is the new kernel side, NULL on failure. */
int kernel_open(struct kernel **kp, const struct features *f);
/* Adapts an opened skeleton to what this kernel has (features.h): the programs' switches, the
 * per-thread maps, which programs load. kernel_configure does it; the BPF tests, which open and
 * load their own skeleton, call it between the two. */
int kernel_adapt(struct tokenscope_bpf *skel, const struct features *f);
/* For the BPF tests: the skeleton opened and adapted to this kernel (NULL with errno set), and
 * the same loaded. */
struct tokenscope_bpf *kernel_skel_open(void);
/* The legacy object's bytes (kernel_legacy.c), which stand in for the default one's on kernels
 * without atomics (features.h). */
const void *kernel_legacy_elf(size_t *size);
struct tokenscope_bpf *kernel_skel_open_and_load(void);
/* Sets the programs' constants and sizes the ring buffer (its failure is returned). */
int kernel_configure(struct kernel *k, const struct kernel_config *c);
/* Loads the programs and maps into the kernel (-EPERM/-EACCES: not allowed to). */
int kernel_load(struct kernel *k);
/* Attaches the syscall, fork and exit tracepoints' programs. */
int kernel_attach(struct kernel *k);
/* 0 when the kernel tells of executable mappings of traced processes (TS_EV_PROC_MAP), or
 * why not (the mmap tracepoints need tracefs). */
int kernel_exec_map_err(const struct kernel *k);
/* Frees what is left (the ring buffer too); NULL is nothing. */
void kernel_destroy(struct kernel *k);
/*
 * The BPF tests (tests/bpf/) open and load the skeleton themselves and drive uprobes.c over it: a
 * kernel side over their skeleton, which kernel_destroy leaves to them to destroy.
 */
int kernel_borrow(struct kernel **kp, struct tokenscope_bpf *skel);

/* Counter stat (enum ts_stat) summed over the CPUs into *sum. */
int kernel_read_stat(struct kernel *k, unsigned int stat, uint64_t *sum);
/* A process exited: its entries in map `conns` go (the kernel never saw their close()). */
void kernel_forget_conns(struct kernel *k, uint32_t pid);
/* Adds pid to map `traced`: its syscalls, forks and exit are traced from now on. */
int kernel_trace_pid(struct kernel *k, uint32_t pid);
/* The same on a skeleton (the tests' own), and its removal (on == false). */
int kernel_set_traced(struct tokenscope_bpf *skel, uint32_t pid, bool on);

/*
 * --all: empties map `traffic_seen` (the processes seen writing streamed completions), taking
 * the pids there now, each entry in turn, and calls fn for each one that is neither the tracer
 * nor traced by then (fn may trace processes: later entries see it). Returns the sum of fn's
 * returns.
 */
typedef int (*kernel_traffic_fn)(void *ctx, uint32_t pid, const struct ts_traffic_seen *v);
int kernel_traffic_take(struct kernel *k, kernel_traffic_fn fn, void *ctx);

/*
 * Processes held at a library mapping (user/loader/hold.c): the programs stop one there (map
 * `held`) only while holding is on. kernel_held_take calls fn for each process in the map, then
 * removes it (after fn: a mapping the process makes meanwhile is not held twice); its _fd form
 * works on the map's descriptor alone (the watchdog process, which keeps nothing else).
 */
typedef void (*kernel_held_fn)(void *ctx, uint32_t pid, uint64_t stopped_ns);
void kernel_hold_set(struct kernel *k, bool on);
int kernel_held_fd(const struct kernel *k);
int kernel_held_take(struct kernel *k, kernel_held_fn fn, void *ctx);
int kernel_held_take_fd(int fd, kernel_held_fn fn, void *ctx);
/* The same without removing anything. */
int kernel_held_walk_fd(int fd, kernel_held_fn fn, void *ctx);
bool kernel_held_has(struct kernel *k, uint32_t pid);

/*
 * The ring buffer of map `events`, each record handed to fn (which returns 0). Where the kernel
 * batches records per CPU (events.h: TS_EV_BATCH; Linux 5.10 and the default object), they are
 * taken apart and handed over in time order (reorder.h), a drain's newest records at the next.
 */
typedef int (*kernel_record_fn)(void *ctx, void *data, size_t size);
int kernel_ring_open(struct kernel *k, kernel_record_fn fn, void *ctx);
/* Waits up to timeout_ms for records and takes them in (handed over where nothing is batched):
 * how many ring records, or a negative errno (-EINTR for a signal). */
int kernel_ring_poll(struct kernel *k, int timeout_ms);
/* A drain: every CPU's batch into the ring, the ring read, and every record made up to the
 * returned clock reading (CLOCK_MONOTONIC ns) handed over. */
uint64_t kernel_ring_consume(struct kernel *k);
/* The last drain: everything there, whatever its time. */
void kernel_ring_finish(struct kernel *k);
/* Records that arrived after later ones were handed over, the most one was late by (ns), and
 * flushes that found their CPU busy at every try. */
/* Whether the loaded programs can batch here (the default object, and a kernel that runs a
 * program on a chosen CPU): what kernel_ring_open will do. */
bool kernel_batches_possible(struct kernel *k);
uint64_t kernel_ring_late(const struct kernel *k, uint64_t *max_ns, uint64_t *busy);
/* Unmaps the ring buffer (none open, or k NULL: nothing). */
void kernel_ring_close(struct kernel *k);
/* The ring buffer's size and the most bytes that waited in it at a hand-over so far (0 where
 * its positions could not be mapped). */
void kernel_ring_fill(const struct kernel *k, uint64_t *bytes, uint64_t *peak);
/* Each loaded program's name and counters (sink.h: self_prog), at most max: how many. */
struct self_prog;
int kernel_prog_stats(struct kernel *k, struct self_prog *out, uint32_t max);

/* The uprobe programs: a CUDA host wait's entry and return, any other CUDA call (launch,
 * copy); a TLS library read or write's entry and return. */
enum kernel_probe {
	KERNEL_PROBE_NONE,
	KERNEL_CUDA_SYNC,
	KERNEL_CUDA_SYNC_RET,
	KERNEL_CUDA_CALL,
	KERNEL_TLS_CALL,
	KERNEL_TLS_RET,
	KERNEL_GO_TLS_CALL, /* Go's crypto/tls: the entry */
	KERNEL_GO_TLS_RET,  /* ... and each RET instruction (an entry probe there, off given) */
};

/*
 * Attaches a uprobe program for pid alone at offset off of the file at path, or (func, with off
 * 0) wherever libbpf finds that function by name; the program reads cookie (enum ts_cuda_fn,
 * enum ts_tls_fn). *link is the attachment on success.
 */
int kernel_attach_uprobe(struct kernel *k, enum kernel_probe probe, int pid, const char *path,
			 uint64_t off, const char *func, uint64_t cookie, struct bpf_link **link);
/* Whether the probe is at the function's return (a uretprobe). */
bool kernel_probe_is_ret(enum kernel_probe probe);
/* Attaches the probe's program, reading cookie, to the perf event fd (a tracefs uprobe event
 * bound to this process: tracefs.h). */
int kernel_attach_perf_event(struct kernel *k, enum kernel_probe probe, int fd, uint64_t cookie,
			     struct bpf_link **link);
/* Attaches the device-time program to the USDT probe TS_DEVTIME_PROVIDER:name of the library at
 * path, for pid alone. */
int kernel_attach_cupti(struct kernel *k, int pid, const char *path, const char *name,
			struct bpf_link **link);
/* Detaches one attachment (NULL: nothing). */
void kernel_link_destroy(struct bpf_link *link);

#endif
