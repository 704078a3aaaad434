// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/gpu.h"

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
	free(g->orphans);
	g->orphans = NULL;
}

enum step_kind gpu_classify(uint32_t launches, uint32_t graph_launches)
{
	if (graph_launches)
		return launches >= GPU_PREFILL_MIN_LAUNCHES ? STEP_MIXED : STEP_DECODE;
	return launches ? STEP_PREFILL : STEP_OTHER;
}

enum step_mode gpu_mode(uint32_t launches, uint32_t graph_launches)
{
	if (graph_launches >= 2 || (graph_launches && launches >= GPU_PREFILL_MIN_LAUNCHES))
		return MODE_PIECEWISE;
	if (graph_launches)
		return MODE_GRAPH;
	return launches ? MODE_EAGER : MODE_NONE;
}

enum step_kind gpu_kind_of_tokens(uint32_t firsts, uint32_t nexts)
{
	if (firsts && nexts)
		return STEP_MIXED;
	if (firsts)
		return STEP_PREFILL;
	return nexts ? STEP_DECODE : STEP_KIND_MAX;
}

static const struct gpu_proc *gpu_proc_find(const struct gpu_timeline *g, uint32_t pid)
{
	for (uint32_t i = 0; i < g->nprocs; i++)
		if (g->procs[i].pid == pid)
			return &g->procs[i];
	return NULL;
}

/* pid's statistics, a new entry the first time; NULL past GPU_MAX_PROCS (counted). */
static struct gpu_proc *gpu_proc_of(struct gpu_timeline *g, uint32_t pid)
{
	struct gpu_proc *p = (struct gpu_proc *)gpu_proc_find(g, pid);

	if (p)
		return p;
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

static void dev_add_run(struct gpu_device *d, const struct ts_dev_run *r);

/* The runs waiting for step s (its process's, inside its host window) go into it; runs waiting
 * longer than GPU_DEVICE_WAIT_NS leave, in no step. */
static void adopt_orphans(struct gpu_timeline *g, struct gpu_step *s)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < g->norphans; i++) {
		__typeof__(g->orphans[0]) o = g->orphans[(g->orphan_head + i) % GPU_ORPHANS];

		if (o.pid == s->pid && s->start_ns <= o.run.start_ns &&
		    o.run.start_ns < s->end_ns) {
			dev_add_run(&s->dev, &o.run);
			continue;
		}
		if (o.run.end_ns + GPU_DEVICE_WAIT_NS < s->end_ns) {
			struct gpu_proc *p = gpu_proc_of(g, o.pid);

			if (p)
				p->devtime.unplaced++;
			continue;
		}
		g->orphans[(g->orphan_head + kept++) % GPU_ORPHANS] = o;
	}
	g->norphans = kept;
}

/* A run no step holds yet: kept for a later step (adopt_orphans). */
static void keep_orphan(struct gpu_timeline *g, struct gpu_proc *p, const struct ts_dev_run *r)
{
	uint32_t at;

	if (!g->orphans && !(g->orphans = calloc(GPU_ORPHANS, sizeof(*g->orphans)))) {
		p->devtime.unplaced++;
		return;
	}
	if (g->norphans == GPU_ORPHANS) {
		struct gpu_proc *q = gpu_proc_of(g, g->orphans[g->orphan_head].pid);

		if (q)
			q->devtime.unplaced++;
		g->orphan_head = (g->orphan_head + 1) % GPU_ORPHANS;
		g->norphans--;
	}
	at = (g->orphan_head + g->norphans++) % GPU_ORPHANS;
	g->orphans[at].pid = p->pid;
	g->orphans[at].run = *r;
}

/* A step as it is shown: its kind from its tokens, when any came (docs/gpu.md "Step kinds"),
 * and its process's statistics (p NULL: past GPU_MAX_PROCS). */
static void step_shown(struct gpu_proc *p, struct gpu_step *s)
{
	enum step_kind k = gpu_kind_of_tokens(s->firsts, s->nexts);

	s->by_tokens = k != STEP_KIND_MAX;
	s->kind = s->by_tokens ? k : s->shape;
	if (!p)
		return;
	if (!p->dur[s->kind])
		p->dur[s->kind] = calloc(1, sizeof(struct hist));
	if (p->dur[s->kind])
		hist_add(p->dur[s->kind], s->end_ns - s->start_ns);
	p->steps[s->kind]++;
	p->launches += s->launches;
	p->graph_launches += s->graph_launches;
	if (s->kind == STEP_DECODE)
		gpu_coverage_add(&p->coverage[s->mode], s->batch, s->end_ns - s->start_ns);
	if (s->end_ns > s->wait_start_ns)
		p->wait_ns += s->end_ns - s->wait_start_ns;
	if (!p->first_ns || s->start_ns < p->first_ns)
		p->first_ns = s->start_ns;
	if (s->end_ns > p->last_ns)
		p->last_ns = s->end_ns;
}

