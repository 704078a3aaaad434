// SPDX-License-Identifier: MIT
/* Which GPU steps each request rode (batch.c): each step's batch, each request's steps and mean
 * batch, from synthetic steps and token writes, edge cases included. */
#include <stdlib.h>

#include "check.h"
#include "pipeline/batch.h"
#include "pipeline/gpu.h"

#define MS 1000000ull
#define US 1000ull

/* Eager launches of a prefill step, and of a decode step beside its graph. */
#define PREFILL 40, 0
#define DECODE 2, 1
#define MIXED 40, 1
/* vLLM's piecewise graphs for a 32-layer model: every step alike */
#define PIECEWISE 32, 33
#define COPY 0, 0

static uint64_t add_step(struct gpu_timeline *g, uint32_t pid, uint64_t start, uint64_t end,
			 uint32_t launches, uint32_t graphs)
{
	struct ts_gpu_step_event e = { .hdr = { TS_EV_GPU_STEP, sizeof(e), pid, pid } };
	struct gpu_step out;

	e.start_ns = start;
	e.wait_start_ns = end - 100 * US;
	e.end_ns = end;
	e.launches = launches;
	e.graph_launches = graphs;
	e.waits = 1;
	gpu_add(g, &e, &out);
	return out.id;
}

static struct request *req(uint64_t arrival)
{
	static uint64_t conn;
	struct request *r = request_new(1, ++conn, 0, "c");

	r->arrival_ns = arrival;
	return r;
}

/* A content frame of r written at t, as the pipeline reports it. */
static void token(struct gpu_timeline *g, struct request *r, uint64_t t)
{
	request_add_token(r, t);
	batch_token(g, r);
	r->end_ns = t + 10 * US;
}

static uint32_t batch(const struct gpu_timeline *g, uint64_t id)
{
	const struct gpu_step *s = gpu_step_by_id(g, id);

	return s ? s->batch : 9999;
}

/* r's figures as the request line shows them. */
static void figures(const struct gpu_timeline *g, const struct request *r,
		    struct gpu_attribution *a)
{
	gpu_attribute(g, r, batch_prefill_step(g, r), a);
	batch_attribute(g, r, a);
}

/*
 * Three requests on one engine: A and B prefilled together, C alone a step later; decode steps
 * of 10 ms with every running request's token written 0.2 ms after the step. C finishes first,
 * A and B one step later: every step's batch and every request's figures are exact.
 */
TEST(test_known_batches)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *ra = req(1 * MS), *rb = req(2 * MS), *rc = req(12 * MS);
	uint64_t p1, p2, d[6];
	uint64_t t;

	gpu_init(&g);
	p1 = add_step(&g, 7, 3 * MS, 10 * MS, PREFILL);
	token(&g, ra, 10 * MS + 200 * US);
	token(&g, rb, 10 * MS + 300 * US);
	p2 = add_step(&g, 7, 13 * MS, 20 * MS, PREFILL);
	token(&g, rc, 20 * MS + 200 * US);
	for (int i = 0; i < 6; i++) {
		t = 20 * MS + i * 10 * MS;
		d[i] = add_step(&g, 7, t + 500 * US, t + 10 * MS, DECODE);
		token(&g, ra, t + 10 * MS + 200 * US);
		token(&g, rb, t + 10 * MS + 300 * US);
		if (i < 5)
			token(&g, rc, t + 10 * MS + 400 * US);
	}
	ASSERT_EQ(batch(&g, p1), 2, "prefill step: A and B's first tokens");
	ASSERT_EQ(batch(&g, p2), 1, "prefill step: C's");
	for (int i = 0; i < 5; i++)
		ASSERT_EQ(batch(&g, d[i]), 3, "decode steps with all three");
	ASSERT_EQ(batch(&g, d[5]), 2, "C had finished");
	figures(&g, ra, &a);
	ASSERT_TRUE(a.has_steps, "known");
	ASSERT_EQ(a.steps, 6, "A rode six decode steps (its first token's step is not one)");
	ASSERT_EQ(a.batch_steps, 6, "all still kept");
	ASSERT_NEAR(a.batch_mean, (5 * 3 + 2) / 6.0, 1e-9, "A's mean batch");
	ASSERT_EQ(a.nrides, 7, "a ride per step, the prefill included");
	if (ASSERT_OK_PTR(a.rides, "rides")) {
		ASSERT_EQ(a.rides[0].token, 0, "first token from the prefill");
		ASSERT_EQ(a.rides[0].batch, 2, "its batch");
		ASSERT_EQ(a.rides[0].end_ns, 10 * MS, "the prefill step");
		ASSERT_EQ(a.rides[6].token, 6, "last token");
		ASSERT_EQ(a.rides[6].ntokens, 1, "one token per step");
		ASSERT_EQ(a.rides[6].pid, 7, "its process");
	}
	gpu_attribution_free(&a);
	figures(&g, rc, &a);
	ASSERT_EQ(a.steps, 5, "C rode five");
	ASSERT_NEAR(a.batch_mean, 3.0, 1e-9, "always with A and B");
	gpu_attribution_free(&a);
	request_free(ra);
	request_free(rb);
	request_free(rc);
	gpu_free(&g);
}

