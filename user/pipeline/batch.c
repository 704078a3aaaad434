// SPDX-License-Identifier: MIT
#include <stdlib.h>
#include <string.h>

#include "pipeline/batch.h"
#include "pipeline/request_track.h"

/*
 * The latest step that launched work, of pid (of any process when 0), that ended in (after,
 * before); NULL when none did. Steps are kept in the order they ended, to within the delay of
 * a record: once one ended GPU_BATCH_SLACK_NS before `after`, no older one can qualify.
 */
static struct gpu_step *latest_between(struct gpu_timeline *g, uint32_t pid, uint64_t after,
				       uint64_t before)
{
	for (uint32_t i = g->count; i-- > 0;) {
		struct gpu_step *s = &g->ring[(g->head + i) % GPU_HISTORY];

		if (s->end_ns + GPU_BATCH_SLACK_NS <= after)
			break;
		if (s->kind != STEP_OTHER && s->end_ns > after && s->end_ns < before &&
		    (!pid || s->pid == pid))
			return s;
	}
	return NULL;
}

/* Folds the older half of b's credits into its sums: their steps' windows closed long ago. */
static void fold(const struct gpu_timeline *g, struct batch_state *b)
{
	uint32_t half = b->n / 2;

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
}

/* r rode s from its token `token` on: s counts it once. */
static void credit(struct gpu_timeline *g, struct request *r, struct gpu_step *s, uint32_t token)
{
	struct batch_state *b = request_track(r)->batch;

	if (b && b->n && b->v[b->n - 1].step == s->id)
		return;
	if (b && b->n == BATCH_KEEP)
		fold(g, b);
	if (!b || b->n == b->cap) {
		uint32_t cap = b ? b->cap * 2 : 8;

		if (cap > BATCH_KEEP)
			cap = BATCH_KEEP;
		b = realloc(b, sizeof(*b) + cap * sizeof(b->v[0]));
		/* Without memory the token is not credited: the step's batch stays consistent
		 * with the requests' figures. */
		if (!b)
			return;
		if (!request_track(r)->batch)
			memset(b, 0, sizeof(*b));
		b->cap = cap;
		request_track(r)->batch = b;
	}
	if (!b->pid)
		b->pid = s->pid;
	b->v[b->n++] = (struct batch_credit){ s->id, token };
	s->batch++;
	if (!s->pending)
		g->batch_late++;
}

/*
 * Token i of r came from s, after token i - 1 at prev_ns: when s is a recompute (a prefill or
 * mixed step, after BATCH_PREEMPT_SKIPPED or more steps of the process r missed), r was
 * preempted from the start of the first of them to the end of s.
 */
static void preempt_check(const struct gpu_timeline *g, struct request *r, const struct gpu_step *s,
			  uint64_t prev_ns)
{
	struct batch_state *b = request_track(r)->batch;
	const struct gpu_step *first = NULL;
	uint32_t missed = 0;

	if (s->kind != STEP_PREFILL && s->kind != STEP_MIXED)
		return;
	for (uint32_t i = g->count; i-- > 0;) {
		const struct gpu_step *o = &g->ring[(g->head + i) % GPU_HISTORY];

		if (o->end_ns + GPU_BATCH_SLACK_NS <= prev_ns)
			break;
		if (o == s || o->pid != s->pid || o->kind == STEP_OTHER || o->end_ns <= prev_ns ||
		    o->end_ns > s->start_ns)
			continue;
		missed++;
		if (!first || o->start_ns < first->start_ns)
			first = o;
	}
	if (missed < BATCH_PREEMPT_SKIPPED || !b)
		return;
	if (b->preemptions < BATCH_PREEMPT_KEEP) {
		b->preempt_from[b->preemptions] = first->start_ns;
		b->preempt_to[b->preemptions] = s->end_ns;
	}
	b->preemptions++;
	b->preempted_ns += s->end_ns - first->start_ns;
	/* Recomputed: its prompt and the tokens before this one (this one is the recompute's). */
	b->pend_generated = r->ntokens - 1;
	b->pend_recompute_ns = s->end_ns > s->start_ns ? s->end_ns - s->start_ns : 0;
	b->recomputed_generated += b->pend_generated;
	b->recompute_ns += b->pend_recompute_ns;
	b->pend = true;
	b->pend_missed = missed;
	b->pend_ns = r->token_ns[r->ntokens - 1];
	b->pend_out_ns = s->end_ns - first->start_ns;
}

/* A later frame of r at t_ns: of the write that ended its latest preemption, one more step
 * explained (the preemption taken back when too few are left); of another write, that
 * preemption is final. */
static void preempt_settle(struct request *r, uint64_t t_ns)
{
	struct batch_state *b = request_track(r)->batch;

	if (!b || !b->pend)
		return;
	if (t_ns != b->pend_ns) {
		b->pend = false;
		return;
	}
	if (--b->pend_missed >= BATCH_PREEMPT_SKIPPED)
		return;
	b->pend = false;
	b->preemptions--;
	b->preempted_ns -= b->pend_out_ns;
	b->recomputed_generated -= b->pend_generated;
	b->recompute_ns -= b->pend_recompute_ns;
}

void batch_token(struct gpu_timeline *g, struct request *r)
{
	uint32_t i = r->ntokens - 1;
	const struct batch_state *b;
	struct gpu_step *s;

	if (r->client || !r->ntokens || !g->count)
		return;
	if (!i) {
		/* Joined mid-response: its first token seen is no prefill's. */
		if (r->joined)
			return;
		s = (struct gpu_step *)gpu_prefill_step(g, r->arrival_ns, r->token_ns[0]);
		if (s)
			credit(g, r, s, 0);
		return;
	}
	preempt_settle(r, r->token_ns[i]);
	b = request_track(r)->batch;
	s = latest_between(g, b ? b->pid : 0, r->token_ns[i - 1], r->token_ns[i]);
	if (s) {
		preempt_check(g, r, s, r->token_ns[i - 1]);
		credit(g, r, s, i);
	}
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

static int by_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return (a > b) - (a < b);
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

		for (uint32_t i = ride->token; ride->known && i < ride->token + ride->ntokens &&
					       i < r->ntokens;
		     i++)
			a->e2s[a->ne2s++] =
			    r->token_ns[i] > ride->end_ns ? r->token_ns[i] - ride->end_ns : 0;
	}
	qsort(a->e2s, a->ne2s, sizeof(*a->e2s), by_u64);
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