bool gpu_step_times_ok(const struct ts_gpu_step_event *e)
{
	uint64_t start = e->start_ns ? e->start_ns : e->wait_start_ns;

	return e->end_ns && e->wait_start_ns && start <= e->end_ns && e->wait_start_ns <= e->end_ns;
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
	s->kind = s->shape = gpu_classify(e->launches, e->graph_launches);
	s->mode = gpu_mode(e->launches, e->graph_launches);
	s->by_tokens = false;
	s->firsts = s->nexts = 0;
	memset(&s->dev, 0, sizeof(s->dev));
	s->sampled_out = s->settled = false;
	s->id = ++g->steps;
	s->batch = 0;
	s->next_end_ns = 0;
	adopt_orphans(g, s);
	p = gpu_proc_of(g, s->pid);
	/* The previous step of the process that launched work: its batch window ends here. */
	if (p && s->shape != STEP_OTHER) {
		struct gpu_step *prev = gpu_step_by_id(g, p->work_id);

		if (prev && prev != s)
			prev->next_end_ns = s->end_ns;
		p->work_id = s->id;
	}
	/* Held for its device times and its batch: only a kept step can be given back. */
	s->dev_wait = p && p->devtime.seen;
	s->pending = s != &lone && g->npending < GPU_PENDING_MAX;
	if (s->pending)
		g->pending[(g->pending_head + g->npending++) % GPU_PENDING_MAX] = s->id;
	if (!s->pending)
		step_shown(p, s);
	if (out)
		*out = *s;
}

/* Adds [a, b) to the step's disjoint spans; past GPU_STEP_SPANS, the two closest merge and the
 * gap between them counts as busy (approx). */
static void dev_add_span(struct gpu_device *d, uint64_t a, uint64_t b)
{
	struct gpu_span *v = d->spans;
	uint32_t n = d->nspans, i = 0, j;

	while (i < n && v[i].b < a)
		i++;
	/* v[i..j) touch or overlap [a, b): they become one span. */
	for (j = i; j < n && v[j].a <= b; j++) {
		if (v[j].a < a)
			a = v[j].a;
		if (v[j].b > b)
			b = v[j].b;
	}
	if (j > i) {
		v[i] = (struct gpu_span){ a, b };
		memmove(&v[i + 1], &v[j], (n - j) * sizeof(*v));
		n -= j - i - 1;
	} else {
		if (n == GPU_STEP_SPANS) {
			/* Room for one: close the smallest gap, the new span included. */
			struct gpu_span all[GPU_STEP_SPANS + 1];
			uint32_t k, best = 0;

			memcpy(all, v, i * sizeof(*v));
			all[i] = (struct gpu_span){ a, b };
			memcpy(&all[i + 1], &v[i], (n - i) * sizeof(*v));
			for (k = 1; k + 1 <= n; k++)
				if (all[k + 1].a - all[k].b < all[best + 1].a - all[best].b)
					best = k;
			all[best].b = all[best + 1].b;
			memmove(&all[best + 1], &all[best + 2], (n - best - 1) * sizeof(*v));
			memcpy(v, all, n * sizeof(*v));
			d->approx = true;
		} else {
			memmove(&v[i + 1], &v[i], (n - i) * sizeof(*v));
			v[i] = (struct gpu_span){ a, b };
			n++;
		}
	}
	d->nspans = (uint8_t)n;
}

/* A run into its step's device figures. busy: with every run disjoint from the others the sum
 * of their own busy times (exact: the gaps inside a run are left out); where runs overlap
 * (streams side by side) the union of their spans. */
