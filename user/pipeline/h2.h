/* SPDX-License-Identifier: MIT */
/*
 * Incremental HTTP/2 frame parser (RFC 9113) for one direction of one connection, with the
 * header blocks of that direction decompressed (HPACK, RFC 7541, by libnghttp2's inflater).
 *
 * Like the HTTP/1.1 parser it is a pure function of the bytes fed to it: bytes may arrive split
 * anywhere, nothing is buffered but a frame header and the inflater's own state, and every event
 * carries the `ts` of the feed that completed it. DATA payloads are delivered as they arrive.
 * Header blocks (HEADERS, CONTINUATION, PUSH_PROMISE) always go through the inflater, whatever
 * their stream, because its dynamic table is shared by every later block; only the fields that
 * describe an exchange are kept (struct h2_head), the rest is discarded in the inflater's buffer.
 *
 * A gap inside a DATA payload (or a payload we skip) is skipped exactly and reported through
 * on_data_gap; a gap anywhere else (a frame header, a header block: the table is lost) desyncs
 * the parser: every later call returns -EPROTO until h2_free()/h2_init(). Bytes that are not
 * HTTP/2 (no preface where one is due, a frame header no sender writes) are -EPROTO at once.
 */
#ifndef TS_H2_H
#define TS_H2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

#include "pipeline/budget.h"
#include "pipeline/labels.h"
#include "pipeline/slo.h"
#include "pipeline/tracectx.h"

/* The client's connection preface. */
#define H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN 24
#define H2_FRAME_HEADER_LEN 9
/* The largest dynamic table we let a peer's SETTINGS_HEADER_TABLE_SIZE allow the other side's
 * encoder: real stacks use the 4 KiB default (nginx, Node, Python's h2, gRPC); anything larger
 * would let one connection's headers hold the tracer's memory. */
#define H2_TABLE_MAX 65536

enum h2_frame_type {
	H2_DATA = 0,
	H2_HEADERS = 1,
	H2_PRIORITY = 2,
	H2_RST_STREAM = 3,
	H2_SETTINGS = 4,
	H2_PUSH_PROMISE = 5,
	H2_PING = 6,
	H2_GOAWAY = 7,
	H2_WINDOW_UPDATE = 8,
	H2_CONTINUATION = 9,
};

/* What a header block says about its exchange; fields not in the block stay as h2_head_reset
 * left them. */
struct h2_head {
	char method[16];	/* :method */
	char path[256];		/* :path (truncated if longer) */
	int status;		/* :status, 0 if absent (a request, or trailers) */
	char content_type[64];	/* lower-cased media type without parameters, "" if absent */
	int64_t content_length; /* -1 if absent */
	int grpc_status;	/* grpc-status (trailers), -1 if absent */
	struct trace_ctx trace; /* traceparent, tracestate, x-request-id */
	struct slo_head slo;	/* llm-d's objectives (slo.h) */
	struct req_labels labels; /* the --label header fields' values */
};

struct h2_callbacks {
	/* A complete header block (HEADERS and its CONTINUATIONs); end_stream: the HEADERS frame
	 * ended the stream in this direction. */
	void (*on_headers)(void *ctx, uint32_t stream, const struct h2_head *h, bool end_stream,
			   uint64_t ts);
	/* DATA payload bytes (padding removed), as they arrive */
	void (*on_data)(void *ctx, uint32_t stream, const uint8_t *buf, size_t len, uint64_t ts);
	/* DATA payload bytes lost at the current position */
	void (*on_data_gap)(void *ctx, uint32_t stream, size_t len);
	/* END_STREAM on a DATA frame (after its last on_data) */
	void (*on_end_stream)(void *ctx, uint32_t stream, uint64_t ts);
	void (*on_rst)(void *ctx, uint32_t stream, uint32_t code, uint64_t ts);
	void (*on_goaway)(void *ctx, uint32_t last_stream, uint32_t code, uint64_t ts);
	/* SETTINGS_HEADER_TABLE_SIZE sent in this direction: it bounds the other direction's
	 * encoder (h2_set_table_max on the other direction's parser). */
	void (*on_table_size)(void *ctx, uint32_t size);
};

