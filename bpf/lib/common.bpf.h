/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * What every part of the kernel side shares: limits, the settings user space writes before
 * load, the map of traced processes, the counters, the ring buffer and the one way records go
 * into it (emit: submitted, or counted lost with their payload).
 * Part of tokenscope.bpf.c, which includes the parts in order; not a header to include alone.
 */
#ifndef TS_BPF_COMMON_H
#define TS_BPF_COMMON_H

#define EPIPE 32
#define ECONNRESET 104
#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define SOCK_STREAM 1
#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10

#define MAX_TRACED_PROCS 16384
#define MAX_CONNS 65536
/*
 * Loop bound: one iteration per piece copied, and one more where a chunk boundary falls inside a
 * piece (at most TS_CAPTURE_MAX / TS_CHUNK_BYTES), an empty iovec takes one, the last flush one.
 * bpf_loop checks its callback once, whatever the bound, so the bound costs nothing to load.
 */
#define COPY_LOOPS (2 * (TS_CAPTURE_MAX / TS_CHUNK_BYTES) + TS_IOV_MAX + 4)

/* Set by user space between open and load. */
const volatile __u32 capture_bytes = TS_CAPTURE_DEFAULT;

/*
 * What this kernel has past Linux 5.10 (user/loader/features.h), set by user space before load.
 * Code for a feature the kernel lacks sits behind a switch that is false there: the verifier
 * follows only the branch the constant takes and never sees the other, so one object loads on
 * every kernel.
 */
const volatile bool has_task_storage = true; /* 5.11: per-thread state in the task */
const volatile bool has_task_btf = true;     /* 5.11: bpf_get_current_task_btf */
const volatile bool has_atomics = true;	     /* 5.12: atomic or, and, cmpxchg, fetch */
const volatile bool has_loop = true;	     /* 5.17: bpf_loop */
const volatile bool has_rx_ready = true;     /* 6.3: the sk_data_ready tracepoint */

/*
 * Kernels before 5.13 refuse, anywhere in a program, reached or not (a pass over every
 * instruction before the verifier follows branches), an atomic instruction other than add (5.12)
 * and a function's address as a value (5.13: bpf_loop's callback). For them the loader loads the
 * same source built with TS_LEGACY (the Makefile's legacy object), where these are false at
 * compile time and no such instruction is made.
 */
#ifdef TS_LEGACY
#define atomics_ok() false
#define loop_ok() false
#else
#define atomics_ok() has_atomics
#define loop_ok() has_loop
#endif
/* A record per CUDA launch and copy, besides the counts (--kernels). */
const volatile bool emit_gpu_calls = false;
/* Wake the consumer only when this much is waiting (an eighth of the ring, set by user space);
 * it also drains on a short timer. */
const volatile __u64 wakeup_bytes = 256 * 1024;

__u64 next_conn_id = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TRACED_PROCS);
	__type(key, __u32);
	__type(value, __u8);
} traced SEC(".maps");

/*
 * The same set as a bit per tgid, the test every socket syscall of every process on the machine
 * makes (and every probe: is_traced): an array load (the verifier inlines an array lookup) instead
 * of a hash lookup. A bit is set after its map entry is made and cleared before the entry goes
 * (user space: kernel_set_traced, through a one-page mapping of the word's page; here: a traced
 * process's fork, the leader's exit), so a set bit stands for an entry. Mappable, so that user
 * space sets a bit atomically against the kernel's updates of the same word; not global data, which
 * user space would keep mapped whole (512 KiB of its RSS). A tgid past the bitmap (the kernel's pid
 * limit is 2^22, so none) falls to the map.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, TS_TRACED_BITS_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} traced_bits SEC(".maps");

/* Without atomics (before Linux 5.12) the kernel cannot set a bit of a word others set too: the
 * bitmap is not kept, and the map is asked. */
static __always_inline bool is_traced(__u32 tgid)
{
	__u32 w = tgid / 64;
	__u64 *bits = atomics_ok() ? bpf_map_lookup_elem(&traced_bits, &w) : NULL;

	if (!bits)
		return bpf_map_lookup_elem(&traced, &tgid);
	return *bits & (1ull << (tgid % 64));
}

static __always_inline void traced_bit(__u32 tgid, bool on)
{
	__u32 w = tgid / 64;
	__u64 *bits;

	if (!atomics_ok())
		return;
	bits = bpf_map_lookup_elem(&traced_bits, &w);
	if (!bits)
		return;
	if (on)
		__sync_fetch_and_or(bits, 1ull << (tgid % 64));
	else
		__sync_fetch_and_and(bits, ~(1ull << (tgid % 64)));
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TS_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Sized by user space before load (--ring-buffer-mb). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, TS_RING_DEFAULT_MB * 1024 * 1024);
} events SEC(".maps");

