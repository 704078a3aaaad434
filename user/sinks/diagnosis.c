// SPDX-License-Identifier: MIT
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sinks/diagnosis.h"
#include "pipeline/step.h"
#include "lib/clock.h"
#include "lib/grow.h"
#include "lib/hist.h"
#include "pipeline/request.h"

void diagnosis_init(struct diagnosis *d)
{
	memset(d, 0, sizeof(*d));
}

void diagnosis_free(struct diagnosis *d)
{
	free(d->reqs);
	free(d->gaps);
	free(d->gap_batch);
	free(d->stalls);
	memset(d, 0, sizeof(*d));
}

void diagnosis_set_wall_clock(struct diagnosis *d, int64_t real_offset_ns)
{
	d->have_clock = true;
	d->real_offset_ns = real_offset_ns;
}

/* A request's verdict; for an ok one that missed, its time's shares by phase. */
static void diag_slo_add(struct diag_slo *s, const struct request *r,
			 const struct request_metrics *m, const struct gpu_attribution *ga)
{
	double e2e = (double)m->e2e_ns;

	if (m->slo.overall != SLO_MET && m->slo.overall != SLO_MISSED)
		return;
	s->judged++;
	if (m->slo.overall != SLO_MISSED)
		return;
	s->missed++;
	for (int k = 0; k < SLO_METRICS; k++)
		s->by[k] += m->slo.result[k] == SLO_MISSED;
	if (r->outcome != OUTCOME_OK) {
		s->failed++;
		return;
	}
	if (m->e2e_ns <= 0 || m->ttft_ns < 0)
		return;
	if (ga && ga->queue_ns >= 0 && ga->prefill_ns >= 0) {
		double rest = (double)(m->ttft_ns - ga->queue_ns - ga->prefill_ns);
		double out = ga->has_steps && ga->preempted_ns > 0 ? (double)ga->preempted_ns : 0;
		double decode = (double)(m->e2e_ns - m->ttft_ns) - out;

		s->split++;
		s->share[DP_QUEUE] += ga->queue_ns / e2e;
		s->share[DP_PREFILL] += ga->prefill_ns / e2e;
		s->share[DP_TTFT_REST] += (rest > 0 ? rest : 0) / e2e;
		s->share[DP_DECODE] += (decode > 0 ? decode : 0) / e2e;
		s->share[DP_PREEMPTED] += out / e2e;
	} else {
		s->unsplit++;
		s->share[DP_TTFT] += m->ttft_ns / e2e;
		s->share[DP_DECODE] += (m->e2e_ns - m->ttft_ns) / e2e;
	}
}

/* A request's listed stalls, each with the largest prompt of those it was blamed on. */
static void diag_stalls_add(struct diagnosis *d, const struct stall_report *st)
{
	struct diag_stall *v;

	if (!st)
		return;
	d->stalls_all += st->n;
	if (!st->nkept ||
	    !(v = grow(d->stalls, &d->stalls_cap, d->nstalls + st->nkept, sizeof(*v), 64)))
		return;
	d->stalls = v;
	for (uint32_t i = 0; i < st->nkept; i++) {
		const struct stall *s = &st->v[i];
		struct diag_stall *o = &d->stalls[d->nstalls++];

		*o = (struct diag_stall){ s->gap_ns, s->cause, s->likely, -1, -1 };
		for (uint32_t k = 0; k < s->nby; k++) {
			if (s->by[k].prompt_tokens > o->prompt_tokens)
				o->prompt_tokens = s->by[k].prompt_tokens;
			if (s->by[k].prompt_bytes > o->prompt_bytes)
				o->prompt_bytes = s->by[k].prompt_bytes;
		}
	}
}

