// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Kernel side of tokenscope: socket I/O of traced processes, at the syscall layer.
 *
 * Filters by traced tgid first (map `traced`), then keeps only fds that are stream sockets,
 * timestamps enter and exit with bpf_ktime_get_ns(), copies a bounded slice of the bytes into
 * the ring buffer and counts whatever it could not copy or submit. It parses nothing.
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

/* x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl). */
#define NR_READ 0
#define NR_WRITE 1
#define NR_CLOSE 3
#define NR_READV 19
#define NR_WRITEV 20
#define NR_CONNECT 42
#define NR_ACCEPT 43
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47
#define NR_ACCEPT4 288

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
/* Loop bound: one iteration per copied piece; pieces end at chunk or iovec boundaries. */
#define COPY_LOOPS (2 * (TS_CAPTURE_MAX / TS_CHUNK_BYTES) + TS_IOV_MAX + 4)

/* Set by user space between open and load. */
const volatile __u32 capture_bytes = TS_CAPTURE_DEFAULT;
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
 * Arguments saved at sys_enter for sys_exit, in the thread's own task storage: the lookup at
 * every sys_exit on the machine is a pointer read for threads that never had one, and the
 * storage goes away with the thread (one that dies inside a syscall leaves nothing behind).
 */
struct stash {
	__u64 enter_ns;
	__u64 buf;    /* buffer, iovec array, or msghdr's iovec array */
	__u64 iovcnt; /* 0: buf is a plain buffer */
	__s32 fd;
	__u8 sys; /* enum ts_syscall; 0: no syscall pending */
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct stash);
} stash SEC(".maps");

struct conn {
	__u64 conn_id;
	__u64 file;   /* struct file *: a different file on the same fd is a new connection */
	__u64 sk;     /* struct sock *: key of map `rx_pending` */
	__u64 pos[2]; /* bytes so far per direction, indexed by enum ts_dir */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, struct ts_conn_key);
	__type(value, struct conn);
} conns SEC(".maps");

struct copy_ctx {
	__u64 iov; /* user iovec array, or 0 for a plain buffer */
	__u64 iovcnt;
	__u64 iov_idx;
	__u64 seg;	 /* user address of the current segment's next byte */
	__u64 seg_left;	 /* bytes left in the current segment (already capped) */
	__u64 remaining; /* bytes still to capture from this syscall */
	__u64 pos;	 /* stream offset of the next byte */
	__u64 chunk_pos; /* stream offset of scratch data[0] */
	__u32 fill;	 /* bytes in scratch data */
	__u32 pad;
};

/* data[] directly follows the record header, so the pair is one ring-buffer record. */
#pragma clang diagnostic ignored "-Wgnu-variable-sized-type-not-at-end"
struct scratch {
	/* The copy loop's state lives in map memory, not on the stack: the verifier then treats it
	 * as unknown and checks the loop body once instead of once per concrete value. */
	struct copy_ctx cc;
	struct ts_data_event ev;
	/* Room past a chunk so that the verifier can prove offset + masked length stays inside. */
	__u8 data[3 * TS_CHUNK_BYTES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TS_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/*
 * When the bytes a server has not read yet reached its socket, for the time a request waited
 * before the server's read returned it (the read is where TTFT starts; a busy event loop reads
 * late). Keyed by struct sock *: sk_data_ready runs in softirq context, where the process and fd
 * are unknown. The value is the arrival of the oldest unread byte, RX_NONE when everything was
 * read, RX_UNKNOWN when bytes are waiting whose arrival was not seen. Entries are made when a
 * traced process first uses a socket and removed at close; LRU because a process can exit
 * without closing.
 */
#define RX_NONE 0
#define RX_UNKNOWN 1

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, __u64);
	__type(value, __u64);
} rx_pending SEC(".maps");

