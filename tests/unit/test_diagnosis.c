// SPDX-License-Identifier: MIT
/*
 * The report's diagnosis: synthetic requests with known attributions through the sink's
 * callbacks, and the shares and verdicts the text must say.
 */
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "sinks/diagnosis.h"
#include "pipeline/batch.h"
#include "pipeline/gpu.h"
#include "sinks/summary.h"

#define MS 1000000ll
#define SEC (1000 * MS)

/* One request's shape: TTFT split, token gaps and their GPU share. */
struct shape {
	int64_t queue, prefill, other; /* ns; queue < 0: no attribution */
	int64_t gap;		       /* ns between tokens */
	int tokens;
	double gpu_share; /* of each gap */
	enum outcome outcome;
};

struct run {
	struct diagnosis d;
	struct sink s;
	struct summary sum;
	char *text;
	size_t len;
};

static void run_open(struct run *r)
{
	memset(r, 0, sizeof(*r));
	diagnosis_init(&r->d);
	r->s = diagnosis_sink(&r->d);
	summary_init(&r->sum);
}

/* The socket wait of the requests run_request makes from here on; 0: unknown. */
static int64_t next_wait;
/* Whether their GPU steps are known (batch.h), and then their preemptions and the time out of
 * the batch. */
static bool next_steps;
static uint32_t next_preemptions;
static int64_t next_preempted;
/* The objectives they are judged on; NULL: none. */
static const struct slo_rules *next_slo;
/* Each token's engine to socket time (0: none known). */
static uint64_t next_e2s;
/* Their stalls (NULL: none reported). */
static struct stall_report *next_stalls;

/* A request arriving at `arrival`, through the sink exactly as the pipeline calls it. */
static void run_request(struct run *r, uint64_t arrival, const struct shape *sh)
{
	struct request *q = request_new(1, 1, 0, "c");
	struct request_metrics m;
	struct gpu_attribution ga = {
		-1, -1, -1, -1, -1, "none", -1, -1, NULL, .has_steps = false
	};
	int64_t ttft = sh->queue < 0 ? sh->prefill : sh->queue + sh->prefill + sh->other;
	uint64_t t = arrival + ttft;

	q->arrival_ns = arrival;
	q->received_ns = next_wait ? arrival - next_wait : 0;
	q->outcome = sh->outcome;
	q->status = 200;
	for (int i = 0; i < sh->tokens; i++, t += sh->gap)
		request_add_token(q, t);
	q->end_ns = t;
	request_metrics(q, &m);
	if (sh->queue >= 0) {
		ga.queue_ns = sh->queue;
		ga.prefill_ns = sh->prefill;
		ga.decode_ns = q->end_ns - q->first_token_ns;
		if (sh->tokens >= 2) {
			int64_t span = (int64_t)(sh->tokens - 1) * sh->gap;

			ga.gpu_ns = span * sh->gpu_share;
			ga.host_ns = span - ga.gpu_ns;
		}
		ga.how = "by time";
	}
	ga.has_steps = next_steps;
	ga.preemptions = next_preemptions;
	ga.preempted_ns = next_preempted;
	slo_judge(next_slo, q, &m, &m.slo);
	uint64_t e2s[64];

	if (next_e2s) {
		for (int i = 0; i < sh->tokens && i < 64; i++)
			e2s[i] = next_e2s;
		ga.e2s = e2s;
		ga.ne2s = sh->tokens < 64 ? (uint32_t)sh->tokens : 64;
	}
	ga.stalls = next_stalls;
	summary_start(&r->sum, q);
	summary_done(&r->sum, q, &m);
	r->s.request(r->s.ctx, q, &m, &ga);
	request_free(q);
}

static const char *run_print(struct run *r)
{
	FILE *f = open_memstream(&r->text, &r->len);

	diagnosis_print(&r->d, f);
	fclose(f);
	return r->text;
}

static void run_close(struct run *r)
{
	diagnosis_free(&r->d);
	free(r->text);
}

static bool has(const char *text, const char *want)
{
	if (text && strstr(text, want))
		return true;
	printf("  missing: \"%s\"\n  in:\n%s", want, text ? text : "(null)");
	return false;
}

