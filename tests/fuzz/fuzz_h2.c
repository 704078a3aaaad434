// SPDX-License-Identifier: MIT
/*
 * user/pipeline/h2.c, one direction of an HTTP/2 connection (the client's, preface first, or the
 * server's), fed where the input says, with gaps, a memory budget and header table bounds; the
 * DATA of each stream goes through a gRPC splitter of its own (user/pipeline/grpc.c), as
 * h2conn.c does it. Or the input is one gRPC stream direction's DATA, fed to grpc.c alone.
 *
 * Input:
 *   u8  flags    bit 0: the client's direction (the preface first); bit 1: control bytes with
 *                the top bit set are gaps; bits 2-4: k, a budget of 256 << 2k bytes for the
 *                inflater (0: one without a cap); bit 5: the payload is gRPC DATA, for grpc.c
 *                alone; bit 6: a SETTINGS_HEADER_TABLE_SIZE in the payload bounds this same
 *                inflater (h2_set_table_max, as h2conn.c does for the other direction); bit 7:
 *                u32 table and u16 at follow: h2_set_table_max(table) once `at` bytes (modulo
 *                the payload's length) have gone by
 *   u8  nctl     control bytes that follow (modulo H2_FUZZ_CTL_MAX), used in turn: a gap of
 *                (v & 0x7f) + 1 bytes (dropped from the payload) or a feed of v bytes (0: the
 *                rest)
 *   u8  ctl[nctl]
 *   ... payload
 *
 * Properties:
 *   - after the parser desyncs, every feed returns -EPROTO and no callback fires; a feed
 *     returns -EPROTO exactly when the parser is desynced after it;
 *   - every callback's ts is that of the feed it came from, or, for an event a gap completed
 *     (the padding of a frame skipped), that of the last feed; DATA comes only from feeds and
 *     points into the bytes of the feed, data gaps only from gaps;
 *   - data bytes delivered never exceed the bytes fed, nor data bytes lost the bytes lost;
 *   - header fields are terminated inside their buffers, content types lower-cased, statuses
 *     and grpc-status in range;
 *   - the budget is never overdrawn, and is back to 0 after h2_free;
 *   - without gaps: the payload fed in one call (cut only where the table bound changes) gives
 *     the same events, header fields and data bytes, the same counters and the same parser
 *     position as fed at the input's points; both agree with a frame walker written here from
 *     RFC 9113 on events, frame count, desync and where the bytes end (in the preface, inside
 *     a frame, or how far into a frame header); it knows framing only: where the inflater
 *     refuses a header block, the parser's events are a prefix of the walker's;
 *   - gRPC: every message carries the ts of the feed that completed it (or of the last feed,
 *     for one a gap completed), is damaged only after a gap, and without gaps the messages
 *     of each stream are those a plain walk of its length prefixes finds;
 *   - h2_looks_like_frame holds for a read of the first frame alone when it holds for more,
 *     and the server preface is a SETTINGS frame it accepts.
 */
#include <errno.h>

#include "fuzz.h"
#include "pipeline/grpc.h"
#include "pipeline/h2.h"

#define H2_FUZZ_CTL_MAX 32
#define H2_FUZZ_BUDGET_UNIT 256
/* Streams whose DATA gets a gRPC splitter; those beyond are only framed. */
#define H2_FUZZ_STREAMS 8

enum {
	HF_PREFACE = 1,
	HF_GAPS = 2,
	HF_GRPC = 32,
	HF_OWN_TABLE = 64,
	HF_TABLE_AT = 128,
};

/* RFC 9113 section 6 */
#define F_END_STREAM 0x1
#define F_ACK 0x1
#define F_END_HEADERS 0x4
#define F_PADDED 0x8
#define F_PRIORITY 0x20

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		abort();
	return p;
}

/* ---- events, as the parser reports them and as the frame walker expects them ---- */

struct ev {
	char type;	     /* 'H' header block, 'D' data, 'E' END_STREAM, 'R' RST_STREAM,
			      * 'G' GOAWAY, 'T' SETTINGS_HEADER_TABLE_SIZE */
	uint32_t stream;     /* GOAWAY: the last stream */
	uint32_t val;	     /* H: end_stream; R, G: the error code; T: the size */
	struct h2_head head; /* H, from the parser only */
	size_t off, len;     /* D: its bytes in the list's data */
};

