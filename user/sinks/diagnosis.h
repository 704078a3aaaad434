/* SPDX-License-Identifier: MIT */
/*
 * The report's diagnosis: a sink that keeps, per request that finished ok with a first token,
 * its arrival, TTFT, inter-token gaps and GPU attribution, and at the end says where the slow
 * tail's time went, for the whole run and for its first and last thirds, and what changed.
 *
 * Rules (docs/record-report.md, the diagnosis; every number is from the event stream):
 * - Thirds are by arrival order: the first third is the n/3 requests that arrived first, the
 *   last third the n/3 that arrived last. They are compared only from DIAG_MIN_COMPARE requests.
 * - TTFT P99 and ITL P99 are computed as the summary computes them (over ok requests; ITL over
 *   every gap), so the whole-run figures equal the summary's.
 * - TTFT slow tail: the requests whose TTFT is at or above the P99 (at least one). Their TTFT is
 *   split into queue (arrival to the start of their prefill step), prefill (that step) and other
 *   (the rest: the host after prefill, before the first write), as the mean of each request's
 *   shares over the tail requests that have a GPU attribution.
 * - ITL slow tail: the requests whose own ITL p99 is at or above the ITL P99 (at least one: the
 *   highest). Their decode is split into GPU and host time (mean of shares).
 * - Verdict per metric: if the last third's P99 is within DIAG_STABLE_PCT % of the first
 *   third's, it is stable. Otherwise it rose or fell, and the component whose share of the slow
 *   tail moved most in the same direction (grew most for a rise, shrank most for a fall) is
 *   named with what that means, unless no share moved by DIAG_SHARE_MIN_POINTS points or more.
 * - ITL and batch size (whole run): each gap is labelled with the batch of the GPU step its
 *   second token came from (batch.h). The low group is the gaps whose batch is at or below the
 *   batches' first quartile, the high group those at or above the third quartile. "ITL p99 grew
 *   with batch size" is said only when both groups have DIAG_BATCH_MIN_GAPS gaps or more, the
 *   high group's mean batch is DIAG_BATCH_MIN_RATIO times the low one's or more, and the high
 *   group's ITL P99 is DIAG_STABLE_PCT % above the low group's or more; otherwise nothing.
 * - Objectives (slo.h), when requests had some: how many of those judged missed, by which
 *   objective, how many of the misses were failures, and where the requests that finished ok
 *   and missed spent their time: the mean of each one's shares of its E2E in queue, prefill,
 *   the rest of its TTFT, decode and time out of the batch where its GPU steps split it, else
 *   in TTFT and decode. The largest share is named.
 * - Engine to socket (whole run, when GPU steps are known): every token's time from its step's
 *   end to its write, p50 against the ITL p50; at DIAG_E2S_SHARE of it or more the API process
 *   is named as what holds the tokens.
 * - Graph coverage (whole run, docs/gpu.md "Graph coverage"): when decode steps ran eagerly,
 *   how many of all decode steps and at which batches; each eager step's duration is set
 *   against the mean of the graph (or piecewise) decode steps of its batch range, or of the
 *   nearest range that has some. With DIAG_EAGER_MIN_SHARE of the decode steps or more eager,
 *   and eager steps DIAG_EAGER_SLOWER times as long or more, the graph capture sizes are
 *   named as what to raise.
 * - Stalls (whole run, docs/gpu.md "Who stalled me"): the slow gaps by cause; of those at or over
 *   the ITL P99, the most frequent cause is named as what raised it, with how many of them it
 *   explains and, for prefills, the largest prompt of the requests blamed.
 * Never prints request or response text (it keeps none).
 */
#ifndef TS_DIAGNOSIS_H
#define TS_DIAGNOSIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/hist.h"
#include "pipeline/sink.h"
#include "pipeline/slo.h"
#include "pipeline/step.h"

