/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * TLS: plaintext from the TLS library's own calls, joined to the socket it travels on.
 *
 * A connection whose first bytes in a direction are a TLS record is marked (tls_mark): from then
 * on its encrypted bytes are counted, not sent. Uprobes on SSL_read/SSL_write and their _ex
 * forms (attached by user space for each traced process alone, in every libssl it maps and in
 * executables that link OpenSSL in) send the plaintext instead, as TS_SYS_TLS_* records on that
 * connection, at the library call's times.
 *
 * Which socket an SSL object uses is learnt without reading OpenSSL's structs (their layout
 * changes between versions): the socket syscall made inside the call, when the library does
 * its own I/O; else the socket that object used before (checked to be the same connection
 * still); else the TLS socket the thread last read encrypted bytes from, which is how an
 * event loop with memory BIOs (Python's asyncio, uvloop) works: it reads the socket, then hands
 * the bytes to the library and asks for the plaintext, on the same thread.
 * Part of tokenscope.bpf.c, which includes the parts in order; not a header to include alone.
 */
#ifndef TS_BPF_TLS_H
#define TS_BPF_TLS_H

/* TLS record header: content type (change_cipher_spec 20 to application_data 23), then the
 * protocol version, 3.x with x at most 4. */
#define TLS_TYPE_MIN 0x14
#define TLS_TYPE_MAX 0x17
#define TLS_HEADER_BYTES 3

struct tls_key {
	__u32 pid;
	__u32 pad;
	__u64 ssl;
};

struct tls_sock {
	__u64 conn_id; /* the connection it was on: a closed one's fd may be another's now */
	__s32 fd;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, struct tls_key);
	__type(value, struct tls_sock);
} tls_socks SEC(".maps");

/* Whether the syscall's first bytes (ret of them) are a TLS record header. */
static __always_inline bool tls_sniff(const struct stash *st, long ret)
{
	__u64 p = st->buf;
	__u8 b[TLS_HEADER_BYTES];

	if (ret < TLS_HEADER_BYTES)
		return false;
	if (st->iovcnt) {
		struct iovec v;

		if (bpf_probe_read_user(&v, sizeof(v), (void *)st->buf) ||
		    v.iov_len < TLS_HEADER_BYTES)
			return false;
		p = (__u64)v.iov_base;
	}
	if (bpf_probe_read_user(b, sizeof(b), (void *)p))
		return false;
	return b[0] >= TLS_TYPE_MIN && b[0] <= TLS_TYPE_MAX && b[1] == 3 && b[2] <= 4;
}

/* Marks c as TLS and says so with a record without bytes. */
static __always_inline void tls_mark(struct conn *c, __u64 pid_tgid, __s32 fd, __u8 sys, __u64 ts)
{
	struct ts_data_event ev = {};
	__u8 dir = syscall_dir(sys);

	c->tls = 1;
	ev.hdr.type = TS_EV_DATA;
	ev.hdr.size = sizeof(ev);
	ev.hdr.pid = pid_tgid >> 32;
	ev.hdr.tid = (__u32)pid_tgid;
	ev.conn_id = c->conn_id;
	ev.enter_ns = ev.exit_ns = ts;
	ev.pos = ev.syscall_pos = c->pos[dir & 1];
	ev.fd = fd;
	ev.dir = dir;
	ev.syscall = sys;
	ev.status = TS_DATA_TLS;
	emit(&ev, sizeof(ev), 0);
}

/*
 * A socket syscall of a TLS connection moved ret encrypted bytes: counted, not sent. A read
 * notes when its bytes arrived, for the plaintext read that will return them, and which socket
 * this thread read last. The latest read's arrival is kept, not the oldest: the reads of the
 * handshake come before the first request's and must not lend it their time.
 */
static __always_inline void tls_cipher(struct stash *sp, const struct stash *st, struct conn *c,
				       long ret)
{
	stat_add(TS_STAT_TLS_CIPHER_BYTES, ret);
	if (syscall_dir(st->sys) != TS_DIR_IN)
		return;
	__u64 q = rx_take(c);

	if (q)
		c->tls_queued_ns = q;
	sp->tls_last_in1 = st->fd + 1;
}

