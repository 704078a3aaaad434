// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "pipeline/h2.h"
#include "pipeline/http.h"

#define H2_FLAG_END_STREAM 0x1
#define H2_FLAG_ACK 0x1
#define H2_FLAG_END_HEADERS 0x4
#define H2_FLAG_PADDED 0x8
#define H2_FLAG_PRIORITY 0x20
#define H2_SETTINGS_HEADER_TABLE_SIZE 1
/* The default dynamic table size before any SETTINGS (RFC 9113 section 6.5.2). */
#define H2_TABLE_DEFAULT 4096
/* SETTINGS_MAX_FRAME_SIZE's initial value: a larger frame needs the peer's SETTINGS, which a
 * connection joined in its middle was not seen to send. Only the mid-way recogniser uses it. */
#define H2_FRAME_PLAUSIBLE_MAX 16384

/* ---- the inflater's memory, charged to the budget ---- */

/* Each block carries its size in front, so that free can give it back. */
struct h2_block {
	size_t size;
	max_align_t align[];
};

static void *h2_malloc(size_t size, void *ud)
{
	struct h2_block *b;

	if (!budget_take(ud, size + sizeof(*b)))
		return NULL;
	b = malloc(size + sizeof(*b));
	if (!b) {
		budget_give(ud, size + sizeof(*b));
		return NULL;
	}
	b->size = size;
	return b->align;
}

static void h2_mfree(void *ptr, void *ud)
{
	struct h2_block *b;

	if (!ptr)
		return;
	b = (struct h2_block *)((char *)ptr - offsetof(struct h2_block, align));
	budget_give(ud, b->size + sizeof(*b));
	free(b);
}

static void *h2_calloc(size_t n, size_t size, void *ud)
{
	void *p;

	if (size && n > SIZE_MAX / size)
		return NULL;
	p = h2_malloc(n * size, ud);
	if (p)
		memset(p, 0, n * size);
	return p;
}

static void *h2_realloc(void *ptr, size_t size, void *ud)
{
	struct h2_block *b;
	void *q;

	if (!ptr)
		return h2_malloc(size, ud);
	b = (struct h2_block *)((char *)ptr - offsetof(struct h2_block, align));
	q = h2_malloc(size, ud);
	if (!q)
		return NULL;
	memcpy(q, ptr, b->size < size ? b->size : size);
	h2_mfree(ptr, ud);
	return q;
}

/* ---- setup ---- */

static int h2_desync(struct h2_parser *p, int err)
{
	p->state = H2_ST_DESYNC;
	if (!p->error)
		p->error = err;
	return -EPROTO;
}

int h2_init(struct h2_parser *p, bool preface, const struct h2_callbacks *cb, void *ctx,
	    struct budget *budget)
{
	memset(p, 0, sizeof(*p));
	p->cb = cb;
	p->ctx = ctx;
	p->budget = budget;
	p->state = preface ? H2_ST_PREFACE : H2_ST_HEADER;
	p->mem = (nghttp2_mem){
		.mem_user_data = budget,
		.malloc = h2_malloc,
		.free = h2_mfree,
		.calloc = h2_calloc,
		.realloc = h2_realloc,
	};
	if (nghttp2_hd_inflate_new2(&p->inflater, &p->mem)) {
		p->inflater = NULL;
		h2_desync(p, -ENOMEM);
		return -ENOMEM;
	}
	p->table_max = H2_TABLE_DEFAULT;
	return 0;
}

void h2_free(struct h2_parser *p)
{
	if (p->inflater)
		nghttp2_hd_inflate_del(p->inflater);
	p->inflater = NULL;
	p->state = H2_ST_DESYNC;
}

bool h2_desynced(const struct h2_parser *p)
{
	return p->state == H2_ST_DESYNC;
}

void h2_set_table_max(struct h2_parser *p, uint32_t size)
{
	if (size > H2_TABLE_MAX)
		size = H2_TABLE_MAX;
	if (size <= p->table_max || !p->inflater)
		return;
	/* Between header blocks only: a block still open takes the new bound when it ends. */
	if (p->in_block) {
		p->pending_table_max = size;
		return;
	}
	if (nghttp2_hd_inflate_change_table_size(p->inflater, size) == 0)
		p->table_max = size;
}

/* ---- header fields ---- */

