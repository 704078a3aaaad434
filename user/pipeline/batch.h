/* SPDX-License-Identifier: MIT */
/*
 * Which GPU steps each request rode (docs/gpu.md "Batches"): from the step timeline (gpu.h) and the
 * writes of each request's tokens, the step each token came from; hence each step's batch (the
 * requests it advanced) and each request's decode steps and the mean batch it shared.
 *
 * The rule, token by token, as the writes come (batch_token):
 * - A request is served by one GPU process: the one of the step that prefilled it
 *   (gpu_prefill_step), else of the first step it is credited with below (any process's).
 * - Its first token came from that prefill step.
 * - Each later token came from the latest step of the serving process that launched work (not
 *   `other`) and ended before the token's write, if that step ended after the previous
 *   token's write; if none did, from the same step as the previous token (tokens of one step
 *   written apart, or several per step: speculative decoding). A request counts once per step.
 * - A step's batch is the number of requests credited with it.
 *
 * When a step's batch is final (gpu_step_closed): the writes that can add to it come after
 * its end and before the end of its process's next step that launched work (later writes go
 * to that step by the rule); the window closes GPU_BATCH_SLACK_NS after that end, or, when no
 * next step comes (the process went idle), GPU_BATCH_WAIT_NS after the step's own end. The
 * pipeline holds a step's line, and a finished request, until the windows of the steps they
 * show are closed, so every batch shown is final, except a token written after its step's
 * window closed (counted, gpu_timeline.batch_late).
 *
 * Memory: a request keeps one credit (16 bytes) per step it rode, at most BATCH_KEEP; past that
 * the older half is folded into sums (their steps' windows closed long before).
 *
 * Preemption (docs/gpu.md "Preemption"): a token after the first whose step is a prefill or mixed
 * step, with at least BATCH_PREEMPT_SKIPPED steps of the serving process that launched work
 * ending between the previous token's write and that step's start, came from a recompute: the
 * request was out of the batch from the start of the first step it missed to the end of the
 * recompute. One step missed is a token written late (two tokens written after two steps), not
 * a preemption; a prefill step between two tokens with no step missed is another request's;
 * frames of several steps written together explain as many of the steps that seemed missed.
 */
#ifndef TS_BATCH_H
#define TS_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/gpu.h"
#include "pipeline/request.h"

/* Credits a request keeps (the steps it rode, 16 bytes each); past that, the older half are
 * folded into its sums and no longer drawn in the timeline. */
#define BATCH_KEEP 8192

/* Steps missed before a recompute for it to count as a preemption (one missed step is a late
 * write). */
#define BATCH_PREEMPT_SKIPPED 2
/* Preemptions of a request whose times are kept (for its trace's events). */
#define BATCH_PREEMPT_KEEP 8

/* A step a request's token came from: the step's id, and the index of the first of the
 * request's tokens from it. */
struct batch_credit {
	uint64_t step;
	uint32_t token;
};

/* What a request keeps (request_track.batch), allocated with its first credit. */
struct batch_state {
	uint32_t pid;	 /* the serving GPU process */
	uint32_t n, cap; /* credits kept, oldest first */
	uint32_t folded; /* decode steps folded into the sums below (BATCH_KEEP) */
	uint32_t folded_known;
	uint64_t folded_sum;   /* their batches, of the folded_known still kept when folded */
	uint32_t preemptions;  /* times it left the batch and came back through a recompute */
	uint64_t preempted_ns; /* time out of the batch, the recomputes included */
	/* the first BATCH_PREEMPT_KEEP of them: out from, back at */
	uint64_t preempt_from[BATCH_PREEMPT_KEEP], preempt_to[BATCH_PREEMPT_KEEP];
	/* The latest preemption until the write that ended it is whole: later frames of that
	 * write (pend_ns) came from the steps it seemed to miss, one each; when fewer than
	 * BATCH_PREEMPT_SKIPPED are left unexplained it was a late write, and is taken back. */
	bool pend;
	uint32_t pend_missed;
	uint64_t pend_ns, pend_out_ns;
	/* The recompute tax: the tokens it had generated when each preemption came (all of them
	 * recomputed, with its prompt), and the recompute steps' time; the latest's too, to be
	 * taken back with it. */
	uint64_t recomputed_generated, recompute_ns;
	uint64_t pend_generated, pend_recompute_ns;
	struct batch_credit v[];
};

/* r's newest token (token_ns[ntokens - 1]) was written: credits it to its step. */
void batch_token(struct gpu_timeline *g, struct request *r);
/* Whether every step r's tokens came from is closed by now_ns (or forgotten). */
bool batch_settled(const struct gpu_timeline *g, const struct request *r, uint64_t now_ns);
/* r's steps, batch_mean, preemptions and rides into a (after gpu_attribute). */
void batch_attribute(const struct gpu_timeline *g, const struct request *r,
		     struct gpu_attribution *a);

#endif
