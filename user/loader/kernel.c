// SPDX-License-Identifier: MIT
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "events.h"
#include "lib/clock.h"
#include "lib/grow.h"
#include "loader/kernel.h"
#include "loader/reorder.h"
#include "pipeline/self_cost.h"
#include "tokenscope.skel.h"
#include "traffic.h"

/* The most a spool keeps allocated once handed over. */
#define SPOOL_KEEP_BYTES (4u << 20)

/* Records copied one after another (each size-prefixed, at 8-byte boundaries), handed over
 * later in that order. */
struct spool {
	unsigned char *buf;
	size_t used, cap;
};

static int spool_put(void *ctx, void *data, size_t size)
{
	struct spool *sp = ctx;
	size_t room = sizeof(uint64_t) + ((size + 7) & ~(size_t)7);
	unsigned char *b = sp->buf;

	if (sp->used + room > sp->cap && !(b = grow(sp->buf, &sp->cap, sp->used + room, 1, 4096)))
		return -ENOMEM;
	sp->buf = b;
	*(uint64_t *)(sp->buf + sp->used) = size;
	if (size)
		memcpy(sp->buf + sp->used + sizeof(uint64_t), data, size);
	sp->used += room;
	return 0;
}

static void spool_hand(struct spool *sp, int (*fn)(void *, void *, size_t), void *ctx)
{
	for (size_t off = 0; off < sp->used;) {
		size_t size = *(uint64_t *)(sp->buf + off);

		fn(ctx, sp->buf + off + sizeof(uint64_t), size);
		off += sizeof(uint64_t) + ((size + 7) & ~(size_t)7);
	}
	sp->used = 0;
	/* After a burst: memory back, but for what a drain usually holds. */
	if (sp->cap > SPOOL_KEEP_BYTES) {
		free(sp->buf);
		sp->buf = NULL;
		sp->cap = 0;
	}
}

struct kernel {
	struct tokenscope_bpf *skel;
	struct ring_buffer *rb;
	/* The ring's two positions, mapped read-only, for how much waits at a drain (its peak). */
	const volatile unsigned long *rb_cons, *rb_prod;
	uint64_t rb_bytes, rb_peak;
	/* Batches (events.h): on where the kernel runs the flush on a chosen CPU. Records then
	 * pass through ro on their way to fn, put back in time order; pending is map
	 * batch_pending, mapped read-only. */
	kernel_record_fn fn;
	void *fn_ctx;
	struct reorder *ro;
	const volatile uint64_t *pending;
	size_t pending_bytes;
	uint64_t flush_busy; /* flushes that found a CPU busy at every try */
	/*
	 * With batches a thread of its own drains the ring into ro as soon as the kernel wakes
	 * it, while the pipeline works through the last drain's records: the ring waits only for
	 * a copy, not for the pipeline. mu guards ro, the urgent records (a library mapped, for
	 * the loader now) and the ring's reading; wake_fd tells the loop that urgent records or
	 * many held ones wait.
	 */
	pthread_t drainer;
	bool drainer_on;
	volatile bool drainer_stop;
	pthread_mutex_t mu;
	int wake_fd, stop_fd;
	struct spool urgent;
	struct reorder_out out;
	uint32_t self_tgid;
	bool legacy; /* the legacy object: no batches */
	struct kernel_config cfg; /* as configured (kernel_load may turn fentry off) */
	int ncpus;
	bool borrowed;	  /* the skeleton is the caller's (kernel_borrow) */
	bool cookies;	  /* uprobes tell the kind of call by cookie (else a program per kind) */
	int exec_map_err; /* why ts_exec_map is not attached (0: it is) */
};

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, args);
}

static int libbpf_print_quiet(enum libbpf_print_level level, const char *fmt, va_list args)
{
	(void)level, (void)fmt, (void)args;
	return 0;
}

void kernel_log_verbose(bool verbose)
{
	libbpf_set_print(verbose ? libbpf_print : libbpf_print_quiet);
}

int kernel_ncpus(void)
{
	return libbpf_num_possible_cpus();
}

/* The skeleton over the default object, or over the legacy one's bytes (kernel_legacy.c): as the
 * generated tokenscope_bpf__open does, with the other bytes. */
static struct tokenscope_bpf *skel_open(bool legacy)
{
	struct tokenscope_bpf *obj;
	int err;

	if (!legacy)
		return tokenscope_bpf__open();
	obj = calloc(1, sizeof(*obj));
	if (!obj) {
		errno = ENOMEM;
		return NULL;
	}
	err = tokenscope_bpf__create_skeleton(obj);
	if (!err) {
		obj->skeleton->data = (void *)kernel_legacy_elf(&obj->skeleton->data_sz);
		err = bpf_object__open_skeleton(obj->skeleton, NULL);
	}
	if (err) {
		tokenscope_bpf__destroy(obj);
		errno = -err;
		return NULL;
	}
	return obj;
}