/* 30 requests, one a second; the first, middle and last ten each with their own shape. */
static void thirds(struct run *r, const struct shape *a, const struct shape *mid,
		   const struct shape *b)
{
	for (int i = 0; i < 30; i++)
		run_request(r, 1000 * SEC + i * SEC, i < 10 ? a : i < 20 ? mid : b);
}

/* Which objective the misses missed, how many failed, and where the ok ones' time went: the
 * mean of their shares, the largest named. */
TEST(test_slo_misses)
{
	struct slo_rules rules = { 0 };
	struct run r;
	char msg[256];
	/* TTFT 100 ms (queue 60, prefill 30, other 10), 11 tokens 10 ms apart, the end 10 ms
	 * after the last: E2E 210 ms. */
	const struct shape slow = { 60 * MS, 30 * MS, 10 * MS, 10 * MS, 11, 0.5, OUTCOME_OK };
	const struct shape fast = { 10 * MS, 5 * MS, 0, 10 * MS, 11, 0.5, OUTCOME_OK };
	const struct shape failed = { 10 * MS, 5 * MS, 0, 10 * MS, 3, 0.5, OUTCOME_STREAM_ERROR };

	slo_parse(&rules, "ttft<=50ms", msg, sizeof(msg));
	next_slo = &rules;
	run_open(&r);
	for (int i = 0; i < 4; i++)
		run_request(&r, 1000 * SEC + i * SEC, &slow);
	for (int i = 0; i < 5; i++)
		run_request(&r, 1010 * SEC + i * SEC, &fast);
	run_request(&r, 1020 * SEC, &failed);
	run_print(&r);
	ASSERT_TRUE(has(r.text, "SLO      5 of 10 requests judged missed an objective: ttft 5\n"),
		    "misses");
	ASSERT_TRUE(has(r.text, "1 of the misses failed"), "failures");
	ASSERT_TRUE(has(r.text, "E2E of the 4 ok misses: queue 29 %, prefill 14 %, rest of TTFT "
				"5 %, decode 52 %\n"),
		    "shares");
	ASSERT_TRUE(has(r.text, "most in decode\n"), "the largest");
	run_close(&r);
	next_slo = NULL;
}

/* Engine to socket: named as the API process's when it is half the ITL or more. */
TEST(test_engine_to_socket)
{
	const struct shape s = { 10 * MS, 5 * MS, 0, 10 * MS, 11, 0.5, OUTCOME_OK };
	struct run r;

	run_open(&r);
	next_e2s = 6 * MS;
	for (int i = 0; i < 4; i++)
		run_request(&r, 1000 * SEC + i * SEC, &s);
	run_print(&r);
	ASSERT_TRUE(has(r.text, "E2S p50      6.00 ms from a token's step's end to its write, 60 % "
				"of the ITL p50 10.00 ms:\n"),
		    "e2s line");
	ASSERT_TRUE(has(r.text, "the API process (detokenising, serialising, its event loop) "
				"holds the tokens"),
		    "named");
	run_close(&r);
	run_open(&r);
	next_e2s = 1 * MS;
	for (int i = 0; i < 4; i++)
		run_request(&r, 1000 * SEC + i * SEC, &s);
	run_print(&r);
	ASSERT_TRUE(has(r.text, "10 % of the ITL p50"), "a small share");
	ASSERT_TRUE(r.text && !strstr(r.text, "the API process"), "not named");
	run_close(&r);
	next_e2s = 0;
}

/* n decode steps of a mode, batch and duration, through the sink as the pipeline shows them. */
static void decode_steps(struct run *r, int n, enum step_mode mode, uint32_t batch, uint64_t dur)
{
	for (int i = 0; i < n; i++) {
		struct gpu_step s = { .kind = STEP_DECODE, .mode = mode, .batch = batch };

		s.start_ns = 1000 * SEC + i * 100 * MS;
		s.end_ns = s.start_ns + dur;
		r->s.gpu_step(r->s.ctx, &s);
	}
}