/*
 * Local ports of the sockets in rx_pending, a bit each: sk_data_ready runs for every socket on
 * the machine, and an array load and a bit test turn almost all of them away before the hash
 * lookup. Bits are never cleared; a stale one costs a lookup that misses.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536 / 64);
	__type(key, __u32);
	__type(value, __u64);
} rx_ports SEC(".maps");

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

static __always_inline __u64 rb_flags(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
									     : BPF_RB_NO_WAKEUP;
}

/* Submit a record, or count it lost with its payload. */
static __always_inline void emit(void *rec, __u64 size, __u64 payload)
{
	if (bpf_ringbuf_output(&events, rec, size, rb_flags())) {
		stat_add(TS_STAT_LOST_EVENTS, 1);
		stat_add(TS_STAT_LOST_BYTES, payload);
	} else {
		stat_add(TS_STAT_EVENTS, 1);
	}
}

static __always_inline __u8 syscall_kind(long id)
{
	switch (id) {
	case NR_READ:
		return TS_SYS_READ;
	case NR_READV:
		return TS_SYS_READV;
	case NR_RECVFROM:
		return TS_SYS_RECVFROM;
	case NR_RECVMSG:
		return TS_SYS_RECVMSG;
	case NR_WRITE:
		return TS_SYS_WRITE;
	case NR_WRITEV:
		return TS_SYS_WRITEV;
	case NR_SENDTO:
		return TS_SYS_SENDTO;
	case NR_SENDMSG:
		return TS_SYS_SENDMSG;
	case NR_CLOSE:
		return TS_SYS_CLOSE;
	case NR_ACCEPT:
	case NR_ACCEPT4:
		return TS_SYS_ACCEPT;
	default:
		return 0;
	}
}

static __always_inline __u8 syscall_dir(__u8 sys)
{
	return sys >= TS_SYS_WRITE ? TS_DIR_OUT : TS_DIR_IN;
}

/* The struct file behind fd in the current process, or NULL. */
static __always_inline struct file *fd_file(__s32 fd)
{
	/* BTF pointers from the current task: plain loads, not helper calls. */
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt = task->files->fdt;
	struct file **fds;
	struct file *f = NULL;

	if (!fdt || fd < 0 || (__u32)fd >= fdt->max_fds)
		return NULL;
	fds = fdt->fd;
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

/* The stream socket's struct sock behind a file, or NULL when it is anything else. */
static __always_inline struct sock *file_stream_sock(struct file *f)
{
	struct socket *sock;
	struct sock *sk;
	__u16 family;

	if ((BPF_CORE_READ(f, f_inode, i_mode) & S_IFMT) != S_IFSOCK)
		return NULL;
	sock = BPF_CORE_READ(f, private_data);
	if (!sock || BPF_CORE_READ(sock, type) != SOCK_STREAM)
		return NULL;
	sk = BPF_CORE_READ(sock, sk);
	if (!sk)
		return NULL;
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6 && family != AF_UNIX)
		return NULL;
	return sk;
}

