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

struct otlp_resource {
	const char *service_name; /* service.name */
	const char *hostname;	  /* host.name; "" or NULL: not sent */
	int64_t realtime_offset_ns;
};

/* spans[0..n) into a malloc'ed buffer (*buf, *len); -ENOMEM (and *buf NULL) on failure. */
int otlp_json_encode(const struct otlp_resource *res, struct otlp_span *const *spans, size_t n,
		     char **buf, size_t *len);

#endif
