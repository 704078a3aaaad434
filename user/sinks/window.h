/* SPDX-License-Identifier: MIT */
/*
 * A sliding window of kernel time: one slot per whole second, kept for the last nslots seconds,
 * so memory is fixed. Each slot holds the counts of the requests that finished in its second
 * (by their end time), the sums that say where their time went, and a coarse histogram
 * (hist.h's whist) per kept metric. `top` and the alert rules read their figures from windows;
 * both sum a range of seconds with window_sum and take percentiles with whist_quantile.
 *
 * A slot is reused for a later second (cleared first); a sample for a second older than the one
 * its slot holds now has left the window and is not kept.
 */
#ifndef TS_WINDOW_H
#define TS_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/hist.h"
#include "pipeline/slo.h"

struct request;
struct request_metrics;
struct gpu_attribution;

/* The latencies of a finished request a window can keep. Each is in ns; every one but E2E is
 * taken from requests that finished ok. */
enum win_metric {
	WM_TTFT,
	WM_ITL, /* every inter-token gap */
	WM_TPOT,
	WM_E2E, /* every outcome */
	WM_QUEUE,
	WM_PREFILL,
	WM_DECODE,
	WM_MAX,
};

#define WM_BIT(m) (1u << (m))

/* Counts and sums of the requests of a span of seconds. */
struct win_counts {
	uint32_t requests, ok;
	uint64_t tokens; /* output tokens of every request that reported or streamed some */
	/* Over ok requests whose TTFT was split into queue and prefill: the sums (ns). */
	uint32_t attributed;
	uint64_t ttft_ns, queue_ns, prefill_ns;
	/* Over ok requests whose token gaps were split into GPU and host time: the sums (ns). */
	uint64_t gpu_ns, host_ns;
	/* ok requests whose GPU steps are known, and those of them preempted (batch.h) */
	uint32_t steps_known, preempted;
	/* Requests with objectives (slo.h) that met all of theirs or missed one (every outcome:
	 * an error misses), and the misses per objective. */
	uint32_t slo_met, slo_missed, slo_missed_by[SLO_METRICS];
};

struct window {
	uint32_t nslots;
	uint32_t kept;	      /* the metrics (or, for window_add, ids) kept: a bit each */
	int8_t index[32];     /* histogram of a kept id in a slot; -1: not kept */
	uint32_t nhist;	      /* histograms per slot */
	size_t slot_size;     /* bytes of one slot with its histograms */
	unsigned char *slots; /* nslots of them, by second modulo */
};

/* nslots seconds, with a histogram per bit of kept (enum win_metric for window_add_request, or
 * any ids below 32 for window_add). -ENOMEM, -EINVAL. */
int window_init(struct window *w, uint32_t nslots, uint32_t kept);
void window_free(struct window *w);
/* Every slot emptied. */
void window_clear(struct window *w);

/* A request that finished at r->end_ns (0: not finished, ignored), into the slot of its second.
 * ga may be NULL (no attribution). False when its second has left the window. */
bool window_add_request(struct window *w, const struct request *r, const struct request_metrics *m,
			const struct gpu_attribution *ga);
/* One sample v of kept id k at kernel second s. False when s has left the window or k is not
 * kept. */
bool window_add(struct window *w, uint64_t s, unsigned int k, uint64_t v);

/* Sums the slots of seconds [lo_s, hi_s]: their counts into c (may be NULL), and the histograms
 * of the ids in mask (kept ones) merged into one, h (may be NULL). c and h are reset first. */
void window_sum(const struct window *w, uint64_t lo_s, uint64_t hi_s, struct win_counts *c,
		uint32_t mask, struct whist *h);

#endif
