// SPDX-License-Identifier: MIT
/* GPU steps: classification, per-process statistics, and request attribution by time. */
#include <stdlib.h>

#include "check.h"
#include "pipeline/batch.h"
#include "pipeline/gpu.h"

#define MS 1000000ull

static void add_step(struct gpu_timeline *g, uint32_t pid, uint64_t start, uint64_t end,
		     uint32_t launches, uint32_t graphs)
{
	struct ts_gpu_step_event e = { .hdr = { TS_EV_GPU_STEP, sizeof(e), pid, pid } };
	struct gpu_step out;

	e.start_ns = start;
	e.wait_start_ns = end - MS / 10;
	e.end_ns = end;
	e.launches = launches;
	e.graph_launches = graphs;
	e.waits = 1;
	gpu_add(g, &e, NULL);
	/* shown as the pipeline shows them, when their batches are final */
	while (gpu_next_ready(g, end, end, false, &out))
		;
}

/* A streamed request, its tokens written after the steps of g so far (each credited to its
 * step, as the pipeline does). */
static struct request *stream_request(struct gpu_timeline *g, uint64_t arrival,
				      const uint64_t *tokens, int n)
{
	struct request *r = request_new(1, 1, 0, "c");

	r->arrival_ns = arrival;
	for (int i = 0; i < n; i++) {
		request_add_token(r, tokens[i]);
		batch_token(g, r);
	}
	r->end_ns = tokens[n - 1] + MS;
	return r;
}

static void attribute(const struct gpu_timeline *g, const struct request *r,
		      struct gpu_attribution *a)
{
	gpu_attribute(g, r, batch_prefill_step(g, r), a);
}

TEST(test_classify)
{
	ASSERT_EQ(gpu_classify(40, 0), STEP_PREFILL, "eager launches only");
	ASSERT_EQ(gpu_classify(3, 1), STEP_DECODE, "a graph and a few eager kernels");
	ASSERT_EQ(gpu_classify(GPU_PREFILL_MIN_LAUNCHES, 1), STEP_MIXED, "a graph and many");
	ASSERT_EQ(gpu_classify(0, 0), STEP_OTHER, "copies only");
}

TEST(test_attribution_by_time)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	const uint64_t tok[] = { 51 * MS, 61 * MS, 71 * MS, 81 * MS };
	struct request *r;

	gpu_init(&g);
	/* A decode step of other requests is running when ours arrives at 15 ms. */
	add_step(&g, 7, 10 * MS, 19 * MS, 2, 1);
	/* Our prefill: 20..50 ms, first token written at 51. */
	add_step(&g, 7, 20 * MS, 50 * MS, 40, 0);
	/* Decode steps, 9 ms each, inside the 10 ms token gaps; a second (tensor-parallel)
	 * worker runs the same steps and must not be counted twice. */
	for (int i = 0; i < 3; i++) {
		add_step(&g, 7, 51 * MS + MS / 2 + i * 10 * MS, 60 * MS + MS / 2 + i * 10 * MS, 2,
			 1);
		add_step(&g, 8, 51 * MS + MS / 2 + i * 10 * MS, 60 * MS + MS / 2 + i * 10 * MS, 2,
			 1);
	}
	r = stream_request(&g, 15 * MS, tok, 4);
	attribute(&g, r, &a);
	ASSERT_EQ(a.queue_ns, 5 * MS, "queue: arrival to the prefill step's start");
	ASSERT_EQ(a.prefill_ns, 30 * MS, "prefill: that step");
	ASSERT_EQ(a.decode_ns, 31 * MS, "decode: first token to end");
	ASSERT_EQ(a.gpu_ns, 27 * MS, "GPU time in the token gaps, overlaps merged");
	ASSERT_EQ(a.host_ns, 3 * MS, "host time: the rest of the gaps");
	ASSERT_TRUE(strncmp(a.how, "by time", 7) == 0, "says how");
	request_free(r);
	gpu_free(&g);
}