int kernel_open(struct kernel **kp, const struct features *f)
{
	struct kernel *k = calloc(1, sizeof(*k));
	int err;

	*kp = NULL;
	if (!k)
		return -ENOMEM;
	k->ncpus = libbpf_num_possible_cpus();
	if (k->ncpus <= 0) {
		err = k->ncpus ? k->ncpus : -EINVAL;
		free(k);
		return err;
	}
	k->legacy = features_legacy(f);
	k->skel = skel_open(k->legacy);
	if (!k->skel) {
		err = -errno;
		free(k);
		return err;
	}
	*kp = k;
	return 0;
}

int kernel_borrow(struct kernel **kp, struct tokenscope_bpf *skel)
{
	struct kernel *k = calloc(1, sizeof(*k));
	struct features f;

	*kp = NULL;
	if (!k)
		return -ENOMEM;
	k->ncpus = libbpf_num_possible_cpus();
	if (k->ncpus <= 0) {
		int err = k->ncpus ? k->ncpus : -EINVAL;

		free(k);
		return err;
	}
	k->skel = skel;
	k->borrowed = true;
	/* The caller reads the ring itself: its records come one by one. */
	k->legacy = true;
	/* The caller adapted its skeleton to this kernel (kernel_adapt): the same probe tells
	 * how its uprobe programs take the kind of a call. */
	features_probe(&f);
	k->cookies = f.cookie;
	*kp = k;
	return 0;
}

/* One of the syscall programs on a syscall's own function (tokenscope.bpf.c: SYSCALL_HOOKS). */
static bool is_fentry_prog(const struct bpf_program *p)
{
	const char *n = bpf_program__name(p);

	return !strncmp(n, "ts_fentry_", 10) || !strncmp(n, "ts_fexit_", 9);
}

/* Threads a per-thread hash holds at most, where task storage is missing (features.h):
 * preallocated, about 2.5 MiB for the three maps. */
#define THREAD_MAP_ENTRIES 16384

/* What this kernel lacks: the programs' switches, the per-thread maps made hashes, and which
 * programs load (features.h). Between open and load. */
int kernel_adapt(struct tokenscope_bpf *s, const struct features *f)
{
	struct bpf_map *per_thread[] = { s->maps.stash, s->maps.gpu_wait, s->maps.exec_mapping };
	struct bpf_program *by_cookie[] = { s->progs.ts_cuda_call, s->progs.ts_tls_enter,
					    s->progs.ts_go_tls_enter };
	struct bpf_program *by_kind[] = {
		s->progs.ts_cuda_call_launch,	 s->progs.ts_cuda_call_graph,
		s->progs.ts_cuda_call_memcpy,	 s->progs.ts_cuda_call_dtoh,
		s->progs.ts_tls_enter_read,	 s->progs.ts_tls_enter_read_ex,
		s->progs.ts_tls_enter_write,	 s->progs.ts_tls_enter_write_ex,
		s->progs.ts_tls_enter_handshake, s->progs.ts_go_tls_enter_read,
		s->progs.ts_go_tls_enter_write,	 s->progs.ts_go_tls_enter_close,
	};
	int err = 0;

	s->rodata->has_task_storage = f->task_storage;
	s->rodata->has_task_btf = f->task_btf;
	s->rodata->has_atomics = f->atomics;
	s->rodata->has_loop = f->loop;
	s->rodata->has_rx_ready = f->rx_ready;
	for (size_t i = 0; !f->task_storage && i < sizeof(per_thread) / sizeof(per_thread[0]);
	     i++) {
		/* Preallocated: a tracing program may not allocate map entries before 5.11's
		 * BPF memory allocator (the kernel warns, or refuses under PREEMPT_RT). */
		err = bpf_map__set_type(per_thread[i], BPF_MAP_TYPE_HASH) ?:
			      bpf_map__set_map_flags(per_thread[i], 0) ?:
			      bpf_map__set_max_entries(per_thread[i], THREAD_MAP_ENTRIES);
		if (err)
			return err;
	}
	err = bpf_program__set_autoload(s->progs.ts_thread_exit, !f->task_storage)
		  ?: bpf_program__set_autoload(s->progs.ts_rx_ready, f->rx_ready)
		  ?: bpf_program__set_autoload(s->progs.ts_sys_enter, !f->fentry)
		  ?: bpf_program__set_autoload(s->progs.ts_sys_exit, !f->fentry);
	{
		struct bpf_program *p;

		bpf_object__for_each_program(p, s->obj)
			if (!err && is_fentry_prog(p))
				err = bpf_program__set_autoload(p, f->fentry);
	}
	for (size_t i = 0; !err && i < sizeof(by_cookie) / sizeof(by_cookie[0]); i++)
		err = bpf_program__set_autoload(by_cookie[i], f->cookie);
	for (size_t i = 0; !err && i < sizeof(by_kind) / sizeof(by_kind[0]); i++)
		err = bpf_program__set_autoload(by_kind[i], !f->cookie);
	return err;
}

