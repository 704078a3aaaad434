// SPDX-License-Identifier: MIT
#include <stdlib.h>
#include <string.h>

#include "lib/hist.h"
#include "pipeline/batch.h"
#include "pipeline/request_track.h"

/* The serving process's steps a write can have come from (batch.h): m of them, the latest k
 * of them by id, oldest first. */
struct write_steps {
	uint32_t pid, m, k;
	uint64_t id[BATCH_WRITE_STEPS];
};

/*
 * The steps that launched work, of pid (when 0: of the process of the latest one), that ended
 * in (after, before) and started at or after from. Steps are kept in the order they ended, to
 * within the delay of a record: once one ended GPU_BATCH_SLACK_NS before `after`, no older one
 * can qualify.
 */
static void steps_between(const struct gpu_timeline *g, uint32_t pid, uint64_t after,
			  uint64_t before, uint64_t from, struct write_steps *w)
{
	uint64_t newest[BATCH_WRITE_STEPS];

	w->pid = pid;
	w->m = w->k = 0;
	for (uint32_t i = g->count; i-- > 0;) {
		const struct gpu_step *s = &g->ring[(g->head + i) % GPU_HISTORY];

		if (s->end_ns + GPU_BATCH_SLACK_NS <= after)
			break;
		if (s->shape == STEP_OTHER || s->end_ns <= after || s->end_ns >= before ||
		    s->start_ns < from)
			continue;
		if (!w->pid)
			w->pid = s->pid;
		if (s->pid != w->pid)
			continue;
		if (w->k < BATCH_WRITE_STEPS)
			newest[w->k++] = s->id;
		w->m++;
	}
	for (uint32_t i = 0; i < w->k; i++)
		w->id[i] = newest[w->k - 1 - i];
}

/* Folds the older half of b's credits into its sums: their steps' windows closed long ago.
 * The current write's credits stay (they may be made again). */
static void fold(const struct gpu_timeline *g, struct batch_state *b)
{
	uint32_t half = b->n / 2 < b->w_credit ? b->n / 2 : b->w_credit;

	for (uint32_t k = 0; k < half; k++) {
		const struct gpu_step *s = gpu_step_by_id(g, b->v[k].step);

		if (!b->v[k].token)
			continue; /* the first token's step: not a decode step */
		b->folded++;
		if (s) {
			b->folded_known++;
			b->folded_sum += s->batch;
		}
	}
	memmove(b->v, b->v + half, (b->n - half) * sizeof(b->v[0]));
	b->n -= half;
	b->w_credit -= half;
}

/* r's batch state, made the first time; NULL without memory. */
static struct batch_state *state_of(struct request *r)
{
	struct batch_state *b = request_track(r)->batch;

	if (!b && (b = calloc(1, sizeof(*b) + 8 * sizeof(b->v[0]))))
		b->cap = 8;
	request_track(r)->batch = b;
	return b;
}

/* r rode s from its token `token` on: s counts it once (a first token: in its firsts). */
static void credit(struct gpu_timeline *g, struct request *r, struct gpu_step *s, uint32_t token)
{
	struct batch_state *b = request_track(r)->batch;

	if (b->n && b->v[b->n - 1].step == s->id)
		return;
	if (b->n == BATCH_KEEP)
		fold(g, b);
	if (b->n == BATCH_KEEP)
		return; /* a write of BATCH_KEEP credits: cannot happen (BATCH_WRITE_STEPS) */
	if (b->n == b->cap) {
		uint32_t cap = b->cap * 2 < BATCH_KEEP ? b->cap * 2 : BATCH_KEEP;
		struct batch_state *nb = realloc(b, sizeof(*b) + cap * sizeof(b->v[0]));

		/* Without memory the token is not credited: the step's batch stays consistent
		 * with the requests' figures. */
		if (!nb)
			return;
		b = nb;
		b->cap = cap;
		request_track(r)->batch = b;
	}
	if (!b->pid)
		b->pid = s->pid;
	b->v[b->n++] = (struct batch_credit){ s->id, token };
	s->batch++;
	if (token)
		s->nexts++;
	else
		s->firsts++;
	if (!s->pending)
		g->batch_late++;
}

/* Takes back r's credits from index `from` on (its current write's, to be made again). */
static void uncredit(struct gpu_timeline *g, struct batch_state *b, uint32_t from)
{
	for (uint32_t k = from; k < b->n; k++) {
		struct gpu_step *s = gpu_step_by_id(g, b->v[k].step);

		if (!s)
			continue;
		s->batch--;
		if (b->v[k].token)
			s->nexts--;
		else
			s->firsts--;
	}
	if (from < b->n)
		b->n = from;
}

