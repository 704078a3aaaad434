// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "pipeline/step.h"
#include "pipeline/device_sample.h"
#include "sinks/prom.h"
#include "pipeline/request.h"
#include "lib/escape.h"

/* OpenTelemetry GenAI semantic conventions, explicit bucket boundaries (in milliseconds here,
 * all of them whole milliseconds): gen_ai.server.time_to_first_token, also used for ITL, queue,
 * prefill and GPU steps (latencies of the same scale); gen_ai.server.time_per_output_token;
 * gen_ai.server.request.duration, also used for decode (a stream's length). */
static const uint64_t ttft_ms[] = { 1,	 5,   10,  20,	 40,   60,   80,   100,
				    250, 500, 750, 1000, 2500, 5000, 7500, 10000 };
static const uint64_t tpot_ms[] = { 10, 25, 50, 75, 100, 150, 200, 300, 400, 500, 750, 1000, 2500 };
static const uint64_t duration_ms[] = { 10,   20,   40,	  80,	 160,	320,   640,
					1280, 2560, 5120, 10240, 20480, 40960, 81920 };

#define PROM_MAX_BOUNDS 16
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

struct bounds {
	const uint64_t *ms;
	unsigned int n;
};

static const struct bounds ttft_bounds = { ttft_ms, ARRAY_LEN(ttft_ms) };
static const struct bounds tpot_bounds = { tpot_ms, ARRAY_LEN(tpot_ms) };
static const struct bounds duration_bounds = { duration_ms, ARRAY_LEN(duration_ms) };

_Static_assert(ARRAY_LEN(ttft_ms) <= PROM_MAX_BOUNDS, "bounds");
_Static_assert(ARRAY_LEN(tpot_ms) <= PROM_MAX_BOUNDS, "bounds");
_Static_assert(ARRAY_LEN(duration_ms) <= PROM_MAX_BOUNDS, "bounds");

/* Non-cumulative counts; buckets[n] is above the last bound (+Inf). Sum exact in ns. */
struct phist {
	uint64_t count, sum_ns;
	uint64_t buckets[PROM_MAX_BOUNDS + 1];
};

enum ph_id {
	PH_TTFT,
	PH_ITL,
	PH_TPOT,
	PH_E2E,
	PH_QUEUE,
	PH_PREFILL,
	PH_DECODE,
	PH_SOCKET_WAIT,
	PH_PREEMPTED,
	PH_E2S,
	PH_MAX
};

static const struct {
	const char *name, *help;
	const struct bounds *b;
} ph_desc[PH_MAX] = {
	[PH_TTFT] = { "tokenscope_time_to_first_token_seconds",
		      "Time from the request's arrival to its first content frame (ok requests).",
		      &ttft_bounds },
	[PH_ITL] = { "tokenscope_inter_token_latency_seconds",
		     "Gaps between consecutive content frames (every gap of ok requests).",
		     &ttft_bounds },
	[PH_TPOT] = { "tokenscope_time_per_output_token_seconds",
		      "(last - first content frame) / (output tokens - 1), ok requests with 2 or "
		      "more tokens.",
		      &tpot_bounds },
	[PH_E2E] = { "tokenscope_request_duration_seconds",
		     "Time from the request's arrival to the end of its response (all outcomes).",
		     &duration_bounds },
	[PH_QUEUE] = { "tokenscope_request_queue_seconds",
		       "Arrival to the start of the GPU step that prefilled the request (when "
		       "attributed).",
		       &ttft_bounds },
	[PH_PREFILL] = { "tokenscope_request_prefill_seconds",
			 "The GPU step(s) that prefilled the request (when attributed).",
			 &ttft_bounds },
	[PH_DECODE] = { "tokenscope_request_decode_seconds",
			"First content frame to the end of the response (when attributed).",
			&duration_bounds },
	[PH_SOCKET_WAIT] = { "tokenscope_request_socket_wait_seconds",
			     "From the request's first bytes reaching the server's socket to the "
			     "read that completed it: not part of TTFT (all outcomes, when known).",
			     &ttft_bounds },
	[PH_PREEMPTED] = { "tokenscope_request_preempted_seconds",
			   "Time a preempted request spent out of its engine's batch, the "
			   "recompute included (requests preempted at least once).",
			   &duration_bounds },
	[PH_E2S] = { "tokenscope_engine_to_socket_seconds",
		     "From the end of the GPU step a token came from to the write that carried it "
		     "(every token of ok requests whose steps are known).",
		     &ttft_bounds },
};

enum tok_type { TOK_INPUT, TOK_OUTPUT, TOK_CACHED, TOK_MAX };
static const char *const tok_names[TOK_MAX] = { "input", "output", "cached" };

/* The short container id of a workload, and its pod's namespace and name. */
#define CONTAINER_MAX (WORKLOAD_SHORT_LEN + 1)
#define NAMESPACE_MAX sizeof(((struct workload *)0)->k8s_namespace)
#define POD_MAX sizeof(((struct workload *)0)->k8s_pod)

/* One label set of the request metrics, and its series. */
struct prom_series {
	char name[REQBODY_MODEL_MAX];  /* the model as the body gave it (not yet a valid label) */
	uint32_t pid;		       /* the serving process; 0 without --by-process */
	char container[CONTAINER_MAX]; /* "" when the process has no container id */
	/* its pod's, "" outside a pod or without prom_set_pod_labels */
	char k8s_namespace[NAMESPACE_MAX], k8s_pod[POD_MAX];
	bool client; /* requests the process made to an upstream (role="client") */
	/* --label values, capped (prom_set_labels); "" for none, and in the in-flight gauge */
	char lv[REQ_LABELS_MAX][REQ_LABEL_VALUE_MAX];
	struct phist h[PH_MAX];
	uint64_t requests[OUTCOME_MAX];
	uint64_t tokens[TOK_MAX];
	uint32_t inflight;    /* read and not finished */
	uint64_t preemptions; /* times its requests left the batch and were recomputed */
	/* their recompute tax: prompt and generated tokens recomputed, the recompute steps */
	uint64_t recomp_prompt, recomp_generated, recomp_ns;
	/* Its requests' verdicts (slo.h) per objective ([SLO_METRICS]: all of them), and the
	 * goodput: requests that met every objective, and their output tokens. */
	uint64_t slo[SLO_METRICS + 1][SLO_RESULTS];
	uint64_t good_requests, good_tokens;
	/* Requests their clients left, and the frames and failed writes the server still made for
	 * them after that. */
	uint64_t abandoned, abandoned_frames, abandoned_failed;
	/* Requests by what is known of their prefix-cache hits (prefix.h), and the prompt tokens
	 * of those that reported them. */
	uint64_t cache[CACHE_GUESSES], cache_prompt;
};

struct prom_gpu_pid {
	uint32_t pid;
	uint64_t steps[STEP_KIND_MAX];
	/* by kind, mode and batch bucket (graph coverage) */
	uint64_t by_mode[STEP_KIND_MAX][MODE_MAX][GPU_BATCH_BUCKETS];
};

/* request_other_kind's values, the label kind of tokenscope_other_requests_total. */
static const char *const prom_other_kinds[] = { "health", "metrics", "models", "docs", "other" };
#define PROM_OTHER_KINDS (sizeof(prom_other_kinds) / sizeof(prom_other_kinds[0]))

