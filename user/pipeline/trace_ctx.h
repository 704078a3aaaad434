/* SPDX-License-Identifier: MIT */
/*
 * A request's trace context (traceparent, tracestate, x-request-id) as a value a request
 * carries to the sinks (request.h); tracectx.c reads heads into it.
 */
#ifndef TS_TRACE_CTX_H
#define TS_TRACE_CTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRACECTX_TRACE_ID_LEN 16
#define TRACECTX_SPAN_ID_LEN 8
/* The W3C asks that at least 512 characters of a combined tracestate be passed on. */
#define TRACECTX_STATE_MAX 512
/* ... and no more than 32 list members. */
#define TRACECTX_STATE_MEMBERS 32
/* A member longer than this is the first to go when the whole does not fit (W3C). */
#define TRACECTX_MEMBER_MAX 128
/* Request ids are UUIDs (36) or a gateway's own form; longer is cut. */
#define TRACECTX_REQID_MAX 128

/* What traceparent says, when it is valid. */
struct trace_parent {
	bool valid;
	uint8_t trace_id[TRACECTX_TRACE_ID_LEN];
	uint8_t parent_id[TRACECTX_SPAN_ID_LEN];
	uint8_t flags;
};

struct trace_ctx {
	struct trace_parent tp;
	/* a traceparent came and was not valid (ignored: the span starts its own trace) */
	bool malformed;
	bool seen_tp, state_bad;
	uint8_t nmembers;
	char state[TRACECTX_STATE_MAX + 1];  /* tracestate, "" when none (or tp not valid) */
	char request_id[TRACECTX_REQID_MAX]; /* x-request-id, "" when none */
};

void tracectx_init(struct trace_ctx *c);
/* Lower-case hex of n bytes into out (2n + 1 bytes). */
void tracectx_hex(char *out, const uint8_t *id, size_t n);
/* The same ids (both valid). */
bool tracectx_same(const struct trace_parent *a, const struct trace_parent *b);

#endif
