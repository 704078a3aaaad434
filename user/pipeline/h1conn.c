// SPDX-License-Identifier: MIT
#include <stdlib.h>
#include <string.h>

#include "pipeline/buf.h"
#include "pipeline/h1conn.h"
#include "pipeline/http.h"
#include "pipeline/reqbody.h"
#include "pipeline/sse.h"
#include "lib/utf8.h"

/* Request body bytes kept to read model/stream/max_tokens; the rest is counted, not kept. */
#define H1_REQ_BODY_MAX (64 * 1024)
/* Non-streamed response body bytes kept to read `usage`. */
#define H1_RESP_BODY_MAX (256 * 1024)

struct h1conn {
	struct conn_ident id;
	bool switched; /* a 101 handed the connection on: nothing more is HTTP/1.1 */
	/* the request and the response parser are aligned with message boundaries */
	bool in_sync, out_sync;
	struct http_parser req, resp;
	struct sse_parser sse;
	uint32_t seq;
	struct request *reading;		/* request being read */
	struct request *queue[H1_PIPELINE_MAX]; /* read, response pending or in progress */
	uint32_t qhead, qlen;
	bool resp_active;	 /* queue[qhead] has a response head */
	bool resp_informational; /* the response being parsed is 1xx */
	bool resp_orphan;	 /* the response being parsed answers a request we did not see */
	struct buf body; /* request body (model etc.), then the non-streamed response body */
	/* A server's: socket arrival of the read being fed, and of the read that brought the
	 * first bytes of the request being read; latched: the latter is set. */
	uint64_t rx_cur, rx_first;
	bool rx_latched;
	/* The response joined mid-stream (h1conn_join) was taken for one delimited by the close:
	 * a request line on the connection says it had ended, chunked after all */
	bool join_close;
};

static struct request *h1_current(struct h1conn *h)
{
	return h->qlen ? h->queue[h->qhead] : NULL;
}

static struct request *h1_queued(struct h1conn *h, uint32_t i)
{
	return h->queue[(h->qhead + i) % H1_PIPELINE_MAX];
}

/* The request at the front leaves the queue, still in flight. */
static void h1_unqueue(struct h1conn *h)
{
	h->queue[h->qhead] = NULL;
	h->qhead = (h->qhead + 1) % H1_PIPELINE_MAX;
	h->qlen--;
	h->resp_active = false;
}

/* Out of the queue unreported (the connection is freed): no longer in flight either. */
static void h1_pop(struct h1conn *h)
{
	/* In flight counts the streams the traced servers serve. */
	if (!h->id.client)
		h->id.t->inflight--;
	h1_unqueue(h);
}

/* Finish the request at the front of the queue and hand it to the sink. */
static void h1_finish(struct h1conn *h, uint64_t end_ns, bool complete)
{
	struct request *r = h1_current(h);

	if (!r)
		return;
	request_close(r, end_ns, complete);
	h1_unqueue(h);
	buf_reset(&h->body, &h->id.t->budget);
	exchange_done(h->id.t, r);
}

/* ---- request direction ---- */

static void req_on_head(void *ctx, const struct http_head *hd, uint64_t ts)
{
	struct h1conn *h = ctx;
	struct request *r;

	if (h->join_close) {
		/* Its [DONE] (or last frame) says whether it ended: then it is complete. */
		h->join_close = false;
		if (h1_current(h) && h1_current(h)->joined) {
			h1_finish(h, ts, false);
			h->out_sync = false;
		}
	}
	request_free(h->reading);
	buf_reset(&h->body, &h->id.t->budget);
	r = exchange_request(&h->id, h->seq++, PROTO_HTTP1);
	h->reading = r;
	if (!r)
		return;
	utf8_clean(r->method, sizeof(r->method), hd->method, strlen(hd->method));
	/* The target is whatever the client sent: printable text before any sink sees it. */
	utf8_clean(r->path, sizeof(r->path), hd->path, strlen(hd->path));
	r->received_ns = h->rx_first;
	r->h2c_upgrade = hd->upgrade_h2c;
	/* Of the head, only these header values are kept. */
	r->trace = hd->trace;
	r->slo_head = hd->slo;
	r->labels = hd->labels;
	r->labels.spec = h->id.t->labels;
	r->prompt_bytes = hd->content_length >= 0 ? hd->content_length : 0;
}

static void req_on_body(void *ctx, const uint8_t *p, size_t n, uint64_t ts)
{
	struct h1conn *h = ctx;

	(void)ts;
	if (h->reading)
		buf_append(&h->body, &h->id.t->budget, p, n, H1_REQ_BODY_MAX);
}