struct prom {
	/* the exchanges in flight when tracing began, per server (pipeline_status.joined) */
	struct joined_servers joined;
	/* series[PROM_MAX_LABEL_SETS] is "other": every label set past the cap */
	struct prom_series series[PROM_MAX_LABEL_SETS + 1];
	unsigned int nseries;
	bool other_used;
	bool by_process;	    /* a pid label on the request metrics */
	bool no_pod_labels;	    /* no namespace and pod labels on them */
	uint64_t overflow_requests; /* finished requests counted under "other" */
	/* requests that were not inference, by request_other_kind (prom_other_kinds) */
	uint64_t other_requests[PROM_OTHER_KINDS];
	/* gpu_pids[PROM_MAX_GPU_PIDS] is "other" */
	struct prom_gpu_pid gpu_pids[PROM_MAX_GPU_PIDS + 1];
	unsigned int ngpu_pids;
	bool gpu_other_used;
	uint64_t gpu_overflow_steps; /* GPU steps counted under pid "other" */
	uint64_t gpu_steps;
	uint64_t steps_times[GPU_TIMES_MAX]; /* steps by where their figures come from */
	struct phist step_dur[STEP_KIND_MAX];
	uint64_t lost_events;
	struct loss_report loss; /* at the latest tick */
	uint32_t traced;	 /* processes traced now (pipeline.nlive) */
	uint32_t inflight;
	prom_publish_fn publish;
	void *publish_ctx;
	void (*extra)(void *ctx, FILE *f);
	void *extra_ctx;
	bool slo_seen; /* a request had an objective: the SLO families are shown */
	/* --label: the labels, and per label the values with series of their own and the
	 * values waiting for their second request (oldest replaced) */
	const struct req_label_set *labels;
	uint32_t label_top, nlvals;
	struct prom_label_values {
		char (*named)[REQ_LABEL_VALUE_MAX];
		uint32_t nnamed;
		struct {
			char v[REQ_LABEL_VALUE_MAX];
			uint32_t n;
		} cand[PROM_LABEL_CANDIDATES];
		uint32_t next_cand;
		uint64_t other;	    /* requests whose value was "other" */
	} * lvals;		    /* one per label, with labels */
	bool dirty;		    /* something changed since the last snapshot */
	uint64_t rendered_ns;	    /* kernel time of the last snapshot */
	uint64_t prev_tick_ns;	    /* kernel time at the previous tick */
	struct device_sample *nvml; /* the latest GPU sample; NULL before the first */
	struct run_feature features[RUN_FEATURES_MAX]; /* the kernel's, from the first tick */
	uint32_t nfeatures;
	struct self_cost cost; /* what tracing costs (the status's), cost.seq 0: none */
};

static void phist_add(struct phist *h, const struct bounds *b, uint64_t ns)
{
	unsigned int i = 0;

	while (i < b->n && ns > b->ms[i] * NS_PER_MS)
		i++;
	h->buckets[i]++;
	h->count++;
	h->sum_ns += ns;
}

/* The value label i shows for v: v once it has a series of its own, else "other"; a value
 * seen for the PROM_LABEL_PROMOTE-th time gets one while there is room. */
static const char *label_value(struct prom *p, uint32_t i, const char *v)
{
	struct prom_label_values *lv = &p->lvals[i];

	for (uint32_t k = 0; k < lv->nnamed; k++)
		if (!strcmp(lv->named[k], v))
			return lv->named[k];
	for (uint32_t k = 0; k < PROM_LABEL_CANDIDATES; k++) {
		if (!lv->cand[k].n || strcmp(lv->cand[k].v, v))
			continue;
		if (++lv->cand[k].n >= PROM_LABEL_PROMOTE && lv->nnamed < p->label_top) {
			snprintf(lv->named[lv->nnamed], REQ_LABEL_VALUE_MAX, "%s", v);
			lv->cand[k].n = 0;
			return lv->named[lv->nnamed++];
		}
		lv->other++;
		return "other";
	}
	if (lv->nnamed < p->label_top) {
		uint32_t k = lv->next_cand++ % PROM_LABEL_CANDIDATES;

		snprintf(lv->cand[k].v, REQ_LABEL_VALUE_MAX, "%s", v);
		lv->cand[k].n = 1;
	}
	lv->other++;
	return "other";
}

/* The label values of r's series: "" at its start (the in-flight gauge) and for a label it
 * had none of; capped (label_value) at its end. */
static void series_label_values(struct prom *p, const struct request *r, bool at_start,
				char out[REQ_LABELS_MAX][REQ_LABEL_VALUE_MAX])
{
	/* Whole: series compare them with memcmp. */
	memset(out, 0, REQ_LABELS_MAX * REQ_LABEL_VALUE_MAX);
	for (uint32_t i = 0; i < REQ_LABELS_MAX; i++) {
		if (at_start || !p->labels || i >= p->labels->n || !r->labels.spec ||
		    !r->labels.set[i] || !r->labels.v[i][0])
			continue;
		snprintf(out[i], REQ_LABEL_VALUE_MAX, "%s", label_value(p, i, r->labels.v[i]));
	}
}

/* The series of r's label set (its model as of start: without the one its stream named later),
 * the "other" one past the cap. */
static struct prom_series *series_of(struct prom *p, const struct request *r, bool at_start)
{
	char lv[REQ_LABELS_MAX][REQ_LABEL_VALUE_MAX];
	const char *name =
	    r->info.model[0] && !(at_start && r->model_from_stream) ? r->info.model : "unknown";
	uint32_t pid = p->by_process ? r->pid : 0;
	const struct workload *w = &r->workload;
	const char *ns = p->no_pod_labels ? "" : w->k8s_namespace;
	const char *pod = p->no_pod_labels ? "" : w->k8s_pod;
	char container[CONTAINER_MAX];
	struct prom_series *m;

	snprintf(container, sizeof(container), "%.*s", WORKLOAD_SHORT_LEN, w->container_id);
	series_label_values(p, r, at_start, lv);
	for (unsigned int i = 0; i < p->nseries; i++) {
		m = &p->series[i];
		if (m->pid == pid && m->client == r->client && !strcmp(m->name, name) &&
		    !strcmp(m->container, container) && !strcmp(m->k8s_namespace, ns) &&
		    !strcmp(m->k8s_pod, pod) && !memcmp(m->lv, lv, sizeof(lv)))
			return m;
	}
	if (p->nseries == PROM_MAX_LABEL_SETS) {
		p->other_used = true;
		return &p->series[PROM_MAX_LABEL_SETS];
	}
	m = &p->series[p->nseries++];
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->pid = pid;
	m->client = r->client;
	snprintf(m->container, sizeof(m->container), "%s", container);
	snprintf(m->k8s_namespace, sizeof(m->k8s_namespace), "%s", ns);
	snprintf(m->k8s_pod, sizeof(m->k8s_pod), "%s", pod);
	memcpy(m->lv, lv, sizeof(lv));
	return m;
}

static void prom_request_start(void *ctx, const struct request *r)
{
	struct prom *p = ctx;

	series_of(p, r, true)->inflight++;
	p->dirty = true;
}