enum h2_state {
	H2_ST_PREFACE,	/* matching the client preface */
	H2_ST_HEADER,	/* collecting a 9-byte frame header */
	H2_ST_PAD_LEN,	/* the pad length byte of a PADDED frame */
	H2_ST_PRIO,	/* the 5 priority bytes of a HEADERS frame with PRIORITY */
	H2_ST_PROMISED, /* the 4-byte promised stream id of a PUSH_PROMISE */
	H2_ST_PAYLOAD,	/* the payload proper (data, header fragment, or fixed fields) */
	H2_ST_PADDING,	/* padding at the end of the frame */
	H2_ST_DESYNC,
};

struct h2_parser {
	enum h2_state state;
	const struct h2_callbacks *cb;
	void *ctx;
	size_t got; /* bytes of the preface, frame header or fixed fields so far */
	uint8_t hdr[H2_FRAME_HEADER_LEN];
	uint8_t fixed[8]; /* RST_STREAM, SETTINGS entry, GOAWAY's first 8 bytes */
	uint32_t len;	  /* payload length of the current frame */
	uint8_t type, flags;
	uint32_t stream;
	uint32_t remaining; /* bytes of the current state's part of the payload still to come */
	uint32_t pad;	    /* padding bytes at the end of the current frame */
	/* A header block is open (HEADERS/PUSH_PROMISE without END_HEADERS): only CONTINUATION
	 * frames of block_stream may follow. */
	bool in_block;
	bool block_end_stream; /* the HEADERS frame that opened the block had END_STREAM */
	bool block_promise;    /* the block is a PUSH_PROMISE's: decoded, not reported */
	uint32_t block_stream;
	struct h2_head head; /* fields of the block being decoded */
	nghttp2_hd_inflater *inflater;
	nghttp2_mem mem;	    /* the inflater's allocator: charges budget */
	uint32_t table_max;	    /* the bound the inflater enforces now */
	uint32_t pending_table_max; /* a bound that came while a block was open */
	uint64_t last_ts;	    /* ts of the latest feed, for a frame that a gap completes */
	struct budget *budget;	    /* charged for the inflater's memory; NULL: unlimited */
	const struct req_label_set *labels; /* the header fields --label takes; NULL: none */
	/* counters */
	uint64_t frames, header_blocks;
	int error; /* why it desynced: a negative errno-style code, 0 while in sync */
};

/* Starts a parser; preface: this direction is the client's and begins with the preface (not
 * the case after an HTTP/1.1 Upgrade, where the client's preface still comes first, nor for a
 * server's direction). budget may be NULL. Returns 0 or -ENOMEM (the parser is then desynced). */
int h2_init(struct h2_parser *p, bool preface, const struct h2_callbacks *cb, void *ctx,
	    struct budget *budget);
/* Releases the inflater. */
void h2_free(struct h2_parser *p);
/* 0, or -EPROTO: not HTTP/2 / desynced (then every later call is -EPROTO too) */
int h2_feed(struct h2_parser *p, const uint8_t *buf, size_t len, uint64_t ts);
/* len bytes lost at the current position */
void h2_gap(struct h2_parser *p, size_t len);
bool h2_desynced(const struct h2_parser *p);
/* The other direction's SETTINGS_HEADER_TABLE_SIZE: the most this direction's encoder may
 * use (capped at H2_TABLE_MAX; a lower value than before is not applied: the encoder says the
 * size it uses in the block itself, and keeping a higher bound only accepts it). */
void h2_set_table_max(struct h2_parser *p, uint32_t size);
/* Whether buf starts like the client's preface (a short buf: is a prefix of it). */
bool h2_looks_like_preface(const uint8_t *buf, size_t len);
/* Whether buf starts with whole frames a sender could have written (known types of valid sizes
 * on valid streams, at most 16 KiB each; the last may end past buf): how a connection first
 * seen in its middle is recognised as HTTP/2 without following it. */
bool h2_looks_like_frame(const uint8_t *buf, size_t len);
/* Whether buf starts with a server's connection preface: a SETTINGS frame (not an ACK) that
 * h2_looks_like_frame accepts. A server may write it before it reads the client's preface. */
bool h2_looks_like_server_preface(const uint8_t *buf, size_t len);

#endif