static void diag_request(void *ctx, const struct request *r, const struct request_metrics *m,
			 const struct gpu_attribution *ga)
{
	struct diagnosis *d = ctx;
	uint32_t ngaps = r->ntokens > 1 ? r->ntokens - 1 : 0;
	struct diag_req *q, *reqs;
	uint64_t *gaps;
	uint32_t *gb;

	d->finished++;
	diag_slo_add(&d->slo, r, m, ga);
	/* As the summary: latency percentiles describe requests that worked. */
	if (r->outcome != OUTCOME_OK || m->ttft_ns < 0)
		return;
	reqs = grow(d->reqs, &d->cap, d->n + 1, sizeof(*reqs), 64);
	if (reqs)
		d->reqs = reqs;
	gaps = reqs ? grow(d->gaps, &d->gaps_cap, d->ngaps + ngaps, sizeof(*gaps), 64) : NULL;
	if (gaps)
		d->gaps = gaps;
	gb = gaps ? grow(d->gap_batch, &d->gap_batch_cap, d->ngaps + ngaps, sizeof(*gb), 64) : NULL;
	if (gb)
		d->gap_batch = gb;
	if (!reqs || !gaps || !gb) {
		d->dropped++;
		return;
	}
	for (uint32_t i = 0; ga && i < ga->ne2s; i++)
		hist_add(&d->e2s, ga->e2s[i]);
	diag_stalls_add(d, ga ? ga->stalls : NULL);
	q = &d->reqs[d->n++];
	q->arrival_ns = r->arrival_ns;
	q->ttft_ns = m->ttft_ns;
	q->itl_p99_ns = m->itl_p99_ns;
	q->queue_ns = ga ? ga->queue_ns : -1;
	q->prefill_ns = ga ? ga->prefill_ns : -1;
	q->decode_ns = ga ? ga->decode_ns : -1;
	q->gpu_ns = ga ? ga->gpu_ns : -1;
	q->host_ns = ga ? ga->host_ns : -1;
	q->wait_ns = m->socket_wait_ns;
	q->preemptions = ga && ga->has_steps ? ga->preemptions : 0;
	q->preempted_ns = ga && ga->has_steps ? ga->preempted_ns : -1;
	q->gap0 = d->ngaps;
	q->ngaps = ngaps;
	for (uint32_t i = 1; i < r->ntokens; i++) {
		d->gap_batch[d->ngaps] = 0;
		d->gaps[d->ngaps++] = r->token_ns[i] - r->token_ns[i - 1];
	}
	/* Gap i - 1 ends at token i: the batch of the step token i came from. */
	for (uint32_t k = 0; ga && k < ga->nrides; k++) {
		const struct batch_ride *b = &ga->rides[k];

		for (uint32_t i = b->token; b->known && i < b->token + b->ntokens && i < r->ntokens;
		     i++)
			if (i)
				d->gap_batch[q->gap0 + i - 1] = b->batch;
	}
}

static void diag_gpu_step(void *ctx, const struct gpu_step *s)
{
	struct diagnosis *d = ctx;

	d->gpu_steps++;
	if (s->kind == STEP_DECODE && s->mode < MODE_MAX && s->end_ns >= s->start_ns)
		gpu_coverage_add(&d->coverage[s->mode], s->batch, s->end_ns - s->start_ns);
}

struct sink diagnosis_sink(struct diagnosis *d)
{
	return (struct sink){
		.name = "diagnosis",
		.ctx = d,
		.request = diag_request,
		.gpu_step = diag_gpu_step,
	};
}

/* What one window of requests says. Shares are fractions in [0, 1]. */
struct window {
	const char *name;
	size_t n;
	uint64_t first_ns, last_ns; /* arrivals */
	double ttft_p99;	    /* ns */
	size_t ttft_tail, ttft_attr;
	double queue, prefill, other;
	bool has_itl;
	double itl_p99;
	size_t itl_tail, itl_attr;
	double gpu, host;
	/* Preemption: requests whose steps are known, those preempted, those of them in the ITL
	 * tail, and the preempted ones' mean time out of the batch (ns). */
	size_t steps_known, preempted, preempted_tail;
	double preempted_mean;
	size_t wait_known; /* requests whose socket wait is known */
	double wait_p99;   /* ns */
};

static int by_arrival(const void *a, const void *b)
{
	const struct diag_req *x = a, *y = b;

	if (x->arrival_ns != y->arrival_ns)
		return x->arrival_ns < y->arrival_ns ? -1 : 1;
	return x->gap0 < y->gap0 ? -1 : x->gap0 > y->gap0;
}

static double clamp01(double v)
{
	return v < 0 ? 0 : v > 1 ? 1 : v;
}

