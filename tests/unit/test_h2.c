// SPDX-License-Identifier: MIT
/*
 * user/pipeline/h2.c on captured wire bytes of real HTTP/2 stacks (hypercorn serving SSE to an
 * httpx client, grpcio server streaming, both directions): every fixture replayed one syscall per
 * feed, one byte per feed and split in two at every byte boundary must give the same header
 * blocks, data bytes and stream ends, each stamped with the feed that completed it; HPACK state
 * carried across requests (the second stream's headers refer to the first's); then padding,
 * priority and CONTINUATION, table size changes, gaps, the memory budget and garbage.
 */
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "fixture.h"
#include "pipeline/h2.h"

#define REC_EVENTS_MAX 128
#define FUZZ_ROUNDS 300

struct rec_event {
	char type; /* 'H' headers, 'E' end of stream (DATA), 'R' reset, 'G' goaway */
	uint32_t stream;
	struct h2_head head;
	bool end_stream;
	uint32_t code;
	size_t data_len; /* data bytes of every stream seen before this event */
	uint64_t ts;
};

struct rec {
	struct h2_parser p;
	struct rec_event ev[REC_EVENTS_MAX];
	size_t nev;
	size_t data_len, gap_len;
	char data[8192]; /* the data bytes of stream `keep` */
	size_t kept;
	uint32_t keep;
	uint32_t table_size; /* the last SETTINGS_HEADER_TABLE_SIZE */
};

static struct rec_event *rec_add(struct rec *r, char type, uint32_t stream, uint64_t ts)
{
	struct rec_event *e;

	if (r->nev == REC_EVENTS_MAX)
		return NULL;
	e = &r->ev[r->nev++];
	memset(e, 0, sizeof(*e));
	e->type = type;
	e->stream = stream;
	e->data_len = r->data_len;
	e->ts = ts;
	return e;
}

static void on_headers(void *ctx, uint32_t stream, const struct h2_head *h, bool es, uint64_t ts)
{
	struct rec_event *e = rec_add(ctx, 'H', stream, ts);

	if (e) {
		e->head = *h;
		e->end_stream = es;
	}
}

static void on_data(void *ctx, uint32_t stream, const uint8_t *buf, size_t len, uint64_t ts)
{
	struct rec *r = ctx;

	(void)ts;
	r->data_len += len;
	if (stream == r->keep && r->kept + len < sizeof(r->data)) {
		memcpy(r->data + r->kept, buf, len);
		r->kept += len;
	}
}

static void on_data_gap(void *ctx, uint32_t stream, size_t len)
{
	struct rec *r = ctx;

	(void)stream;
	r->gap_len += len;
}

static void on_end_stream(void *ctx, uint32_t stream, uint64_t ts)
{
	rec_add(ctx, 'E', stream, ts);
}

static void on_rst(void *ctx, uint32_t stream, uint32_t code, uint64_t ts)
{
	struct rec_event *e = rec_add(ctx, 'R', stream, ts);

	if (e)
		e->code = code;
}

static void on_goaway(void *ctx, uint32_t last, uint32_t code, uint64_t ts)
{
	struct rec_event *e = rec_add(ctx, 'G', last, ts);

	if (e)
		e->code = code;
}