/* Several tokens of one step written apart (speculative decoding, or a frame per write): the
 * request counts once in the step, and rode as many steps as there were. */
/* Engine to socket: each token's time from its step's end to its write, sorted; none for a
 * request whose steps are unknown. */
TEST(test_engine_to_socket)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r = req(1 * MS);
	uint64_t t;

	gpu_init(&g);
	add_step(&g, 7, 2 * MS, 10 * MS, PREFILL);
	token(&g, r, 10 * MS + 300 * US);
	for (int i = 0; i < 4; i++) {
		t = 10 * MS + (i + 1) * 10 * MS;
		add_step(&g, 7, t - 9 * MS, t, DECODE);
		/* The API process slower each token: 100, 200, 300, 400 us after the step. */
		token(&g, r, t + (i + 1) * 100 * US);
	}
	figures(&g, r, &a);
	if (ASSERT_EQ(a.ne2s, 5, "a delay per token") && ASSERT_OK_PTR(a.e2s, "delays")) {
		ASSERT_EQ(a.e2s[0], 100 * US, "sorted: the first decode token's");
		ASSERT_EQ(a.e2s[2], 300 * US, "the prefill's first token and the third decode's");
		ASSERT_EQ(a.e2s[4], 400 * US, "the largest last");
	}
	gpu_attribution_free(&a);
	ASSERT_TRUE(a.e2s == NULL && a.ne2s == 0, "freed");
	request_free(r);
	gpu_free(&g);
}

TEST(test_several_tokens_per_step)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r = req(1 * MS), *o = req(1 * MS);
	uint64_t d[3];

	gpu_init(&g);
	add_step(&g, 7, 2 * MS, 10 * MS, PREFILL);
	token(&g, r, 10 * MS + 100 * US);
	token(&g, o, 10 * MS + 150 * US);
	for (int i = 0; i < 3; i++) {
		uint64_t end = 20 * MS + i * 10 * MS;

		d[i] = add_step(&g, 7, end - 9 * MS, end, DECODE);
		/* Three tokens for r, in three writes; one for o. */
		token(&g, r, end + 100 * US);
		token(&g, r, end + 200 * US);
		token(&g, r, end + 300 * US);
		token(&g, o, end + 400 * US);
	}
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(batch(&g, d[i]), 2, "each request once");
	figures(&g, r, &a);
	ASSERT_EQ(a.steps, 3, "three steps, not nine tokens");
	ASSERT_NEAR(a.batch_mean, 2.0, 1e-9, "mean batch");
	if (ASSERT_EQ(a.nrides, 4, "rides") && a.rides)
		ASSERT_EQ(a.rides[1].ntokens, 3, "three tokens from the first decode step");
	gpu_attribution_free(&a);
	/* Two frames in one write share a time: the same step. */
	token(&g, o, 40 * MS + 400 * US);
	ASSERT_EQ(batch(&g, d[2]), 2, "a frame of the same write adds nothing");
	request_free(r);
	request_free(o);
	gpu_free(&g);
}

/*
 * A token the host wrote after the next step had ended (held back longer than a step) is
 * credited to that later step: the step it came from misses the request, and the request rides
 * one step fewer. The rule puts every write after the latest step before it; what it cannot
 * see, it cannot credit.
 */
TEST(test_late_token)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r = req(1 * MS), *o = req(1 * MS);
	uint64_t d1, d2, d3;

	gpu_init(&g);
	add_step(&g, 7, 2 * MS, 10 * MS, PREFILL);
	token(&g, r, 10 * MS + 100 * US);
	token(&g, o, 10 * MS + 200 * US);
	d1 = add_step(&g, 7, 11 * MS, 20 * MS, DECODE);
	token(&g, o, 20 * MS + 100 * US);
	d2 = add_step(&g, 7, 21 * MS, 30 * MS, DECODE);
	/* r's token from d1 comes only now, then its token from d2 at once. */
	token(&g, r, 30 * MS + 500 * US);
	token(&g, r, 30 * MS + 600 * US);
	token(&g, o, 30 * MS + 700 * US);
	d3 = add_step(&g, 7, 31 * MS, 40 * MS, DECODE);
	token(&g, r, 40 * MS + 100 * US);
	token(&g, o, 40 * MS + 200 * US);
	ASSERT_EQ(batch(&g, d1), 1, "d1 misses r (its token came after d2 ended)");
	ASSERT_EQ(batch(&g, d2), 2, "d2 has both");
	ASSERT_EQ(batch(&g, d3), 2, "back in step");
	figures(&g, r, &a);
	ASSERT_EQ(a.steps, 2, "r: one step fewer than it rode");
	gpu_attribution_free(&a);
	request_free(r);
	request_free(o);
	gpu_free(&g);
}