struct ev_list {
	struct ev *e;
	size_t n, cap;
	uint8_t *data;
	size_t dlen, dcap;
};

static struct ev *ev_add(struct ev_list *l, char type, uint32_t stream, uint32_t val)
{
	struct ev *e;

	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		l->e = xrealloc(l->e, l->cap * sizeof(*l->e));
	}
	e = &l->e[l->n++];
	memset(e, 0, sizeof(*e));
	e->type = type;
	e->stream = stream;
	e->val = val;
	return e;
}

/* DATA bytes; consecutive ones of one stream are one event, however they were framed or fed. */
static void ev_data(struct ev_list *l, uint32_t stream, const uint8_t *p, size_t n)
{
	struct ev *e = l->n ? &l->e[l->n - 1] : NULL;

	if (l->dlen + n > l->dcap) {
		l->dcap = (l->dlen + n) * 2;
		l->data = xrealloc(l->data, l->dcap);
	}
	memcpy(l->data + l->dlen, p, n);
	if (!e || e->type != 'D' || e->stream != stream) {
		e = ev_add(l, 'D', stream, 0);
		e->off = l->dlen;
	}
	e->len += n;
	l->dlen += n;
}

static void ev_free(struct ev_list *l)
{
	free(l->e);
	free(l->data);
	memset(l, 0, sizeof(*l));
}

static void ev_print(const char *what, const struct ev_list *l, size_t i)
{
	const struct ev *e;

	if (i >= l->n) {
		fprintf(stderr, "%s: event %zu: none (%zu events)\n", what, i, l->n);
		return;
	}
	e = &l->e[i];
	fprintf(stderr, "%s: event %zu of %zu: %c stream %u val %u", what, i, l->n, e->type,
		e->stream, e->val);
	if (e->type == 'D')
		fuzz_hexdump(" data", l->data + e->off, e->len);
	else
		fputc('\n', stderr);
}

FUZZ_CHECKER static bool head_same(const struct h2_head *a, const struct h2_head *b)
{
	return !strcmp(a->method, b->method) && !strcmp(a->path, b->path) &&
	       !strcmp(a->content_type, b->content_type) && a->status == b->status &&
	       a->content_length == b->content_length && a->grpc_status == b->grpc_status;
}

/*
 * Whether got's events are want's (heads: whether to compare the header fields too). prefix:
 * got may stop early, its last data event short of want's.
 */
FUZZ_CHECKER static bool ev_same(const struct ev_list *got, const struct ev_list *want, bool heads,
				 bool prefix, size_t *where)
{
	if (got->n > want->n || (!prefix && got->n != want->n)) {
		*where = got->n < want->n ? got->n : want->n;
		return false;
	}
	for (size_t i = 0; i < got->n; i++) {
		const struct ev *a = &got->e[i], *b = &want->e[i];
		bool last = prefix && i + 1 == got->n;

		*where = i;
		if (a->type != b->type || a->stream != b->stream || a->val != b->val)
			return false;
		if (heads && a->type == 'H' && !head_same(&a->head, &b->head))
			return false;
		if (a->type == 'D' && (a->len > b->len || (!last && a->len != b->len) ||
				       memcmp(got->data + a->off, want->data + b->off, a->len)))
			return false;
	}
	return true;
}

/* ---- the gRPC splitters ---- */

struct hctx;

struct gslot {
	struct hctx *c;
	uint32_t id;
	bool used, desynced;
	bool gapped; /* bytes lost since the last message */
	struct grpc_parser gp;
	uint8_t *bytes; /* the DATA bytes fed (gap-free runs: the walker reads them) */
	size_t n, cap;
	uint64_t total, taken; /* bytes fed or lost; of them, the messages' with their prefixes */
	uint32_t *lens;	       /* the messages' lengths */
	size_t nlens, lcap;
};

/* ---- one run of a parser ---- */

struct hctx {
	struct h2_parser p;
	struct budget budget;
	bool own_table, grpc, in_feed, dead, gapped;
	uint64_t ts, last_ts;
	const uint8_t *feed; /* the current feed's bytes */
	size_t feed_len;
	uint64_t fed, lost, data, data_lost;
	struct ev_list ev;
	struct gslot g[H2_FUZZ_STREAMS];
};