static __always_inline void conn_fill_addrs(struct ts_conn_event *ce, struct sock *sk)
{
	ce->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (ce->family == AF_INET) {
		__u32 l = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__u32 p = BPF_CORE_READ(sk, __sk_common.skc_daddr);

		__builtin_memcpy(ce->local_addr, &l, 4);
		__builtin_memcpy(ce->peer_addr, &p, 4);
	} else if (ce->family == AF_INET6) {
		bpf_core_read(ce->local_addr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(ce->peer_addr, 16, &sk->__sk_common.skc_v6_daddr);
	}
	if (ce->family != AF_UNIX) {
		ce->local_port = BPF_CORE_READ(sk, __sk_common.skc_num);
		ce->peer_port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	}
}

static __always_inline __u32 rx_queued(struct sock *sk)
{
	return BPF_CORE_READ(sk, sk_receive_queue.qlen);
}

/*
 * A traced process uses sk for the first time: start following its arrivals. Bytes already
 * waiting in a socket the process has just accepted are the connection's first: their arrival
 * is the time of the connection's latest packet (tcp_sock.tcp_mstamp, microseconds of the same
 * clock; the server has sent nothing yet). Bytes waiting anywhere else arrived when, is unknown.
 */
static __always_inline void rx_register(struct sock *sk, bool accepted)
{
	__u64 key = (__u64)sk, v = RX_NONE, *p;

	/* In the maps first: bytes arriving from here on are noted by sk_data_ready. */
	bpf_map_update_elem(&rx_pending, &key, &v, BPF_ANY);
	__u32 port = BPF_CORE_READ(sk, __sk_common.skc_num), word = port / 64;
	__u64 *bits = bpf_map_lookup_elem(&rx_ports, &word);

	if (bits && !(*bits & (1ull << (port % 64))))
		__sync_fetch_and_or(bits, 1ull << (port % 64));
	if (!rx_queued(sk))
		return;
	v = RX_UNKNOWN;
	if (accepted && BPF_CORE_READ(sk, sk_protocol) == IPPROTO_TCP) {
		__u64 us = BPF_CORE_READ((struct tcp_sock *)sk, tcp_mstamp);

		if (us && us * 1000 <= bpf_ktime_get_ns())
			v = us * 1000;
	}
	p = bpf_map_lookup_elem(&rx_pending, &key);
	if (p)
		*p = v;
}

/*
 * A read returned bytes: when the oldest of them arrived (0: not known), and the socket's state
 * for the next read: nothing pending if the queue is empty, RX_UNKNOWN if bytes were left (they
 * arrived at some time before now, which is not known closely enough to report).
 */
static __always_inline __u64 rx_take(struct conn *c)
{
	__u64 key = c->sk, *p = bpf_map_lookup_elem(&rx_pending, &key), old;

	if (!p)
		return 0;
	old = *p;
	if (old != RX_NONE)
		__sync_val_compare_and_swap(p, old, RX_NONE);
	/* Bytes that arrive from here on set the slot themselves (sk_data_ready). */
	if (rx_queued((struct sock *)c->sk))
		__sync_val_compare_and_swap(p, RX_NONE, RX_UNKNOWN);
	return old > RX_UNKNOWN ? old : 0;
}

/*
 * The traced connection on (tgid, fd), created (and announced) on first sight. NULL when the fd
 * is not a stream socket or the table is full (counted).
 */
static __always_inline struct conn *conn_get(__u32 tgid, __u32 tid, __s32 fd, __u8 sys, __u64 ts)
{
	struct ts_conn_key key = { .pid = tgid, .fd = fd };
	struct file *f = fd_file(fd);
	struct conn *c;
	struct sock *sk;

	if (!f)
		return NULL;
	c = bpf_map_lookup_elem(&conns, &key);
	if (c && c->file == (__u64)f)
		return c;
	sk = file_stream_sock(f);
	if (!sk)
		return NULL;

	struct conn fresh = { .file = (__u64)f, .sk = (__u64)sk };
	fresh.conn_id = __sync_fetch_and_add(&next_conn_id, 1) + 1;
	if (bpf_map_update_elem(&conns, &key, &fresh, BPF_ANY)) {
		stat_add(TS_STAT_CONN_TABLE_FULL, 1);
		return NULL;
	}
	rx_register(sk, sys == TS_SYS_ACCEPT);

	struct ts_conn_event ce = {};
	ce.hdr.type = TS_EV_CONN_OPEN;
	ce.hdr.size = sizeof(ce);
	ce.hdr.pid = tgid;
	ce.hdr.tid = tid;
	ce.conn_id = fresh.conn_id;
	ce.ts_ns = ts;
	ce.fd = fd;
	ce.syscall = sys;
	conn_fill_addrs(&ce, sk);
	emit(&ce, sizeof(ce), 0);
	return bpf_map_lookup_elem(&conns, &key);
}

static __always_inline void copy_flush(struct scratch *s, struct copy_ctx *cc, bool last)
{
	__u32 n = cc->fill;

	if (n > TS_CHUNK_BYTES)
		n = TS_CHUNK_BYTES;
	s->ev.data_bytes = n;
	s->ev.pos = cc->chunk_pos;
	s->ev.last = last;
	s->ev.hdr.size = sizeof(s->ev) + n;
	emit(&s->ev, sizeof(s->ev) + n, n);
	cc->fill = 0;
	cc->chunk_pos = cc->pos;
}

static long copy_step(__u32 i, void *arg)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	struct copy_ctx *cc;

	if (!s)
		return 1;
	cc = &s->cc;
	if (cc->remaining == 0) {
		copy_flush(s, cc, true);
		return 1;
	}
	if (cc->seg_left == 0) {
		struct iovec v;

		if (!cc->iov || cc->iov_idx >= cc->iovcnt || cc->iov_idx >= TS_IOV_MAX) {
			/* The returned bytes lie beyond the iovecs we walk. */
			stat_add(TS_STAT_UNCAPTURED_BYTES, cc->remaining);
			cc->pos += cc->remaining;
			cc->remaining = 0;
			return 0;
		}
		if (bpf_probe_read_user(&v, sizeof(v), (void *)(cc->iov + cc->iov_idx * sizeof(v))))
			v.iov_len = 0, v.iov_base = NULL;
		cc->iov_idx++;
		cc->seg = (__u64)v.iov_base;
		cc->seg_left = v.iov_len < cc->remaining ? v.iov_len : cc->remaining;
		return 0;
	}

	if (!cc->fill)
		cc->chunk_pos = cc->pos;
	__u32 off = cc->fill & (TS_CHUNK_BYTES - 1);
	__u64 n = TS_CHUNK_BYTES - off;

	if (n > cc->seg_left)
		n = cc->seg_left;
	/* Hide n's known range from clang so the mask stays for the verifier. */
	asm volatile("" : "+r"(n));
	n &= 2 * TS_CHUNK_BYTES - 1;
	if (bpf_probe_read_user(&s->data[off], n, (void *)cc->seg)) {
		/* Unreadable user memory: what is left of the syscall becomes a gap. */
		stat_add(TS_STAT_COPY_FAILED, 1);
		stat_add(TS_STAT_UNCAPTURED_BYTES, cc->remaining);
		cc->pos += cc->remaining;
		cc->remaining = 0;
		return 0;
	}
	cc->fill = off + n;
	cc->seg += n;
	cc->seg_left -= n;
	cc->remaining -= n;
	cc->pos += n;
	if (cc->fill >= TS_CHUNK_BYTES && cc->remaining)
		copy_flush(s, cc, false);
	return 0;
}

