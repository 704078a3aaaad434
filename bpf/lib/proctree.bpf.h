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

#endif