/* Takes back the latest preemption. */
static void preempt_undo(struct batch_state *b)
{
	b->preemptions--;
	b->preempted_ns -= b->pend_out_ns;
	b->recomputed_generated -= b->pend_generated;
	b->recompute_ns -= b->pend_recompute_ns;
	b->pend = b->w_pre = false;
}

/*
 * The current write's frames (f of them so far) to the steps before it (w), and whether it
 * ends a preemption: of the steps before its first frame's, those that gave others a next
 * token, and those past BATCH_WRITE_STEPS (not looked at), are the ones it missed.
 */
static void credit_write(struct gpu_timeline *g, struct request *r, struct batch_state *b,
			 const struct write_steps *w)
{
	uint32_t f = r->ntokens - b->w_token, lead = w->k > f ? w->k - f : 0;
	uint32_t missed = w->m - w->k;
	const struct gpu_step *x, *from = NULL;
	bool placed = b->pid != 0;

	for (uint32_t j = 0; j < f; j++) {
		uint32_t at = w->k + j >= f ? w->k + j - f : 0;
		struct gpu_step *s = gpu_step_by_id(g, w->id[at]);

		if (s)
			credit(g, r, s, b->w_token + j);
	}
	b = request_track(r)->batch; /* credit may have moved it */
	/* A first write (its wait is the queue's), or one of a request not yet placed. The
	 * recompute is the step of the write's last frame: with several frames, the others are
	 * more likely tokens held back from before the preemption than tokens after it. */
	x = gpu_step_by_id(g, w->id[w->k - 1]);
	if (!b->w_token || !placed || !x)
		return;
	for (uint32_t k = 0; k < lead; k++) {
		const struct gpu_step *o = gpu_step_by_id(g, w->id[k]);

		if (o && o->nexts) {
			missed++;
			if (!from)
				from = o;
		}
	}
	if (missed < BATCH_PREEMPT_SKIPPED || !from)
		return;
	if (b->preemptions < BATCH_PREEMPT_KEEP) {
		b->preempt_from[b->preemptions] = from->start_ns;
		b->preempt_to[b->preemptions] = x->end_ns;
	}
	b->preemptions++;
	b->pend_out_ns = x->end_ns - from->start_ns;
	b->preempted_ns += b->pend_out_ns;
	/* Recomputed: its prompt and the tokens before this write (whose first is the
	 * recompute's). */
	b->pend_generated = b->w_token;
	b->pend_recompute_ns = x->end_ns > x->start_ns ? x->end_ns - x->start_ns : 0;
	b->recomputed_generated += b->pend_generated;
	b->recompute_ns += b->pend_recompute_ns;
	b->pend_missed = missed;
	b->w_pre = true;
}

void batch_token(struct gpu_timeline *g, struct request *r)
{
	uint32_t i = r->ntokens - 1;
	uint64_t t = r->token_ns[i];
	struct write_steps w;
	struct batch_state *b;

	if (r->client || !r->ntokens || !g->count)
		return;
	/* Joined mid-response: its first write's tokens are no prefill's, nor known steps'. */
	if (r->joined && t == r->token_ns[0])
		return;
	if (!(b = state_of(r)))
		return;
	if (!b->w_open || t != b->w_ns) {
		/* A new write. The previous one's preemption may yet be explained by it. */
		if (b->w_pre)
			b->pend = true;
		b->w_open = true;
		b->w_ns = t;
		b->w_prev_ns = i ? r->token_ns[i - 1] : r->arrival_ns;
		b->w_token = i;
		b->w_credit = b->n;
		b->w_pre = false;
	} else if (i - b->w_token >= BATCH_WRITE_STEPS) {
		return; /* from the same step as the frame before it */
	} else {
		/* Another frame of the write: its frames are credited again, all of them. */
		uncredit(g, b, b->w_credit);
		if (b->w_pre)
			preempt_undo(b);
	}
	steps_between(g, b->pid, b->w_prev_ns, t, b->w_token || r->joined ? 0 : r->arrival_ns, &w);
	if (b->pend && i == b->w_token) {
		/* Tokens of steps the preemption seemed to miss, written apart: no step came
		 * between this write and the one before, so this one came from one of them. */
		if (w.m)
			b->pend = false;
		else if (--b->pend_missed < BATCH_PREEMPT_SKIPPED)
			preempt_undo(b);
	}
	if (w.m)
		credit_write(g, r, b, &w);
}
bool batch_settled(const struct gpu_timeline *g, const struct request *r, uint64_t now_ns)
{
	const struct batch_state *b = request_track_c(r)->batch;
	const struct gpu_step *s;

	if (!b || !b->n)
		return true;
	/* Its steps close in order: the last one closes after the others. */
	s = gpu_step_by_id(g, b->v[b->n - 1].step);
	return !s || gpu_step_closed(s, now_ns);
}

