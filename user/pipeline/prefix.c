// SPDX-License-Identifier: MIT
/* Prefix-cache hits guessed from prefill time per prompt token; the rule is in prefix.h. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/prefix.h"
#include "pipeline/request.h"
#include "pipeline/step.h"

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The window's cold rate: the median above its widest gap of PREFIX_GAP or more, else of all. */
static double prefix_cold_rate(const struct prefix_window *w)
{
	double v[PREFIX_WINDOW], widest = 0;
	uint32_t from = 0;

	memcpy(v, w->rate, w->n * sizeof(v[0]));
	qsort(v, w->n, sizeof(v[0]), by_value);
	for (uint32_t i = 1; i < w->n; i++) {
		double gap = v[i - 1] > 0 ? v[i] / v[i - 1] : 0;

		if (gap >= PREFIX_GAP && gap > widest) {
			widest = gap;
			from = i;
		}
	}
	return v[from + (w->n - from) / 2];
}

static struct prefix_window *prefix_window(struct prefix_fits *f, uint32_t pid, bool bytes)
{
	struct prefix_window *w;

	for (uint32_t i = 0; i < f->nw; i++)
		if (f->w[i].pid == pid && f->w[i].bytes == bytes)
			return &f->w[i];
	if (f->nw < PREFIX_SERVERS)
		w = &f->w[f->nw++];
	else
		w = &f->w[f->next++ % PREFIX_SERVERS];
	memset(w, 0, sizeof(*w));
	w->pid = pid;
	w->bytes = bytes;
	return w;
}

enum cache_guess prefix_guess(struct prefix_fits *f, const struct request *r,
			      const struct request_metrics *m, const struct gpu_attribution *ga)
{
	bool bytes = r->prompt_tokens < 0;
	double size = bytes ? (double)r->prompt_bytes : (double)r->prompt_tokens, rate;
	int64_t prefill = -1;
	struct prefix_window *w;
	enum cache_guess g;

	if (r->cached_tokens >= 0)
		return CACHE_REPORTED;
	if (ga && ga->prefill_ns >= 0)
		prefill = ga->prefill_ns;
	else if (ga && ga->queue_ns >= 0 && m->ttft_ns >= ga->queue_ns)
		prefill = m->ttft_ns - ga->queue_ns;
	else
		prefill = m->ttft_ns;
	if (r->outcome != OUTCOME_OK || r->client || prefill <= 0 ||
	    size < (bytes ? PREFIX_MIN_BYTES : PREFIX_MIN_TOKENS))
		return CACHE_UNKNOWN;
	rate = (double)prefill / size;
	w = prefix_window(f, r->pid, bytes);
	if (w->n < PREFIX_MIN_SAMPLES)
		g = CACHE_UNKNOWN;
	else
		g = rate < prefix_cold_rate(w) / PREFIX_GAP ? CACHE_LIKELY : CACHE_COLD;
	w->rate[w->next++ % PREFIX_WINDOW] = rate;
	if (w->n < PREFIX_WINDOW)
		w->n++;
	return g;
}