/* The traced connection of the SSL object's socket (its fd in *fdp), or NULL. */
static __always_inline struct conn *tls_conn(struct stash *sp, __u64 pid_tgid, __u8 sys, __s32 *fdp)
{
	struct tls_key k = { .pid = pid_tgid >> 32, .ssl = sp->tls_ssl };
	struct tls_sock *ts = bpf_map_lookup_elem(&tls_socks, &k);
	struct tls_sock fresh = {};
	struct conn *c = NULL;
	__s32 fd = -1;

	if (sp->tls_fd1) {
		fd = sp->tls_fd1 - 1;
	} else if (ts) {
		struct ts_conn_key ck = { .pid = k.pid, .fd = ts->fd };

		c = bpf_map_lookup_elem(&conns, &ck);
		if (c && c->conn_id == ts->conn_id)
			fd = ts->fd;
	}
	if (fd < 0 && sp->tls_last_in1)
		fd = sp->tls_last_in1 - 1;
	if (fd < 0)
		return NULL;
	c = conn_get(k.pid, (__u32)pid_tgid, fd, sys, sp->tls_enter_ns);
	if (!c)
		return NULL;
	if (!ts || ts->fd != fd || ts->conn_id != c->conn_id) {
		fresh.conn_id = c->conn_id;
		fresh.fd = fd;
		bpf_map_update_elem(&tls_socks, &k, &fresh, BPF_ANY);
	}
	*fdp = fd;
	return c;
}

SEC("uprobe")
int BPF_KPROBE(ts_tls_enter, void *ssl, void *buf, __u64 num, void *done)
{
	__u64 fn = bpf_get_attach_cookie(ctx);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct stash *sp;

	if (!bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	sp = bpf_task_storage_get(&stash, bpf_get_current_task_btf(), NULL,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!sp)
		return 0;
	sp->tls_fn = fn;
	sp->tls_ssl = (__u64)ssl;
	sp->tls_buf = (__u64)buf;
	sp->tls_ex_bytes = fn == TS_TLS_READ_EX || fn == TS_TLS_WRITE_EX ? (__u64)done : 0;
	sp->tls_enter_ns = bpf_ktime_get_ns();
	sp->tls_fd1 = 0;
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(ts_tls_return, long ret)
{
	struct stash *sp = bpf_task_storage_get(&stash, bpf_get_current_task_btf(), NULL, 0);
	__u64 pid_tgid = bpf_get_current_pid_tgid(), bytes = 0;
	struct stash st = {};
	struct conn *c;
	__u8 fn;

	if (!sp || !sp->tls_fn)
		return 0;
	fn = sp->tls_fn;
	sp->tls_fn = 0;
	if (sp->tls_ex_bytes) {
		if ((int)ret != 1 ||
		    bpf_probe_read_user(&bytes, sizeof(bytes), (void *)sp->tls_ex_bytes))
			return 0;
	} else if ((int)ret > 0) {
		bytes = (int)ret;
	}
	if (!bytes)
		return 0;
	st.sys = fn == TS_TLS_READ || fn == TS_TLS_READ_EX ? TS_SYS_TLS_READ : TS_SYS_TLS_WRITE;
	c = tls_conn(sp, pid_tgid, st.sys, &st.fd);
	if (!c) {
		stat_add(TS_STAT_TLS_UNJOINED, 1);
		return 0;
	}
	if (!c->tls)
		c->tls = 1;
	st.enter_ns = sp->tls_enter_ns;
	st.buf = sp->tls_buf;
	__u64 queued = 0;

	if (st.sys == TS_SYS_TLS_READ) {
		queued = c->tls_queued_ns;
		c->tls_queued_ns = 0;
	}
	emit_data(&st, c, pid_tgid, bytes, bpf_ktime_get_ns(), queued);
	return 0;
}

#endif