/*
 * Graph coverage: eager decode steps above the captured batch sizes, set against the graph
 * steps of the nearest batch range. Slower and frequent: the capture sizes are named. As fast,
 * or rare: only said. No eager step: nothing. Prefill steps never count.
 */
TEST(test_graph_coverage)
{
	const struct shape s = { 10 * MS, 5 * MS, 0, 10 * MS, 11, 0.5, OUTCOME_OK };
	struct run r;

	run_open(&r);
	decode_steps(&r, 90, MODE_GRAPH, 3, 10 * MS);
	decode_steps(&r, 10, MODE_EAGER, 5, 25 * MS);
	decode_steps(&r, 10, MODE_EAGER, 6, 25 * MS);
	for (int i = 0; i < 4; i++)
		run_request(&r, 1000 * SEC + i * SEC, &s);
	run_print(&r);
	ASSERT_TRUE(has(r.text, "graphs   20 of 110 decode steps (18 %) ran eagerly, at batch 5-6:\n"
				"             25.00 ms each, graph decode steps of batch 3-4 10.00 ms:\n"
				"             capture graphs up to batch 6"),
		    "eager steps slower than graph ones: named");
	run_close(&r);

	run_open(&r);
	decode_steps(&r, 90, MODE_GRAPH, 3, 10 * MS);
	decode_steps(&r, 20, MODE_EAGER, 4, 11 * MS);
	for (int i = 0; i < 4; i++)
		run_request(&r, 1000 * SEC + i * SEC, &s);
	run_print(&r);
	ASSERT_TRUE(has(r.text, "11.00 ms each, graph decode steps of batch 3-4 10.00 ms\n"),
		    "as fast: said");
	ASSERT_TRUE(r.text && !strstr(r.text, "capture graphs"), "not named");
	run_close(&r);

	run_open(&r);
	decode_steps(&r, 200, MODE_GRAPH, 3, 10 * MS);
	decode_steps(&r, 5, MODE_EAGER, 9, 30 * MS);
	for (int i = 0; i < 4; i++)
		run_request(&r, 1000 * SEC + i * SEC, &s);
	run_print(&r);
	ASSERT_TRUE(has(r.text, "5 of 205 decode steps (2 %) ran eagerly, at batch 9-9"), "rare");
	ASSERT_TRUE(r.text && !strstr(r.text, "capture graphs"), "rare: not named");
	run_close(&r);

	run_open(&r);
	decode_steps(&r, 50, MODE_GRAPH, 3, 10 * MS);
	{
		struct gpu_step p = { .kind = STEP_PREFILL, .mode = MODE_EAGER, .batch = 1 };

		p.end_ns = 30 * MS;
		r.s.gpu_step(r.s.ctx, &p);
	}
	for (int i = 0; i < 4; i++)
		run_request(&r, 1000 * SEC + i * SEC, &s);
	run_print(&r);
	ASSERT_TRUE(r.text && !strstr(r.text, "ran eagerly"), "eager prefills are not decode");
	run_close(&r);
}

/* Stalls: counted by cause; of the gaps at or over the ITL p99, the most frequent cause named,
 * with the largest prompt blamed. No stall listed: no line. */
TEST(test_stalls)
{
	const struct shape s = { 10 * MS, 5 * MS, 0, 10 * MS, 11, 0.5, OUTCOME_OK };
	struct stall_report rep = { .threshold_ns = 50 * MS, .n = 3, .nkept = 3 };
	struct run r;

	rep.v[0] = (struct stall){ .token = 3, .gap_ns = 400 * MS, .cause = STALL_PREFILL,
				   .nby = 1, .nby_all = 1 };
	rep.v[0].by[0].prompt_tokens = 8123;
	rep.v[1] = (struct stall){ .token = 5, .gap_ns = 380 * MS, .cause = STALL_PREFILL };
	rep.v[2] = (struct stall){ .token = 7, .gap_ns = 60 * MS, .cause = STALL_HOST };
	run_open(&r);
	next_stalls = &rep;
	run_request(&r, 1000 * SEC, &s);
	next_stalls = NULL;
	for (int i = 1; i < 4; i++)
		run_request(&r, 1000 * SEC + i * SEC, &s);
	run_print(&r);
	ASSERT_TRUE(has(r.text, "stalls   3 slow gaps: prefill 2, host 1\n"), "by cause");
	/* the shapes' gaps are 10 ms: every stall is over the ITL p99 */
	ASSERT_TRUE(has(r.text, "ITL p99 raised by prefills of other requests: 2 of the 3 gaps "
				"over 10.00 ms"),
		    "named");
	ASSERT_TRUE(has(r.text, "(prompts up to 8123 tokens)"), "the largest prompt");
	run_close(&r);
	run_open(&r);
	for (int i = 0; i < 4; i++)
		run_request(&r, 1000 * SEC + i * SEC, &s);
	run_print(&r);
	ASSERT_TRUE(r.text && !strstr(r.text, "stalls"), "none: no line");
	run_close(&r);
}