static void req_on_body_gap(void *ctx, size_t n)
{
	struct h1conn *h = ctx;

	if (h->reading)
		h->reading->request_uncaptured += n;
}

static void req_on_end(void *ctx, uint64_t ts)
{
	struct h1conn *h = ctx;
	struct request *r = h->reading;
	size_t total;

	h->reading = NULL;
	/* Bytes after this request in the same read start the next one (pipelining); a later read
	 * latches its own arrival. */
	h->rx_first = h->rx_cur;
	h->rx_latched = false;
	if (!r)
		return;
	r->arrival_ns = ts;
	if (r->received_ns > ts)
		r->received_ns = 0;
	if (r->prompt_bytes <= 0)
		r->prompt_bytes = h->body.len + h->body.dropped + r->request_uncaptured;
	total = h->body.len + h->body.dropped + r->request_uncaptured;
	r->request_uncaptured += h->body.dropped;
	if (h->body.len)
		reqbody_parse(h->body.p, h->body.len, total, &r->info);
	if (h->body.len && h->body.len == total)
		req_labels_body(h->id.t->labels, &r->labels, h->body.p, h->body.len);
	/* The prompt was only needed for its structure. */
	if (h->body.p)
		memset(h->body.p, 0, h->body.len);
	buf_reset(&h->body, &h->id.t->budget);
	if (h->qlen == H1_PIPELINE_MAX) {
		h->id.t->stats.pipeline_overflow++;
		request_free(r);
		return;
	}
	h->queue[(h->qhead + h->qlen) % H1_PIPELINE_MAX] = r;
	h->qlen++;
	exchange_start(h->id.t, r);
}

static const struct http_callbacks req_callbacks = {
	.on_head = req_on_head,
	.on_body = req_on_body,
	.on_body_gap = req_on_body_gap,
	.on_end = req_on_end,
};

/* ---- response direction ---- */

/* Done with the stream parser: what it dropped goes into the table's counts, which outlive it. */
static void h1_sse_release(struct h1conn *h)
{
	h->id.t->stats.oversize_frames += h->sse.oversize_frames;
	h->id.t->stats.damaged_frames += h->sse.damaged_frames;
	h->sse.oversize_frames = h->sse.damaged_frames = 0;
	sse_free(&h->sse);
}

static void sse_on_frame(void *ctx, const struct sse_frame *f, uint64_t ts)
{
	struct h1conn *h = ctx;
	struct request *r = h1_current(h);

	if (r && !h->resp_orphan)
		conn_add_frame(h->id.t, r, f, ts);
}

static void resp_on_head(void *ctx, const struct http_head *hd, uint64_t ts)
{
	struct h1conn *h = ctx;
	struct request *r = h1_current(h);
	int mode;

	(void)ts;
	h->resp_informational = hd->status < 200;
	h->resp_orphan = !r || h->resp_active;
	if (h->resp_orphan) {
		h->id.t->stats.orphan_responses++;
		return;
	}
	if (h->resp_informational)
		return;
	h->resp_active = true;
	r->status = hd->status;
	buf_reset(&h->body, &h->id.t->budget);
	mode = sse_mode_for(hd->content_type);
	r->streamed = mode >= 0;
	if (r->streamed) {
		h1_sse_release(h);
		sse_init(&h->sse, mode, sse_on_frame, h);
		sse_set_budget(&h->sse, &h->id.t->budget);
	}
}

static void resp_on_body(void *ctx, const uint8_t *p, size_t n, uint64_t ts)
{
	struct h1conn *h = ctx;
	struct request *r = h1_current(h);

	if (!r || h->resp_orphan || h->resp_informational)
		return;
	if (n)
		request_body_bytes(r, n, ts);
	if (r->streamed) {
		uint64_t before = h->sse.oversize_frames;

		sse_feed(&h->sse, p, n, ts);
		/* A frame not read may have held tokens: the request's counts are unknown. */
		r->dropped_frames += h->sse.oversize_frames - before;
	} else {
		buf_append(&h->body, &h->id.t->budget, p, n, H1_RESP_BODY_MAX);
	}
}

static void resp_on_body_gap(void *ctx, size_t n)
{
	struct h1conn *h = ctx;
	struct request *r = h1_current(h);

	if (!r || h->resp_orphan || h->resp_informational)
		return;
	r->lost_bytes += n;
	if (r->streamed)
		sse_gap(&h->sse, n);
}

