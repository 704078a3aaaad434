// SPDX-License-Identifier: MIT
/* Service-level objectives per request; the rules are in slo.h and docs/slo.md. */
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/duration.h"
#include "lib/ows.h"
#include "pipeline/request.h"
#include "pipeline/slo.h"

const char *const slo_metric_names[SLO_METRICS] = {
	[SLO_TTFT] = "ttft",
	[SLO_TPOT] = "tpot",
	[SLO_E2E] = "e2e",
};

const char *slo_result_name(enum slo_result r)
{
	static const char *const names[SLO_RESULTS] = {
		[SLO_NONE] = "none",	   [SLO_MET] = "met",	      [SLO_MISSED] = "missed",
		[SLO_UNKNOWN] = "unknown", [SLO_ABORTED] = "aborted",
	};

	return (unsigned)r < SLO_RESULTS ? names[r] : "none";
}

static const char SLO_FORM[] = "expected [model=PATTERN:]METRIC<=DURATION[,...], e.g. "
			       "'ttft<=2s,tpot<=80ms,e2e<=30s' or 'model=llama*:ttft<=1s'; "
			       "METRIC is ttft, tpot or e2e";

static int slo_fail(char *msg, size_t n, const char *text, const char *why)
{
	snprintf(msg, n, "bad --slo '%s': %s; %s", text, why, SLO_FORM);
	return -EINVAL;
}

/* One "metric<=duration" of len bytes into limits. */
static int slo_term(const char *term, size_t len, int64_t *limits, const char *text, char *msg,
		    size_t n)
{
	char buf[64], *op;
	double s;
	int metric = -1;

	if (len >= sizeof(buf))
		return slo_fail(msg, n, text, "an objective is too long");
	memcpy(buf, term, len);
	buf[len] = '\0';
	op = strstr(buf, "<=");
	if (!op)
		return slo_fail(msg, n, text, "an objective needs '<='");
	*op = '\0';
	for (int i = 0; i < SLO_METRICS; i++)
		if (!strcasecmp(buf, slo_metric_names[i]))
			metric = i;
	if (metric < 0)
		return slo_fail(msg, n, text, "unknown metric");
	if (!duration_parse(op + 2, &s) || s <= 0)
		return slo_fail(msg, n, text,
				"a limit is a duration above 0 with a unit (80ms, 2s)");
	limits[metric] = (int64_t)(s * 1e9);
	/* Below a nanosecond, a limit of 0 would read as none. */
	if (!limits[metric])
		limits[metric] = 1;
	return 0;
}

int slo_parse(struct slo_rules *rs, const char *text, char *msg, size_t msglen)
{
	int64_t limits[SLO_METRICS] = { 0 };
	char model[SLO_MODEL_PATTERN_MAX] = "";
	const char *p = text, *colon;
	struct slo_rule *r = NULL;
	bool any = false;

	if (!strncmp(p, "model=", 6)) {
		colon = strchr(p, ':');
		if (!colon)
			return slo_fail(msg, msglen, text, "'model=PATTERN' ends with ':'");
		if (colon == p + 6)
			return slo_fail(msg, msglen, text, "an empty model pattern");
		if ((size_t)(colon - p - 6) >= sizeof(model))
			return slo_fail(msg, msglen, text, "the model pattern is too long");
		memcpy(model, p + 6, (size_t)(colon - p - 6));
		p = colon + 1;
	}
	while (*p) {
		size_t len = strcspn(p, ",");

		if (!len)
			return slo_fail(msg, msglen, text, "an empty objective");
		if (slo_term(p, len, limits, text, msg, msglen))
			return -EINVAL;
		any = true;
		p += len;
		if (*p == ',' && !*++p)
			return slo_fail(msg, msglen, text, "an empty objective");
	}
	if (!any)
		return slo_fail(msg, msglen, text, "no objective");
	for (uint32_t i = 0; i < rs->n; i++)
		if (!strcmp(rs->rule[i].model, model))
			r = &rs->rule[i];
	if (!r) {
		if (rs->n == SLO_RULES_MAX) {
			snprintf(msg, msglen, "at most %d --slo rules (one per model pattern)",
				 SLO_RULES_MAX);
			return -EINVAL;
		}
		r = &rs->rule[rs->n++];
		memset(r, 0, sizeof(*r));
		snprintf(r->model, sizeof(r->model), "%s", model);
	}
	for (int i = 0; i < SLO_METRICS; i++)
		if (limits[i])
			r->limit_ns[i] = limits[i];
	return 0;
}

