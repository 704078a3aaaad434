/* SPDX-License-Identifier: MIT */
/*
 * A request's trace context, from its head (HTTP/1.1) or header block (HTTP/2): the W3C Trace
 * Context headers `traceparent` and `tracestate`, and `x-request-id`. Nothing else of a head is
 * kept. A value, as a request carries it to the sinks (request.h).
 *
 * traceparent follows the W3C Trace Context rules: version 00 is exactly
 * `00-<32 lower hex>-<16 lower hex>-<2 lower hex>`; a later version is read as 00 when its first
 * 55 characters are (and a '-' follows them if there is more); version ff, upper-case hex, an
 * all-zero trace-id or parent-id, or two traceparent fields (an HTTP list then, which no
 * version allows) make it invalid: it is ignored, and tracestate with it. tracestate is kept
 * whole members at a time up to TRACECTX_STATE_MAX characters, dropped entire when a member is
 * malformed. x-request-id is kept as utf8.c cleans strings from traffic, cut at
 * TRACECTX_REQID_MAX; a repeated one keeps the first.
 */
#ifndef TS_TRACECTX_H
#define TS_TRACECTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline/trace_ctx.h"

/* A header field (name case-insensitive, value without surrounding whitespace); true when it
 * was one of the three. */
bool tracectx_field(struct trace_ctx *c, const char *name, size_t nlen, const char *val,
		    size_t vlen);
/* The head ended: tracestate goes when traceparent is not valid, or was malformed itself. */
void tracectx_finish(struct trace_ctx *c);
/* 0 and the fields, or -EINVAL: s (n bytes) is no valid traceparent. */
int tracectx_parse_traceparent(const char *s, size_t n, struct trace_parent *out);

#endif