/*
 * Two engines (data parallel, pids 7 and 8) and a tensor-parallel twin of engine 7 (pid 9, the
 * same steps at the same times): each request rides the steps of the process that prefilled it
 * only; the twin's steps are credited with nothing.
 */
TEST(test_serving_process)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r7 = req(1 * MS), *r8 = req(1 * MS);
	uint64_t d7[3], d8[3], d9[3];

	gpu_init(&g);
	add_step(&g, 9, 2 * MS, 10 * MS, PREFILL);
	add_step(&g, 7, 2 * MS, 10 * MS + 10 * US, PREFILL);
	token(&g, r7, 10 * MS + 200 * US);
	add_step(&g, 8, 3 * MS, 12 * MS, PREFILL);
	token(&g, r8, 12 * MS + 200 * US);
	for (int i = 0; i < 3; i++) {
		uint64_t e7 = 20 * MS + i * 10 * MS, e8 = 23 * MS + i * 10 * MS;

		d9[i] = add_step(&g, 9, e7 - 8 * MS, e7, DECODE);
		d7[i] = add_step(&g, 7, e7 - 8 * MS, e7 + 10 * US, DECODE);
		token(&g, r7, e7 + 200 * US);
		d8[i] = add_step(&g, 8, e8 - 8 * MS, e8, DECODE);
		token(&g, r8, e8 + 200 * US);
	}
	for (int i = 0; i < 3; i++) {
		ASSERT_EQ(batch(&g, d7[i]), 1, "engine 7: r7");
		ASSERT_EQ(batch(&g, d8[i]), 1, "engine 8: r8, though engine 7's step ended later");
		ASSERT_EQ(batch(&g, d9[i]), 0, "the twin: nothing");
	}
	figures(&g, r8, &a);
	ASSERT_EQ(a.steps, 3, "r8's steps");
	if (ASSERT_OK_PTR(a.rides, "rides"))
		ASSERT_EQ(a.rides[1].pid, 8, "of engine 8");
	gpu_attribution_free(&a);
	request_free(r7);
	request_free(r8);
	gpu_free(&g);
}

/*
 * Mixed steps (chunked prefill with decodes) and copy-only steps: a mixed step counts every
 * request whose token followed it, the first tokens of those it prefilled included; a step that
 * launched nothing is never credited, even when it ended last before a write.
 */
TEST(test_mixed_and_other_steps)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r = req(1 * MS), *n = req(12 * MS);
	uint64_t m, c, d;

	gpu_init(&g);
	add_step(&g, 7, 2 * MS, 10 * MS, PREFILL);
	token(&g, r, 10 * MS + 100 * US);
	m = add_step(&g, 7, 13 * MS, 20 * MS, MIXED);
	c = add_step(&g, 7, 20 * MS + 10 * US, 20 * MS + 50 * US, COPY);
	token(&g, r, 20 * MS + 100 * US);
	token(&g, n, 20 * MS + 200 * US);
	d = add_step(&g, 7, 21 * MS, 30 * MS, DECODE);
	token(&g, r, 30 * MS + 100 * US);
	token(&g, n, 30 * MS + 200 * US);
	ASSERT_EQ(batch(&g, m), 2, "mixed: r's decode and n's first token");
	ASSERT_EQ(batch(&g, c), 0, "a copy-only step: never");
	ASSERT_EQ(batch(&g, d), 2, "decode");
	figures(&g, n, &a);
	ASSERT_EQ(a.steps, 1, "n: one decode step after its first token's");
	ASSERT_NEAR(a.batch_mean, 2.0, 1e-9, "n's mean");
	gpu_attribution_free(&a);
	figures(&g, r, &a);
	ASSERT_EQ(a.steps, 2, "r: the mixed step and the decode");
	gpu_attribution_free(&a);
	request_free(r);
	request_free(n);
	gpu_free(&g);
}

/* No prefill step was seen (tracing began mid-request): the first token is credited to no
 * step, the serving process is the one of the first step a token follows. */