const struct gpu_step *batch_prefill_step(const struct gpu_timeline *g, const struct request *r)
{
	const struct batch_state *b = request_track_c(r)->batch;

	return b && b->n && !b->v[0].token ? gpu_step_by_id(g, b->v[0].step) : NULL;
}

/* Each token's time from its step's end to its write, over the rides whose step is known. */
static void batch_engine_to_socket(const struct request *r, struct gpu_attribution *a)
{
	uint32_t n = 0;

	for (uint32_t k = 0; k < a->nrides; k++)
		if (a->rides[k].known)
			n += a->rides[k].ntokens;
	if (!n || !(a->e2s = malloc(n * sizeof(*a->e2s))))
		return;
	for (uint32_t k = 0; k < a->nrides; k++) {
		const struct batch_ride *ride = &a->rides[k];

		for (uint32_t i = ride->token;
		     ride->known && i < ride->token + ride->ntokens && i < r->ntokens; i++)
			a->e2s[a->ne2s++] =
			    r->token_ns[i] > ride->end_ns ? r->token_ns[i] - ride->end_ns : 0;
	}
	qsort(a->e2s, a->ne2s, sizeof(*a->e2s), u64_cmp);
}

void batch_attribute(const struct gpu_timeline *g, const struct request *r,
		     struct gpu_attribution *a)
{
	const struct batch_state *b = request_track_c(r)->batch;
	uint64_t sum;

	a->has_steps = !r->client && g->count;
	a->preemptions = b ? b->preemptions : 0;
	/* -1 where it is not known (no steps), as every time of an attribution */
	a->preempted_ns = !a->has_steps ? -1 : b ? (int64_t)b->preempted_ns : 0;
	a->preempt_from = b ? b->preempt_from : NULL;
	a->preempt_to = b ? b->preempt_to : NULL;
	a->npreempt_times = !b					  ? 0
			    : b->preemptions < BATCH_PREEMPT_KEEP ? b->preemptions
								  : BATCH_PREEMPT_KEEP;
	a->steps = a->batch_steps = 0;
	a->batch_mean = 0;
	a->rides = NULL;
	a->nrides = 0;
	a->steps_after_gone = 0;
	a->recomputed_generated = b && a->has_steps ? b->recomputed_generated : 0;
	a->recompute_ns = b && a->has_steps ? b->recompute_ns : 0;
	a->e2s = NULL;
	a->ne2s = 0;
	if (a->has_steps && request_abandoned(r) && r->gone_last_write_ns)
		a->steps_after_gone = gpu_steps_within(g, r->gone_ns, r->gone_last_write_ns);
	if (!a->has_steps || !b)
		return;
	a->steps = b->folded;
	a->batch_steps = b->folded_known;
	sum = b->folded_sum;
	a->rides = b->n ? calloc(b->n, sizeof(*a->rides)) : NULL;
	for (uint32_t k = 0; k < b->n; k++) {
		const struct gpu_step *s = gpu_step_by_id(g, b->v[k].step);
		uint32_t next = k + 1 < b->n ? b->v[k + 1].token : r->ntokens;

		if (b->v[k].token) {
			a->steps++;
			if (s) {
				a->batch_steps++;
				sum += s->batch;
			}
		}
		if (!a->rides)
			continue;
		a->rides[k] =
		    (struct batch_ride){ .token = b->v[k].token, .ntokens = next - b->v[k].token };
		if (s) {
			a->rides[k].pid = s->pid;
			a->rides[k].tid = s->tid;
			a->rides[k].start_ns = s->start_ns;
			a->rides[k].end_ns = s->end_ns;
			a->rides[k].batch = s->batch;
			a->rides[k].known = true;
		}
	}
	if (a->rides)
		a->nrides = b->n;
	if (a->batch_steps)
		a->batch_mean = (double)sum / a->batch_steps;
	batch_engine_to_socket(r, a);
}