static void on_table_size(void *ctx, uint32_t size)
{
	((struct rec *)ctx)->table_size = size;
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

static int rec_feed(void *ctx, const uint8_t *buf, size_t len, uint64_t ts)
{
	return h2_feed(&((struct rec *)ctx)->p, buf, len, ts);
}

static struct rec *rec_new(bool preface, struct budget *b)
{
	struct rec *r = calloc(1, sizeof(*r));

	if (r)
		h2_init(&r->p, preface, &cbs, r, b);
	return r;
}

static void rec_free(struct rec *r)
{
	h2_free(&r->p);
	free(r);
}

static bool same_event(const struct rec_event *a, const struct rec_event *b)
{
	return a->type == b->type && a->stream == b->stream && a->end_stream == b->end_stream &&
	       a->code == b->code && a->data_len == b->data_len &&
	       memcmp(&a->head, &b->head, sizeof(a->head)) == 0;
}

/* Replays `name` every way; the events must agree with the one-write-per-feed replay, and their
 * ts with the write that held the byte completing them. Returns that replay (caller frees). */
static struct rec *replay_all(const char *name, bool preface, uint32_t keep)
{
	struct fixture f;
	struct rec *ref;

	if (!ASSERT_OK(fixture_load(&f, name), name))
		return NULL;
	ref = rec_new(preface, NULL);
	ref->keep = keep;
	if (!ASSERT_OK(fixture_replay(&f, PLAN_WRITES, 0, rec_feed, ref), "writes replay") ||
	    !ASSERT_TRUE(ref->nev > 0, "events")) {
		fixture_free(&f);
		return ref;
	}
	/* The byte that completes each event (one byte per feed: ts is its offset), then every
	 * split, whose events carry 0 or 1 by the side of the split that byte is on. */
	uint64_t done_at[REC_EVENTS_MAX];

	for (int plan = PLAN_BYTES; plan <= PLAN_SPLIT; plan++) {
		size_t nsplit = plan == PLAN_SPLIT ? f.len + 1 : 1;

		for (size_t split = 0; split < nsplit; split++) {
			struct rec *r = rec_new(preface, NULL);
			bool ok;

			r->keep = keep;
			ok = ASSERT_OK(fixture_replay(&f, plan, split, rec_feed, r), "replay");
			ok = ok && ASSERT_EQ(r->nev, ref->nev, "events") &&
			     ASSERT_EQ(r->kept, ref->kept, "data") &&
			     ASSERT_TRUE(memcmp(r->data, ref->data, r->kept) == 0, "data bytes");
			for (size_t i = 0; ok && i < r->nev; i++) {
				ok = ASSERT_TRUE(same_event(&r->ev[i], &ref->ev[i]), "same event");
				if (ok && plan == PLAN_BYTES) {
					done_at[i] = r->ev[i].ts;
					ok = ASSERT_EQ(fixture_write_of(&f, r->ev[i].ts),
						       ref->ev[i].ts, "completing write");
				}
				if (ok && plan == PLAN_SPLIT)
					ok = ASSERT_EQ(r->ev[i].ts, done_at[i] < split ? 0 : 1,
						       "split ts");
			}
			rec_free(r);
			if (!ok) {
				fprintf(stdout, "  plan %d split %zu\n", plan, split);
				fixture_free(&f);
				return ref;
			}
		}
	}
	fixture_free(&f);
	return ref;
}

static const struct rec_event *find(const struct rec *r, char type, uint32_t stream, size_t nth)
{
	for (size_t i = 0; i < r->nev; i++)
		if (r->ev[i].type == type && r->ev[i].stream == stream && nth-- == 0)
			return &r->ev[i];
	return NULL;
}

TEST(test_hypercorn_requests)
{
	struct rec *r = replay_all("hypercorn_h2c.req", true, 1);
	const struct rec_event *e;

	if (!r)
		return;
	/* Three requests on one connection: two streamed chats, then a GET. */
	e = find(r, 'H', 1, 0);
	if (ASSERT_OK_PTR(e, "stream 1 headers")) {
		ASSERT_STREQ(e->head.method, "POST", "method");
		ASSERT_STREQ(e->head.path, "/v1/chat/completions", "path");
		ASSERT_STREQ(e->head.content_type, "application/json", "content-type");
		ASSERT_FALSE(e->end_stream, "a body follows");
	}
	/* Stream 3's fields come from the dynamic table the first block filled. */
	e = find(r, 'H', 3, 0);
	if (ASSERT_OK_PTR(e, "stream 3 headers")) {
		ASSERT_STREQ(e->head.path, "/v1/chat/completions", "path");
		ASSERT_STREQ(e->head.method, "POST", "method");
	}
	e = find(r, 'H', 5, 0);
	if (ASSERT_OK_PTR(e, "stream 5 headers")) {
		ASSERT_STREQ(e->head.method, "GET", "method");
		ASSERT_STREQ(e->head.path, "/v1/models", "path");
		ASSERT_TRUE(e->end_stream, "no body");
	}
	ASSERT_OK_PTR(find(r, 'E', 1, 0), "stream 1 body ends");
	ASSERT_OK_PTR(find(r, 'E', 3, 0), "stream 3 body ends");
	ASSERT_TRUE(r->kept > 0 && memmem(r->data, r->kept, "\"stream\": true", 14), "body bytes");
	ASSERT_EQ(r->p.header_blocks, 3, "header blocks");
	rec_free(r);
}

TEST(test_hypercorn_responses)
{
	struct rec *r = replay_all("hypercorn_h2c.resp", false, 3);
	const struct rec_event *e;

	if (!r)
		return;
	for (uint32_t s = 1; s <= 3; s += 2) {
		e = find(r, 'H', s, 0);
		if (ASSERT_OK_PTR(e, "response headers")) {
			ASSERT_EQ(e->head.status, 200, "status");
			ASSERT_STREQ(e->head.content_type, "text/event-stream", "content-type");
		}
		ASSERT_OK_PTR(find(r, 'E', s, 0), "stream ends");
	}
	e = find(r, 'H', 5, 0);
	if (ASSERT_OK_PTR(e, "stream 5 headers"))
		ASSERT_STREQ(e->head.content_type, "application/json", "content-type");
	/* Stream 3 asked for usage: its SSE ends with a usage frame and [DONE]. */
	ASSERT_TRUE(memmem(r->data, r->kept, "\"usage\"", 7) != NULL, "usage frame");
	ASSERT_TRUE(memmem(r->data, r->kept, "data: [DONE]", 12) != NULL, "[DONE]");
	rec_free(r);
}

TEST(test_grpc_stream)
{
	struct rec *req = replay_all("grpcio_stream.req", true, 1);
	struct rec *resp = replay_all("grpcio_stream.resp", false, 1);
	const struct rec_event *e;

	if (!req || !resp)
		goto out;
	for (uint32_t s = 1; s <= 3; s += 2) {
		e = find(req, 'H', s, 0);
		if (ASSERT_OK_PTR(e, "request headers")) {
			ASSERT_STREQ(e->head.path, "/inference.Generator/Generate", "path");
			ASSERT_STREQ(e->head.content_type, "application/grpc", "content-type");
		}
		e = find(resp, 'H', s, 0);
		if (ASSERT_OK_PTR(e, "response headers"))
			ASSERT_EQ(e->head.status, 200, "status");
		/* Trailers end the stream; the second stream's grpc-status is a table index. */
		e = find(resp, 'H', s, 1);
		if (ASSERT_OK_PTR(e, "trailers")) {
			ASSERT_EQ(e->head.grpc_status, 0, "grpc-status");
			ASSERT_EQ(e->head.status, 0, "no :status in trailers");
			ASSERT_TRUE(e->end_stream, "trailers end the stream");
		}
	}
	/* Four messages of 5-byte prefix plus payload on stream 1: "Hello", ",", " world", "!". */
	ASSERT_EQ(resp->kept, 4 * 5 + 7 + 3 + 8 + 3, "message bytes");
	/* grpc's server raises its peer's frame size: a SETTINGS frame, no table change. */
	ASSERT_EQ(resp->table_size, 0, "no SETTINGS_HEADER_TABLE_SIZE");
out:
	if (req)
		rec_free(req);
	if (resp)
		rec_free(resp);
}

TEST(test_grpc_abort)
{
	struct rec *r = replay_all("grpcio_abort.resp", false, 1);
	const struct rec_event *e;

	if (!r)
		return;
	e = find(r, 'H', 1, 1);
	if (ASSERT_OK_PTR(e, "trailers"))
		ASSERT_EQ(e->head.grpc_status, 13, "INTERNAL");
	rec_free(r);
}

/* ---- built frames ---- */

struct wire {
	uint8_t b[4096];
	size_t n;
};

static void put_frame(struct wire *w, uint8_t type, uint8_t flags, uint32_t stream,
		      const uint8_t *payload, size_t len)
{
	uint8_t h[9] = { len >> 16,    len >> 8,     len,	  type,	 flags,
			 stream >> 24, stream >> 16, stream >> 8, stream };

	memcpy(w->b + w->n, h, 9);
	memcpy(w->b + w->n + 9, payload, len);
	w->n += 9 + len;
}

/* HPACK-encodes fields with deflater d into out; returns the length. */
static size_t encode(nghttp2_hd_deflater *d, uint8_t *out, size_t cap, const char *const *kv,
		     size_t n)
{
	nghttp2_nv nv[8];

	for (size_t i = 0; i < n; i++)
		nv[i] =
		    (nghttp2_nv){ (uint8_t *)kv[2 * i], (uint8_t *)kv[2 * i + 1], strlen(kv[2 * i]),
				  strlen(kv[2 * i + 1]), NGHTTP2_NV_FLAG_NONE };
	return (size_t)nghttp2_hd_deflate_hd(d, out, cap, nv, n);
}

static const char *const resp_fields[] = { ":status",	   "200",
					   "content-type", "text/event-stream; charset=utf-8",
					   "x-request-id", "abc" };

TEST(test_padding_priority_continuation)
{
	nghttp2_hd_deflater *d;
	uint8_t blk[256], pl[512];
	size_t n, half;
	struct wire w = { 0 };
	struct rec *ref = NULL;

	nghttp2_hd_deflate_new(&d, 4096);
	n = encode(d, blk, sizeof(blk), resp_fields, 3);
	half = n / 2;
	/* HEADERS, PADDED | PRIORITY, no END_HEADERS: pad length 3, priority 5 bytes, half the
	 * block, 3 bytes of padding; then a CONTINUATION with the rest and END_HEADERS. */
	pl[0] = 3;
	memset(pl + 1, 0, 5);
	memcpy(pl + 6, blk, half);
	memset(pl + 6 + half, 0, 3);
	put_frame(&w, H2_HEADERS, 0x8 | 0x20, 1, pl, 6 + half + 3);
	put_frame(&w, H2_CONTINUATION, 0x4, 1, blk + half, n - half);
	put_frame(&w, H2_PING, 0, 0, (const uint8_t *)"12345678", 8);
	/* DATA, PADDED, END_STREAM: pad 4, "data: x\n\n", padding. */
	pl[0] = 4;
	memcpy(pl + 1, "data: x\n\n", 9);
	memset(pl + 10, 0, 4);
	put_frame(&w, H2_WINDOW_UPDATE, 0, 0, (const uint8_t *)"\0\0\1\0", 4);
	put_frame(&w, 0x10, 0, 1, (const uint8_t *)"ext", 3); /* an extension frame: ignored */
	put_frame(&w, H2_DATA, 0x8 | 0x1, 1, pl, 14);
	put_frame(&w, H2_RST_STREAM, 0, 3, (const uint8_t *)"\0\0\0\x08", 4);
	put_frame(&w, H2_GOAWAY, 0, 0, (const uint8_t *)"\0\0\0\x03\0\0\0\0debug", 13);
	nghttp2_hd_deflate_del(d);

	for (size_t split = 0; split <= w.n; split++) {
		struct rec *r = rec_new(false, NULL);
		const struct rec_event *e;
		bool ok;

		r->keep = 1;
		ok = ASSERT_OK(h2_feed(&r->p, w.b, split, 0), "first part") &&
		     ASSERT_OK(h2_feed(&r->p, w.b + split, w.n - split, 1), "second part");
		e = find(r, 'H', 1, 0);
		ok = ok && ASSERT_OK_PTR(e, "headers") &&
		     ASSERT_EQ(e->head.status, 200, "status") &&
		     ASSERT_STREQ(e->head.content_type, "text/event-stream", "params dropped") &&
		     ASSERT_EQ(r->kept, 9, "data without padding") &&
		     ASSERT_TRUE(memcmp(r->data, "data: x\n\n", 9) == 0, "data bytes") &&
		     ASSERT_OK_PTR(find(r, 'E', 1, 0), "end stream");
		e = find(r, 'R', 3, 0);
		ok = ok && ASSERT_OK_PTR(e, "reset") && ASSERT_EQ(e->code, 8, "CANCEL");
		e = find(r, 'G', 3, 0);
		ok = ok && ASSERT_OK_PTR(e, "goaway") && ASSERT_EQ(e->code, 0, "NO_ERROR");
		if (!ok) {
			fprintf(stdout, "  split %zu\n", split);
			rec_free(r);
			break;
		}
		if (!ref)
			ref = r;
		else
			rec_free(r);
	}
	if (ref)
		rec_free(ref);
}

TEST(test_block_interrupted)
{
	nghttp2_hd_deflater *d;
	uint8_t blk[256];
	size_t n;
	struct wire w = { 0 };
	struct rec *r = rec_new(false, NULL);

	nghttp2_hd_deflate_new(&d, 4096);
	n = encode(d, blk, sizeof(blk), resp_fields, 3);
	nghttp2_hd_deflate_del(d);
	/* A header block must not be interleaved with another frame. */
	put_frame(&w, H2_HEADERS, 0, 1, blk, n / 2);
	put_frame(&w, H2_DATA, 0, 1, (const uint8_t *)"x", 1);
	ASSERT_EQ(h2_feed(&r->p, w.b, w.n, 0), -EPROTO, "DATA inside a block");
	ASSERT_TRUE(h2_desynced(&r->p), "desynced");
	ASSERT_EQ(h2_feed(&r->p, w.b, 9, 1), -EPROTO, "stays desynced");
	rec_free(r);
}

TEST(test_table_size)
{
	nghttp2_hd_deflater *d;
	uint8_t blk[256];
	size_t n;
	struct wire w = { 0 };

	/* An encoder allowed an 8 KiB table says so in its first block: accepted only by an
	 * inflater that was told of the SETTINGS that allowed it. */
	nghttp2_hd_deflate_new(&d, 8192);
	nghttp2_hd_deflate_change_table_size(d, 8192);
	n = encode(d, blk, sizeof(blk), resp_fields, 3);
	nghttp2_hd_deflate_del(d);
	put_frame(&w, H2_HEADERS, 0x4, 1, blk, n);
	for (int told = 0; told <= 1; told++) {
		struct rec *r = rec_new(false, NULL);

		if (told)
			h2_set_table_max(&r->p, 8192);
		if (told) {
			ASSERT_OK(h2_feed(&r->p, w.b, w.n, 0), "size update within the bound");
			ASSERT_OK_PTR(find(r, 'H', 1, 0), "headers");
		} else {
			ASSERT_EQ(h2_feed(&r->p, w.b, w.n, 0), -EPROTO,
				  "size update past the bound");
		}
		rec_free(r);
	}
	/* A SETTINGS frame reports the size; the bound is capped. */
	{
		struct rec *r = rec_new(false, NULL);
		struct wire s = { 0 };

		put_frame(&s, H2_SETTINGS, 0, 0, (const uint8_t *)"\0\1\0\0\x20\0\0\4\0\0\xff\xff",
			  12);
		ASSERT_OK(h2_feed(&r->p, s.b, s.n, 0), "settings");
		ASSERT_EQ(r->table_size, 8192, "header table size");
		h2_set_table_max(&r->p, 1u << 30);
		ASSERT_EQ(r->p.table_max, H2_TABLE_MAX, "capped");
		rec_free(r);
	}
}

TEST(test_gaps)
{
	struct fixture f;

	if (!ASSERT_OK(fixture_load(&f, "hypercorn_h2c.resp"), "fixture"))
		return;
	/* A gap inside a DATA payload is skipped exactly; one that covers a frame header or a
	 * header block desyncs. Try a 1-byte gap at every offset: either outcome is allowed,
	 * but a skipped gap must be reported as data lost, and nothing may crash. */
	for (size_t off = 0; off < f.len; off++) {
		struct rec *r = rec_new(false, NULL);
		int err = h2_feed(&r->p, f.buf, off, 0);

		if (!err) {
			h2_gap(&r->p, 1);
			if (!h2_desynced(&r->p)) {
				if (!ASSERT_EQ(r->gap_len, 1, "skipped gap reported") ||
				    !ASSERT_OK(h2_feed(&r->p, f.buf + off + 1, f.len - off - 1, 1),
					       "goes on after the gap")) {
					fprintf(stdout, "  offset %zu\n", off);
					rec_free(r);
					break;
				}
			}
		}
		rec_free(r);
	}
	fixture_free(&f);
}

TEST(test_budget)
{
	struct budget b = { .max = 64 };
	struct rec *r = rec_new(false, &b);

	ASSERT_TRUE(h2_desynced(&r->p), "an inflater that does not fit is refused");
	ASSERT_TRUE(b.refused > 0, "counted");
	rec_free(r);
	ASSERT_EQ(b.used, 0, "nothing held");

	b = (struct budget){ .max = 1 << 20 };
	r = rec_new(false, &b);
	ASSERT_FALSE(h2_desynced(&r->p), "fits");
	ASSERT_TRUE(b.used > 0, "charged");
	rec_free(r);
	ASSERT_EQ(b.used, 0, "given back");
}

TEST(test_garbage)
{
	static const char *const bad[] = {
		"GET / HTTP/1.1\r\n\r\n",
		"PRI * HTTP/1.1\r\n",
	};
	struct fixture f;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct rec *r = rec_new(true, NULL);

		ASSERT_EQ(h2_feed(&r->p, (const uint8_t *)bad[i], strlen(bad[i]), 0), -EPROTO,
			  bad[i]);
		rec_free(r);
	}
	ASSERT_TRUE(h2_looks_like_preface((const uint8_t *)"PRI * HT", 8), "preface prefix");
	ASSERT_FALSE(h2_looks_like_preface((const uint8_t *)"POST /", 6), "not a preface");
	ASSERT_FALSE(h2_looks_like_frame((const uint8_t *)"HTTP/1.1 200 OK\r\n", 17), "HTTP/1");
	if (!ASSERT_OK(fixture_load(&f, "hypercorn_h2c.resp"), "fixture"))
		return;
	/* Every frame boundary of a real server's side starts a plausible frame. */
	ASSERT_TRUE(h2_looks_like_frame(f.buf, f.len), "from the start");
	for (size_t round = 0; round < FUZZ_ROUNDS; round++) {
		uint8_t *m = malloc(f.len);
		struct rec *r = rec_new(round & 1, NULL);

		memcpy(m, f.buf, f.len);
		for (int k = 0; k < 4; k++)
			m[rand() % f.len] = (uint8_t)rand();
		(void)h2_feed(&r->p, m, f.len, 0);
		h2_gap(&r->p, (size_t)(rand() % 64));
		(void)h2_feed(&r->p, m, f.len / 2, 1);
		(void)h2_looks_like_frame(m, f.len);
		rec_free(r);
		free(m);
	}
	fixture_free(&f);
}

int main(void)
{
	return check_run_all();
}
