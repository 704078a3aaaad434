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

struct request;
struct request_metrics;
struct gpu_attribution;
struct gpu_step;
struct ts_gpu_call_event;
struct nvml_snapshot;
struct gpu_timeline;

/* Everything the tracer could not see, shown under every summary, and what it looked at. */
struct loss_report {
	uint64_t lost_events, lost_bytes, uncaptured_bytes, gap_bytes, desyncs, bad_records;
	uint64_t untraced_sockets; /* the kernel's connection table was full */
	uint64_t copy_failed;	   /* reads of traced bytes from the process's memory that failed
				    * (their bytes are in uncaptured_bytes) */
	uint64_t http_conns, ignored_conns, client_conns, h2_conns, h2_midway;
	/* connections joined mid-stream, and those of them no request line has come on since */
	uint64_t joined_conns, waiting_conns;
	/* connections that carried TLS, and of those, the ones whose plaintext never came; socket
	 * writes of TLS records, and the total time from the TLS write call to them */
	uint64_t tls_conns, tls_unread, tls_wire_writes, tls_wire_ns;
	uint64_t tls_unjoined; /* TLS calls whose plaintext could not be put on a connection */
	/* What the parsers let go (struct conn_stats): never a request reported with wrong numbers,
	 * always a count. */
	uint64_t partial_requests, orphan_responses, pipeline_overflow, oversize_frames,
	    damaged_frames;
	uint64_t budget_refused; /* buffers refused: the connections' memory cap was reached */
	size_t budget_max;
	/* Device times (CUPTI injection library), when some process reported them. */
	bool cupti;
	uint64_t cupti_dropped;	   /* records CUPTI dropped, as its libraries counted */
	uint64_t cupti_pool_empty; /* buffer requests the libraries refused: pools in use */
	uint64_t cupti_unplaced;   /* runs in no host step */
	uint64_t cupti_late;	   /* steps shown before their device times were complete */
	uint64_t cupti_abi_bad;	   /* records of a library of another ABI version */
};

/* The pipeline as of a tick (or the end): copied out for the call, valid during it. */
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
	/* The GPU steps' statistics per process (the summary's GPU lines), read-only. */
	const struct gpu_timeline *gpu;
};

struct sink {
	const char *name;
	void *ctx;
	/* Also given the requests a traced process made as a client (request.client); the other
	 * sinks see the servers' requests alone. */
	bool clients;
	/* A request was read completely (arrival); request() follows when it finishes. */
	void (*request_start)(void *ctx, const struct request *r);
	/* A request finished (every outcome). */
	void (*request)(void *ctx, const struct request *r, const struct request_metrics *m,
			const struct gpu_attribution *ga);
	/* A GPU step ended. */
	void (*gpu_step)(void *ctx, const struct gpu_step *s);
	/* A CUDA launch or copy (--kernels: the kernel sends a record per call). */
	void (*gpu_call)(void *ctx, const struct ts_gpu_call_event *e);
	/* A GPU sample (NVML: utilisation, memory, the processes on each device), cut down to the
	 * traced processes; live only, before the tick of the same drain. */
	void (*gpu_sample)(void *ctx, const struct nvml_snapshot *s);
	/* An interval ended (the loader's --interval clock). */
	void (*interval)(void *ctx, const struct pipeline_status *st);
	/* After each batch of records. */
	void (*tick)(void *ctx, const struct pipeline_status *st);
	/* Tracing ended (after the last request was reported). */
	void (*finish)(void *ctx, const struct pipeline_status *st);
};

#endif