static void resp_on_end(void *ctx, uint64_t ts)
{
	struct h1conn *h = ctx;
	struct request *r = h1_current(h);

	if (h->resp_orphan || h->resp_informational || !r) {
		h->resp_orphan = h->resp_informational = false;
		return;
	}
	if (r->streamed) {
		uint64_t before = h->sse.oversize_frames;

		sse_finish(&h->sse, ts);
		r->dropped_frames += h->sse.oversize_frames - before;
		h1_sse_release(h);
	} else if (h->body.len && !h->body.dropped) {
		request_read_body(r, h->body.p, h->body.len);
	}
	h1_finish(h, ts, true);
}

static const struct http_callbacks resp_callbacks = {
	.on_head = resp_on_head,
	.on_body = resp_on_body,
	.on_body_gap = resp_on_body_gap,
	.on_end = resp_on_end,
};

/* ---- synchronisation ---- */

/* Lost the request framing: the request being read cannot be finished. */
static void h1_desync_in(struct h1conn *h)
{
	h->id.t->stats.desyncs++;
	if (h->reading) {
		h->id.t->stats.partial_requests++;
		request_free(h->reading);
		h->reading = NULL;
	}
	buf_reset(&h->body, &h->id.t->budget);
	h->in_sync = false;
	h->rx_latched = false;
}

/* Lost the response framing: the response in progress is reported lost. */
static void h1_desync_out(struct h1conn *h, uint64_t ts)
{
	struct request *r = h1_current(h);

	h->id.t->stats.desyncs++;
	h->out_sync = false;
	if (r && h->resp_active && !h->resp_orphan) {
		if (!r->lost_bytes)
			r->lost_bytes = 1;
		h1_finish(h, ts, false);
	}
	h->resp_orphan = h->resp_informational = false;
}

static void h1_feed_req(struct h1conn *h, const uint8_t *p, size_t n, uint64_t ts, bool at_start)
{
	if (!h->in_sync) {
		if (!at_start || !http_looks_like_request(p, n))
			return;
		http_free(&h->req);
		http_init(&h->req, HTTP_DIR_REQUEST, &req_callbacks, h);
		http_set_budget(&h->req, &h->id.t->budget);
		http_set_labels(&h->req, h->id.t->labels);
		h->in_sync = true;
	}
	/* A server's request reached its socket before it read it; a client's is its own write. */
	if (!h->id.client && !h->rx_latched) {
		h->rx_first = h->rx_cur;
		h->rx_latched = true;
	}
	if (http_feed(&h->req, p, n, ts) < 0)
		h1_desync_in(h);
}

static int h1_feed_resp(struct h1conn *h, const uint8_t *p, size_t n, uint64_t ts, bool at_start,
			size_t *used)
{
	struct request *r;

	if (!h->out_sync) {
		if (!at_start || !http_looks_like_response(p, n) || !h->qlen)
			return 0;
		http_free(&h->resp);
		http_init(&h->resp, HTTP_DIR_RESPONSE, &resp_callbacks, h);
		http_set_budget(&h->resp, &h->id.t->budget);
		h->out_sync = true;
	}
	r = h1_current(h);
	if (r && !h->resp_active && http_idle(&h->resp) && strcmp(r->method, "HEAD") == 0)
		http_expect_no_body(&h->resp);
	if (http_feed(&h->resp, p, n, ts) < 0) {
		h1_desync_out(h, ts);
	} else if (http_upgraded(&h->resp, used)) {
		h->switched = true;
		return PROTO_SWITCHED;
	}
	return 0;
}

/* ---- the module's calls ---- */

static void *h1conn_open(const struct conn_ident *id)
{
	struct h1conn *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->id = *id;
	if (!id->client)
		id->t->stats.http_conns++;
	return h;
}

static void h1conn_free(void *m)
{
	struct h1conn *h = m;

	if (!h)
		return;
	request_free(h->reading);
	while (h->qlen) {
		struct request *r = h1_current(h);

		h1_pop(h);
		request_free(r);
	}
	buf_reset(&h->body, &h->id.t->budget);
	http_free(&h->req);
	http_free(&h->resp);
	h1_sse_release(h);
	free(h);
}

