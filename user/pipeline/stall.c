// SPDX-License-Identifier: MIT
#include <stdlib.h>
#include <string.h>

#include "lib/hist.h"
#include "pipeline/batch.h"
#include "pipeline/request_track.h"
#include "pipeline/stall.h"

void stall_init(struct stall_table *t, uint64_t threshold_ns)
{
	memset(t, 0, sizeof(*t));
	t->threshold_ns = threshold_ns;
}

void stall_free(struct stall_table *t)
{
	free(t->v);
	t->v = NULL;
	t->n = 0;
}

/* r's record, if the ring still holds it. */
static struct stall_first *own_record(const struct stall_table *t, const struct request *r)
{
	uint32_t slot = request_track_c(r)->first_slot;
	struct stall_first *e;

	if (!slot || !t->v)
		return NULL;
	e = &t->v[slot - 1];
	return e->conn_id == r->conn_id && e->seq == r->seq && e->pid == r->pid ? e : NULL;
}

void stall_token(struct stall_table *t, const struct gpu_timeline *g, struct request *r)
{
	const struct gpu_step *s;
	struct stall_first *e;

	if (r->client || r->joined || !r->ntokens || r->token_ns[r->ntokens - 1] != r->token_ns[0])
		return;
	e = own_record(t, r);
	if (!e) {
		uint32_t at;

		if (request_track(r)->first_slot)
			return; /* its record was overwritten within its first write: let go */
		/* Written whole at once (each prompt unknown): the memory is resident from the
		 * first request on, not grown into as requests come. */
		if (!t->v) {
			if (!(t->v = malloc(STALL_FIRSTS * sizeof(*t->v))))
				return;
			for (uint32_t i = 0; i < STALL_FIRSTS; i++)
				t->v[i] = (struct stall_first){ .who.prompt_tokens = -1 };
		}
		if (t->n == STALL_FIRSTS) {
			at = t->head;
			t->head = (t->head + 1) % STALL_FIRSTS;
		} else {
			at = (t->head + t->n++) % STALL_FIRSTS;
		}
		e = &t->v[at];
		memset(e, 0, sizeof(*e));
		e->pid = r->pid;
		e->conn_id = r->conn_id;
		e->seq = r->seq;
		e->arrival_ns = r->arrival_ns;
		snprintf(e->who.conn, sizeof(e->who.conn), "%s", r->conn);
		e->who.seq = r->seq;
		request_track(r)->first_slot = at + 1;
	}
	e->first_ns = r->first_token_ns;
	e->who.prompt_tokens = r->prompt_tokens;
	e->who.prompt_bytes = r->prompt_bytes;
	s = batch_prefill_step(g, r);
	e->step = s ? s->id : 0;
}

void stall_request_done(struct stall_table *t, const struct request *r)
{
	struct stall_first *e = own_record(t, r);

	if (e && r->prompt_tokens >= 0)
		e->who.prompt_tokens = r->prompt_tokens;
}

/* The lower median of n values (sorted in place); 0 when none. */
static uint64_t median(uint64_t *v, uint32_t n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), u64_cmp);
	return v[(n - 1) / 2];
}

static uint64_t overlap(uint64_t a, uint64_t b, uint64_t lo, uint64_t hi)
{
	uint64_t x = a > lo ? a : lo, y = b < hi ? b : hi;

	return y > x ? y - x : 0;
}

/* Names the other request e in st (counted past STALL_BY). */
static void blame(struct stall *st, const struct stall_first *e)
{
	for (uint32_t k = 0; k < st->nby; k++)
		if (!strcmp(st->by[k].conn, e->who.conn) && st->by[k].seq == e->who.seq)
			return;
	if (st->nby < STALL_BY)
		st->by[st->nby++] = e->who;
	st->nby_all++;
}

static bool is_self(const struct stall_first *e, const struct request *r)
{
	return e->conn_id == r->conn_id && e->seq == r->seq && e->pid == r->pid;
}

/* Without GPU steps for it: other requests of r's server waiting for their first token in the
 * gap (a, b] for half of it or more are its likely cause. */
static void stall_by_overlap(const struct stall_table *t, const struct request *r, uint64_t a,
			     uint64_t b, struct stall *st)
{
	uint64_t most = 0;

	for (uint32_t i = 0; i < t->n; i++) {
		const struct stall_first *e = &t->v[(t->head + i) % STALL_FIRSTS];
		uint64_t o;

		if (e->pid != r->pid || is_self(e, r))
			continue;
		o = overlap(e->arrival_ns, e->first_ns, a, b);
		if (2 * o < b - a)
			continue;
		blame(st, e);
		if (o > most)
			most = o;
	}
	st->likely = most != 0;
	st->cause = most ? STALL_PREFILL : STALL_UNKNOWN;
	st->cause_ns = most ? most : b - a;
}

/* The requests prefilled by the prefill or mixed steps ids[0..n): those whose first token came
 * from one of them, or, for a step no token followed (a chunk), those of its process that
 * arrived before it and got their first token after it. */
static void blame_prefills(const struct stall_table *t, const struct gpu_timeline *g,
			   const struct request *r, const uint64_t *ids, uint32_t n,
			   struct stall *st)
{
	for (uint32_t i = 0; i < t->n; i++) {
		const struct stall_first *e = &t->v[(t->head + i) % STALL_FIRSTS];
		const struct gpu_step *own = e->step ? gpu_step_by_id(g, e->step) : NULL;

		if (is_self(e, r) || !e->step)
			continue;
		for (uint32_t k = 0; k < n; k++) {
			const struct gpu_step *s = gpu_step_by_id(g, ids[k]);

			if (e->step == ids[k] ||
			    (s && !s->batch && own && own->pid == s->pid &&
			     e->arrival_ns <= s->start_ns && e->first_ns >= s->end_ns)) {
				blame(st, e);
				break;
			}
		}
	}
}

