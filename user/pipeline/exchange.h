/* SPDX-License-Identifier: MIT */
/*
 * What the connection table (conn.c) and its protocol modules (h1conn.c for HTTP/1.1, h2conn.c
 * for HTTP/2) share: the table's counters, its memory budget, the requests in flight and the
 * sink finished requests go to, and the calls that hand a request's frames and messages on.
 * Below them all: a protocol module needs this and never conn.h (docs/architecture.md, "The
 * protocol contract").
 */
#ifndef TS_EXCHANGE_H
#define TS_EXCHANGE_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/budget.h"
#include "pipeline/request.h"
#include "pipeline/sse.h"

struct conn_sink {
	/* A request was read completely (arrival); the callee may label it (its container). */
	void (*request_start)(void *ctx, struct request *r);
	/* A request finished: the response ended, failed, or its connection closed. The callee
	 * owns the request from then on (request_free). */
	void (*request_done)(void *ctx, struct request *r);
	/* A content frame's (or gRPC message's) time was added to r (token_ns[ntokens - 1]); may
	 * be NULL. */
	void (*token)(void *ctx, struct request *r);
	/* A server's exchange in flight when tracing began was met on a connection of pid's
	 * (in_flight 1), or turned out to be none (-1: another protocol, or the process's own
	 * call as a client); reported 1: it is reported from where it was joined
	 * (request.joined). May be NULL. */
	void (*joined)(void *ctx, uint32_t pid, int in_flight, int reported);
	void *ctx;
};

struct conn_stats {
	uint64_t conns;		/* connections seen */
	uint64_t http_conns;	/* ... that carried HTTP/1.x requests to the traced server */
	uint64_t client_conns;	/* ... on which the traced process called an HTTP server */
	uint64_t ignored_conns; /* ... that did neither (other protocols) */
	/* local (AF_UNIX) sockets first seen at a read or write that carried no HTTP: a process's
	 * own socketpairs and pipes to its workers, apart from the connections above */
	uint64_t local_other;
	uint64_t gap_bytes;	    /* bytes missing from followed connections */
	uint64_t desyncs;	    /* times a gap broke HTTP framing */
	uint64_t orphan_responses;  /* responses whose request was not seen (joined mid-way) */
	uint64_t partial_requests;  /* requests whose bytes ended before the request did */
	uint64_t pipeline_overflow; /* requests beyond a connection's bound */
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
	/* ... and those whose response in flight is reported from where it was joined */
	uint64_t joined_reported;
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
	/* --label: what the request parsers take from heads and bodies; NULL: none */
	const struct req_label_set *labels;
};

/* What a protocol module knows of the connection it follows (the same for every module):
 * label and ends are the connection's and outlive the module; client: the traced process calls
 * a server on the connection (its requests go out); tls: the bytes are a TLS library's
 * plaintext. */
struct conn_ident {
	struct conn_table *t;
	uint32_t pid;
	uint64_t conn_id;
	const char *label;
	const struct request_ends *ends;
	bool client, tls;
};

/*
 * The protocol contract: the calls conn.c makes on the module that follows a connection, one
 * table per protocol (h1conn.h, h2conn.h). A module makes each request (request_new with the
 * identity's values and its protocol), hands it to the table's sink when it is read and when it
 * finishes (exchange_start, exchange_done), and its frames through conn_add_frame or
 * conn_add_message. `m` is what open returned.
 */
#define PROTO_SWITCHED 1
struct proto_ops {
	const char *name;
	/* Follows a connection from its first bytes (or from a 101, for a protocol an upgrade
	 * hands on to); counts it among the table's connections of its kind when it serves.
	 * NULL when out of memory. */
	void *(*open)(const struct conn_ident *id);
	/* Bytes of the requests' direction (req) or the responses'; at_start: they begin a
	 * syscall's bytes; rx_ns: when a server's read's bytes reached its socket (0: unknown).
	 * Returns 0; PROTO_SWITCHED: a 101 switched the connection to another protocol, whose
	 * bytes start at *used of these (a module that cannot switch ignores used); or a negative
	 * errno: the module follows the connection no further. */
	int (*feed)(void *m, bool req, const uint8_t *p, size_t n, uint64_t ts, bool at_start,
		    uint64_t rx_ns, size_t *used);
	/* n bytes of a direction were not captured. */
	void (*gap)(void *m, bool req, uint64_t n, uint64_t ts);
	/* The other side hung up (seen at ts): every open exchange was abandoned. */
	void (*peer_gone)(void *m, uint64_t ts);
	/* A write begun at ts failed (EPIPE, ECONNRESET). */
	void (*write_failed)(void *m, uint64_t ts);
	/* The connection closed at ts: the open exchanges finish, incomplete. */
	void (*close)(void *m, uint64_t ts);
	/* Records were lost: any open exchange may have lost its ending. */
	void (*mark_maybe_lost)(void *m);
	/* End of tracing: finishes as lost the open exchanges that may have lost records (the
	 * connection's latest record was at last_ns); returns how many. */
	uint32_t (*finish_maybe_lost)(void *m, uint64_t last_ns);
	/* Frees the open exchanges without reporting them; m may be NULL. */
	void (*free)(void *m);
};

/* A request of the connection's, made by its module: its identity's values and its protocol
 * set; NULL when out of memory. */
struct request *exchange_request(const struct conn_ident *id, uint32_t seq, enum req_proto proto);
/* r was read (it arrived): it is in flight when a traced server serves it, and the sink is told. */
void exchange_start(struct conn_table *t, struct request *r);
/* r finished (request_close): no longer in flight, and the sink owns it from now on. */
void exchange_done(struct conn_table *t, struct request *r);

/* A stream frame of r's response (request_add_frame), told to the sink when it was content. */
void conn_add_frame(struct conn_table *t, struct request *r, const struct sse_frame *f,
		    uint64_t ts);
/* A gRPC message of r's response (request_add_message), told to the sink. */
void conn_add_message(struct conn_table *t, struct request *r, uint64_t ts);

#endif
