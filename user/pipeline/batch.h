/* SPDX-License-Identifier: MIT */
/*
 * Which GPU steps each request rode (docs/gpu.md "Batches"): from the step timeline (gpu.h) and the
 * writes of each request's tokens, the step each token came from; hence each step's batch (the
 * requests it advanced) and each request's decode steps and the mean batch it shared.
 *
 * The rule, write by write (batch_token): a write of the frames of tokens i..i+F-1, after the
 * write of token i-1 (or the request's arrival, for its first write):
 * - A request is served by one GPU process: the one of the latest step that launched work (not
 *   `other`) and ended between its arrival and its first write (any process's), else of the
 *   first step it is credited with below.
 * - The serving process's steps that launched work and ended between the previous write and
 *   this one (for the first write: that started after the arrival): M of them. Its F frames
 *   came from the last F of them, one each, the last frame from the latest step (a host that
 *   fell behind writes the tokens of several steps at once). With fewer steps than frames
 *   (speculative decoding: several tokens per step), the first frames share the earliest.
 *   With none, its tokens came from the same step as the previous token (tokens of one step
 *   written apart). A request counts once per step.
 * - A step's batch is the number of requests credited with it: `firsts` of them with their
 *   first token, `nexts` with a next one; its kind follows (gpu.h).
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
 * Preemption (docs/gpu.md "Preemption"): a write after the first whose first frame's step
 * comes after BATCH_PREEMPT_SKIPPED or more steps of the serving process that the write's
 * frames do not account for, and that gave other requests a next token, ends a preemption: the
 * request was out of the batch from the start of the first of them to the end of the step its
 * first frame came from (the recompute). One step missed is a token written late, not a
 * preemption; steps that gave no next token (prefills of others, chunks of a long prompt) were
 * not the request's to miss; later writes with no step between them explain one missed step
 * each (tokens of missed steps written apart), and take the preemption back when fewer than
 * BATCH_PREEMPT_SKIPPED are left. The recompute's own kind does not matter: by its tokens it
 * is a decode (it gave the request its next token).
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
/* Frames of one write spread over the steps before it; more go to the step of the last. */
#define BATCH_WRITE_STEPS 64

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
	/* The write being credited: its time, the previous write's (the arrival for the first),
	 * its first token, and the credits before it (its own are credits w_credit..n - 1, made
	 * again as each of its frames comes). w_pre: it ended the latest preemption. */
	bool w_open;
	uint64_t w_ns, w_prev_ns;
	uint32_t w_token, w_credit;
	bool w_pre;
	/* The latest preemption while later writes may still explain its missed steps (pend):
	 * the steps left unexplained and what it added, to be taken back. */
	bool pend;
	uint32_t pend_missed;
	uint64_t pend_out_ns;
	/* The recompute tax: the tokens it had generated when each preemption came (all of them
	 * recomputed, with its prompt), and the recompute steps' time; the latest's too, to be
	 * taken back with it. */
	uint64_t recomputed_generated, recompute_ns;
	uint64_t pend_generated, pend_recompute_ns;
	struct batch_credit v[];
};

/* r's newest token (token_ns[ntokens - 1]) was written: credits it, and the other frames of
 * its write, to their steps. */
void batch_token(struct gpu_timeline *g, struct request *r);
/* The step r's first token came from; NULL when not known. */
const struct gpu_step *batch_prefill_step(const struct gpu_timeline *g, const struct request *r);
/* Whether every step r's tokens came from is closed by now_ns (or forgotten). */
bool batch_settled(const struct gpu_timeline *g, const struct request *r, uint64_t now_ns);
/* r's steps, batch_mean, preemptions and rides into a (after gpu_attribute). */
void batch_attribute(const struct gpu_timeline *g, const struct request *r,
		     struct gpu_attribution *a);

#endif
