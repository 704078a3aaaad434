/* SPDX-License-Identifier: MIT */
/*
 * The OpenTelemetry span model: what one finished request becomes as a trace, before any
 * encoding or sending.
 *
 * A request is a SERVER span "{gen_ai.operation.name} {model}" (GenAI semantic conventions;
 * "{method} {path}" when the path is no GenAI operation) from arrival to end, with events
 * first_token and last_token, and INTERNAL child spans queue, prefill and decode when the GPU
 * attribution knows them. An anomalous request keeps its token times, for an event per token.
 *
 * A request's own ids (its span's, and the trace it starts when it came with no trace context)
 * are a keyed hash of what names it in the run (pid, connection, sequence), so that a proxy's
 * upstream call (role client) finds its served request's span and trace from its pair's names
 * (request.peer) in whichever order the two finish. A request that came with a valid W3C
 * traceparent joins that trace (otlp_span_ids: docs/otlp.md, "Trace context"). The children's
 * ids come from a generator seeded once (xoshiro256**): unique and unpredictable enough to sample
 * on, not secret. Sampling is OpenTelemetry's consistent probability sampling: a trace
 * is kept when its id's low 56 bits (random under W3C trace context level 2) are at or above
 * a threshold set by the ratio, so the same id always gets the same decision.
 */
#ifndef TS_OTLP_SPAN_H
#define TS_OTLP_SPAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline/request.h"
#include "pipeline/step.h"

#define OTLP_TRACE_ID_LEN 16
#define OTLP_SPAN_ID_LEN 8

/* Why a request was exported in full (a bit mask). */
enum {
	OTLP_SLOW_TTFT = 1,
	OTLP_SLOW_ITL = 2,
	OTLP_NOT_OK = 4,
	OTLP_SLO_MISSED = 8, /* it missed an objective (slo.h) */
};

/* Why a request's trace was exported at all (tokenscope.kept): an anomaly (its bits above),
 * one of the first requests after the start, or the sampling ratio. */
enum otlp_kept {
	OTLP_KEPT_ANOMALY,
	OTLP_KEPT_WARM_UP,
	OTLP_KEPT_RANDOM,
};

enum { OTLP_CHILD_QUEUE, OTLP_CHILD_PREFILL, OTLP_CHILD_DECODE, OTLP_CHILD_MAX };

/* Preemptions of a request drawn as events (batch.h keeps as many). */
#define OTLP_PREEMPT_EVENTS 8

/* A span's place in its trace. */
struct otlp_ids {
	uint8_t trace_id[OTLP_TRACE_ID_LEN], span_id[OTLP_SPAN_ID_LEN];
	uint8_t parent_id[OTLP_SPAN_ID_LEN]; /* all zeros: none (a root, as this node sees it) */
	/* A served request whose traceparent its upstream call forwarded unchanged: that
	 * parent-id, which the upstream call's span now has, is not its parent (a cycle). */
	bool forwarded;
};

struct otlp_span {
	uint8_t trace_id[OTLP_TRACE_ID_LEN], span_id[OTLP_SPAN_ID_LEN];
	uint8_t parent_id[OTLP_SPAN_ID_LEN]; /* all zeros: none */
	bool has_parent, forwarded;
	uint8_t forwarded_parent[OTLP_SPAN_ID_LEN]; /* forwarded: that parent-id */
	char trace_state[TRACECTX_STATE_MAX + 1];   /* the request's tracestate, "" none */
	char request_id[TRACECTX_REQID_MAX];	    /* x-request-id, "" none */
	struct request_ends ends;
	struct req_disagg disagg;
	uint8_t child_id[OTLP_CHILD_MAX][OTLP_SPAN_ID_LEN];
	uint64_t child_start[OTLP_CHILD_MAX], child_end[OTLP_CHILD_MAX]; /* end 0: unknown */
	uint32_t pid, seq;
	enum otlp_kept kept;
	struct slo_verdict slo; /* its objectives and verdicts (slo.any false: none) */
	struct req_labels labels; /* its --label values (labels.spec NULL: none asked for) */
	struct workload wl; /* where its process runs: the span's resource */
	char conn[112], method[16], path[256], model[128];
	char error_reason[FRAME_REASON_MAX]; /* a stream error's (request.h) */
	const char *op;			     /* GenAI operation, or NULL */
	const char *api_type; /* openai.api.type: "chat_completions", "responses", or NULL */
	int status;
	enum outcome outcome;
	enum frame_format format;
	uint64_t arrival_ns, end_ns, first_token_ns, last_token_ns; /* token times 0: none */
	uint64_t start_ns; /* the span's: arrival, or the first token where that came first */
	int64_t ttft_ns, tpot_ns, itl_max_ns, tokens, prompt_tokens, max_tokens;
	bool tokens_from_usage;
	bool client; /* the traced process made the request: a CLIENT span to its upstream */
	unsigned anomaly;
	uint32_t dropped_events;
	/* preemptions (batch.h) and, for the first OTLP_PREEMPT_EVENTS, when it went out of the
	 * batch and came back: events gen_ai.preempted and gen_ai.resumed */
	uint32_t preemptions, npreempt;
	int64_t preempted_ns;
	uint64_t preempt_from[OTLP_PREEMPT_EVENTS], preempt_to[OTLP_PREEMPT_EVENTS];
	/* its slow gaps (stall.h): all counted, the first STALL_KEEP as events gen_ai.stall at
	 * each gap's start, with the cause and the first request blamed ("conn#seq") */
	uint32_t stalls, nstall;
	struct {
		uint64_t from_ns, gap_ns, cause_ns;
		enum stall_cause cause;
		bool likely;
		char by[128];
	} stall[STALL_KEEP];
	uint32_t ntokens; /* token_ns[] kept: anomalous requests only */
	uint64_t token_ns[];
};

