// SPDX-License-Identifier: MIT
/*
 * user/pipeline/http.c on captured wire bytes: every fixture replayed one syscall per feed, one
 * byte per feed and split in two at every byte boundary must give the same heads, body bytes and
 * ends, each stamped with the ts of the feed that completed it; then framing corner cases,
 * garbage, truncation and gaps.
 */
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "fixture.h"
#include "pipeline/http.h"

#define REC_EVENTS_MAX 64
#define REC_HEADS_MAX 8
#define REC_BODY_MAX 16384
/* Mutated copies of each fixture fed to the parser looking for crashes. */
#define FUZZ_ROUNDS 300

struct rec_event {
	char type; /* 'H' head, 'E' end */
	uint64_t ts;
	int status;
	size_t body_len; /* decoded body bytes seen before this event */
};

struct rec {
	struct http_parser p;
	struct rec_event ev[REC_EVENTS_MAX];
	size_t nev;
	struct http_head heads[REC_HEADS_MAX];
	size_t nheads;
	uint8_t body[REC_BODY_MAX];
	size_t body_len;
	size_t gap_bytes;
	size_t gaps;
	bool head_no_body; /* on_head marks the response as an answer to HEAD */
};

static void rec_event(struct rec *r, char type, uint64_t ts, int status)
{
	if (r->nev < REC_EVENTS_MAX)
		r->ev[r->nev++] = (struct rec_event){ type, ts, status, r->body_len };
}

static void rec_on_head(void *ctx, const struct http_head *h, uint64_t ts)
{
	struct rec *r = ctx;

	if (r->nheads < REC_HEADS_MAX)
		r->heads[r->nheads++] = *h;
	rec_event(r, 'H', ts, h->status);
	if (r->head_no_body)
		http_expect_no_body(&r->p);
}

static void rec_on_body(void *ctx, const uint8_t *buf, size_t len, uint64_t ts)
{
	struct rec *r = ctx;

	(void)ts;
	if (len > REC_BODY_MAX - r->body_len)
		len = REC_BODY_MAX - r->body_len;
	memcpy(r->body + r->body_len, buf, len);
	r->body_len += len;
}

static void rec_on_gap(void *ctx, size_t len)
{
	struct rec *r = ctx;

	r->gap_bytes += len;
	r->gaps++;
}

static void rec_on_end(void *ctx, uint64_t ts)
{
	rec_event(ctx, 'E', ts, 0);
}

static const struct http_callbacks rec_cb = {
	.on_head = rec_on_head,
	.on_body = rec_on_body,
	.on_body_gap = rec_on_gap,
	.on_end = rec_on_end,
};

static struct rec *rec_new(enum http_dir dir)
{
	struct rec *r = calloc(1, sizeof(*r));

	http_init(&r->p, dir, &rec_cb, r);
	return r;
}

static void rec_free(struct rec *r)
{
	if (!r)
		return;
	http_free(&r->p);
	free(r);
}

static int rec_feed(void *ctx, const uint8_t *buf, size_t len, uint64_t ts)
{
	struct rec *r = ctx;

	return http_feed(&r->p, buf, len, ts);
}

static int feed_str(struct rec *r, const char *s, uint64_t ts)
{
	return http_feed(&r->p, (const uint8_t *)s, strlen(s), ts);
}

/* Same events and body as the one-byte-per-feed reference, with the plan's timestamps. */
static bool rec_same(const struct rec *ref, const struct rec *r, const struct fixture *f,
		     enum fixture_plan plan, size_t split)
{
	if (!ASSERT_EQ(r->nev, ref->nev, "events") ||
	    !ASSERT_EQ(r->body_len, ref->body_len, "body"))
		return false;
	if (!ASSERT_TRUE(memcmp(r->body, ref->body, r->body_len) == 0, "body bytes"))
		return false;
	for (size_t i = 0; i < r->nev; i++) {
		uint64_t want = fixture_plan_ts(f, plan, split, ref->ev[i].ts);

		if (!ASSERT_EQ(r->ev[i].type, ref->ev[i].type, "type") ||
		    !ASSERT_EQ(r->ev[i].status, ref->ev[i].status, "status") ||
		    !ASSERT_EQ(r->ev[i].body_len, ref->ev[i].body_len, "body at event") ||
		    !ASSERT_EQ(r->ev[i].ts, want, "ts")) {
			printf("  plan %d split %zu event %zu\n", plan, split, i);
			return false;
		}
	}
	return true;
}