static void check_ts(const struct hctx *c, uint64_t ts, const char *what)
{
	if (c->in_feed)
		FUZZ_CHECK(ts == c->ts, "%s with ts %llu from the feed of ts %llu", what,
			   (unsigned long long)ts, (unsigned long long)c->ts);
	else
		FUZZ_CHECK(ts == c->last_ts, "%s with ts %llu from a gap, the last feed had %llu",
			   what, (unsigned long long)ts, (unsigned long long)c->last_ts);
}

static void check_alive(const struct hctx *c, const char *what)
{
	FUZZ_CHECK(!c->dead && !h2_desynced(&c->p), "%s after the parser desynced (error %d)", what,
		   c->p.error);
}

static void on_message(void *ctx, uint32_t len, bool damaged, uint64_t ts)
{
	struct gslot *g = ctx;

	check_ts(g->c, ts, "a gRPC message");
	FUZZ_CHECK(!damaged || g->gapped, "a damaged message with no bytes lost");
	g->taken += (uint64_t)len + GRPC_PREFIX_LEN;
	FUZZ_CHECK(g->taken <= g->total, "messages of %llu bytes from %llu bytes",
		   (unsigned long long)g->taken, (unsigned long long)g->total);
	FUZZ_CHECK(g->gp.messages == g->nlens + 1, "messages %llu, callbacks %zu",
		   (unsigned long long)g->gp.messages, g->nlens + 1);
	if (g->nlens == g->lcap) {
		g->lcap = g->lcap ? g->lcap * 2 : 16;
		g->lens = xrealloc(g->lens, g->lcap * sizeof(*g->lens));
	}
	g->lens[g->nlens++] = len;
	g->gapped = false;
}

static struct gslot *gslot(struct hctx *c, uint32_t id)
{
	for (size_t i = 0; i < H2_FUZZ_STREAMS; i++) {
		struct gslot *g = &c->g[i];

		if (g->used && g->id == id)
			return g;
		if (!g->used) {
			g->used = true;
			g->id = id;
			g->c = c;
			grpc_init(&g->gp, on_message, g);
			return g;
		}
	}
	return NULL;
}

static void gslot_feed(struct gslot *g, const uint8_t *p, size_t n, uint64_t ts)
{
	bool was = g->desynced;
	int rc;

	if (g->n + n > g->cap) {
		g->cap = (g->n + n) * 2;
		g->bytes = xrealloc(g->bytes, g->cap);
	}
	memcpy(g->bytes + g->n, p, n);
	g->n += n;
	g->total += n;
	rc = grpc_feed(&g->gp, p, n, ts);
	FUZZ_CHECK(rc == 0 || rc == -EPROTO, "grpc_feed returned %d", rc);
	FUZZ_CHECK(!was || rc == -EPROTO, "grpc_feed returned %d after it lost the boundaries", rc);
	if (rc)
		g->desynced = true;
}

static void gslot_gap(struct gslot *g, size_t n, uint64_t ts)
{
	g->gapped = true;
	g->total += n;
	grpc_gap(&g->gp, n, ts);
	if (g->gp.desync)
		g->desynced = true;
}

/* The messages a plain walk of the length prefixes finds; idle: it ends between two. */
FUZZ_CHECKER static void grpc_walk(const uint8_t *b, size_t n, struct gslot *out, bool *idle,
				   bool *desync)
{
	size_t i = 0;

	*desync = false;
	out->nlens = 0;
	while (n - i >= GRPC_PREFIX_LEN) {
		uint32_t len = (uint32_t)b[i + 1] << 24 | (uint32_t)b[i + 2] << 16 |
			       (uint32_t)b[i + 3] << 8 | b[i + 4];

		if (b[i] > 1) {
			*desync = true;
			break;
		}
		if (n - i - GRPC_PREFIX_LEN < len)
			break;
		if (out->nlens == out->lcap) {
			out->lcap = out->lcap ? out->lcap * 2 : 16;
			out->lens = xrealloc(out->lens, out->lcap * sizeof(*out->lens));
		}
		out->lens[out->nlens++] = len;
		i += GRPC_PREFIX_LEN + len;
	}
	*idle = !*desync && i == n;
}

