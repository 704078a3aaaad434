// SPDX-License-Identifier: MIT
/* Trace context headers (user/pipeline/tracectx.c): traceparent by the W3C rules, tracestate
 * kept in bounds, x-request-id cleaned; and the same read from an HTTP/1.1 head (http.c) and an
 * HTTP/2 header block (h2.c). */
#include <stdlib.h>

#include "check.h"
#include "pipeline/h2.h"
#include "pipeline/http.h"
#include "pipeline/tracectx.h"

#define TID "4bf92f3577b34da6a3ce929d0e0e4736"
#define PID "00f067aa0ba902b7"
#define GOOD "00-" TID "-" PID "-01"

static bool parses(const char *s)
{
	struct trace_parent tp;

	return tracectx_parse_traceparent(s, strlen(s), &tp) == 0 && tp.valid;
}

TEST(test_traceparent_rules)
{
	struct trace_parent tp;
	char hex[33];

	ASSERT_OK(tracectx_parse_traceparent(GOOD, strlen(GOOD), &tp), "the spec's example");
	tracectx_hex(hex, tp.trace_id, 16);
	ASSERT_STREQ(hex, TID, "trace-id");
	tracectx_hex(hex, tp.parent_id, 8);
	ASSERT_STREQ(hex, PID, "parent-id");
	ASSERT_EQ(tp.flags, 1, "sampled");
	ASSERT_TRUE(parses("00-" TID "-" PID "-00"), "flags 00");
	ASSERT_TRUE(!parses("00-4BF92F3577B34DA6A3CE929D0E0E4736-" PID "-01"), "upper-case hex");
	ASSERT_TRUE(!parses("00-00000000000000000000000000000000-" PID "-01"), "zero trace-id");
	ASSERT_TRUE(!parses("00-" TID "-0000000000000000-01"), "zero parent-id");
	ASSERT_TRUE(!parses("ff-" TID "-" PID "-01"), "version ff");
	ASSERT_TRUE(!parses("0g-" TID "-" PID "-01"), "version not hex");
	ASSERT_TRUE(!parses(GOOD "-x"), "version 00 with more after it");
	ASSERT_TRUE(!parses("00-" TID "-" PID "-0"), "short flags");
	ASSERT_TRUE(!parses("00_" TID "-" PID "-01"), "a wrong separator");
	ASSERT_TRUE(!parses("00-" TID "-" PID "-zz"), "flags not hex");
	ASSERT_TRUE(!parses(""), "empty");
	ASSERT_TRUE(!parses("00-" TID), "cut");
	/* A later version is read as 00 when its first 55 characters are, and '-' follows. */
	ASSERT_TRUE(parses("01-" TID "-" PID "-01"), "version 01");
	ASSERT_TRUE(parses("cc-" TID "-" PID "-01-what-the-future-holds"), "version cc, more");
	ASSERT_TRUE(!parses("cc-" TID "-" PID "-01what"), "version cc, no '-' after the flags");
}

static struct trace_ctx fields(const char *const *kv, size_t n)
{
	struct trace_ctx c;

	tracectx_init(&c);
	for (size_t i = 0; i < n; i++)
		tracectx_field(&c, kv[2 * i], strlen(kv[2 * i]), kv[2 * i + 1],
			       strlen(kv[2 * i + 1]));
	tracectx_finish(&c);
	return c;
}