TEST(test_unattributable)
{
	struct gpu_timeline g;
	struct gpu_attribution a;
	const uint64_t tok[] = { 51 * MS, 61 * MS };
	struct request *r;

	gpu_init(&g);
	r = stream_request(&g, 15 * MS, tok, 2);
	attribute(&g, r, &a);
	ASSERT_EQ(a.queue_ns, -1, "no steps: unknown");
	ASSERT_TRUE(strstr(a.how, "no GPU steps") != NULL, "says why");
	request_free(r);
	/* Only a prefill step that started before the request arrived. */
	add_step(&g, 7, 10 * MS, 40 * MS, 40, 0);
	r = stream_request(&g, 15 * MS, tok, 2);
	attribute(&g, r, &a);
	ASSERT_EQ(a.queue_ns, -1, "a step that began before arrival did not prefill it");
	ASSERT_EQ(a.prefill_ns, -1, "prefill unknown");
	ASSERT_TRUE(strstr(a.how, "no GPU step ran") != NULL, "says why");
	gpu_attribution_free(&a);
	request_free(r);
	gpu_free(&g);
}

TEST(test_history_wraps)
{
	struct gpu_step out;
	struct gpu_timeline g;
	struct gpu_attribution a;
	const uint64_t tok[] = { 1 * MS, 2 * MS };
	struct request *r;

	gpu_init(&g);
	for (uint64_t i = 0; i < GPU_HISTORY + 10; i++)
		add_step(&g, 7, 10 * MS + i * MS, 10 * MS + i * MS + MS / 2, 2, 1);
	r = stream_request(&g, 0, tok, 2);
	while (gpu_next_ready(&g, 0, 0, true, &out))
		;
	ASSERT_EQ(g.count, GPU_HISTORY, "bounded");
	ASSERT_EQ(g.steps, GPU_HISTORY + 10, "all counted");
	ASSERT_EQ(g.procs[0].steps[STEP_DECODE], GPU_HISTORY + 10, "per-process statistics");
	attribute(&g, r, &a);
	ASSERT_TRUE(strstr(a.how, "no longer kept") != NULL, "forgotten steps are said so");
	request_free(r);
	gpu_free(&g);
}

/* The steps that ran wholly between a client leaving and the server's last write for it
 * (gpu_steps_within: abandoned requests' gpu_steps_after), every process's. */
TEST(test_steps_within)
{
	struct gpu_timeline g;

	if (!ASSERT_OK(gpu_init(&g), "init"))
		return;
	for (int i = 0; i < 10; i++)
		add_step(&g, 1 + i % 2, (100 + 10 * i) * MS, (108 + 10 * i) * MS, 3, 1);
	ASSERT_EQ(gpu_steps_within(&g, 100 * MS, 200 * MS), 10, "all");
	ASSERT_EQ(gpu_steps_within(&g, 125 * MS, 158 * MS), 3, "130, 140, 150: whole ones only");
	ASSERT_EQ(gpu_steps_within(&g, 300 * MS, 400 * MS), 0, "after every step");
	ASSERT_EQ(gpu_steps_within(&g, 150 * MS, 150 * MS), 0, "an instant");
	gpu_free(&g);
}

static void add_runs(struct gpu_timeline *g, uint32_t pid, uint64_t flush_ns,
		     const uint64_t (*spans)[2], uint32_t n)
{
	struct ts_dev_runs_event e = { .hdr = { TS_EV_DEV_RUNS, sizeof(e), pid, pid } };

	e.abi = TS_DEVTIME_ABI;
	e.n = n;
	e.stats.flush_ns = flush_ns;
	for (uint32_t i = 0; i < n; i++) {
		e.runs[i].start_ns = spans[i][0];
		e.runs[i].end_ns = spans[i][1];
		e.runs[i].busy_ns = spans[i][1] - spans[i][0];
		e.runs[i].graphs = 1;
	}
	gpu_add_runs(g, &e);
}

/*
 * A heartbeat after a step does not make its device times complete: CUPTI keeps records that
 * ended in a buffer that also holds a running operation. A run that started after the step
 * does (its records came in launch order), and so does a quiet time after a heartbeat for a
 * process that went idle.
 */
