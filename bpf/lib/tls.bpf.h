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
 * changes between versions), and kept (map tls_socks, checked against the connection table, so
 * that a closed socket's fd taken by another connection is not believed):
 * - a socket syscall made inside one of its calls, when the library does its own I/O;
 * - else, when an event loop feeds the library memory BIOs (Python's asyncio, uvloop): the TLS
 *   socket the thread read encrypted bytes from, outside any TLS call, just before it entered a
 *   call of that object (SSL_do_handshake included). Such a loop reads a socket, hands the bytes
 *   to that socket's TLS object, and calls it; the read is taken by the first call after it, so
 *   a loop that reads several sockets before it decrypts any (uvloop does, during handshakes)
 *   binds each object at its handshake, when it was fresh.
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

/* One more socket write of TLS records, made to_ns - from_ns after the call it carries. */
static __always_inline void tls_wire(__u64 from_ns, __u64 to_ns)
{
	if (to_ns < from_ns)
		return;
	stat_add(TS_STAT_TLS_WIRE_NS, to_ns - from_ns);
	stat_add(TS_STAT_TLS_WIRE_WRITES, 1);
}

/*
 * A socket syscall of a TLS connection moved ret encrypted bytes: counted, not sent. A read
 * notes when its bytes arrived, for the plaintext read that will return them, and, made by the
 * event loop itself (outside a TLS call), which socket the thread's next TLS call is for. The
 * latest read's arrival is kept, not the oldest: the reads of the handshake come before the
 * first request's and must not lend it their time.
 */
static __always_inline void tls_cipher(struct stash *sp, const struct stash *st, struct conn *c,
				       long ret)
{
	stat_add(TS_STAT_TLS_CIPHER_BYTES, ret);
	if (syscall_dir(st->sys) != TS_DIR_IN) {
		/* A write: how long after the TLS write call its encrypted bytes left. */
		if (st->tls_fn == TS_TLS_WRITE || st->tls_fn == TS_TLS_WRITE_EX) {
			tls_wire(st->tls_enter_ns, st->enter_ns);
		} else if (c->tls_unsent_ns) {
			tls_wire(c->tls_unsent_ns, st->enter_ns);
			c->tls_unsent_ns = 0;
		}
		return;
	}
	__u64 q = rx_take(c);

	if (q)
		c->tls_queued_ns = q;
	if (!st->tls_fn)
		sp->tls_last_in1 = st->fd + 1;
}

/* The socket the SSL object was last seen on, if that connection is still the same. */
static __always_inline struct conn *tls_known(const struct tls_key *k, __s32 *fdp)
{
	struct tls_sock *ts = bpf_map_lookup_elem(&tls_socks, k);
	struct ts_conn_key ck = { .pid = k->pid };
	struct conn *c;

	if (!ts)
		return NULL;
	ck.fd = ts->fd;
	c = bpf_map_lookup_elem(&conns, &ck);
	if (!c || c->conn_id != ts->conn_id)
		return NULL;
	*fdp = ts->fd;
	return c;
}

/* The SSL object uses fd: its traced connection (made if need be), now kept in tls_socks. */
static __always_inline struct conn *tls_bind(const struct tls_key *k, __u32 tid, __s32 fd, __u8 sys,
					     __u64 ts)
{
	struct conn *c = conn_get(k->pid, tid, fd, sys, ts);
	struct tls_sock v = { .fd = fd };

	if (!c)
		return NULL;
	v.conn_id = c->conn_id;
	bpf_map_update_elem(&tls_socks, k, &v, BPF_ANY);
	return c;
}

/*
 * bytes of plaintext moved by a TLS call (st: its direction as sys, buffer, entry time) on c;
 * inside: the call did its socket I/O itself (else an event loop sends the records after it).
 */
static __always_inline void tls_emit(struct stash *st, struct conn *c, __u64 pid_tgid, __u64 bytes,
				     bool inside)
{
	__u64 queued = 0;

	c->tls = 1;
	if (st->sys == TS_SYS_TLS_READ) {
		queued = c->tls_queued_ns;
		c->tls_queued_ns = 0;
	} else if (!inside && !c->tls_unsent_ns) {
		/* Memory BIOs: the event loop writes the encrypted bytes after the call. */
		c->tls_unsent_ns = st->enter_ns;
	}
	emit_data(st, c, pid_tgid, bytes, bpf_ktime_get_ns(), queued);
}

static __always_inline int tls_enter(__u64 fn, void *ssl, void *buf, void *done)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct tls_key k = { .pid = pid_tgid >> 32, .ssl = (__u64)ssl };
	struct stash *sp;
	__s32 fd, fresh;

	if (!is_traced(k.pid))
		return 0;
	sp = thread_state(&stash, true);
	if (!sp)
		return 0;
	/* The event loop's read just before this call was for this object (memory BIOs). */
	fresh = sp->tls_last_in1;
	sp->tls_last_in1 = 0;
	if (fresh && !tls_known(&k, &fd))
		tls_bind(&k, (__u32)pid_tgid, fresh - 1, TS_SYS_TLS_READ, bpf_ktime_get_ns());
	sp->tls_fn = fn;
	sp->tls_ssl = (__u64)ssl;
	sp->tls_buf = (__u64)buf;
	sp->tls_ex_bytes = fn == TS_TLS_READ_EX || fn == TS_TLS_WRITE_EX ? (__u64)done : 0;
	sp->tls_enter_ns = bpf_ktime_get_ns();
	sp->tls_fd1 = 0;
	return 0;
}

/* The kind of call from the probe's cookie (Linux 5.15), or a program per kind before it. */
SEC("uprobe")
int BPF_KPROBE(ts_tls_enter, void *ssl, void *buf, __u64 num, void *done)
{
	return tls_enter(bpf_get_attach_cookie(ctx), ssl, buf, done);
}

#define TLS_ENTER_OF(kind, name)                                                         \
	SEC("uprobe")                                                                    \
	int BPF_KPROBE(ts_tls_enter_##name, void *ssl, void *buf, __u64 num, void *done) \
	{                                                                                \
		return tls_enter(kind, ssl, buf, done);                                  \
	}
TLS_ENTER_OF(TS_TLS_READ, read)
TLS_ENTER_OF(TS_TLS_READ_EX, read_ex)
TLS_ENTER_OF(TS_TLS_WRITE, write)
TLS_ENTER_OF(TS_TLS_WRITE_EX, write_ex)
TLS_ENTER_OF(TS_TLS_HANDSHAKE, handshake)

SEC("uretprobe")
int BPF_KRETPROBE(ts_tls_return, long ret)
{
	struct stash *sp = thread_state(&stash, false);
	__u64 pid_tgid = bpf_get_current_pid_tgid(), bytes = 0;
	struct tls_key k = { .pid = pid_tgid >> 32 };
	struct stash st = {};
	struct conn *c;
	__u8 fn;

	if (!sp || !sp->tls_fn)
		return 0;
	fn = sp->tls_fn;
	sp->tls_fn = 0;
	k.ssl = sp->tls_ssl;
	st.sys = fn == TS_TLS_READ || fn == TS_TLS_READ_EX ? TS_SYS_TLS_READ : TS_SYS_TLS_WRITE;
	/* A socket syscall inside the call: the library does its own I/O on that socket. */
	if (sp->tls_fd1) {
		st.fd = sp->tls_fd1 - 1;
		c = tls_bind(&k, (__u32)pid_tgid, st.fd, st.sys, sp->tls_enter_ns);
	} else {
		c = tls_known(&k, &st.fd);
	}
	if (fn == TS_TLS_HANDSHAKE)
		return 0;
	if (sp->tls_ex_bytes) {
		if ((int)ret != 1 ||
		    bpf_probe_read_user(&bytes, sizeof(bytes), (void *)sp->tls_ex_bytes))
			return 0;
	} else if ((int)ret > 0) {
		bytes = (int)ret;
	}
	if (!bytes)
		return 0;
	if (!c) {
		stat_add(TS_STAT_TLS_UNJOINED, 1);
		return 0;
	}
	st.enter_ns = sp->tls_enter_ns;
	st.buf = sp->tls_buf;
	tls_emit(&st, c, pid_tgid, bytes, sp->tls_fd1 != 0);
	return 0;
}

#endif