TEST(test_queue_grows)
{
	/* TTFT 100 ms: queue 10 %, prefill 80 %; then 400 ms: queue 70 %, prefill 20 %. */
	struct shape a = { 10 * MS, 80 * MS, 10 * MS, 30 * MS, 5, 0.9, OUTCOME_OK };
	struct shape mid = { 110 * MS, 80 * MS, 10 * MS, 30 * MS, 5, 0.9, OUTCOME_OK };
	struct shape b = { 280 * MS, 80 * MS, 40 * MS, 30 * MS, 5, 0.9, OUTCOME_OK };
	struct run r;
	const char *t;

	run_open(&r);
	thirds(&r, &a, &mid, &b);
	t = run_print(&r);
	ASSERT_TRUE(has(t, "--- diagnosis: 30 requests finished ok with a token, arriving over "
			   "29.0 s\n"),
		    "title");
	ASSERT_TRUE(has(t, "  whole run    30 requests, arriving +0.0 to +29.0 s\n"), "whole");
	ASSERT_TRUE(has(t, "    TTFT p99    400.00 ms; slow tail (10 requests): queue 70 %, "
			   "prefill 20 %, other 10 %\n"),
		    "whole-run slow tail: the last third");
	ASSERT_TRUE(has(t,
			"  first third  10 requests, arriving +0.0 to +9.0 s\n"
			"    TTFT p99    100.00 ms; slow tail (10 requests): queue 10 %, prefill "
			"80 %, other 10 %\n"
			"    ITL  p99     30.00 ms; slow tail (10 requests): GPU 90 %, host 10 % "
			"of their decode\n"),
		    "first third");
	ASSERT_TRUE(has(t, "  last third   10 requests, arriving +20.0 to +29.0 s\n"
			   "    TTFT p99    400.00 ms; slow tail (10 requests): queue 70 %"),
		    "last third");
	ASSERT_TRUE(has(t,
			"    TTFT P99 rose from 100 ms to 400 ms; queueing went from 10 % to "
			"70 % of the slow tail: requests wait for a free slot, not for the GPU\n"),
		    "TTFT verdict names the queue");
	ASSERT_TRUE(has(t, "    ITL P99 is stable: 30.0 ms in the first third, 30.0 ms in the "
			   "last\n"),
		    "ITL stable");
	run_close(&r);
}

/*
 * Only the slow tail counts: one slow request per third, the rest fast and differently split.
 * The P99s are the histogram's, as in the summary (99.88 ms for a 100 ms maximum here).
 */
TEST(test_slow_tail_only)
{
	struct shape fast = { 0, 20 * MS, 0, 30 * MS, 3, 0.5, OUTCOME_OK };
	struct shape slow_a = { 50 * MS, 40 * MS, 10 * MS, 30 * MS, 3, 0.5, OUTCOME_OK };
	struct shape slow_b = { 10 * MS, 180 * MS, 10 * MS, 30 * MS, 3, 0.5, OUTCOME_OK };
	struct run r;
	const char *t;

	run_open(&r);
	for (int i = 0; i < 30; i++) {
		const struct shape *s = i == 4 ? &slow_a : i == 25 ? &slow_b : &fast;

		run_request(&r, 1000 * SEC + i * SEC, s);
	}
	t = run_print(&r);
	ASSERT_TRUE(has(t, "    TTFT p99     99.88 ms; slow tail (1 request): queue 50 %, prefill "
			   "40 %, other 10 %\n"),
		    "first third's tail is its one slow request");
	ASSERT_TRUE(has(t, "    TTFT P99 rose from 99.9 ms to 200 ms; prefill went from 40 % to "
			   "90 % of the slow tail: the prefill step itself takes longer"),
		    "prefill named");
	run_close(&r);
}

