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

/* The module's calls (exchange.h): open makes a struct h2conn; client: the traced process sent
 * the preface. feed stops following the connection once it cannot be (not HTTP/2, or a gap lost
 * the framing or the header table): its open streams are finished as lost, and every later call
 * does nothing. write_failed counts for every stream whose response had begun. */
extern const struct proto_ops h2_proto;

/* The HTTP/1.1 request whose 101 response switched the connection to HTTP/2 (Upgrade: h2c):
 * it goes on as stream 1, started, its response to come as HTTP/2. */
void h2conn_adopt(struct h2conn *h, struct request *r);

#endif