TEST(test_fields)
{
	const char *const two_tp[] = { "traceparent", GOOD, "traceparent", GOOD };
	const char *const upper[] = { "TraceParent",  " " GOOD "\t", "TRACESTATE",   "a=1, b=2",
				      "X-Request-Id", "r-1",	     "x-request-id", "r-2" };
	const char *const bad_state[] = { "traceparent", GOOD, "tracestate", "a=1,B=2" };
	const char *const no_tp[] = { "tracestate", "a=1" };
	const char *const bad_tp[] = { "traceparent", "00-" TID "-" PID, "tracestate", "a=1" };
	const char *const split[] = { "traceparent", GOOD,	   "tracestate",
				      "a=1",	     "tracestate", ",,tenant@sys=x y,b=2" };
	const char *const other[] = { "content-type", "a/b", "traceparentx", GOOD };
	struct trace_ctx c;

	c = fields(upper, 4);
	ASSERT_TRUE(c.tp.valid && !c.malformed, "names are case-insensitive, value trimmed");
	ASSERT_STREQ(c.state, "a=1,b=2", "tracestate, members trimmed");
	ASSERT_STREQ(c.request_id, "r-1", "the first x-request-id");
	c = fields(two_tp, 2);
	ASSERT_TRUE(!c.tp.valid && c.malformed, "two traceparent fields are a list: invalid");
	c = fields(bad_state, 2);
	ASSERT_TRUE(c.tp.valid, "traceparent stands");
	ASSERT_STREQ(c.state, "", "a malformed member drops the whole tracestate");
	c = fields(no_tp, 1);
	ASSERT_STREQ(c.state, "", "no tracestate without traceparent");
	ASSERT_TRUE(!c.malformed, "and nothing malformed");
	c = fields(bad_tp, 2);
	ASSERT_TRUE(!c.tp.valid && c.malformed, "a cut traceparent is malformed");
	ASSERT_STREQ(c.state, "", "its tracestate is not kept");
	c = fields(split, 3);
	ASSERT_STREQ(c.state, "a=1,tenant@sys=x y,b=2", "two fields combine; empty members go");
	c = fields(other, 2);
	ASSERT_TRUE(!c.tp.valid && !c.malformed && !c.request_id[0], "other names are not read");
}

TEST(test_bounds)
{
	char state[2048], member[200], id[400];
	const char *kv[4] = { "traceparent", GOOD, "tracestate", state };
	struct trace_ctx c;
	size_t n = 0;

	/* 60 members of 20 characters: 32 at most, and 512 characters at most, whole ones. */
	for (int i = 0; i < 60; i++)
		n += (size_t)snprintf(state + n, sizeof(state) - n, "%sk%02d=%016d", i ? "," : "",
				      i, i);
	c = fields(kv, 2);
	ASSERT_TRUE(strlen(c.state) <= TRACECTX_STATE_MAX, "bounded");
	ASSERT_EQ(c.nmembers, 24, "24 whole members of 21 characters fit 512");
	ASSERT_TRUE(strncmp(c.state, "k00=", 4) == 0, "in order");
	ASSERT_TRUE(c.state[strlen(c.state) - 1] != ',', "ends at a member");
	/* A member over 128 characters goes first, the ones after it still kept. */
	memset(member, 'v', sizeof(member));
	member[sizeof(member) - 1] = '\0';
	n = 0;
	for (int i = 0; i < 23; i++)
		n += (size_t)snprintf(state + n, sizeof(state) - n, "k%02d=%016d,", i, i);
	snprintf(state + n, sizeof(state) - n, "long=%s,z=1", member);
	c = fields(kv, 2);
	ASSERT_TRUE(strstr(c.state, "long=") == NULL, "the long member dropped");
	ASSERT_TRUE(strstr(c.state, ",z=1") != NULL, "the short one after it kept");
	/* x-request-id: cleaned and cut. */
	memset(id, 'a', sizeof(id));
	id[sizeof(id) - 1] = '\0';
	id[3] = '\n';
	id[4] = '\x1b';
	kv[2] = "x-request-id";
	kv[3] = id;
	c = fields(kv, 2);
	ASSERT_TRUE(strlen(c.request_id) < TRACECTX_REQID_MAX, "cut at its bound");
	ASSERT_TRUE(!strchr(c.request_id, '\n') && !strchr(c.request_id, '\x1b'),
		    "no control characters");
	ASSERT_TRUE(strstr(c.request_id, "\xef\xbf\xbd") != NULL, "replaced, as utf8.c does");
}

struct got_head {
	int heads;
	struct trace_ctx trace;
};

static void on_head(void *ctx, const struct http_head *h, uint64_t ts)
{
	struct got_head *g = ctx;

	(void)ts;
	g->heads++;
	g->trace = h->trace;
}