static void window_ttft(struct window *w, const struct diag_req *q, size_t n, struct hist *h)
{
	hist_reset(h);
	for (size_t i = 0; i < n; i++)
		hist_add(h, q[i].ttft_ns);
	w->ttft_p99 = hist_quantile(h, 0.99);
	for (size_t i = 0; i < n; i++) {
		double t = q[i].ttft_ns;

		/* hist_quantile is clamped to the maximum: the slowest request is always in. */
		if (t < w->ttft_p99)
			continue;
		w->ttft_tail++;
		if (q[i].queue_ns < 0 || q[i].prefill_ns < 0 || q[i].ttft_ns <= 0)
			continue;
		w->ttft_attr++;
		w->queue += clamp01(q[i].queue_ns / t);
		w->prefill += clamp01(q[i].prefill_ns / t);
		w->other += clamp01(1 - (double)(q[i].queue_ns + q[i].prefill_ns) / t);
	}
	if (w->ttft_attr) {
		w->queue /= w->ttft_attr;
		w->prefill /= w->ttft_attr;
		w->other /= w->ttft_attr;
	}
}

static void window_itl(struct window *w, const struct diag_req *q, size_t n, const uint64_t *gaps,
		       struct hist *h)
{
	int64_t top = -1;
	double at;

	hist_reset(h);
	for (size_t i = 0; i < n; i++) {
		for (uint32_t k = 0; k < q[i].ngaps; k++)
			hist_add(h, gaps[q[i].gap0 + k]);
		if (q[i].itl_p99_ns > top)
			top = q[i].itl_p99_ns;
	}
	if (!h->count || top < 0)
		return;
	w->has_itl = true;
	w->itl_p99 = hist_quantile(h, 0.99);
	/* No request's own p99 may reach the pooled one: the highest ones stand for the tail. */
	at = top < w->itl_p99 ? top : w->itl_p99;
	for (size_t i = 0; i < n; i++) {
		double span;

		if (q[i].preempted_ns >= 0) {
			w->steps_known++;
			if (q[i].preemptions) {
				w->preempted++;
				w->preempted_mean += (double)q[i].preempted_ns;
			}
		}
		if (q[i].itl_p99_ns < 0 || q[i].itl_p99_ns < at)
			continue;
		w->itl_tail++;
		if (q[i].preemptions)
			w->preempted_tail++;
		if (q[i].gpu_ns < 0 || q[i].host_ns < 0 || q[i].gpu_ns + q[i].host_ns <= 0)
			continue;
		span = q[i].gpu_ns + q[i].host_ns;
		w->itl_attr++;
		w->gpu += q[i].gpu_ns / span;
		w->host += q[i].host_ns / span;
	}
	if (w->itl_attr) {
		w->gpu /= w->itl_attr;
		w->host /= w->itl_attr;
	}
	if (w->preempted)
		w->preempted_mean /= (double)w->preempted;
}

/* The wait in the server's socket before its read (not part of TTFT), where known. */
static void window_wait(struct window *w, const struct diag_req *q, size_t n, struct hist *h)
{
	hist_reset(h);
	for (size_t i = 0; i < n; i++) {
		if (q[i].wait_ns < 0)
			continue;
		hist_add(h, q[i].wait_ns);
		w->wait_known++;
	}
	if (w->wait_known)
		w->wait_p99 = hist_quantile(h, 0.99);
}

static void window_compute(struct window *w, const char *name, const struct diag_req *q, size_t n,
			   const uint64_t *gaps, struct hist *h)
{
	memset(w, 0, sizeof(*w));
	w->name = name;
	w->n = n;
	if (!n)
		return;
	w->first_ns = q[0].arrival_ns;
	w->last_ns = q[n - 1].arrival_ns;
	window_ttft(w, q, n, h);
	window_itl(w, q, n, gaps, h);
	window_wait(w, q, n, h);
}

