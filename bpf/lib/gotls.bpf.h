/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Go's crypto/tls: plaintext from (*Conn).Read and (*Conn).Write of a Go executable, joined to
 * its socket as OpenSSL's is (tls.bpf.h), by a socket syscall made inside the call.
 *
 * Go differs in three ways. Its functions take their arguments in registers (the register ABI of
 * Go 1.17 and later: on x86-64 the receiver in RAX, the slice's pointer in RBX and length in
 * RCX; the byte count returned in RAX; syscalls.bpf.h names them per architecture). A
 * uretprobe replaces the return address on the stack, which Go moves when it grows a
 * goroutine's stack: user space probes the RET instructions of Read
 * instead. And a call is a goroutine's, which may park in the middle (a read that would block)
 * and go on on another thread: calls are kept by goroutine, whose g pointer Go keeps in R14
 * (R28 on arm64), not by thread, and the socket syscall inside one is recognised by the same
 * register in the syscall's registers (Go's syscall paths leave it alone).
 *
 * A Write needs no return probe: its plaintext is whole at its entry (the slice) and is sent
 * at its first socket write, where the connection is certain (at the return the goroutine may
 * have waited long enough for the connection to be closed). Its entry stays until the
 * goroutine's next Read or Write, or the connection's Close (probed, for the alert it writes):
 * it is sent once, and a goroutine in another call has left it. Each probe is a trap, and,
 * where the probed instruction must be single-stepped, a second one, which costs tens of
 * microseconds on a virtual machine: user space probes entries at the prologue's conditional
 * jump, which the kernel emulates (on x86-64; on arm64 at the function's start).
 * Where no syscall was seen inside a Read (its bytes were read already, by the handshake) the
 * socket is the object's earlier one (tls_socks), or read from the tls.Conn: its net.Conn's
 * *netFD and that poll.FD's Sysfd, whose layout has not changed since Go 1.0; a descriptor
 * that is not a traced TLS connection of the process is not believed.
 * Part of tokenscope.bpf.c, which includes the parts in order; not a header to include alone.
 */
#ifndef TS_BPF_GOTLS_H
#define TS_BPF_GOTLS_H

struct go_tls_key {
	__u32 pid;
	__u32 fn; /* enum ts_tls_fn */
	__u64 g;  /* the goroutine (its runtime.g) */
};

struct go_tls_call {
	__u64 tconn; /* the *tls.Conn: the key of tls_socks, as an SSL * is */
	__u64 buf;
	__u64 len; /* the slice's length */
	__u64 enter_ns;
	__s32 fd1; /* the socket a syscall inside the call used, plus one; 0: none */
	__u8 fn;   /* enum ts_tls_fn */
	__u8 sent; /* a Write's plaintext was sent at its socket write */
	__u8 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct go_tls_key);
	__type(value, struct go_tls_call);
} go_tls_calls SEC(".maps");

/* Offsets in Go's structs (see above): tls.Conn.conn (net.Conn: itab, data), then, in
 * *net.TCPConn, conn.fd (*netFD), and in netFD, pfd.Sysfd after the 16-byte fdMutex. */
#define GO_TLS_CONN_DATA 8
#define GO_NETCONN_FD 0
#define GO_NETFD_SYSFD 16

/* Set by the first Go TLS call: until then a syscall does not look for one. */
bool go_tls_active = false;

/*
 * A socket syscall st of TLS connection c: inside Go TLS calls of the same goroutine (g)? They
 * learn their socket; a Write's plaintext is sent now, at its first socket write. Returns the
 * entry time of the goroutine's Write call, if it is in one (its records leave now).
 */
static __always_inline __u64 go_tls_syscall(struct stash *st, struct conn *c, __u64 pid_tgid,
					    __u64 g)
{
	struct go_tls_key k = { .pid = pid_tgid >> 32, .g = g };
	__u64 write_ns = 0;

	if (!g)
		return 0;
	for (__u32 fn = TS_TLS_GO_READ; fn <= TS_TLS_GO_WRITE; fn++) {
		struct go_tls_call *call;

		k.fn = fn;
		call = bpf_map_lookup_elem(&go_tls_calls, &k);
		if (!call)
			continue;
		if (!call->fd1) {
			struct tls_key tk = { .pid = k.pid, .ssl = call->tconn };
			struct tls_sock v = { .conn_id = c->conn_id, .fd = st->fd };

			call->fd1 = st->fd + 1;
			bpf_map_update_elem(&tls_socks, &tk, &v, BPF_ANY);
		}
		if (fn != TS_TLS_GO_WRITE || syscall_dir(st->sys) != TS_DIR_OUT)
			continue;
		write_ns = call->enter_ns;
		if (!call->sent && call->len) {
			struct stash pt = { .fd = st->fd, .sys = TS_SYS_TLS_WRITE };

			call->sent = 1;
			pt.buf = call->buf;
			pt.enter_ns = call->enter_ns;
			tls_emit(&pt, c, pid_tgid, call->len, true);
		}
	}
	return write_ns;
}

