/* SPDX-License-Identifier: MIT */
/*
 * Service-level objectives per request (docs/slo.md): the objectives --slo sets, optionally per
 * model, those a request brings in its own head (llm-d's x-llm-d-slo-ttft-ms and
 * x-llm-d-slo-tpot-ms), each request's verdict, and the tallies the sinks keep of them
 * (attainment per objective and overall, per model, and goodput).
 *
 * A request's objectives: the rule without a model, then, metric by metric, the first rule
 * whose model pattern (fnmatch) matches its model, then its own headers. A verdict per
 * objective: met (the figure is within its limit), missed (beyond it, or the request failed:
 * an HTTP error, an error frame, the server closing early) or unknown (the figure does not
 * exist, or was not seen: joined mid-response, bytes lost). The overall verdict: aborted when
 * the client left before the end (counted apart, as guidellm does); missed when any objective
 * was; unknown when the figures were not seen, or one that could exist is unknown; met
 * otherwise. TPOT of a request with fewer than two tokens cannot exist: it leaves the overall
 * verdict alone.
 */
#ifndef TS_SLO_H
#define TS_SLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum slo_metric {
	SLO_TTFT,
	SLO_TPOT,
	SLO_E2E,
	SLO_METRICS,
};

/* The verdicts; SLO_NONE: no objective for that metric. */
enum slo_result {
	SLO_NONE,
	SLO_MET,
	SLO_MISSED,
	SLO_UNKNOWN,
	SLO_ABORTED, /* overall only: the client left before the end */
	SLO_RESULTS,
};

/* Where an objective came from. */
enum slo_from {
	SLO_FROM_FLAG,	 /* --slo */
	SLO_FROM_HEADER, /* the request's own head (llm-d) */
};

#define SLO_RULES_MAX 16
#define SLO_MODEL_PATTERN_MAX 128

struct slo_rule {
	char model[SLO_MODEL_PATTERN_MAX]; /* an fnmatch pattern; "": every model */
	int64_t limit_ns[SLO_METRICS];	   /* 0: none */
};

struct slo_rules {
	struct slo_rule rule[SLO_RULES_MAX];
	uint32_t n;
};

/* The objectives a request's head states (llm-d's headers); 0: none. bad: a header of theirs
 * came whose value is no number of milliseconds (ignored). */
struct slo_head {
	int64_t limit_ns[SLO_METRICS];
	bool bad;
};

struct slo_verdict {
	bool any; /* the request had an objective: the rest is set */
	int64_t limit_ns[SLO_METRICS];
	enum slo_from from[SLO_METRICS];
	enum slo_result result[SLO_METRICS];
	enum slo_result overall;
};

extern const char *const slo_metric_names[SLO_METRICS]; /* "ttft", "tpot", "e2e" */
const char *slo_result_name(enum slo_result r);		/* "met", "missed", ... */

/*
 * One --slo argument into rs: "ttft<=2s,tpot<=80ms,e2e<=30s", optionally after
 * "model=PATTERN:". A rule for a model pattern already given adds to it (a metric named again
 * replaces its limit). 0, or -EINVAL with why in msg.
 */
int slo_parse(struct slo_rules *rs, const char *text, char *msg, size_t msglen);
/* A rule as --slo writes it ("model=llama*:ttft<=1s,e2e<=30s"), into out. */
void slo_rule_text(const struct slo_rule *r, char *out, size_t n);

/* A head field (name case-insensitive, value as sent); true when it was one of llm-d's. */
bool slo_head_field(struct slo_head *h, const char *name, size_t nlen, const char *val,
		    size_t vlen);

struct request;
struct request_metrics;
/* r's verdict under rs (NULL: no rules) and its own head; v->any false when it had none. */
void slo_judge(const struct slo_rules *rs, const struct request *r,
	       const struct request_metrics *m, struct slo_verdict *v);

/*
 * A tally of verdicts: per objective and overall, how many of each result, and the goodput
 * (requests that met all their objectives, and their output tokens). Kept per model up to
 * SLO_TALLY_MODELS models; later models together under SLO_TALLY_OTHER.
 */
#define SLO_TALLY_MODELS 8
#define SLO_TALLY_MODEL_MAX 64
#define SLO_TALLY_OTHER "(others)"

struct slo_counts {
	uint64_t n[SLO_METRICS + 1][SLO_RESULTS]; /* [SLO_METRICS]: overall */
	uint64_t good_requests, good_tokens;
	uint64_t from_header; /* requests with an objective from their head */
};

struct slo_tally {
	struct slo_counts all;
	uint32_t nmodels;
	struct {
		char model[SLO_TALLY_MODEL_MAX]; /* "" : none known */
		struct slo_counts c;
	} model[SLO_TALLY_MODELS + 1];
	uint64_t head_bad; /* requests whose llm-d header values were not numbers */
};

/* Adds a verdict (any false: nothing) of a request of model with tokens output tokens. */
void slo_tally_add(struct slo_tally *t, const char *model, const struct slo_verdict *v,
		   int64_t tokens, bool head_bad);
/* met / (met + missed) of one objective (SLO_METRICS: overall); NaN when none was judged. */
double slo_attainment(const struct slo_counts *c, int metric);
/* Requests judged on an objective (met + missed). */
uint64_t slo_judged(const struct slo_counts *c, int metric);

#endif
