/* SPDX-License-Identifier: MIT */
/*
 * Incremental HTTP/1.1 message parser for one direction of one connection.
 *
 * A pure function of the bytes fed to it: no clock, no I/O, no allocation. Bytes may arrive
 * split anywhere and several (pipelined) messages may share one feed. Every event carries the
 * `ts` of the feed that completed it. A gap (bytes the tracer lost) inside a body of known
 * remaining size is skipped exactly and reported through on_body_gap; a gap anywhere else
 * (head, chunk-size line, trailer, between messages) desyncs the parser: every later call
 * returns -EPROTO until http_init(). Bytes that do not start like HTTP are -EPROTO at once.
 * A 1xx response is a message of its own (on_head, on_end) before the final one; after a 101
 * (Switching Protocols) the bytes are another protocol: the feed stops at the end of its head
 * (http_upgraded says where) and later feeds are -EPROTO. Callbacks must not re-init the parser.
 */
#ifndef TS_HTTP_H
#define TS_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline/budget.h"
#include "pipeline/labels.h"
#include "pipeline/slo.h"
#include "pipeline/tracectx.h"

/* A head (start line + headers) longer than this is not something we trace: -EPROTO. */
#define HTTP_HEAD_MAX 8192
/* A chunk-size line (size + extensions) longer than this is garbage, not a real sender. */
#define HTTP_CHUNK_LINE_MAX 1024
#define HTTP_METHOD_MAX 16
#define HTTP_PATH_MAX 256
#define HTTP_CTYPE_MAX 64

enum http_dir { HTTP_DIR_REQUEST, HTTP_DIR_RESPONSE };

struct http_head {
	char method[HTTP_METHOD_MAX];	   /* requests */
	char path[HTTP_PATH_MAX];	   /* requests; truncated if longer */
	int status;			   /* responses */
	int version_minor;		   /* HTTP/1.x */
	int64_t content_length;		   /* -1 if absent */
	bool chunked, keep_alive;	   /* keep_alive from version + Connection header */
	char content_type[HTTP_CTYPE_MAX]; /* lower-cased media type without params, "" if absent */
	bool upgrade_h2c;	/* an Upgrade header naming h2c (HTTP/2 over cleartext) */
	struct trace_ctx trace; /* requests: traceparent, tracestate, x-request-id */
	struct slo_head slo;	/* requests: llm-d's objectives (slo.h) */
	struct req_labels labels; /* requests: the --label head fields' values */
};

struct http_callbacks {
	void (*on_head)(void *ctx, const struct http_head *h, uint64_t ts);
	/* decoded body bytes (de-chunked), delivered as they arrive */
	void (*on_body)(void *ctx, const uint8_t *buf, size_t len, uint64_t ts);
	/* body bytes lost inside a known-size chunk/body */
	void (*on_body_gap)(void *ctx, size_t len);
	/* message complete (ts of the feed with its last byte) */
	void (*on_end)(void *ctx, uint64_t ts);
};

enum http_state {
	HTTP_ST_IDLE,	       /* between messages */
	HTTP_ST_HEAD,	       /* collecting start line + headers */
	HTTP_ST_BODY_LENGTH,   /* Content-Length body, `remaining` left */
	HTTP_ST_BODY_CLOSE,    /* response body delimited by the connection close */
	HTTP_ST_CHUNK_SIZE,    /* hex size, then extensions up to LF */
	HTTP_ST_CHUNK_DATA,    /* `remaining` bytes of chunk data */
	HTTP_ST_CHUNK_DATA_CR, /* the CRLF after chunk data */
	HTTP_ST_CHUNK_DATA_LF,
	HTTP_ST_TRAILER,  /* trailer lines after the last chunk, up to an empty line */
	HTTP_ST_DESYNC,	  /* lost our place: -EPROTO until http_init() */
	HTTP_ST_UPGRADED, /* after a 101: another protocol, -EPROTO until http_init() */
};

