/* SPDX-License-Identifier: MIT */
/*
 * The connection table: per-connection reassembly of both directions from data records (exact
 * gaps from stream offsets), TLS plaintext told from ciphertext, and each connection classified
 * and handed to the protocol module that follows its exchanges (docs/architecture.md, "The
 * protocol contract"), which hands the finished requests to the table's sink.
 *
 * A connection is classified on its first bytes: an HTTP server connection (requests read,
 * responses written) or an HTTP client connection (a request written first) is followed, in
 * HTTP/1.1 (user/pipeline/h1conn.c) or, when they are the client preface, in HTTP/2
 * (user/pipeline/h2conn.c); anything else is ignored and counted. A connection joined in the middle
 * (open before attach, or found by --all mid-stream) waits for the first request line it carries in
 * either direction: read, it serves HTTP; written, the traced process calls an HTTP server on it
 * (role client). A server's response in flight when tracing began is reported from its next stream
 * frame when a write starts one (request.joined), and not at all otherwise; the connection's later
 * requests are reported whole. Only bytes no HTTP/1.x message holds, or a first read that is no
 * request on a connection accepted under tracing, make it another protocol's.
 */
#ifndef TS_CONN_H
#define TS_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/types.h>

#include "events.h"
#include "pipeline/exchange.h"

int conn_table_init(struct conn_table *t, const struct conn_sink *sink);
/* Frees every connection without reporting its requests. */
void conn_table_free(struct conn_table *t);

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
