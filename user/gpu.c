// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

static const char *const kind_names[STEP_KIND_MAX] = {
	[STEP_PREFILL] = "prefill",
	[STEP_DECODE] = "decode",
	[STEP_MIXED] = "mixed",
	[STEP_OTHER] = "other",
};

const char *gpu_kind_name(enum step_kind k)
{
	return k < STEP_KIND_MAX ? kind_names[k] : "?";
}

int gpu_init(struct gpu_timeline *g)
{
	memset(g, 0, sizeof(*g));
	return 0;
}

void gpu_free(struct gpu_timeline *g)
{
	for (uint32_t i = 0; i < g->nprocs; i++)
		for (int k = 0; k < STEP_KIND_MAX; k++)
			free(g->procs[i].dur[k]);
	free(g->ring);
	g->ring = NULL;
}

enum step_kind gpu_classify(uint32_t launches, uint32_t graph_launches)
{
	if (graph_launches)
		return launches >= GPU_PREFILL_MIN_LAUNCHES ? STEP_MIXED : STEP_DECODE;
	return launches ? STEP_PREFILL : STEP_OTHER;
}

bool gpu_seen(const struct gpu_timeline *g)
{
	return g->steps > 0;
}

static struct gpu_proc *gpu_proc_of(struct gpu_timeline *g, uint32_t pid)
{
	struct gpu_proc *p;

	for (uint32_t i = 0; i < g->nprocs; i++)
		if (g->procs[i].pid == pid)
			return &g->procs[i];
	if (g->nprocs == GPU_MAX_PROCS) {
		g->procs_dropped++;
		return NULL;
	}
	p = &g->procs[g->nprocs++];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	return p;
}

/* Where the next step goes in the history, the oldest making room; NULL without memory for
 * the history (allocated with the first step: most runs trace no GPU process). */
static struct gpu_step *gpu_slot(struct gpu_timeline *g)
{
	struct gpu_step *s;

	if (!g->ring && !(g->ring = calloc(GPU_HISTORY, sizeof(*g->ring))))
		return NULL;
	if (g->count == GPU_HISTORY) {
		s = &g->ring[g->head];
		g->head = (g->head + 1) % GPU_HISTORY;
	} else {
		s = &g->ring[(g->head + g->count) % GPU_HISTORY];
		g->count++;
	}
	return s;
}

void gpu_add(struct gpu_timeline *g, const struct ts_gpu_step_event *e, struct gpu_step *out)
{
	struct gpu_step lone, *s = gpu_slot(g);
	struct gpu_proc *p;

	/* Not kept for attribution, the step is still counted and shown. */
	if (!s)
		s = &lone;
	s->pid = e->hdr.pid;
	s->tid = e->hdr.tid;
	/* A step whose only call was the wait itself starts when the wait does. */
	s->start_ns = e->start_ns ? e->start_ns : e->wait_start_ns;
	s->wait_start_ns = e->wait_start_ns;
	s->end_ns = e->end_ns;
	s->launches = e->launches;
	s->graph_launches = e->graph_launches;
	s->memcpys = e->memcpys;
	s->memcpys_dtoh = e->memcpys_dtoh;
	s->waits = e->waits;
	s->kind = gpu_classify(e->launches, e->graph_launches);
	g->steps++;
	if (out)
		*out = *s;

	p = gpu_proc_of(g, s->pid);
	if (!p)
		return;
	if (!p->dur[s->kind])
		p->dur[s->kind] = calloc(1, sizeof(struct hist));
	if (p->dur[s->kind])
		hist_add(p->dur[s->kind], s->end_ns - s->start_ns);
	p->steps[s->kind]++;
	p->launches += s->launches;
	p->graph_launches += s->graph_launches;
	if (s->end_ns > s->wait_start_ns)
		p->wait_ns += s->end_ns - s->wait_start_ns;
	if (!p->first_ns || s->start_ns < p->first_ns)
		p->first_ns = s->start_ns;
	if (s->end_ns > p->last_ns)
		p->last_ns = s->end_ns;
}

struct span {
	uint64_t a, b;
};

static int span_cmp(const void *x, const void *y)
{
	const struct span *p = x, *q = y;

	return p->a < q->a ? -1 : p->a > q->a;
}

