/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * GPU steps from CUDA calls (uprobes) and device times from the CUPTI library (USDT).
 * Part of tokenscope.bpf.c, which includes the parts in order; not a header to include alone.
 */
#ifndef TS_BPF_CUDA_H
#define TS_BPF_CUDA_H

/*
 * GPU steps from CUDA calls. Uprobes on the CUDA runtime and driver (attached by user space for
 * each traced process alone, in each copy of the libraries it maps) count the work it issues;
 * the return of a host wait ends a step and sends one record. A launch costs a counter
 * increment, not a record.
 */
struct gpu_acc {
	__u64 start_ns; /* first CUDA call of the step being built; 0: none yet */
	__u32 launches, graph_launches, memcpys, memcpys_dtoh, waits;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TRACED_PROCS);
	__type(key, __u32);
	__type(value, struct gpu_acc);
} gpu_acc SEC(".maps");

/* The host wait a thread is in: nested waits (runtime calling driver) count once. */
struct gpu_wait {
	__u64 start_ns;
	__u32 depth;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct gpu_wait);
} gpu_wait SEC(".maps");

/* cudaMemcpyKind: cudaMemcpyDeviceToHost */
#define CUDA_MEMCPY_DTOH 2

static __always_inline struct gpu_acc *gpu_acc_of(__u32 tgid)
{
	struct gpu_acc *a = bpf_map_lookup_elem(&gpu_acc, &tgid);
	struct gpu_acc zero = {};

	if (a)
		return a;
	bpf_map_update_elem(&gpu_acc, &tgid, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&gpu_acc, &tgid);
}

static __always_inline int cuda_call(struct pt_regs *ctx, __u64 fn)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct gpu_acc *a;

	if (!is_traced(tgid))
		return 0;
	a = gpu_acc_of(tgid);
	if (!a)
		return 0;
	if (!a->start_ns)
		a->start_ns = bpf_ktime_get_ns();
	switch (fn) {
	case TS_CUDA_LAUNCH:
		__sync_fetch_and_add(&a->launches, 1);
		break;
	case TS_CUDA_GRAPH_LAUNCH:
		__sync_fetch_and_add(&a->graph_launches, 1);
		break;
	case TS_CUDA_MEMCPY:
		__sync_fetch_and_add(&a->memcpys, 1);
		if (PT_REGS_PARM4(ctx) == CUDA_MEMCPY_DTOH)
			__sync_fetch_and_add(&a->memcpys_dtoh, 1);
		break;
	case TS_CUDA_MEMCPY_DTOH:
		__sync_fetch_and_add(&a->memcpys, 1);
		__sync_fetch_and_add(&a->memcpys_dtoh, 1);
		break;
	}
	if (emit_gpu_calls) {
		struct ts_gpu_call_event ev = {};

		ev.hdr.type = TS_EV_GPU_CALL;
		ev.hdr.size = sizeof(ev);
		ev.hdr.pid = tgid;
		ev.hdr.tid = (__u32)bpf_get_current_pid_tgid();
		ev.ts_ns = bpf_ktime_get_ns();
		ev.fn = fn;
		ev.kind = fn == TS_CUDA_MEMCPY ? PT_REGS_PARM4(ctx) : 0;
		emit(&ev, sizeof(ev), 0);
	}
	return 0;
}

/* One program for every kind of call, told by the probe's cookie (Linux 5.15); before it, a
 * program per kind (user space attaches the one of each function's kind: kernel.c). */
SEC("uprobe")
int BPF_KPROBE(ts_cuda_call)
{
	return cuda_call(ctx, bpf_get_attach_cookie(ctx));
}