static __always_inline void emit_data(struct stash *st, struct conn *c, __u64 pid_tgid, __u64 ret,
				      __u64 exit_ns, __u64 queued_ns)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	__u8 dir = syscall_dir(st->sys);
	__u64 want = ret < capture_bytes ? ret : capture_bytes;
	struct copy_ctx *cc;

	if (!s)
		return;
	cc = &s->cc;
	s->ev.hdr.type = TS_EV_DATA;
	s->ev.hdr.pid = pid_tgid >> 32;
	s->ev.hdr.tid = (__u32)pid_tgid;
	s->ev.conn_id = c->conn_id;
	s->ev.enter_ns = st->enter_ns;
	s->ev.exit_ns = exit_ns;
	s->ev.syscall_pos = __sync_fetch_and_add(&c->pos[dir & 1], ret);
	s->ev.queued_ns = queued_ns;
	s->ev.syscall_bytes = ret;
	s->ev.fd = st->fd;
	s->ev.dir = dir;
	s->ev.syscall = st->sys;
	s->ev.status = TS_DATA_BYTES;

	cc->pos = s->ev.syscall_pos;
	cc->chunk_pos = cc->pos;
	cc->remaining = want;
	cc->fill = 0;
	cc->iov_idx = 0;
	if (st->iovcnt) {
		cc->iov = st->buf;
		cc->iovcnt = st->iovcnt;
		cc->seg = 0;
		cc->seg_left = 0;
	} else {
		cc->iov = 0;
		cc->iovcnt = 0;
		cc->seg = st->buf;
		cc->seg_left = want;
	}
	if (ret > want)
		stat_add(TS_STAT_UNCAPTURED_BYTES, ret - want);
	bpf_loop(COPY_LOOPS, copy_step, NULL, 0);
	stat_add(TS_STAT_SYSCALLS, 1);
}