struct tokenscope_bpf *kernel_skel_open(void)
{
	struct tokenscope_bpf *s;
	struct features f;
	int err;

	features_probe(&f);
	s = skel_open(features_legacy(&f));
	if (!s)
		return NULL;
	err = kernel_adapt(s, &f);
	if (err) {
		tokenscope_bpf__destroy(s);
		errno = -err;
		return NULL;
	}
	return s;
}

struct tokenscope_bpf *kernel_skel_open_and_load(void)
{
	struct tokenscope_bpf *s = kernel_skel_open();
	int err;

	if (!s)
		return NULL;
	err = tokenscope_bpf__load(s);
	if (err) {
		tokenscope_bpf__destroy(s);
		errno = -err;
		return NULL;
	}
	return s;
}

int kernel_configure(struct kernel *k, const struct kernel_config *c)
{
	int err;

	if (c != &k->cfg)
		k->cfg = *c;
	err = kernel_adapt(k->skel, &c->features);

	if (err)
		return err;
	k->cookies = c->features.cookie;
	k->skel->rodata->capture_bytes = c->capture_bytes;
	k->skel->rodata->emit_gpu_calls = c->gpu_calls;
	k->skel->rodata->discover_traffic = c->discover_traffic;
	k->skel->rodata->self_tgid = c->self_tgid;
	k->skel->rodata->wakeup_bytes = c->ring_mb * 1024ull * 1024ull / 8;
	k->self_tgid = c->self_tgid;
	return bpf_map__set_max_entries(k->skel->maps.events, c->ring_mb * 1024u * 1024u);
}

int kernel_load(struct kernel *k)
{
	int err = tokenscope_bpf__load(k->skel);

	if (!err || !k->cfg.features.fentry)
		return err;
	/* The programs on the syscalls' functions refused where the probe's were not: the raw
	 * syscall tracepoints instead, in a fresh object (one is loaded once). */
	tokenscope_bpf__destroy(k->skel);
	k->skel = skel_open(k->legacy);
	if (!k->skel)
		return -errno;
	k->cfg.features.fentry = false;
	k->cfg.features.fentry_err = err;
	err = kernel_configure(k, &k->cfg);
	return err ? err : tokenscope_bpf__load(k->skel);
}

bool kernel_syscall_fentry(const struct kernel *k, int *why_not)
{
	*why_not = k->cfg.features.fentry_err;
	return k->cfg.features.fentry;
}

int kernel_attach(struct kernel *k)
{
	int err = tokenscope_bpf__attach(k->skel);

	if (err)
		return err;
	/* The mapping notices attach to tracefs's mmap tracepoints: where tracefs is not
	 * usable the loader's scan finds new libraries alone. */
	k->skel->links.ts_mmap_enter = bpf_program__attach_tracepoint(k->skel->progs.ts_mmap_enter,
								      "syscalls", "sys_enter_mmap");
	if (!k->skel->links.ts_mmap_enter) {
		k->exec_map_err = -errno;
		return 0;
	}
	k->skel->links.ts_mmap_exit = bpf_program__attach_tracepoint(k->skel->progs.ts_mmap_exit,
								     "syscalls", "sys_exit_mmap");
	if (!k->skel->links.ts_mmap_exit) {
		k->exec_map_err = -errno;
		bpf_link__destroy(k->skel->links.ts_mmap_enter);
		k->skel->links.ts_mmap_enter = NULL;
	}
	return 0;
}

int kernel_exec_map_err(const struct kernel *k)
{
	return k->exec_map_err;
}

void kernel_hold_set(struct kernel *k, bool on)
{
	k->skel->bss->hold_mappings = on;
}

int kernel_held_fd(const struct kernel *k)
{
	return bpf_map__fd(k->skel->maps.held);
}

/* Thin wrappers of the bpf syscall alone (no allocation): the watchdog calls this in a child
 * forked from a process with threads. */
int kernel_held_take_fd(int fd, kernel_held_fn fn, void *ctx)
{
	__u32 key, next;
	__u64 when;
	int n = 0;

	/* Each taken entry is removed: the first key again, until there is none. */
	while (bpf_map_get_next_key(fd, NULL, &next) == 0 && n < TS_HELD_MAX * 4) {
		key = next;
		if (bpf_map_lookup_elem(fd, &key, &when))
			when = 0;
		fn(ctx, key, when);
		bpf_map_delete_elem(fd, &key);
		n++;
	}
	return n;
}