/* A limit the way a person writes it: "2s", "80ms", "1.5s", "250us". */
static void slo_limit_text(int64_t ns, char *out, size_t n)
{
	if (ns % 1000000000 == 0)
		snprintf(out, n, "%llds", (long long)(ns / 1000000000));
	else if (ns >= 1000000000)
		snprintf(out, n, "%gs", ns / 1e9);
	else if (ns % 1000000 == 0 || ns >= 1000000)
		snprintf(out, n, "%gms", ns / 1e6);
	else
		snprintf(out, n, "%gus", ns / 1e3);
}

void slo_rule_text(const struct slo_rule *r, char *out, size_t n)
{
	size_t at = 0;

	out[0] = '\0';
	if (r->model[0])
		at = (size_t)snprintf(out, n, "model=%s:", r->model);
	for (int i = 0; i < SLO_METRICS && at < n; i++) {
		char lim[32];

		if (!r->limit_ns[i])
			continue;
		slo_limit_text(r->limit_ns[i], lim, sizeof(lim));
		at +=
		    (size_t)snprintf(out + at, n - at, "%s%s<=%s",
				     at && out[at - 1] != ':' ? "," : "", slo_metric_names[i], lim);
	}
}

/* A header's value in milliseconds: digits, an optional fraction, above 0 and at most
 * DURATION_MAX_S; -1 otherwise. */
static int64_t slo_head_ms(const char *v, size_t n)
{
	char buf[32], *end;
	double ms;

	ows_trim(&v, &n);
	if (!n || n >= sizeof(buf))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!((v[i] >= '0' && v[i] <= '9') || v[i] == '.'))
			return -1;
	memcpy(buf, v, n);
	buf[n] = '\0';
	ms = strtod(buf, &end);
	if (*end || !(ms > 0) || ms > DURATION_MAX_S * 1e3)
		return -1;
	return (int64_t)(ms * 1e6) ?: 1;
}

bool slo_head_field(struct slo_head *h, const char *name, size_t nlen, const char *val, size_t vlen)
{
	static const struct {
		const char *name;
		int metric;
	} fields[] = {
		{ "x-llm-d-slo-ttft-ms", SLO_TTFT },
		{ "x-llm-d-slo-tpot-ms", SLO_TPOT },
	};

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		int64_t ns;

		if (strlen(fields[i].name) != nlen || strncasecmp(name, fields[i].name, nlen))
			continue;
		ns = slo_head_ms(val, vlen);
		if (ns < 0)
			h->bad = true;
		else if (!h->limit_ns[fields[i].metric]) /* a repeated one keeps the first */
			h->limit_ns[fields[i].metric] = ns;
		return true;
	}
	return false;
}

/* The request's objectives: the rule without a model, then the first matching model rule per
 * metric, then its head. */
static void slo_limits(const struct slo_rules *rs, const struct request *r, struct slo_verdict *v)
{
	bool named[SLO_METRICS] = { false };

	for (uint32_t i = 0; rs && i < rs->n; i++) {
		const struct slo_rule *ru = &rs->rule[i];

		if (ru->model[0])
			continue;
		for (int k = 0; k < SLO_METRICS; k++)
			if (ru->limit_ns[k])
				v->limit_ns[k] = ru->limit_ns[k];
	}
	for (uint32_t i = 0; rs && i < rs->n; i++) {
		const struct slo_rule *ru = &rs->rule[i];

		if (!ru->model[0] || fnmatch(ru->model, r->info.model, 0))
			continue;
		for (int k = 0; k < SLO_METRICS; k++) {
			if (ru->limit_ns[k] && !named[k]) {
				v->limit_ns[k] = ru->limit_ns[k];
				named[k] = true;
			}
		}
	}
	for (int k = 0; k < SLO_METRICS; k++) {
		if (r->slo_head.limit_ns[k]) {
			v->limit_ns[k] = r->slo_head.limit_ns[k];
			v->from[k] = SLO_FROM_HEADER;
		}
		if (v->limit_ns[k])
			v->any = true;
	}
}