/* Not inference: counted by kind alone, out of the request families (a bounded label). */
static void prom_request_other(void *ctx, const struct request *r)
{
	struct prom *p = ctx;
	struct prom_series *started = series_of(p, r, true);
	const char *kind = request_other_kind(r);
	size_t k = 0;

	while (k + 1 < PROM_OTHER_KINDS && strcmp(prom_other_kinds[k], kind))
		k++;
	p->other_requests[k]++;
	if (started->inflight)
		started->inflight--;
	p->dirty = true;
}

static void prom_request(void *ctx, const struct request *r, const struct request_metrics *m,
			 const struct gpu_attribution *ga)
{
	struct prom *p = ctx;
	struct prom_series *pm = series_of(p, r, false), *started = series_of(p, r, true);
	const int64_t attributed[] = { [PH_QUEUE] = ga ? ga->queue_ns : -1,
				       [PH_PREFILL] = ga ? ga->prefill_ns : -1,
				       [PH_DECODE] = ga ? ga->decode_ns : -1 };

	p->dirty = true;
	if (pm == &p->series[PROM_MAX_LABEL_SETS])
		p->overflow_requests++;
	/* In flight under the label set it began with. */
	if (started->inflight)
		started->inflight--;
	if (r->outcome < OUTCOME_MAX)
		pm->requests[r->outcome]++;
	if (m->tokens > 0)
		pm->tokens[TOK_OUTPUT] += m->tokens;
	if (r->prompt_tokens > 0)
		pm->tokens[TOK_INPUT] += r->prompt_tokens;
	if (r->cached_tokens > 0)
		pm->tokens[TOK_CACHED] += r->cached_tokens;
	pm->cache[m->cache_guess]++;
	if (m->cache_guess == CACHE_REPORTED && r->prompt_tokens > 0)
		pm->cache_prompt += r->prompt_tokens;
	if (request_abandoned(r)) {
		pm->abandoned++;
		pm->abandoned_frames += r->gone_frames;
		pm->abandoned_failed += r->gone_failed_writes;
	}
	if (m->slo.any) {
		p->slo_seen = true;
		for (int k = 0; k < SLO_METRICS; k++)
			if (m->slo.result[k] != SLO_NONE)
				pm->slo[k][m->slo.overall == SLO_ABORTED ? SLO_ABORTED
									 : m->slo.result[k]]++;
		pm->slo[SLO_METRICS][m->slo.overall]++;
		if (m->slo.overall == SLO_MET) {
			pm->good_requests++;
			pm->good_tokens += m->tokens > 0 ? (uint64_t)m->tokens : 0;
		}
	}
	if (m->e2e_ns >= 0)
		phist_add(&pm->h[PH_E2E], &duration_bounds, m->e2e_ns);
	if (m->socket_wait_ns >= 0)
		phist_add(&pm->h[PH_SOCKET_WAIT], &ttft_bounds, m->socket_wait_ns);
	for (int i = PH_QUEUE; i <= PH_DECODE; i++)
		if (attributed[i] >= 0)
			phist_add(&pm->h[i], ph_desc[i].b, attributed[i]);
	if (ga && ga->has_steps && ga->preemptions) {
		if (r->prompt_tokens > 0)
			pm->recomp_prompt += (uint64_t)r->prompt_tokens * ga->preemptions;
		pm->recomp_generated += ga->recomputed_generated;
		pm->recomp_ns += ga->recompute_ns;
		pm->preemptions += ga->preemptions;
		phist_add(&pm->h[PH_PREEMPTED], &duration_bounds, (uint64_t)ga->preempted_ns);
	}
	/* Latencies of failed requests are counted by outcome, not averaged in (as the summary). */
	if (r->outcome != OUTCOME_OK)
		return;
	if (m->ttft_ns >= 0)
		phist_add(&pm->h[PH_TTFT], &ttft_bounds, m->ttft_ns);
	if (m->tpot_ns >= 0)
		phist_add(&pm->h[PH_TPOT], &tpot_bounds, m->tpot_ns);
	for (uint32_t i = 1; i < r->ntokens; i++) {
		uint64_t a = r->token_ns[i - 1], b = r->token_ns[i];

		phist_add(&pm->h[PH_ITL], &ttft_bounds, b > a ? b - a : 0);
	}
	for (uint32_t i = 0; ga && i < ga->ne2s; i++)
		phist_add(&pm->h[PH_E2S], &ttft_bounds, ga->e2s[i]);
}

static struct prom_gpu_pid *gpu_pid_get(struct prom *p, uint32_t pid)
{
	for (unsigned int i = 0; i < p->ngpu_pids; i++)
		if (p->gpu_pids[i].pid == pid)
			return &p->gpu_pids[i];
	if (p->ngpu_pids == PROM_MAX_GPU_PIDS) {
		p->gpu_other_used = true;
		p->gpu_overflow_steps++;
		return &p->gpu_pids[PROM_MAX_GPU_PIDS];
	}
	p->gpu_pids[p->ngpu_pids].pid = pid;
	return &p->gpu_pids[p->ngpu_pids++];
}

static void prom_gpu_step(void *ctx, const struct gpu_step *s)
{
	struct prom *p = ctx;
	struct prom_gpu_pid *g;

	if (s->kind >= STEP_KIND_MAX)
		return;
	p->dirty = true;
	p->gpu_steps++;
	p->steps_times[gpu_step_times_of(s)]++;
	g = gpu_pid_get(p, s->pid);
	g->steps[s->kind]++;
	if (s->mode < MODE_MAX)
		g->by_mode[s->kind][s->mode][gpu_batch_bucket(s->batch)]++;
	phist_add(&p->step_dur[s->kind], &ttft_bounds,
		  s->end_ns > s->start_ns ? s->end_ns - s->start_ns : 0);
}

static void prom_publish(struct prom *p, uint64_t now_ns)
{
	char *buf;
	size_t len;

	if (!p->publish || prom_render(p, &buf, &len))
		return; /* still dirty: tried again at the next tick */
	p->publish(p->publish_ctx, buf, len);
	p->dirty = false;
	p->rendered_ns = now_ns;
}

/* The kernel's features from the status, once they differ from those held; true if they did. */
static bool prom_take_features(struct prom *p, const struct pipeline_status *st)
{
	uint32_t n = st->nfeatures < RUN_FEATURES_MAX ? st->nfeatures : RUN_FEATURES_MAX;

	if (n == p->nfeatures &&
	    (!n || !memcmp(p->features, st->features, n * sizeof(*st->features))))
		return false;
	if (n)
		memcpy(p->features, st->features, n * sizeof(*st->features));
	p->nfeatures = n;
	return true;
}