bool h1conn_join(struct h1conn *h, bool chunked, int mode, uint64_t ts)
{
	struct request *r;

	if (h->id.client || h->qlen || h->reading || h->out_sync)
		return false;
	r = exchange_request(&h->id, h->seq++, PROTO_HTTP1);
	if (!r)
		return false;
	r->joined = true;
	r->arrival_ns = ts;
	r->streamed = true;
	h->queue[h->qhead] = r;
	h->qlen = 1;
	exchange_start(h->id.t, r);
	/* Its head went by before tracing: the response is active from here, in its body. */
	h->resp_active = true;
	h1_sse_release(h);
	sse_init(&h->sse, mode, sse_on_frame, h);
	sse_set_budget(&h->sse, &h->id.t->budget);
	http_free(&h->resp);
	http_init(&h->resp, HTTP_DIR_RESPONSE, &resp_callbacks, h);
	http_set_budget(&h->resp, &h->id.t->budget);
	http_join_body(&h->resp, chunked);
	h->out_sync = true;
	h->join_close = !chunked;
	return true;
}

static int h1conn_feed(void *m, bool req, const uint8_t *p, size_t n, uint64_t ts, bool at_start,
		       uint64_t rx_ns, size_t *used)
{
	struct h1conn *h = m;

	if (h->switched)
		return 0;
	if (!req)
		return h1_feed_resp(h, p, n, ts, at_start, used);
	h->rx_cur = h->id.client ? 0 : rx_ns;
	h1_feed_req(h, p, n, ts, at_start);
	return 0;
}

bool h1conn_h2c_pending(const struct h1conn *h)
{
	return h->qlen == 1 && !h->id.client && h->queue[h->qhead]->h2c_upgrade;
}

struct request *h1conn_switched(struct h1conn *h, uint64_t ts, bool hand_over)
{
	struct request *r = h1_current(h);

	if (hand_over && h1conn_h2c_pending(h)) {
		/* Out of the HTTP/1.1 queue, still in flight: stream 1 ends it. */
		h1_unqueue(h);
		buf_reset(&h->body, &h->id.t->budget);
		return r;
	}
	if (r) {
		r->status = 101;
		r->end_ns = ts;
		h1_finish(h, ts, true);
	}
	while (h->qlen)
		h1_finish(h, ts, false);
	return NULL;
}

static void h1conn_gap(void *m, bool req, uint64_t n, uint64_t ts)
{
	struct h1conn *h = m;
	struct request *r = h1_current(h);
	uint64_t before = r ? r->lost_bytes : 0;

	if (h->switched)
		return;
	if (req) {
		if (!h->in_sync)
			return;
		http_gap(&h->req, n);
		if (http_desynced(&h->req))
			h1_desync_in(h);
		return;
	}
	if (!h->out_sync)
		return;
	http_gap(&h->resp, n);
	if (http_desynced(&h->resp)) {
		/* A gap that breaks framing was not reported as a body gap: count it. */
		if (r && h->resp_active && r->lost_bytes == before)
			r->lost_bytes += n;
		h1_desync_out(h, ts);
	}
}

static void h1conn_peer_gone(void *m, uint64_t ts)
{
	struct h1conn *h = m;

	for (uint32_t i = 0; i < h->qlen; i++)
		request_peer_gone(h1_queued(h, i), ts);
}

static void h1conn_write_failed(void *m, uint64_t ts)
{
	struct h1conn *h = m;
	struct request *r = h1_current(h);

	/* The response being written, or the next one's head. */
	if (r)
		request_write_failed(r, ts);
}

static void h1conn_close(void *m, uint64_t ts)
{
	struct h1conn *h = m;

	if (h->out_sync)
		http_close(&h->resp, ts);
	if (h->reading) {
		h->id.t->stats.partial_requests++;
		request_free(h->reading);
		h->reading = NULL;
	}
	while (h->qlen)
		h1_finish(h, ts, false);
}

static void h1conn_mark_maybe_lost(void *m)
{
	struct h1conn *h = m;

	for (uint32_t i = 0; i < h->qlen; i++)
		h1_queued(h, i)->maybe_lost = true;
}

static uint32_t h1conn_finish_maybe_lost(void *m, uint64_t last_ns)
{
	struct h1conn *h = m;
	uint32_t n = 0;

	while (h->qlen && h1_current(h)->maybe_lost) {
		struct request *r = h1_current(h);

		h1_finish(h, r->end_ns ? r->end_ns : last_ns, false);
		n++;
	}
	return n;
}

const struct proto_ops h1_proto = {
	.name = "http/1.1",
	.open = h1conn_open,
	.feed = h1conn_feed,
	.gap = h1conn_gap,
	.peer_gone = h1conn_peer_gone,
	.write_failed = h1conn_write_failed,
	.close = h1conn_close,
	.mark_maybe_lost = h1conn_mark_maybe_lost,
	.finish_maybe_lost = h1conn_finish_maybe_lost,
	.free = h1conn_free,
};