int kernel_held_walk_fd(int fd, kernel_held_fn fn, void *ctx)
{
	__u32 key, next;
	__u64 when;
	void *prev = NULL;
	int n = 0;

	while (bpf_map_get_next_key(fd, prev, &next) == 0 && n < TS_HELD_MAX) {
		key = next;
		if (!bpf_map_lookup_elem(fd, &key, &when))
			fn(ctx, key, when);
		prev = &key;
		n++;
	}
	return n;
}

bool kernel_held_has(struct kernel *k, uint32_t pid)
{
	__u64 when;

	return !bpf_map_lookup_elem(kernel_held_fd(k), &pid, &when);
}

int kernel_held_take(struct kernel *k, kernel_held_fn fn, void *ctx)
{
	return kernel_held_take_fd(kernel_held_fd(k), fn, ctx);
}

void kernel_destroy(struct kernel *k)
{
	if (!k)
		return;
	kernel_ring_close(k);
	if (!k->borrowed)
		tokenscope_bpf__destroy(k->skel);
	free(k);
}

/* A per-CPU array lookup: a few microseconds. */
int kernel_read_stat(struct kernel *k, unsigned int stat, uint64_t *sum)
{
	__u64 vals[k->ncpus];
	__u32 key = stat;

	if (bpf_map_lookup_elem(bpf_map__fd(k->skel->maps.stats), &key, vals))
		return -errno;
	*sum = 0;
	for (int c = 0; c < k->ncpus; c++)
		*sum += vals[c];
	return 0;
}

/* Keys collected per pass over map `conns` before deleting them. */
#define FORGET_BATCH 256

void kernel_forget_conns(struct kernel *k, uint32_t pid)
{
	int fd = bpf_map__fd(k->skel->maps.conns);
	struct ts_conn_key key, dead[FORGET_BATCH];
	int n;

	do {
		void *prev = NULL;

		n = 0;
		while (n < FORGET_BATCH && bpf_map_get_next_key(fd, prev, &key) == 0) {
			if (key.pid == pid)
				dead[n++] = key;
			prev = &key;
		}
		for (int i = 0; i < n; i++)
			bpf_map_delete_elem(fd, &dead[i]);
	} while (n == FORGET_BATCH);
}

/*
 * Sets or clears pid's bit in map `traced_bits` through a mapping of the one page that holds its
 * word, atomically: the kernel sets and clears bits of the same word (forks, exits).
 */
static int traced_bit(struct tokenscope_bpf *skel, uint32_t pid, bool on)
{
	long page = sysconf(_SC_PAGESIZE);
	off_t at = (off_t)(pid / 64) * sizeof(__u64), base = at - at % page;
	__u64 bit = 1ull << (pid % 64);
	char *p;

	if (pid / 64 >= TS_TRACED_BITS_WORDS)
		return 0; /* past the bitmap: the kernel side looks such a tgid up in the map */
	p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED,
		 bpf_map__fd(skel->maps.traced_bits), base);
	if (p == MAP_FAILED)
		return -errno;
	if (on)
		__atomic_fetch_or((__u64 *)(p + (at - base)), bit, __ATOMIC_SEQ_CST);
	else
		__atomic_fetch_and((__u64 *)(p + (at - base)), ~bit, __ATOMIC_SEQ_CST);
	munmap(p, page);
	return 0;
}

int kernel_set_traced(struct tokenscope_bpf *skel, uint32_t pid, bool on)
{
	__u8 one = 1;
	int err;

	if (on) {
		if (bpf_map_update_elem(bpf_map__fd(skel->maps.traced), &pid, &one, BPF_ANY))
			return -errno;
		/* The bit is the kernel's first test: set after the map entry, so that a set bit
		 * finds it. */
		err = traced_bit(skel, pid, true);
		if (err)
			bpf_map_delete_elem(bpf_map__fd(skel->maps.traced), &pid);
		return err;
	}
	err = traced_bit(skel, pid, false);
	if (bpf_map_delete_elem(bpf_map__fd(skel->maps.traced), &pid) && errno != ENOENT && !err)
		err = -errno;
	return err;
}

int kernel_trace_pid(struct kernel *k, uint32_t pid)
{
	return kernel_set_traced(k->skel, pid, true);
}