static void prom_tick(void *ctx, const struct pipeline_status *st)
{
	struct prom *p = ctx;
	uint64_t now_ns = st->now_ns;
	bool quiet = st->record_ns == p->prev_tick_ns;

	/* New records may have started requests (in flight) without finishing any. */
	if (!quiet)
		p->dirty = true;
	p->prev_tick_ns = st->record_ns;
	if (st->loss.lost_events != p->lost_events) {
		p->lost_events = st->loss.lost_events;
		p->dirty = true;
	}
	if (memcmp(&st->loss, &p->loss, sizeof(st->loss)) || st->ntraced != p->traced) {
		p->loss = st->loss;
		p->traced = st->ntraced;
		p->dirty = true;
	}
	if (prom_take_features(p, st))
		p->dirty = true;
	if (st->cost && st->cost->seq != p->cost.seq) {
		p->cost = *st->cost;
		p->dirty = true;
	}
	if (memcmp(&st->joined, &p->joined, sizeof(st->joined))) {
		p->joined = st->joined;
		p->dirty = true;
	}
	if (!p->dirty || !p->publish)
		return;
	/* Under load, one snapshot per period; once records stop, the last change at once. */
	if (!quiet && now_ns - p->rendered_ns < PROM_RENDER_PERIOD_NS)
		return;
	p->inflight = st->in_flight;
	prom_publish(p, now_ns);
}

static void prom_finish(void *ctx, const struct pipeline_status *st)
{
	struct prom *p = ctx;

	p->lost_events = st->loss.lost_events;
	p->loss = st->loss;
	p->traced = st->ntraced;
	p->inflight = st->in_flight;
	prom_take_features(p, st);
	if (st->cost)
		p->cost = *st->cost;
	p->joined = st->joined;
	prom_publish(p, st->now_ns);
}

struct prom *prom_new(prom_publish_fn publish, void *publish_ctx)
{
	struct prom *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	snprintf(p->series[PROM_MAX_LABEL_SETS].name, sizeof(p->series[0].name), "other");
	p->publish = publish;
	p->publish_ctx = publish_ctx;
	/* Something valid to serve before the first tick. */
	prom_publish(p, 0);
	return p;
}

void prom_free(struct prom *p)
{
	if (p) {
		free(p->nvml);
		for (uint32_t i = 0; p->lvals && i < p->nlvals; i++)
			free(p->lvals[i].named);
		free(p->lvals);
	}
	free(p);
}

int prom_set_labels(struct prom *p, const struct req_label_set *labels, uint32_t top)
{
	if (!labels || !labels->n)
		return 0;
	p->lvals = calloc(labels->n, sizeof(*p->lvals));
	if (!p->lvals)
		return -ENOMEM;
	p->nlvals = labels->n;
	p->label_top = top ? top : PROM_LABEL_TOP_DEFAULT;
	for (uint32_t i = 0; i < labels->n; i++)
		if (!(p->lvals[i].named = calloc(p->label_top, REQ_LABEL_VALUE_MAX)))
			return -ENOMEM;
	p->labels = labels;
	return 0;
}

int prom_set_gpu_sample(struct prom *p, const struct device_sample *s)
{
	if (!p->nvml && !(p->nvml = malloc(sizeof(*p->nvml))))
		return -ENOMEM;
	*p->nvml = *s;
	p->dirty = true;
	return 0;
}

void prom_set_by_process(struct prom *p, bool on)
{
	p->by_process = on;
}

void prom_set_pod_labels(struct prom *p, bool on)
{
	p->no_pod_labels = !on;
}

/* Without memory for the copy the metrics keep the previous sample (and say its age). */
static void prom_gpu_sample(void *ctx, const struct device_sample *s)
{
	prom_set_gpu_sample(ctx, s);
}

struct sink prom_sink(struct prom *p)
{
	return (struct sink){
		.name = "prometheus",
		.ctx = p,
		.request = prom_request,
		.gpu_step = prom_gpu_step,
		.device_sample = prom_gpu_sample,
		.tick = prom_tick,
		.request_start = prom_request_start,
		.request_other = prom_request_other,
		.finish = prom_finish,
		.clients = true, /* under role="client" */
	};
}

/* Worst case of model="...",role="...",pid="...",namespace="...",pod="...",container="...":
 * every byte of the names 3 bytes (U+FFFD). */
#define LABELS_MAX                                                                                 \
	(REQBODY_MODEL_MAX * 3 + 16 + sizeof(",role=\"client\"") + sizeof(",pid=\"4294967295\"") + \
	 (NAMESPACE_MAX + POD_MAX + CONTAINER_MAX) * 3 + 3 * 16 +                                  \
	 REQ_LABELS_MAX * (REQ_LABEL_NAME_MAX + REQ_LABEL_VALUE_MAX * 3 + 4))

/* Seconds from nanoseconds, exactly: "0.35", "1", "12.000000001". */
static void put_seconds(FILE *f, uint64_t ns)
{
	char frac[16];
	int end;

	fprintf(f, "%" PRIu64, ns / 1000000000u);
	if (!(ns % 1000000000u))
		return;
	end = snprintf(frac, sizeof(frac), "%09" PRIu64, ns % 1000000000u);
	while (end > 0 && frac[end - 1] == '0')
		frac[--end] = 0;
	fprintf(f, ".%s", frac);
}

static void put_header(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram series; labels is the series' label set ("model=..."), already escaped. */
static void put_hist(FILE *f, const char *name, const char *labels, const struct phist *h,
		     const struct bounds *b)
{
	uint64_t cum = 0;

	for (unsigned int i = 0; i < b->n; i++) {
		cum += h->buckets[i];
		fprintf(f, "%s_bucket{%s,le=\"", name, labels);
		put_seconds(f, b->ms[i] * NS_PER_MS);
		fprintf(f, "\"} %" PRIu64 "\n", cum);
	}
	cum += h->buckets[b->n];
	fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", name, labels, cum);
	fprintf(f, "%s_sum{%s} ", name, labels);
	put_seconds(f, h->sum_ns);
	fprintf(f, "\n%s_count{%s} %" PRIu64 "\n", name, labels, h->count);
}

/* Label sets in the order they were first seen, then "other" if it was used. */
static unsigned int series_to_render(const struct prom *p, const struct prom_series **out)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < p->nseries; i++)
		out[n++] = &p->series[i];
	if (p->other_used)
		out[n++] = &p->series[PROM_MAX_LABEL_SETS];
	return n;
}

/* A series' labels, escaped, in out (LABELS_MAX bytes): the model, the role (the requests the
 * traced processes served, or those they made as clients; "other" past the cap), the pid with
 * --by-process ("other" for the set past the cap), the pod's namespace and name and the
 * container only when there are. */
static void series_labels(const struct prom *p, const struct prom_series *m, char *out)
{
	char *o = escape_prom_label(out, "model", m->name);

	if (m == &p->series[PROM_MAX_LABEL_SETS])
		o += sprintf(o, ",role=\"other\"");
	else
		o += sprintf(o, ",role=\"%s\"", m->client ? "client" : "server");

	if (p->by_process) {
		if (m == &p->series[PROM_MAX_LABEL_SETS])
			o += sprintf(o, ",pid=\"other\"");
		else
			o += sprintf(o, ",pid=\"%u\"", m->pid);
	}
	if (m->k8s_namespace[0]) {
		*o++ = ',';
		o = escape_prom_label(o, "namespace", m->k8s_namespace);
	}
	if (m->k8s_pod[0]) {
		*o++ = ',';
		o = escape_prom_label(o, "pod", m->k8s_pod);
	}
	for (uint32_t i = 0; p->labels && i < p->labels->n; i++) {
		*o++ = ',';
		o = escape_prom_label(o, p->labels->l[i].name,
				      m == &p->series[PROM_MAX_LABEL_SETS] ? "other" : m->lv[i]);
	}
	if (m->container[0]) {
		*o++ = ',';
		escape_prom_label(o, "container", m->container);
	}
}