/* GPU time (the union of every process's steps) inside each gap between consecutive tokens. */
static uint64_t gpu_time_in_gaps(const struct gpu_timeline *g, const struct request *r)
{
	uint64_t lo = r->token_ns[0], hi = r->token_ns[r->ntokens - 1], sum = 0;
	struct span *v = malloc(g->count * sizeof(*v));
	uint32_t n = 0, m = 0, t = 0;

	if (!v)
		return 0;
	for (uint32_t i = 0; i < g->count; i++) {
		const struct gpu_step *s = &g->ring[(g->head + i) % GPU_HISTORY];

		if (s->end_ns > lo && s->start_ns < hi)
			v[n++] = (struct span){ s->start_ns, s->end_ns };
	}
	qsort(v, n, sizeof(*v), span_cmp);
	/* Merge overlapping steps (tensor-parallel workers run the same step at once). */
	for (uint32_t i = 0; i < n; i++) {
		if (m && v[i].a <= v[m - 1].b) {
			if (v[i].b > v[m - 1].b)
				v[m - 1].b = v[i].b;
		} else {
			v[m++] = v[i];
		}
	}
	/* Sweep the merged spans against the gaps; both are sorted. */
	for (uint32_t i = 0; i + 1 < r->ntokens; i++) {
		uint64_t ga = r->token_ns[i], gb = r->token_ns[i + 1];

		while (t < m && v[t].b <= ga)
			t++;
		for (uint32_t k = t; k < m && v[k].a < gb; k++) {
			uint64_t a = v[k].a > ga ? v[k].a : ga, b = v[k].b < gb ? v[k].b : gb;

			if (b > a)
				sum += b - a;
		}
	}
	free(v);
	return sum;
}

void gpu_attribute(const struct gpu_timeline *g, const struct request *r, struct gpu_attribution *a)
{
	const struct gpu_step *best = NULL;
	uint64_t first_kept;

	a->queue_ns = a->prefill_ns = a->decode_ns = a->gpu_ns = a->host_ns = -1;
	if (!g->count) {
		a->how = "none: no GPU steps seen";
		return;
	}
	if (!r->ntokens) {
		a->how = "none: no token was streamed";
		return;
	}
	if (r->end_ns >= r->first_token_ns)
		a->decode_ns = r->end_ns - r->first_token_ns;
	first_kept = g->ring[g->head].start_ns;
	for (uint32_t i = 0; i < g->count; i++) {
		const struct gpu_step *s = &g->ring[(g->head + i) % GPU_HISTORY];

		if (s->kind != STEP_PREFILL && s->kind != STEP_MIXED)
			continue;
		if (s->start_ns >= r->arrival_ns && s->end_ns <= r->first_token_ns &&
		    (!best || s->end_ns > best->end_ns))
			best = s;
	}
	if (r->ntokens >= 2) {
		uint64_t span = r->token_ns[r->ntokens - 1] - r->first_token_ns;
		uint64_t gpu = gpu_time_in_gaps(g, r);

		a->gpu_ns = gpu;
		a->host_ns = span - gpu;
	}
	if (best) {
		a->queue_ns = best->start_ns - r->arrival_ns;
		a->prefill_ns = best->end_ns - best->start_ns;
		a->how =
		    "by time: prefill is the last prefill step between arrival and first token; "
		    "gpu/host split the token gaps by the steps that overlap them";
	} else if (g->count == GPU_HISTORY && first_kept > r->arrival_ns) {
		a->how = "partial: the steps around this request's arrival were no longer kept";
	} else {
		a->how = "partial: no prefill step ran between arrival and first token";
	}
}

void gpu_print_stats(const struct gpu_timeline *g, FILE *f)
{
	for (uint32_t i = 0; i < g->nprocs; i++) {
		const struct gpu_proc *p = &g->procs[i];
		uint64_t steps = 0;
		double wall = p->last_ns > p->first_ns ? (p->last_ns - p->first_ns) / 1e9 : 0;

		for (int k = 0; k < STEP_KIND_MAX; k++)
			steps += p->steps[k];
		fprintf(
		    f,
		    "  GPU pid %u: %llu steps (prefill %llu, decode %llu, mixed %llu, other %llu), "
		    "%.1f steps/s, %.1f launches and %.2f graph launches per step, host waiting "
		    "%.1f%% of %.3f s\n",
		    p->pid, (unsigned long long)steps, (unsigned long long)p->steps[STEP_PREFILL],
		    (unsigned long long)p->steps[STEP_DECODE],
		    (unsigned long long)p->steps[STEP_MIXED],
		    (unsigned long long)p->steps[STEP_OTHER], wall > 0 ? steps / wall : 0.0,
		    steps ? (double)p->launches / steps : 0.0,
		    steps ? (double)p->graph_launches / steps : 0.0,
		    wall > 0 ? 100.0 * p->wait_ns / 1e9 / wall : 0.0, wall);
		for (int k = 0; k < STEP_KIND_MAX; k++) {
			const struct hist *h = p->dur[k];

			if (!h || !h->count)
				continue;
			fprintf(f, "    %-7s step p50 %8.2f  p99 %8.2f  max %8.2f ms  (n=%llu)\n",
				gpu_kind_name(k), hist_quantile(h, 0.5) / 1e6,
				hist_quantile(h, 0.99) / 1e6, h->max / 1e6,
				(unsigned long long)h->count);
		}
	}
	if (g->procs_dropped)
		fprintf(f, "  GPU: steps of %llu more processes are not in these statistics\n",
			(unsigned long long)g->procs_dropped);
}
