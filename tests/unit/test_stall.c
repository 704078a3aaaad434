// SPDX-License-Identifier: MIT
/* Who stalled me (stall.c): each cause of a slow gap from synthetic steps and token writes, the
 * stalling requests named, the threshold, and the likely cause without GPU steps. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pipeline/batch.h"
#include "pipeline/gpu.h"
#include "pipeline/stall.h"

#define MS 1000000ull
#define US 1000ull

#define PREFILL 40, 0
#define DECODE 2, 1

struct world {
	struct gpu_timeline g;
	struct stall_table t;
};

static void step(struct world *w, uint64_t start, uint64_t end, uint32_t launches, uint32_t graphs)
{
	struct ts_gpu_step_event e = { .hdr = { TS_EV_GPU_STEP, sizeof(e), 7, 7 } };
	struct gpu_step out;

	e.start_ns = start;
	e.wait_start_ns = end - 100 * US;
	e.end_ns = end;
	e.launches = launches;
	e.graph_launches = graphs;
	e.waits = 1;
	gpu_add(&w->g, &e, &out);
	while (gpu_next_ready(&w->g, end, end, false, &out))
		;
}

static struct request *req(uint64_t arrival, uint32_t pid)
{
	static uint64_t conn;
	struct request *r = request_new(pid, ++conn, 0, "c");

	r->arrival_ns = arrival;
	snprintf(r->conn, sizeof(r->conn), "server<-client#%llu", (unsigned long long)conn);
	r->prompt_bytes = 1000 * conn;
	return r;
}

static void token(struct world *w, struct request *r, uint64_t t)
{
	request_add_token(r, t);
	batch_token(&w->g, r);
	stall_token(&w->t, &w->g, r);
	r->end_ns = t + 10 * US;
}

/* r's stalls, as the pipeline computes them at its end (freed by the caller). */
static void stalls(struct world *w, struct request *r, struct gpu_attribution *a)
{
	struct gpu_step out;

	while (gpu_next_ready(&w->g, 0, 0, true, &out))
		;
	struct request_metrics m;

	request_metrics(r, &m);
	gpu_attribute(&w->g, r, batch_prefill_step(&w->g, r), a);
	batch_attribute(&w->g, r, a);
	stall_attribute(&w->t, &w->g, r, &m, a);
}

/* r and o decode in 10 ms steps; n arrives and its 200 ms prefill runs alone between two of
 * their steps: each of r's and o's gaps over it is a stall, caused by n's prefill, n named. */
TEST(test_prefill_of_another)
{
	struct world w;
	struct gpu_attribution a;
	struct request *r = req(1 * MS, 1), *o = req(1 * MS, 1), *n = req(35 * MS, 1);
	uint64_t t = 10 * MS;

	gpu_init(&w.g);
	stall_init(&w.t, 0);
	step(&w, 2 * MS, t, PREFILL);
	token(&w, r, t + 100 * US);
	token(&w, o, t + 200 * US);
	for (int k = 0; k < 3; k++, t += 10 * MS) {
		step(&w, t + 500 * US, t + 10 * MS, DECODE);
		token(&w, r, t + 10 * MS + 100 * US);
		token(&w, o, t + 10 * MS + 200 * US);
	}
	step(&w, t + 500 * US, t + 200 * MS, PREFILL);
	token(&w, n, t + 200 * MS + 300 * US);
	t += 200 * MS;
	for (int k = 0; k < 4; k++, t += 10 * MS) {
		step(&w, t + 500 * US, t + 10 * MS, DECODE);
		token(&w, r, t + 10 * MS + 100 * US);
		token(&w, o, t + 10 * MS + 200 * US);
		token(&w, n, t + 10 * MS + 300 * US);
	}
	n->prompt_tokens = 8123;
	stall_request_done(&w.t, n);
	stalls(&w, r, &a);
	if (ASSERT_OK_PTR(a.stalls, "a report") && ASSERT_EQ(a.stalls->n, 1, "one gap")) {
		const struct stall *s = &a.stalls->v[0];

		ASSERT_EQ(a.stalls->threshold_ns, 50 * MS, "3 x 10 ms is under 50 ms");
		ASSERT_EQ(s->token, 4, "before r's 5th token");
		ASSERT_EQ(s->cause, STALL_PREFILL, "n's prefill");
		ASSERT_FALSE(s->likely, "from the steps");
		ASSERT_TRUE(s->cause_ns >= 199 * MS, "its 199.5 ms");
		if (ASSERT_EQ(s->nby, 1, "one request named")) {
			ASSERT_STREQ(s->by[0].conn, n->conn, "n");
			ASSERT_EQ(s->by[0].prompt_tokens, 8123, "its prompt, known by then");
		}
		ASSERT_EQ(a.stalls->count[STALL_PREFILL], 1, "counted by cause");
	}
	gpu_attribution_free(&a);
	stalls(&w, n, &a);
	ASSERT_EQ(a.stalls ? a.stalls->n : 99, 0, "n itself: no stall (its wait is its TTFT)");
	gpu_attribution_free(&a);
	request_free(r);
	request_free(o);
	request_free(n);
	stall_free(&w.t);
	gpu_free(&w.g);
}

/*
 * The other causes: r is preempted (out for 6 steps that o rides, back through a recompute);
 * later a step of r's twice as long as its others after the batch grew (batch); then the host
 * idles 100 ms between two steps (host); then r's token is written 100 ms after its step ended
 * (late write). A threshold given (--stall-ms 40) applies as given.
 */
