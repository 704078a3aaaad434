// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Kernel side of tokenscope: socket I/O of traced processes, at the syscall layer.
 *
 * Filters by traced tgid first (map `traced`), then keeps only fds that are stream sockets,
 * timestamps enter and exit with bpf_ktime_get_ns(), copies a bounded slice of the bytes into
 * the ring buffer and counts whatever it could not copy or submit. It parses nothing. A TLS
 * connection's plaintext comes from uprobes on the TLS library instead (lib/tls.bpf.h).
 * The process tree is followed through sched_process_fork/exit.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/usdt.bpf.h>
#include "events.h"
#include "traffic.h"
#include "lib/traffic.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* The parts, by concern, in the order they build on each other. */
#include "lib/syscalls.bpf.h"
#include "lib/common.bpf.h"
#include "lib/conns.bpf.h"
#include "lib/arrival.bpf.h"
#include "lib/capture.bpf.h"
#include "lib/tls.bpf.h"
#include "lib/gotls.bpf.h"
#include "lib/discovery.bpf.h"
#include "lib/proctree.bpf.h"
#include "lib/cuda.bpf.h"

/* The syscall programs: every part of a traced process's socket I/O meets here. */

/*
 * The syscall programs' bodies, hooked one of two ways (the loader picks, user/loader/kernel.c):
 * - the raw syscall tracepoints (tp_btf): every syscall of every process on the machine runs
 *   both programs, which stop at the syscall's number or the process;
 * - fentry/fexit on the followed syscalls' own functions (SYSCALL_HOOKS below): a process
 *   nobody traces pays only on those syscalls, where the kernel lets programs attach there.
 * Either way the syscall's registers arrive as a typed pointer, read with plain loads.
 */
static __always_inline int sys_enter_do(struct pt_regs *regs, long id)
{
	__u8 sys = syscall_kind(id);
	__u64 pid_tgid, ts;
	__u32 tgid;
	struct stash *st;
	__s32 fd;

#ifdef TS_BENCH_NOOP
	/* The benchmarks' build of the hooks alone (Makefile: tokenscope-noop): what the kernel
	 * charges a program at these two tracepoints that does nothing, to tell the hooks' cost
	 * from the work the programs do. */
	return 0;
#endif
	if (!sys)
		return 0;
	pid_tgid = bpf_get_current_pid_tgid();
	tgid = pid_tgid >> 32;
	if (!is_traced(tgid)) {
		if (discover_traffic &&
		    (id == NR_WRITE || id == NR_WRITEV || id == NR_SENDTO || id == NR_SENDMSG))
			traffic_peek(regs, sys, tgid);
		return 0;
	}
	ts = bpf_ktime_get_ns();
	fd = (__s32)PT_REGS_PARM1_SYSCALL(regs);
	if (sys == TS_SYS_CLOSE) {
		/* The fd is gone after close(); a failed close of a socket is vanishingly rare. */
		emit_close(pid_tgid, fd, ts);
		return 0;
	}
	st = thread_state(&stash, true);
	if (!st)
		return 0;
	st->fd = fd;
	st->enter_ns = ts;
	st->buf = PT_REGS_PARM2_SYSCALL(regs);
	st->iovcnt = 0;
	/* A MSG_PEEK read leaves its bytes in the socket (nginx peeks at a new connection's first
	 * byte to tell TLS): the read that takes them is the one that moves the stream. */
	if ((sys == TS_SYS_RECVFROM && (PT_REGS_PARM4_SYSCALL(regs) & TS_MSG_PEEK)) ||
	    (sys == TS_SYS_RECVMSG && (PT_REGS_PARM3_SYSCALL(regs) & TS_MSG_PEEK))) {
		st->sys = 0;
		return 0;
	}
	if (sys == TS_SYS_READV || sys == TS_SYS_WRITEV) {
		st->iovcnt = PT_REGS_PARM3_SYSCALL(regs);
	} else if (sys == TS_SYS_RECVMSG || sys == TS_SYS_SENDMSG) {
		struct user_msghdr msg;

		if (bpf_probe_read_user(&msg, sizeof(msg), (void *)st->buf)) {
			st->sys = 0;
			return 0;
		}
		st->buf = (__u64)msg.msg_iov;
		st->iovcnt = msg.msg_iovlen;
	}
	st->sys = sys;
	return 0;
}