static __always_inline void stat_add(__u32 which, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);

	if (v)
		*v += n;
}

/*
 * How full the ring is, asked at a record's submission: a read of the reader's position, a line
 * the reader's CPU writes, so a cache miss most times. Asked for every record of RB_CHECK_BYTES or
 * more and every RB_CHECK_EVERY records a CPU submits otherwise: between two asks a CPU adds at
 * most RB_CHECK_EVERY small records (16 KiB), little against the eighth of the ring that wakes the
 * reader early.
 */
#define RB_CHECK_BYTES 1024
#define RB_CHECK_EVERY 16

static __always_inline __u64 rb_flags(__u64 size, __u64 *events_here)
{
	if (size < RB_CHECK_BYTES && events_here && *events_here % RB_CHECK_EVERY)
		return BPF_RB_NO_WAKEUP;
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
									     : BPF_RB_NO_WAKEUP;
}

/*
 * The current thread's entry of a per-thread map (its zeroed entry made first with create):
 * the task's own storage where the kernel has it (Linux 5.11), which goes with the task; else a
 * hash keyed by the thread id, into which user space turned the map (kernel.c), emptied at the
 * thread's exit (proctree.bpf.h). A new entry starts as thread_zero, as long as any state.
 */
#define THREAD_STATE_MAX_BYTES 128
const volatile __u8 thread_zero[THREAD_STATE_MAX_BYTES] = {};

#define thread_state(map, create)                                                                 \
	({                                                                                        \
		void *v_;                                                                         \
		if (has_task_storage) {                                                           \
			v_ = bpf_task_storage_get(map, bpf_get_current_task_btf(), NULL,          \
						  (create) ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0); \
		} else {                                                                          \
			__u32 tid_ = (__u32)bpf_get_current_pid_tgid();                           \
			v_ = bpf_map_lookup_elem(map, &tid_);                                     \
			if (!v_ && (create) &&                                                    \
			    !bpf_map_update_elem(map, &tid_, (const void *)thread_zero,           \
						 BPF_NOEXIST))                                    \
				v_ = bpf_map_lookup_elem(map, &tid_);                             \
		}                                                                                 \
		v_;                                                                               \
	})

/* A number unique for the tracer's life: a shared counter, or (without atomics' fetch) the CPU's
 * own counter with the CPU in its top bits. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cpu_ids SEC(".maps");

static __always_inline __u64 next_id(__u64 *shared)
{
	__u32 zero = 0;
	__u64 *n;

	if (atomics_ok())
		return __sync_fetch_and_add(shared, 1) + 1;
	n = bpf_map_lookup_elem(&cpu_ids, &zero);
	if (!n)
		return 0;
	*n += 1;
	return ((__u64)bpf_get_smp_processor_id() + 1) << 40 | *n;
}

/*
 * Batches (events.h): each CPU's records gather in its own buffer and reach the ring as one
 * record. A ring reservation costs a lock taken with interrupts saved and the ring's shared
 * positions; a copy into the CPU's own buffer costs neither. busy keeps two users of one CPU's
 * buffer apart: a program preempted inside it (uprobes and, on recent kernels, the syscall
 * tracepoints run preemptible), or the flush user space runs on the CPU by interrupt. Whoever
 * finds it busy puts its record in the ring alone.
 */
struct batch {
	__u32 busy;
	__u32 used;	/* bytes of buf in use, the batch header's included */
	__u32 records;	/* records in buf */
	__u32 payload;	/* their payload bytes, for a lost count */
	__u8 buf[TS_BATCH_BYTES + TS_BATCH_RECORD_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct batch);
} batches SEC(".maps");

/* Per CPU, when the oldest record in its buffer was added (0: none): user space reads it, mapped,
 * at each drain, runs the flush only on CPUs whose records have waited long (a CPU that keeps
 * making records fills its buffer first), and hands over no record made after an unflushed
 * one's time. Written once per batch. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, TS_BATCH_CPUS);
	__type(key, __u32);
	__type(value, __u64);
} batch_pending SEC(".maps");

/* Set by user space after load, once it has run the flush on a CPU (Linux 5.10 runs a program on
 * a chosen CPU): before that, and where it cannot, every record goes to the ring alone. */
bool batch_on = false;

/* busy is only ever contended on its own CPU (the buffer is per CPU): program order is all its
 * release needs, kept by the compiler barrier. */
