/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Go's crypto/tls: plaintext from (*Conn).Read and (*Conn).Write of a Go executable, joined to
 * its socket as OpenSSL's is (tls.bpf.h), by a socket syscall made inside the call.
 *
 * Go differs in three ways. Its functions take their arguments in registers (the register ABI of
 * Go 1.17 and later: the receiver in RAX, the slice's pointer in RBX; the byte count returned in
 * RAX). A uretprobe replaces the return address on the stack, which Go moves when it grows a
 * goroutine's stack: user space probes every RET instruction of the function instead. And a
 * call is a goroutine's, which may park in the middle (a read that would block) and go on on
 * another thread: the call is kept by goroutine, whose g pointer Go keeps in R14, not by thread;
 * the socket syscall inside it is recognised by the same R14 in the syscall's registers (Go's
 * syscall paths leave it alone). The first call of a connection may find its bytes read already
 * by the handshake: handshakeContext is probed too, for the join alone. Read and Write call it
 * first themselves (it returns at once once done), so a goroutine's calls are kept by kind: a
 * handshake inside a Read does not take the Read's place. A Write's plaintext is whole at its
 * entry (the slice), and is sent at its first socket write, where the connection is certain: at
 * the return the goroutine may have waited long enough for the connection to be closed (a
 * client that read the end hangs up, and another goroutine closes the socket).
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
	for (__u32 fn = TS_TLS_GO_READ; fn <= TS_TLS_GO_HANDSHAKE; fn++) {
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

SEC("uprobe")
int ts_go_tls_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct go_tls_key k = { .pid = pid_tgid >> 32, .g = ctx->r14 };
	struct go_tls_call call = {};

	if (!bpf_map_lookup_elem(&traced, &k.pid) || !k.g)
		return 0;
	go_tls_active = true;
	call.fn = k.fn = bpf_get_attach_cookie(ctx);
	call.tconn = ctx->ax;
	call.buf = ctx->bx;
	call.len = ctx->cx;
	call.enter_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&go_tls_calls, &k, &call, BPF_ANY);
	return 0;
}

/* At each RET of the function: RAX holds the byte count (Read, Write). */
SEC("uprobe")
int ts_go_tls_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct go_tls_key k = { .pid = pid_tgid >> 32, .fn = bpf_get_attach_cookie(ctx),
				.g = ctx->r14 };
	struct tls_key tk = { .pid = pid_tgid >> 32 };
	struct go_tls_call *cp, call;
	struct stash st = {};
	long n = (long)ctx->ax;
	struct conn *c;

	cp = bpf_map_lookup_elem(&go_tls_calls, &k);
	if (!cp)
		return 0;
	call = *cp;
	bpf_map_delete_elem(&go_tls_calls, &k);
	tk.ssl = call.tconn;
	st.sys = call.fn == TS_TLS_GO_READ ? TS_SYS_TLS_READ : TS_SYS_TLS_WRITE;
	if (call.fd1) {
		st.fd = call.fd1 - 1;
		c = tls_bind(&tk, (__u32)pid_tgid, st.fd, st.sys, call.enter_ns);
	} else {
		c = tls_known(&tk, &st.fd);
	}
	/* A Write sent at its socket write is done; so is a handshake. */
	if (call.fn == TS_TLS_GO_HANDSHAKE || call.sent || n <= 0)
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