/* Replays a fixture every way; returns the one-syscall-per-feed record (caller frees). */
static struct rec *sweep(const struct fixture *f, enum http_dir dir)
{
	struct rec *ref = rec_new(dir), *r = NULL;
	bool ok;

	ok = ASSERT_OK(fixture_replay(f, PLAN_BYTES, 0, rec_feed, ref), "bytes");
	for (size_t k = 1; ok && k < f->len; k++) {
		r = rec_new(dir);
		ok = ASSERT_OK(fixture_replay(f, PLAN_SPLIT, k, rec_feed, r), "split") &&
		     rec_same(ref, r, f, PLAN_SPLIT, k) && ASSERT_TRUE(http_idle(&r->p), "idle");
		rec_free(r);
	}
	r = rec_new(dir);
	if (ok)
		ok = ASSERT_OK(fixture_replay(f, PLAN_WRITES, 0, rec_feed, r), "writes") &&
		     rec_same(ref, r, f, PLAN_WRITES, 0);
	rec_free(ref);
	if (!ok) {
		rec_free(r);
		return NULL;
	}
	return r;
}

struct resp_expect {
	const char *name;
	size_t messages;
	const char *ctype;
	bool chunked;
	size_t end_write[2];
};

static const struct resp_expect resp_fixtures[] = {
	{ "uvicorn_h11", 1, "text/event-stream", true, { 8 } },
	{ "uvloop_vllm", 1, "text/event-stream", true, { 5 } },
	{ "node_express", 1, "text/event-stream", true, { 6 } },
	{ "go_ollama", 1, "application/x-ndjson", true, { 5 } },
	{ "aiohttp_completion", 1, "text/event-stream", true, { 6 } },
	{ "tgi", 1, "text/event-stream", true, { 5 } },
	{ "anthropic", 1, "text/event-stream", true, { 12 } },
	{ "error_frame", 1, "text/event-stream", true, { 5 } },
	{ "keepalive", 2, "text/event-stream", true, { 8, 10 } },
};

TEST(test_fixture_responses)
{
	for (size_t i = 0; i < sizeof(resp_fixtures) / sizeof(resp_fixtures[0]); i++) {
		const struct resp_expect *e = &resp_fixtures[i];
		char file[64];
		struct fixture f;
		struct rec *r;

		snprintf(file, sizeof(file), "%s.resp", e->name);
		if (!ASSERT_OK(fixture_load(&f, file), e->name))
			return;
		r = sweep(&f, HTTP_DIR_RESPONSE);
		if (!ASSERT_OK_PTR(r, e->name)) {
			fixture_free(&f);
			return;
		}
		ASSERT_EQ(r->nheads, e->messages, e->name);
		ASSERT_EQ(r->nev, 2 * e->messages, e->name);
		ASSERT_EQ(r->heads[0].status, 200, e->name);
		ASSERT_STREQ(r->heads[0].content_type, e->ctype, e->name);
		ASSERT_EQ(r->heads[0].chunked, e->chunked, e->name);
		ASSERT_TRUE(r->heads[0].keep_alive, e->name);
		ASSERT_EQ(r->ev[0].ts, 0, e->name);
		for (size_t m = 0; m < e->messages; m++)
			ASSERT_EQ(r->ev[2 * m + 1].ts, e->end_write[m], e->name);
		ASSERT_EQ(r->gaps, 0, e->name);
		/* The de-chunked body holds no chunk framing. */
		ASSERT_TRUE(r->body_len > 0 && memcmp(r->body, "\r\n", 2) != 0, e->name);
		rec_free(r);
		fixture_free(&f);
	}
}

