/* SPDX-License-Identifier: MIT */
/*
 * The HTTP/2 side of a connection (user/pipeline/conn.c hands a connection here once its first
 * bytes are the client preface): both directions framed (h2.c), each stream one request built
 * as an HTTP/1.1 exchange is, its response DATA split into SSE or NDJSON frames, or into gRPC
 * messages, and the stream's ending as its outcome: END_STREAM (complete), RST_STREAM (either
 * side gave up), GOAWAY (the server will not process streams above its last one), trailers
 * (grpc-status). The finished requests go to the connection table's sink like HTTP/1.1 ones.
 *
 * Times are those of HTTP/1.1: a server's request arrives when the read with its END_STREAM
 * returns (or with its HEADERS, if the response starts before the request ends, as gRPC's
 * bidirectional streams may), its frames when the write that completes them begins; a client's
 * the other way round.
 */
#ifndef TS_H2CONN_H
#define TS_H2CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/exchange.h"

struct h2conn;

/* label and ends are the connection's, read when a request is made (they must outlive the h2conn);
 * client: the traced process sent the preface. NULL when out of memory. */
struct h2conn *h2conn_new(struct conn_table *t, uint32_t pid, uint64_t conn_id, const char *label,
			  const struct request_ends *ends, bool client, bool tls);
/* The HTTP/1.1 request whose 101 response switched the connection to HTTP/2 (Upgrade: h2c):
 * it goes on as stream 1, started, its response to come as HTTP/2. */
void h2conn_adopt(struct h2conn *h, struct request *r);
/* Frees the open streams without reporting them. */
void h2conn_free(struct h2conn *h);
/* Bytes of the requests' direction (req) or the responses'; rx_ns: when the bytes of a
 * server's read reached its socket (0: unknown). -EPROTO once the connection cannot be
 * followed (not HTTP/2, or a gap lost the framing or the header table): its open streams were
 * finished as lost, and every later call does nothing. */
int h2conn_feed(struct h2conn *h, bool req, const uint8_t *buf, size_t len, uint64_t ts,
		uint64_t rx_ns);
void h2conn_gap(struct h2conn *h, bool req, uint64_t len, uint64_t ts);
/* The other side hung up (seen at ts): every open stream was abandoned. */
void h2conn_peer_gone(struct h2conn *h, uint64_t ts);
/* A write on the connection, begun at ts, failed (EPIPE, ECONNRESET): counted for every stream
 * whose response had begun. */
void h2conn_write_failed(struct h2conn *h, uint64_t ts);
/* The connection closed at ts: open streams finish, incomplete. */
void h2conn_close(struct h2conn *h, uint64_t ts);
void h2conn_mark_maybe_lost(struct h2conn *h);
/* Finishes as lost the open streams that may have lost records; returns how many. */
uint32_t h2conn_finish_maybe_lost(struct h2conn *h, uint64_t last_ns);

#endif
