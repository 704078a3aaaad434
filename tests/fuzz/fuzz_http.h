/* SPDX-License-Identifier: MIT */
/*
 * The body of fuzz_http_request and fuzz_http_response: user/pipeline/http.c fed one direction of a
 * connection, split where the input says, with gaps, optionally chunk-encoded by the harness.
 *
 * Input:
 *   u8  flags    FLAG_* below; bits 5-7: log2 of the chunk size when FLAG_CHUNK is set
 *   u8  nctl     bits 0-4: control bytes that follow, used in turn (see below); bits 5-7: k,
 *                a budget (http_set_budget) of 256 << 2k bytes for the head buffer (0: none)
 *   u8  ctl[nctl] each:
 *                with FLAG_GAPS and the top bit set, a gap of (v & 0x7f) + 1 bytes (those bytes
 *                of the payload are dropped), else a feed of v bytes (0: all that is left)
 *   ... payload  the bytes of the direction
 *
 * Properties: callbacks come in order (a head, body and gaps, an end) with the ts of the call
 * that caused them; a parser that said -EPROTO stays desynced and silent, and so does one a 101
 * switched to another protocol (its feed stops inside the bytes given); body bytes never
 * exceed the bytes fed, body-gap bytes never exceed the bytes dropped; head strings are
 * terminated inside their buffers; the budget is never overdrawn and is whole again after
 * http_free; and a body the harness chunk-encoded comes back exactly.
 */
#ifndef TS_FUZZ_HTTP_H
#define TS_FUZZ_HTTP_H

#include <errno.h>

#include "fuzz.h"
#include "pipeline/http.h"

#define HTTP_FUZZ_CTL_MAX 32
#define HTTP_FUZZ_BUDGET_UNIT 256
#define HTTP_FUZZ_CLOSE_TS 1000000000ull

enum {
	FLAG_GAPS = 1,	       /* control bytes with the top bit set are gaps */
	FLAG_NO_BODY = 2,      /* http_expect_no_body() first (a response to HEAD) */
	FLAG_CHUNK = 4,	       /* the payload after its first blank line is chunk-encoded */
	FLAG_REINIT = 8,       /* after -EPROTO start a new parser on what is left, as h1conn.c */
	FLAG_NO_BODY_LATE = 16 /* http_expect_no_body() from the first on_head */
};

enum hctx_where { IN_FEED, IN_GAP, IN_CLOSE };

struct hctx {
	struct http_parser *p;
	enum http_dir dir;
	unsigned flags;
	enum hctx_where where;
	uint64_t ts, last_feed_ts;
	bool in_msg;
	uint64_t callbacks;
	uint64_t fed, dropped;		/* bytes given to http_feed, bytes given to http_gap */
	uint64_t body_bytes, gap_bytes; /* what the callbacks reported */
	/* the first message's head and body, to compare with a body the harness encoded */
	int heads, ends;
	bool first_chunked, first_no_body;
	uint8_t *body;
	size_t body_len, body_cap;
};

static void hctx_check_str(const char *s, size_t cap, const char *what)
{
	FUZZ_CHECK(memchr(s, 0, cap) != NULL, "%s not terminated inside its %zu bytes", what, cap);
}

static void hctx_check_ts(const struct hctx *c, uint64_t ts)
{
	uint64_t want = c->where == IN_FEED  ? c->ts
			: c->where == IN_GAP ? c->last_feed_ts
					     : HTTP_FUZZ_CLOSE_TS;

	FUZZ_CHECK(ts == want, "callback ts %llu, the call that caused it had %llu",
		   (unsigned long long)ts, (unsigned long long)want);
}

static void hctx_on_head(void *ctx, const struct http_head *h, uint64_t ts)
{
	struct hctx *c = ctx;

	c->callbacks++;
	FUZZ_CHECK(c->where == IN_FEED, "a head completed by a gap or a close");
	hctx_check_ts(c, ts);
	FUZZ_CHECK(!c->in_msg, "a second head before the first message ended");
	hctx_check_str(h->method, sizeof(h->method), "method");
	hctx_check_str(h->path, sizeof(h->path), "path");
	hctx_check_str(h->content_type, sizeof(h->content_type), "content_type");
	for (const char *s = h->content_type; *s; s++)
		FUZZ_CHECK(*s < 'A' || *s > 'Z', "content_type \"%s\" not lower-cased",
			   h->content_type);
	FUZZ_CHECK(h->content_length >= -1, "content_length %lld", (long long)h->content_length);
	FUZZ_CHECK(h->version_minor >= 0 && h->version_minor <= 9, "HTTP/1.%d", h->version_minor);
	if (c->dir == HTTP_DIR_RESPONSE)
		FUZZ_CHECK(h->status >= 0 && h->status <= 999, "status %d", h->status);
	else
		FUZZ_CHECK(h->method[0], "a request without a method");
	if (c->heads++ == 0) {
		bool interim = h->status >= 100 && h->status < 200;

		c->first_chunked = h->chunked;
		c->first_no_body = c->dir == HTTP_DIR_RESPONSE &&
				   (interim || h->status == 204 || h->status == 304 ||
				    (c->flags & (FLAG_NO_BODY | FLAG_NO_BODY_LATE)));
		if (c->flags & FLAG_NO_BODY_LATE)
			http_expect_no_body(c->p);
	}
	c->in_msg = true;
}