static void dev_add_run(struct gpu_device *d, const struct ts_dev_run *r)
{
	uint64_t span = 0;

	if (!d->device || r->start_ns < d->start_ns)
		d->start_ns = r->start_ns;
	if (r->end_ns > d->end_ns)
		d->end_ns = r->end_ns;
	if ((r->flags & TS_RUN_F_LAUNCH) && (!d->launch_ns || r->first_launch_ns < d->launch_ns))
		d->launch_ns = r->first_launch_ns;
	d->device = true;
	d->runs++;
	d->kernels += r->kernels;
	d->graphs += r->graphs;
	d->memcpys += r->memcpys;
	d->delay_ns += r->delay_ns;
	d->launched += r->launched;
	d->run_busy_ns += r->busy_ns;
	dev_add_span(d, r->start_ns, r->end_ns);
	for (uint32_t i = 0; i < d->nspans; i++)
		span += d->spans[i].b - d->spans[i].a;
	/* Disjoint runs: their spans add up to at least their busy times. */
	d->busy_ns = d->run_busy_ns <= span ? d->run_busy_ns : span;
}

/* The held or shown step of pid whose host window holds device time t, newest first. */
static struct gpu_step *step_at(struct gpu_timeline *g, uint32_t pid, uint64_t t)
{
	for (uint32_t i = g->count; i-- > 0;) {
		struct gpu_step *s = &g->ring[(g->head + i) % GPU_HISTORY];

		if (s->pid != pid)
			continue;
		if (s->start_ns <= t && t < s->end_ns)
			return s;
		/* Steps are kept in the order they ended: no older one can hold t. */
		if (s->end_ns + GPU_DEVICE_WAIT_NS < t)
			break;
	}
	return NULL;
}

/* The library's sampling windows as its counters say (include/devtime_abi.h): a new start opens
 * one; the latest end closes the open one. The library fires a heartbeat after each change,
 * so every window is seen; when one was not (records lost: the count of windows jumped), the
 * open one's end is not known and it covers nothing. */
static void devtime_windows(struct gpu_devtime *c, const struct ts_devtime_stats *st)
{
	struct gpu_span *last =
	    c->nwindows ? &c->windows[(c->whead + c->nwindows - 1) % GPU_CUPTI_WINDOWS] : NULL;

	if (!st->sample_on_ns)
		return;
	if (!last || st->sample_on_ns > last->a) {
		if (last && !last->b)
			last->b = st->windows == c->windows_seen + 1 &&
					  st->sample_off_ns >= last->a &&
					  st->sample_off_ns <= st->sample_on_ns
				      ? st->sample_off_ns
				      : last->a;
		c->windows_seen = st->windows;
		if (c->nwindows == GPU_CUPTI_WINDOWS)
			c->whead = (c->whead + 1) % GPU_CUPTI_WINDOWS;
		else
			c->nwindows++;
		last = &c->windows[(c->whead + c->nwindows - 1) % GPU_CUPTI_WINDOWS];
		*last = (struct gpu_span){ st->sample_on_ns, 0 };
		if (!c->first_on_ns)
			c->first_on_ns = st->sample_on_ns;
	}
	if (st->mode == TS_DEVTIME_MODE_SAMPLED && !last->b && st->sample_off_ns >= last->a)
		last->b = st->sample_off_ns;
}

/* Whether the library collected every operation of [a, b]: a window covers it. */
static bool devtime_covers(const struct gpu_devtime *c, uint64_t a, uint64_t b)
{
	for (uint32_t i = 0; i < c->nwindows; i++) {
		const struct gpu_span *w = &c->windows[(c->whead + i) % GPU_CUPTI_WINDOWS];

		if (w->a <= a && (!w->b || b <= w->b))
			return true;
	}
	return false;
}

/* Once the windows are known past its end: a step that launched eager kernels while
 * collection was on at some time (it ended after the first window began) but not within one
 * window from its start to its end loses the device times it has: a part of them. */
static void devtime_settle(struct gpu_devtime *c, struct gpu_step *s)
{
	if (s->settled || !c->seen || c->flush_ns < s->end_ns)
		return;
	s->settled = true;
	if (s->launches && c->first_on_ns && s->end_ns > c->first_on_ns &&
	    !devtime_covers(c, s->start_ns, s->end_ns)) {
		memset(&s->dev, 0, sizeof(s->dev));
		s->sampled_out = true;
		c->steps_sampled_out++;
	}
}

/* Settles the held steps of p whose windows are now known. */
static void devtime_settle_held(struct gpu_timeline *g, struct gpu_proc *p)
{
	for (uint32_t i = 0; i < g->npending; i++) {
		struct gpu_step *s =
		    gpu_step_by_id(g, g->pending[(g->pending_head + i) % GPU_PENDING_MAX]);

		if (s && s->pid == p->pid)
			devtime_settle(&p->devtime, s);
	}
}