static const char *plural(size_t n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

/* Why a slow tail has no split. */
static const char *unattributed(const struct diagnosis *d)
{
	return d->gpu_steps ? "not attributed (no prefill step found for them)"
			    : "not attributed (no GPU steps)";
}

static void window_print(const struct diagnosis *d, const struct window *w, uint64_t t0, FILE *f)
{
	fprintf(f, "  %-12s %zu %s, arriving +%.1f to +%.1f s\n", w->name, w->n,
		plural(w->n, "request", "requests"), (w->first_ns - t0) / 1e9,
		(w->last_ns - t0) / 1e9);
	fprintf(f, "    TTFT p99 %9.2f ms; slow tail (%zu %s): ", w->ttft_p99 / 1e6, w->ttft_tail,
		plural(w->ttft_tail, "request", "requests"));
	if (w->ttft_attr)
		fprintf(f, "queue %.0f %%, prefill %.0f %%, other %.0f %%", 100 * w->queue,
			100 * w->prefill, 100 * w->other);
	else
		fprintf(f, "%s", unattributed(d));
	if (w->ttft_attr && w->ttft_attr < w->ttft_tail)
		fprintf(f, " (%zu of them attributed)", w->ttft_attr);
	fprintf(f, "\n");
	if (w->wait_known)
		fprintf(f,
			"    wait p99 %9.2f ms in the server's socket before its read, not in TTFT "
			"(%zu of %zu known)\n",
			w->wait_p99 / 1e6, w->wait_known, w->n);
	if (!w->has_itl) {
		fprintf(f, "    ITL  p99 %9s    (no request streamed two or more tokens)\n", "-");
		return;
	}
	fprintf(f, "    ITL  p99 %9.2f ms; slow tail (%zu %s): ", w->itl_p99 / 1e6, w->itl_tail,
		plural(w->itl_tail, "request", "requests"));
	if (w->itl_attr)
		fprintf(f, "GPU %.0f %%, host %.0f %% of their decode", 100 * w->gpu,
			100 * w->host);
	else
		fprintf(f, "%s", d->gpu_steps ? "not attributed" : "not attributed (no GPU steps)");
	if (w->itl_attr && w->itl_attr < w->itl_tail)
		fprintf(f, " (%zu of them attributed)", w->itl_attr);
	fprintf(f, "\n");
	/* A preempted request's gap holds its time out of the batch: the tail's cause. */
	if (w->preempted_tail)
		fprintf(
		    f,
		    "    ITL p99 raised by preemption: %zu of %zu requests preempted (%zu in the "
		    "slow tail),\n      %.1f ms out of the batch on average: the KV cache was "
		    "likely full\n",
		    w->preempted, w->steps_known, w->preempted_tail, w->preempted_mean / 1e6);
}

/* Milliseconds with 3 significant digits or more: "480 ms", "45.1 ms", "3.20 ms". */
static const char *fmt_ms(char *buf, size_t len, double ns)
{
	double ms = ns / 1e6;

	snprintf(buf, len, ms >= 100 ? "%.0f ms" : ms >= 10 ? "%.1f ms" : "%.2f ms", ms);
	return buf;
}

/* Rose (+1), fell (-1) or stable (0) by the DIAG_STABLE_PCT rule. */
static int direction(double first, double last)
{
	if (first <= 0)
		return last > 0 ? 1 : 0;
	if ((last - first) / first * 100 >= DIAG_STABLE_PCT)
		return 1;
	if ((first - last) / first * 100 >= DIAG_STABLE_PCT)
		return -1;
	return 0;
}

/* Says the P99 line of a verdict; returns the direction. */
static int verdict_head(const char *metric, double a, double b, FILE *f)
{
	char x[32], y[32];
	int dir = direction(a, b);

	if (dir)
		fprintf(f, "    %s P99 %s from %s to %s", metric, dir > 0 ? "rose" : "fell",
			fmt_ms(x, sizeof(x), a), fmt_ms(y, sizeof(y), b));
	else
		fprintf(f, "    %s P99 is stable: %s in the first third, %s in the last", metric,
			fmt_ms(x, sizeof(x), a), fmt_ms(y, sizeof(y), b));
	return dir;
}

struct component {
	const char *name; /* as it starts a clause: "queueing went from ..." */
	double first, last;
	const char *up, *down; /* what a grown or a shrunk share means */
};

/* Names the component whose share moved most in direction dir, or says none moved. */
static void verdict_cause(const struct component *c, int nc, int dir, const char *of, FILE *f)
{
	int best = -1;
	double move = 0;

	for (int i = 0; i < nc; i++) {
		double m = (c[i].last - c[i].first) * dir * 100;

		if (m > move)
			move = m, best = i;
	}
	if (best < 0 || move < DIAG_SHARE_MIN_POINTS) {
		fprintf(f, "; no share of %s moved by %d points or more: every part %s alike", of,
			DIAG_SHARE_MIN_POINTS, dir > 0 ? "grew" : "shrank");
		return;
	}
	fprintf(f, "; %s went from %.0f %% to %.0f %% of %s: %s", c[best].name, 100 * c[best].first,
		100 * c[best].last, of, dir > 0 ? c[best].up : c[best].down);
}

static void verdict_ttft(const struct diagnosis *d, const struct window *a, const struct window *b,
			 FILE *f)
{
	const struct component c[] = {
		{ "queueing", a->queue, b->queue, "requests wait for a free slot, not for the GPU",
		  "requests wait less for a free slot" },
		{ "prefill", a->prefill, b->prefill,
		  "the prefill step itself takes longer (longer prompts, or more work batched with "
		  "it)",
		  "the prefill step itself got shorter" },
		{ "other (after prefill, before the first write)", a->other, b->other,
		  "the host is slow to send the first token (sampling, detokenization, the HTTP "
		  "layer)",
		  "the host sends the first token sooner" },
	};
	int dir = verdict_head("TTFT", a->ttft_p99, b->ttft_p99, f);

	if (dir && (!a->ttft_attr || !b->ttft_attr))
		fprintf(f, "; %s", unattributed(d));
	else if (dir)
		verdict_cause(c, 3, dir, "the slow tail", f);
	fprintf(f, "\n");
}

static void verdict_itl(const struct diagnosis *d, const struct window *a, const struct window *b,
			FILE *f)
{
	const struct component c[] = {
		{ "host time", a->host, b->host,
		  "tokens wait for the host between GPU steps (scheduling, detokenization, the "
		  "HTTP layer), not for the GPU",
		  "tokens wait less for the host between GPU steps" },
		{ "GPU time", a->gpu, b->gpu,
		  "each decode step takes longer on the GPU (a larger batch, or longer contexts)",
		  "decode steps got shorter on the GPU" },
	};
	int dir;

	if (!a->has_itl || !b->has_itl) {
		fprintf(f, "    ITL: no request streamed two or more tokens in the %s third\n",
			!a->has_itl ? "first" : "last");
		return;
	}
	dir = verdict_head("ITL", a->itl_p99, b->itl_p99, f);
	if (dir && (!a->itl_attr || !b->itl_attr))
		fprintf(f, "; %s",
			d->gpu_steps ? "not attributed" : "not attributed (no GPU steps)");
	else if (dir)
		verdict_cause(c, 2, dir, "the slow requests' decode", f);
	fprintf(f, "\n");
}

/* The socket wait adds to what clients see as TTFT; said only where it is known in both. */
static void verdict_wait(const struct window *a, const struct window *b, FILE *f)
{
	int dir;

	if (!a->wait_known || !b->wait_known)
		return;
	dir = verdict_head("Socket wait", a->wait_p99, b->wait_p99, f);
	if (dir > 0)
		fprintf(f, "; requests wait longer before the server reads them (a busy event loop "
			   "or accept queue): clients see it on top of TTFT");
	fprintf(f, "\n");
}

static void print_wall(const struct diagnosis *d, uint64_t mono_ns, FILE *f)
{
	int64_t real;
	time_t s;
	struct tm tm;
	char buf[64];

	if (!clock_wall_ns(d->real_offset_ns, mono_ns, &real))
		return;
	s = real / (int64_t)NS_PER_S;
	if (!localtime_r(&s, &tm) || !strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S %Z", &tm))
		return;
	fprintf(f, " (first at %s)", buf);
}

struct batch_gap {
	uint32_t batch;
	uint64_t gap;
};

static int by_batch(const void *a, const void *b)
{
	const struct batch_gap *x = a, *y = b;

	return x->batch < y->batch ? -1 : x->batch > y->batch;
}

/* The ITL P99 and mean batch of v[0..n), into *p99 and *mean. */
static void batch_group(const struct batch_gap *v, size_t n, struct hist *h, double *p99,
			double *mean)
{
	double sum = 0;

	hist_reset(h);
	for (size_t i = 0; i < n; i++) {
		hist_add(h, v[i].gap);
		sum += v[i].batch;
	}
	*p99 = hist_quantile(h, 0.99);
	*mean = sum / n;
}

/* Says "ITL p99 grew with batch size" when the gaps support it (the rule in diagnosis.h). */
static void batch_verdict(const struct diagnosis *d, struct hist *h, FILE *f)
{
	struct batch_gap *v;
	size_t n = 0, lo_n, hi_at;
	uint32_t q1, q3;
	double lo_p99, hi_p99, lo_mean, hi_mean;
	char a[32], b[32];

	if (!d->gap_batch || !(v = malloc(d->ngaps * sizeof(*v) + 1)))
		return;
	/* Only the gaps of the requests kept (ok, with a token) are in d->gaps. */
	for (size_t i = 0; i < d->ngaps; i++)
		if (d->gap_batch[i])
			v[n++] = (struct batch_gap){ d->gap_batch[i], d->gaps[i] };
	if (n < 2 * DIAG_BATCH_MIN_GAPS)
		goto out;
	qsort(v, n, sizeof(*v), by_batch);
	q1 = v[n / 4].batch;
	q3 = v[3 * n / 4].batch;
	/* Sorted by batch: the low group is a prefix, the high group a suffix. */
	lo_n = 0;
	while (lo_n < n && v[lo_n].batch <= q1)
		lo_n++;
	hi_at = n;
	while (hi_at > 0 && v[hi_at - 1].batch >= q3)
		hi_at--;
	if (q3 <= q1 || lo_n < DIAG_BATCH_MIN_GAPS || n - hi_at < DIAG_BATCH_MIN_GAPS)
		goto out;
	batch_group(v, lo_n, h, &lo_p99, &lo_mean);
	batch_group(v + hi_at, n - hi_at, h, &hi_p99, &hi_mean);
	if (hi_mean < DIAG_BATCH_MIN_RATIO * lo_mean || direction(lo_p99, hi_p99) <= 0)
		goto out;
	fprintf(f,
		"    ITL p99 grew with batch size %.0f → %.0f: %s → %s (tokens of steps batching "
		"%u or fewer requests, %zu gaps, vs %u or more, %zu gaps)\n",
		lo_mean, hi_mean, fmt_ms(a, sizeof(a), lo_p99), fmt_ms(b, sizeof(b), hi_p99), q1,
		lo_n, q3, n - hi_at);
out:
	free(v);
}

/* Engine to socket against the ITL, over the whole run; h is scratch. */
static void e2s_print(const struct diagnosis *d, struct hist *h, FILE *f)
{
	double e2s, itl;

	if (!d->e2s.count)
		return;
	hist_reset(h);
	for (size_t i = 0; i < d->ngaps; i++)
		hist_add(h, d->gaps[i]);
	e2s = hist_quantile(&d->e2s, 0.50);
	if (!h->count || (itl = hist_quantile(h, 0.50)) <= 0)
		return;
	fprintf(f, "    E2S p50   %7.2f ms from a token's step's end to its write, %.0f %% of the "
		   "ITL p50 %.2f ms",
		e2s / 1e6, 100 * e2s / itl, itl / 1e6);
	if (e2s >= DIAG_E2S_SHARE * itl)
		fprintf(f, ":\n             the API process (detokenising, serialising, its event "
			   "loop) holds the tokens");
	fputc('\n', f);
}

/* The mean duration of the graph and piecewise decode steps of batch bucket b, or of the
 * nearest bucket that has some (*at: that bucket); 0 when there are none. */
static double graph_mean_near(const struct diagnosis *d, uint32_t b, uint32_t *at)
{
	for (uint32_t k = 0; k < GPU_BATCH_BUCKETS; k++) {
		for (int side = -1; side <= 1; side += 2) {
			int64_t x = (int64_t)b + side * (int64_t)k;
			uint64_t n, ns;

			if (x < 0 || x >= GPU_BATCH_BUCKETS)
				continue;
			n = d->coverage[MODE_GRAPH].bucket_steps[x] +
			    d->coverage[MODE_PIECEWISE].bucket_steps[x];
			ns = d->coverage[MODE_GRAPH].bucket_ns[x] +
			     d->coverage[MODE_PIECEWISE].bucket_ns[x];
			if (n) {
				*at = (uint32_t)x;
				return (double)ns / n;
			}
		}
	}
	return 0;
}

/* Graph coverage: eager decode steps, at which batches, and how much longer than graph steps
 * of about their batch. */
static void coverage_print(const struct diagnosis *d, FILE *f)
{
	const struct gpu_coverage *e = &d->coverage[MODE_EAGER];
	uint64_t all = 0, compared = 0;
	double eager_ns = 0, graph_ns = 0;
	uint32_t lo = GPU_BATCH_BUCKETS, hi = 0;

	for (int m = 0; m < MODE_MAX; m++)
		all += d->coverage[m].steps;
	if (!e->steps)
		return;
	for (uint32_t b = 0; b < GPU_BATCH_BUCKETS; b++) {
		uint32_t at;
		double g;

		if (!e->bucket_steps[b] || (g = graph_mean_near(d, b, &at)) <= 0)
			continue;
		compared += e->bucket_steps[b];
		eager_ns += (double)e->bucket_ns[b];
		graph_ns += g * e->bucket_steps[b];
		lo = at < lo ? at : lo;
		hi = at > hi ? at : hi;
	}
	fprintf(f, "    graphs   %llu of %llu decode steps (%.0f %%) ran eagerly, at batch %u-%u",
		(unsigned long long)e->steps, (unsigned long long)all, 100.0 * e->steps / all,
		e->batch_lo, e->batch_hi);
	if (!compared) {
		fprintf(f, "; no graph decode step to set them against\n");
		return;
	}
	{
		uint32_t a, z, unused;
		char range[24];

		gpu_batch_bucket_range(lo, &a, &unused);
		gpu_batch_bucket_range(hi, &unused, &z);
		gpu_batch_range_name(a, z, range, sizeof(range));
		fprintf(f, ":\n             %.2f ms each, graph decode steps of batch %s %.2f ms",
			eager_ns / compared / 1e6, range, graph_ns / compared / 1e6);
	}
	if ((double)e->steps / all >= DIAG_EAGER_MIN_SHARE &&
	    eager_ns >= DIAG_EAGER_SLOWER * graph_ns)
		fprintf(f, ":\n             capture graphs up to batch %u (vLLM: "
			   "max_cudagraph_capture_size; SGLang: cuda_graph_max_bs)",
			e->batch_hi);
	fputc('\n', f);
}

/* Stalls: the slow gaps by cause, and the cause of most of those at or over the ITL P99. */
static void stalls_print(const struct diagnosis *d, struct hist *h, FILE *f)
{
	static const char *const raised[STALL_CAUSES] = {
		[STALL_PREFILL] = "prefills of other requests",
		[STALL_PREEMPTED] = "preemption (out of the batch)",
		[STALL_BATCH] = "decode steps that grew with the batch",
		[STALL_HOST] = "host time with no GPU step running",
		[STALL_LATE_WRITE] = "late writes (the token's step ended long before)",
	};
	uint64_t by[STALL_CAUSES] = { 0 }, tail[STALL_CAUSES] = { 0 }, ntail = 0;
	int64_t tokens = -1, bytes = -1;
	const char *sep = "";
	double p99;
	int top = 0;

	if (!d->nstalls)
		return;
	hist_reset(h);
	for (size_t i = 0; i < d->ngaps; i++)
		hist_add(h, d->gaps[i]);
	p99 = hist_quantile(h, 0.99);
	for (size_t i = 0; i < d->nstalls; i++) {
		const struct diag_stall *s = &d->stalls[i];

		by[s->cause]++;
		if ((double)s->gap_ns < p99)
			continue;
		ntail++;
		tail[s->cause]++;
	}
	fprintf(f, "    stalls   %llu slow gaps:", (unsigned long long)d->stalls_all);
	for (int c = 0; c < STALL_CAUSES; c++) {
		if (!by[c])
			continue;
		fprintf(f, "%s %s %llu", sep, stall_cause_name(c), (unsigned long long)by[c]);
		sep = ",";
		if (tail[c] > tail[top])
			top = c;
	}
	if (d->stalls_all > d->nstalls)
		fprintf(f, " (of the first %zu listed per request)", d->nstalls);
	fputc('\n', f);
	if (!ntail || !tail[top] || top == STALL_UNKNOWN)
		return;
	for (size_t i = 0; i < d->nstalls; i++) {
		const struct diag_stall *s = &d->stalls[i];

		if (s->cause != STALL_PREFILL || (double)s->gap_ns < p99)
			continue;
		tokens = s->prompt_tokens > tokens ? s->prompt_tokens : tokens;
		bytes = s->prompt_bytes > bytes ? s->prompt_bytes : bytes;
	}
	fprintf(f, "             ITL p99 raised by %s: %llu of the %llu gaps over %.2f ms",
		raised[top], (unsigned long long)tail[top], (unsigned long long)ntail, p99 / 1e6);
	if (top == STALL_PREFILL && tokens >= 0)
		fprintf(f, " (prompts up to %lld tokens)", (long long)tokens);
	else if (top == STALL_PREFILL && bytes > 0)
		fprintf(f, " (request bodies up to %lld bytes)", (long long)bytes);
	fputc('\n', f);
}

/* The objectives' lines: what missed, and where the misses' time went. */
static void slo_print(const struct diag_slo *s, FILE *f)
{
	static const char *const names[DP_MAX] = {
		[DP_QUEUE] = "queue",	    [DP_PREFILL] = "prefill", [DP_TTFT_REST] = "rest of TTFT",
		[DP_TTFT] = "TTFT",	    [DP_DECODE] = "decode",   [DP_PREEMPTED] = "out of the batch",
	};
	uint64_t n = s->split + s->unsplit;
	int top = -1;

	if (!s->judged)
		return;
	fprintf(f, "    SLO      %llu of %llu requests judged missed an objective",
		(unsigned long long)s->missed, (unsigned long long)s->judged);
	for (int k = 0; k < SLO_METRICS; k++)
		if (s->by[k])
			fprintf(f, "%s %s %llu", k && s->by[0] ? "," : ":", slo_metric_names[k],
				(unsigned long long)s->by[k]);
	fputc('\n', f);
	if (s->failed)
		fprintf(f, "             %llu of the misses failed (an HTTP or stream error, or the "
			   "server closed first)\n",
			(unsigned long long)s->failed);
	if (!n)
		return;
	fprintf(f, "             E2E of the %llu ok misses:", (unsigned long long)n);
	for (int p = 0, first = 1; p < DP_MAX; p++) {
		if (100 * s->share[p] / n < 0.5)
			continue;
		fprintf(f, "%s %s %.0f %%", first ? "" : ",", names[p], 100 * s->share[p] / n);
		first = 0;
		if (top < 0 || s->share[p] > s->share[top])
			top = p;
	}
	fputc('\n', f);
	if (top >= 0)
		fprintf(f, "             most in %s%s\n", names[top],
			s->unsplit ? (s->split ? " (some without GPU steps: TTFT not split)"
					       : " (no GPU steps: TTFT not split into queue and prefill)")
				   : "");
}

void diagnosis_print(const struct diagnosis *d, FILE *f)
{
	struct diag_req *q;
	struct window whole, first, last;
	struct hist *h;
	size_t third;

	if (!d->n) {
		slo_print(&d->slo, f);
		if (!d->finished)
			fprintf(f, "--- diagnosis: there were no requests\n");
		else
			fprintf(
			    f,
			    "--- diagnosis: none of the %llu requests finished ok with a token: "
			    "nothing to diagnose\n",
			    (unsigned long long)d->finished);
		return;
	}
	q = malloc(d->n * sizeof(*q));
	h = malloc(sizeof(*h));
	if (!q || !h) {
		fprintf(f, "--- diagnosis: out of memory\n");
		goto out;
	}
	/* Requests finish out of arrival order; thirds are by arrival. */
	memcpy(q, d->reqs, d->n * sizeof(*q));
	qsort(q, d->n, sizeof(*q), by_arrival);
	fprintf(f, "--- diagnosis: %zu %s finished ok with a token, arriving over %.1f s", d->n,
		plural(d->n, "request", "requests"),
		(q[d->n - 1].arrival_ns - q[0].arrival_ns) / 1e9);
	if (d->have_clock)
		print_wall(d, q[0].arrival_ns, f);
	fprintf(f, "\n");
	if (d->dropped)
		fprintf(f, "  (%llu more not kept: out of memory)\n",
			(unsigned long long)d->dropped);
	window_compute(&whole, "whole run", q, d->n, d->gaps, h);
	window_print(d, &whole, q[0].arrival_ns, f);
	e2s_print(d, h, f);
	coverage_print(d, f);
	stalls_print(d, h, f);
	slo_print(&d->slo, f);
	batch_verdict(d, h, f);
	if (d->n < DIAG_MIN_COMPARE) {
		fprintf(f,
			"  verdict: too few requests to compare the first and last thirds (%zu, "
			"%d needed)\n",
			d->n, DIAG_MIN_COMPARE);
		goto out;
	}
	third = d->n / 3;
	window_compute(&first, "first third", q, third, d->gaps, h);
	window_compute(&last, "last third", q + d->n - third, third, d->gaps, h);
	window_print(d, &first, q[0].arrival_ns, f);
	window_print(d, &last, q[0].arrival_ns, f);
	fprintf(f, "  verdict (last third vs first third):\n");
	verdict_ttft(d, &first, &last, f);
	verdict_wait(&first, &last, f);
	verdict_itl(d, &first, &last, f);
out:
	free(q);
	free(h);
}
