// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/step.h"
#include "sinks/otlp_span.h"

/* What a trace costs in the body, to bound batches and the queue without encoding twice:
 * measured on encoded spans, with margin for longer names (a request span about
 * 1.7 KB, each child 215 bytes, a token event 110). */
#define OTLP_SPAN_BYTES 3072
#define OTLP_EVENT_BYTES 128
/* An attribute's key and framing, for those of trace context and join keys. */
#define OTLP_TRAFFIC_KEY_BYTES 96
/* Consistent probability sampling reads the trace id's low 56 bits. */
#define OTLP_RANDOM_BITS 56

/* xoshiro256** seeded through splitmix64: ids need to be unique and unpredictable enough to
 * sample on, not secret. */
static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4])
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

void otlp_rng_seed(struct otlp_rng *g, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		g->s[i] = splitmix64(&seed);
}

void otlp_rng_id(struct otlp_rng *g, uint8_t *id, size_t len)
{
	bool zero = true;

	while (zero) {
		for (size_t i = 0; i < len; i += 8) {
			uint64_t v = rng_next(g->s);

			memcpy(id + i, &v, len - i < 8 ? len - i : 8);
		}
		for (size_t i = 0; i < len; i++)
			zero &= !id[i];
	}
}

/* What names a request in the run, hashed under the key; salt tells the ids apart. */
static uint64_t name_hash(uint64_t key, uint32_t pid, uint64_t conn_id, uint32_t seq, uint64_t salt)
{
	uint64_t x = key ^ salt;

	x = splitmix64(&x) ^ pid;
	x = splitmix64(&x) ^ conn_id;
	x = splitmix64(&x) ^ seq;
	return splitmix64(&x);
}

static void put_u64(uint8_t *id, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		id[i] = (uint8_t)(v >> (56 - 8 * i));
}

/* A request's own span id and the trace it starts, from its name; never all zeros. */
static void own_ids(uint64_t key, uint32_t pid, uint64_t conn_id, uint32_t seq,
		    uint8_t span_id[OTLP_SPAN_ID_LEN], uint8_t trace_id[OTLP_TRACE_ID_LEN])
{
	put_u64(span_id, name_hash(key, pid, conn_id, seq, 1) | 1);
	put_u64(trace_id, name_hash(key, pid, conn_id, seq, 2));
	put_u64(trace_id + 8, name_hash(key, pid, conn_id, seq, 3) | 1);
}

void otlp_span_ids(uint64_t key, const struct request *r, struct otlp_ids *out)
{
	const struct trace_parent *tp = &r->trace.tp;
	uint8_t pair_span[OTLP_SPAN_ID_LEN], pair_trace[OTLP_TRACE_ID_LEN];

	memset(out, 0, sizeof(*out));
	own_ids(key, r->pid, r->conn_id, r->seq, out->span_id, out->trace_id);
	if (!r->client) {
		if (!tp->valid)
			return;
		memcpy(out->trace_id, tp->trace_id, OTLP_TRACE_ID_LEN);
		out->forwarded = request_trace_forwarded(r);
		if (!out->forwarded)
			memcpy(out->parent_id, tp->parent_id, OTLP_SPAN_ID_LEN);
		return;
	}
	/* The served request it was made for: the same process's, its names in r->peer. */
	if (r->peer.set) {
		own_ids(key, r->pid, r->peer.conn_id, r->peer.seq, pair_span, pair_trace);
		if (r->peer.tp.valid)
			memcpy(pair_trace, r->peer.tp.trace_id, OTLP_TRACE_ID_LEN);
	}
	if (tp->valid) {
		memcpy(out->trace_id, tp->trace_id, OTLP_TRACE_ID_LEN);
		/* The span its header names only where that cannot close a loop: made for no served
		 * request seen, or for the one whose traceparent it forwards unchanged, which then
		 * has no parent (otlp_span_ids in otlp_span.h says why this makes a tree). */
		if (!r->peer.set || tracectx_same(tp, &r->peer.tp))
			memcpy(out->span_id, tp->parent_id, OTLP_SPAN_ID_LEN);
	} else if (r->peer.set) {
		memcpy(out->trace_id, pair_trace, OTLP_TRACE_ID_LEN);
	}
	if (r->peer.set && !memcmp(out->trace_id, pair_trace, OTLP_TRACE_ID_LEN))
		memcpy(out->parent_id, pair_span, OTLP_SPAN_ID_LEN);
}

uint64_t otlp_keep_threshold(double ratio)
{
	const uint64_t all = 1ull << OTLP_RANDOM_BITS;

	if (!(ratio > 0))
		return all;
	if (ratio >= 1)
		return 0;
	return (uint64_t)((1.0 - ratio) * (double)all);
}

