/* SPDX-License-Identifier: MIT */
/*
 * The HTTP/1.1 side of a connection (user/pipeline/conn.c hands a connection here once a request
 * line decides its role): requests framed in the requests' direction, responses in the other,
 * matched in order (pipelining: up to H1_PIPELINE_MAX read ahead of their responses); a streamed
 * response's body split into SSE or NDJSON frames, a plain one kept to read `usage`. The
 * finished requests go to the connection table's sink as HTTP/2's do.
 *
 * Its framing is found again after a gap that broke it, at the next request line at a
 * syscall's start (the request being read is dropped and counted, the response in progress ends
 * `lost`), so it never gives up on a connection; a 101 response hands the connection on
 * (h1conn_switched).
 *
 * Times: a server's request arrives when the read that completes it returns, and reached its
 * socket when the read that brought its first bytes did (rx_ns); its frames when the write that
 * completes them begins. A client's the other way round, with no socket time.
 */
#ifndef TS_H1CONN_H
#define TS_H1CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline/exchange.h"

/* Requests read ahead of their responses on one connection (HTTP pipelining). */
#define H1_PIPELINE_MAX 16

struct h1conn;

/* The module's calls (exchange.h): open makes a struct h1conn. feed returns PROTO_SWITCHED
 * when a 101 response switched the connection to another protocol, whose bytes start at *used
 * (h1conn_switched says what became of the open requests; later calls do nothing). Its framing
 * is found again only at a syscall's start (at_start). close: a close-delimited body ends there,
 * the request being read is counted partial, the open requests finish (incomplete).
 * finish_maybe_lost goes in order: the first request that may not have lost records stops it
 * (a request behind an unfinished one cannot have finished). */
extern const struct proto_ops h1_proto;

/*
 * A server's connection joined mid-response (tracing began while it streamed, conn.c): a
 * request marked joined (request.h) is opened for the response in flight, whose body goes on
 * from the next bytes of the responses' direction, chunked or delimited by the close, frames of
 * mode (enum sse_mode) at ts. Only before anything else was fed. False when it cannot be (out
 * of memory).
 */
bool h1conn_join(struct h1conn *h, bool chunked, int mode, uint64_t ts);
/* The request the 101 answered asked for HTTP/2 (Upgrade: h2c), on a server's connection,
 * with no other request open: HTTP/2 may adopt it (h1conn_switched with hand_over). */
bool h1conn_h2c_pending(const struct h1conn *h);
/* After PROTO_SWITCHED at ts: with hand_over (and h1conn_h2c_pending), the request is returned
 * unfinished and still in flight, for HTTP/2 to adopt as its stream 1; otherwise it finishes
 * answered (101), the requests behind it incomplete, and NULL is returned. */
struct request *h1conn_switched(struct h1conn *h, uint64_t ts, bool hand_over);

#endif