FUZZ_CHECKER static void gslot_check(struct gslot *g)
{
	struct gslot want = { 0 };
	bool idle, desync;

	grpc_walk(g->bytes, g->n, &want, &idle, &desync);
	FUZZ_CHECK(g->nlens == want.nlens, "stream %u: %zu messages, the walk found %zu", g->id,
		   g->nlens, want.nlens);
	for (size_t i = 0; i < g->nlens; i++)
		FUZZ_CHECK(g->lens[i] == want.lens[i], "stream %u message %zu: %u bytes, not %u",
			   g->id, i, g->lens[i], want.lens[i]);
	FUZZ_CHECK(g->gp.messages == want.nlens, "messages %llu",
		   (unsigned long long)g->gp.messages);
	FUZZ_CHECK(g->desynced == desync, "stream %u: desync %d, the walk says %d", g->id,
		   g->desynced, desync);
	FUZZ_CHECK(grpc_idle(&g->gp) == idle, "stream %u: idle %d, the walk says %d", g->id,
		   grpc_idle(&g->gp), idle);
	free(want.lens);
}

static void gslot_free(struct gslot *g)
{
	free(g->bytes);
	free(g->lens);
}

/* ---- the parser's callbacks ---- */

FUZZ_CHECKER static void check_head(const struct h2_head *h)
{
	FUZZ_CHECK(memchr(h->method, 0, sizeof(h->method)) && memchr(h->path, 0, sizeof(h->path)) &&
		       memchr(h->content_type, 0, sizeof(h->content_type)),
		   "a header field not terminated inside its buffer");
	for (const char *s = h->content_type; *s; s++)
		FUZZ_CHECK(*s < 'A' || *s > 'Z', "content type \"%s\" not lower-cased",
			   h->content_type);
	FUZZ_CHECK(h->status == 0 || (h->status >= 100 && h->status <= 999), "status %d",
		   h->status);
	FUZZ_CHECK(h->grpc_status >= -1 && h->grpc_status <= 999, "grpc-status %d", h->grpc_status);
	FUZZ_CHECK(h->content_length >= -1, "content-length %lld", (long long)h->content_length);
}

static void on_headers(void *ctx, uint32_t stream, const struct h2_head *h, bool es, uint64_t ts)
{
	struct hctx *c = ctx;

	check_alive(c, "a header block");
	check_ts(c, ts, "a header block");
	FUZZ_CHECK(stream != 0 && stream <= 0x7fffffffu, "a header block on stream %u", stream);
	check_head(h);
	ev_add(&c->ev, 'H', stream, es)->head = *h;
}

static void on_data(void *ctx, uint32_t stream, const uint8_t *buf, size_t len, uint64_t ts)
{
	struct hctx *c = ctx;
	struct gslot *g;

	check_alive(c, "DATA");
	FUZZ_CHECK(c->in_feed, "DATA from a gap");
	check_ts(c, ts, "DATA");
	FUZZ_CHECK(stream != 0, "DATA on stream 0");
	FUZZ_CHECK(len > 0, "empty DATA");
	FUZZ_CHECK(buf >= c->feed && len <= c->feed_len &&
		       buf - c->feed <= (long)(c->feed_len - len),
		   "DATA not inside the feed's bytes");
	c->data += len;
	FUZZ_CHECK(c->data <= c->fed, "%llu data bytes from %llu bytes fed",
		   (unsigned long long)c->data, (unsigned long long)c->fed);
	ev_data(&c->ev, stream, buf, len);
	if (c->grpc && (g = gslot(c, stream)))
		gslot_feed(g, buf, len, ts);
}

static void on_data_gap(void *ctx, uint32_t stream, size_t len)
{
	struct hctx *c = ctx;
	struct gslot *g;

	check_alive(c, "a data gap");
	FUZZ_CHECK(!c->in_feed, "a data gap from a feed");
	FUZZ_CHECK(stream != 0 && len > 0, "a gap of %zu on stream %u", len, stream);
	c->data_lost += len;
	FUZZ_CHECK(c->data_lost <= c->lost, "%llu data bytes lost of %llu bytes lost",
		   (unsigned long long)c->data_lost, (unsigned long long)c->lost);
	/* h2conn.c gives the splitter the parser's own last ts. */
	if (c->grpc && (g = gslot(c, stream)))
		gslot_gap(g, len, c->p.last_ts);
}

static void on_end_stream(void *ctx, uint32_t stream, uint64_t ts)
{
	struct hctx *c = ctx;

	check_alive(c, "END_STREAM");
	check_ts(c, ts, "END_STREAM");
	ev_add(&c->ev, 'E', stream, 0);
}