/* Token i's gap (a, b], whose token came from step x, against the serving process's steps. */
static void stall_by_steps(const struct stall_table *t, const struct gpu_timeline *g,
			   const struct request *r, const struct gpu_attribution *a,
			   const struct batch_ride *x, const struct batch_ride *prev,
			   uint64_t step_typ, uint64_t e2s_typ, struct stall *st)
{
	uint64_t lo = r->token_ns[st->token - 1], hi = r->token_ns[st->token];
	uint64_t upto = x->end_ns < lo ? lo : x->end_ns > hi ? hi : x->end_ns;
	uint64_t part[STALL_CAUSES] = { 0 }, busy = 0, ids[16], longest = 0;
	uint32_t nids = 0;

	for (uint32_t i = g->count; i-- > 0;) {
		const struct gpu_step *s = &g->ring[(g->head + i) % GPU_HISTORY];
		uint64_t o;

		if (s->end_ns + GPU_DEVICE_WAIT_NS < lo)
			break;
		if (s->pid != x->pid || s->shape == STEP_OTHER ||
		    !(o = overlap(s->start_ns, s->end_ns, lo, upto)))
			continue;
		busy += o;
		if (s->kind == STEP_PREFILL || s->kind == STEP_MIXED) {
			part[STALL_PREFILL] += o;
			if (nids < 16)
				ids[nids++] = s->id;
			if (o > longest) {
				longest = o;
				st->step_pid = s->pid;
				st->step_tid = s->tid;
				st->step_end_ns = s->end_ns;
			}
		}
	}
	for (uint32_t k = 0; k < a->npreempt_times && a->preempt_from; k++)
		part[STALL_PREEMPTED] += overlap(a->preempt_from[k], a->preempt_to[k], lo, hi);
	if (step_typ && x->end_ns - x->start_ns > step_typ && x->start_ns >= lo) {
		part[STALL_BATCH] = x->end_ns - x->start_ns - step_typ;
		st->batch_from = prev ? prev->batch : 0;
		st->batch_to = x->batch;
	}
	if (hi > upto && hi - upto > e2s_typ)
		part[STALL_LATE_WRITE] = hi - upto - e2s_typ;
	part[STALL_HOST] = upto - lo > busy ? upto - lo - busy : 0;
	st->cause = STALL_PREFILL;
	for (int c = 0; c < STALL_UNKNOWN; c++)
		if (part[c] > part[st->cause])
			st->cause = c;
	st->cause_ns = part[st->cause];
	if (st->cause == STALL_PREFILL)
		blame_prefills(t, g, r, ids, nids, st);
	else
		st->step_end_ns = 0;
}

void stall_attribute(const struct stall_table *t, const struct gpu_timeline *g,
		     const struct request *r, const struct request_metrics *m,
		     struct gpu_attribution *a)
{
	struct stall_report *rep;
	uint64_t *v, step_typ = 0, e2s_typ = 0;
	uint32_t n = r->ntokens > 1 ? r->ntokens - 1 : 0, nsteps = 0, ride = 0;

	if (r->client || !n || !(v = malloc((a->nrides ? a->nrides : 1) * sizeof(*v))))
		return;
	if (!(rep = calloc(1, sizeof(*rep)))) {
		free(v);
		return;
	}
	/* Three times its median gap (request_metrics': the same nearest rank), at least
	 * STALL_MIN_NS. */
	rep->threshold_ns = t->threshold_ns;
	if (!rep->threshold_ns) {
		uint64_t p50 = m->itl_p50_ns > 0 ? (uint64_t)m->itl_p50_ns : 0;

		rep->threshold_ns =
		    STALL_ITL_FACTOR * p50 > STALL_MIN_NS ? STALL_ITL_FACTOR * p50 : STALL_MIN_NS;
	}
	/* The request's usual decode step and engine-to-socket time. */
	for (uint32_t k = 0; k < a->nrides; k++)
		if (a->rides[k].known && a->rides[k].token)
			v[nsteps++] = a->rides[k].end_ns - a->rides[k].start_ns;
	step_typ = median(v, nsteps);
	if (a->ne2s)
		e2s_typ = a->e2s[(a->ne2s - 1) / 2];
	free(v);
	for (uint32_t i = 1; i < r->ntokens; i++) {
		uint64_t gap = r->token_ns[i] - r->token_ns[i - 1];
		struct stall st = { .token = i, .from_ns = r->token_ns[i - 1], .gap_ns = gap };

		while (ride + 1 < a->nrides && a->rides[ride + 1].token <= i)
			ride++;
		if (!gap || gap < rep->threshold_ns)
			continue;
		if (a->nrides && a->rides[ride].known && a->rides[ride].token <= i)
			stall_by_steps(t, g, r, a, &a->rides[ride],
				       ride ? &a->rides[ride - 1] : NULL, step_typ, e2s_typ, &st);
		else
			stall_by_overlap(t, r, r->token_ns[i - 1], r->token_ns[i], &st);
		rep->n++;
		rep->likely += st.likely;
		rep->count[st.cause]++;
		rep->ns[st.cause] += gap;
		if (rep->nkept < STALL_KEEP)
			rep->v[rep->nkept++] = st;
	}
	a->stalls = rep;
}
