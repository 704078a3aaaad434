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

/* label and ends are the connection's, read when a request is made (they must outlive the h1conn);
 * client: the traced process calls an HTTP server on the connection (its requests go out). NULL
 * when out of memory. */
struct h1conn *h1conn_new(struct conn_table *t, uint32_t pid, uint64_t conn_id, const char *label,
			  const struct request_ends *ends, bool client, bool tls);
/* Frees the open requests without reporting them. */
void h1conn_free(struct h1conn *h);
/*
 * Bytes of the requests' direction (req) or the responses'; at_start: they begin a syscall's
 * bytes (the framing is found again only there); rx_ns: when the bytes of a server's read
 * reached its socket (0: unknown). Returns 0, or H1_SWITCHED: a 101 response switched the
 * connection to another protocol, whose bytes start at *used of these (h1conn_switched says
 * what became of the open requests; later calls do nothing).
 */
#define H1_SWITCHED 1
int h1conn_feed(struct h1conn *h, bool req, const uint8_t *p, size_t n, uint64_t ts, bool at_start,
		uint64_t rx_ns, size_t *used);
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
/* After H1_SWITCHED at ts: with hand_over (and h1conn_h2c_pending), the request is returned
 * unfinished and still in flight, for HTTP/2 to adopt as its stream 1; otherwise it finishes
 * answered (101), the requests behind it incomplete, and NULL is returned. */
struct request *h1conn_switched(struct h1conn *h, uint64_t ts, bool hand_over);
/* n bytes of the requests' direction (req) or the responses' were not captured. */
void h1conn_gap(struct h1conn *h, bool req, uint64_t n, uint64_t ts);
/* The other side hung up (seen at ts): every open request was abandoned. */
void h1conn_peer_gone(struct h1conn *h, uint64_t ts);
/* A write on the connection, begun at ts, failed (EPIPE, ECONNRESET): the current exchange's. */
void h1conn_write_failed(struct h1conn *h, uint64_t ts);
/* The connection closed at ts: a close-delimited body ends there, the request being read is
 * counted partial, the open requests finish (incomplete). */
void h1conn_close(struct h1conn *h, uint64_t ts);
void h1conn_mark_maybe_lost(struct h1conn *h);
/* Finishes as lost, in order, the open requests that may have lost records (the first that
 * may not stops it: a request behind an unfinished one cannot have finished); returns how
 * many. */
uint32_t h1conn_finish_maybe_lost(struct h1conn *h, uint64_t last_ns);

#endif