static void h2_head_reset(struct h2_head *h)
{
	memset(h, 0, sizeof(*h));
	h->content_length = -1;
	h->grpc_status = -1;
}

static bool h2_name_is(const nghttp2_nv *nv, const char *lit)
{
	return nv->namelen == strlen(lit) && memcmp(nv->name, lit, nv->namelen) == 0;
}

static void h2_copy(char *dst, size_t cap, const uint8_t *s, size_t n)
{
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, s, n);
	dst[n] = '\0';
}

/* Decimal digits only, at most 18 of them; -1 otherwise. */
static int64_t h2_decimal(const uint8_t *s, size_t n)
{
	int64_t v = 0;

	if (!n || n > 18)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* Field names arrive lower-cased (HTTP/2 requires it; a block that breaks the rule only loses
 * the field). */
static void h2_field(struct h2_head *h, const nghttp2_nv *nv, const struct req_label_set *labels)
{
	if (h2_name_is(nv, ":method")) {
		h2_copy(h->method, sizeof(h->method), nv->value, nv->valuelen);
	} else if (h2_name_is(nv, ":path")) {
		h2_copy(h->path, sizeof(h->path), nv->value, nv->valuelen);
	} else if (h2_name_is(nv, ":status")) {
		int64_t v = nv->valuelen == 3 ? h2_decimal(nv->value, 3) : -1;

		h->status = v >= 100 ? (int)v : 0;
	} else if (h2_name_is(nv, "content-type")) {
		http_media_type(h->content_type, sizeof(h->content_type), (const char *)nv->value,
				nv->valuelen);
	} else if (h2_name_is(nv, "content-length")) {
		h->content_length = h2_decimal(nv->value, nv->valuelen);
	} else if (h2_name_is(nv, "grpc-status")) {
		int64_t v = h2_decimal(nv->value, nv->valuelen);

		h->grpc_status = v >= 0 && v < 1000 ? (int)v : -1;
	} else {
		if (!tracectx_field(&h->trace, (const char *)nv->name, nv->namelen,
				    (const char *)nv->value, nv->valuelen))
			if (!slo_head_field(&h->slo, (const char *)nv->name, nv->namelen,
					    (const char *)nv->value, nv->valuelen))
				req_labels_header(labels, &h->labels, (const char *)nv->name,
						  nv->namelen, (const char *)nv->value,
						  nv->valuelen);
	}
}

/* Feeds header block bytes to the inflater; final: the block ends with them. */
static int h2_inflate(struct h2_parser *p, const uint8_t *in, size_t n, bool final)
{
	for (;;) {
		nghttp2_nv nv;
		int flags = 0;
		ssize_t used = nghttp2_hd_inflate_hd2(p->inflater, &nv, &flags, in, n, final);

		if (used < 0)
			return h2_desync(p, used == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EBADMSG);
		in += used;
		n -= (size_t)used;
		if ((flags & NGHTTP2_HD_INFLATE_EMIT) && !p->block_promise)
			h2_field(&p->head, &nv, p->labels);
		if (flags & NGHTTP2_HD_INFLATE_FINAL) {
			nghttp2_hd_inflate_end_headers(p->inflater);
			return 0;
		}
		if (!(flags & NGHTTP2_HD_INFLATE_EMIT) && n == 0)
			return 0;
	}
}

/* ---- frames ---- */

static uint32_t h2_u32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Whether a frame header is one a sender writes: a known type with its fixed size and stream
 * rule, or an extension type (RFC 9113 section 5.5: ignored). */
static bool h2_header_valid(uint8_t type, uint32_t len, uint8_t flags, uint32_t stream)
{
	switch (type) {
	case H2_DATA:
	case H2_HEADERS:
	case H2_CONTINUATION:
		return stream != 0;
	case H2_PRIORITY:
		return stream != 0 && len == 5;
	case H2_RST_STREAM:
		return stream != 0 && len == 4;
	case H2_SETTINGS:
		return stream == 0 && len % 6 == 0 && (!(flags & H2_FLAG_ACK) || len == 0);
	case H2_PUSH_PROMISE:
		return stream != 0 && len >= 4;
	case H2_PING:
		return stream == 0 && len == 8;
	case H2_GOAWAY:
		return stream == 0 && len >= 8;
	case H2_WINDOW_UPDATE:
		return len == 4;
	default:
		return true;
	}
}

static void h2_frame_done(struct h2_parser *p, uint64_t ts);

/* The payload proper is over: the padding follows, or the frame is done. */
static void h2_payload_end(struct h2_parser *p, uint64_t ts)
{
	if (p->pad) {
		p->remaining = p->pad;
		p->state = H2_ST_PADDING;
	} else {
		h2_frame_done(p, ts);
	}
}

/* Moves past the pad length and priority fields to the payload proper. */
static int h2_enter_payload(struct h2_parser *p, uint64_t ts)
{
	if (p->pad > p->remaining)
		return h2_desync(p, -EPROTO);
	p->remaining -= p->pad;
	p->state = H2_ST_PAYLOAD;
	p->got = 0;
	/* No payload proper (an empty padded DATA, a padded header block of no bytes): its
	 * padding is still to come. */
	if (!p->remaining)
		h2_payload_end(p, ts);
	return 0;
}

/* After the pad length: the priority fields of a HEADERS frame, the promised stream of a
 * PUSH_PROMISE, or the payload. */
static int h2_after_pad(struct h2_parser *p, uint64_t ts)
{
	p->got = 0;
	if (p->type == H2_HEADERS && (p->flags & H2_FLAG_PRIORITY)) {
		if (p->remaining < 5)
			return h2_desync(p, -EPROTO);
		p->state = H2_ST_PRIO;
		return 0;
	}
	if (p->type == H2_PUSH_PROMISE) {
		if (p->remaining < 4)
			return h2_desync(p, -EPROTO);
		p->state = H2_ST_PROMISED;
		return 0;
	}
	return h2_enter_payload(p, ts);
}

static int h2_frame_start(struct h2_parser *p, uint64_t ts)
{
	p->len = (uint32_t)p->hdr[0] << 16 | (uint32_t)p->hdr[1] << 8 | p->hdr[2];
	p->type = p->hdr[3];
	p->flags = p->hdr[4];
	p->stream = h2_u32(p->hdr + 5) & 0x7fffffffu;
	p->remaining = p->len;
	p->pad = 0;
	p->got = 0;
	if (!h2_header_valid(p->type, p->len, p->flags, p->stream))
		return h2_desync(p, -EPROTO);
	/* A header block admits nothing but its own CONTINUATIONs until it ends. */
	if (p->in_block != (p->type == H2_CONTINUATION))
		return h2_desync(p, -EPROTO);
	if (p->in_block && p->stream != p->block_stream)
		return h2_desync(p, -EPROTO);
	p->frames++;
	if (p->type == H2_HEADERS || p->type == H2_PUSH_PROMISE) {
		h2_head_reset(&p->head);
		p->in_block = true;
		p->block_stream = p->stream;
		p->block_end_stream = p->type == H2_HEADERS && (p->flags & H2_FLAG_END_STREAM);
		p->block_promise = p->type == H2_PUSH_PROMISE;
	}
	if ((p->type == H2_DATA || p->type == H2_HEADERS || p->type == H2_PUSH_PROMISE) &&
	    (p->flags & H2_FLAG_PADDED)) {
		if (!p->remaining)
			return h2_desync(p, -EPROTO);
		p->state = H2_ST_PAD_LEN;
		return 0;
	}
	return h2_after_pad(p, ts);
}

static void h2_frame_done(struct h2_parser *p, uint64_t ts)
{
	/* The end of a block is fed as no bytes at a real address: the inflater and h2_inflate
	 * move the pointer by what they used, and moving NULL, even by 0, is undefined. */
	static const uint8_t block_end;
	const struct h2_callbacks *cb = p->cb;

	p->state = H2_ST_HEADER;
	p->got = 0;
	switch (p->type) {
	case H2_DATA:
		if ((p->flags & H2_FLAG_END_STREAM) && cb->on_end_stream)
			cb->on_end_stream(p->ctx, p->stream, ts);
		break;
	case H2_HEADERS:
	case H2_CONTINUATION:
	case H2_PUSH_PROMISE:
		if (!(p->flags & H2_FLAG_END_HEADERS))
			break;
		if (h2_inflate(p, &block_end, 0, true) < 0)
			return;
		p->in_block = false;
		p->header_blocks++;
		if (p->pending_table_max) {
			uint32_t m = p->pending_table_max;

			p->pending_table_max = 0;
			h2_set_table_max(p, m);
		}
		tracectx_finish(&p->head.trace);
		if (!p->block_promise && cb->on_headers)
			cb->on_headers(p->ctx, p->block_stream, &p->head, p->block_end_stream, ts);
		break;
	case H2_RST_STREAM:
		if (cb->on_rst)
			cb->on_rst(p->ctx, p->stream, h2_u32(p->fixed), ts);
		break;
	case H2_GOAWAY:
		if (cb->on_goaway)
			cb->on_goaway(p->ctx, h2_u32(p->fixed) & 0x7fffffffu, h2_u32(p->fixed + 4),
				      ts);
		break;
	default:
		break;
	}
}

/* The payload proper of the current frame: n bytes at buf, at most p->remaining. */
static int h2_payload(struct h2_parser *p, const uint8_t *buf, size_t n, uint64_t ts)
{
	switch (p->type) {
	case H2_DATA:
		if (p->cb->on_data)
			p->cb->on_data(p->ctx, p->stream, buf, n, ts);
		return 0;
	case H2_HEADERS:
	case H2_CONTINUATION:
	case H2_PUSH_PROMISE:
		return h2_inflate(p, buf, n, false);
	case H2_RST_STREAM:
	case H2_GOAWAY:
		for (size_t i = 0; i < n && p->got < 8; i++)
			p->fixed[p->got++] = buf[i];
		return 0;
	case H2_SETTINGS:
		for (size_t i = 0; i < n; i++) {
			p->fixed[p->got++] = buf[i];
			if (p->got < 6)
				continue;
			p->got = 0;
			if ((p->fixed[0] << 8 | p->fixed[1]) == H2_SETTINGS_HEADER_TABLE_SIZE &&
			    p->cb->on_table_size)
				p->cb->on_table_size(p->ctx, h2_u32(p->fixed + 2));
		}
		return 0;
	default:
		return 0; /* PRIORITY, PING, WINDOW_UPDATE, extensions: nothing we use */
	}
}

/* One step of the state machine; returns the bytes used, or -EPROTO. */
static long h2_step(struct h2_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	size_t n;

	switch (p->state) {
	case H2_ST_PREFACE:
		n = H2_PREFACE_LEN - p->got;
		if (n > len)
			n = len;
		if (memcmp(buf, &H2_PREFACE[p->got], n))
			return h2_desync(p, -EPROTO);
		p->got += n;
		if (p->got == H2_PREFACE_LEN) {
			p->state = H2_ST_HEADER;
			p->got = 0;
		}
		return (long)n;
	case H2_ST_HEADER:
		n = H2_FRAME_HEADER_LEN - p->got;
		if (n > len)
			n = len;
		memcpy(p->hdr + p->got, buf, n);
		p->got += n;
		if (p->got == H2_FRAME_HEADER_LEN && h2_frame_start(p, ts) < 0)
			return -EPROTO;
		return (long)n;
	case H2_ST_PAD_LEN:
		p->pad = buf[0];
		p->remaining--;
		return h2_after_pad(p, ts) < 0 ? -EPROTO : 1;
	case H2_ST_PRIO:
	case H2_ST_PROMISED: {
		size_t need = (p->state == H2_ST_PRIO ? 5 : 4) - p->got;

		n = need < len ? need : len;
		p->got += n;
		p->remaining -= (uint32_t)n;
		if (n == need && h2_enter_payload(p, ts) < 0)
			return -EPROTO;
		return (long)n;
	}
	case H2_ST_PAYLOAD:
		n = p->remaining < len ? p->remaining : len;
		p->remaining -= (uint32_t)n;
		if (h2_payload(p, buf, n, ts) < 0)
			return -EPROTO;
		if (!p->remaining)
			h2_payload_end(p, ts);
		return (long)n;
	case H2_ST_PADDING:
		n = p->remaining < len ? p->remaining : len;
		p->remaining -= (uint32_t)n;
		if (!p->remaining)
			h2_frame_done(p, ts);
		return (long)n;
	default:
		return -EPROTO;
	}
}

int h2_feed(struct h2_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	if (p->state == H2_ST_DESYNC)
		return -EPROTO;
	p->last_ts = ts;
	while (len) {
		long n = h2_step(p, buf, len, ts);

		if (n < 0 || p->state == H2_ST_DESYNC)
			return -EPROTO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Whether the current frame's payload may lose bytes without losing our place: the parser
 * only counts them (DATA) or never reads them. */
static bool h2_skippable(const struct h2_parser *p)
{
	if (p->state == H2_ST_PADDING)
		return true;
	if (p->state != H2_ST_PAYLOAD)
		return false;
	switch (p->type) {
	case H2_DATA:
	case H2_PRIORITY:
	case H2_PING:
	case H2_WINDOW_UPDATE:
		return true;
	case H2_GOAWAY:
		return p->got >= 8; /* the debug data after the two fields */
	default:
		return p->type > H2_CONTINUATION;
	}
}

void h2_gap(struct h2_parser *p, size_t len)
{
	while (len && p->state != H2_ST_DESYNC) {
		size_t n;

		if (!h2_skippable(p)) {
			h2_desync(p, -EPIPE);
			return;
		}
		n = p->remaining < len ? p->remaining : len;
		if (p->state == H2_ST_PAYLOAD && p->type == H2_DATA && n && p->cb->on_data_gap)
			p->cb->on_data_gap(p->ctx, p->stream, n);
		p->remaining -= (uint32_t)n;
		len -= n;
		if (p->remaining)
			continue;
		if (p->state == H2_ST_PAYLOAD)
			h2_payload_end(p, p->last_ts);
		else
			h2_frame_done(p, p->last_ts);
		/* The next frame header was lost too: our place is gone. */
		if (len && p->state == H2_ST_HEADER)
			h2_desync(p, -EPIPE);
	}
}

bool h2_looks_like_preface(const uint8_t *buf, size_t len)
{
	return len > 0 && memcmp(buf, H2_PREFACE, len < H2_PREFACE_LEN ? len : H2_PREFACE_LEN) == 0;
}

/* The flags a frame type defines: a sender sets no others (a recogniser may be strict where a
 * parser is lenient). */
static bool h2_flags_known(uint8_t type, uint8_t flags)
{
	static const uint8_t known[] = {
		[H2_DATA] = H2_FLAG_END_STREAM | H2_FLAG_PADDED,
		[H2_HEADERS] =
		    H2_FLAG_END_STREAM | H2_FLAG_END_HEADERS | H2_FLAG_PADDED | H2_FLAG_PRIORITY,
		[H2_PRIORITY] = 0,
		[H2_RST_STREAM] = 0,
		[H2_SETTINGS] = H2_FLAG_ACK,
		[H2_PUSH_PROMISE] = H2_FLAG_END_HEADERS | H2_FLAG_PADDED,
		[H2_PING] = H2_FLAG_ACK,
		[H2_GOAWAY] = 0,
		[H2_WINDOW_UPDATE] = 0,
		[H2_CONTINUATION] = H2_FLAG_END_HEADERS,
	};

	return type <= H2_CONTINUATION && !(flags & ~known[type]);
}

bool h2_looks_like_frame(const uint8_t *buf, size_t len)
{
	size_t off = 0;

	/* Whole frames, the first at least, each header plausible: binary protocols of small
	 * integers look like one frame header often enough (a little-endian 4 is a 256 KiB DATA
	 * frame on stream 1), rarely like a sequence of frames that ends where the bytes do. */
	while (off + H2_FRAME_HEADER_LEN <= len) {
		const uint8_t *h = buf + off;
		uint32_t flen = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
		uint32_t stream = h2_u32(h + 5);

		if (flen > H2_FRAME_PLAUSIBLE_MAX || (stream & 0x80000000u) ||
		    !h2_flags_known(h[3], h[4]) || !h2_header_valid(h[3], flen, h[4], stream))
			return false;
		if (off == 0 && H2_FRAME_HEADER_LEN + flen > len)
			return false;
		off += H2_FRAME_HEADER_LEN + flen;
	}
	return off > 0;
}

bool h2_looks_like_server_preface(const uint8_t *buf, size_t len)
{
	return len >= H2_FRAME_HEADER_LEN && buf[3] == H2_SETTINGS && buf[4] == 0 &&
	       h2_looks_like_frame(buf, len);
}