/* A read that returned 0 (EOF) or a write the peer refused: no bytes, but the connection's
 * other end is gone, which decides whether a stream was aborted. */
static __always_inline void emit_peer_gone(struct stash *st, struct conn *c, __u64 pid_tgid,
					   __u8 status, __u64 exit_ns)
{
	struct ts_data_event ev = {};
	__u8 dir = syscall_dir(st->sys);

	ev.hdr.type = TS_EV_DATA;
	ev.hdr.size = sizeof(ev);
	ev.hdr.pid = pid_tgid >> 32;
	ev.hdr.tid = (__u32)pid_tgid;
	ev.conn_id = c->conn_id;
	ev.enter_ns = st->enter_ns;
	ev.exit_ns = exit_ns;
	ev.pos = ev.syscall_pos = c->pos[dir & 1];
	ev.fd = st->fd;
	ev.dir = dir;
	ev.syscall = st->sys;
	ev.last = 1;
	ev.status = status;
	emit(&ev, sizeof(ev), 0);
}

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
	BPF_CORE_READ_STR_INTO(&fresh.comm, bpf_get_current_task_btf(), group_leader, comm);
	bpf_map_update_elem(&traffic_seen, &tgid, &fresh, BPF_NOEXIST);
}

static __always_inline void emit_close(__u64 pid_tgid, __s32 fd, __u64 ts)
{
	struct ts_conn_key key = { .pid = pid_tgid >> 32, .fd = fd };
	struct conn *c = bpf_map_lookup_elem(&conns, &key);
	struct ts_conn_event ce = {};

	if (!c)
		return;
	ce.hdr.type = TS_EV_CONN_CLOSE;
	ce.hdr.size = sizeof(ce);
	ce.hdr.pid = key.pid;
	ce.hdr.tid = (__u32)pid_tgid;
	ce.conn_id = c->conn_id;
	ce.ts_ns = ts;
	ce.fd = fd;
	ce.syscall = TS_SYS_CLOSE;
	ce.rx_bytes = c->pos[TS_DIR_IN];
	ce.tx_bytes = c->pos[TS_DIR_OUT];
	bpf_map_delete_elem(&rx_pending, &c->sk);
	bpf_map_delete_elem(&conns, &key);
	emit(&ce, sizeof(ce), 0);
}