TEST(test_keepalive_second_response)
{
	struct fixture f;
	struct rec *r;

	if (!ASSERT_OK(fixture_load(&f, "keepalive.resp"), "load"))
		return;
	r = rec_new(HTTP_DIR_RESPONSE);
	ASSERT_OK(fixture_replay(&f, PLAN_WRITES, 0, rec_feed, r), "feed");
	ASSERT_EQ(r->nheads, 2, "heads");
	ASSERT_EQ(r->ev[2].ts, 9, "second head ts");
	ASSERT_STREQ(r->heads[1].content_type, "application/json", "ctype");
	ASSERT_FALSE(r->heads[1].chunked, "chunked");
	ASSERT_EQ(r->heads[1].content_length, 70, "content-length");
	ASSERT_EQ(r->ev[3].body_len - r->ev[2].body_len, 70, "second body");
	ASSERT_TRUE(http_idle(&r->p), "idle");
	rec_free(r);
	fixture_free(&f);
}

struct req_expect {
	const char *name;
	const char *method, *path;
};

static const struct req_expect req_fixtures[] = {
	{ "uvicorn_h11", "POST", "/v1/chat/completions" },
	{ "uvloop_vllm", "POST", "/v1/chat/completions" },
	{ "node_express", "POST", "/v1/chat/completions" },
	{ "go_ollama", "POST", "/api/chat" },
	{ "aiohttp_completion", "POST", "/v1/completions" },
	{ "tgi", "POST", "/generate_stream" },
	{ "anthropic", "POST", "/v1/messages" },
	{ "error_frame", "POST", "/v1/error" },
	{ "keepalive", "POST", "/v1/chat/completions" },
};

TEST(test_fixture_requests)
{
	for (size_t i = 0; i < sizeof(req_fixtures) / sizeof(req_fixtures[0]); i++) {
		const struct req_expect *e = &req_fixtures[i];
		char file[64];
		struct fixture f;
		struct rec *r;

		snprintf(file, sizeof(file), "%s.req", e->name);
		if (!ASSERT_OK(fixture_load(&f, file), e->name))
			return;
		r = sweep(&f, HTTP_DIR_REQUEST);
		if (!ASSERT_OK_PTR(r, e->name)) {
			fixture_free(&f);
			return;
		}
		ASSERT_STREQ(r->heads[0].method, e->method, e->name);
		ASSERT_STREQ(r->heads[0].path, e->path, e->name);
		ASSERT_EQ(r->heads[0].content_length, r->ev[1].body_len, e->name);
		ASSERT_EQ(r->ev[1].ts, 0, e->name);
		ASSERT_EQ(r->body[0], '{', e->name);
		rec_free(r);
		fixture_free(&f);
	}
}

TEST(test_pipelined_requests)
{
	struct rec *r = rec_new(HTTP_DIR_REQUEST);
	const char *in =
	    "POST /a HTTP/1.1\r\nHost: x\r\ncontent-LENGTH: 3\r\n\r\nabc"
	    "GET /models?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"
	    "\r\n" /* a stray CRLF between messages is allowed */
	    "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n";

	ASSERT_OK(feed_str(r, in, 7), "feed");
	ASSERT_EQ(r->nheads, 3, "heads");
	ASSERT_EQ(r->nev, 6, "events");
	ASSERT_STREQ(r->heads[1].method, "GET", "method");
	ASSERT_STREQ(r->heads[1].path, "/models?x=1", "path");
	ASSERT_EQ(r->heads[1].content_length, -1, "no length");
	ASSERT_EQ(r->body_len, 5, "bodies");
	ASSERT_TRUE(memcmp(r->body, "abchi", 5) == 0, "body bytes");
	ASSERT_EQ(r->ev[5].ts, 7, "ts");
	ASSERT_TRUE(http_idle(&r->p), "idle");
	rec_free(r);
}