void gpu_add_runs(struct gpu_timeline *g, const struct ts_dev_runs_event *e)
{
	struct gpu_proc *p;

	if (!gpu_devtime_abi_known(e->abi)) {
		g->devtime_abi_bad++;
		return;
	}
	p = gpu_proc_of(g, e->hdr.pid);
	if (!p)
		return;
	if (!p->devtime.seen)
		g->devtime_procs++;
	p->devtime.seen = true;
	p->devtime.stats = e->stats;
	devtime_windows(&p->devtime, &e->stats);
	if (e->stats.flush_ns > p->devtime.flush_ns)
		p->devtime.flush_ns = e->stats.flush_ns;
	/* A heartbeat (no runs): every buffer CUPTI handed over by its flush has been sent, so
	 * the runs so far can stand for what came before them (gpu_devtime_complete). None can
	 * have started after the flush: a later start is a damaged record, not let count. */
	if (!e->n) {
		uint64_t done = p->devtime.run_start_max < e->stats.flush_ns
				    ? p->devtime.run_start_max
				    : e->stats.flush_ns;

		if (done > p->devtime.done_ns)
			p->devtime.done_ns = done;
		devtime_settle_held(g, p);
	}
	for (uint32_t i = 0; i < e->n && i < TS_RUNS_PER_PROBE; i++) {
		const struct ts_dev_run *r = &e->runs[i];
		struct gpu_step *s;

		if (r->end_ns < r->start_ns)
			continue; /* the library never sends one; a damaged record might */
		p->devtime.runs++;
		p->devtime.busy_ns += r->busy_ns;
		if (r->start_ns > p->devtime.run_start_max)
			p->devtime.run_start_max = r->start_ns;
		s = g->ring ? step_at(g, p->pid, r->start_ns) : NULL;
		if (!s) {
			keep_orphan(g, p, r);
			continue;
		}
		if (!s->pending)
			p->devtime.late++;
		if (!s->sampled_out)
			dev_add_run(&s->dev, r);
	}
}

bool gpu_step_closed(const struct gpu_step *s, uint64_t now_ns)
{
	/* A step that launched nothing is never credited: there is nothing to wait for. */
	if (s->shape == STEP_OTHER || now_ns >= s->end_ns + GPU_BATCH_WAIT_NS)
		return true;
	return s->next_end_ns && now_ns >= s->next_end_ns + GPU_BATCH_SLACK_NS;
}

struct gpu_step *gpu_step_by_id(const struct gpu_timeline *g, uint64_t id)
{
	struct gpu_step *s;

	/* Every step goes into the next slot (the history is allocated with the first). */
	if (!g->ring || !id || id > g->steps)
		return NULL;
	s = &g->ring[(id - 1) % GPU_HISTORY];
	return s->id == id ? s : NULL;
}

/*
 * Whether a process's device times are in up to t, at kernel time now. A heartbeat after t is
 * not enough: cuptiActivityFlushAll hands over only buffers whose every record is complete, and
 * while the GPU works without a pause the current buffer always holds an operation still
 * running, so records that ended long before the heartbeat stay in it (on an H200, decode steps
 * came without device times in runs of a hundred). CUPTI writes a context's records in the
 * order their operations were launched, and a step's operations end before the step does (it
 * ends at a host wait): so once a heartbeat came after a run that started at t or later, every
 * run before t has too. Not before the heartbeat: the library sends the runs of one buffer in
 * the order their streams' runs closed, 32 at a time. A process that went idle sends no later
 * run: then a heartbeat after t, and GPU_DEVICE_QUIET_NS since t, do. A process with several
 * contexts (several GPUs) has a buffer per context, which this order does not cover: there a
 * step can be shown before its runs come, and they are counted late.
 */
static bool gpu_devtime_complete(const struct gpu_devtime *c, uint64_t t, uint64_t now)
{
	return c->done_ns >= t || (c->flush_ns >= t && now >= t + GPU_DEVICE_QUIET_NS);
}

bool gpu_next_ready(struct gpu_timeline *g, uint64_t record_ns, uint64_t now_ns, bool all,
		    struct gpu_step *out)
{
	struct gpu_step *s;
	struct gpu_proc *p;
	bool complete, closed;