TEST(test_other_causes)
{
	struct world w;
	struct gpu_attribution a;
	struct request *r = req(1 * MS, 1), *o = req(1 * MS, 1), *q[4];
	uint64_t t = 10 * MS;

	gpu_init(&w.g);
	stall_init(&w.t, 40 * MS);
	step(&w, 2 * MS, t, PREFILL);
	token(&w, r, t + 100 * US);
	token(&w, o, t + 200 * US);
	for (int k = 0; k < 3; k++, t += 10 * MS) {
		step(&w, t + 500 * US, t + 10 * MS, DECODE);
		token(&w, r, t + 10 * MS + 100 * US);
		token(&w, o, t + 10 * MS + 200 * US);
	}
	/* preempted: 6 steps of o alone, then r's recompute */
	for (int k = 0; k < 6; k++, t += 10 * MS) {
		step(&w, t + 500 * US, t + 10 * MS, DECODE);
		token(&w, o, t + 10 * MS + 200 * US);
	}
	step(&w, t + 500 * US, t + 10 * MS, DECODE);
	token(&w, r, t + 10 * MS + 100 * US);
	token(&w, o, t + 10 * MS + 200 * US);
	t += 10 * MS;
	/* the batch grows: four more requests join (their first tokens from a 5 ms prefill),
	 * and the next decode step lasts 50 ms */
	step(&w, t + 500 * US, t + 5 * MS, PREFILL);
	for (int k = 0; k < 4; k++) {
		q[k] = req(t, 1);
		token(&w, q[k], t + 5 * MS + 300 * US);
	}
	t += 5 * MS;
	step(&w, t + 500 * US, t + 50 * MS, DECODE);
	token(&w, r, t + 50 * MS + 100 * US);
	token(&w, o, t + 50 * MS + 200 * US);
	for (int k = 0; k < 4; k++)
		token(&w, q[k], t + 50 * MS + 300 * US);
	t += 50 * MS;
	/* host: 100 ms with no step */
	step(&w, t + 100 * MS, t + 110 * MS, DECODE);
	token(&w, r, t + 110 * MS + 100 * US);
	token(&w, o, t + 110 * MS + 200 * US);
	t += 110 * MS;
	/* late write: r's token 100 ms after its step's end (o's at once) */
	step(&w, t + 500 * US, t + 10 * MS, DECODE);
	token(&w, o, t + 10 * MS + 200 * US);
	token(&w, r, t + 110 * MS);
	stalls(&w, r, &a);
	if (ASSERT_OK_PTR(a.stalls, "a report") && ASSERT_EQ(a.stalls->n, 4, "four gaps")) {
		const struct stall *s = a.stalls->v;

		ASSERT_EQ(a.stalls->threshold_ns, 40 * MS, "--stall-ms");
		ASSERT_EQ(s[0].cause, STALL_PREEMPTED, "out of the batch");
		ASSERT_EQ(s[1].cause, STALL_BATCH, "the batch grew");
		ASSERT_EQ(s[1].batch_from, 2, "from r and o");
		ASSERT_EQ(s[1].batch_to, 6, "to six");
		ASSERT_EQ(s[2].cause, STALL_HOST, "no step ran");
		ASSERT_TRUE(s[2].cause_ns >= 99 * MS, "about 100 ms of it");
		ASSERT_EQ(s[3].cause, STALL_LATE_WRITE, "written late");
		ASSERT_EQ(a.preemptions, 1, "the preemption itself");
	}
	gpu_attribution_free(&a);
	request_free(r);
	request_free(o);
	for (int k = 0; k < 4; k++)
		request_free(q[k]);
	stall_free(&w.t);
	gpu_free(&w.g);
}

/* No GPU steps: a gap during another request's wait for its first token (same server) is
 * likely its prefill, marked so; one during no such wait is unknown; another server's wait is
 * not counted. Fewer than two tokens: no report. */
TEST(test_likely_without_steps)
{
	struct world w;
	struct gpu_attribution a;
	struct request *r = req(1 * MS, 1), *n = req(30 * MS, 1), *x = req(300 * MS, 2);
	struct request *one = req(1 * MS, 1);
	uint64_t t = 10 * MS;

	gpu_init(&w.g);
	stall_init(&w.t, 0);
	for (int k = 0; k < 3; k++, t += 10 * MS)
		token(&w, r, t);
	token(&w, n, 230 * MS); /* n waited 30..230 ms */
	token(&w, r, 235 * MS);
	token(&w, r, 245 * MS);
	token(&w, x, 500 * MS); /* another server's request waited 300..500 ms */
	token(&w, r, 600 * MS);
	token(&w, one, 5 * MS);
	stalls(&w, r, &a);
	if (ASSERT_OK_PTR(a.stalls, "a report") && ASSERT_EQ(a.stalls->n, 2, "two gaps")) {
		ASSERT_EQ(a.stalls->v[0].cause, STALL_PREFILL, "n's wait");
		ASSERT_TRUE(a.stalls->v[0].likely, "likely");
		ASSERT_EQ(a.stalls->v[0].nby, 1, "n named");
		ASSERT_EQ(a.stalls->v[1].cause, STALL_UNKNOWN, "only another server's wait");
		ASSERT_EQ(a.stalls->likely, 1, "one likely");
	}
	gpu_attribution_free(&a);
	stalls(&w, one, &a);
	ASSERT_TRUE(a.stalls == NULL, "one token: no gaps");
	gpu_attribution_free(&a);
	request_free(r);
	request_free(n);
	request_free(x);
	request_free(one);
	stall_free(&w.t);
	gpu_free(&w.g);
}

int main(void)
{
	return check_run_all();
}