TEST(test_close_delimited)
{
	struct rec *r = rec_new(HTTP_DIR_RESPONSE);

	ASSERT_OK(
	    feed_str(r, "HTTP/1.0 200 OK\r\nContent-Type: Text/Event-Stream; charset=utf-8\r\n\r\n",
		     1),
	    "head");
	ASSERT_OK(feed_str(r, "data: x\n\n", 2), "body");
	ASSERT_EQ(r->nev, 1, "no end yet");
	ASSERT_FALSE(r->heads[0].keep_alive, "1.0 closes");
	ASSERT_STREQ(r->heads[0].content_type, "text/event-stream", "ctype lower-cased");
	http_gap(&r->p, 4);
	ASSERT_EQ(r->gap_bytes, 4, "gap in close-delimited body");
	http_close(&r->p, 3);
	ASSERT_EQ(r->nev, 2, "end at close");
	ASSERT_EQ(r->ev[1].type, 'E', "end");
	ASSERT_EQ(r->ev[1].ts, 3, "close ts");
	ASSERT_EQ(r->body_len, 9, "body");
	ASSERT_TRUE(http_idle(&r->p), "idle");
	rec_free(r);

	/* HTTP/1.1 without length or chunking is close-delimited too. */
	r = rec_new(HTTP_DIR_RESPONSE);
	ASSERT_OK(feed_str(r, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc", 1), "1.1");
	ASSERT_FALSE(r->heads[0].keep_alive, "Connection: close");
	http_close(&r->p, 2);
	ASSERT_EQ(r->nev, 2, "end");
	rec_free(r);
}

TEST(test_no_body)
{
	struct rec *r = rec_new(HTTP_DIR_RESPONSE);

	ASSERT_OK(feed_str(r,
			   "HTTP/1.1 100 Continue\r\n\r\n"
			   "HTTP/1.1 204 No Content\r\n\r\n"
			   "HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n"
			   "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
			   1),
		  "feed");
	ASSERT_EQ(r->nheads, 4, "heads");
	ASSERT_EQ(r->nev, 8, "every head ends");
	ASSERT_EQ(r->heads[0].status, 100, "100");
	ASSERT_EQ(r->body_len, 2, "only the 200 has a body");
	rec_free(r);

	/* After 101 the connection speaks another protocol: the feed stops where the 101's head
	 * ends, says where, and no later byte is taken for HTTP. */
	{
#define UP_HEAD "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n"
		size_t off = 0;

		r = rec_new(HTTP_DIR_RESPONSE);
		ASSERT_OK(feed_str(r, UP_HEAD "\x81\x05hello", 0), "the 101 and what follows");
		ASSERT_EQ(r->nev, 2, "the 101 itself was reported");
		ASSERT_EQ(r->heads[0].upgrade_h2c, 1, "upgrade to h2c named");
		ASSERT_TRUE(http_upgraded(&r->p, &off), "upgraded");
		ASSERT_EQ(off, sizeof(UP_HEAD) - 1, "the other protocol starts after the head");
#undef UP_HEAD
		ASSERT_EQ(feed_str(r, "HTTP/1.1 200 OK\r\n\r\n", 0), -EPROTO, "no more HTTP/1.x");
		rec_free(r);
	}

	/* An answer to HEAD: Content-Length describes the GET it stands for. */
	r = rec_new(HTTP_DIR_RESPONSE);
	http_expect_no_body(&r->p);
	ASSERT_OK(feed_str(r, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", 1), "head");
	ASSERT_EQ(r->nev, 2, "ended");
	ASSERT_OK(feed_str(r, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", 2), "next");
	ASSERT_EQ(r->nev, 4, "the mark is used once");
	ASSERT_EQ(r->body_len, 1, "body of the next one");
	rec_free(r);

	/* ... and the mark can be set from on_head. */
	r = rec_new(HTTP_DIR_RESPONSE);
	r->head_no_body = true;
	ASSERT_OK(feed_str(r, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 1), "head");
	ASSERT_EQ(r->nev, 2, "ended from on_head");
	ASSERT_TRUE(http_idle(&r->p), "idle");
	rec_free(r);
}

TEST(test_chunk_syntax)
{
	struct rec *r = rec_new(HTTP_DIR_RESPONSE);
	const char *in = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
			 "5;name=\"v\" ; x\r\nhello\r\n"
			 "A\r\n0123456789\r\n"
			 "00000001\n!\n" /* bare LF and leading zeros */
			 "0;last\r\nX-Checksum: abc\r\nX-Other: d\r\n\r\n";

	ASSERT_OK(feed_str(r, in, 1), "feed");
	ASSERT_TRUE(r->heads[0].chunked, "chunked as the last coding");
	ASSERT_EQ(r->nev, 2, "ended after trailers");
	ASSERT_EQ(r->body_len, 16, "body");
	ASSERT_TRUE(memcmp(r->body, "hello0123456789!", 16) == 0, "bytes");
	ASSERT_TRUE(http_idle(&r->p), "idle");
	rec_free(r);

	/* chunked not last: the response runs to the close. */
	r = rec_new(HTTP_DIR_RESPONSE);
	ASSERT_OK(
	    feed_str(r, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n5\r\n", 1),
	    "feed");
	ASSERT_FALSE(r->heads[0].chunked, "not chunked");
	ASSERT_EQ(r->body_len, 3, "raw body");
	rec_free(r);
}

TEST(test_head_fields)
{
	struct rec *r = rec_new(HTTP_DIR_REQUEST);
	char path[400];

	ASSERT_OK(
	    feed_str(r,
		     "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"
		     "GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n"
		     "GET / HTTP/1.1\r\nX-Long: a\r\n  folded\r\nContent-Length: 0, 0\r\n\r\n",
		     1),
	    "feed");
	ASSERT_EQ(r->nheads, 3, "heads");
	ASSERT_TRUE(r->heads[0].keep_alive, "1.0 keep-alive");
	ASSERT_FALSE(r->heads[1].keep_alive, "close wins");
	ASSERT_TRUE(r->heads[2].keep_alive, "1.1 default");
	ASSERT_EQ(r->heads[2].content_length, 0, "repeated equal lengths");
	ASSERT_STREQ(r->heads[2].content_type, "", "no ctype");
	rec_free(r);

	/* A long path is truncated, not refused. */
	r = rec_new(HTTP_DIR_REQUEST);
	memset(path, 'a', sizeof(path));
	path[0] = '/';
	ASSERT_OK(feed_str(r, "GET ", 1), "method");
	ASSERT_OK(http_feed(&r->p, (const uint8_t *)path, sizeof(path), 1), "path");
	ASSERT_OK(feed_str(r, " HTTP/1.1\r\n\r\n", 1), "rest");
	ASSERT_EQ(strlen(r->heads[0].path), HTTP_PATH_MAX - 1, "truncated");
	rec_free(r);
}

/* Each is refused, and the parser then stays refused. */
static const struct {
	enum http_dir dir;
	const char *in;
} garbage[] = {
	{ HTTP_DIR_RESPONSE, "\x16\x03\x01\x02\x00" }, /* TLS handshake */
	{ HTTP_DIR_REQUEST, "\x17\x03\x03\x00\x20" },  /* TLS application data */
	{ HTTP_DIR_RESPONSE, "XTTP/1.1 200 OK\r\n\r\n" },
	{ HTTP_DIR_REQUEST, "get / HTTP/1.1\r\n\r\n" },		  /* methods are upper case */
	{ HTTP_DIR_REQUEST, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" }, /* h2 preface */
	{ HTTP_DIR_RESPONSE, "HTTP/2 200\r\n\r\n" },
	{ HTTP_DIR_RESPONSE, "HTTP/1.1 20 OK\r\n\r\n" },
	{ HTTP_DIR_RESPONSE, "HTTP/1.1 040 OK\r\n\r\n" }, /* no class 0: not taken as a 1xx */
	{ HTTP_DIR_RESPONSE, "HTTP/1.1 200OK\r\n\r\n" },
	{ HTTP_DIR_REQUEST, "GET /\r\n\r\n" },
	{ HTTP_DIR_REQUEST, "GET / HTTP/1.1\r\nBad Header\r\n\r\n" },
	{ HTTP_DIR_REQUEST, "GET / HTTP/1.1\r\nName : v\r\n\r\n" },
	{ HTTP_DIR_REQUEST, "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n" },
	{ HTTP_DIR_REQUEST, "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n" },
	{ HTTP_DIR_REQUEST, "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n" },
	{ HTTP_DIR_REQUEST, "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n" },
	{ HTTP_DIR_RESPONSE, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n" },
	{ HTTP_DIR_RESPONSE, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n" },
	{ HTTP_DIR_RESPONSE, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n;x\r\n" },
	{ HTTP_DIR_RESPONSE, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX" },
	{ HTTP_DIR_RESPONSE,
	  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n" },
};

TEST(test_garbage)
{
	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		struct rec *r = rec_new(garbage[i].dir);
		char label[32];

		snprintf(label, sizeof(label), "garbage %zu", i);
		ASSERT_EQ(feed_str(r, garbage[i].in, 1), -EPROTO, label);
		ASSERT_TRUE(http_desynced(&r->p), label);
		ASSERT_FALSE(http_idle(&r->p), label);
		ASSERT_EQ(feed_str(r, "HTTP/1.1 200 OK\r\n\r\n", 2), -EPROTO, label);
		rec_free(r);
	}
}

TEST(test_garbage_is_quick)
{
	struct rec *r = rec_new(HTTP_DIR_RESPONSE);

	/* One wrong byte is enough; no waiting for a line end. */
	ASSERT_EQ(feed_str(r, "H", 1), 0, "H");
	ASSERT_EQ(feed_str(r, "X", 1), -EPROTO, "HX");
	http_free(&r->p);
	http_init(&r->p, HTTP_DIR_REQUEST, &rec_cb, r);
	ASSERT_EQ(feed_str(r, "POSTPOSTPOSTPOSTPOST", 1), -EPROTO, "method too long");
	http_free(&r->p);
	http_init(&r->p, HTTP_DIR_REQUEST, &rec_cb, r);
	ASSERT_EQ(feed_str(r, "{\"model\"", 1), -EPROTO, "json");
	/* http_init starts over. */
	http_free(&r->p);
	http_init(&r->p, HTTP_DIR_REQUEST, &rec_cb, r);
	ASSERT_OK(feed_str(r, "GET / HTTP/1.1\r\n\r\n", 1), "fresh");
	rec_free(r);
}

TEST(test_head_limit)
{
	struct rec *r = rec_new(HTTP_DIR_REQUEST);
	char line[100];
	int err = 0;

	memset(line, 'a', sizeof(line));
	memcpy(line, "X-Pad: ", 7);
	line[sizeof(line) - 2] = '\r';
	line[sizeof(line) - 1] = '\n';
	ASSERT_OK(feed_str(r, "GET / HTTP/1.1\r\n", 1), "start");
	for (int i = 0; i < 100 && !err; i++)
		err = http_feed(&r->p, (const uint8_t *)line, sizeof(line), 1);
	ASSERT_EQ(err, -EPROTO, "head over HTTP_HEAD_MAX");

	http_free(&r->p);
	http_init(&r->p, HTTP_DIR_REQUEST, &rec_cb, r);
	ASSERT_EQ(http_feed(&r->p, (const uint8_t *)"GET /\0 HTTP/1.1\r\n\r\n", 19, 1), -EPROTO,
		  "NUL in head");
	rec_free(r);
}

/* A connection closed part way: nothing ends, nothing crashes, the parser is idle again. */
TEST(test_truncated)
{
	struct fixture f;

	if (!ASSERT_OK(fixture_load(&f, "uvicorn_h11.resp"), "load"))
		return;
	for (size_t k = 0; k < f.len; k++) {
		struct rec *r = rec_new(HTTP_DIR_RESPONSE);

		ASSERT_OK(http_feed(&r->p, f.buf, k, 0), "prefix");
		http_close(&r->p, 1);
		if (!ASSERT_EQ(r->nev, k >= f.writes[0] ? 1 : 0, "no end for a cut message") ||
		    !ASSERT_TRUE(http_idle(&r->p), "idle after close")) {
			printf("  prefix %zu\n", k);
			rec_free(r);
			break;
		}
		rec_free(r);
	}
	fixture_free(&f);
}

/* Feeds writes [0, w), then write w as: `a` bytes, a gap of `gap` bytes, the rest. */
static int feed_with_gap(struct rec *r, const struct fixture *f, size_t w, size_t a, size_t gap)
{
	int err = 0;

	for (size_t i = 0; i < f->nwrites && !err; i++) {
		size_t start = fixture_write_start(f, i), len = f->writes[i] - start;

		if (i != w) {
			err = http_feed(&r->p, f->buf + start, len, i);
			continue;
		}
		err = http_feed(&r->p, f->buf + start, a, i);
		http_gap(&r->p, gap);
		if (!err)
			err = http_feed(&r->p, f->buf + start + a + gap, len - a - gap, i);
	}
	return err;
}

TEST(test_gap_in_chunk_data)
{
	struct rec *full = rec_new(HTTP_DIR_RESPONSE), *r = rec_new(HTTP_DIR_RESPONSE);
	struct fixture f;

	if (!ASSERT_OK(fixture_load(&f, "uvicorn_h11.resp"), "load"))
		goto out;
	ASSERT_OK(fixture_replay(&f, PLAN_WRITES, 0, rec_feed, full), "full");
	/* Write 3 is "d3\r\ndata: {...}\n\n\r\n": lose 50 bytes of the frame. */
	ASSERT_OK(feed_with_gap(r, &f, 3, 30, 50), "gap");
	ASSERT_EQ(r->gap_bytes, 50, "exact skip reported");
	ASSERT_EQ(r->gaps, 1, "one gap");
	ASSERT_EQ(r->body_len, full->body_len - 50, "the rest delivered");
	ASSERT_EQ(r->nev, 2, "still ends");
	ASSERT_EQ(r->ev[1].ts, 8, "at the terminator");
	fixture_free(&f);
out:
	rec_free(full);
	rec_free(r);
}

TEST(test_gap_over_chunk_end)
{
	struct fixture f;
	size_t len3;

	if (!ASSERT_OK(fixture_load(&f, "uvicorn_h11.resp"), "load"))
		return;
	len3 = f.writes[3] - f.writes[2];
	/* Lose the tail of the chunk data and its CR LF: still exact. */
	for (size_t tail = 1; tail <= 2; tail++) {
		struct rec *r = rec_new(HTTP_DIR_RESPONSE);

		ASSERT_OK(feed_with_gap(r, &f, 3, 30, len3 - 30 - 2 + tail), "gap to CRLF");
		ASSERT_EQ(r->gap_bytes, len3 - 30 - 2, "data part only");
		ASSERT_EQ(r->nev, 2, "ends");
		rec_free(r);
	}
	/* One byte more reaches into the next chunk-size line (of unknown length). */
	{
		struct rec *r = rec_new(HTTP_DIR_RESPONSE);

		ASSERT_OK(feed_with_gap(r, &f, 3, 30, len3 - 30), "gap to the end of the write");
		ASSERT_EQ(feed_str(r, "d", 4), -EPROTO, "into the next size line: desync");
		ASSERT_TRUE(http_desynced(&r->p), "desynced");
		rec_free(r);
	}
	fixture_free(&f);
}

TEST(test_gap_in_size_line)
{
	struct rec *r = rec_new(HTTP_DIR_RESPONSE);
	struct fixture f;

	if (!ASSERT_OK(fixture_load(&f, "uvicorn_h11.resp"), "load"))
		goto out;
	/* Write 3 begins with "d3\r\n": lose its second byte. */
	ASSERT_EQ(feed_with_gap(r, &f, 3, 1, 1), -EPROTO, "desync");
	ASSERT_TRUE(http_desynced(&r->p), "desynced");
	ASSERT_EQ(r->gaps, 0, "not a body gap");
	ASSERT_EQ(r->nev, 1, "no end");
	http_close(&r->p, 9);
	ASSERT_EQ(r->nev, 1, "close of a desynced parser ends nothing");
	ASSERT_TRUE(http_desynced(&r->p), "stays desynced");
	fixture_free(&f);
out:
	rec_free(r);
}

TEST(test_gap_in_head_or_idle)
{
	struct rec *r = rec_new(HTTP_DIR_RESPONSE);

	ASSERT_OK(feed_str(r, "HTTP/1.1 200 OK\r\nContent-", 1), "part of a head");
	http_gap(&r->p, 10);
	ASSERT_TRUE(http_desynced(&r->p), "gap in head");
	ASSERT_EQ(feed_str(r, "Length: 0\r\n\r\n", 2), -EPROTO, "refused");

	http_free(&r->p);
	http_init(&r->p, HTTP_DIR_RESPONSE, &rec_cb, r);
	http_gap(&r->p, 0);
	ASSERT_TRUE(http_idle(&r->p), "an empty gap is nothing");
	http_gap(&r->p, 3);
	ASSERT_TRUE(http_desynced(&r->p), "gap between messages");
	rec_free(r);
}

TEST(test_gap_in_content_length)
{
	struct rec *r = rec_new(HTTP_DIR_RESPONSE);

	ASSERT_OK(feed_str(r, "HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n0123456789", 4),
		  "head");
	http_gap(&r->p, 15);
	ASSERT_EQ(r->gap_bytes, 15, "reported");
	ASSERT_OK(feed_str(r, "abc", 5), "more");
	/* The last 2 bytes are lost too: the message ends with the latest feed's ts. */
	http_gap(&r->p, 2);
	ASSERT_EQ(r->nev, 2, "ended by the gap");
	ASSERT_EQ(r->ev[1].ts, 5, "ts of the last feed");
	ASSERT_TRUE(http_idle(&r->p), "idle");
	ASSERT_OK(feed_str(r, "HTTP/1.1 204 No Content\r\n\r\n", 6), "next message");
	ASSERT_EQ(r->nev, 4, "parsed");

	/* A gap longer than the body reaches the next head. */
	http_free(&r->p);
	http_init(&r->p, HTTP_DIR_RESPONSE, &rec_cb, r);
	ASSERT_OK(feed_str(r, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", 1), "head");
	http_gap(&r->p, 4);
	ASSERT_TRUE(http_desynced(&r->p), "desync");
	rec_free(r);
}

static uint64_t fuzz_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Mutated fixtures cut at random places: the parser may refuse them, never crash. */
TEST(test_fuzz)
{
	static const char *const names[] = { "uvicorn_h11.resp", "node_express.resp",
					     "keepalive.resp", "keepalive.req" };
	uint64_t seed = 0x9e3779b97f4a7c15ull;

	for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
		enum http_dir dir = strstr(names[n], ".req") ? HTTP_DIR_REQUEST : HTTP_DIR_RESPONSE;
		struct fixture f;

		if (!ASSERT_OK(fixture_load(&f, names[n]), names[n]))
			return;
		for (int round = 0; round < FUZZ_ROUNDS; round++) {
			uint8_t *buf = malloc(f.len);
			struct rec *r = rec_new(dir);
			size_t off = 0;
			int err = 0;

			memcpy(buf, f.buf, f.len);
			for (int m = 0; m < 1 + round % 4; m++)
				buf[fuzz_next(&seed) % f.len] = (uint8_t)fuzz_next(&seed);
			while (off < f.len) {
				size_t len = 1 + fuzz_next(&seed) % 64;

				if (len > f.len - off)
					len = f.len - off;
				if (fuzz_next(&seed) % 16 == 0)
					http_gap(&r->p, len);
				else
					err = http_feed(&r->p, buf + off, len, off);
				if (!ASSERT_TRUE(err == 0 || err == -EPROTO, "result"))
					break;
				off += len;
			}
			http_close(&r->p, f.len);
			rec_free(r);
			free(buf);
		}
		fixture_free(&f);
	}
}

int main(void)
{
	return check_run_all();
}