TEST(test_no_prefill_seen)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r = req(1 * MS);
	uint64_t d1, d2;

	gpu_init(&g);
	token(&g, r, 5 * MS);
	figures(&g, r, &a);
	ASSERT_FALSE(a.has_steps, "no GPU step seen yet: null");
	gpu_attribution_free(&a);
	d1 = add_step(&g, 8, 6 * MS, 10 * MS, DECODE);
	token(&g, r, 10 * MS + 100 * US);
	add_step(&g, 9, 11 * MS, 19 * MS, DECODE); /* another engine's */
	d2 = add_step(&g, 8, 11 * MS, 18 * MS, DECODE);
	token(&g, r, 19 * MS + 100 * US);
	ASSERT_EQ(batch(&g, d1), 1, "the first step after the first token");
	ASSERT_EQ(batch(&g, d2), 1, "then its process's, not the later one of another");
	figures(&g, r, &a);
	ASSERT_TRUE(a.has_steps, "steps known");
	ASSERT_EQ(a.steps, 2, "two");
	if (ASSERT_EQ(a.nrides, 2, "no ride for the first token"))
		ASSERT_EQ(a.rides[0].token, 1, "from the second token on");
	gpu_attribution_free(&a);
	request_free(r);
	gpu_free(&g);
}

/*
 * When a step's batch is final: not before the end of its process's next step that launched
 * work (plus GPU_BATCH_SLACK_NS), or GPU_BATCH_WAIT_NS after its own end when none came. A
 * request whose batch-mates write their tokens of its last step after it ended is settled only
 * then, and its figures count them.
 */
TEST(test_windows_close)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r = req(1 * MS), *o = req(1 * MS);
	const struct gpu_step *s;
	uint64_t p, d1, d2;

	gpu_init(&g);
	p = add_step(&g, 7, 2 * MS, 10 * MS, PREFILL);
	token(&g, r, 10 * MS + 100 * US);
	token(&g, o, 10 * MS + 200 * US);
	d1 = add_step(&g, 7, 11 * MS, 20 * MS, DECODE);
	/* r's last token, and its end; o's token of the same step comes after. */
	token(&g, r, 20 * MS + 100 * US);
	s = gpu_step_by_id(&g, d1);
	ASSERT_FALSE(gpu_step_closed(s, 20 * MS + 200 * US), "open: no next step yet");
	ASSERT_FALSE(batch_settled(&g, r, 20 * MS + 200 * US), "r waits");
	ASSERT_TRUE(gpu_step_closed(gpu_step_by_id(&g, p), 20 * MS + GPU_BATCH_SLACK_NS),
		    "the prefill's window closed with d1's end");
	token(&g, o, 20 * MS + 300 * US);
	d2 = add_step(&g, 7, 21 * MS, 30 * MS, DECODE);
	ASSERT_EQ(s->next_end_ns, 30 * MS, "d1's window ends with d2");
	ASSERT_FALSE(gpu_step_closed(s, 30 * MS), "a write may still come in a later record");
	ASSERT_TRUE(gpu_step_closed(s, 30 * MS + GPU_BATCH_SLACK_NS), "closed");
	ASSERT_TRUE(batch_settled(&g, r, 30 * MS + GPU_BATCH_SLACK_NS), "r can go out");
	figures(&g, r, &a);
	ASSERT_NEAR(a.batch_mean, 2.0, 1e-9, "with o's late write");
	gpu_attribution_free(&a);
	s = gpu_step_by_id(&g, d2);
	token(&g, o, 30 * MS + 100 * US);
	ASSERT_FALSE(gpu_step_closed(s, 30 * MS + GPU_BATCH_WAIT_NS - 1), "idle: waits");
	ASSERT_TRUE(gpu_step_closed(s, 30 * MS + GPU_BATCH_WAIT_NS), "then closes");
	ASSERT_TRUE(
	    gpu_step_closed(gpu_step_by_id(&g, add_step(&g, 7, 31 * MS, 32 * MS, COPY)), 32 * MS),
	    "a copy-only step never waits");
	request_free(r);
	request_free(o);
	gpu_free(&g);
}