int kernel_traffic_take(struct kernel *k, kernel_traffic_fn fn, void *ctx)
{
	int fd = bpf_map__fd(k->skel->maps.traffic_seen);
	int traced_fd = bpf_map__fd(k->skel->maps.traced);
	__u32 pids[TS_TRAFFIC_MAX], *prev = NULL;
	int n = 0, sum = 0;

	/* Keys first: deleting while walking would restart the walk. */
	while (n < TS_TRAFFIC_MAX && !bpf_map_get_next_key(fd, prev, &pids[n])) {
		prev = &pids[n];
		n++;
	}
	for (int i = 0; i < n; i++) {
		struct ts_traffic_seen v;
		__u8 one;

		if (bpf_map_lookup_and_delete_elem(fd, &pids[i], &v))
			continue;
		/* The kernel side leaves the tracer out already (self_tgid). */
		if (pids[i] == k->self_tgid || !bpf_map_lookup_elem(traced_fd, &pids[i], &one))
			continue;
		sum += fn(ctx, pids[i], &v);
	}
	return sum;
}

/* Held records past which the drainer stops reading the ring until the pipeline has caught
 * up: the ring then fills and the kernel counts what it cannot take. */
#define REORDER_HELD_MAX (64u << 20)
/* The drainer's nice value. */
#define DRAINER_NICE -10
/* Held records past which the drainer wakes the loop before its next tick. */
#define REORDER_WAKE_RECORDS 8192

/* The loop's wait ends (kernel_ring_poll): a full eventfd counter would only mean it is already
 * due to wake. */
static void wake_loop(struct kernel *k)
{
	uint64_t one = 1;

	(void)!write(k->wake_fd, &one, sizeof(one));
}

/* A record from the ring: to the reorder stage, or straight on. A library mapped is for the
 * loader alone and wanted at once (its process is held): never held back. With batches this
 * runs on the drainer's thread, under mu. */
static int ring_record(void *ctx, void *data, size_t size)
{
	struct kernel *k = ctx;
	const struct ts_event_hdr *h = data;

	if (!k->ro)
		return k->fn(k->fn_ctx, data, size);
	if (size >= sizeof(*h) && h->type == TS_EV_PROC_MAP) {
		/* Without memory for it, the next drain's look at the held processes finds it. */
		if (spool_put(&k->urgent, data, size) == 0)
			wake_loop(k);
		return 0;
	}
	/* Without the memory to hold it, it is handed over first at the next drain, out of time
	 * order. */
	if (reorder_add(k->ro, data, size))
		return spool_put(&k->urgent, data, size);
	return 0;
}

/* Runs the flush on one CPU: 0, 1 (the CPU was busy inside its batch) or a negative errno. */
static int flush_cpu(struct kernel *k, int cpu)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts, .flags = BPF_F_TEST_RUN_ON_CPU, .cpu = cpu);
	int err = bpf_prog_test_run_opts(bpf_program__fd(k->skel->progs.ts_batch_flush), &opts);

	return err ? -errno : (int)opts.retval;
}

/* Before records are handed over: how much waits now, the most since the last hand-over. */
static void ring_note_fill(struct kernel *k)
{
	uint64_t waiting;

	if (!k->rb_prod)
		return;
	waiting = __atomic_load_n(k->rb_prod, __ATOMIC_ACQUIRE) -
		  __atomic_load_n(k->rb_cons, __ATOMIC_ACQUIRE);
	if (waiting > k->rb_bytes)
		waiting = k->rb_bytes;
	if (waiting > __atomic_load_n(&k->rb_peak, __ATOMIC_RELAXED))
		__atomic_store_n(&k->rb_peak, waiting, __ATOMIC_RELAXED);
}

/* The drainer: reads the ring whenever the kernel wakes it (an eighth of the ring waiting) or
 * every tick, into ro. */
static void *drainer_main(void *arg)
{
	struct kernel *k = arg;
	struct epoll_event ev;

	/* Ahead of the busy threads of a loaded machine when the kernel wakes it: its work is a
	 * copy, a small share of a CPU at any rate, but a ring left waiting fills. Without
	 * CAP_SYS_NICE it keeps the process's priority. */
	(void)!setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), DRAINER_NICE);
	while (!k->drainer_stop) {
		size_t held;
		bool full;

		/* Woken by the kernel (an eighth of the ring waiting) or to stop: between bursts
		 * the loop's drains read the ring. */
		if (epoll_wait(ring_buffer__epoll_fd(k->rb), &ev, 1, -1) < 0 && errno != EINTR)
			break;
		if (k->drainer_stop)
			break;
		pthread_mutex_lock(&k->mu);
		full = reorder_held_bytes(k->ro) >= REORDER_HELD_MAX;
		if (!full) {
			ring_note_fill(k);
			ring_buffer__consume(k->rb);
		}
		held = reorder_held(k->ro);
		pthread_mutex_unlock(&k->mu);
		if (held >= REORDER_WAKE_RECORDS)
			wake_loop(k);
		/* The ring still holds records, so the wait above returns at once: a pause
		 * instead, until the loop has taken some. */
		if (full)
			usleep(1000);
	}
	return NULL;
}