TEST(test_itl_host_grows)
{
	struct shape a = { 10 * MS, 80 * MS, 10 * MS, 30 * MS, 20, 0.9, OUTCOME_OK };
	struct shape b = { 10 * MS, 80 * MS, 10 * MS, 90 * MS, 20, 0.3, OUTCOME_OK };
	struct run r;
	const char *t;

	run_open(&r);
	thirds(&r, &a, &a, &b);
	t = run_print(&r);
	ASSERT_TRUE(has(t, "    TTFT P99 is stable: 100 ms in the first third, 100 ms in the "
			   "last\n"),
		    "TTFT stable");
	ASSERT_TRUE(has(t,
			"    ITL P99 rose from 30.0 ms to 90.0 ms; host time went from 10 % to "
			"70 % of the slow requests' decode: tokens wait for the host between GPU "
			"steps"),
		    "host named");
	ASSERT_TRUE(has(t, "GPU 30 %, host 70 % of their decode"), "last third's split");
	run_close(&r);
}

/*
 * Three of 30 requests preempted (their gaps long: 60 ms against 20), 45 and 75 ms out of the
 * batch: the ITL tail is theirs, and the diagnosis names preemption; no line when nobody was
 * preempted.
 */
TEST(test_itl_preemption)
{
	struct shape a = { 10 * MS, 80 * MS, 10 * MS, 20 * MS, 20, 0.9, OUTCOME_OK };
	struct shape p = { 10 * MS, 80 * MS, 10 * MS, 60 * MS, 20, 0.9, OUTCOME_OK };
	struct run r;
	const char *t;

	next_steps = true;
	run_open(&r);
	for (int i = 0; i < 30; i++) {
		bool preempted = i == 5 || i == 15 || i == 25;

		next_preemptions = preempted ? (i == 15 ? 2 : 1) : 0;
		next_preempted = preempted ? (i == 15 ? 75 : 45) * (int64_t)MS : 0;
		run_request(&r, 1000 * SEC + i * SEC, preempted ? &p : &a);
	}
	t = run_print(&r);
	ASSERT_TRUE(has(t, "    ITL p99 raised by preemption: 3 of 30 requests preempted (3 in the "
			   "slow tail),\n      55.0 ms out of the batch on average: the KV cache "
			   "was likely full\n"),
		    "preemption named");
	run_close(&r);

	next_preemptions = 0;
	next_preempted = 0;
	run_open(&r);
	for (int i = 0; i < 30; i++)
		run_request(&r, 1000 * SEC + i * SEC, &a);
	t = run_print(&r);
	ASSERT_FALSE(strstr(t, "preemption"), "nobody preempted: no line");
	run_close(&r);
	next_steps = false;
}

TEST(test_itl_gpu_grows_and_ttft_falls)
{
	struct shape a = { 280 * MS, 80 * MS, 40 * MS, 20 * MS, 10, 0.5, OUTCOME_OK };
	struct shape b = { 10 * MS, 80 * MS, 10 * MS, 40 * MS, 10, 0.9, OUTCOME_OK };
	struct run r;
	const char *t;

	run_open(&r);
	thirds(&r, &a, &a, &b);
	t = run_print(&r);
	ASSERT_TRUE(has(t, "    TTFT P99 fell from 400 ms to 100 ms; queueing went from 70 % to "
			   "10 % of the slow tail: requests wait less for a free slot\n"),
		    "fall: the share that shrank most");
	ASSERT_TRUE(has(t,
			"    ITL P99 rose from 20.0 ms to 40.0 ms; GPU time went from 50 % to "
			"90 % of the slow requests' decode: each decode step takes longer on the "
			"GPU"),
		    "GPU named");
	run_close(&r);
}