static uint64_t id_randomness(const uint8_t trace_id[OTLP_TRACE_ID_LEN])
{
	uint64_t r = 0;

	for (int i = OTLP_TRACE_ID_LEN - OTLP_RANDOM_BITS / 8; i < OTLP_TRACE_ID_LEN; i++)
		r = r << 8 | trace_id[i];
	return r;
}

bool otlp_keep(const uint8_t trace_id[OTLP_TRACE_ID_LEN], uint64_t threshold)
{
	return id_randomness(trace_id) >= threshold;
}

bool otlp_sampled(const uint8_t trace_id[OTLP_TRACE_ID_LEN], double ratio)
{
	return otlp_keep(trace_id, otlp_keep_threshold(ratio));
}

const char *otlp_operation(const struct request *r)
{
	const char *op = request_path_operation(r);

	if (op)
		return op;
	switch (r->format) {
	case FMT_OPENAI_CHAT:
	case FMT_ANTHROPIC:
	case FMT_OPENAI_RESPONSES:
		return "chat";
	case FMT_OPENAI_COMPLETION:
	case FMT_TGI:
		return "text_completion";
	default:
		return NULL;
	}
}

const char *otlp_openai_api(const struct request *r)
{
	if (r->format == FMT_OPENAI_RESPONSES || request_path_ends(r, "/v1/responses"))
		return "responses";
	if (r->format == FMT_OPENAI_CHAT || request_path_ends(r, "/chat/completions"))
		return "chat_completions";
	return NULL;
}

unsigned otlp_anomaly(int64_t slow_ttft_ns, int64_t slow_itl_ns, const struct request *r,
		      const struct request_metrics *m)
{
	unsigned a = 0;

	if (slow_ttft_ns > 0 && m->ttft_ns > slow_ttft_ns)
		a |= OTLP_SLOW_TTFT;
	if (slow_itl_ns > 0 && m->itl_max_ns > slow_itl_ns)
		a |= OTLP_SLOW_ITL;
	if (r->outcome != OUTCOME_OK)
		a |= OTLP_NOT_OK;
	if (m->slo.overall == SLO_MISSED)
		a |= OTLP_SLO_MISSED;
	return a;
}

uint64_t otlp_span_cost(const struct otlp_span *s)
{
	const struct req_disagg *d = &s->disagg;
	/* The strings from traffic a span may carry besides, at their lengths (JSON escaping at
	 * most doubles a printable one), and a key and its framing each. */
	uint64_t extra = 2 * (strlen(s->trace_state) + strlen(s->request_id) +
			      strlen(d->remote_engine_id) + strlen(d->remote_request_id) +
			      strlen(d->remote_host) + strlen(d->bootstrap_host)) +
			 (s->forwarded || s->request_id[0] || reqbody_has_disagg(d) ? 12 : 0) *
			     OTLP_TRAFFIC_KEY_BYTES +
			 (s->slo.any ? 1 + 3 * SLO_METRICS : 0) * OTLP_TRAFFIC_KEY_BYTES +
			 (s->labels.spec ? s->labels.spec->n : 0) *
			     (OTLP_TRAFFIC_KEY_BYTES + 2 * REQ_LABEL_VALUE_MAX);

	return OTLP_SPAN_BYTES + extra +
	       (uint64_t)(s->ntokens + 2 + 2 * s->npreempt + 4 * s->nstall) * OTLP_EVENT_BYTES;
}

/* What the span's events show of the engine's batch: its times out of the batch
 * (preemptions) and its stalls, the first of each. */
static void span_batch_events(struct otlp_span *s, const struct gpu_attribution *ga)
{
	if (ga && ga->has_steps && ga->preemptions) {
		s->preemptions = ga->preemptions;
		s->preempted_ns = ga->preempted_ns;
		s->npreempt = ga->npreempt_times < OTLP_PREEMPT_EVENTS ? ga->npreempt_times
								       : OTLP_PREEMPT_EVENTS;
		for (uint32_t i = 0; i < s->npreempt && ga->preempt_from; i++) {
			s->preempt_from[i] = ga->preempt_from[i];
			s->preempt_to[i] = ga->preempt_to[i];
		}
	}
	for (uint32_t i = 0; ga && ga->stalls && i < ga->stalls->nkept; i++) {
		const struct stall *v = &ga->stalls->v[i];

		s->stall[i].from_ns = v->from_ns;
		s->stall[i].gap_ns = v->gap_ns;
		s->stall[i].cause_ns = v->cause_ns;
		s->stall[i].cause = v->cause;
		s->stall[i].likely = v->likely;
		if (v->nby)
			snprintf(s->stall[i].by, sizeof(s->stall[i].by), "%.110s#%u", v->by[0].conn,
				 v->by[0].seq);
		s->nstall++;
	}
	s->stalls = ga && ga->stalls ? ga->stalls->n : 0;
}