static void on_rst(void *ctx, uint32_t stream, uint32_t code, uint64_t ts)
{
	struct hctx *c = ctx;

	check_alive(c, "RST_STREAM");
	check_ts(c, ts, "RST_STREAM");
	ev_add(&c->ev, 'R', stream, code);
}

static void on_goaway(void *ctx, uint32_t last, uint32_t code, uint64_t ts)
{
	struct hctx *c = ctx;

	check_alive(c, "GOAWAY");
	check_ts(c, ts, "GOAWAY");
	FUZZ_CHECK(last <= 0x7fffffffu, "GOAWAY's last stream %u", last);
	ev_add(&c->ev, 'G', last, code);
}

static void on_table_size(void *ctx, uint32_t size)
{
	struct hctx *c = ctx;

	check_alive(c, "SETTINGS_HEADER_TABLE_SIZE");
	ev_add(&c->ev, 'T', 0, size);
	if (c->own_table)
		h2_set_table_max(&c->p, size);
}

static const struct h2_callbacks cbs = {
	.on_headers = on_headers,
	.on_data = on_data,
	.on_data_gap = on_data_gap,
	.on_end_stream = on_end_stream,
	.on_rst = on_rst,
	.on_goaway = on_goaway,
	.on_table_size = on_table_size,
};

/* ---- the frame walker: RFC 9113 framing over a whole gap-free payload, no HPACK ---- */

struct walk {
	struct ev_list ev;
	uint64_t frames; /* frame headers accepted */
	bool desync;
	/* Where the bytes ended: in the preface, in a frame, or else between frames with tail
	 * bytes of the next frame header. */
	bool in_preface, in_frame;
	size_t tail;
};

static uint32_t be32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* The frame headers a sender writes (h2.h: a known type with its fixed size and stream rule;
 * other types are extensions, ignored). */
FUZZ_CHECKER static bool walk_valid(uint8_t type, uint32_t len, uint8_t flags, uint32_t stream)
{
	switch (type) {
	case H2_DATA:
	case H2_HEADERS:
	case H2_CONTINUATION:
		return stream;
	case H2_PRIORITY:
		return stream && len == 5;
	case H2_RST_STREAM:
		return stream && len == 4;
	case H2_SETTINGS:
		return !stream && len % 6 == 0 && (!(flags & F_ACK) || !len);
	case H2_PUSH_PROMISE:
		return stream && len >= 4;
	case H2_PING:
		return !stream && len == 8;
	case H2_GOAWAY:
		return !stream && len >= 8;
	case H2_WINDOW_UPDATE:
		return len == 4;
	default:
		return true;
	}
}

/*
 * The events of b[0..n): whole frames, and of a last frame cut by the end its DATA and
 * SETTINGS entries so far. A rule broken ends the walk with desync, once the bytes that break
 * it are there (as the parser sees them).
 */