	/* A held step the ring overwrote (GPU_HISTORY newer steps came while it was held) is no
	 * longer there to give back. */
	while (g->npending && !gpu_step_by_id(g, g->pending[g->pending_head])) {
		g->pending_head = (g->pending_head + 1) % GPU_PENDING_MAX;
		g->npending--;
	}
	if (!g->npending)
		return false;
	s = gpu_step_by_id(g, g->pending[g->pending_head]);
	p = (struct gpu_proc *)gpu_proc_find(g, s->pid);
	now_ns = now_ns > record_ns ? now_ns : record_ns;
	complete = !s->dev_wait || (p && gpu_devtime_complete(&p->devtime, s->end_ns, now_ns));
	closed = gpu_step_closed(s, now_ns);
	if (!all && g->npending < GPU_PENDING_MAX &&
	    ((!complete && record_ns < s->end_ns + GPU_DEVICE_WAIT_NS) || !closed))
		return false;
	if (!complete)
		g->released_late++;
	if (!closed && !all)
		g->batch_early++;
	g->pending_head = (g->pending_head + 1) % GPU_PENDING_MAX;
	g->npending--;
	s->pending = false;
	if (p) {
		devtime_settle(&p->devtime, s);
		/* Counted as shown: its runs may come after it settled. */
		if (s->dev.device)
			p->devtime.steps_device++;
	}
	step_shown(p, s);
	*out = *s;
	return true;
}

bool gpu_device_complete(const struct gpu_timeline *g, uint64_t t_ns, uint64_t now_ns)
{
	if (!g->devtime_procs || now_ns >= t_ns + GPU_DEVICE_WAIT_NS)
		return true;
	for (uint32_t i = 0; i < g->nprocs; i++)
		if (g->procs[i].devtime.seen &&
		    !gpu_devtime_complete(&g->procs[i].devtime, t_ns, now_ns))
			return false;
	return true;
}

struct span {
	uint64_t a, b;
};

static int span_cmp(const void *x, const void *y)
{
	const struct span *p = x, *q = y;

	return p->a < q->a ? -1 : p->a > q->a;
}

/* GPU time inside each gap between consecutive tokens tok (between lo and hi when ntok < 2):
 * the union over every process of its steps' device intervals where the step has device
 * times, else of the steps' host windows (*all_device false). */