/* Fewer requests than this are too few for thirds to mean anything (two per third). */
#define DIAG_MIN_COMPARE 6
/* A P99 that moved by less than this, in percent of the first third's, is stable. */
#define DIAG_STABLE_PCT 10
/* Engine to socket's p50 as a share of the ITL p50 from which the API process is named. */
#define DIAG_E2S_SHARE 0.5
/* A share that moved by less than this, in percentage points, is not named as the cause. */
#define DIAG_SHARE_MIN_POINTS 5
/* Gaps each batch group needs for its P99 to rest on more than its single largest gap. */
#define DIAG_BATCH_MIN_GAPS 200
/* How much larger the high group's mean batch must be than the low group's to compare them. */
#define DIAG_BATCH_MIN_RATIO 1.5
/* Eager decode steps' share of the decode steps, and how much longer than graph steps of their
 * batch they must be, for the capture sizes to be named. */
#define DIAG_EAGER_MIN_SHARE 0.05
#define DIAG_EAGER_SLOWER 1.2

/* One request that finished ok with a first token. Values < 0 are unknown. */
struct diag_req {
	uint64_t arrival_ns;
	int64_t ttft_ns, itl_p99_ns;
	int64_t queue_ns, prefill_ns, decode_ns, gpu_ns, host_ns;
	int64_t wait_ns;      /* request_metrics' socket_wait_ns */
	int64_t preempted_ns; /* time out of the batch (batch.h); -1: its steps unknown */
	uint32_t preemptions;
	size_t gap0; /* its inter-token gaps: gaps[gap0 .. gap0 + ngaps) */
	uint32_t ngaps;
};

/* A stall of an ok request (stall.h): its gap, cause, and the largest prompt of the requests it
 * was blamed on (tokens where their usage said, else bytes; -1: none named). */
struct diag_stall {
	uint64_t gap_ns;
	enum stall_cause cause;
	bool likely;
	int64_t prompt_tokens, prompt_bytes;
};

/* The requests with objectives (slo.h): misses by objective, and where the ok ones that missed
 * spent their time (sums of shares of their E2E). */
enum diag_phase {
	DP_QUEUE,
	DP_PREFILL,
	DP_TTFT_REST, /* the rest of TTFT after queue and prefill */
	DP_TTFT,      /* TTFT where no GPU step split it */
	DP_DECODE,
	DP_PREEMPTED,
	DP_MAX,
};

struct diag_slo {
	uint64_t judged, missed, failed;
	uint64_t by[SLO_METRICS];
	uint64_t split, unsplit; /* ok misses with and without a GPU split of their time */
	double share[DP_MAX];
};

struct diagnosis {
	struct diag_req *reqs;
	size_t n, cap;
	uint64_t *gaps; /* every kept request's inter-token gaps, in ns */
	size_t ngaps, gaps_cap;
	uint32_t *gap_batch; /* each gap's batch (of its second token's step); 0: unknown */
	size_t gap_batch_cap;
	uint64_t finished;  /* requests finished, every outcome */
	uint64_t gpu_steps; /* GPU steps seen: tells "no GPU steps" from "not attributed" */
	uint64_t dropped;   /* ok requests not kept for lack of memory */
	bool have_clock;
	int64_t real_offset_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC */
	struct diag_slo slo;
	/* Engine to socket of every token of the ok requests whose steps are known
	 * (gpu_attribution.e2s). */
	struct hist e2s;
	/* The listed stalls of the ok requests (stall.h), and all of them counted. */
	struct diag_stall *stalls;
	size_t nstalls, stalls_cap;
	uint64_t stalls_all;
	/* Decode steps by mode (graph coverage), every process's. */
	struct gpu_coverage coverage[MODE_MAX];
};

void diagnosis_init(struct diagnosis *d);
/* The sink to register with pipeline_add_sink; d must outlive the pipeline's use of it. */
struct sink diagnosis_sink(struct diagnosis *d);
/* Optional: print arrival times as wall-clock times too, given CLOCK_REALTIME -
 * CLOCK_MONOTONIC (a recording's, from its header). */
void diagnosis_set_wall_clock(struct diagnosis *d, int64_t real_offset_ns);
void diagnosis_print(const struct diagnosis *d, FILE *f);
void diagnosis_free(struct diagnosis *d);

#endif
