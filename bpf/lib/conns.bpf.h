/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Connections: the syscall a thread is in (stash, in its task storage), the table of traced
 * stream sockets (conns), and what tells a stream socket from any other fd.
 * Part of tokenscope.bpf.c, which includes the parts in order; not a header to include alone.
 */
#ifndef TS_BPF_CONNS_H
#define TS_BPF_CONNS_H

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
	__u8 sys;    /* enum ts_syscall; 0: no syscall pending */
	__u8 tls_fn; /* enum ts_tls_fn of the TLS library call the thread is in; 0: none */
	__u8 pad[2];
	/* The TLS library call (tls.bpf.h), whose socket syscalls happen inside it. */
	__u64 tls_ssl;	    /* its SSL * */
	__u64 tls_buf;	    /* its plaintext buffer */
	__u64 tls_ex_bytes; /* the _ex forms' size_t * for the bytes done */
	__u64 tls_enter_ns;
	/* fds plus one, so that the zeroed storage of a new thread says "none" */
	__s32 tls_fd1;	    /* the socket a syscall inside the call used */
	__s32 tls_last_in1; /* the TLS socket this thread last read encrypted bytes from */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct stash);
} stash SEC(".maps");

struct conn {
	__u64 conn_id;
	__u64 file; /* struct file *: a different file on the same fd is a new connection */
	__u64 sk;   /* struct sock *: key of map `rx_pending` */
	/* bytes so far per direction, indexed by enum ts_dir: of the plaintext, on a TLS
	 * connection, whose encrypted bytes are never sent */
	__u64 pos[2];
	/* TLS: when the encrypted bytes the next plaintext read decrypts reached the socket */
	__u64 tls_queued_ns;
	/* TLS: entry of the oldest plaintext write whose encrypted bytes have not left yet */
	__u64 tls_unsent_ns;
	__u32 tls; /* 1: the connection carries TLS */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, struct ts_conn_key);
	__type(value, struct conn);
} conns SEC(".maps");

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
	if (sys == TS_SYS_TLS_READ)
		return TS_DIR_IN;
	return sys >= TS_SYS_WRITE ? TS_DIR_OUT : TS_DIR_IN;
}

/* The struct file behind fd in the current process, or NULL. */
static __always_inline struct file *fd_file(__s32 fd)
{
	struct file **fds;
	struct file *f = NULL;

	if (fd < 0)
		return NULL;
	if (has_task_btf) {
		/* BTF pointers from the current task: plain loads, not helper calls. */
		struct task_struct *task = bpf_get_current_task_btf();
		struct fdtable *fdt = task->files->fdt;

		if (!fdt || (__u32)fd >= fdt->max_fds)
			return NULL;
		fds = fdt->fd;
	} else {
		/* Before Linux 5.11: the same fields through bpf_probe_read_kernel. */
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();
		struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);

		if (!fdt || (__u32)fd >= BPF_CORE_READ(fdt, max_fds))
			return NULL;
		fds = BPF_CORE_READ(fdt, fd);
	}
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

#endif