/* Steps held until their batch is final, then given back in order; everything at the end. */
TEST(test_steps_held_until_final)
{
	struct gpu_timeline g;
	struct gpu_step out;
	struct request *r = req(1 * MS), *o = req(1 * MS);

	gpu_init(&g);
	add_step(&g, 7, 2 * MS, 10 * MS, PREFILL);
	ASSERT_FALSE(gpu_next_ready(&g, 10 * MS, 10 * MS, false, &out), "held at its end");
	token(&g, r, 10 * MS + 100 * US);
	add_step(&g, 7, 11 * MS, 20 * MS, DECODE);
	token(&g, r, 20 * MS + 100 * US);
	ASSERT_FALSE(gpu_next_ready(&g, 20 * MS, 20 * MS, false, &out), "not yet: the slack");
	if (ASSERT_TRUE(gpu_next_ready(&g, 20 * MS, 21 * MS, false, &out), "the clock moved on"))
		ASSERT_EQ(out.batch, 1, "the prefill step, with its batch");
	ASSERT_FALSE(gpu_next_ready(&g, 20 * MS, 21 * MS, false, &out), "the decode waits");
	if (ASSERT_TRUE(gpu_next_ready(&g, 20 * MS, 21 * MS, true, &out), "at the end: all"))
		ASSERT_EQ(out.batch, 1, "the decode step");
	ASSERT_EQ(g.batch_early, 0, "the end does not count as early");
	token(&g, r, 20 * MS + 200 * US);
	ASSERT_EQ(g.batch_late, 0, "same step: nothing credited");
	/* A first token written after the decode step, of a request the prefill step prefilled:
	 * credited to the prefill step, whose line was shown. */
	token(&g, o, 20 * MS + 300 * US);
	ASSERT_EQ(g.batch_late, 1, "a token after its step was shown is counted");
	request_free(r);
	request_free(o);
	gpu_free(&g);
}

/* A request that rode more steps than it keeps folds the older ones into its sums; one whose
 * steps left the history has its mean over those still kept. Client requests ride nothing. */
TEST(test_long_requests)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r = req(1 * MS), *o = req(1 * MS), *c = req(1 * MS);
	const uint32_t n = BATCH_KEEP + 100;

	gpu_init(&g);
	c->client = true;
	add_step(&g, 7, 2 * MS, 10 * MS, PREFILL);
	token(&g, r, 10 * MS + 100 * US);
	token(&g, c, 10 * MS + 100 * US);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t end = 20 * MS + i * MS;

		add_step(&g, 7, end - 800 * US, end, DECODE);
		token(&g, r, end + 100 * US);
		token(&g, c, end + 100 * US);
		/* o rides every other step */
		if (i % 2)
			token(&g, o, end + 200 * US);
	}
	figures(&g, r, &a);
	ASSERT_EQ(a.steps, n, "every step, folded ones included");
	ASSERT_EQ(a.batch_steps, n, "all known");
	/* o's first token, written after step 1, came from step 1 (the latest step before its
	 * write); it rides every odd step. */
	ASSERT_NEAR(a.batch_mean, 1.0 + (n / 2) / (double)n, 1e-9, "mean over all");
	ASSERT_TRUE(a.nrides <= BATCH_KEEP, "bounded");
	gpu_attribution_free(&a);
	figures(&g, c, &a);
	ASSERT_FALSE(a.has_steps, "a client request: null");
	gpu_attribution_free(&a);
	/* The history moves on past r's steps. */
	for (uint32_t i = 0; i < GPU_HISTORY; i++)
		add_step(&g, 8, 20 * MS + (n + i) * MS, 20 * MS + (n + i) * MS + 500 * US, DECODE);
	figures(&g, r, &a);
	ASSERT_EQ(a.steps, n, "still counted");
	ASSERT_EQ(a.batch_steps, n - a.nrides, "only the folded ones known");
	ASSERT_TRUE(batch_settled(&g, r, 0), "forgotten steps hold nothing back");
	gpu_attribution_free(&a);
	request_free(r);
	request_free(o);
	request_free(c);
	gpu_free(&g);
}

/*
 * Preemption: r decodes, misses two decode steps that o rides, is recomputed in a prefill step
 * that gives its next token, and goes on; later it is preempted a second time, for three
 * steps, and then finishes. Out of the batch from the start of the first missed step to the
 * end of the recompute, each time.
 */
