/* SPDX-License-Identifier: MIT */
/*
 * Connections: per-connection reassembly of both directions from data records (exact gaps from
 * stream offsets), HTTP/1.1 framing of requests and responses, SSE/NDJSON frames of streamed
 * responses, and the request records built from them, handed to a sink when finished.
 *
 * A connection is classified on its first bytes: an HTTP server connection (requests read,
 * responses written) or an HTTP client connection (a request written first) is followed, in
 * HTTP/1.1 or, when they are the client preface, in HTTP/2 (user/pipeline/h2conn.c); anything
 * else is ignored and counted. A connection joined in the middle (open before attach, or found
 * by --all mid-stream) waits for the first request line it carries in either direction: read,
 * it serves HTTP; written, the traced process calls an HTTP server on it (role client). The
 * response in flight when tracing began is not reported (its request was never seen), the
 * connection's later requests are. Only bytes no HTTP/1.x message holds, or a first read that
 * is no request on a connection accepted under tracing, make it another protocol's.
 */
#ifndef TS_CONN_H
#define TS_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/types.h>

#include "pipeline/budget.h"
#include "events.h"
#include "pipeline/request.h"

struct conn_sink {
	/* A request was read completely (arrival); the callee may label it (its container). */
	void (*request_start)(void *ctx, struct request *r);
	/* A request finished: the response ended, failed, or its connection closed. The callee
	 * owns the request from then on (request_free). */
	void (*request_done)(void *ctx, struct request *r);
	/* A content frame's (or gRPC message's) time was added to r (token_ns[ntokens - 1]); may
	 * be NULL. */
	void (*token)(void *ctx, struct request *r);
	void *ctx;
};

struct conn_stats {
	uint64_t conns;		    /* connections seen */
	uint64_t http_conns;	    /* ... that carried HTTP/1.x requests to the traced server */
	uint64_t client_conns;	    /* ... on which the traced process called an HTTP server */
	uint64_t ignored_conns;	    /* ... that did neither (other protocols) */
	uint64_t gap_bytes;	    /* bytes missing from followed connections */
	uint64_t desyncs;	    /* times a gap broke HTTP framing */
	uint64_t orphan_responses;  /* responses whose request was not seen (joined mid-way) */
	uint64_t partial_requests;  /* requests whose bytes ended before the request did */
	uint64_t pipeline_overflow; /* requests dropped beyond CONN_PIPELINE_MAX */
	uint64_t oversize_frames;   /* stream frames dropped for size (SSE_FRAME_MAX) */
	uint64_t damaged_frames;    /* stream regions dropped because bytes were missing */
	uint64_t tls_conns;	    /* connections that carried TLS */
	uint64_t tls_unread;	    /* ... ended with no plaintext seen (no TLS library hooked) */
	uint64_t h2_conns;	    /* ... that carried HTTP/2 requests to it */
	/* HTTP/2 connections first seen after their start: their header compression state is
	 * unknown, so they are not followed */
	uint64_t h2_midway;
	/* HTTP/1.x connections joined mid-stream (bytes before any request line, none of another
	 * protocol), and of those the ones still waiting for a request line */
	uint64_t joined_conns;
	uint64_t waiting_conns;
};

struct conn;

struct conn_table {
	struct conn **buckets;
	uint32_t nbuckets;
	uint32_t count;
	uint32_t inflight; /* requests read and not finished, over every connection */
	struct conn_sink sink;
	struct conn_stats stats;
	struct budget budget; /* what the connections' parsers hold, together */
};

int conn_table_init(struct conn_table *t, const struct conn_sink *sink);
/* Frees every connection without reporting its requests. */
void conn_table_free(struct conn_table *t);

/* A stream frame of r's response (request_add_frame), told to the sink when it was content. */
void conn_add_frame(struct conn_table *t, struct request *r, const struct sse_frame *f,
		    uint64_t ts);
/* A gRPC message of r's response (request_add_message), told to the sink. */
void conn_add_message(struct conn_table *t, struct request *r, uint64_t ts);

void conn_on_open(struct conn_table *t, const struct ts_conn_event *e);
void conn_on_data(struct conn_table *t, const struct ts_data_event *e);
void conn_on_close(struct conn_table *t, const struct ts_conn_event *e);
/* The process exited: its sockets are closed without close(); finish them at ts. */
void conn_close_pid(struct conn_table *t, uint32_t pid, uint64_t ts);
/* The kernel reported lost records: any request open now may have lost its ending. */
void conn_mark_open_maybe_lost(struct conn_table *t);
/* End of tracing: requests that are still open and may have lost records are finished as
 * `lost` (their end never came, or came in a lost record); returns how many. The others stay
 * open (still streaming when tracing stopped) and are only counted. */
uint32_t conn_finish_maybe_lost(struct conn_table *t);
/* Requests read and not yet finished. */
uint32_t conn_inflight(const struct conn_table *t);

#endif
