/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The process tree: a traced process's children are traced from their fork; an exit is
 * reported and forgotten.
 * Part of tokenscope.bpf.c, which includes the parts in order; not a header to include alone.
 */
#ifndef TS_BPF_PROCTREE_H
#define TS_BPF_PROCTREE_H

SEC("tp_btf/sched_process_fork")
int BPF_PROG(ts_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid;
	__u32 ctgid = child->tgid;
	__u8 one = 1;
	struct ts_proc_event pe = {};

	/* Threads share the tgid and are already covered. */
	if (ptgid == ctgid || !is_traced(ptgid))
		return 0;
	/* The bit only with the entry (a full table refuses it). */
	if (!bpf_map_update_elem(&traced, &ctgid, &one, BPF_ANY))
		traced_bit(ctgid, true);
	pe.hdr.type = TS_EV_PROC_FORK;
	pe.hdr.size = sizeof(pe);
	pe.hdr.pid = ctgid;
	pe.hdr.tid = child->pid;
	pe.ts_ns = bpf_ktime_get_ns();
	pe.ppid = ptgid;
	pe.ptid = parent->pid;
	BPF_CORE_READ_STR_INTO(&pe.comm, parent, comm);
	emit(&pe, sizeof(pe), 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(ts_exit, struct task_struct *task)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct ts_proc_event pe = {};

	/* Only the group leader's exit ends the process for us. */
	if ((__u32)pid_tgid != tgid || !is_traced(tgid))
		return 0;
	traced_bit(tgid, false);
	bpf_map_delete_elem(&traced, &tgid);
	pe.hdr.type = TS_EV_PROC_EXIT;
	pe.hdr.size = sizeof(pe);
	pe.hdr.pid = tgid;
	pe.hdr.tid = tgid;
	pe.ts_ns = bpf_ktime_get_ns();
	pe.ppid = BPF_CORE_READ(task, real_parent, tgid);
	pe.exit_code = BPF_CORE_READ(task, exit_code);
	BPF_CORE_READ_STR_INTO(&pe.comm, task, comm);
	emit(&pe, sizeof(pe), 0);
	return 0;
}

/* A traced thread inside an mmap of a file, executable: its exit tells the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u8);
} exec_mapping SEC(".maps");

/*
 * An executable mapping of a file in a traced process (dlopen, or the dynamic loader mapping
 * an exec'd image's libraries): the loader looks for CUDA and TLS libraries in it at once
 * instead of at its next scan. The mmap syscall's own tracepoints (tracefs, so attached where
 * tracefs is: kernel.c), not the syscall hooks every syscall passes; the record goes at the
 * exit, when the mapping is in /proc/PID/maps. Attached by name (syscalls/sys_enter_mmap and
 * sys_exit_mmap), not by the skeleton.
 */
SEC("tracepoint")
int ts_mmap_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u8 *flag;

	/* A file's executable mapping: not anonymous, and an fd (an int: -1 may come zero-extended) */
	if (!(ctx->args[2] & TS_PROT_EXEC) || (ctx->args[3] & TS_MAP_ANONYMOUS) ||
	    (int)ctx->args[4] < 0 || !is_traced(bpf_get_current_pid_tgid() >> 32))
		return 0;
	flag = bpf_task_storage_get(&exec_mapping, bpf_get_current_task_btf(), NULL,
				    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (flag)
		*flag = 1;
	return 0;
}

SEC("tracepoint")
int ts_mmap_exit(struct trace_event_raw_sys_exit *ctx)
{
	struct ts_proc_event pe = {};
	__u64 pid_tgid;
	__u8 *flag;

	flag = bpf_task_storage_get(&exec_mapping, bpf_get_current_task_btf(), NULL, 0);
	if (!flag || !*flag)
		return 0;
	*flag = 0;
	if (ctx->ret < 0 && ctx->ret >= -4095)
		return 0;
	pid_tgid = bpf_get_current_pid_tgid();
	pe.hdr.type = TS_EV_PROC_MAP;
	pe.hdr.size = sizeof(pe);
	pe.hdr.pid = pid_tgid >> 32;
	pe.hdr.tid = (__u32)pid_tgid;
	pe.ts_ns = bpf_ktime_get_ns();
	emit_now(&pe, sizeof(pe));
	return 0;
}

#endif