TEST(test_device_times_complete)
{
	struct gpu_timeline g;
	struct gpu_step out;
	static const uint64_t first[][2] = { { 10 * MS + MS / 5, 10 * MS + 4 * MS / 5 },
					     { 12 * MS + MS / 5, 12 * MS + 4 * MS / 5 } };

	gpu_init(&g);
	add_runs(&g, 7, MS, NULL, 0); /* the library is there */
	add_step(&g, 7, 10 * MS, 11 * MS, 0, 1);
	add_step(&g, 7, 12 * MS, 13 * MS, 0, 1);
	add_runs(&g, 7, 20 * MS, NULL, 0); /* a heartbeat after both, no run yet */
	ASSERT_FALSE(gpu_next_ready(&g, 20 * MS, 20 * MS, false, &out), "a heartbeat alone");
	ASSERT_FALSE(gpu_device_complete(&g, 11 * MS, 20 * MS), "requests wait too");
	add_runs(&g, 7, 20 * MS, first, 2);
	ASSERT_FALSE(gpu_device_complete(&g, 11 * MS, 20 * MS), "not before the heartbeat");
	add_runs(&g, 7, 21 * MS, NULL, 0);
	ASSERT_TRUE(gpu_device_complete(&g, 11 * MS, 21 * MS), "a later run came");
	if (ASSERT_TRUE(gpu_next_ready(&g, 20 * MS, 20 * MS, false, &out), "the first step")) {
		ASSERT_EQ(out.start_ns, 10 * MS, "in order");
		ASSERT_TRUE(out.dev.device, "with its device time");
	}
	ASSERT_FALSE(gpu_next_ready(&g, 20 * MS, 20 * MS, false, &out), "the second: no later run");
	ASSERT_FALSE(gpu_device_complete(&g, 13 * MS, 13 * MS + GPU_DEVICE_QUIET_NS - 1), "quiet");
	ASSERT_TRUE(gpu_device_complete(&g, 13 * MS, 13 * MS + GPU_DEVICE_QUIET_NS), "idle");
	if (ASSERT_TRUE(gpu_next_ready(&g, 300 * MS, 300 * MS, false, &out), "idle: given back")) {
		ASSERT_EQ(out.start_ns, 12 * MS, "the second");
		ASSERT_TRUE(out.dev.device, "with its device time");
	}
	ASSERT_EQ(g.released_late, 0, "none shown before its device times");
	/* A damaged run that says it started after the heartbeat that sent it does not count. */
	{
		static const uint64_t future[][2] = { { 900 * MS, 901 * MS } };

		add_step(&g, 7, 400 * MS, 401 * MS, 0, 1);
		add_runs(&g, 7, 402 * MS, future, 1);
		add_runs(&g, 7, 402 * MS, NULL, 0);
		ASSERT_EQ(g.procs[0].devtime.done_ns, 402 * MS, "clamped to the heartbeat");
		ASSERT_FALSE(gpu_device_complete(&g, 403 * MS, 403 * MS),
			     "no later step let through");
	}
	ASSERT_EQ(g.procs[0].devtime.late, 0, "no run came after its step was shown");
	gpu_free(&g);
}

static void heartbeat_sampled(struct gpu_timeline *g, uint64_t flush, uint64_t on, uint64_t off,
			      uint64_t windows)
{
	struct ts_dev_runs_event e = { .hdr = { TS_EV_DEV_RUNS, sizeof(e), 7, 7 } };

	e.abi = TS_DEVTIME_ABI;
	e.stats.flush_ns = flush;
	e.stats.mode = TS_DEVTIME_MODE_SAMPLED;
	e.stats.sample_on_ns = on;
	e.stats.sample_off_ns = off;
	e.stats.windows = windows;
	gpu_add_runs(g, &e);
}

/* A step with a run of its own inside it, given back once its windows are known: whether it
 * kept its device times. */
static bool step_sampled(struct gpu_timeline *g, uint64_t start, uint32_t launches,
			 uint64_t settle_flush, uint64_t on, uint64_t off, uint64_t windows)
{
	const uint64_t run[][2] = { { start + MS / 5, start + MS / 2 } };
	struct gpu_step out = { 0 };

	add_step(g, 7, start, start + MS, launches, launches ? 0 : 1);
	add_runs(g, 7, start + MS, run, 1);
	heartbeat_sampled(g, settle_flush, on, off, windows);
	while (gpu_next_ready(g, settle_flush + 10 * GPU_DEVICE_QUIET_NS,
			      settle_flush + 10 * GPU_DEVICE_QUIET_NS, false, &out))
		;
	ASSERT_EQ(out.start_ns, start, "the step given back");
	ASSERT_EQ(out.sampled_out, !out.dev.device, "sampled out or with device times");
	if (out.sampled_out)
		ASSERT_STREQ(gpu_step_times(&out), "sampled-out", "said so");
	return out.dev.device;
}

/*
 * The sampled mode: eager kernels are collected in windows. A step that launched eager
 * kernels outside every window shows no device times, even those of the runs placed in it (a
 * part of its work); a decode step (a graph replay: always collected) keeps them; a window
 * whose end was lost covers nothing.
 */