FUZZ_CHECKER static void walk(const uint8_t *b, size_t n, bool preface, struct walk *w)
{
	bool in_block = false, block_es = false, block_promise = false;
	uint32_t block_stream = 0;
	size_t i = 0;

	if (preface) {
		i = n < H2_PREFACE_LEN ? n : H2_PREFACE_LEN;
		if (memcmp(b, H2_PREFACE, i)) {
			w->desync = true;
			return;
		}
		if (i < H2_PREFACE_LEN) {
			w->in_preface = true;
			return;
		}
	}
	w->in_frame = true;
	while (n - i >= H2_FRAME_HEADER_LEN) {
		const uint8_t *h = b + i, *pl = h + H2_FRAME_HEADER_LEN;
		uint32_t len = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
		uint8_t type = h[3], flags = h[4];
		uint32_t stream = be32(h + 5) & 0x7fffffffu;
		size_t avail = n - i - H2_FRAME_HEADER_LEN, pos = 0, fixed = 0, end, have;
		uint32_t pad = 0;

		if (avail > len)
			avail = len;
		if (!walk_valid(type, len, flags, stream) ||
		    in_block != (type == H2_CONTINUATION) || (in_block && stream != block_stream)) {
			w->desync = true;
			return;
		}
		w->frames++;
		if (type == H2_HEADERS || type == H2_PUSH_PROMISE) {
			in_block = true;
			block_stream = stream;
			block_es = type == H2_HEADERS && (flags & F_END_STREAM);
			block_promise = type == H2_PUSH_PROMISE;
		}
		if ((type == H2_DATA || type == H2_HEADERS || type == H2_PUSH_PROMISE) &&
		    (flags & F_PADDED)) {
			if (!len) {
				w->desync = true;
				return;
			}
			if (!avail)
				return;
			pad = pl[0];
			pos = 1;
		}
		if (type == H2_HEADERS && (flags & F_PRIORITY))
			fixed = 5;
		else if (type == H2_PUSH_PROMISE)
			fixed = 4;
		if (fixed) {
			if (len - pos < fixed) {
				w->desync = true;
				return;
			}
			if (avail < pos + fixed)
				return;
			pos += fixed;
		}
		if (pad > len - pos) {
			w->desync = true;
			return;
		}
		/* The payload proper: pl[pos..end), the padding after it. */
		end = len - pad;
		have = avail < end ? avail : end;
		if (type == H2_DATA && have > pos)
			ev_data(&w->ev, stream, pl + pos, have - pos);
		if (type == H2_SETTINGS)
			for (size_t k = 0; k + 6 <= have; k += 6)
				if ((pl[k] << 8 | pl[k + 1]) == 1)
					ev_add(&w->ev, 'T', 0, be32(pl + k + 2));
		if (avail < len)
			return;
		switch (type) {
		case H2_DATA:
			if (flags & F_END_STREAM)
				ev_add(&w->ev, 'E', stream, 0);
			break;
		case H2_HEADERS:
		case H2_CONTINUATION:
		case H2_PUSH_PROMISE:
			if (!(flags & F_END_HEADERS))
				break;
			in_block = false;
			if (!block_promise)
				ev_add(&w->ev, 'H', block_stream, block_es);
			break;
		case H2_RST_STREAM:
			ev_add(&w->ev, 'R', stream, be32(pl));
			break;
		case H2_GOAWAY:
			ev_add(&w->ev, 'G', be32(pl) & 0x7fffffffu, be32(pl + 4));
			break;
		default:
			break;
		}
		i += H2_FRAME_HEADER_LEN + len;
	}
	w->in_frame = false;
	w->tail = n - i;
}

/* ---- runs ---- */

struct plan {
	uint8_t flags;
	size_t budget; /* the budget's cap */
	uint32_t table;
	size_t at; /* where h2_set_table_max(table) comes (HF_TABLE_AT) */
};

static struct hctx *hctx_new(const struct plan *pl, bool grpc)
{
	struct hctx *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		abort();
	c->budget.max = pl->budget;
	c->own_table = pl->flags & HF_OWN_TABLE;
	c->grpc = grpc;
	rc = h2_init(&c->p, pl->flags & HF_PREFACE, &cbs, c, &c->budget);
	FUZZ_CHECK(rc == 0 || rc == -ENOMEM, "h2_init returned %d", rc);
	FUZZ_CHECK(!rc || (h2_desynced(&c->p) && c->budget.refused),
		   "h2_init failed with the budget not refusing");
	FUZZ_CHECK(c->budget.used <= c->budget.max, "budget overdrawn: %zu of %zu", c->budget.used,
		   c->budget.max);
	return c;
}

static void hctx_free(struct hctx *c)
{
	h2_free(&c->p);
	FUZZ_CHECK(c->budget.used == 0, "%zu budget bytes still taken after h2_free",
		   c->budget.used);
	for (size_t i = 0; i < H2_FUZZ_STREAMS; i++)
		gslot_free(&c->g[i]);
	ev_free(&c->ev);
	free(c);
}

static void do_feed(struct hctx *c, const uint8_t *b, size_t n)
{
	bool was = h2_desynced(&c->p);
	int rc;

	c->in_feed = true;
	c->ts++;
	c->feed = b;
	c->feed_len = n;
	c->fed += n;
	rc = h2_feed(&c->p, b, n, c->ts);
	c->in_feed = false;
	/* The parser keeps the ts of a feed it takes, for what a gap completes later. */
	if (!was)
		c->last_ts = c->ts;
	FUZZ_CHECK(rc == 0 || rc == -EPROTO, "h2_feed returned %d", rc);
	FUZZ_CHECK(!was || rc == -EPROTO, "h2_feed returned %d after a desync", rc);
	FUZZ_CHECK((rc == -EPROTO) == h2_desynced(&c->p), "h2_feed returned %d, desynced %d", rc,
		   h2_desynced(&c->p));
	FUZZ_CHECK(c->budget.used <= c->budget.max, "budget overdrawn: %zu of %zu", c->budget.used,
		   c->budget.max);
	if (rc)
		c->dead = true;
}

