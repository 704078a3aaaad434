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
struct exec_mapping {
	__u8 mapping; /* in such an mmap */
	__u8 hold;    /* of a library the loader hooks: stop the process at its exit */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct exec_mapping);
} exec_mapping SEC(".maps");

/*
 * Holding a process at its mapping of a library tokenscope hooks (docs/gpu.md, "A library mapped
 * after attach"): set by user space once it can release every process it holds, even if it dies
 * (its watchdog, user/loader/hold.c), and cleared before it stops. Not a constant: it goes off
 * at the end of the run, and when the watchdog cannot start.
 */
bool hold_mappings = false;

/* The processes stopped so, and when: user space continues each once its probes are in place,
 * then removes it. One entry per process whichever thread mapped. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TS_HELD_MAX);
	__type(key, __u32);
	__type(value, __u64);
} held SEC(".maps");

#define SIGSTOP 19
/* The longest file name prefix held for, and the name bytes read to test it. */
#define HOLD_NAME_BYTES 24

/* name starts with prefix (a string literal, shorter than HOLD_NAME_BYTES). */
#define NAME_STARTS(name, prefix)                                                               \
	({                                                                                      \
		bool same_ = true;                                                              \
		_Pragma("unroll") for (int i_ = 0; i_ < (int)sizeof(prefix) - 1; i_++) same_ &= \
		    (name)[i_] == (prefix)[i_];                                                 \
		same_;                                                                          \
	})

/*
 * Whether mapping the file at fd is worth holding the process for: a library whose calls the
 * loader hooks (the CUDA runtime and driver, OpenSSL, the CUPTI injection library), by the
 * start of its file name, and the process no job of a terminal's shell (a process-group leader
 * with a controlling terminal), whose stop the shell would report and take the terminal back.
 */
static __always_inline bool hold_wanted(int fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	char name[HOLD_NAME_BYTES] = {};
	const unsigned char *n;
	struct file *f;

	/* Never tokenscope itself (traced when -p names one of its ancestors): nobody would
	 * continue it but its watchdog, a second later. */
	if (!hold_mappings || BPF_CORE_READ(task, tgid) == self_tgid)
		return false;
	f = fd_file(fd);
	if (!f)
		return false;
	n = BPF_CORE_READ(f, f_path.dentry, d_name.name);
	if (!n || bpf_probe_read_kernel_str(name, sizeof(name), n) < 0)
		return false;
	if (!NAME_STARTS(name, "libcudart") && !NAME_STARTS(name, "libcuda.so") &&
	    !NAME_STARTS(name, "libssl.so") && !NAME_STARTS(name, "libtokenscope_cupti"))
		return false;
	if (BPF_CORE_READ(task, signal, tty) &&
	    BPF_CORE_READ(task, signal, pids[PIDTYPE_PGID], numbers[0].nr) ==
		BPF_CORE_READ(task, tgid))
		return false;
	return true;
}

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
	struct exec_mapping *m;

	/* A file's executable mapping: not anonymous, and an fd (an int: -1 may come zero-extended)
	 */
	if (!(ctx->args[2] & TS_PROT_EXEC) || (ctx->args[3] & TS_MAP_ANONYMOUS) ||
	    (int)ctx->args[4] < 0 || !is_traced(bpf_get_current_pid_tgid() >> 32))
		return 0;
	m = thread_state(&exec_mapping, true);
	if (m) {
		m->mapping = 1;
		m->hold = hold_wanted((int)ctx->args[4]);
	}
	return 0;
}

/*
 * At the mmap's exit, a library worth holding for stops its process (SIGSTOP, from here: before
 * the thread returns to user space, so none of it runs the library yet) until the loader has
 * put its probes in and continues it (the record says so). A process already held (another
 * thread mapped too) is not stopped twice.
 */
SEC("tracepoint")
int ts_mmap_exit(struct trace_event_raw_sys_exit *ctx)
{
	struct ts_proc_event pe = {};
	struct exec_mapping *m;
	__u64 pid_tgid;
	__u32 tgid;

	m = thread_state(&exec_mapping, false);
	if (!m || !m->mapping)
		return 0;
	m->mapping = 0;
	if (ctx->ret < 0 && ctx->ret >= -4095)
		return 0;
	pid_tgid = bpf_get_current_pid_tgid();
	tgid = pid_tgid >> 32;
	pe.hdr.type = TS_EV_PROC_MAP;
	pe.hdr.size = sizeof(pe);
	pe.hdr.pid = tgid;
	pe.hdr.tid = (__u32)pid_tgid;
	pe.ts_ns = bpf_ktime_get_ns();
	if (m->hold && hold_mappings &&
	    !bpf_map_update_elem(&held, &tgid, &pe.ts_ns, BPF_NOEXIST) && !bpf_send_signal(SIGSTOP))
		pe.exit_code = TS_PROC_MAP_HELD;
	emit_now(&pe, sizeof(pe));
	return 0;
}

#endif
