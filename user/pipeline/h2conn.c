// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/buf.h"
#include "pipeline/grpc.h"
#include "pipeline/h2.h"
#include "pipeline/h2conn.h"
#include "pipeline/reqbody.h"
#include "pipeline/sse.h"
#include "lib/utf8.h"

/* Streams open at once on one connection: servers allow 100 to 250 (SETTINGS_MAX_CONCURRENT_
 * STREAMS); more are counted as overflow, like HTTP/1.1 pipelining past its bound. */
#define H2_STREAMS_MAX 256
/* As for HTTP/1.1 (h1conn.c): request body bytes kept to read model/stream/max_tokens, and
 * non-streamed response body bytes kept to read `usage`. */
#define H2_REQ_BODY_MAX (64 * 1024)
#define H2_RESP_BODY_MAX (256 * 1024)

struct h2conn;

struct h2s {
	struct h2s *next;
	struct h2conn *h;
	uint32_t id;
	struct request *r;
	bool started;	/* handed to the sink's request_start */
	bool req_ended; /* the request side sent END_STREAM */
	bool resp_head; /* the final response headers came */
	bool sse_on;	/* sse holds a parser */
	bool grpc;	/* application/grpc: DATA is length-prefixed messages */
	/* The requesting side reset it at reset_ns: it is finished (aborted) once the responses'
	 * direction has been seen up to then (h2conn_feed), not at once: a response write made
	 * before the reset may be recorded after it (TLS plaintext comes at the call's return). */
	bool reset;
	uint64_t reset_ns;
	uint64_t head_ns; /* when the request's headers came */
	uint64_t req_bytes;
	struct sse_parser sse;
	struct grpc_parser gp;
	struct buf body; /* the request body, then a non-streamed response body */
};

struct h2conn {
	struct conn_ident id;
	bool dead;
	struct h2_parser req, resp;
	struct h2s *streams;
	uint32_t nstreams, seq;
	uint32_t nreset; /* streams reset and not finished yet (h2conn_finish_reset) */
	uint64_t rx_ns;
};

/* ---- streams ---- */

