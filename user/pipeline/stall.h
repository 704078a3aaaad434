/* SPDX-License-Identifier: MIT */
/*
 * Who stalled me (docs/gpu.md "Who stalled me"): for every gap between two tokens of a request
 * at or over its threshold, the cause, from the GPU steps around it (gpu.h, batch.h):
 * - the gap (a, b] between the writes of tokens i-1 and i, and x, the step token i came from;
 * - the time in it of: prefill or mixed steps of the serving process that ended in (a, b]
 *   (prefill; the requests whose first token came from them named), the request's preemptions
 *   (preempted), x's duration above the median of the request's decode steps (batch: the
 *   batch grew), the time from x's end to the write above the request's median (late write),
 *   and the rest of the gap with no step of the process running (host);
 * - the cause is the largest of these.
 * Without GPU steps for it, other requests of the same server waiting for their first token
 * (arrival to first token) for half the gap or more are its likely cause (marked likely), else
 * the cause is unknown.
 *
 * Other requests' prefills are known from a ring of the latest STALL_FIRSTS first tokens: the
 * request, its server, its arrival and first token, and the step its first token came from.
 */
#ifndef TS_STALL_H
#define TS_STALL_H

#include <stdint.h>

#include "pipeline/gpu.h"
#include "pipeline/request.h"

/* First tokens remembered for naming the requests a stall is blamed on. */
#define STALL_FIRSTS 2048
/* The default threshold: this many times the request's median gap, at least STALL_MIN_NS. */
#define STALL_ITL_FACTOR 3
#define STALL_MIN_NS 50000000ull

struct stall_first {
	uint32_t pid; /* the server process that read it */
	uint64_t conn_id;
	uint32_t seq;
	uint64_t arrival_ns, first_ns;
	uint64_t step; /* the step its first token came from (batch.h); 0: none known */
	struct stall_by who;
};

struct stall_table {
	struct stall_first *v; /* STALL_FIRSTS, allocated with the first; oldest at head */
	uint32_t head, n;
	uint64_t threshold_ns; /* --stall-ms; 0: per request */
};

void stall_init(struct stall_table *t, uint64_t threshold_ns);
void stall_free(struct stall_table *t);
/* r's token was written (after batch_token): while it is in its first write, its first token
 * is (re)recorded. */
void stall_token(struct stall_table *t, const struct gpu_timeline *g, struct request *r);
/* r ended: its prompt tokens, when its usage said them, go to its record. */
void stall_request_done(struct stall_table *t, const struct request *r);
/* r's stalls into a->stalls (after gpu_attribute and batch_attribute); m: its metrics, whose
 * median gap sets the default threshold. */
void stall_attribute(const struct stall_table *t, const struct gpu_timeline *g,
		     const struct request *r, const struct request_metrics *m,
		     struct gpu_attribution *a);

#endif
