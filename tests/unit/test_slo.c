// SPDX-License-Identifier: MIT
/*
 * Objectives and verdicts (pipeline/slo.h): --slo parsed and refused with a reason, a rule
 * written back as it was given, llm-d's headers read (a bad value ignored and counted), the
 * order in which a request's objectives are found (the rule without a model, the first
 * matching model rule, the head), each verdict on requests that met, missed, failed, were left
 * by their client, joined or lost, or had one token, and the tallies per model.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "pipeline/request.h"
#include "pipeline/slo.h"

#define MS 1000000LL

TEST(test_slo_parse)
{
	struct slo_rules rs = { 0 };
	char msg[512], text[256];

	ASSERT_EQ(slo_parse(&rs, "ttft<=2s,tpot<=80ms,e2e<=30s", msg, sizeof(msg)), 0, "plain");
	ASSERT_EQ(rs.n, 1, "one rule");
	ASSERT_EQ(rs.rule[0].limit_ns[SLO_TTFT], 2000 * MS, "ttft");
	ASSERT_EQ(rs.rule[0].limit_ns[SLO_TPOT], 80 * MS, "tpot");
	ASSERT_EQ(rs.rule[0].limit_ns[SLO_E2E], 30000 * MS, "e2e");
	ASSERT_EQ(slo_parse(&rs, "model=llama*:ttft<=1s", msg, sizeof(msg)), 0, "model");
	ASSERT_EQ(slo_parse(&rs, "model=llama*:e2e<=1.5s", msg, sizeof(msg)), 0, "same pattern");
	ASSERT_EQ(rs.n, 2, "the same pattern adds to its rule");
	slo_rule_text(&rs.rule[1], text, sizeof(text));
	ASSERT_STREQ(text, "model=llama*:ttft<=1s,e2e<=1.5s", "written back");
	slo_rule_text(&rs.rule[0], text, sizeof(text));
	ASSERT_STREQ(text, "ttft<=2s,tpot<=80ms,e2e<=30s", "written back");
	ASSERT_EQ(slo_parse(&rs, "TTFT<=250us", msg, sizeof(msg)), 0, "case");
	ASSERT_EQ(rs.rule[0].limit_ns[SLO_TTFT], 250000, "replaced");

	static const char *const bad[] = {
		"",	     "ttft",	       "ttft<2s",	 "ttft<=2",	"ttft<=0s",
		"itl<=1s",   "ttft<=2s,",      ",ttft<=2s",	 "model=:ttft<=1s",
		"model=x",   "model=x:",       "ttft<=-1s",	 "ttft<=nans",	"ttft<=2s,,e2e<=1s",
		"ttft<=1e99s",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct slo_rules r2 = { 0 };

		msg[0] = '\0';
		ASSERT_EQ(slo_parse(&r2, bad[i], msg, sizeof(msg)), -EINVAL, bad[i]);
		ASSERT_TRUE(strstr(msg, "bad --slo") != NULL, "says why");
		ASSERT_EQ(r2.n, 0, "nothing kept");
	}
}

TEST(test_slo_head)
{
	struct slo_head h = { 0 };

	ASSERT_TRUE(slo_head_field(&h, "X-LLM-D-SLO-TTFT-MS", 19, " 500 ", 5), "ttft");
	ASSERT_TRUE(slo_head_field(&h, "x-llm-d-slo-tpot-ms", 19, "12.5", 4), "tpot");
	ASSERT_TRUE(slo_head_field(&h, "x-llm-d-slo-ttft-ms", 19, "900", 3), "repeated");
	ASSERT_EQ(h.limit_ns[SLO_TTFT], 500 * MS, "the first kept");
	ASSERT_EQ(h.limit_ns[SLO_TPOT], 12500000, "fraction");
	ASSERT_FALSE(h.bad, "all good");
	ASSERT_FALSE(slo_head_field(&h, "x-request-id", 12, "5", 1), "not one of them");
	static const char *const bad[] = { "", "soon", "-5", "0", "1e3", "5ms", "0x10" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct slo_head b = { 0 };

		ASSERT_TRUE(slo_head_field(&b, "x-llm-d-slo-tpot-ms", 19, bad[i], strlen(bad[i])),
			    "theirs");
		ASSERT_TRUE(b.bad, bad[i]);
		ASSERT_EQ(b.limit_ns[SLO_TPOT], 0, "ignored");
	}
}

/* A finished streamed request: arrival at 0, tokens every gap_ms after ttft_ms. */
static void req_make(struct request *r, const char *model, int64_t ttft_ms, int64_t gap_ms,
		     uint32_t tokens, enum outcome o)
{
	memset(r, 0, sizeof(*r));
	request_init(r, 1, 1, 0, "c");
	snprintf(r->info.model, sizeof(r->info.model), "%s", model);
	r->arrival_ns = 1000 * MS;
	for (uint32_t i = 0; i < tokens; i++)
		request_add_token(r, r->arrival_ns + (uint64_t)(ttft_ms + gap_ms * i) * MS);
	r->end_ns = r->arrival_ns + (uint64_t)(ttft_ms + gap_ms * (tokens ? tokens - 1 : 0)) * MS;
	r->outcome = o;
}