/* A counter family with one sample per label set: the uint64_t at offset off of each series. */
static void put_series_counter(FILE *f, const char *name, const char *help,
			       const struct prom_series *const *ms, char (*labels)[LABELS_MAX],
			       unsigned int n, size_t off)
{
	put_header(f, name, "counter", help);
	for (unsigned int i = 0; i < n; i++)
		fprintf(f, "%s{%s} %" PRIu64 "\n", name, labels[i],
			*(const uint64_t *)((const char *)ms[i] + off));
}

/* The request families' counters: outcomes, tokens, preemptions, --label's others, prefix-cache
 * hits, abandoned requests. */
static void render_request_counters(const struct prom *p, FILE *f,
				    const struct prom_series *const *ms, char (*labels)[LABELS_MAX],
				    unsigned int n)
{
	put_header(f, "tokenscope_requests_total", "counter",
		   "Finished requests by outcome (ok, http_error, stream_error, aborted, lost).");
	for (unsigned int i = 0; i < n; i++)
		for (int o = 0; o < OUTCOME_MAX; o++)
			fprintf(f, "tokenscope_requests_total{%s,outcome=\"%s\"} %" PRIu64 "\n",
				labels[i], outcome_name(o), ms[i]->requests[o]);

	put_header(f, "tokenscope_tokens_total", "counter",
		   "Tokens of finished requests: output (usage, else content frames), input and "
		   "cached (usage, when the server reports it).");
	for (unsigned int i = 0; i < n; i++)
		for (int t = 0; t < TOK_MAX; t++)
			fprintf(f, "tokenscope_tokens_total{%s,type=\"%s\"} %" PRIu64 "\n",
				labels[i], tok_names[t], ms[i]->tokens[t]);

	put_series_counter(
	    f, "tokenscope_preemptions_total",
	    "Times finished requests left their engine's batch after their first token and "
	    "came back through a recompute (docs/gpu.md \"Preemption\").",
	    ms, labels, n, offsetof(struct prom_series, preemptions));

	if (p->labels) {
		put_header(f, "tokenscope_label_other_requests_total", "counter",
			   "Finished requests whose --label value was shown as \"other\": past the "
			   "values kept (--label-top), or before a value's second request.");
		for (uint32_t i = 0; i < p->labels->n; i++)
			fprintf(f,
				"tokenscope_label_other_requests_total{label=\"%s\"} %" PRIu64 "\n",
				p->labels->l[i].name, p->lvals[i].other);
	}
	put_header(f, "tokenscope_prefix_cache_requests_total", "counter",
		   "Finished requests by what is known of their prefix-cache hits: reported "
		   "(usage's cached_tokens), or guessed from prefill time per prompt token: "
		   "likely_cached, cold, unknown.");
	for (unsigned int i = 0; i < n; i++)
		for (int g = 0; g < CACHE_GUESSES; g++)
			fprintf(f,
				"tokenscope_prefix_cache_requests_total{%s,cache=\"%s\"} %" PRIu64
				"\n",
				labels[i], cache_guess_name(g), ms[i]->cache[g]);
	put_series_counter(
	    f, "tokenscope_prefix_cache_prompt_tokens_total",
	    "Prompt tokens of the finished requests that reported cached_tokens: the hit "
	    "rate is tokenscope_tokens_total{type=\"cached\"} over this.",
	    ms, labels, n, offsetof(struct prom_series, cache_prompt));

	put_series_counter(
	    f, "tokenscope_abandoned_requests_total",
	    "Finished requests their clients left before the response ended (outcome "
	    "aborted, the hang-up seen).",
	    ms, labels, n, offsetof(struct prom_series, abandoned));
	put_series_counter(
	    f, "tokenscope_abandoned_frames_total",
	    "Frames the server still wrote for requests after their clients had left.", ms, labels,
	    n, offsetof(struct prom_series, abandoned_frames));
	put_series_counter(
	    f, "tokenscope_abandoned_failed_writes_total",
	    "Writes the server still tried for requests after their clients had left, and "
	    "that failed (EPIPE, ECONNRESET).",
	    ms, labels, n, offsetof(struct prom_series, abandoned_failed));
}

/* The objectives' counters and goodput (--slo, llm-d's headers), once a request had one. */
static void render_slo(const struct prom *p, FILE *f, const struct prom_series *const *ms,
		       char (*labels)[LABELS_MAX], unsigned int n)
{
	if (p->slo_seen) {
		put_header(
		    f, "tokenscope_slo_requests_total", "counter",
		    "Finished requests with objectives (--slo, llm-d's headers) by objective "
		    "(ttft, tpot, e2e; all: every objective of the request) and verdict (met, "
		    "missed, unknown; aborted: the client left first, set apart).");
		for (unsigned int i = 0; i < n; i++) {
			for (int k = 0; k <= SLO_METRICS; k++) {
				for (int r = SLO_MET; r < SLO_RESULTS; r++) {
					fprintf(f,
						"tokenscope_slo_requests_total{%s,slo=\"%s\","
						"result=\"%s\"} %" PRIu64 "\n",
						labels[i],
						k == SLO_METRICS ? "all" : slo_metric_names[k],
						slo_result_name(r), ms[i]->slo[k][r]);
				}
			}
		}
		put_series_counter(f, "tokenscope_goodput_requests_total",
				   "Finished requests that met every objective they had.", ms,
				   labels, n, offsetof(struct prom_series, good_requests));
		put_series_counter(
		    f, "tokenscope_goodput_tokens_total",
		    "Output tokens of the finished requests that met every objective they "
		    "had.",
		    ms, labels, n, offsetof(struct prom_series, good_tokens));
	}
}

/* The recompute tax of preemptions: tokens and time. */
static void render_recompute(const struct prom *p, FILE *f, const struct prom_series *const *ms,
			     char (*labels)[LABELS_MAX], unsigned int n)
{
	(void)p;
	put_header(f, "tokenscope_recomputed_tokens_total", "counter",
		   "Tokens recomputed after preemptions: each preempted request's prompt (when "
		   "usage said it) and the tokens it had generated, at every preemption.");
	for (unsigned int i = 0; i < n; i++) {
		fprintf(f, "tokenscope_recomputed_tokens_total{%s,type=\"prompt\"} %" PRIu64 "\n",
			labels[i], ms[i]->recomp_prompt);
		fprintf(f,
			"tokenscope_recomputed_tokens_total{%s,type=\"generated\"} %" PRIu64 "\n",
			labels[i], ms[i]->recomp_generated);
	}
	put_header(f, "tokenscope_recompute_seconds_total", "counter",
		   "Time of the GPU steps that recomputed preempted requests.");
	for (unsigned int i = 0; i < n; i++) {
		fprintf(f, "tokenscope_recompute_seconds_total{%s} ", labels[i]);
		put_seconds(f, ms[i]->recomp_ns);
		fputc('\n', f);
	}
}