static __always_inline void batch_unbusy(struct batch *b)
{
	asm volatile("" ::: "memory");
	*(volatile __u32 *)&b->busy = 0;
}

/* Puts a CPU's batch in the ring and empties it; the caller holds busy. */
static __always_inline void batch_out(struct batch *b, __u32 cpu)
{
	struct ts_event_hdr *h = (void *)b->buf;
	__u64 used = b->used;
	__u64 *pending;

	if (used <= sizeof(*h))
		return;
	h->type = TS_EV_BATCH;
	h->size = used;
	h->pid = cpu;
	h->tid = b->records;
	/* Hide used's known range from clang so the bound stays for the verifier. */
	asm volatile("" : "+r"(used));
	if (used > sizeof(b->buf))
		used = sizeof(b->buf);
	if (bpf_ringbuf_output(&events, b->buf, used, rb_flags(used, NULL))) {
		stat_add(TS_STAT_LOST_EVENTS, b->records);
		stat_add(TS_STAT_LOST_BYTES, b->payload);
	} else {
		stat_add(TS_STAT_EVENTS, b->records);
	}
	b->used = sizeof(*h);
	b->records = 0;
	b->payload = 0;
	pending = bpf_map_lookup_elem(&batch_pending, &cpu);
	if (pending)
		*pending = 0;
}

/* The record added to this CPU's batch (false: it goes to the ring alone). */
static __always_inline bool batch_add(void *rec, __u64 size, __u64 payload)
{
#ifdef TS_LEGACY
	return false;
#else
	__u32 zero = 0, cpu;
	struct batch *b;
	__u64 off, n;
	__u64 *pending;

	if (!batch_on || size >= TS_BATCH_RECORD_MAX)
		return false;
	b = bpf_map_lookup_elem(&batches, &zero);
	if (!b || __sync_val_compare_and_swap(&b->busy, 0, 1) != 0)
		return false;
	cpu = bpf_get_smp_processor_id();
	off = b->used;
	if (off < sizeof(struct ts_event_hdr))
		off = sizeof(struct ts_event_hdr);
	if (off + size > TS_BATCH_BYTES) {
		batch_out(b, cpu);
		off = sizeof(struct ts_event_hdr);
	}
	n = size;
	/* Hide the known ranges from clang so the masks stay for the verifier. */
	asm volatile("" : "+r"(off), "+r"(n));
	off &= TS_BATCH_BYTES - 1;
	n &= TS_BATCH_RECORD_MAX - 1;
	if (bpf_probe_read_kernel(&b->buf[off], n, rec)) {
		batch_unbusy(b);
		return false;
	}
	if (b->records == 0) {
		pending = bpf_map_lookup_elem(&batch_pending, &cpu);
		if (pending)
			*pending = bpf_ktime_get_ns();
	}
	b->used = off + ((n + 7) & ~7ull);
	b->records += 1;
	b->payload += payload;
	batch_unbusy(b);
	return true;
#endif
}

/* The flush user space runs on a CPU at each drain (ts_batch_flush): 0 done, 1 busy (the CPU
 * was interrupted inside its batch: asked again). */
static __always_inline int batch_flush_here(void)
{
#ifdef TS_LEGACY
	return 0;
#else
	__u32 zero = 0;
	struct batch *b = bpf_map_lookup_elem(&batches, &zero);

	if (!b)
		return 0;
	if (__sync_val_compare_and_swap(&b->busy, 0, 1) != 0)
		return 1;
	batch_out(b, bpf_get_smp_processor_id());
	batch_unbusy(b);
	return 0;
#endif
}

/* A record the loader must act on at once (a library mapped): the reader is woken for it. */
static __always_inline void emit_now(void *rec, __u64 size)
{
	if (bpf_ringbuf_output(&events, rec, size, BPF_RB_FORCE_WAKEUP))
		stat_add(TS_STAT_LOST_EVENTS, 1);
}

/* Submit a record, or count it lost with its payload. */
static __always_inline void emit(void *rec, __u64 size, __u64 payload)
{
	__u32 k = TS_STAT_EVENTS;
	__u64 *n;

	if (batch_add(rec, size, payload))
		return;
	n = bpf_map_lookup_elem(&stats, &k);
	if (bpf_ringbuf_output(&events, rec, size, rb_flags(size, n))) {
		stat_add(TS_STAT_LOST_EVENTS, 1);
		stat_add(TS_STAT_LOST_BYTES, payload);
	} else if (n) {
		*n += 1;
	}
}

#endif