void slo_judge(const struct slo_rules *rs, const struct request *r, const struct request_metrics *m,
	       struct slo_verdict *v)
{
	const int64_t figure[SLO_METRICS] = { m->ttft_ns, m->tpot_ns, m->e2e_ns };
	/* The client left before the end: apart. The server closing first is its failure. */
	bool left = r->outcome == OUTCOME_ABORTED && r->peer_gone;
	bool failed = r->outcome == OUTCOME_HTTP_ERROR || r->outcome == OUTCOME_STREAM_ERROR ||
		      (r->outcome == OUTCOME_ABORTED && !r->peer_gone);
	/* Its figures were not all seen: joined mid-response, or bytes of it lost. */
	bool unseen = r->joined || r->outcome == OUTCOME_LOST;
	bool missed = false, unknown = false;

	memset(v, 0, sizeof(*v));
	slo_limits(rs, r, v);
	if (!v->any)
		return;
	for (int k = 0; k < SLO_METRICS; k++) {
		enum slo_result *res = &v->result[k];

		if (!v->limit_ns[k])
			continue;
		if (failed)
			*res = SLO_MISSED;
		else if (unseen || figure[k] < 0 || (left && k == SLO_E2E))
			*res = SLO_UNKNOWN;
		else
			*res = figure[k] <= v->limit_ns[k] ? SLO_MET : SLO_MISSED;
		if (*res == SLO_MISSED)
			missed = true;
		/* TPOT with fewer than two tokens does not exist: no figure is missing. */
		if (*res == SLO_UNKNOWN && !(k == SLO_TPOT && !unseen && m->tokens < 2))
			unknown = true;
	}
	if (left)
		v->overall = SLO_ABORTED;
	else if (missed)
		v->overall = SLO_MISSED;
	else if (unknown || unseen)
		v->overall = SLO_UNKNOWN;
	else
		v->overall = SLO_MET;
}

static void slo_count(struct slo_counts *c, const struct slo_verdict *v, int64_t tokens)
{
	/* A request its client left is apart on every objective too. */
	for (int k = 0; k < SLO_METRICS; k++)
		if (v->result[k] != SLO_NONE)
			c->n[k][v->overall == SLO_ABORTED ? SLO_ABORTED : v->result[k]]++;
	c->n[SLO_METRICS][v->overall]++;
	if (v->overall == SLO_MET) {
		c->good_requests++;
		if (tokens > 0)
			c->good_tokens += (uint64_t)tokens;
	}
	for (int k = 0; k < SLO_METRICS; k++) {
		if (v->limit_ns[k] && v->from[k] == SLO_FROM_HEADER) {
			c->from_header++;
			break;
		}
	}
}

void slo_tally_add(struct slo_tally *t, const char *model, const struct slo_verdict *v,
		   int64_t tokens, bool head_bad)
{
	uint32_t i;

	if (head_bad)
		t->head_bad++;
	if (!v->any)
		return;
	slo_count(&t->all, v, tokens);
	for (i = 0; i < t->nmodels; i++)
		if (!strncmp(t->model[i].model, model, SLO_TALLY_MODEL_MAX - 1))
			break;
	if (i == t->nmodels) {
		if (t->nmodels < SLO_TALLY_MODELS)
			snprintf(t->model[t->nmodels++].model, SLO_TALLY_MODEL_MAX, "%s", model);
		else if (t->nmodels == SLO_TALLY_MODELS)
			snprintf(t->model[t->nmodels++].model, SLO_TALLY_MODEL_MAX, "%s",
				 SLO_TALLY_OTHER);
		i = t->nmodels - 1;
	}
	slo_count(&t->model[i].c, v, tokens);
}

uint64_t slo_judged(const struct slo_counts *c, int metric)
{
	return c->n[metric][SLO_MET] + c->n[metric][SLO_MISSED];
}

double slo_attainment(const struct slo_counts *c, int metric)
{
	uint64_t n = slo_judged(c, metric);

	return n ? (double)c->n[metric][SLO_MET] / (double)n : NAN;
}
