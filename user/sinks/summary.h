/* SPDX-License-Identifier: MIT */
/*
 * Aggregates over finished requests: counts by outcome, success rate, concurrency, TTFT / ITL /
 * TPOT / E2E histograms, token throughput. All times come from the requests (kernel clock).
 */
#ifndef TS_SUMMARY_H
#define TS_SUMMARY_H

#include <stdint.h>
#include <stdio.h>

#include "lib/hist.h"
#include "pipeline/request.h"
#include "pipeline/sink.h"

struct summary {
	uint64_t requests, streamed;
	uint64_t by_outcome[OUTCOME_MAX];
	uint64_t tokens;			 /* output tokens of finished requests */
	uint64_t window_start_ns, window_end_ns; /* earliest arrival, latest end */
	uint64_t busy_ns; /* sum of E2E: busy_ns / window = mean requests in flight */
	uint32_t inflight, inflight_max;
	struct hist ttft, itl, tpot, e2e;
	/* ok served requests paired with their upstream request (a traced proxy): the proxy's own
	 * part of their TTFT (proxy_ttft_ms) */
	struct hist proxy_ttft;
	/* TTFT under the other tools' definitions (README "TTFT definitions"), over the requests
	 * of ttft (ok, with a first output): to the first response body byte, the first chunk,
	 * the first answer text; ttft is the first output. And how many of those had bytes
	 * before their first chunk, a chunk before their first output, output before their
	 * first answer text: the causes named when the definitions disagree. */
	struct hist ttft_byte, ttft_chunk, ttft_text;
	uint64_t byte_first, chunk_first, output_first;
};

void summary_init(struct summary *s);
/* Starts a new interval: counts and histograms cleared, requests still in flight kept. */
void summary_reset_interval(struct summary *s);
void summary_start(struct summary *s, const struct request *r);
void summary_done(struct summary *s, const struct request *r, const struct request_metrics *m);
void summary_print(const struct summary *s, const struct loss_report *loss, const char *title,
		   FILE *f);

/* The summaries as a sink: the run's total, printed at the end with the loss report and the
 * GPU steps' statistics, and the interval's, printed and started anew on each interval (the
 * loader's --interval, pipeline_interval). */
struct summaries {
	FILE *out; /* NULL: kept, not printed */
	struct summary total, interval;
};

void summaries_init(struct summaries *s, FILE *out);
struct sink summaries_sink(struct summaries *s);
/* The total as of st (the sink's finish prints it so). */
void summaries_print_total(const struct summaries *s, const struct pipeline_status *st);

#endif
