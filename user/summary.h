/* SPDX-License-Identifier: MIT */
/*
 * Aggregates over finished requests: counts by outcome, success rate, concurrency, TTFT / ITL /
 * TPOT / E2E histograms, token throughput. All times come from the requests (kernel clock).
 */
#ifndef TS_SUMMARY_H
#define TS_SUMMARY_H

#include <stdint.h>
#include <stdio.h>

#include "hist.h"
#include "request.h"

struct summary {
	uint64_t requests, streamed;
	uint64_t by_outcome[OUTCOME_MAX];
	uint64_t tokens;			 /* output tokens of finished requests */
	uint64_t window_start_ns, window_end_ns; /* earliest arrival, latest end */
	uint64_t busy_ns; /* sum of E2E: busy_ns / window = mean requests in flight */
	uint32_t inflight, inflight_max;
	struct hist ttft, itl, tpot, e2e;
};

/* Everything the tracer could not see, shown under every summary, and what it looked at. */
struct loss_report {
	uint64_t lost_events, lost_bytes, uncaptured_bytes, gap_bytes, desyncs, bad_records;
	uint64_t untraced_sockets; /* the kernel's connection table was full */
	uint64_t copy_failed;	   /* reads of traced bytes from the process's memory that failed
				    * (their bytes are in uncaptured_bytes) */
	uint64_t http_conns, ignored_conns;
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

void summary_init(struct summary *s);
/* Starts a new interval: counts and histograms cleared, requests still in flight kept. */
void summary_reset_interval(struct summary *s);
void summary_start(struct summary *s, const struct request *r);
void summary_done(struct summary *s, const struct request *r, const struct request_metrics *m);
void summary_print(const struct summary *s, const struct loss_report *loss, const char *title,
		   FILE *f);

#endif
