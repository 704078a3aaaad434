/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Passive discovery (--all): untraced processes writing streamed completion frames.
 * Part of tokenscope.bpf.c, which includes the parts in order; not a header to include alone.
 */
#ifndef TS_BPF_DISCOVERY_H
#define TS_BPF_DISCOVERY_H

/*
 * Passive discovery (--all): a write by an untraced process whose first bytes look like a
 * streamed completion frame (lib/traffic.bpf.h), on a stream socket, marks the process in map
 * `traffic_seen` for user space to attach. Nothing else is recorded for untraced processes.
 * Off (and removed by the verifier as dead code) unless user space sets discover_traffic.
 */
const volatile bool discover_traffic = false;
/* The tracer itself: never a candidate. */
const volatile __u32 self_tgid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, TS_TRAFFIC_MAX);
	__type(key, __u32);
	__type(value, struct ts_traffic_seen);
} traffic_seen SEC(".maps");

/* Up to TS_TRAFFIC_PEEK_BYTES of the write into buf; the bytes copied. */
static __always_inline __u32 traffic_read(struct pt_regs *regs, __u8 sys, __u8 *buf)
{
	__u64 arg = PT_REGS_PARM2_SYSCALL(regs);
	__u64 len, iov, cnt;
	__u32 n = 0;

	if (sys == TS_SYS_WRITE || sys == TS_SYS_SENDTO) {
		len = PT_REGS_PARM3_SYSCALL(regs);
		if (len > TS_TRAFFIC_PEEK_BYTES)
			len = TS_TRAFFIC_PEEK_BYTES;
		if (len < TRAFFIC_MIN_BYTES || bpf_probe_read_user(buf, len, (void *)arg))
			return 0;
		return len;
	}
	if (sys == TS_SYS_WRITEV) {
		iov = arg;
		cnt = PT_REGS_PARM3_SYSCALL(regs);
	} else {
		struct user_msghdr msg;

		if (bpf_probe_read_user(&msg, sizeof(msg), (void *)arg))
			return 0;
		iov = (__u64)msg.msg_iov;
		cnt = msg.msg_iovlen;
	}
#pragma unroll
	for (int i = 0; i < TS_TRAFFIC_PEEK_IOVS; i++) {
		struct iovec v;

		if (i >= cnt || bpf_probe_read_user(&v, sizeof(v), (void *)(iov + i * sizeof(v))))
			break;
		len = v.iov_len;
		if (len > TS_TRAFFIC_PEEK_BYTES - n)
			len = TS_TRAFFIC_PEEK_BYTES - n;
		/* Hide len's relation to n from clang: the verifier gets the two bounds apart. */
		asm volatile("" : "+r"(len));
		if (len > TS_TRAFFIC_PEEK_BYTES)
			break;
		if (len &&
		    bpf_probe_read_user(&buf[n & (TS_TRAFFIC_PEEK_BYTES - 1)], len, v.iov_base))
			break;
		n += len;
		/* Only a bare chunk-size line (Node's first iovec) sends us to the next piece. */
		if (n >= TS_TRAFFIC_PEEK_BYTES || !traffic_need_more(buf, n))
			break;
	}
	return n;
}

/* A function of its own (a BPF-to-BPF call): the filter's path for every other syscall stays
 * as short as without discovery. */
static __noinline void traffic_peek(struct pt_regs *regs, __u8 sys, __u32 tgid)
{
	__u8 buf[TRAFFIC_BUF_BYTES] = {};
	struct ts_traffic_seen *seen;
	__u32 n = traffic_read(regs, sys, buf);
	__u8 kind = traffic_match(buf, n);
	struct file *f;

	if (!kind || tgid == self_tgid)
		return;
	f = fd_file((__s32)PT_REGS_PARM1_SYSCALL(regs));
	if (!f || !file_stream_sock(f))
		return;
	seen = bpf_map_lookup_elem(&traffic_seen, &tgid);
	if (seen) {
		__sync_fetch_and_add(&seen->matches, 1);
		seen->last_ns = bpf_ktime_get_ns();
		return;
	}

	struct ts_traffic_seen fresh = { .matches = 1, .kind = kind };

	fresh.first_ns = fresh.last_ns = bpf_ktime_get_ns();
	/* The process's name, not the writing thread's (tokio and Go threads have their own). */
	BPF_CORE_READ_STR_INTO(&fresh.comm, (struct task_struct *)bpf_get_current_task(),
			       group_leader, comm);
	bpf_map_update_elem(&traffic_seen, &tgid, &fresh, BPF_NOEXIST);
}

#endif