static struct h2s *h2s_find(struct h2conn *h, uint32_t id)
{
	for (struct h2s *s = h->streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

static void h2s_free(struct h2conn *h, struct h2s *s)
{
	struct conn_table *t = h->id.t;

	if (s->sse_on) {
		t->stats.oversize_frames += s->sse.oversize_frames;
		t->stats.damaged_frames += s->sse.damaged_frames;
		sse_free(&s->sse);
	}
	if (s->body.p)
		memset(s->body.p, 0, s->body.len); /* a prompt, or an answer: only its structure */
	buf_reset(&s->body, &t->budget);
	request_free(s->r);
	budget_give(&t->budget, sizeof(*s));
	free(s);
}

static void h2s_unlink(struct h2conn *h, struct h2s *s)
{
	struct h2s **pp = &h->streams;

	while (*pp != s)
		pp = &(*pp)->next;
	*pp = s->next;
	h->nstreams--;
	if (s->reset)
		h->nreset--;
}

static void h2s_start(struct h2s *s, uint64_t arrival)
{
	struct h2conn *h = s->h;
	struct request *r = s->r;

	r->arrival_ns = arrival;
	if (r->received_ns > arrival)
		r->received_ns = 0;
	s->started = true;
	exchange_start(h->id.t, r);
}

/* The exchange on s is over at ts: it goes to the sink (or, never started and never answered,
 * is a partial request), and s is gone. */
static void h2s_finish(struct h2s *s, uint64_t ts, bool complete)
{
	struct h2conn *h = s->h;
	struct request *r = s->r;

	h2s_unlink(h, s);
	if (!s->started && !s->resp_head) {
		h->id.t->stats.partial_requests++;
		h2s_free(h, s);
		return;
	}
	if (!s->started)
		h2s_start(s, s->head_ns);
	if (s->sse_on) {
		uint64_t before = s->sse.oversize_frames;

		sse_finish(&s->sse, ts);
		r->dropped_frames += s->sse.oversize_frames - before;
	} else if (s->grpc) {
		/* Ended inside a message: that message is not one the client got. */
		if (!grpc_idle(&s->gp))
			r->dropped_frames++;
	} else if (s->resp_head && s->body.len && !s->body.dropped) {
		request_read_body(r, s->body.p, s->body.len);
	}
	request_close(r, ts, complete);
	s->r = NULL;
	h2s_free(h, s);
	exchange_done(h->id.t, r);
}

static void sse_on_frame(void *ctx, const struct sse_frame *f, uint64_t ts)
{
	struct h2s *s = ctx;

	conn_add_frame(s->h->id.t, s->r, f, ts);
}

static void grpc_on_message(void *ctx, uint32_t len, bool damaged, uint64_t ts)
{
	struct h2s *s = ctx;

	(void)len;
	(void)damaged; /* its lost bytes are counted already */
	s->r->frames++;
	conn_add_message(s->h->id.t, s->r, ts);
}

/* ---- the requests' direction ---- */

static void req_end(struct h2s *s, uint64_t ts)
{
	struct h2conn *h = s->h;
	struct request *r = s->r;

	if (s->req_ended)
		return;
	s->req_ended = true;
	if (r->prompt_bytes <= 0)
		r->prompt_bytes = (int64_t)(s->req_bytes + r->request_uncaptured);
	r->request_uncaptured += s->body.dropped;
	if (s->body.len)
		reqbody_parse(s->body.p, s->body.len,
			      s->body.len + s->body.dropped + r->request_uncaptured, &r->info);
	if (s->body.len && !s->body.dropped && !r->request_uncaptured)
		req_labels_body(h->id.t->labels, &r->labels, s->body.p, s->body.len);
	if (s->body.p)
		memset(s->body.p, 0, s->body.len);
	buf_reset(&s->body, &h->id.t->budget);
	if (!s->started)
		h2s_start(s, ts);
}

static void req_on_headers(void *ctx, uint32_t id, const struct h2_head *hd, bool es, uint64_t ts)
{
	struct h2conn *h = ctx;
	struct h2s *s = h2s_find(h, id);
	struct request *r;

	if (!s) {
		if (h->nstreams >= H2_STREAMS_MAX || !budget_take(&h->id.t->budget, sizeof(*s))) {
			h->id.t->stats.pipeline_overflow++;
			return;
		}
		s = calloc(1, sizeof(*s));
		r = s ? exchange_request(&h->id, h->seq++, PROTO_HTTP2) : NULL;
		if (!r) {
			free(s);
			budget_give(&h->id.t->budget, sizeof(*s));
			return;
		}
		s->h = h;
		s->id = id;
		s->r = r;
		s->head_ns = ts;
		s->grpc = strncmp(hd->content_type, "application/grpc", 16) == 0;
		utf8_clean(r->method, sizeof(r->method), hd->method, strlen(hd->method));
		utf8_clean(r->path, sizeof(r->path), hd->path, strlen(hd->path));
		r->received_ns = h->id.client ? 0 : h->rx_ns;
		h->rx_ns = 0;
		r->stream = id;
		r->prompt_bytes = hd->content_length >= 0 ? hd->content_length : 0;
		/* Of the header block, only these header values are kept. */
		r->trace = hd->trace;
		r->slo_head = hd->slo;
		r->labels = hd->labels;
		r->labels.spec = h->id.t->labels;
		s->next = h->streams;
		h->streams = s;
		h->nstreams++;
	}
	if (es)
		req_end(s, ts);
}

static void req_on_data(void *ctx, uint32_t id, const uint8_t *buf, size_t len, uint64_t ts)
{
	struct h2s *s = h2s_find(ctx, id);

	(void)ts;
	if (!s || s->req_ended)
		return;
	s->req_bytes += len;
	/* A gRPC request is protobuf: nothing in it reads as model or max_tokens. */
	if (!s->grpc)
		buf_append(&s->body, &s->h->id.t->budget, buf, len, H2_REQ_BODY_MAX);
}

static void req_on_data_gap(void *ctx, uint32_t id, size_t len)
{
	struct h2s *s = h2s_find(ctx, id);

	if (s && !s->req_ended)
		s->r->request_uncaptured += len;
}

static void req_on_end_stream(void *ctx, uint32_t id, uint64_t ts)
{
	struct h2s *s = h2s_find(ctx, id);

	if (s)
		req_end(s, ts);
}

/* The requesting side reset the stream: it gave up on the answer. */
static void req_on_rst(void *ctx, uint32_t id, uint32_t code, uint64_t ts)
{
	struct h2s *s = h2s_find(ctx, id);

	(void)code;
	if (!s || s->reset)
		return;
	request_peer_gone(s->r, ts);
	s->reset = true;
	s->reset_ns = ts;
	s->h->nreset++;
}

/* Finishes the streams reset before ts (all: ts 0): the responses' direction is seen up to
 * ts, so everything written before their reset has come. */
static void h2conn_finish_reset(struct h2conn *h, uint64_t ts)
{
	struct h2s *s = h->streams;

	/* The responses' every feed asks: most connections have no stream reset. */
	if (!h->nreset)
		return;

	while (s) {
		struct h2s *next = s->next;

		if (s->reset && (!ts || s->reset_ns <= ts))
			h2s_finish(s, s->reset_ns, false);
		s = next;
	}
}

static void req_on_table_size(void *ctx, uint32_t size)
{
	struct h2conn *h = ctx;

	h2_set_table_max(&h->resp, size);
}

static const struct h2_callbacks req_cbs = {
	.on_headers = req_on_headers,
	.on_data = req_on_data,
	.on_data_gap = req_on_data_gap,
	.on_end_stream = req_on_end_stream,
	.on_rst = req_on_rst,
	.on_table_size = req_on_table_size,
};

/* ---- the responses' direction ---- */

static void resp_on_headers(void *ctx, uint32_t id, const struct h2_head *hd, bool es, uint64_t ts)
{
	struct h2conn *h = ctx;
	struct h2s *s = h2s_find(h, id);
	struct request *r;

	if (!s) {
		if (hd->status)
			h->id.t->stats.orphan_responses++;
		return;
	}
	r = s->r;
	if (hd->status >= 100 && hd->status < 200 && !es)
		return; /* informational */
	if (hd->status && !s->resp_head) {
		int mode;

		s->resp_head = true;
		/* Answered before its request ended (gRPC bidirectional streams): it arrived
		 * with its headers. */
		if (!s->started)
			h2s_start(s, s->head_ns);
		r->status = hd->status;
		if (strncmp(hd->content_type, "application/grpc", 16) == 0) {
			s->grpc = true;
			r->streamed = true;
			r->format = FMT_GRPC;
			grpc_init(&s->gp, grpc_on_message, s);
		} else if ((mode = sse_mode_for(hd->content_type)) >= 0) {
			r->streamed = true;
			sse_init(&s->sse, mode, sse_on_frame, s);
			sse_set_budget(&s->sse, &h->id.t->budget);
			s->sse_on = true;
		} else {
			s->grpc = false;
		}
	}
	if (hd->grpc_status >= 0) {
		r->grpc_status = hd->grpc_status;
		if (hd->grpc_status != 0)
			r->error_frame = true;
	}
	if (es)
		h2s_finish(s, ts, true);
}

static void resp_on_data(void *ctx, uint32_t id, const uint8_t *buf, size_t len, uint64_t ts)
{
	struct h2s *s = h2s_find(ctx, id);
	struct request *r;

	if (!s || !s->resp_head)
		return;
	r = s->r;
	if (len)
		request_body_bytes(r, len, ts);
	if (s->grpc && r->streamed) {
		if (grpc_feed(&s->gp, buf, len, ts) < 0)
			r->unknown_frames = true;
	} else if (s->sse_on) {
		uint64_t before = s->sse.oversize_frames;

		sse_feed(&s->sse, buf, len, ts);
		/* A frame not read may have held tokens: the request's counts are unknown. */
		r->dropped_frames += s->sse.oversize_frames - before;
	} else {
		buf_append(&s->body, &s->h->id.t->budget, buf, len, H2_RESP_BODY_MAX);
	}
}

static void resp_on_data_gap(void *ctx, uint32_t id, size_t len)
{
	struct h2s *s = h2s_find(ctx, id);

	if (!s || !s->resp_head)
		return;
	s->r->lost_bytes += len;
	if (s->grpc && s->r->streamed)
		grpc_gap(&s->gp, len, s->h->resp.last_ts);
	else if (s->sse_on)
		sse_gap(&s->sse, len);
	else
		s->body.dropped += len;
}

static void resp_on_end_stream(void *ctx, uint32_t id, uint64_t ts)
{
	struct h2s *s = h2s_find(ctx, id);

	if (s && s->resp_head)
		h2s_finish(s, ts, true);
	else if (s)
		h2s_finish(s, ts, false);
}

/* The answering side reset the stream: the exchange ends unfinished. */
static void resp_on_rst(void *ctx, uint32_t id, uint32_t code, uint64_t ts)
{
	struct h2s *s = h2s_find(ctx, id);

	(void)code;
	if (s)
		h2s_finish(s, ts, false);
}

/* The server will not process streams above last: those open are abandoned. */
static void resp_on_goaway(void *ctx, uint32_t last, uint32_t code, uint64_t ts)
{
	struct h2conn *h = ctx;
	struct h2s *s = h->streams;

	(void)code;
	while (s) {
		struct h2s *next = s->next;

		if (s->id > last)
			h2s_finish(s, ts, false);
		s = next;
	}
}

static void resp_on_table_size(void *ctx, uint32_t size)
{
	struct h2conn *h = ctx;

	h2_set_table_max(&h->req, size);
}

static const struct h2_callbacks resp_cbs = {
	.on_headers = resp_on_headers,
	.on_data = resp_on_data,
	.on_data_gap = resp_on_data_gap,
	.on_end_stream = resp_on_end_stream,
	.on_rst = resp_on_rst,
	.on_goaway = resp_on_goaway,
	.on_table_size = resp_on_table_size,
};

/* ---- the connection ---- */

static void *h2conn_open(const struct conn_ident *id)
{
	struct h2conn *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->id = *id;
	if (h2_init(&h->req, true, &req_cbs, h, &id->t->budget) ||
	    h2_init(&h->resp, false, &resp_cbs, h, &id->t->budget)) {
		h2_free(&h->req);
		h2_free(&h->resp);
		free(h);
		return NULL;
	}
	h->req.labels = id->t->labels;
	if (!id->client)
		id->t->stats.h2_conns++;
	return h;
}

void h2conn_adopt(struct h2conn *h, struct request *r)
{
	struct h2s *s = calloc(1, sizeof(*s));

	if (!s || !budget_take(&h->id.t->budget, sizeof(*s))) {
		free(s);
		/* Not kept: it was started, so it ends, unanswered. */
		request_close(r, r->arrival_ns, false);
		exchange_done(h->id.t, r);
		return;
	}
	s->h = h;
	s->id = 1; /* RFC 9113 section 3.2: the upgrade request is stream 1, half-closed */
	s->r = r;
	s->started = s->req_ended = true;
	s->head_ns = r->arrival_ns;
	r->proto = PROTO_HTTP2;
	r->stream = 1;
	s->next = h->streams;
	h->streams = s;
	h->nstreams++;
}

static void h2conn_free(void *m)
{
	struct h2conn *h = m;

	if (!h)
		return;
	while (h->streams) {
		struct h2s *s = h->streams;

		h2s_unlink(h, s);
		if (s->started && !s->r->client)
			h->id.t->inflight--;
		h2s_free(h, s);
	}
	h2_free(&h->req);
	h2_free(&h->resp);
	free(h);
}

/* Lost the framing or the header table: the open streams are reported lost, and the
 * connection is followed no further. */
static void h2conn_dead(struct h2conn *h, uint64_t ts)
{
	h->dead = true;
	h->id.t->stats.desyncs++;
	while (h->streams) {
		struct h2s *s = h->streams;

		if (!s->r->lost_bytes)
			s->r->lost_bytes = 1;
		h2s_finish(s, ts, false);
	}
	h2_free(&h->req);
	h2_free(&h->resp);
}

/* HTTP/2 frames carry their own boundaries: a syscall's start means nothing to them, and no
 * 101 switches the connection on. */
static int h2conn_feed(void *m, bool req, const uint8_t *buf, size_t len, uint64_t ts,
		       bool at_start, uint64_t rx_ns, size_t *used)
{
	struct h2conn *h = m;

	(void)at_start;
	(void)used;

	if (h->dead)
		return -EPROTO;
	/*
	 * The kernel's arrival time is that of a read's first bytes (rx_ns 0: these bytes are not
	 * the first of a read, as TLS plaintext after the first of one socket read). It is a
	 * request's when the read starts with its HEADERS, or with the client preface that a
	 * connection's first request follows in the same burst; it goes to one request only. A
	 * request whose HEADERS follow other frames in a read (a WINDOW_UPDATE, an RST_STREAM the
	 * client sent earlier) has no known arrival at the socket.
	 */
	if (req && rx_ns) {
		const struct h2_parser *p = &h->req;
		bool starts =
		    (p->state == H2_ST_PREFACE && p->got == 0) ||
		    (p->state == H2_ST_HEADER && p->got == 0 && len > 3 && buf[3] == H2_HEADERS);

		h->rx_ns = starts ? rx_ns : 0;
	}
	if (!req)
		h2conn_finish_reset(h, ts);
	if (h2_feed(req ? &h->req : &h->resp, buf, len, ts) < 0) {
		h2conn_dead(h, ts);
		return -EPROTO;
	}
	return 0;
}

static void h2conn_gap(void *m, bool req, uint64_t len, uint64_t ts)
{
	struct h2conn *h = m;
	struct h2_parser *p = req ? &h->req : &h->resp;

	if (h->dead || !len)
		return;
	h2_gap(p, len);
	if (h2_desynced(p))
		h2conn_dead(h, ts);
}

static void h2conn_peer_gone(void *m, uint64_t ts)
{
	struct h2conn *h = m;

	for (struct h2s *s = h->streams; s; s = s->next)
		if (s->started)
			request_peer_gone(s->r, ts);
}

static void h2conn_write_failed(void *m, uint64_t ts)
{
	struct h2conn *h = m;

	/* Which stream's frames the write held is not known: each open response's. */
	for (struct h2s *s = h->streams; s; s = s->next)
		if (s->started && s->resp_head)
			request_write_failed(s->r, ts);
}

static void h2conn_close(void *m, uint64_t ts)
{
	struct h2conn *h = m;

	h2conn_finish_reset(h, 0);
	while (h->streams)
		h2s_finish(h->streams, ts, false);
}

static void h2conn_mark_maybe_lost(void *m)
{
	struct h2conn *h = m;

	for (struct h2s *s = h->streams; s; s = s->next)
		s->r->maybe_lost = true;
}

static uint32_t h2conn_finish_maybe_lost(void *m, uint64_t last_ns)
{
	struct h2conn *h = m;
	struct h2s *s;
	uint32_t n = 0;

	/* Tracing ends: streams reset by the requesting side are over, whatever came after. */
	h2conn_finish_reset(h, 0);
	s = h->streams;

	while (s) {
		struct h2s *next = s->next;

		if (s->r->maybe_lost && (s->started || s->resp_head)) {
			h2s_finish(s, s->r->end_ns ? s->r->end_ns : last_ns, false);
			n++;
		}
		s = next;
	}
	return n;
}

const struct proto_ops h2_proto = {
	.name = "h2",
	.open = h2conn_open,
	.feed = h2conn_feed,
	.gap = h2conn_gap,
	.peer_gone = h2conn_peer_gone,
	.write_failed = h2conn_write_failed,
	.close = h2conn_close,
	.mark_maybe_lost = h2conn_mark_maybe_lost,
	.finish_maybe_lost = h2conn_finish_maybe_lost,
	.free = h2conn_free,
};