#define CUDA_CALL_OF(kind, name)             \
	SEC("uprobe")                        \
	int BPF_KPROBE(ts_cuda_call_##name)  \
	{                                    \
		return cuda_call(ctx, kind); \
	}
CUDA_CALL_OF(TS_CUDA_LAUNCH, launch)
CUDA_CALL_OF(TS_CUDA_GRAPH_LAUNCH, graph)
CUDA_CALL_OF(TS_CUDA_MEMCPY, memcpy)
CUDA_CALL_OF(TS_CUDA_MEMCPY_DTOH, dtoh)

SEC("uprobe")
int BPF_KPROBE(ts_cuda_sync)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct gpu_wait *w;

	if (!is_traced(tgid))
		return 0;
	w = thread_state(&gpu_wait, true);
	if (w && w->depth++ == 0)
		w->start_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(ts_cuda_sync_ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct ts_gpu_step_event ev = {};
	struct gpu_wait *w;
	struct gpu_acc *a;
	__u64 now;

	w = thread_state(&gpu_wait, false);
	if (!w || !w->depth || --w->depth)
		return 0;
	a = bpf_map_lookup_elem(&gpu_acc, &tgid);
	if (!a)
		return 0;
	if (!a->launches && !a->graph_launches && !a->memcpys) {
		/* A wait with no work since the last one: part of the next step. */
		a->waits++;
		return 0;
	}
	now = bpf_ktime_get_ns();
	ev.hdr.type = TS_EV_GPU_STEP;
	ev.hdr.size = sizeof(ev);
	ev.hdr.pid = tgid;
	ev.hdr.tid = (__u32)pid_tgid;
	ev.start_ns = a->start_ns;
	ev.wait_start_ns = w->start_ns;
	ev.end_ns = now;
	ev.launches = a->launches;
	ev.graph_launches = a->graph_launches;
	ev.memcpys = a->memcpys;
	ev.memcpys_dtoh = a->memcpys_dtoh;
	ev.waits = a->waits + 1;
	__builtin_memset(a, 0, sizeof(*a));
	emit(&ev, sizeof(ev), 0);
	return 0;
}

/*
 * Device times from the CUPTI injection library (cupti/): its USDT probes tokenscope:runs,
 * tokenscope:all and tokenscope:kernels (one, by --device-times and --kernels), attached by
 * user space to the library in each traced process that loaded it (attaching is what turns
 * its collection on: the kernel raises the probes' semaphores). Each call hands over up to
 * TS_RUNS_PER_PROBE runs already aggregated by the library; they are copied into one record.
 * A library of another ABI version (not this one's, not 1) gets a record with n = 0.
 */
SEC("usdt")
int BPF_USDT(ts_cupti_runs, int abi, void *runs, int n, void *stats)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct ts_dev_runs_event *ev;
	bool known = abi == TS_DEVTIME_ABI || abi == TS_DEVTIME_ABI_V1;

	if (!is_traced(tgid))
		return 0;
	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		stat_add(TS_STAT_LOST_EVENTS, 1);
		return 0;
	}
	ev->hdr.type = TS_EV_DEV_RUNS;
	ev->hdr.size = sizeof(*ev);
	ev->hdr.pid = tgid;
	ev->hdr.tid = (__u32)pid_tgid;
	ev->abi = abi;
	ev->n = known && n > 0 ? (n < TS_RUNS_PER_PROBE ? n : TS_RUNS_PER_PROBE) : 0;
	/* Every byte of the reserved record is written: a failed read fills its destination
	 * with zeroes, which is also how the record of an unknown version is cleared (a read
	 * from address 0). The library's runs array always holds TS_RUNS_PER_PROBE entries. */
	if (abi == TS_DEVTIME_ABI_V1) {
		/* A version 1 library's counters are shorter: the rest reads as 0. */
		__builtin_memset((char *)&ev->stats + TS_DEVTIME_STATS_V1_BYTES, 0,
				 sizeof(ev->stats) - TS_DEVTIME_STATS_V1_BYTES);
		if (bpf_probe_read_user(&ev->stats, TS_DEVTIME_STATS_V1_BYTES, stats))
			stat_add(TS_STAT_COPY_FAILED, 1);
	} else if (bpf_probe_read_user(&ev->stats, sizeof(ev->stats), known ? stats : NULL) &&
		   known) {
		stat_add(TS_STAT_COPY_FAILED, 1);
	}
	if (bpf_probe_read_user(ev->runs, sizeof(ev->runs), known ? runs : NULL) && known) {
		stat_add(TS_STAT_COPY_FAILED, 1);
		ev->n = 0;
	}
	/* A large record (rb_flags asks how full the ring is for every one). */
	bpf_ringbuf_submit(ev, rb_flags(sizeof(*ev), NULL));
	stat_add(TS_STAT_EVENTS, 1);
	return 0;
}

#endif