TEST(test_device_times_sampled)
{
	struct gpu_timeline g;
	const struct gpu_devtime *c;

	gpu_init(&g);
	heartbeat_sampled(&g, 5 * MS, 5 * MS, 0, 1); /* a window open since 5 ms */
	c = &g.procs[0].devtime;
	ASSERT_TRUE(step_sampled(&g, 10 * MS, 40, 12 * MS, 5 * MS, 0, 1), "inside the open one");
	ASSERT_FALSE(step_sampled(&g, 16 * MS, 40, 30 * MS, 5 * MS, 15 * MS, 1), "after its end");
	ASSERT_TRUE(step_sampled(&g, 18 * MS, 0, 30 * MS, 5 * MS, 15 * MS, 1), "a graph replay");
	ASSERT_FALSE(step_sampled(&g, 14 * MS + MS / 2, 40, 30 * MS, 5 * MS, 15 * MS, 1),
		     "across its end");
	ASSERT_TRUE(step_sampled(&g, 41 * MS, 40, 70 * MS, 40 * MS, 60 * MS, 2), "a second one");
	/* The window of 100 ms closed at 150 and another opened at 200 between two heartbeats. */
	heartbeat_sampled(&g, 101 * MS, 100 * MS, 60 * MS, 3);
	ASSERT_TRUE(step_sampled(&g, 120 * MS, 40, 130 * MS, 100 * MS, 60 * MS, 3), "open");
	heartbeat_sampled(&g, 201 * MS, 200 * MS, 150 * MS, 4);
	ASSERT_FALSE(step_sampled(&g, 160 * MS, 40, 210 * MS, 200 * MS, 150 * MS, 4), "between");
	/* Two windows opened unseen (a lost record): the one open before covers nothing. */
	heartbeat_sampled(&g, 501 * MS, 500 * MS, 450 * MS, 7);
	ASSERT_FALSE(step_sampled(&g, 380 * MS, 40, 510 * MS, 500 * MS, 450 * MS, 7),
		     "in a window whose end is not known");
	ASSERT_EQ(c->steps_sampled_out, 4, "counted");
	ASSERT_EQ(c->steps_device, 4, "counted");
	gpu_free(&g);
}

/*
 * The runs of a step in a window often come after the heartbeat that settles it (CUPTI hands
 * a buffer over once every record in it is complete): the step keeps them and counts as one
 * with device times when it is shown. A step that began before collection did and ended after
 * has a part of its work recorded: sampled out.
 */
TEST(test_device_times_sampled_late_runs)
{
	static const uint64_t run[][2] = { { 20 * MS + MS / 5, 20 * MS + MS / 2 } };
	static const uint64_t later[][2] = { { 40 * MS, 41 * MS } };
	struct gpu_timeline g;
	struct gpu_step out;

	gpu_init(&g);
	heartbeat_sampled(&g, 15 * MS, 15 * MS, 0, 1); /* collection began at 15 ms */
	add_step(&g, 7, 10 * MS, 16 * MS, 40, 0);      /* began before, ended after */
	add_step(&g, 7, 20 * MS, 21 * MS, 40, 0);      /* inside the window */
	heartbeat_sampled(&g, 30 * MS, 15 * MS, 0, 1); /* settles both, no run yet */
	add_runs(&g, 7, 30 * MS, run, 1);	       /* the second step's run, late */
	add_runs(&g, 7, 45 * MS, later, 1);	       /* a later run: complete past both */
	heartbeat_sampled(&g, 45 * MS, 15 * MS, 0, 1);
	if (ASSERT_TRUE(gpu_next_ready(&g, 50 * MS, 50 * MS, true, &out), "the first")) {
		ASSERT_TRUE(out.sampled_out, "a part of it before collection: sampled out");
		ASSERT_FALSE(out.dev.device, "no device times");
	}
	if (ASSERT_TRUE(gpu_next_ready(&g, 50 * MS, 50 * MS, true, &out), "the second")) {
		ASSERT_FALSE(out.sampled_out, "in the window");
		ASSERT_TRUE(out.dev.device, "its late run kept");
	}
	ASSERT_EQ(g.procs[0].devtime.steps_device, 1, "counted when shown");
	ASSERT_EQ(g.procs[0].devtime.steps_sampled_out, 1, "counted");
	gpu_free(&g);
}

int main(void)
{
	return check_run_all();
}