TEST(test_proportional_and_small_changes)
{
	/* Everything twice as long: no share moved. */
	struct shape a = { 20 * MS, 60 * MS, 20 * MS, 30 * MS, 5, 0.8, OUTCOME_OK };
	struct shape b = { 40 * MS, 120 * MS, 40 * MS, 30 * MS, 5, 0.8, OUTCOME_OK };
	/* 9 % slower: stable. */
	struct shape c = { 29 * MS, 60 * MS, 20 * MS, 32 * MS, 5, 0.8, OUTCOME_OK };
	struct run r;
	const char *t;

	run_open(&r);
	thirds(&r, &a, &a, &b);
	t = run_print(&r);
	ASSERT_TRUE(has(t, "    TTFT P99 rose from 100 ms to 200 ms; no share of the slow tail "
			   "moved by 5 points or more: every part grew alike\n"),
		    "proportional");
	run_close(&r);

	run_open(&r);
	thirds(&r, &a, &a, &c);
	t = run_print(&r);
	ASSERT_TRUE(has(t, "    TTFT P99 is stable: 100 ms in the first third, 109 ms in the "
			   "last\n"),
		    "a 9 % change is stable");
	ASSERT_TRUE(has(t, "    ITL P99 is stable: 30.0 ms in the first third, 32.0 ms in the "
			   "last\n"),
		    "ITL stable");
	run_close(&r);
}

TEST(test_empty)
{
	struct shape failed = { 10 * MS, 80 * MS, 10 * MS, 30 * MS, 5, 0.9, OUTCOME_HTTP_ERROR };
	struct shape none = { 10 * MS, 80 * MS, 10 * MS, 30 * MS, 0, 0.9, OUTCOME_OK };
	struct run r;

	run_open(&r);
	ASSERT_STREQ(run_print(&r), "--- diagnosis: there were no requests\n", "no requests");
	run_close(&r);

	run_open(&r);
	run_request(&r, SEC, &failed);
	run_request(&r, 2 * SEC, &failed);
	run_request(&r, 3 * SEC, &none);
	ASSERT_STREQ(run_print(&r),
		     "--- diagnosis: none of the 3 requests finished ok with a token: nothing to "
		     "diagnose\n",
		     "no ok request with a token");
	run_close(&r);
}

TEST(test_unattributed)
{
	struct shape a = { -1, 100 * MS, 0, 30 * MS, 5, 0, OUTCOME_OK };
	struct shape b = { -1, 400 * MS, 0, 30 * MS, 5, 0, OUTCOME_OK };
	struct gpu_step step = { 0 };
	struct run r;
	const char *t;

	run_open(&r);
	thirds(&r, &a, &a, &b);
	t = run_print(&r);
	ASSERT_TRUE(has(t, "    TTFT p99    100.00 ms; slow tail (10 requests): not attributed (no "
			   "GPU steps)\n"),
		    "window says so");
	ASSERT_TRUE(has(t, "    ITL  p99     30.00 ms; slow tail (10 requests): not attributed (no "
			   "GPU steps)\n"),
		    "ITL says so");
	ASSERT_TRUE(has(t, "    TTFT P99 rose from 100 ms to 400 ms; not attributed (no GPU "
			   "steps)\n"),
		    "verdict says so");
	run_close(&r);

	/* GPU steps were seen, but none was this request's prefill. */
	run_open(&r);
	r.s.gpu_step(r.s.ctx, &step);
	thirds(&r, &a, &a, &b);
	t = run_print(&r);
	ASSERT_TRUE(has(t, "not attributed (no prefill step found for them)"), "steps seen");
	run_close(&r);
}

