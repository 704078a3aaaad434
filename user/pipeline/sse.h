/* SPDX-License-Identifier: MIT */
/*
 * Splits a decoded (de-chunked) response body into frames: Server-Sent Events (WHATWG
 * "event stream interpretation") or newline-delimited JSON, one frame per non-empty line.
 *
 * A pure function of the bytes fed to it: a frame is reported with the ts of the feed that
 * completed it (SSE: the blank line; NDJSON: the LF). The frame's pointers are valid only
 * during the callback. Frames longer than SSE_FRAME_MAX are dropped and counted, and a gap
 * drops the frame being assembled and everything up to the next frame boundary.
 */
#ifndef TS_SSE_H
#define TS_SSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline/budget.h"

/* The largest frame we keep: real token frames are a few hundred bytes; a 64 KiB frame is a
 * whole non-streamed answer or garbage, and is only counted. */
#define SSE_FRAME_MAX 65536
/* Longest event type we keep; Anthropic's longest is "content_block_delta". */
#define SSE_EVENT_MAX 64
/* Longest field name we compare; "event" and "data" are the only ones we use. */
#define SSE_FIELD_MAX 8

enum sse_mode { SSE_MODE_SSE, SSE_MODE_NDJSON };

struct sse_frame {
	const char *event; /* event type, "" if none (never NULL); NUL-terminated */
	size_t event_len;
	const char *data; /* data lines joined with '\n'; for NDJSON the line; NUL-terminated */
	size_t data_len;
};

typedef void (*sse_frame_fn)(void *ctx, const struct sse_frame *f, uint64_t ts);

enum sse_state {
	SSE_ST_FIELD,	    /* at a line start or in a field name */
	SSE_ST_VALUE_SPACE, /* just after the colon: one space is skipped */
	SSE_ST_VALUE,	    /* in a field value */
	SSE_ST_RESYNC,	    /* after a gap: skipping to the next frame boundary */
};

enum sse_field { SSE_FIELD_OTHER, SSE_FIELD_DATA, SSE_FIELD_EVENT };

struct sse_parser {
	enum sse_mode mode;
	enum sse_state state;
	enum sse_field field;
	sse_frame_fn on_frame;
	void *ctx;
	bool cr;	 /* the last byte was CR: an LF right after it ends no new line */
	bool started;	 /* past a possible byte-order mark at the start of the stream */
	uint8_t bom_len; /* BOM bytes matched so far */
	bool line_empty; /* resync: the current line has no bytes yet */
	bool oversize;	 /* the frame being assembled outgrew a buffer */
	size_t name_len; /* field-name bytes in this line (compared only if <= SSE_FIELD_MAX) */
	char name[SSE_FIELD_MAX];
	size_t data_lines;
	size_t data_len;
	size_t event_len;
	/* counters, never reset by sse_finish */
	uint64_t frames;	  /* frames reported */
	uint64_t damaged_frames;  /* regions dropped because of a gap (each at least one frame) */
	uint64_t oversize_frames; /* frames dropped for size */
	char event[SSE_EVENT_MAX + 1];
	/* Grown on demand up to SSE_FRAME_MAX + 1: a thousand idle streams must not hold 64 KiB
	 * each. */
	char *data;
	size_t data_cap;
	struct budget *budget; /* charged for data; NULL: unlimited (sse_init) */
};

/* Starts a parser; one that held a buffer must be sse_free()d first. */
void sse_init(struct sse_parser *p, enum sse_mode mode, sse_frame_fn on_frame, void *ctx);
/* Charges the frame buffer to b (after sse_init); a frame that finds b spent is dropped as
 * oversize. */
void sse_set_budget(struct sse_parser *p, struct budget *b);
/* Releases the frame buffer (the counters stay); the parser needs sse_init() again. */
void sse_free(struct sse_parser *p);
/* always 0 today: nothing in a body is an error, only a reason to drop a frame */
int sse_feed(struct sse_parser *p, const uint8_t *buf, size_t len, uint64_t ts);
/* the frame being assembled is damaged: drop it, count it, resync at the next frame boundary */
void sse_gap(struct sse_parser *p, size_t len);
/* end of body: flush a final unterminated NDJSON line / SSE event; the parser can then take a
 * new body (counters are kept) */
void sse_finish(struct sse_parser *p, uint64_t ts);
/* SSE_MODE_* for a lower-case media type (http_head.content_type), or -1 if not a stream */
int sse_mode_for(const char *content_type);

#endif
