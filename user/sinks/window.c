// SPDX-License-Identifier: MIT
/* Per-second sliding window of finished requests (see window.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "pipeline/step.h"
#include "pipeline/request.h"
#include "sinks/window.h"

struct win_slot {
	bool used;
	uint64_t second; /* kernel time in whole seconds this slot holds */
	struct win_counts c;
	struct whist h[]; /* window.nhist of them */
};

static struct win_slot *slot_at(const struct window *w, uint32_t i)
{
	return (struct win_slot *)(w->slots + (size_t)i * w->slot_size);
}

int window_init(struct window *w, uint32_t nslots, uint32_t kept)
{
	memset(w, 0, sizeof(*w));
	if (!nslots)
		return -EINVAL;
	w->nslots = nslots;
	w->kept = kept;
	for (unsigned int k = 0; k < 32; k++)
		w->index[k] = kept & (1u << k) ? (int8_t)w->nhist++ : -1;
	w->slot_size = sizeof(struct win_slot) + w->nhist * sizeof(struct whist);
	w->slots = calloc(nslots, w->slot_size);
	return w->slots ? 0 : -ENOMEM;
}

void window_free(struct window *w)
{
	free(w->slots);
	w->slots = NULL;
}

void window_clear(struct window *w)
{
	memset(w->slots, 0, (size_t)w->nslots * w->slot_size);
}

/* The slot for second s, cleared when it held an earlier one; NULL when it holds a later one
 * (s has left the window). */
static struct win_slot *slot_for(struct window *w, uint64_t s)
{
	struct win_slot *slot = slot_at(w, (uint32_t)(s % w->nslots));

	if (slot->used && slot->second == s)
		return slot;
	if (slot->used && slot->second > s)
		return NULL;
	memset(slot, 0, w->slot_size);
	slot->used = true;
	slot->second = s;
	return slot;
}

static void sample(const struct window *w, struct win_slot *slot, unsigned int k, int64_t v)
{
	if (v >= 0 && w->index[k] >= 0)
		whist_add(&slot->h[w->index[k]], (uint64_t)v);
}

bool window_add_request(struct window *w, const struct request *r, const struct request_metrics *m,
			const struct gpu_attribution *ga)
{
	struct win_slot *slot;

	if (!r->end_ns)
		return true;
	if (!(slot = slot_for(w, r->end_ns / NS_PER_S)))
		return false;
	slot->c.requests++;
	if (m->tokens > 0)
		slot->c.tokens += m->tokens;
	sample(w, slot, WM_E2E, m->e2e_ns);
	if (m->slo.overall == SLO_MET)
		slot->c.slo_met++;
	if (m->slo.overall == SLO_MISSED) {
		slot->c.slo_missed++;
		for (int k = 0; k < SLO_METRICS; k++)
			slot->c.slo_missed_by[k] += m->slo.result[k] == SLO_MISSED;
	}
	if (r->outcome != OUTCOME_OK)
		return true;
	slot->c.ok++;
	sample(w, slot, WM_TTFT, m->ttft_ns);
	sample(w, slot, WM_TPOT, m->tpot_ns);
	for (uint32_t i = 1; i < r->ntokens; i++)
		sample(w, slot, WM_ITL, (int64_t)(r->token_ns[i] - r->token_ns[i - 1]));
	if (!ga)
		return true;
	sample(w, slot, WM_QUEUE, ga->queue_ns);
	sample(w, slot, WM_PREFILL, ga->prefill_ns);
	sample(w, slot, WM_DECODE, ga->decode_ns);
	if (ga->queue_ns >= 0 && ga->prefill_ns >= 0 && m->ttft_ns > 0) {
		slot->c.attributed++;
		slot->c.ttft_ns += m->ttft_ns;
		slot->c.queue_ns += ga->queue_ns;
		slot->c.prefill_ns += ga->prefill_ns;
	}
	if (ga->gpu_ns >= 0 && ga->host_ns >= 0) {
		slot->c.gpu_ns += ga->gpu_ns;
		slot->c.host_ns += ga->host_ns;
	}
	if (ga->has_steps) {
		slot->c.steps_known++;
		slot->c.preempted += ga->preemptions > 0;
	}
	return true;
}

bool window_add(struct window *w, uint64_t s, unsigned int k, uint64_t v)
{
	struct win_slot *slot;

	if (k >= 32 || w->index[k] < 0 || !(slot = slot_for(w, s)))
		return false;
	whist_add(&slot->h[w->index[k]], v);
	return true;
}

void window_sum(const struct window *w, uint64_t lo_s, uint64_t hi_s, struct win_counts *c,
		uint32_t mask, struct whist *h)
{
	if (c)
		memset(c, 0, sizeof(*c));
	if (h)
		whist_reset(h);
	for (uint32_t i = 0; i < w->nslots; i++) {
		const struct win_slot *s = slot_at(w, i);

		if (!s->used || s->second < lo_s || s->second > hi_s)
			continue;
		if (c) {
			c->requests += s->c.requests;
			c->ok += s->c.ok;
			c->tokens += s->c.tokens;
			c->attributed += s->c.attributed;
			c->ttft_ns += s->c.ttft_ns;
			c->queue_ns += s->c.queue_ns;
			c->prefill_ns += s->c.prefill_ns;
			c->gpu_ns += s->c.gpu_ns;
			c->host_ns += s->c.host_ns;
			c->steps_known += s->c.steps_known;
			c->preempted += s->c.preempted;
			c->slo_met += s->c.slo_met;
			c->slo_missed += s->c.slo_missed;
			for (int k = 0; k < SLO_METRICS; k++)
				c->slo_missed_by[k] += s->c.slo_missed_by[k];
		}
		for (unsigned int k = 0; h && k < 32; k++)
			if (mask & (1u << k) && w->index[k] >= 0)
				whist_merge(h, &s->h[w->index[k]]);
	}
}
