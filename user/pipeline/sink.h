/* SPDX-License-Identifier: MIT */
/*
 * Sinks: consumers of what the pipeline finds (exporters: Prometheus, timeline, alerts, ...).
 * Each registers callbacks; the pipeline calls every sink in registration order. Sinks get
 * values only (a request, a step, a status), never the pipeline itself, so no sink depends on
 * its connection table or its other state. Times given to sinks are kernel times
 * (CLOCK_MONOTONIC ns) taken from the event stream, never a clock read in user space, so a
 * replayed recording drives sinks exactly as the live tracer does.
 */
#ifndef TS_SINK_H
#define TS_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline/gpu_report.h"
#include "pipeline/loss.h"
#include "pipeline/self_cost.h"

struct request;
struct request_metrics;
struct gpu_attribution;
struct gpu_step;
struct ts_gpu_call_event;
struct device_sample;
struct slo_rules;

/* The pipeline as of a tick (or the end): copied out for the call, valid during it. */
/* A feature of the kernel the BPF programs use, and whether this kernel has it (the loader's
 * probe: docs/building.md, "Kernels"). */
struct run_feature {
	const char *name; /* static: the loader's table */
	bool on;
};

#define RUN_FEATURES_MAX 16

/* Requests that are not inference (request_is_inference), counted for the summary's line: the
 * most frequent method and path first, as far as OTHER_REQUESTS_TOP of them are kept. */
#define OTHER_REQUESTS_TOP 6
#define OTHER_REQUEST_WHAT 48
struct other_requests {
	uint64_t total;
	struct {
		char what[OTHER_REQUEST_WHAT]; /* "GET /openapi.json", cleaned and cut */
		uint64_t n;
	} top[OTHER_REQUESTS_TOP];
	uint32_t ntop;
	uint64_t rest; /* of requests whose method and path found no room */
};

/* Per server (a traced root process: -p's or --all's; a process whose root is unknown stands
 * for itself), the exchanges it was serving when tracing began that were met on its
 * connections (a connection's first bytes came mid-exchange), and how many of them are
 * reported from where they were joined (request.joined); the rest are not reported. */
#define JOINED_SERVERS_MAX 16
struct joined_servers {
	struct joined_server {
		uint32_t pid; /* 0: the servers past JOINED_SERVERS_MAX, together */
		uint64_t in_flight, reported;
	} s[JOINED_SERVERS_MAX + 1];
	uint32_t n;
};

struct pipeline_status {
	/* Kernel time now: the latest in any record so far, or, when the live tracer read the
	 * kernel's clock (CLOCK_MONOTONIC) later than that, the clock: idle time moves on too. A
	 * replay has no clock; its time moves with its records only. */
	uint64_t now_ns;
	uint64_t record_ns;	 /* the latest kernel time in any record so far */
	uint32_t in_flight;	 /* streams open now */
	uint32_t ntraced;	 /* processes traced now ... */
	const uint32_t *traced;	 /* ... their pids */
	struct loss_report loss; /* what the summary's lost and dropped lines would say now */
	/* The GPU steps' statistics per process (the summary's GPU lines), as values. */
	struct gpu_report gpu;
	/* The kernel's features as the live tracer found them; none in a replay. */
	uint32_t nfeatures;
	const struct run_feature *features;
	/* The requests that were not inference, given to the sinks that asked for them only
	 * (sink.others), all of them with pipeline_all_requests */
	bool all_requests;
	struct other_requests others;
	struct joined_servers joined;
	/* What tracing costs (self_cost), measured by the live tracer; NULL in a replay. */
	const struct self_cost *cost;
	/* --slo's objectives (slo.h); NULL when none was given. */
	const struct slo_rules *slo;
};

struct sink {
	const char *name;
	void *ctx;
	/* Also given the requests a traced process made as a client (request.client); the other
	 * sinks see the servers' requests alone. */
	bool clients;
	/* Also given the requests that are not inference (request_is_inference: health checks,
	 * scrapes, /v1/models...); the other sinks see inference alone, unless the pipeline was
	 * told all requests (pipeline_all_requests). Their starts go to every sink. */
	bool others;
	/* A request was read completely (arrival); request() follows when it finishes. */
	void (*request_start)(void *ctx, const struct request *r);
	/* A request whose start this sink was given finished as no inference, and it is not
	 * given it (others false): what the start counted (in flight) is undone here. */
	void (*request_other)(void *ctx, const struct request *r);
	/* A request finished (every outcome). */
	void (*request)(void *ctx, const struct request *r, const struct request_metrics *m,
			const struct gpu_attribution *ga);
	/* A GPU step ended. */
	void (*gpu_step)(void *ctx, const struct gpu_step *s);
	/* A CUDA launch or copy (--kernels: the kernel sends a record per call). */
	void (*gpu_call)(void *ctx, const struct ts_gpu_call_event *e);
	/* A GPU sample (device_sample.h: utilisation, memory, the processes on each device, from
	 * the vendor's sampler, NVML today), cut down to the traced processes; live only, before
	 * the tick of the same drain. */
	void (*device_sample)(void *ctx, const struct device_sample *s);
	/* An interval ended (the loader's --interval clock). */
	void (*interval)(void *ctx, const struct pipeline_status *st);
	/* After each batch of records. */
	void (*tick)(void *ctx, const struct pipeline_status *st);
	/* Tracing ended (after the last request was reported). */
	void (*finish)(void *ctx, const struct pipeline_status *st);
};

#endif