static __always_inline int sys_exit_do(struct pt_regs *regs, long ret)
{
	struct stash *sp;
	__u64 pid_tgid;
	__u32 tid;
	struct stash st;
	struct conn *c;

#ifdef TS_BENCH_NOOP
	return 0;
#endif
	/* Every syscall on the machine ends here: one that is never followed stops at its number,
	 * before the task storage lookup. */
	if (!syscall_kind(TS_SYSCALL_NR(regs)))
		return 0;
	sp = thread_state(&stash, false);
	if (!sp || !sp->sys)
		return 0;
	st = *sp;
	sp->sys = 0;
	pid_tgid = bpf_get_current_pid_tgid();
	tid = (__u32)pid_tgid;
	if (st.sys == TS_SYS_ACCEPT) {
		if (ret >= 0)
			conn_get(pid_tgid >> 32, tid, (__s32)ret, TS_SYS_ACCEPT,
				 bpf_ktime_get_ns());
		return 0;
	}
	if (ret > 0) {
		__u8 dir = syscall_dir(st.sys);

		c = conn_get(pid_tgid >> 32, tid, st.fd, st.sys, st.enter_ns);
		if (!c)
			return 0;
		/* Inside a TLS library call: this is the socket its plaintext travels on. */
		if (st.tls_fn)
			sp->tls_fd1 = st.fd + 1;
		/* The first bytes either way tell a TLS connection (once: then pos moves on). */
		if (!c->tls && !c->pos[dir & 1] && tls_sniff(&st, ret))
			tls_mark(c, pid_tgid, st.fd, st.sys, st.enter_ns);
		if (c->tls) {
			/* Go: a syscall of the goroutine (its g) in a crypto/tls call; a write
			 * inside its Write is timed from the call, as OpenSSL's are. */
			if (go_tls_active) {
				__u64 w = go_tls_syscall(&st, c, pid_tgid, GO_REG_G(regs));

				if (w && dir == TS_DIR_OUT)
					tls_wire(w, st.enter_ns);
			}
			tls_cipher(sp, &st, c, ret);
			return 0;
		}
		emit_data(&st, c, pid_tgid, ret, bpf_ktime_get_ns(),
			  dir == TS_DIR_IN ? rx_take(c) : 0);
		return 0;
	}
	/* Only for connections already traced: an EOF on an unknown socket says nothing. */
	if ((ret == 0 || ret == -ECONNRESET) && syscall_dir(st.sys) == TS_DIR_IN) {
		/* A read that ends the stream: the peer closed (0), or reset it, as a client that
		 * closes with bytes unread does (ECONNRESET). */
		struct ts_conn_key key = { .pid = pid_tgid >> 32, .fd = st.fd };

		c = bpf_map_lookup_elem(&conns, &key);
		if (c)
			emit_peer_gone(&st, c, pid_tgid, ret ? TS_DATA_RESET : TS_DATA_EOF,
				       bpf_ktime_get_ns());
	} else if ((ret == -EPIPE || ret == -ECONNRESET) && syscall_dir(st.sys) == TS_DIR_OUT) {
		struct ts_conn_key key = { .pid = pid_tgid >> 32, .fd = st.fd };

		c = bpf_map_lookup_elem(&conns, &key);
		if (c)
			emit_peer_gone(&st, c, pid_tgid, TS_DATA_RESET, bpf_ktime_get_ns());
	}
	return 0;
}

/* Run by user space on a CPU whose batch holds records (BPF_PROG_TEST_RUN on that CPU), never
 * attached: puts the batch in the ring. */
SEC("raw_tp")
int ts_batch_flush(void *ctx)
{
	return batch_flush_here();
}

SEC("tp_btf/sys_enter")
int BPF_PROG(ts_sys_enter, struct pt_regs *regs, long id)
{
	return sys_enter_do(regs, id);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(ts_sys_exit, struct pt_regs *regs, long ret)
{
	return sys_exit_do(regs, ret);
}

/* The same bodies on each followed syscall's function (its only argument, the registers the
 * syscall was made with; and at exit what it returned). close needs no exit. */
#define SYSCALL_ENTRY_HOOK(name)                                                  \
	SEC("fentry/" TS_SYSCALL_FN(name))                                        \
	int BPF_PROG(ts_fentry_##name, struct pt_regs *regs)                      \
	{                                                                         \
		return sys_enter_do(regs, TS_SYSCALL_NR(regs));                   \
	}
#define SYSCALL_HOOKS(name)                                                       \
	SYSCALL_ENTRY_HOOK(name)                                                  \
	SEC("fexit/" TS_SYSCALL_FN(name))                                         \
	int BPF_PROG(ts_fexit_##name, struct pt_regs *regs, long ret)             \
	{                                                                         \
		return sys_exit_do(regs, ret);                                    \
	}

SYSCALL_HOOKS(read)
SYSCALL_HOOKS(readv)
SYSCALL_HOOKS(recvfrom)
SYSCALL_HOOKS(recvmsg)
SYSCALL_HOOKS(write)
SYSCALL_HOOKS(writev)
SYSCALL_HOOKS(sendto)
SYSCALL_HOOKS(sendmsg)
SYSCALL_HOOKS(accept)
SYSCALL_HOOKS(accept4)
SYSCALL_ENTRY_HOOK(close)

/*
 * Before Linux 5.11 the per-thread maps are hashes keyed by thread id (common.bpf.h): a thread's
 * entries go at its exit, as task storage goes with its task. Loaded only there (kernel.c).
 */
_Static_assert(sizeof(struct stash) <= THREAD_STATE_MAX_BYTES &&
		   sizeof(struct gpu_wait) <= THREAD_STATE_MAX_BYTES &&
		   sizeof(struct exec_mapping) <= THREAD_STATE_MAX_BYTES,
	       "a new thread's state starts as thread_zero");

SEC("tp_btf/sched_process_exit")
int BPF_PROG(ts_thread_exit, struct task_struct *task)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	/* Whether or not its process is still traced (the leader's exit may have been seen
	 * first): a delete that finds nothing costs little, and a thread's exit is rare. */
	if (has_task_storage)
		return 0;
	bpf_map_delete_elem(&stash, &tid);
	bpf_map_delete_elem(&gpu_wait, &tid);
	bpf_map_delete_elem(&exec_mapping, &tid);
	return 0;
}