struct otlp_span *otlp_span_new(struct otlp_rng *g, const struct request *r,
				const struct request_metrics *m, const struct gpu_attribution *ga,
				const struct otlp_ids *ids, unsigned anomaly,
				uint32_t max_token_events)
{
	uint32_t keep = anomaly ? r->ntokens : 0;
	struct otlp_span *s;

	if (keep > max_token_events)
		keep = max_token_events;
	s = calloc(1, sizeof(*s) + (size_t)keep * sizeof(s->token_ns[0]));
	if (!s)
		return NULL;
	memcpy(s->trace_id, ids->trace_id, OTLP_TRACE_ID_LEN);
	memcpy(s->span_id, ids->span_id, OTLP_SPAN_ID_LEN);
	memcpy(s->parent_id, ids->parent_id, OTLP_SPAN_ID_LEN);
	for (int i = 0; i < OTLP_SPAN_ID_LEN; i++)
		s->has_parent |= ids->parent_id[i] != 0;
	s->forwarded = ids->forwarded;
	if (s->forwarded)
		memcpy(s->forwarded_parent, r->trace.tp.parent_id, OTLP_SPAN_ID_LEN);
	/* tracestate goes with the traceparent the span is in (the request's own). */
	if (r->trace.tp.valid)
		snprintf(s->trace_state, sizeof(s->trace_state), "%s", r->trace.state);
	snprintf(s->request_id, sizeof(s->request_id), "%s", r->trace.request_id);
	s->ends = r->ends;
	s->disagg = r->info.disagg;
	s->pid = r->pid;
	s->wl = r->workload;
	s->seq = r->seq;
	snprintf(s->conn, sizeof(s->conn), "%s", r->conn);
	s->client = r->client;
	snprintf(s->method, sizeof(s->method), "%s", r->method);
	snprintf(s->path, sizeof(s->path), "%s", r->path);
	snprintf(s->model, sizeof(s->model), "%s", r->info.model);
	s->op = otlp_operation(r);
	s->api_type = otlp_openai_api(r);
	snprintf(s->error_reason, sizeof(s->error_reason), "%s", r->error_reason);
	s->status = r->status;
	s->outcome = r->outcome;
	s->format = r->format;
	s->arrival_ns = r->arrival_ns;
	if (r->ntokens) {
		s->first_token_ns = r->token_ns[0];
		s->last_token_ns = r->token_ns[r->ntokens - 1];
	}
	/* The span holds its events: a stream may begin before the request is whole (a gRPC
	 * or HTTP/2 stream the client ends later), and then it starts at its first token. */
	s->start_ns = s->first_token_ns && (!s->arrival_ns || s->first_token_ns < s->arrival_ns)
			  ? s->first_token_ns
			  : s->arrival_ns;
	/* A request reported at the end of tracing may have no end of its own. */
	s->end_ns = r->end_ns >= s->start_ns ? r->end_ns : s->start_ns;
	if (s->end_ns < s->last_token_ns)
		s->end_ns = s->last_token_ns;
	s->ttft_ns = m->ttft_ns;
	s->tpot_ns = m->tpot_ns;
	s->itl_max_ns = m->itl_max_ns;
	s->tokens = m->tokens;
	s->tokens_from_usage = m->tokens_from_usage;
	s->prompt_tokens = r->prompt_tokens;
	s->max_tokens = r->info.max_tokens;
	s->anomaly = anomaly;
	s->slo = m->slo;
	s->labels = r->labels;
	s->ntokens = keep;
	s->dropped_events = anomaly ? r->ntokens - keep : 0;
	if (keep)
		memcpy(s->token_ns, r->token_ns, (size_t)keep * sizeof(s->token_ns[0]));
	if (ga && ga->queue_ns >= 0 && ga->prefill_ns >= 0) {
		s->child_start[OTLP_CHILD_QUEUE] = r->arrival_ns;
		s->child_end[OTLP_CHILD_QUEUE] = r->arrival_ns + ga->queue_ns;
		s->child_start[OTLP_CHILD_PREFILL] = s->child_end[OTLP_CHILD_QUEUE];
		s->child_end[OTLP_CHILD_PREFILL] = s->child_end[OTLP_CHILD_QUEUE] + ga->prefill_ns;
	}
	span_batch_events(s, ga);
	if (ga && ga->decode_ns >= 0 && r->ntokens) {
		s->child_start[OTLP_CHILD_DECODE] = r->first_token_ns;
		s->child_end[OTLP_CHILD_DECODE] = r->first_token_ns + ga->decode_ns;
	}
	for (int i = 0; i < OTLP_CHILD_MAX; i++)
		if (s->child_end[i])
			otlp_rng_id(g, s->child_id[i], OTLP_SPAN_ID_LEN);
	return s;
}

void otlp_span_free(struct otlp_span *s)
{
	free(s);
}