static void hctx_on_body(void *ctx, const uint8_t *buf, size_t len, uint64_t ts)
{
	struct hctx *c = ctx;

	c->callbacks++;
	FUZZ_CHECK(c->where == IN_FEED, "body bytes from a gap or a close");
	hctx_check_ts(c, ts);
	FUZZ_CHECK(c->in_msg, "body bytes outside a message");
	FUZZ_CHECK(len > 0, "an empty body callback");
	c->body_bytes += len;
	FUZZ_CHECK(c->body_bytes <= c->fed, "%llu body bytes from %llu bytes fed",
		   (unsigned long long)c->body_bytes, (unsigned long long)c->fed);
	if (c->heads == 1 && c->ends == 0) {
		if (c->body_len + len > c->body_cap) {
			c->body_cap = (c->body_len + len) * 2;
			c->body = realloc(c->body, c->body_cap);
			if (!c->body)
				abort();
		}
		memcpy(c->body + c->body_len, buf, len);
		c->body_len += len;
	}
}

static void hctx_on_body_gap(void *ctx, size_t len)
{
	struct hctx *c = ctx;

	c->callbacks++;
	FUZZ_CHECK(c->where == IN_GAP, "a body gap reported outside http_gap");
	FUZZ_CHECK(c->in_msg, "a body gap outside a message");
	FUZZ_CHECK(len > 0, "an empty body gap");
	c->gap_bytes += len;
	FUZZ_CHECK(c->gap_bytes <= c->dropped, "%llu body-gap bytes from %llu bytes dropped",
		   (unsigned long long)c->gap_bytes, (unsigned long long)c->dropped);
}

static void hctx_on_end(void *ctx, uint64_t ts)
{
	struct hctx *c = ctx;

	c->callbacks++;
	hctx_check_ts(c, ts);
	FUZZ_CHECK(c->in_msg, "an end without a head");
	FUZZ_CHECK(http_idle(c->p), "the parser is not idle in on_end");
	c->ends++;
	c->in_msg = false;
}

static const struct http_callbacks hctx_callbacks = {
	.on_head = hctx_on_head,
	.on_body = hctx_on_body,
	.on_body_gap = hctx_on_body_gap,
	.on_end = hctx_on_end,
};

/* The payload with everything after its first blank line chunk-encoded; *body_at says where
 * the original body starts in payload. */
static uint8_t *http_fuzz_chunk(const uint8_t *pl, size_t n, unsigned log2, size_t *out_len,
				size_t *body_at)
{
	size_t piece = (size_t)1 << log2, head = n, cap, o;
	uint8_t *out;

	size_t i = 0;

	/* As the parser reads a head: empty lines before it are skipped, and a line that is LF or
	 * CR LF alone ends it. */
	while (i < n && (pl[i] == '\r' || pl[i] == '\n'))
		i++;
	for (; i + 1 < n; i++) {
		if (pl[i] != '\n')
			continue;
		if (pl[i + 1] == '\n') {
			head = i + 2;
			break;
		}
		if (i + 2 < n && pl[i + 1] == '\r' && pl[i + 2] == '\n') {
			head = i + 3;
			break;
		}
	}
	*body_at = head;
	/* per piece at most "ff\r\n" ... "\r\n", then "0\r\n\r\n" */
	cap = head + (n - head) + ((n - head) / piece + 1) * 8 + 8;
	out = malloc(cap);
	if (!out)
		abort();
	memcpy(out, pl, head);
	o = head;
	for (size_t i = head; i < n; i += piece) {
		size_t k = n - i < piece ? n - i : piece;

		o += (size_t)sprintf((char *)out + o, "%zx\r\n", k);
		memcpy(out + o, pl + i, k);
		o += k;
		memcpy(out + o, "\r\n", 2);
		o += 2;
	}
	memcpy(out + o, "0\r\n\r\n", 5);
	o += 5;
	*out_len = o;
	return out;
}