static void do_gap(struct hctx *c, size_t n)
{
	c->gapped = true;
	c->lost += n;
	h2_gap(&c->p, n);
	FUZZ_CHECK(c->budget.used <= c->budget.max, "budget overdrawn: %zu of %zu", c->budget.used,
		   c->budget.max);
	if (h2_desynced(&c->p))
		c->dead = true;
}

/* The payload through c as the control bytes say (none: in one call), the table bound changed
 * at its point in either case. */
static void run(struct hctx *c, const struct plan *pl, const uint8_t *b, size_t n,
		const uint8_t *ctl, size_t nctl)
{
	bool table_due = pl->flags & HF_TABLE_AT;
	size_t off = 0, k = 0;

	while (off < n || table_due) {
		uint8_t v = nctl ? ctl[k++ % nctl] : 0;
		size_t lim = n - off, len;

		if (table_due && off == pl->at) {
			h2_set_table_max(&c->p, pl->table);
			table_due = false;
			continue;
		}
		if (table_due)
			lim = pl->at - off;
		if ((pl->flags & HF_GAPS) && (v & 0x80)) {
			len = (size_t)(v & 0x7f) + 1;
			do_gap(c, len < lim ? len : lim);
		} else {
			len = v && v < lim ? v : lim;
			do_feed(c, b + off, len);
		}
		off += len < lim ? len : lim;
	}
}

static void compare_runs(const struct hctx *a, const struct hctx *b)
{
	size_t where;

	if (!ev_same(&a->ev, &b->ev, true, false, &where)) {
		ev_print("split", &a->ev, where);
		ev_print("one feed", &b->ev, where);
		FUZZ_FAIL("split feeds and one feed give different events");
	}
	FUZZ_CHECK(a->p.frames == b->p.frames && a->p.header_blocks == b->p.header_blocks,
		   "split: %llu frames, %llu blocks; one feed: %llu, %llu",
		   (unsigned long long)a->p.frames, (unsigned long long)a->p.header_blocks,
		   (unsigned long long)b->p.frames, (unsigned long long)b->p.header_blocks);
	FUZZ_CHECK(a->p.error == b->p.error, "split: error %d, one feed: %d", a->p.error,
		   b->p.error);
	if (!h2_desynced(&a->p))
		FUZZ_CHECK(a->p.state == b->p.state && a->p.got == b->p.got &&
			       a->p.remaining == b->p.remaining && a->p.in_block == b->p.in_block,
			   "split and one feed end in different places: state %d/%d got %zu/%zu "
			   "remaining %u/%u",
			   a->p.state, b->p.state, a->p.got, b->p.got, a->p.remaining,
			   b->p.remaining);
}

static void compare_walk(const struct hctx *c, const uint8_t *b, size_t n, bool preface)
{
	struct walk w = { 0 };
	/* The inflater refused a block (bad HPACK, or the budget): the walker cannot know where. */
	bool hpack = c->p.error == -EBADMSG || c->p.error == -ENOMEM;
	size_t where;

	walk(b, n, preface, &w);
	if (!ev_same(&c->ev, &w.ev, false, hpack, &where)) {
		ev_print("parser", &c->ev, where);
		ev_print("walker", &w.ev, where);
		FUZZ_FAIL("the parser's events are not the frame walker's (parser error %d, walker "
			  "desync %d)",
			  c->p.error, w.desync);
	}
	if (hpack) {
		FUZZ_CHECK(c->p.frames <= w.frames, "%llu frames, the walker saw %llu",
			   (unsigned long long)c->p.frames, (unsigned long long)w.frames);
	} else {
		FUZZ_CHECK(c->p.frames == w.frames, "%llu frames, the walker saw %llu",
			   (unsigned long long)c->p.frames, (unsigned long long)w.frames);
		FUZZ_CHECK(h2_desynced(&c->p) == w.desync,
			   "parser desynced %d (error %d), walker %d", h2_desynced(&c->p),
			   c->p.error, w.desync);
	}
	/* In sync, both are at the same place: a frame boundary is one for both. */
	if (!h2_desynced(&c->p) && !w.desync) {
		if (w.in_preface)
			FUZZ_CHECK(c->p.state == H2_ST_PREFACE && c->p.got == n,
				   "%zu bytes of the preface; the parser is in state %d with %zu",
				   n, c->p.state, c->p.got);
		else if (w.in_frame)
			FUZZ_CHECK(c->p.state != H2_ST_HEADER && c->p.state != H2_ST_PREFACE,
				   "the bytes end inside a frame; the parser is between frames");
		else
			FUZZ_CHECK(c->p.state == H2_ST_HEADER && c->p.got == w.tail,
				   "the bytes end %zu bytes into a frame header; the parser is in "
				   "state %d with %zu",
				   w.tail, c->p.state, c->p.got);
	}
	ev_free(&w.ev);
}