static void judge(const struct slo_rules *rs, struct request *r, struct slo_verdict *v)
{
	struct request_metrics m;

	request_metrics(r, &m);
	slo_judge(rs, r, &m, v);
}

TEST(test_slo_objectives)
{
	struct slo_rules rs = { 0 };
	struct request r;
	struct slo_verdict v;
	char msg[256];

	/* No rule and no header: no objective. */
	req_make(&r, "llama-3", 10, 5, 4, OUTCOME_OK);
	judge(NULL, &r, &v);
	ASSERT_FALSE(v.any, "none");
	/* The model rules come after the rule without a model, whatever their order. */
	slo_parse(&rs, "model=llama*:ttft<=1s", msg, sizeof(msg));
	slo_parse(&rs, "model=llama-3:ttft<=3s,tpot<=9ms", msg, sizeof(msg));
	slo_parse(&rs, "ttft<=2s,e2e<=30s", msg, sizeof(msg));
	judge(&rs, &r, &v);
	ASSERT_TRUE(v.any, "some");
	ASSERT_EQ(v.limit_ns[SLO_TTFT], 1000 * MS, "first matching model rule");
	ASSERT_EQ(v.limit_ns[SLO_TPOT], 9 * MS, "a later model rule for a metric not named");
	ASSERT_EQ(v.limit_ns[SLO_E2E], 30000 * MS, "the rule without a model");
	ASSERT_EQ(v.from[SLO_TTFT], SLO_FROM_FLAG, "flag");
	r.slo_head.limit_ns[SLO_TTFT] = 7 * MS;
	judge(&rs, &r, &v);
	ASSERT_EQ(v.limit_ns[SLO_TTFT], 7 * MS, "the head last");
	ASSERT_EQ(v.from[SLO_TTFT], SLO_FROM_HEADER, "header");
	ASSERT_EQ(v.result[SLO_TTFT], SLO_MISSED, "10 ms against 7");
	ASSERT_EQ(v.overall, SLO_MISSED, "overall");
	request_release(&r);
	/* Another model: the rule without a model alone. */
	req_make(&r, "mistral", 10, 5, 4, OUTCOME_OK);
	judge(&rs, &r, &v);
	ASSERT_EQ(v.limit_ns[SLO_TTFT], 2000 * MS, "default");
	ASSERT_EQ(v.limit_ns[SLO_TPOT], 0, "none");
	ASSERT_EQ(v.result[SLO_TPOT], SLO_NONE, "none");
	ASSERT_EQ(v.overall, SLO_MET, "met");
	request_release(&r);
	/* Only a head's objective, no rules. */
	req_make(&r, "x", 10, 5, 4, OUTCOME_OK);
	r.slo_head.limit_ns[SLO_TPOT] = 5 * MS;
	judge(NULL, &r, &v);
	ASSERT_TRUE(v.any, "from the head");
	ASSERT_EQ(v.result[SLO_TPOT], SLO_MET, "5 ms is within 5 ms");
	request_release(&r);
}