/* tp_btf: the syscall's registers arrive as a typed pointer and are read with plain loads. */
SEC("tp_btf/sys_enter")
int BPF_PROG(ts_sys_enter, struct pt_regs *regs, long id)
{
	__u8 sys = syscall_kind(id);
	__u64 pid_tgid, ts;
	__u32 tgid;
	struct stash *st;
	__s32 fd;

	if (!sys)
		return 0;
	pid_tgid = bpf_get_current_pid_tgid();
	tgid = pid_tgid >> 32;
	if (!bpf_map_lookup_elem(&traced, &tgid)) {
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
	st = bpf_task_storage_get(&stash, bpf_get_current_task_btf(), NULL,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st)
		return 0;
	st->fd = fd;
	st->enter_ns = ts;
	st->buf = PT_REGS_PARM2_SYSCALL(regs);
	st->iovcnt = 0;
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

SEC("tp_btf/sys_exit")
int BPF_PROG(ts_sys_exit, struct pt_regs *regs, long ret)
{
	struct stash *sp = bpf_task_storage_get(&stash, bpf_get_current_task_btf(), NULL, 0);
	__u64 pid_tgid;
	__u32 tid;
	struct stash st;
	struct conn *c;

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
		c = conn_get(pid_tgid >> 32, tid, st.fd, st.sys, st.enter_ns);
		if (c)
			emit_data(&st, c, pid_tgid, ret, bpf_ktime_get_ns(),
				  syscall_dir(st.sys) == TS_DIR_IN ? rx_take(c) : 0);
		return 0;
	}
	/* Only for connections already traced: an EOF on an unknown socket says nothing. */
	if (ret == 0 && syscall_dir(st.sys) == TS_DIR_IN) {
		struct ts_conn_key key = { .pid = pid_tgid >> 32, .fd = st.fd };

		c = bpf_map_lookup_elem(&conns, &key);
		if (c)
			emit_peer_gone(&st, c, pid_tgid, TS_DATA_EOF, bpf_ktime_get_ns());
	} else if ((ret == -EPIPE || ret == -ECONNRESET) && syscall_dir(st.sys) == TS_DIR_OUT) {
		struct ts_conn_key key = { .pid = pid_tgid >> 32, .fd = st.fd };

		c = bpf_map_lookup_elem(&conns, &key);
		if (c)
			emit_peer_gone(&st, c, pid_tgid, TS_DATA_RESET, bpf_ktime_get_ns());
	}
	return 0;
}

/* Bytes reached a socket (any socket on the machine; softirq or the sender's context): a traced
 * socket with nothing pending notes the time. */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(ts_rx_ready, struct sock *sk)
{
	__u32 port = sk->__sk_common.skc_num, word = port / 64;
	__u64 key = (__u64)sk, *bits = bpf_map_lookup_elem(&rx_ports, &word), *p;

	if (!bits || !(*bits & (1ull << (port % 64))))
		return 0;
	p = bpf_map_lookup_elem(&rx_pending, &key);
	if (p && *p == RX_NONE)
		__sync_val_compare_and_swap(p, RX_NONE, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(ts_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid;
	__u32 ctgid = child->tgid;
	__u8 one = 1;
	struct ts_proc_event pe = {};

	/* Threads share the tgid and are already covered. */
	if (ptgid == ctgid || !bpf_map_lookup_elem(&traced, &ptgid))
		return 0;
	bpf_map_update_elem(&traced, &ctgid, &one, BPF_ANY);
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
	if ((__u32)pid_tgid != tgid || !bpf_map_lookup_elem(&traced, &tgid))
		return 0;
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

/*
 * GPU steps from CUDA calls. Uprobes on the CUDA runtime and driver (attached by user space to
 * every copy of the libraries that traced processes map) count the work each process issues;
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

SEC("uprobe")
int BPF_KPROBE(ts_cuda_call)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 fn = bpf_get_attach_cookie(ctx);
	struct gpu_acc *a;

	if (!bpf_map_lookup_elem(&traced, &tgid))
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

SEC("uprobe")
int BPF_KPROBE(ts_cuda_sync)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct gpu_wait *w;

	if (!bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	w = bpf_task_storage_get(&gpu_wait, bpf_get_current_task_btf(), NULL,
				 BPF_LOCAL_STORAGE_GET_F_CREATE);
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

	w = bpf_task_storage_get(&gpu_wait, bpf_get_current_task_btf(), NULL, 0);
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
 * Device times from the CUPTI injection library (cupti/): its USDT probes tokenscope:runs and
 * tokenscope:kernels, attached by user space to the library in each traced process that loaded
 * it (attaching is what turns its collection on: the kernel raises the probes' semaphores).
 * Each call hands over up to TS_RUNS_PER_PROBE runs already aggregated by the library; they
 * are copied into one record. A library of another ABI version gets a record with n = 0.
 */
SEC("usdt")
int BPF_USDT(ts_cupti_runs, int abi, void *runs, int n, void *stats)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct ts_dev_runs_event *ev;
	bool known = abi == TS_CUPTI_ABI;

	if (!bpf_map_lookup_elem(&traced, &tgid))
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
	if (bpf_probe_read_user(&ev->stats, sizeof(ev->stats), known ? stats : NULL) && known)
		stat_add(TS_STAT_COPY_FAILED, 1);
	if (bpf_probe_read_user(ev->runs, sizeof(ev->runs), known ? runs : NULL) && known) {
		stat_add(TS_STAT_COPY_FAILED, 1);
		ev->n = 0;
	}
	bpf_ringbuf_submit(ev, rb_flags());
	stat_add(TS_STAT_EVENTS, 1);
	return 0;
}