bool kernel_batches_possible(struct kernel *k)
{
	return !k->legacy && flush_cpu(k, 0) >= 0;
}

/* Batches on where the flush runs on a chosen CPU (Linux 5.10) and batch_pending maps: else
 * every record goes to the ring alone, as before batches, and the loop reads the ring itself. */
static void batches_start(struct kernel *k)
{
	int fd = bpf_map__fd(k->skel->maps.batch_pending);
	size_t bytes = (size_t)TS_BATCH_CPUS * sizeof(uint64_t);
	void *p;

	if (!kernel_batches_possible(k))
		return;
	k->ro = reorder_new();
	k->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	k->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	p = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
	if (!k->ro || k->wake_fd < 0 || k->stop_fd < 0 || p == MAP_FAILED ||
	    epoll_ctl(ring_buffer__epoll_fd(k->rb), EPOLL_CTL_ADD, k->stop_fd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.u32 = UINT32_MAX }) ||
	    pthread_mutex_init(&k->mu, NULL))
		goto off;
	k->pending = p;
	k->pending_bytes = bytes;
	if (pthread_create(&k->drainer, NULL, drainer_main, k)) {
		pthread_mutex_destroy(&k->mu);
		goto off;
	}
	k->drainer_on = true;
	k->skel->bss->batch_on = true;
	return;
off:
	if (p != MAP_FAILED)
		munmap(p, bytes);
	k->pending = NULL;
	if (k->wake_fd >= 0)
		close(k->wake_fd);
	if (k->stop_fd >= 0)
		close(k->stop_fd);
	k->wake_fd = k->stop_fd = -1;
	reorder_free(k->ro);
	k->ro = NULL;
}

int kernel_ring_open(struct kernel *k, kernel_record_fn fn, void *ctx)
{
	int fd = bpf_map__fd(k->skel->maps.events);
	long page = sysconf(_SC_PAGESIZE);
	void *cons, *prod;

	k->fn = fn;
	k->fn_ctx = ctx;
	k->wake_fd = k->stop_fd = -1;
	k->rb = ring_buffer__new(fd, ring_record, k, NULL);
	if (!k->rb)
		return -errno;
	/* The consumer's page and the producer's, as libbpf maps them but read-only: without them
	 * the peak is not known (0), and tracing goes on. */
	k->rb_bytes = bpf_map__max_entries(k->skel->maps.events);
	cons = mmap(NULL, page, PROT_READ, MAP_SHARED, fd, 0);
	prod = cons == MAP_FAILED ? MAP_FAILED : mmap(NULL, page, PROT_READ, MAP_SHARED, fd, page);
	if (prod != MAP_FAILED) {
		k->rb_cons = cons;
		k->rb_prod = prod;
	} else if (cons != MAP_FAILED) {
		munmap(cons, page);
	}
	batches_start(k);
	return 0;
}

/*
 * Every CPU whose batch holds records older than age_ns puts it in the ring (an interrupt on
 * that CPU: dear on a VM, so not for a CPU that fills its batch by itself soon). A CPU
 * interrupted inside its batch is asked again a few times; one still busy keeps its records to
 * the next drain. Returns the time of the oldest record left in a batch (UINT64_MAX: none):
 * no record after it may be handed over yet.
 */
#define FLUSH_TRIES 4
/* A batch flushed by the loop once its oldest record is this old; younger ones wait for their
 * CPU to fill them or for the next drain. */
#define BATCH_FLUSH_AGE_NS 20000000ull

static uint64_t batches_flush(struct kernel *k, uint64_t now, uint64_t age_ns)
{
	int n = k->ncpus < TS_BATCH_CPUS ? k->ncpus : TS_BATCH_CPUS;
	uint64_t oldest = UINT64_MAX;

	for (int cpu = 0; cpu < n; cpu++) {
		uint64_t first = k->pending[cpu];
		int r = 1;

		if (!first)
			continue;
		if (first + age_ns > now) {
			if (first < oldest)
				oldest = first;
			continue;
		}
		for (int t = 0; t < FLUSH_TRIES && r == 1; t++)
			r = flush_cpu(k, cpu);
		if (r == 1) {
			k->flush_busy++;
			if (first < oldest)
				oldest = first;
		}
	}
	return oldest;
}

int kernel_ring_poll(struct kernel *k, int timeout_ms)
{
	struct epoll_event ev;
	int n;

	if (k->drainer_on) {
		/* The drainer reads the ring: the loop waits for its tick, or for the drainer. */
		struct pollfd p = { .fd = k->wake_fd, .events = POLLIN };
		uint64_t v;

		n = poll(&p, 1, timeout_ms);
		if (n < 0)
			return -errno;
		if (n > 0 && read(k->wake_fd, &v, sizeof(v)) < 0)
			return 0;
		return 0;
	}
	n = epoll_wait(ring_buffer__epoll_fd(k->rb), &ev, 1, timeout_ms);
	if (n < 0)
		return -errno;
	ring_note_fill(k);
	return ring_buffer__consume(k->rb);
}