TEST(test_preempted_twice_then_finished)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r = req(1 * MS), *o = req(1 * MS);
	uint64_t t = 20 * MS;

	gpu_init(&g);
	add_step(&g, 7, 2 * MS, 10 * MS, PREFILL);
	token(&g, r, 10 * MS + 100 * US);
	token(&g, o, 10 * MS + 200 * US);
	add_step(&g, 7, 11 * MS, 20 * MS, DECODE);
	token(&g, r, 20 * MS + 100 * US);
	token(&g, o, 20 * MS + 200 * US);
	/* Out: steps at 21-30 and 31-40 ride o alone; the recompute 41-48 gives r's token. */
	for (int k = 0; k < 2; k++, t += 10 * MS) {
		add_step(&g, 7, t + 1 * MS, t + 10 * MS, DECODE);
		token(&g, o, t + 10 * MS + 200 * US);
	}
	add_step(&g, 7, 41 * MS, 48 * MS, PREFILL);
	token(&g, r, 48 * MS + 100 * US);
	add_step(&g, 7, 49 * MS, 58 * MS, DECODE);
	token(&g, r, 58 * MS + 100 * US);
	token(&g, o, 58 * MS + 200 * US);
	figures(&g, r, &a);
	ASSERT_EQ(a.preemptions, 1, "once so far");
	ASSERT_EQ(a.preempted_ns, (int64_t)(48 - 21) * (int64_t)MS, "21 ms to 48 ms out");
	ASSERT_EQ(a.recomputed_generated, 2, "its two tokens before the recompute");
	ASSERT_EQ(a.recompute_ns, 7 * MS, "the recompute step, 41 to 48 ms");
	gpu_attribution_free(&a);
	/* Three missed steps, a recompute in a mixed step, and r's last token. */
	for (int k = 0; k < 3; k++) {
		add_step(&g, 7, (59 + 10 * k) * MS, (68 + 10 * k) * MS, DECODE);
		token(&g, o, (68 + 10 * k) * MS + 200 * US);
	}
	add_step(&g, 7, 89 * MS, 97 * MS, MIXED);
	token(&g, r, 97 * MS + 100 * US);
	token(&g, o, 97 * MS + 200 * US);
	figures(&g, r, &a);
	ASSERT_EQ(a.preemptions, 2, "twice");
	ASSERT_EQ(a.preempted_ns, (int64_t)((48 - 21) + (97 - 59)) * (int64_t)MS,
		  "27 ms and 38 ms out");
	ASSERT_EQ(a.recomputed_generated, 2 + 4, "then its four tokens");
	ASSERT_EQ(a.recompute_ns, (7 + 8) * MS, "and the mixed step, 89 to 97 ms");
	gpu_attribution_free(&a);
	figures(&g, o, &a);
	ASSERT_EQ(a.preemptions, 0, "o never left");
	ASSERT_TRUE(a.has_steps, "its steps are known");
	gpu_attribution_free(&a);
	request_free(r);
	request_free(o);
	gpu_free(&g);
}

/*
 * Not preemptions: a token written late (one step missed, then two tokens at once); another
 * request's prefill between two of r's tokens (no step missed); a prefill before r's first
 * token (chunked prefill: several prefill steps, then the first token); steps that launched
 * nothing (a copy) in r's gap; and steps after r's last token.
 */
TEST(test_not_preempted)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r = req(1 * MS), *o = req(1 * MS), *n = req(25 * MS);

	gpu_init(&g);
	/* Chunked prefill of r: three prefill steps before its first token. */
	add_step(&g, 7, 2 * MS, 5 * MS, PREFILL);
	add_step(&g, 7, 6 * MS, 8 * MS, PREFILL);
	add_step(&g, 7, 8 * MS + 500 * US, 10 * MS, PREFILL);
	token(&g, r, 10 * MS + 100 * US);
	token(&g, o, 10 * MS + 200 * US);
	/* r's token from 11-20 is written after 21-30 ended: one missed step, no recompute. */
	add_step(&g, 7, 11 * MS, 20 * MS, DECODE);
	token(&g, o, 20 * MS + 100 * US);
	add_step(&g, 7, 21 * MS, 30 * MS, DECODE);
	token(&g, r, 30 * MS + 500 * US);
	token(&g, r, 30 * MS + 600 * US);
	token(&g, o, 30 * MS + 700 * US);
	/* n's prefill between two of r's tokens, with copies (nothing launched) around it. */
	add_step(&g, 7, 31 * MS, 32 * MS, COPY);
	add_step(&g, 7, 32 * MS, 40 * MS, PREFILL);
	token(&g, n, 40 * MS + 50 * US);
	add_step(&g, 7, 40 * MS + 100 * US, 40 * MS + 200 * US, COPY);
	add_step(&g, 7, 41 * MS, 50 * MS, DECODE);
	token(&g, r, 50 * MS + 100 * US);
	token(&g, o, 50 * MS + 200 * US);
	token(&g, n, 50 * MS + 300 * US);
	/* r is done; o and n go on, with a prefill among their steps. */
	for (int k = 0; k < 3; k++) {
		add_step(&g, 7, (51 + 10 * k) * MS, (60 + 10 * k) * MS, k == 2 ? 40 : 2,
			 k == 2 ? 0 : 1);
		token(&g, o, (60 + 10 * k) * MS + 200 * US);
		token(&g, n, (60 + 10 * k) * MS + 300 * US);
	}
	figures(&g, r, &a);
	ASSERT_EQ(a.preemptions, 0, "r: late write, another's prefill, chunked prefill");
	ASSERT_EQ(a.preempted_ns, 0, "no time out");
	gpu_attribution_free(&a);
	figures(&g, n, &a);
	ASSERT_EQ(a.preemptions, 0, "n rode every step");
	gpu_attribution_free(&a);
	request_free(r);
	request_free(o);
	request_free(n);
	gpu_free(&g);
}

