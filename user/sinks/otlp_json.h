/* SPDX-License-Identifier: MIT */
/*
 * The OTLP/JSON encoding of spans (the protobuf JSON mapping: ids as hex, 64-bit integers as
 * strings, enums as numbers): one ExportTraceServiceRequest with one resource and one scope.
 *
 * Span times are the kernel's CLOCK_MONOTONIC times plus the resource's realtime_offset_ns
 * (CLOCK_REALTIME - CLOCK_MONOTONIC), the only wall-clock input.
 */
#ifndef TS_OTLP_JSON_H
#define TS_OTLP_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "sinks/otlp_span.h"

/* Resource attributes the environment gives (OTEL_RESOURCE_ATTRIBUTES), at most this many. */
#define OTLP_RESOURCE_ATTRS_MAX 16

struct otlp_attr {
	char key[128], value[256];
};

struct otlp_resource {
	const char *service_name; /* service.name */
	const char *hostname;	  /* host.name; "" or NULL: not sent */
	int64_t realtime_offset_ns;
	/* added to every resource, after tokenscope's own (a key it set for that resource keeps
	 * its value) */
	const struct otlp_attr *attrs;
	size_t nattrs;
};

/*
 * OTEL_RESOURCE_ATTRIBUTES's text: `key=value` pairs separated by commas, blanks around each
 * trimmed, values percent-encoded. Into attrs (max of them); the count, or -EINVAL when any
 * pair is malformed (no '=', an empty key, a bad %XX, a key or value too long, more than max
 * pairs): then nothing is taken, as the specification asks.
 */
int otlp_resource_attrs_parse(const char *text, struct otlp_attr *attrs, size_t max);

/* spans[0..n) into a malloc'ed buffer (*buf, *len); -ENOMEM (and *buf NULL) on failure. */
int otlp_json_encode(const struct otlp_resource *res, struct otlp_span *const *spans, size_t n,
		     char **buf, size_t *len);

#endif