static __always_inline int go_tls_enter(struct pt_regs *ctx, __u64 fn)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct go_tls_key k = { .pid = pid_tgid >> 32, .g = GO_REG_G(ctx) };
	struct go_tls_call call = {};

	if (!is_traced(k.pid) || !k.g)
		return 0;
	go_tls_active = true;
	call.fn = k.fn = fn;
	if (call.fn == TS_TLS_GO_CLOSE) {
		k.fn = TS_TLS_GO_READ;
		bpf_map_delete_elem(&go_tls_calls, &k);
		k.fn = TS_TLS_GO_WRITE;
		bpf_map_delete_elem(&go_tls_calls, &k);
		return 0;
	}
	/* A goroutine's calls do not overlap: one that reads has returned from its last Write. */
	if (call.fn == TS_TLS_GO_READ) {
		k.fn = TS_TLS_GO_WRITE;
		bpf_map_delete_elem(&go_tls_calls, &k);
		k.fn = TS_TLS_GO_READ;
	}
	call.tconn = GO_REG_ARG1(ctx);
	call.buf = GO_REG_ARG2(ctx);
	call.len = GO_REG_ARG3(ctx);
	call.enter_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&go_tls_calls, &k, &call, BPF_ANY);
	return 0;
}

/* The kind of call from the probe's cookie (Linux 5.15), or a program per kind before it. */
SEC("uprobe")
int ts_go_tls_enter(struct pt_regs *ctx)
{
	return go_tls_enter(ctx, bpf_get_attach_cookie(ctx));
}

#define GO_TLS_ENTER_OF(kind, name)                     \
	SEC("uprobe")                                   \
	int ts_go_tls_enter_##name(struct pt_regs *ctx) \
	{                                               \
		return go_tls_enter(ctx, kind);         \
	}
GO_TLS_ENTER_OF(TS_TLS_GO_READ, read)
GO_TLS_ENTER_OF(TS_TLS_GO_WRITE, write)
GO_TLS_ENTER_OF(TS_TLS_GO_CLOSE, close)

/* The socket of a *tls.Conn from its fields, if it is a traced TLS connection of pid. */
static __always_inline struct conn *go_tls_conn_fd(__u32 pid, __u64 tconn, __s32 *fdp)
{
	struct ts_conn_key ck = { .pid = pid };
	__u64 data, netfd;
	__s64 sysfd;
	struct conn *c;

	if (bpf_probe_read_user(&data, sizeof(data), (void *)(tconn + GO_TLS_CONN_DATA)) || !data ||
	    bpf_probe_read_user(&netfd, sizeof(netfd), (void *)(data + GO_NETCONN_FD)) || !netfd ||
	    bpf_probe_read_user(&sysfd, sizeof(sysfd), (void *)(netfd + GO_NETFD_SYSFD)) ||
	    sysfd < 0 || sysfd > 0x7fffffff)
		return NULL;
	ck.fd = (__s32)sysfd;
	c = bpf_map_lookup_elem(&conns, &ck);
	if (!c || !c->tls)
		return NULL;
	*fdp = ck.fd;
	return c;
}

/* At each RET of Read: the first result register (RAX) holds the byte count. */
SEC("uprobe")
int ts_go_tls_ret(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct go_tls_key k = { .pid = pid_tgid >> 32, .fn = TS_TLS_GO_READ, .g = GO_REG_G(ctx) };
	struct tls_key tk = { .pid = pid_tgid >> 32 };
	struct go_tls_call *cp, call;
	struct stash st = { .sys = TS_SYS_TLS_READ };
	long n = (long)GO_REG_RET1(ctx);
	struct conn *c;

	cp = bpf_map_lookup_elem(&go_tls_calls, &k);
	if (!cp)
		return 0;
	call = *cp;
	bpf_map_delete_elem(&go_tls_calls, &k);
	tk.ssl = call.tconn;
	if (call.fd1) {
		st.fd = call.fd1 - 1;
		c = tls_bind(&tk, (__u32)pid_tgid, st.fd, st.sys, call.enter_ns);
	} else {
		c = tls_known(&tk, &st.fd);
		if (!c && (c = go_tls_conn_fd(tk.pid, tk.ssl, &st.fd))) {
			struct tls_sock v = { .conn_id = c->conn_id, .fd = st.fd };

			bpf_map_update_elem(&tls_socks, &tk, &v, BPF_ANY);
		}
	}
	if (n <= 0)
		return 0;
	if (!c) {
		stat_add(TS_STAT_TLS_UNJOINED, 1);
		return 0;
	}
	st.enter_ns = call.enter_ns;
	st.buf = call.buf;
	tls_emit(&st, c, pid_tgid, n, true);
	return 0;
}

#endif
