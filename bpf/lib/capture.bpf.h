/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Capture: a connection found or made for a syscall, a bounded slice of its bytes copied into
 * the ring buffer piece by piece, and the records of a peer gone and of a close.
 * Part of tokenscope.bpf.c, which includes the parts in order; not a header to include alone.
 */
#ifndef TS_BPF_CAPTURE_H
#define TS_BPF_CAPTURE_H

/*
 * iovecs read from user memory at once: one bpf_probe_read_user per this many pieces instead of
 * one per piece. A power of two (the index into the batch is masked).
 */
#define IOV_BATCH 16

struct copy_ctx {
	__u64 iov; /* user iovec array, or 0 for a plain buffer */
	__u64 iovcnt;
	__u64 iov_idx;	 /* next iovec to walk */
	__u64 batch_idx; /* next iovec in batch[] */
	__u64 batch_len; /* iovecs in batch[] */
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
	/* Twice the batch, so that the verifier can prove a masked read length stays inside. */
	struct iovec batch[2 * IOV_BATCH];
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
	fresh.conn_id = next_id(&next_conn_id);
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
		struct iovec *v;

		if (!cc->iov || cc->iov_idx >= cc->iovcnt || cc->iov_idx >= TS_IOV_MAX) {
			/* The returned bytes lie beyond the iovecs we walk. */
			stat_add(TS_STAT_UNCAPTURED_BYTES, cc->remaining);
			cc->pos += cc->remaining;
			cc->remaining = 0;
			return 0;
		}
		if (cc->batch_idx >= cc->batch_len) {
			void *src = (void *)(cc->iov + cc->iov_idx * sizeof(struct iovec));
			__u64 k = cc->iovcnt - cc->iov_idx;

			if (k > IOV_BATCH)
				k = IOV_BATCH;
			k *= sizeof(struct iovec);
			/* Hide k's known range from clang so the mask stays for the verifier. */
			asm volatile("" : "+r"(k));
			k &= sizeof(s->batch) - 1;
			if (bpf_probe_read_user(s->batch, k, src)) {
				/* An unreadable iovec array: the rest of the syscall is a gap. */
				stat_add(TS_STAT_COPY_FAILED, 1);
				stat_add(TS_STAT_UNCAPTURED_BYTES, cc->remaining);
				cc->pos += cc->remaining;
				cc->remaining = 0;
				return 0;
			}
			cc->batch_idx = 0;
			cc->batch_len = k / sizeof(struct iovec);
		}
		v = &s->batch[cc->batch_idx & (IOV_BATCH - 1)];
		cc->batch_idx++;
		cc->iov_idx++;
		cc->seg = (__u64)v->iov_base;
		cc->seg_left = v->iov_len < cc->remaining ? v->iov_len : cc->remaining;
		/* A piece's first bytes are copied in the step that found it. */
		if (cc->seg_left == 0)
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

/* copy_step for a loop of calls: a global function, verified once rather than at each call. */
__noinline int copy_step_call(__u32 i)
{
	return copy_step(i, NULL);
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
	if (atomics_ok()) {
		s->ev.syscall_pos = __sync_fetch_and_add(&c->pos[dir & 1], ret);
	} else {
		/* Two threads writing one socket at once (before Linux 5.12) may get the same
		 * offset: the stream shows a gap or an overlap there, counted as such. */
		s->ev.syscall_pos = c->pos[dir & 1];
		__sync_fetch_and_add(&c->pos[dir & 1], ret);
	}
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
	cc->batch_idx = 0;
	cc->batch_len = 0;
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
	if (!st->iovcnt && want <= TS_CHUNK_BYTES) {
		/* One piece from one buffer (a streamed frame's write): the loop's first step and
		 * its flush, without the loop. */
		__u64 n = want;

		/* Hide n's known range from clang so the mask stays for the verifier. */
		asm volatile("" : "+r"(n));
		n &= 2 * TS_CHUNK_BYTES - 1;
		if (n && bpf_probe_read_user(s->data, n, (void *)st->buf)) {
			/* Unreadable user memory: the syscall's bytes become a gap. */
			stat_add(TS_STAT_COPY_FAILED, 1);
			stat_add(TS_STAT_UNCAPTURED_BYTES, n);
			n = 0;
		}
		cc->fill = n;
		copy_flush(s, cc, true);
	} else if (loop_ok()) {
		bpf_loop(COPY_LOOPS, copy_step, NULL, 0);
	} else {
		/* Before Linux 5.17: the same steps from a bounded loop of calls to a function the
		 * verifier checks once. */
		for (__u32 i = 0; i < COPY_LOOPS; i++)
			if (copy_step_call(i))
				break;
	}
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

#endif