struct otlp_rng {
	uint64_t s[4];
};

struct gpu_attribution;

void otlp_rng_seed(struct otlp_rng *g, uint64_t seed);
/*
 * The ids of r's span, trace and parent; key: the run's secret for its own ids. A served request
 * with a valid traceparent is in its trace, child of its parent-id (none when forwarded: its
 * upstream call carries that very traceparent); one without starts a trace of its own. A request
 * made as a client with a valid traceparent is in its trace, and is the span that parent-id
 * names when it was made for no served request seen or for the one whose traceparent it
 * forwards; otherwise (a gateway that wrote a traceparent of its own: its own tracer exports
 * that span) it has its own id. Without one, it is in its served pair's trace, or one of its
 * own. A client's parent is its served pair's span when both are in one trace.
 *
 * Whatever the traffic, the parents make a tree. A served span's parent is an id from the wire;
 * the only span of ours that can have such an id is a client span that took it, and that one is
 * unpaired (no parent) or the child of a served span that has none. A client span's parent is a
 * served span's own id, a keyed hash no sender knows. So every chain of our spans ends within
 * three steps, and none can come back to where it started.
 */
void otlp_span_ids(uint64_t key, const struct request *r, struct otlp_ids *out);
/* An id of len bytes that is not all zeros (the OTLP encoding's "invalid"). */
void otlp_rng_id(struct otlp_rng *g, uint8_t *id, size_t len);

/* The threshold that keeps a share `ratio` (0..1) of ids; otlp_keep says whether an id is. */
uint64_t otlp_keep_threshold(double ratio);
bool otlp_keep(const uint8_t trace_id[OTLP_TRACE_ID_LEN], uint64_t threshold);
bool otlp_sampled(const uint8_t trace_id[OTLP_TRACE_ID_LEN], double ratio);

/* The OTLP_* reasons a request is anomalous: TTFT above slow_ttft_ns, a token gap above
 * slow_itl_ns (each <= 0: not checked), an outcome that is not ok. */
unsigned otlp_anomaly(int64_t slow_ttft_ns, int64_t slow_itl_ns, const struct request *r,
		      const struct request_metrics *m);
/* gen_ai.operation.name from the path (OpenAI, Anthropic, Ollama, TGI routes), else from the
 * stream's format; NULL when the request is no GenAI operation tokenscope knows. */
const char *otlp_operation(const struct request *r);
/* openai.api.type of an OpenAI request ("chat_completions", "responses"), NULL for others. */
const char *otlp_openai_api(const struct request *r);

/* The trace of request r (ga may be NULL), its ids given, its children's new from g; an anomalous
 * one keeps up to max_token_events token times and counts the rest as dropped events. NULL: no
 * memory. */
struct otlp_span *otlp_span_new(struct otlp_rng *g, const struct request *r,
				const struct request_metrics *m, const struct gpu_attribution *ga,
				const struct otlp_ids *ids, unsigned anomaly,
				uint32_t max_token_events);
/* Its encoded size, estimated from above: bounds batches and the queue without encoding. */
uint64_t otlp_span_cost(const struct otlp_span *s);
void otlp_span_free(struct otlp_span *s);

#endif