/*
 * Frames of three steps written together (the host fell behind by two steps, then a mixed step
 * ran): the first frame seems to have missed two steps before a mixed one, but the write's
 * other two frames came from them: no preemption. A real one (three steps missed) whose
 * recompute's token goes out with one more frame stays one.
 */
TEST(test_frames_of_several_steps_in_one_write)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r = req(1 * MS), *o = req(1 * MS);

	gpu_init(&g);
	add_step(&g, 7, 2 * MS, 10 * MS, PREFILL);
	token(&g, r, 10 * MS + 100 * US);
	token(&g, o, 10 * MS + 200 * US);
	add_step(&g, 7, 11 * MS, 20 * MS, DECODE);
	add_step(&g, 7, 21 * MS, 30 * MS, DECODE);
	add_step(&g, 7, 31 * MS, 40 * MS, MIXED);
	token(&g, r, 40 * MS + 100 * US);
	token(&g, r, 40 * MS + 100 * US);
	token(&g, r, 40 * MS + 100 * US);
	token(&g, o, 40 * MS + 200 * US);
	add_step(&g, 7, 41 * MS, 50 * MS, DECODE);
	token(&g, r, 50 * MS + 100 * US);
	token(&g, o, 50 * MS + 200 * US);
	figures(&g, r, &a);
	ASSERT_EQ(a.preemptions, 0, "three frames, three steps: a late write");
	ASSERT_EQ(a.preempted_ns, 0, "no time out");
	gpu_attribution_free(&a);
	/* r rides 51-60, whose token is held back; out for 61-70, 71-80, 81-90 (o alone);
	 * recomputed in 91-98, whose token goes out with the held one: one of the four steps
	 * that seemed missed explained, three not: a preemption. */
	add_step(&g, 7, 51 * MS, 60 * MS, DECODE);
	token(&g, o, 60 * MS + 200 * US);
	for (int k = 0; k < 3; k++) {
		add_step(&g, 7, (61 + 10 * k) * MS, (70 + 10 * k) * MS, DECODE);
		token(&g, o, (70 + 10 * k) * MS + 200 * US);
	}
	add_step(&g, 7, 91 * MS, 98 * MS, PREFILL);
	token(&g, r, 98 * MS + 100 * US);
	token(&g, r, 98 * MS + 100 * US);
	add_step(&g, 7, 99 * MS, 108 * MS, DECODE);
	token(&g, r, 108 * MS + 100 * US);
	token(&g, o, 108 * MS + 200 * US);
	figures(&g, r, &a);
	ASSERT_EQ(a.preemptions, 1, "three steps unexplained: preempted");
	ASSERT_EQ(a.preempted_ns, (int64_t)(98 - 51) * (int64_t)MS,
		  "from the first step that seemed missed (the held one's too)");
	gpu_attribution_free(&a);
	request_free(r);
	request_free(o);
	gpu_free(&g);
}

/* Preempted before its first token (queued again before any output): not a preemption of a
 * running request; the wait is in its queue time. And no GPU steps at all: null. */
TEST(test_preempted_before_first_token)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct request *r = req(1 * MS), *o = req(1 * MS);

	gpu_init(&g);
	add_step(&g, 7, 2 * MS, 10 * MS, PREFILL);
	token(&g, o, 10 * MS + 200 * US);
	add_step(&g, 7, 11 * MS, 20 * MS, DECODE);
	token(&g, o, 20 * MS + 200 * US);
	add_step(&g, 7, 21 * MS, 30 * MS, DECODE);
	token(&g, o, 30 * MS + 200 * US);
	add_step(&g, 7, 31 * MS, 38 * MS, PREFILL);
	token(&g, r, 38 * MS + 100 * US);
	figures(&g, r, &a);
	ASSERT_EQ(a.preemptions, 0, "before its first token: none");
	gpu_attribution_free(&a);
	request_free(r);
	request_free(o);
	gpu_free(&g);

	gpu_init(&g);
	r = req(1 * MS);
	token(&g, r, 2 * MS);
	token(&g, r, 3 * MS);
	figures(&g, r, &a);
	ASSERT_FALSE(a.has_steps, "no GPU steps: preemptions unknown (null)");
	gpu_attribution_free(&a);
	request_free(r);
	gpu_free(&g);
}

/* Every held step shown (the end of a run), each one's kind kept by id. */
static void show_all(struct gpu_timeline *g, struct gpu_step *shown, uint32_t n)
{
	struct gpu_step out;

	while (gpu_next_ready(g, 0, 0, true, &out))
		if (out.id < n)
			shown[out.id] = out;
}