/* Under mu: the ring read now, and the urgent records and every record up to upto taken; then,
 * outside it, handed over (the pipeline's work, while the drainer goes on reading the ring). */
static void take_upto(struct kernel *k, uint64_t upto)
{
	struct spool urgent;

	pthread_mutex_lock(&k->mu);
	ring_note_fill(k);
	ring_buffer__consume(k->rb);
	urgent = k->urgent;
	k->urgent = (struct spool){ 0 };
	reorder_take(k->ro, upto, &k->out);
	pthread_mutex_unlock(&k->mu);
	spool_hand(&urgent, k->fn, k->fn_ctx);
	free(urgent.buf);
	reorder_hand(&k->out, k->fn, k->fn_ctx);
}

uint64_t kernel_ring_consume(struct kernel *k)
{
	/* The clock before the drain: every record made before it is in the ring once the
	 * batches are flushed, but for one whose program is still running. */
	uint64_t now = mono_ns(), upto, oldest;

	if (!k->ro) {
		ring_note_fill(k);
		ring_buffer__consume(k->rb);
		return now;
	}
	oldest = batches_flush(k, now, BATCH_FLUSH_AGE_NS);
	/* A record's time is taken before it is added: the margin holds for the oldest left in
	 * a batch as for a program still running. */
	if (oldest < now)
		now = oldest;
	upto = now > REORDER_SETTLE_NS ? now - REORDER_SETTLE_NS : 0;
	take_upto(k, upto);
	return upto;
}

static void drainer_stop(struct kernel *k)
{
	uint64_t one = 1;

	if (!k->drainer_on)
		return;
	k->drainer_stop = true;
	if (write(k->stop_fd, &one, sizeof(one)) != sizeof(one))
		pthread_cancel(k->drainer);
	pthread_join(k->drainer, NULL);
	k->drainer_on = false;
}

void kernel_ring_finish(struct kernel *k)
{
	if (!k->ro) {
		ring_note_fill(k);
		ring_buffer__consume(k->rb);
		return;
	}
	batches_flush(k, UINT64_MAX, 0);
	drainer_stop(k);
	take_upto(k, UINT64_MAX);
}

uint64_t kernel_ring_late(const struct kernel *k, uint64_t *max_ns, uint64_t *busy)
{
	*busy = k->flush_busy;
	if (!k->ro) {
		*max_ns = 0;
		return 0;
	}
	return reorder_late(k->ro, max_ns);
}

void kernel_ring_fill(const struct kernel *k, uint64_t *bytes, uint64_t *peak)
{
	*bytes = k->rb_prod ? k->rb_bytes : 0;
	*peak = k->rb_prod ? __atomic_load_n(&k->rb_peak, __ATOMIC_RELAXED) : 0;
}

void kernel_ring_close(struct kernel *k)
{
	long page = sysconf(_SC_PAGESIZE);

	if (!k)
		return;
	drainer_stop(k);
	ring_buffer__free(k->rb);
	k->rb = NULL;
	if (k->ro) {
		pthread_mutex_destroy(&k->mu);
		close(k->wake_fd);
		close(k->stop_fd);
		k->wake_fd = k->stop_fd = -1;
		free(k->urgent.buf);
		k->urgent = (struct spool){ 0 };
		reorder_out_free(&k->out);
	}
	reorder_free(k->ro);
	k->ro = NULL;
	if (k->pending) {
		munmap((void *)k->pending, k->pending_bytes);
		k->pending = NULL;
	}
	if (k->rb_prod) {
		munmap((void *)k->rb_cons, page);
		munmap((void *)k->rb_prod, page);
		k->rb_cons = k->rb_prod = NULL;
	}
}

int kernel_prog_stats(struct kernel *k, struct self_prog *out, uint32_t max)
{
	struct bpf_program *prog;
	uint32_t n = 0;

	bpf_object__for_each_program(prog, k->skel->obj) {
		struct bpf_prog_info info = {};
		__u32 len = sizeof(info);
		int fd = bpf_program__fd(prog);
		const char *name = bpf_program__name(prog);

		if (fd < 0 || n == max || bpf_obj_get_info_by_fd(fd, &info, &len))
			continue;
		snprintf(out[n].name, sizeof(out[n].name), "%s", name);
		out[n].syscall = prog == k->skel->progs.ts_sys_enter ||
				 prog == k->skel->progs.ts_sys_exit || is_fentry_prog(prog);
		out[n].run_ns = info.run_time_ns;
		out[n].runs = info.run_cnt;
		n++;
	}
	return n;
}