TEST(test_few_requests_and_whole_equals_summary)
{
	struct shape a = { 10 * MS, 80 * MS, 10 * MS, 30 * MS, 5, 0.9, OUTCOME_OK };
	struct shape b = { 10 * MS, 300 * MS, 10 * MS, 25 * MS, 4, 0.9, OUTCOME_OK };
	struct run r;
	char want[128];
	const char *t;

	run_open(&r);
	run_request(&r, SEC, &a);
	run_request(&r, 2 * SEC, &b);
	run_request(&r, 3 * SEC, &a);
	t = run_print(&r);
	ASSERT_TRUE(has(t, "--- diagnosis: 3 requests finished ok with a token"), "title");
	ASSERT_TRUE(has(t, "  verdict: too few requests to compare the first and last thirds (3, 6 "
			   "needed)\n"),
		    "too few");
	snprintf(want, sizeof(want), "    TTFT p99 %9.2f ms",
		 hist_quantile(&r.sum.ttft, 0.99) / 1e6);
	ASSERT_TRUE(has(t, want), "whole-run TTFT P99 is the summary's");
	snprintf(want, sizeof(want), "    ITL  p99 %9.2f ms",
		 hist_quantile(&r.sum.itl, 0.99) / 1e6);
	ASSERT_TRUE(has(t, want), "whole-run ITL P99 is the summary's");
	ASSERT_TRUE(has(t, "slow tail (1 request): queue 3 %, prefill 94 %, other 3 %"),
		    "the slowest request");
	ASSERT_FALSE(strstr(t, "first third"), "no thirds");
	run_close(&r);
}

/* Requests finish out of arrival order; thirds are still by arrival. Wall-clock times. */
TEST(test_out_of_order_and_wall_clock)
{
	struct shape a = { 10 * MS, 80 * MS, 10 * MS, 30 * MS, 5, 0.9, OUTCOME_OK };
	struct shape b = { 280 * MS, 80 * MS, 40 * MS, 30 * MS, 5, 0.9, OUTCOME_OK };
	struct run r;
	const char *t;

	setenv("TZ", "UTC", 1);
	tzset();
	run_open(&r);
	/* Monotonic 1000 s was 2024-05-01 12:00:00 UTC. */
	diagnosis_set_wall_clock(&r.d, (int64_t)(1714564800ull * SEC - 1000 * SEC));
	for (int i = 29; i >= 0; i--)
		run_request(&r, 1000 * SEC + i * SEC, i < 20 ? &a : &b);
	t = run_print(&r);
	ASSERT_TRUE(has(t, "arriving over 29.0 s (first at 2024-05-01 12:00:00 UTC)\n"), "wall");
	ASSERT_TRUE(has(t, "    TTFT P99 rose from 100 ms to 400 ms; queueing went from 10 % to "
			   "70 %"),
		    "verdict by arrival, not by finish order");
	run_close(&r);
}

/* The wait in the server's socket: a line per window where known, and its own verdict. */
TEST(test_socket_wait)
{
	struct shape sh = { 10 * MS, 80 * MS, 10 * MS, 30 * MS, 5, 0.9, OUTCOME_OK };
	struct run r;
	const char *t;

	run_open(&r);
	for (int i = 0; i < 30; i++) {
		/* 1 ms, then 50 ms; one request of the middle third unknown. */
		next_wait = i < 10 ? 1 * MS : i == 15 ? 0 : 50 * MS;
		run_request(&r, 1000 * SEC + i * SEC, &sh);
	}
	next_wait = 0;
	t = run_print(&r);
	ASSERT_TRUE(has(t, "    wait p99     49.94 ms in the server's socket before its read, not "
			   "in TTFT (29 of 30 known)\n"),
		    "whole run");
	ASSERT_TRUE(has(t, "    wait p99      1.00 ms in the server's socket before its read, not "
			   "in TTFT (10 of 10 known)\n"),
		    "first third");
	ASSERT_TRUE(has(t, "    TTFT P99 is stable: 100 ms in the first third, 100 ms in the "
			   "last\n"
			   "    Socket wait P99 rose from 1.00 ms to 50.0 ms; requests wait longer "
			   "before the server reads them (a busy event loop or accept queue): "
			   "clients see it on top of TTFT\n"),
		    "verdict: TTFT stable, the wait grew");
	run_close(&r);

	/* Nothing known: no line, no verdict. */
	run_open(&r);
	for (int i = 0; i < 30; i++)
		run_request(&r, 1000 * SEC + i * SEC, &sh);
	t = run_print(&r);
	ASSERT_TRUE(t && !strstr(t, "wait p99") && !strstr(t, "Socket wait"), "unknown: silent");
	run_close(&r);
}