static int http_fuzz_run(enum http_dir dir, const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	unsigned flags = fuzz_u8(&in);
	uint8_t ctl_byte = fuzz_u8(&in);
	size_t nctl = ctl_byte % HTTP_FUZZ_CTL_MAX, len, off = 0, body_at = 0, k = 0;
	const uint8_t *ctl = fuzz_bytes(&in, nctl, &nctl);
	const uint8_t *payload = in.p;
	uint8_t *encoded = NULL;
	struct http_parser p;
	struct hctx c = { .p = &p, .dir = dir, .flags = flags };
	bool gapped = false, desynced = false, ever_desynced = false;
	uint64_t feeds = 0;
	unsigned bk = ctl_byte >> 5;
	struct budget budget = { .max = (size_t)HTTP_FUZZ_BUDGET_UNIT << (2 * bk) };
	struct budget *b = bk ? &budget : NULL;

	len = in.n;
	if (flags & FLAG_CHUNK) {
		encoded = http_fuzz_chunk(in.p, in.n, flags >> 5, &len, &body_at);
		payload = encoded;
	}
	http_init(&p, dir, &hctx_callbacks, &c);
	http_set_budget(&p, b);
	if (flags & FLAG_NO_BODY)
		http_expect_no_body(&p);
	while (off < len) {
		uint8_t v = nctl ? ctl[k++ % nctl] : 0;
		size_t n, upgraded_at;

		if ((flags & FLAG_GAPS) && (v & 0x80)) {
			uint64_t before = c.callbacks;
			bool was_desynced = http_desynced(&p);

			n = (size_t)(v & 0x7f) + 1;
			if (n > len - off)
				n = len - off;
			c.where = IN_GAP;
			c.dropped += n;
			gapped = true;
			http_gap(&p, n);
			if (was_desynced)
				FUZZ_CHECK(c.callbacks == before,
					   "a desynced parser made callbacks");
			off += n;
			continue;
		}
		n = v ? v : len - off;
		if (n > len - off)
			n = len - off;
		c.where = IN_FEED;
		c.ts = c.last_feed_ts = ++feeds;
		if (desynced && (flags & FLAG_REINIT)) {
			http_free(&p);
			FUZZ_CHECK(budget.used == 0, "%zu budget bytes still taken after http_free",
				   budget.used);
			http_init(&p, dir, &hctx_callbacks, &c);
			http_set_budget(&p, b);
			c.in_msg = false;
			desynced = false;
		}
		c.fed += n;
		if (http_feed(&p, payload + off, n, c.ts) < 0) {
			uint64_t before = c.callbacks;

			FUZZ_CHECK(http_desynced(&p), "-EPROTO but not desynced");
			FUZZ_CHECK(http_feed(&p, payload + off, n, c.ts) == -EPROTO,
				   "a desynced parser took bytes again");
			FUZZ_CHECK(c.callbacks == before, "a desynced parser made callbacks");
			desynced = ever_desynced = true;
		} else if (http_upgraded(&p, &upgraded_at)) {
			/* A 101 ended in this feed: it stopped there, and the rest is another
			 * protocol's, which no later feed takes for HTTP. */
			FUZZ_CHECK(upgraded_at <= n, "upgraded at %zu of a %zu-byte feed",
				   upgraded_at, n);
			FUZZ_CHECK(http_desynced(&p), "upgraded but not desynced");
			desynced = ever_desynced = true;
		} else {
			FUZZ_CHECK(!http_desynced(&p), "0 from a desynced parser");
		}
		FUZZ_CHECK(budget.used <= budget.max, "budget overdrawn: %zu of %zu", budget.used,
			   budget.max);
		off += n;
	}
	/* The harness's encoding ends the first message exactly: its body comes back whole. Not
	 * after a desync: a parser started again (FLAG_REINIT) reads from wherever it was, and its
	 * first message is not the one the harness encoded. */
	if (encoded && !gapped && !ever_desynced && !budget.refused && c.heads >= 1 &&
	    c.ends >= 1 && c.first_chunked && !c.first_no_body) {
		FUZZ_CHECK(c.body_len == in.n - body_at &&
			       (!c.body_len || !memcmp(c.body, in.p + body_at, c.body_len)),
			   "a chunk-encoded body of %zu bytes came back as %zu bytes",
			   in.n - body_at, c.body_len);
	}
	c.where = IN_CLOSE;
	http_close(&p, HTTP_FUZZ_CLOSE_TS);
	if (!http_desynced(&p))
		FUZZ_CHECK(http_idle(&p), "not idle after http_close");
	http_free(&p);
	FUZZ_CHECK(budget.used == 0, "%zu budget bytes still taken after http_free", budget.used);
	free(encoded);
	free(c.body);
	return 0;
}

#endif