TEST(test_http1_head)
{
	static const char req[] = "POST /v1/chat/completions HTTP/1.1\r\n"
				  "Host: router\r\n"
				  "traceparent: " GOOD "\r\n"
				  "Tracestate: congo=t61rcWkgMzE\r\n"
				  "X-Request-ID: 7f3c\r\n"
				  "Content-Length: 2\r\n\r\n{}";
	static const char resp[] = "HTTP/1.1 200 OK\r\ntraceparent: " GOOD "\r\n"
				   "Content-Length: 0\r\n\r\n";
	const struct http_callbacks cb = { .on_head = on_head };
	struct got_head g = { 0 };
	struct http_parser p;
	char hex[33];

	http_init(&p, HTTP_DIR_REQUEST, &cb, &g);
	/* One byte at a time: the head is read whole whatever the split. */
	for (size_t i = 0; i < sizeof(req) - 1; i++)
		ASSERT_OK(http_feed(&p, (const uint8_t *)req + i, 1, i), "feed");
	http_free(&p);
	ASSERT_EQ(g.heads, 1, "one head");
	ASSERT_TRUE(g.trace.tp.valid, "traceparent");
	tracectx_hex(hex, g.trace.tp.parent_id, 8);
	ASSERT_STREQ(hex, PID, "its parent-id");
	ASSERT_STREQ(g.trace.state, "congo=t61rcWkgMzE", "tracestate");
	ASSERT_STREQ(g.trace.request_id, "7f3c", "x-request-id");

	memset(&g, 0, sizeof(g));
	http_init(&p, HTTP_DIR_RESPONSE, &cb, &g);
	ASSERT_OK(http_feed(&p, (const uint8_t *)resp, sizeof(resp) - 1, 1), "response");
	http_free(&p);
	ASSERT_TRUE(g.heads == 1 && !g.trace.tp.valid, "a response's headers are not a request's");
}

static void on_headers(void *ctx, uint32_t stream, const struct h2_head *h, bool es, uint64_t ts)
{
	struct got_head *g = ctx;

	(void)stream, (void)es, (void)ts;
	g->heads++;
	g->trace = h->trace;
}

TEST(test_h2_block)
{
	static const char *const kv[] = {
		":method", "POST",	 ":path", "/v1/chat/completions", "traceparent",
		GOOD,	   "tracestate", "a=b",	  "x-request-id",	  "req-9"
	};
	const struct h2_callbacks cb = { .on_headers = on_headers };
	nghttp2_nv nv[5];
	nghttp2_hd_deflater *d;
	uint8_t wire[512];
	struct got_head g = { 0 };
	struct h2_parser p;
	ssize_t n;

	for (size_t i = 0; i < 5; i++)
		nv[i] =
		    (nghttp2_nv){ (uint8_t *)kv[2 * i], (uint8_t *)kv[2 * i + 1], strlen(kv[2 * i]),
				  strlen(kv[2 * i + 1]), NGHTTP2_NV_FLAG_NONE };
	if (!ASSERT_OK(nghttp2_hd_deflate_new(&d, 4096), "deflater"))
		return;
	memcpy(wire, H2_PREFACE, H2_PREFACE_LEN);
	n = nghttp2_hd_deflate_hd(d, wire + H2_PREFACE_LEN + 9, 400, nv, 5);
	nghttp2_hd_deflate_del(d);
	if (!ASSERT_TRUE(n > 0, "encoded"))
		return;
	/* HEADERS, END_STREAM | END_HEADERS, stream 1. */
	wire[H2_PREFACE_LEN + 0] = (uint8_t)(n >> 16);
	wire[H2_PREFACE_LEN + 1] = (uint8_t)(n >> 8);
	wire[H2_PREFACE_LEN + 2] = (uint8_t)n;
	wire[H2_PREFACE_LEN + 3] = H2_HEADERS;
	wire[H2_PREFACE_LEN + 4] = 0x1 | 0x4;
	memcpy(wire + H2_PREFACE_LEN + 5, "\0\0\0\1", 4);
	if (!ASSERT_OK(h2_init(&p, true, &cb, &g, NULL), "init"))
		return;
	ASSERT_OK(h2_feed(&p, wire, H2_PREFACE_LEN + 9 + (size_t)n, 1), "feed");
	h2_free(&p);
	ASSERT_EQ(g.heads, 1, "one block");
	ASSERT_TRUE(g.trace.tp.valid, "traceparent");
	ASSERT_STREQ(g.trace.state, "a=b", "tracestate");
	ASSERT_STREQ(g.trace.request_id, "req-9", "x-request-id");
}

int main(void)
{
	return check_run_all();
}