/* Without cookies (before Linux 5.15): the program of each kind of call. */
static struct bpf_program *kind_prog(struct kernel *k, enum kernel_probe probe, uint64_t kind)
{
	struct tokenscope_bpf *s = k->skel;

	if (probe == KERNEL_CUDA_CALL)
		return kind == TS_CUDA_LAUNCH	      ? s->progs.ts_cuda_call_launch
		       : kind == TS_CUDA_GRAPH_LAUNCH ? s->progs.ts_cuda_call_graph
		       : kind == TS_CUDA_MEMCPY	      ? s->progs.ts_cuda_call_memcpy
		       : kind == TS_CUDA_MEMCPY_DTOH  ? s->progs.ts_cuda_call_dtoh
						      : NULL;
	if (probe == KERNEL_TLS_CALL)
		return kind == TS_TLS_READ	  ? s->progs.ts_tls_enter_read
		       : kind == TS_TLS_READ_EX	  ? s->progs.ts_tls_enter_read_ex
		       : kind == TS_TLS_WRITE	  ? s->progs.ts_tls_enter_write
		       : kind == TS_TLS_WRITE_EX  ? s->progs.ts_tls_enter_write_ex
		       : kind == TS_TLS_HANDSHAKE ? s->progs.ts_tls_enter_handshake
						  : NULL;
	if (probe == KERNEL_GO_TLS_CALL)
		return kind == TS_TLS_GO_READ	 ? s->progs.ts_go_tls_enter_read
		       : kind == TS_TLS_GO_WRITE ? s->progs.ts_go_tls_enter_write
		       : kind == TS_TLS_GO_CLOSE ? s->progs.ts_go_tls_enter_close
						 : NULL;
	return NULL;
}

/* The program of a probe, and the cookie it is attached with: 0 on a kernel without cookies,
 * which refuses any other value even for a program that does not read it (a return probe). */
static struct bpf_program *probe_prog(struct kernel *k, enum kernel_probe probe, uint64_t *cookie)
{
	struct tokenscope_bpf *s = k->skel;
	uint64_t kind = *cookie;

	if (!k->cookies) {
		*cookie = 0;
		if (probe == KERNEL_CUDA_CALL || probe == KERNEL_TLS_CALL ||
		    probe == KERNEL_GO_TLS_CALL)
			return kind_prog(k, probe, kind);
	}
	switch (probe) {
	case KERNEL_CUDA_SYNC:
		return s->progs.ts_cuda_sync;
	case KERNEL_CUDA_SYNC_RET:
		return s->progs.ts_cuda_sync_ret;
	case KERNEL_CUDA_CALL:
		return s->progs.ts_cuda_call;
	case KERNEL_TLS_CALL:
		return s->progs.ts_tls_enter;
	case KERNEL_TLS_RET:
		return s->progs.ts_tls_return;
	case KERNEL_GO_TLS_CALL:
		return s->progs.ts_go_tls_enter;
	case KERNEL_GO_TLS_RET:
		return s->progs.ts_go_tls_ret;
	default:
		return NULL;
	}
}

bool kernel_probe_is_ret(enum kernel_probe probe)
{
	return probe == KERNEL_CUDA_SYNC_RET || probe == KERNEL_TLS_RET;
}

int kernel_attach_uprobe(struct kernel *k, enum kernel_probe probe, int pid, const char *path,
			 uint64_t off, const char *func, uint64_t cookie, struct bpf_link **link)
{
	struct bpf_program *prog = probe_prog(k, probe, &cookie);
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = func, .bpf_cookie = cookie,
		    .retprobe = kernel_probe_is_ret(probe));

	if (!prog)
		return -EINVAL;
	*link = bpf_program__attach_uprobe_opts(prog, pid, path, off, &opts);
	return *link ? 0 : -errno;
}

int kernel_attach_perf_event(struct kernel *k, enum kernel_probe probe, int fd, uint64_t cookie,
			     struct bpf_link **link)
{
	struct bpf_program *prog = probe_prog(k, probe, &cookie);
	LIBBPF_OPTS(bpf_perf_event_opts, opts, .bpf_cookie = cookie);

	if (!prog)
		return -EINVAL;
	*link = bpf_program__attach_perf_event_opts(prog, fd, &opts);
	return *link ? 0 : -errno;
}

int kernel_attach_cupti(struct kernel *k, int pid, const char *path, const char *name,
			struct bpf_link **link)
{
	*link = bpf_program__attach_usdt(k->skel->progs.ts_cupti_runs, pid, path,
					 TS_DEVTIME_PROVIDER, name, NULL);
	return *link ? 0 : -errno;
}

void kernel_link_destroy(struct bpf_link *link)
{
	bpf_link__destroy(link);
}