struct http_parser {
	enum http_dir dir;
	enum http_state state;
	const struct http_callbacks *cb;
	void *ctx;
	uint64_t remaining;  /* body or chunk-data bytes still expected */
	uint64_t last_ts;    /* ts of the latest feed, for a message that a gap completes */
	size_t line_len;     /* bytes in the current chunk-size or trailer line */
	size_t line_start;   /* offset of the current line in hb->text */
	size_t trailer_len;  /* bytes of trailer so far, bounded like a head */
	bool size_digits;    /* chunk-size line has at least one hex digit */
	bool size_done;	     /* chunk-size digits ended (extension or whitespace follows) */
	bool expect_no_body; /* the next response answers a HEAD request */
	size_t head_len;
	size_t upgraded_at; /* HTTP_ST_UPGRADED: bytes of the feed that held the 101's head end */
	struct budget *budget; /* charged for the head buffer; NULL: unlimited (http_set_budget) */
	const struct req_label_set *labels; /* requests: the head fields --label takes */
	/* Allocated when a head starts and freed when it ends: an idle keep-alive connection holds
	 * none, and a connection mid-body holds no head fields either. */
	struct http_head_buf *hb;
};

struct http_head_buf {
	struct http_head head;	      /* what on_head gets */
	char text[HTTP_HEAD_MAX + 1]; /* +1 for the NUL that parsing adds */
};

/* A Content-Type value (len bytes at val) as the head gives it: its media type, without
 * parameters or surrounding whitespace, lower-cased, truncated to fit cap (HTTP/2's header
 * blocks give it the same way). */
void http_media_type(char *dst, size_t cap, const char *val, size_t len);
/* The bytes at a syscall's start could begin a request: an upper-case method of 3-7 letters, a
 * space, then '/', '*' or a scheme (absolute form); or a write so short that it is a method's
 * start (the parser decides). */
bool http_looks_like_request(const uint8_t *p, size_t n);
/* "HTTP/", or a write so short that it is a prefix of it. */
bool http_looks_like_response(const uint8_t *p, size_t n);
/* Starts a parser; one that may hold a head buffer must be http_free()d first. */
void http_init(struct http_parser *p, enum http_dir dir, const struct http_callbacks *cb,
	       void *ctx);
/* Releases the head buffer; the parser needs http_init() again. */
void http_free(struct http_parser *p);
/* Charges the head buffer to b from now on (after http_init, which clears it). A head that
 * finds b spent is -EPROTO: it cannot be followed. */
void http_set_budget(struct http_parser *p, struct budget *b);
/* The head fields of requests that --label takes (labels.h); NULL: none. */
void http_set_labels(struct http_parser *p, const struct req_label_set *labels);
/* 0, or -EPROTO: not HTTP / desynced (then every later call is -EPROTO too) */
int http_feed(struct http_parser *p, const uint8_t *buf, size_t len, uint64_t ts);
/* len bytes lost at the current position */
void http_gap(struct http_parser *p, size_t len);
/* connection closed: ends a close-delimited body (on_end), else an unfinished message is
 * abandoned without on_end; the parser is then idle */
void http_close(struct http_parser *p, uint64_t ts);
/* between messages (nothing of a next message seen yet) */
bool http_idle(const struct http_parser *p);
/* true once -EPROTO was returned or a gap could not be skipped, and after a 101 (the bytes are
 * another protocol's: http_upgraded says where they start) */
bool http_desynced(const struct http_parser *p);
/* After a 101 response: true, and *off the bytes of the feed that ended its head (the other
 * protocol's bytes start there). */
bool http_upgraded(const struct http_parser *p, size_t *off);
/* the next response has no body (it answers HEAD); call before its head is fed, or from its
 * on_head callback */
void http_expect_no_body(struct http_parser *p);
/* A parser started in the body of a message whose head came before tracing did (a stream
 * joined mid-response): chunked (a chunk-size line comes next) or delimited by the close. No
 * on_head comes for it; on_end does, at its end. */
void http_join_body(struct http_parser *p, bool chunked);

#endif
