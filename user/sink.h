/* SPDX-License-Identifier: MIT */
/*
 * Sinks: consumers of what the pipeline finds (exporters: Prometheus, timeline, alerts, ...).
 * Each registers callbacks; the pipeline calls every sink in registration order. Times given
 * to sinks are kernel times (CLOCK_MONOTONIC ns) taken from the event stream, never a clock
 * read in user space, so a replayed recording drives sinks exactly as the live tracer does.
 */
#ifndef TS_SINK_H
#define TS_SINK_H

#include <stdint.h>

struct request;
struct request_metrics;
struct gpu_attribution;
struct gpu_step;
struct pipeline;

struct sink {
	const char *name;
	void *ctx;
	/* A request was read completely (arrival); request() follows when it finishes. */
	void (*request_start)(void *ctx, const struct request *r);
	/* A request finished (every outcome). */
	void (*request)(void *ctx, const struct request *r, const struct request_metrics *m,
			const struct gpu_attribution *ga);
	/* A GPU step ended. */
	void (*gpu_step)(void *ctx, const struct gpu_step *s);
	/* After each batch of records: now_ns is the latest kernel time seen so far. */
	void (*tick)(void *ctx, const struct pipeline *pl, uint64_t now_ns);
	/* Tracing ended (after the last request was reported). */
	void (*finish)(void *ctx, const struct pipeline *pl);
};

#endif