/* Whatever the bytes, the recognisers answer alike for what is already decided. */
FUZZ_CHECKER static void check_looks(const uint8_t *b, size_t n)
{
	bool frame = h2_looks_like_frame(b, n);

	if (h2_looks_like_server_preface(b, n))
		FUZZ_CHECK(frame && b[3] == H2_SETTINGS,
			   "a server preface that is no SETTINGS frame");
	if (frame) {
		/* A read of the first frame alone holds only headers already found plausible. */
		size_t first =
		    H2_FRAME_HEADER_LEN + ((size_t)b[0] << 16 | (size_t)b[1] << 8 | (size_t)b[2]);

		FUZZ_CHECK(n >= H2_FRAME_HEADER_LEN, "%zu bytes look like a frame", n);
		FUZZ_CHECK(first > n || h2_looks_like_frame(b, first),
			   "%zu bytes look like frames, not their first %zu (the first frame)", n,
			   first);
	}
	if (n && h2_looks_like_preface(b, n))
		FUZZ_CHECK(h2_looks_like_preface(b, (n + 1) / 2), "a preface, not its first half");
}

/* The payload as one gRPC stream direction's DATA, with gaps. */
static void grpc_alone(const struct plan *pl, const uint8_t *b, size_t n, const uint8_t *ctl,
		       size_t nctl)
{
	struct hctx *c = calloc(1, sizeof(*c));
	struct gslot *g;
	size_t off = 0, k = 0;

	if (!c)
		abort();
	g = gslot(c, 1);
	while (off < n) {
		uint8_t v = nctl ? ctl[k++ % nctl] : 0;
		size_t len;

		if ((pl->flags & HF_GAPS) && (v & 0x80)) {
			len = (size_t)(v & 0x7f) + 1;
			len = len < n - off ? len : n - off;
			c->gapped = true;
			gslot_gap(g, len, c->last_ts);
		} else {
			len = v && v < n - off ? v : n - off;
			c->in_feed = true;
			c->last_ts = ++c->ts;
			gslot_feed(g, b + off, len, c->ts);
			c->in_feed = false;
		}
		off += len;
	}
	if (!c->gapped)
		gslot_check(g);
	gslot_free(g);
	free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	struct plan pl = { .flags = fuzz_u8(&in) };
	unsigned k = (pl.flags >> 2) & 7;
	size_t nctl;
	const uint8_t *ctl;
	struct hctx *a, *b;

	if (pl.flags & HF_TABLE_AT) {
		pl.table = fuzz_u32(&in);
		pl.at = fuzz_u16(&in);
	}
	nctl = fuzz_u8(&in) % H2_FUZZ_CTL_MAX;
	ctl = fuzz_bytes(&in, nctl, &nctl);
	pl.at = in.n ? pl.at % in.n : 0;
	pl.budget = k ? (size_t)H2_FUZZ_BUDGET_UNIT << (2 * k) : SIZE_MAX;
	if (pl.flags & HF_GRPC) {
		grpc_alone(&pl, in.p, in.n, ctl, nctl);
		return 0;
	}
	check_looks(in.p, in.n);
	a = hctx_new(&pl, true);
	run(a, &pl, in.p, in.n, ctl, nctl);
	if (!a->gapped) {
		b = hctx_new(&pl, false);
		run(b, &pl, in.p, in.n, NULL, 0);
		compare_runs(a, b);
		compare_walk(b, in.p, in.n, pl.flags & HF_PREFACE);
		for (size_t i = 0; i < H2_FUZZ_STREAMS; i++)
			if (a->g[i].used)
				gslot_check(&a->g[i]);
		hctx_free(b);
	}
	hctx_free(a);
	return 0;
}