/* A request of `tokens` tokens `gap` apart, each from a step batching `batch` requests (the
 * first from its prefill step, of batch 1). */
static void batch_request(struct run *r, uint64_t arrival, int tokens, int64_t gap, uint32_t batch)
{
	struct request *q = request_new(1, 1, 0, "c");
	struct request_metrics m;
	struct batch_ride *rides = calloc(tokens, sizeof(*rides));
	struct gpu_attribution ga = { -1, -1, -1, -1, -1, "none", -1, -1, NULL, .has_steps = true };

	q->arrival_ns = arrival;
	q->outcome = OUTCOME_OK;
	q->status = 200;
	for (int i = 0; i < tokens; i++) {
		request_add_token(q, arrival + 50 * MS + i * gap);
		rides[i] = (struct batch_ride){
			.known = true, .batch = i ? batch : 1, .token = i, .ntokens = 1
		};
	}
	q->end_ns = q->token_ns[tokens - 1];
	ga.steps = tokens - 1;
	ga.rides = rides;
	ga.nrides = tokens;
	request_metrics(q, &m);
	r->s.request(r->s.ctx, q, &m, &ga);
	free(rides);
	request_free(q);
}

/* 40 requests of 21 tokens: the first 20 with batch lo and gaps of gap_lo, the others hi, gap_hi
 * (800 gaps in all, 400 per batch size). */
static const char *batch_run(struct run *r, uint32_t lo, int64_t gap_lo, uint32_t hi,
			     int64_t gap_hi)
{
	for (int i = 0; i < 40; i++)
		batch_request(r, 1000 * SEC + i * SEC, 21, i < 20 ? gap_lo : gap_hi,
			      i < 20 ? lo : hi);
	return run_print(r);
}

/* ITL P99 that grows with the batch is said, with both batch sizes and both P99s. */
TEST(test_itl_grows_with_batch)
{
	struct run r;
	const char *t;

	run_open(&r);
	t = batch_run(&r, 12, 20 * MS, 31, 35 * MS);
	ASSERT_TRUE(has(t, "    ITL p99 grew with batch size 12 → 31: 20.0 ms → 35.0 ms (tokens of "
			   "steps batching 12 or fewer requests, 400 gaps, vs 31 or more, 400 "
			   "gaps)\n"),
		    "said");
	run_close(&r);
}

/* Silent when the data do not support it: ITL flat across batch sizes; one batch size only;
 * larger batches faster; batch sizes too close; too few gaps. */
TEST(test_itl_batch_silent)
{
	struct run r;
	const char *t;

	run_open(&r);
	t = batch_run(&r, 4, 20 * MS, 12, 20 * MS + MS / 2);
	ASSERT_TRUE(t && !strstr(t, "batch size"), "flat ITL (2.5 % higher): nothing");
	run_close(&r);
	run_open(&r);
	t = batch_run(&r, 8, 20 * MS, 8, 40 * MS);
	ASSERT_TRUE(t && !strstr(t, "batch size"), "one batch size: nothing");
	run_close(&r);
	run_open(&r);
	t = batch_run(&r, 4, 40 * MS, 12, 20 * MS);
	ASSERT_TRUE(t && !strstr(t, "batch size"), "larger batches faster: nothing");
	run_close(&r);
	run_open(&r);
	t = batch_run(&r, 10, 20 * MS, 13, 40 * MS);
	ASSERT_TRUE(t && !strstr(t, "batch size"), "batch sizes under 1.5 times apart: nothing");
	run_close(&r);
	run_open(&r);
	for (int i = 0; i < 18; i++)
		batch_request(&r, 1000 * SEC + i * SEC, 21, i < 9 ? 20 * MS : 40 * MS,
			      i < 9 ? 4 : 12);
	t = run_print(&r);
	ASSERT_TRUE(t && !strstr(t, "batch size"), "180 gaps per group, under 200: nothing");
	run_close(&r);
}

int main(void)
{
	return check_run_all();
}