static int render_models(const struct prom *p, FILE *f)
{
	const struct prom_series *ms[PROM_MAX_LABEL_SETS + 1];
	unsigned int n = series_to_render(p, ms);
	char(*labels)[LABELS_MAX] = malloc((n ? n : 1) * sizeof(*labels));

	if (!labels)
		return -ENOMEM;
	for (unsigned int i = 0; i < n; i++)
		series_labels(p, ms[i], labels[i]);

	render_request_counters(p, f, ms, labels, n);
	render_slo(p, f, ms, labels, n);
	render_recompute(p, f, ms, labels, n);
	put_header(
	    f, "tokenscope_streams_in_flight", "gauge",
	    "Requests read and not yet finished (streamed or not: whether a response streams "
	    "is known only once it starts).");
	for (unsigned int i = 0; i < n; i++)
		fprintf(f, "tokenscope_streams_in_flight{%s} %u\n", labels[i], ms[i]->inflight);

	for (int h = 0; h < PH_MAX; h++) {
		put_header(f, ph_desc[h].name, "histogram", ph_desc[h].help);
		for (unsigned int i = 0; i < n; i++)
			if (ms[i]->h[h].count)
				put_hist(f, ph_desc[h].name, labels[i], &ms[i]->h[h], ph_desc[h].b);
	}
	free(labels);
	return 0;
}

/* The i-th GPU process's counts (past the named ones, "other"), its pid label into pid. */
static const struct prom_gpu_pid *gpu_pid_at(const struct prom *p, unsigned int i, char *pid,
					     size_t len)
{
	if (i < p->ngpu_pids) {
		snprintf(pid, len, "%u", p->gpu_pids[i].pid);
		return &p->gpu_pids[i];
	}
	snprintf(pid, len, "other");
	return &p->gpu_pids[PROM_MAX_GPU_PIDS];
}

static void render_gpu(const struct prom *p, FILE *f)
{
	unsigned int n = p->ngpu_pids + (p->gpu_other_used ? 1 : 0);

	if (!p->gpu_steps)
		return;
	put_header(f, "tokenscope_gpu_steps_total", "counter",
		   "GPU steps (work between two host waits) by process and kind.");
	for (unsigned int i = 0; i < n; i++) {
		char pid[16];
		const struct prom_gpu_pid *g = gpu_pid_at(p, i, pid, sizeof(pid));

		for (int k = 0; k < STEP_KIND_MAX; k++)
			fprintf(f,
				"tokenscope_gpu_steps_total{pid=\"%s\",kind=\"%s\"} %" PRIu64 "\n",
				pid, gpu_kind_name(k), g->steps[k]);
	}
	put_header(f, "tokenscope_gpu_steps_by_mode_total", "counter",
		   "GPU steps by process, kind, mode (graph, piecewise, eager: how the work was "
		   "launched) and batch (the range of requests credited); only counts above 0.");
	for (unsigned int i = 0; i < n; i++) {
		char pid[16];
		const struct prom_gpu_pid *g = gpu_pid_at(p, i, pid, sizeof(pid));

		for (int k = 0; k < STEP_KIND_MAX; k++)
			for (int m = 0; m < MODE_MAX; m++)
				for (uint32_t b = 0; b < GPU_BATCH_BUCKETS; b++) {
					uint32_t lo, hi;
					char range[24];

					if (!g->by_mode[k][m][b])
						continue;
					gpu_batch_bucket_range(b, &lo, &hi);
					gpu_batch_range_name(lo, hi, range, sizeof(range));
					fprintf(
					    f,
					    "tokenscope_gpu_steps_by_mode_total{pid=\"%s\",kind="
					    "\"%s\",mode=\"%s\",batch=\"%s\"} %" PRIu64 "\n",
					    pid, gpu_kind_name(k), gpu_mode_name(m), range,
					    g->by_mode[k][m][b]);
				}
	}
	put_header(f, "tokenscope_gpu_steps_device_times_total", "counter",
		   "GPU steps by where their figures come from: times=\"cupti\" the device's own "
		   "(CUPTI), \"sampled-out\" eager kernels outside the sampling windows of "
		   "device times, \"host-calls\" the host's CUDA calls only.");
	for (int t = 0; t < GPU_TIMES_MAX; t++)
		fprintf(f, "tokenscope_gpu_steps_device_times_total{times=\"%s\"} %" PRIu64 "\n",
			gpu_times_name(t), p->steps_times[t]);
	put_header(f, "tokenscope_gpu_step_duration_seconds", "histogram",
		   "GPU step duration, first CUDA call to the end of the host wait, by kind.");
	for (int k = 0; k < STEP_KIND_MAX; k++) {
		char labels[32];

		if (!p->step_dur[k].count)
			continue;
		snprintf(labels, sizeof(labels), "kind=\"%s\"", gpu_kind_name(k));
		put_hist(f, "tokenscope_gpu_step_duration_seconds", labels, &p->step_dur[k],
			 &ttft_bounds);
	}
}

/* v / 10^digits exactly, without trailing zeros: "0.45", "1", "350.125". */
static void put_decimal(FILE *f, uint64_t v, unsigned int digits)
{
	uint64_t scale = 1;
	char frac[24];
	int end;

	for (unsigned int i = 0; i < digits; i++)
		scale *= 10;
	fprintf(f, "%" PRIu64, v / scale);
	if (!(v % scale))
		return;
	end = snprintf(frac, sizeof(frac), "%0*" PRIu64, (int)digits, v % scale);
	while (end > 0 && frac[end - 1] == '0')
		frac[--end] = 0;
	fprintf(f, ".%s", frac);
}

#define STR_(x) #x
#define STR(x) STR_(x)

/* gpu="N" and, when NVML gave one, uuid="..." (escaped, like every NVML string). */
#define GPU_LABELS_MAX (2 * DEV_TEXT_MAX + 64)

static void gpu_labels(const struct sampled_device *d, char *out)
{
	char *o = out + sprintf(out, "gpu=\"%u\"", d->index);

	if (d->uuid[0]) {
		*o++ = ',';
		escape_prom_label(o, "uuid", d->uuid);
	}
}

enum gpu_value { GV_UTIL, GV_MEM_USED, GV_MEM_TOTAL, GV_CLOCK, GV_POWER, GV_MAX };

static const struct {
	const char *name, *help;
} gv_desc[GV_MAX] = {
	[GV_UTIL] = { "tokenscope_gpu_utilization_ratio", "Share of NVML's last sample period in "
							  "which a kernel ran on the GPU (0 to 1; "
							  "DCGM_FI_DEV_GPU_UTIL / 100)." },
	[GV_MEM_USED] = { "tokenscope_gpu_memory_used_bytes",
			  "Device memory used, what the driver reserves included (DCGM, in MiB: "
			  "DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_RESERVED)." },
	[GV_MEM_TOTAL] = { "tokenscope_gpu_memory_total_bytes",
			   "Device memory in all (DCGM_FI_DEV_FB_TOTAL, in MiB there)." },
	[GV_CLOCK] = { "tokenscope_gpu_sm_clock_hertz",
		       "SM clock (DCGM_FI_DEV_SM_CLOCK, in MHz there)." },
	[GV_POWER] = { "tokenscope_gpu_power_watts",
		       "Power draw of the board (DCGM_FI_DEV_POWER_USAGE)." },
};