/*
 * Step kinds from the tokens written after the steps, on an engine whose every step has the
 * same launch shape (vLLM's piecewise graphs: a graph piece per layer, an attention kernel
 * between two), which by that shape alone would all be mixed:
 * - chunked prefill: two steps no token followed (kind by launches), then the one r's and o's
 *   first tokens followed (prefill);
 * - a step only next tokens followed (decode), then one that gave n its first token beside
 *   their next ones (mixed);
 * - speculative decoding: three tokens of r in one write after one step (a decode, r once);
 * - frames of two steps in one write: one each, both decode.
 */
TEST(test_kinds_from_tokens)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	struct gpu_step shown[16] = { 0 };
	struct request *r = req(1 * MS), *o = req(1 * MS), *n = req(12 * MS);
	uint64_t c1, c2, p, d, m, sd, w1, w2;

	gpu_init(&g);
	c1 = add_step(&g, 7, 2 * MS, 4 * MS, PIECEWISE);
	c2 = add_step(&g, 7, 5 * MS, 7 * MS, PIECEWISE);
	p = add_step(&g, 7, 8 * MS, 10 * MS, PIECEWISE);
	token(&g, r, 10 * MS + 100 * US);
	token(&g, o, 10 * MS + 200 * US);
	d = add_step(&g, 7, 11 * MS, 20 * MS, PIECEWISE);
	token(&g, r, 20 * MS + 100 * US);
	token(&g, o, 20 * MS + 200 * US);
	m = add_step(&g, 7, 21 * MS, 30 * MS, PIECEWISE);
	token(&g, r, 30 * MS + 100 * US);
	token(&g, o, 30 * MS + 200 * US);
	token(&g, n, 30 * MS + 300 * US);
	sd = add_step(&g, 7, 31 * MS, 40 * MS, PIECEWISE);
	for (int k = 0; k < 3; k++)
		token(&g, r, 40 * MS + 100 * US);
	token(&g, o, 40 * MS + 200 * US);
	w1 = add_step(&g, 7, 41 * MS, 50 * MS, PIECEWISE);
	token(&g, o, 50 * MS + 200 * US);
	w2 = add_step(&g, 7, 51 * MS, 60 * MS, PIECEWISE);
	token(&g, r, 60 * MS + 100 * US);
	token(&g, r, 60 * MS + 100 * US);
	token(&g, o, 60 * MS + 200 * US);
	show_all(&g, shown, 16);
	ASSERT_FALSE(shown[c1].by_tokens || shown[c2].by_tokens, "chunks: no token followed");
	ASSERT_EQ(shown[c1].kind, STEP_MIXED, "so their launch shape decides");
	ASSERT_EQ(shown[c1].mode, MODE_PIECEWISE, "piecewise");
	ASSERT_TRUE(shown[p].by_tokens, "the last chunk: by tokens");
	ASSERT_EQ(shown[p].kind, STEP_PREFILL, "first tokens only: prefill");
	ASSERT_EQ(shown[p].firsts, 2, "r's and o's");
	ASSERT_EQ(shown[d].kind, STEP_DECODE, "next tokens only: decode");
	ASSERT_EQ(shown[m].kind, STEP_MIXED, "n's first token and two next ones: mixed");
	ASSERT_EQ(shown[m].firsts, 1, "n's");
	ASSERT_EQ(shown[sd].kind, STEP_DECODE, "several tokens of r: still a decode");
	ASSERT_EQ(shown[sd].batch, 2, "r once");
	ASSERT_EQ(shown[w1].batch, 2, "the first frame of r's late write came from w1");
	ASSERT_EQ(shown[w2].batch, 2, "its second from w2");
	ASSERT_EQ(shown[w1].kind, STEP_DECODE, "decode");
	figures(&g, r, &a);
	ASSERT_EQ(a.queue_ns, (int64_t)(8 - 1) * (int64_t)MS,
		  "queue to the step its first token came from (the chunks before it too)");
	ASSERT_EQ(a.prefill_ns, (int64_t)2 * (int64_t)MS, "prefill: that step");
	ASSERT_EQ(a.preemptions, 0, "none");
	if (ASSERT_EQ(a.nrides, 6, "rides: p, d, m, sd, w1, w2") && a.rides)
		ASSERT_EQ(a.rides[3].ntokens, 3, "three tokens from sd");
	gpu_attribution_free(&a);
	figures(&g, n, &a);
	ASSERT_EQ(a.queue_ns, (int64_t)(21 - 12) * (int64_t)MS, "n: queued until the mixed step");
	gpu_attribution_free(&a);
	request_free(r);
	request_free(o);
	request_free(n);
	gpu_free(&g);
}

int main(void)
{
	return check_run_all();
}