static uint64_t gpu_time_in_gaps(const struct gpu_timeline *g, const uint64_t *tok, uint32_t ntok,
				 uint64_t lo, uint64_t hi, bool *all_device)
{
	uint64_t sum = 0;
	struct span *v = malloc(g->count * GPU_STEP_SPANS * sizeof(*v));
	uint32_t n = 0, m = 0, t = 0, ngaps = ntok >= 2 ? ntok - 1 : 1;

	*all_device = true;
	if (!v)
		return 0;
	for (uint32_t i = 0; i < g->count; i++) {
		const struct gpu_step *s = &g->ring[(g->head + i) % GPU_HISTORY];

		if (s->end_ns <= lo || s->start_ns >= hi)
			continue;
		if (!s->dev.device) {
			*all_device = false;
			v[n++] = (struct span){ s->start_ns, s->end_ns };
			continue;
		}
		for (uint32_t k = 0; k < s->dev.nspans; k++)
			v[n++] = (struct span){ s->dev.spans[k].a, s->dev.spans[k].b };
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
	for (uint32_t i = 0; i < ngaps; i++) {
		uint64_t ga = ntok >= 2 ? tok[i] : lo;
		uint64_t gb = ntok >= 2 ? tok[i + 1] : hi;

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

uint32_t gpu_steps_within(const struct gpu_timeline *g, uint64_t from_ns, uint64_t to_ns)
{
	uint32_t n = 0;

	for (uint32_t i = g->count; i-- > 0;) {
		const struct gpu_step *s = &g->ring[(g->head + i) % GPU_HISTORY];

		/* In the order they ended: none older ended after from_ns. */
		if (s->end_ns < from_ns)
			break;
		n += s->start_ns >= from_ns && s->end_ns <= to_ns;
	}
	return n;
}

void gpu_attribution_free(struct gpu_attribution *a)
{
	free(a->rides);
	a->rides = NULL;
	a->nrides = 0;
	free(a->e2s);
	a->e2s = NULL;
	a->ne2s = 0;
	free(a->stalls);
	a->stalls = NULL;
}

void gpu_attribute(const struct gpu_timeline *g, const struct request *r,
		   const struct gpu_step *best, struct gpu_attribution *a)
{
	uint64_t first_kept;

	bool all_device;

	a->queue_ns = a->prefill_ns = a->decode_ns = a->gpu_ns = a->host_ns = -1;
	a->prefill_gpu_ns = a->decode_gpu_ns = -1;
	a->source = NULL;
	/* batch_attribute's part: not known until it runs */
	a->has_steps = false;
	a->steps = a->batch_steps = a->preemptions = 0;
	a->steps_after_gone = 0;
	a->recomputed_generated = a->recompute_ns = 0;
	a->batch_mean = 0;
	a->preempted_ns = -1;
	a->preempt_from = a->preempt_to = NULL;
	a->npreempt_times = 0;
	a->rides = NULL;
	a->nrides = 0;
	a->e2s = NULL;
	a->ne2s = 0;
	a->stalls = NULL;
	if (r->client) {
		a->how = "none: a request the traced process made as a client";
		return;
	}
	if (!g->count) {
		a->how = "none: no GPU steps seen";
		return;
	}
	if (!r->ntokens) {
		a->how = "none: no token was streamed";
		return;
	}
	/* Joined mid-response, its first token and its prefill went by before tracing. */
	if (r->end_ns >= r->first_token_ns && !r->joined)
		a->decode_ns = r->end_ns - r->first_token_ns;
	first_kept = g->ring[g->head].start_ns;
	if (r->joined)
		best = NULL;
	if (r->ntokens >= 2) {
		uint64_t span = r->token_ns[r->ntokens - 1] - r->first_token_ns;
		uint64_t gpu = gpu_time_in_gaps(g, r->token_ns, r->ntokens, r->token_ns[0],
						r->token_ns[r->ntokens - 1], &all_device);

		a->gpu_ns = gpu;
		a->host_ns = span - gpu;
		a->source = all_device ? "cupti" : "host-calls";
	}
	if (g->devtime_procs && r->end_ns > r->first_token_ns) {
		/* The device time of the steps of the decode (every process's, as above). */
		uint64_t gpu =
		    gpu_time_in_gaps(g, NULL, 0, r->first_token_ns, r->end_ns, &all_device);

		if (all_device)
			a->decode_gpu_ns = gpu;
	}
	if (best) {
		a->queue_ns = best->start_ns - r->arrival_ns;
		a->prefill_ns = best->end_ns - best->start_ns;
		if (best->dev.device)
			a->prefill_gpu_ns = best->dev.busy_ns;
		a->how = a->source && !strcmp(a->source, "cupti")
			     ? "by time: prefill is the step its first token came from; gpu/host "
			       "split the token gaps by the device intervals (CUPTI) of the steps "
			       "that overlap them"
			     : "by time: prefill is the step its first token came from; gpu/host "
			       "split the token gaps by the steps that overlap them";
	} else if (r->joined) {
		a->how = "partial: joined mid-response, its arrival and first token were not seen";
	} else if (g->count == GPU_HISTORY && first_kept > r->arrival_ns) {
		a->how = "partial: the steps around this request's arrival were no longer kept";
	} else {
		a->how = "partial: no GPU step ran between arrival and first token";
	}
}

void gpu_report(const struct gpu_timeline *g, struct gpu_proc_report *procs, struct gpu_report *out)
{
	for (uint32_t i = 0; i < g->nprocs && i < GPU_MAX_PROCS; i++) {
		const struct gpu_proc *p = &g->procs[i];
		struct gpu_proc_report *r = &procs[i];

		r->pid = p->pid;
		for (int k = 0; k < STEP_KIND_MAX; k++) {
			r->steps[k] = p->steps[k];
			r->dur[k] = p->dur[k];
		}
		r->launches = p->launches;
		r->graph_launches = p->graph_launches;
		memcpy(r->coverage, p->coverage, sizeof(r->coverage));
		r->wait_ns = p->wait_ns;
		r->first_ns = p->first_ns;
		r->last_ns = p->last_ns;
		r->device_times = p->devtime.seen;
		r->devtime_stats = p->devtime.stats;
		r->runs = p->devtime.runs;
		r->busy_ns = p->devtime.busy_ns;
		r->late = p->devtime.late;
		r->unplaced = p->devtime.unplaced;
		r->steps_device = p->devtime.steps_device;
		r->steps_sampled_out = p->devtime.steps_sampled_out;
	}
	*out = (struct gpu_report){ .nprocs = g->nprocs < GPU_MAX_PROCS ? g->nprocs : GPU_MAX_PROCS,
				    .procs = procs,
				    .procs_dropped = g->procs_dropped,
				    .batch_early = g->batch_early,
				    .batch_late = g->batch_late,
				    .held_max = GPU_PENDING_MAX };
}