/* Whether d has value v, and it as a decimal with that many digits after the point. */
static bool gpu_value(const struct sampled_device *d, int v, uint64_t *out, unsigned int *digits)
{
	*digits = 0;
	switch (v) {
	case GV_UTIL:
		*out = d->util_pct;
		*digits = 2;
		return d->util_present;
	case GV_MEM_USED:
		*out = d->mem_used;
		return d->mem_present;
	case GV_MEM_TOTAL:
		*out = d->mem_total;
		return d->mem_present;
	case GV_CLOCK:
		*out = d->sm_clock_hz;
		return d->clock_present;
	case GV_POWER:
		*out = d->power_mw;
		*digits = 3;
		return d->power_present;
	}
	return false;
}

/* The NVML families, once a sample came: a value NVML did not give has no series, and a
 * family no device has a value of is left out. */
static void render_nvml(const struct prom *p, FILE *f)
{
	const struct device_sample *s = p->nvml;
	uint64_t unlisted = 0;
	char labels[GPU_LABELS_MAX];

	if (!s)
		return;
	put_header(f, "tokenscope_gpu_samples_total", "counter",
		   "NVML samples taken, one a second: when it stops rising the tokenscope_gpu_ "
		   "values are stale.");
	fprintf(f, "tokenscope_gpu_samples_total %" PRIu64 "\n", s->seq);
	if (s->ndevices)
		put_header(f, "tokenscope_gpu_info", "gauge",
			   "A GPU NVML sees (value 1), with its name.");
	for (uint32_t i = 0; i < s->ndevices; i++) {
		const struct sampled_device *d = &s->devices[i];
		char name[GPU_LABELS_MAX];

		gpu_labels(d, labels);
		name[0] = 0;
		if (d->name[0]) {
			name[0] = ',';
			escape_prom_label(name + 1, "name", d->name);
		}
		fprintf(f, "tokenscope_gpu_info{%s%s} 1\n", labels, name);
	}
	for (int v = 0; v < GV_MAX; v++) {
		bool header = false;

		for (uint32_t i = 0; i < s->ndevices; i++) {
			const struct sampled_device *d = &s->devices[i];
			unsigned int digits;
			uint64_t x;

			if (!gpu_value(d, v, &x, &digits))
				continue;
			if (!header)
				put_header(f, gv_desc[v].name, "gauge", gv_desc[v].help);
			header = true;
			gpu_labels(d, labels);
			fprintf(f, "%s{%s} ", gv_desc[v].name, labels);
			put_decimal(f, x, digits);
			fputc('\n', f);
		}
	}
	for (uint32_t i = 0, header = 0; i < s->ndevices; i++) {
		const struct sampled_device *d = &s->devices[i];

		unlisted += d->procs_dropped;
		for (uint32_t j = 0; j < d->nprocs; j++) {
			if (!d->procs[j].mem_present)
				continue;
			if (!header++)
				put_header(f, "tokenscope_gpu_process_memory_bytes", "gauge",
					   "Device memory used by a traced process (NVML's "
					   "usedGpuMemory; DCGM has no per-process field).");
			gpu_labels(d, labels);
			fprintf(f,
				"tokenscope_gpu_process_memory_bytes{%s,pid=\"%u\"} %" PRIu64 "\n",
				labels, d->procs[j].pid, d->procs[j].mem_bytes);
		}
	}
	if (!s->devices_dropped && !unlisted)
		return;
	put_header(
	    f, "tokenscope_gpu_unlisted", "gauge",
	    "In the latest sample: GPUs beyond the " STR(
		DEV_MAX_DEVICES) " kept "
				 "(what=\"devices\"), and compute processes beyond the " STR(
				     DEV_MAX_PROCS) " "
						    "kept per GPU, whose memory is not shown "
						    "(what=\"processes\").");
	fprintf(f, "tokenscope_gpu_unlisted{what=\"devices\"} %u\n", s->devices_dropped);
	fprintf(f, "tokenscope_gpu_unlisted{what=\"processes\"} %" PRIu64 "\n", unlisted);
}

static void render_other_requests(const struct prom *p, FILE *f)
{
	put_header(
	    f, "tokenscope_other_requests_total", "counter",
	    "Finished requests that were not inference (no model or prompt, no stream or "
	    "completion): health checks, metric scrapes, model lists, docs, the rest; not in "
	    "the request families (--requests all puts them there).");
	for (size_t k = 0; k < PROM_OTHER_KINDS; k++)
		fprintf(f, "tokenscope_other_requests_total{kind=\"%s\"} %" PRIu64 "\n",
			prom_other_kinds[k], p->other_requests[k]);
}

static void render_joined(const struct prom *p, FILE *f)
{
	put_header(f, "tokenscope_joined_requests_total", "counter",
		   "Exchanges each traced server (pid of -p or --all; \"other\" past 16) was in "
		   "when tracing began, met on its connections: reported=\"yes\" is reported from "
		   "mid-response (no TTFT, no arrival), reported=\"no\" is not reported.");
	for (uint32_t i = 0; i < p->joined.n; i++) {
		const struct joined_server *js = &p->joined.s[i];
		char pid[16];

		if (js->pid)
			snprintf(pid, sizeof(pid), "%u", js->pid);
		else
			snprintf(pid, sizeof(pid), "other");
		fprintf(f,
			"tokenscope_joined_requests_total{pid=\"%s\",reported=\"yes\"} %" PRIu64
			"\n",
			pid, js->reported);
		fprintf(
		    f, "tokenscope_joined_requests_total{pid=\"%s\",reported=\"no\"} %" PRIu64 "\n",
		    pid, js->in_flight - js->reported);
	}
}

/* What tracing costs (self_cost): only once the live tracer measured it; the BPF programs'
 * counters only while the kernel counts them (bpf_stats), said by a gauge either way. */