TEST(test_slo_verdicts)
{
	struct slo_rules rs = { 0 };
	struct request r;
	struct slo_verdict v;
	char msg[256];

	slo_parse(&rs, "ttft<=100ms,tpot<=10ms,e2e<=1s", msg, sizeof(msg));
	req_make(&r, "m", 50, 5, 10, OUTCOME_OK);
	judge(&rs, &r, &v);
	ASSERT_EQ(v.overall, SLO_MET, "all within");
	request_release(&r);

	req_make(&r, "m", 50, 20, 10, OUTCOME_OK);
	judge(&rs, &r, &v);
	ASSERT_EQ(v.result[SLO_TPOT], SLO_MISSED, "tpot 20 ms");
	ASSERT_EQ(v.result[SLO_TTFT], SLO_MET, "ttft");
	ASSERT_EQ(v.overall, SLO_MISSED, "missed");
	request_release(&r);

	/* Errors miss every objective, whatever the figures. */
	req_make(&r, "m", 50, 5, 3, OUTCOME_STREAM_ERROR);
	judge(&rs, &r, &v);
	ASSERT_EQ(v.result[SLO_TTFT], SLO_MISSED, "stream error");
	ASSERT_EQ(v.overall, SLO_MISSED, "stream error");
	request_release(&r);
	req_make(&r, "m", 0, 0, 0, OUTCOME_HTTP_ERROR);
	judge(&rs, &r, &v);
	ASSERT_EQ(v.overall, SLO_MISSED, "http error");
	request_release(&r);
	/* Closed early by the server: its failure. By the client: apart. */
	req_make(&r, "m", 50, 5, 3, OUTCOME_ABORTED);
	judge(&rs, &r, &v);
	ASSERT_EQ(v.overall, SLO_MISSED, "the server closed");
	r.peer_gone = true;
	judge(&rs, &r, &v);
	ASSERT_EQ(v.overall, SLO_ABORTED, "the client left");
	ASSERT_EQ(v.result[SLO_TTFT], SLO_MET, "its TTFT still judged");
	ASSERT_EQ(v.result[SLO_E2E], SLO_UNKNOWN, "no end of its own");
	request_release(&r);
	/* One token: TPOT cannot exist, and leaves the overall verdict alone. */
	req_make(&r, "m", 50, 5, 1, OUTCOME_OK);
	judge(&rs, &r, &v);
	ASSERT_EQ(v.result[SLO_TPOT], SLO_UNKNOWN, "one token");
	ASSERT_EQ(v.overall, SLO_MET, "met on the rest");
	request_release(&r);
	/* Not streamed: no TTFT, so no overall verdict. */
	req_make(&r, "m", 50, 5, 0, OUTCOME_OK);
	judge(&rs, &r, &v);
	ASSERT_EQ(v.result[SLO_TTFT], SLO_UNKNOWN, "no token");
	ASSERT_EQ(v.overall, SLO_UNKNOWN, "unknown");
	request_release(&r);
	/* Joined mid-response, or lost: unknown, never met. */
	req_make(&r, "m", 50, 5, 10, OUTCOME_OK);
	r.joined = true;
	judge(&rs, &r, &v);
	ASSERT_EQ(v.overall, SLO_UNKNOWN, "joined");
	request_release(&r);
	req_make(&r, "m", 50, 5, 10, OUTCOME_LOST);
	judge(&rs, &r, &v);
	ASSERT_EQ(v.result[SLO_TTFT], SLO_UNKNOWN, "lost");
	ASSERT_EQ(v.overall, SLO_UNKNOWN, "lost");
	request_release(&r);
}

TEST(test_slo_tally)
{
	struct slo_tally t = { 0 };
	struct slo_verdict met = { .any = true, .overall = SLO_MET }, missed = met, left = met;
	struct slo_verdict none = { 0 };
	char model[32];

	met.limit_ns[SLO_TTFT] = missed.limit_ns[SLO_TTFT] = left.limit_ns[SLO_TTFT] = MS;
	met.result[SLO_TTFT] = SLO_MET;
	missed.result[SLO_TTFT] = SLO_MISSED;
	missed.overall = SLO_MISSED;
	left.result[SLO_TTFT] = SLO_MET;
	left.overall = SLO_ABORTED;
	slo_tally_add(&t, "a", &met, 10, false);
	slo_tally_add(&t, "a", &met, 7, false);
	slo_tally_add(&t, "b", &missed, 3, true);
	slo_tally_add(&t, "b", &left, 3, false);
	slo_tally_add(&t, "c", &none, 3, true);
	ASSERT_EQ(t.all.n[SLO_METRICS][SLO_MET], 2, "met");
	ASSERT_EQ(t.all.n[SLO_TTFT][SLO_ABORTED], 1, "a left request is apart on each objective");
	ASSERT_EQ(t.all.n[SLO_TTFT][SLO_MET], 2, "not counted met");
	ASSERT_EQ(t.all.good_requests, 2, "goodput requests");
	ASSERT_EQ(t.all.good_tokens, 17, "goodput tokens");
	ASSERT_EQ(t.head_bad, 2, "bad heads, with or without objectives");
	ASSERT_EQ(t.nmodels, 2, "no objective: no model");
	ASSERT_TRUE(fabs(slo_attainment(&t.all, SLO_METRICS) - 2.0 / 3) < 1e-9, "2 of 3");
	ASSERT_TRUE(isnan(slo_attainment(&t.all, SLO_E2E)), "none judged");
	for (int i = 0; i < 20; i++) {
		snprintf(model, sizeof(model), "m%d", i);
		slo_tally_add(&t, model, &met, 1, false);
	}
	ASSERT_EQ(t.nmodels, SLO_TALLY_MODELS + 1, "capped");
	ASSERT_STREQ(t.model[SLO_TALLY_MODELS].model, SLO_TALLY_OTHER, "the rest together");
	ASSERT_EQ(t.model[SLO_TALLY_MODELS].c.good_requests, 20 - (SLO_TALLY_MODELS - 2),
		  "every later model there");
}

int main(void)
{
	return check_run_all();
}