static void render_cost(const struct prom *p, FILE *f)
{
	const struct self_cost *c = &p->cost;

	if (!c->seq)
		return;
	put_header(f, "tokenscope_self_cpu_seconds_total", "counter",
		   "CPU time tokenscope itself used (all its threads) since it attached.");
	fprintf(f, "tokenscope_self_cpu_seconds_total %.6f\n", c->cpu_s);
	put_header(f, "tokenscope_bpf_stats_enabled", "gauge",
		   "1 while the kernel counts BPF programs' run time (kernel.bpf_stats_enabled, "
		   "or --self-stats); 0 when not: the program series are then absent.");
	fprintf(f, "tokenscope_bpf_stats_enabled %d\n", c->bpf_stats ? 1 : 0);
	if (c->bpf_stats) {
		put_header(f, "tokenscope_bpf_run_seconds_total", "counter",
			   "Run time of each of tokenscope's BPF programs as the kernel counts it "
			   "(only while bpf_stats is on), since the program was loaded.");
		for (uint32_t i = 0; i < c->nprogs; i++)
			fprintf(f, "tokenscope_bpf_run_seconds_total{program=\"%s\"} %.9f\n",
				c->progs[i].name, (double)c->progs[i].run_ns / 1e9);
		put_header(f, "tokenscope_bpf_runs_total", "counter",
			   "Runs of each of tokenscope's BPF programs as the kernel counts them "
			   "(only while bpf_stats is on), since the program was loaded.");
		for (uint32_t i = 0; i < c->nprogs; i++)
			fprintf(f, "tokenscope_bpf_runs_total{program=\"%s\"} %" PRIu64 "\n",
				c->progs[i].name, c->progs[i].runs);
	}
	if (!c->ring_bytes)
		return;
	put_header(f, "tokenscope_ring_buffer_bytes", "gauge",
		   "Size of the ring buffer the kernel hands records over in (--ring-buffer-mb).");
	fprintf(f, "tokenscope_ring_buffer_bytes %" PRIu64 "\n", c->ring_bytes);
	put_header(f, "tokenscope_ring_buffer_peak_ratio", "gauge",
		   "The most the ring buffer held waiting at any drain since tokenscope attached, "
		   "as a share of its size (records are lost at 1).");
	fprintf(f, "tokenscope_ring_buffer_peak_ratio %.4f\n",
		(double)c->ring_peak_bytes / (double)c->ring_bytes);
}

/* Only once a cap was reached, like the "other" series it counts. */
static void render_overflow(const struct prom *p, FILE *f)
{
	if (!p->other_used && !p->gpu_other_used)
		return;
	put_header(f, "tokenscope_label_overflow_total", "counter",
		   "Finished requests (family=\"requests\") and GPU steps (family=\"gpu_steps\") "
		   "counted under the \"other\" label set: the cap on distinct label sets "
		   "(model, pid, container; GPU process) was reached.");
	fprintf(f, "tokenscope_label_overflow_total{family=\"requests\"} %" PRIu64 "\n",
		p->overflow_requests);
	fprintf(f, "tokenscope_label_overflow_total{family=\"gpu_steps\"} %" PRIu64 "\n",
		p->gpu_overflow_steps);
}

/* The loss table's counters of one family, a series each under label. */
static void put_losses(FILE *f, const struct loss_report *l, enum loss_prom prom,
		       const char *family, const char *label)
{
	for (size_t i = 0; i < loss_ncounters; i++)
		if (loss_counters[i].prom == prom)
			fprintf(f, "%s{%s=\"%s\"} %" PRIu64 "\n", family, label,
				loss_counters[i].label, loss_value(l, &loss_counters[i]));
}

/* What the summary's `lost` and `dropped` lines say, as counters. */
static void render_loss(const struct prom *p, FILE *f)
{
	const struct loss_report *l = &p->loss;

	put_header(
	    f, "tokenscope_dropped_bytes_total", "counter",
	    "Traced bytes the tracer did not see: in records the kernel lost (where=\"kernel\"), "
	    "beyond --capture-bytes (\"capture\"), missing from a connection's stream "
	    "(\"stream\").");
	put_losses(f, l, LOSS_P_BYTES, "tokenscope_dropped_bytes_total", "where");
	put_header(
	    f, "tokenscope_dropped_total", "counter",
	    "Things the tracer let go rather than report wrong numbers: framing lost after a "
	    "gap or bad bytes, malformed records, sockets the kernel table had no room for, "
	    "requests never finished or read past the pipelining limit, responses to requests "
	    "not seen, stream frames over the size limit or damaged by missing bytes, "
	    "buffers refused at the connections' memory cap, failed reads of traced bytes from "
	    "the process's memory.");
	put_losses(f, l, LOSS_P_DROPPED, "tokenscope_dropped_total", "what");
	/* Device times: only where a CUPTI library reported (as the summary's line). */
	if (l->device_times || l->device_abi_bad) {
		put_header(
		    f, "tokenscope_device_times_lost_total", "counter",
		    "What device times (the CUPTI library) missed: records CUPTI dropped "
		    "(what=\"cupti_dropped\"), buffer requests refused with the library's pool "
		    "in use (\"buffer_refused\"), runs in no GPU step (\"unplaced_run\"), steps "
		    "shown before their device times were in (\"late_step\"), records of a "
		    "library of another version (\"other_version\").");
		put_losses(f, l, LOSS_P_DEVICE, "tokenscope_device_times_lost_total", "what");
	}
	/* TLS: only where a connection carried it (as the summary's tls line). */
	if (l->tls_conns || l->tls_unjoined) {
		put_header(f, "tokenscope_tls_connections_total", "counter",
			   "Connections that carried TLS, by whether their plaintext was seen "
			   "(plaintext=\"none\": ended without any, the TLS library not hooked).");
		fprintf(f, "tokenscope_tls_connections_total{plaintext=\"seen\"} %" PRIu64 "\n",
			l->tls_conns - l->tls_unread);
		fprintf(f, "tokenscope_tls_connections_total{plaintext=\"none\"} %" PRIu64 "\n",
			l->tls_unread);
		put_header(f, "tokenscope_tls_unjoined_calls_total", "counter",
			   "TLS read and write calls whose socket was not found: their plaintext "
			   "is lost.");
		fprintf(f, "tokenscope_tls_unjoined_calls_total %" PRIu64 "\n", l->tls_unjoined);
	}
	put_header(f, "tokenscope_traced_processes", "gauge",
		   "Processes traced now: those named with -p or found by --all, and their "
		   "descendants; one that exits leaves.");
	fprintf(f, "tokenscope_traced_processes %u\n", p->traced);
	if (!p->nfeatures)
		return;
	put_header(f, "tokenscope_feature", "gauge",
		   "A kernel feature the BPF programs use, always 1: state=\"off\" where this "
		   "kernel lacks it and a stand-in or nothing does its work (tokenscope check "
		   "says what each turns off).");
	for (uint32_t i = 0; i < p->nfeatures; i++)
		fprintf(f, "tokenscope_feature{name=\"%s\",state=\"%s\"} 1\n", p->features[i].name,
			p->features[i].on ? "on" : "off");
}

void prom_set_extra(struct prom *p, void (*render)(void *ctx, FILE *f), void *ctx)
{
	p->extra = render;
	p->extra_ctx = ctx;
	p->dirty = true;
}

int prom_render(struct prom *p, char **buf, size_t *len)
{
	FILE *f;
	int err;

	*buf = NULL;
	*len = 0;
	f = open_memstream(buf, len);
	if (!f)
		return -ENOMEM;
	err = render_models(p, f);
	put_header(f, "tokenscope_events_lost_total", "counter",
		   "Records the kernel could not put in the ring buffer (requests open then may be "
		   "reported lost).");
	fprintf(f, "tokenscope_events_lost_total %" PRIu64 "\n", p->lost_events);
	render_loss(p, f);
	render_overflow(p, f);
	render_other_requests(p, f);
	render_joined(p, f);
	render_cost(p, f);
	render_gpu(p, f);
	render_nvml(p, f);
	if (p->extra)
		p->extra(p->extra_ctx, f);
	if (ferror(f))
		err = -ENOMEM;
	if (fclose(f) && !err)
		err = -ENOMEM;
	if (err) {
		free(*buf);
		*buf = NULL;
		*len = 0;
	}
	return err;
}
