// SPDX-License-Identifier: MIT
/*
 * cupti/runs.c and cupti/records.c: operations merged into runs (one stream, gaps up to
 * TS_RUN_GAP_NS), launch times joined by correlation id, the open-run limit, the launch
 * table's collisions, bad times, single mode and the batches handed to the probe; then real
 * CUPTI activity records (the toolkit's structs) read into runs, with the clock offset.
 * Every expected value is worked out by hand from the times given.
 */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "records.h"
#include "runs.h"

#define GOT_MAX 512

/* Every run emitted, in order, and the shape of the batches. */
struct got {
	struct ts_dev_run runs[GOT_MAX];
	uint32_t n, batches, max_batch, last_batch;
	bool empty_batch, overflow;
	struct ts_devtime_stats stats; /* as the last batch saw them */
};

static void collect(void *ctx, const struct ts_dev_run *runs, uint32_t n,
		    const struct ts_devtime_stats *stats)
{
	struct got *g = ctx;

	if (!n)
		g->empty_batch = true;
	g->batches++;
	g->last_batch = n;
	if (n > g->max_batch)
		g->max_batch = n;
	for (uint32_t i = 0; i < n; i++) {
		if (g->n == GOT_MAX) {
			g->overflow = true;
			break;
		}
		g->runs[g->n++] = runs[i];
	}
	g->stats = *stats;
}

/* struct runs holds the launch table: too big for the stack under ASan. */
static struct runs *runs_new(struct got **g)
{
	struct runs *r = malloc(sizeof(*r));

	*g = calloc(1, sizeof(**g));
	if (!r || !*g)
		abort();
	runs_init(r, collect, *g);
	return r;
}

static void runs_free(struct runs *r, struct got *g)
{
	ASSERT_FALSE(g->empty_batch, "no batch is empty");
	ASSERT_FALSE(g->overflow, "the test kept every run");
	free(r);
	free(g);
}

static void op(struct runs *r, enum runs_kind kind, uint32_t device, uint32_t stream,
	       uint32_t correlation, uint64_t start, uint64_t end)
{
	struct runs_op o = { .start_ns = start,
			     .end_ns = end,
			     .device = device,
			     .stream = stream,
			     .correlation = correlation,
			     .kind = kind };

	runs_op(r, &o);
}

static void kernel(struct runs *r, uint32_t stream, uint32_t correlation, uint64_t start,
		   uint64_t end)
{
	op(r, RUNS_KERNEL, 0, stream, correlation, start, end);
}

/* The one run of device, stream among those emitted; NULL (a failure) unless exactly one. */
static const struct ts_dev_run *find(const struct got *g, uint32_t device, uint32_t stream)
{
	const struct ts_dev_run *found = NULL;
	int n = 0;

	for (uint32_t i = 0; i < g->n; i++) {
		if (g->runs[i].device == device && g->runs[i].stream == stream) {
			found = &g->runs[i];
			n++;
		}
	}
	if (!ASSERT_EQ(n, 1, "one run of the stream"))
		return NULL;
	return found;
}

static uint32_t run_ops(const struct ts_dev_run *run)
{
	return run->kernels + run->graphs + run->memcpys;
}

TEST(test_back_to_back_merge)
{
	struct got *g;
	struct runs *r = runs_new(&g);
	const struct ts_dev_run *run;

	runs_launch(r, 1, 100);
	runs_launch(r, 2, 200);
	runs_launch(r, 3, 300);
	kernel(r, 7, 1, 1000, 1500);
	kernel(r, 7, 2, 1600, 2000);
	kernel(r, 7, 3, 2100, 2600);
	ASSERT_EQ(g->n, 0, "the run is still open before the flush");
	runs_flush(r);
	if (ASSERT_EQ(g->n, 1, "one run")) {
		run = &g->runs[0];
		ASSERT_EQ(run->start_ns, 1000, "start");
		ASSERT_EQ(run->end_ns, 2600, "end");
		ASSERT_EQ(run->busy_ns, 500 + 400 + 500, "busy: the durations, no gaps");
		ASSERT_EQ(run->kernels, 3, "kernels");
		ASSERT_EQ(run->graphs, 0, "graphs");
		ASSERT_EQ(run->memcpys, 0, "memcpys");
		ASSERT_EQ(run->launched, 3, "launched");
		ASSERT_EQ(run->flags, TS_RUN_F_LAUNCH, "flags");
		ASSERT_EQ(run->first_launch_ns, 100, "first launch");
		ASSERT_EQ(run->delay_ns, 900 + 1400 + 1800, "delay sum");
		ASSERT_EQ(run->delay_max_ns, 1800, "delay max");
		ASSERT_EQ(run->device, 0, "device");
		ASSERT_EQ(run->stream, 7, "stream");
	}
	ASSERT_EQ(g->batches, 1, "one batch");
	ASSERT_EQ(g->stats.ops, 3, "stats.ops");
	ASSERT_EQ(g->stats.runs, 1, "stats.runs");
	ASSERT_EQ(g->stats.no_launch, 0, "stats.no_launch");
	ASSERT_EQ(g->stats.bad_time, 0, "stats.bad_time");
	runs_free(r, g);
}

TEST(test_gap_limit)
{
	struct got *g;
	struct runs *r = runs_new(&g);

	kernel(r, 1, 1, 1000, 2000);
	kernel(r, 1, 2, 2000 + TS_RUN_GAP_NS, 4500); /* a gap of exactly the limit: joins */
	ASSERT_EQ(g->n, 0, "joined, nothing closed");
	kernel(r, 1, 3, 4500 + TS_RUN_GAP_NS + 1, 7000); /* one more: a new run */
	runs_flush(r);
	if (ASSERT_EQ(g->n, 2, "two runs")) {
		ASSERT_EQ(g->runs[0].start_ns, 1000, "first start");
		ASSERT_EQ(g->runs[0].end_ns, 4500, "first end");
		ASSERT_EQ(g->runs[0].busy_ns, 1000 + 500, "first busy");
		ASSERT_EQ(g->runs[0].kernels, 2, "first kernels");
		ASSERT_EQ(g->runs[1].start_ns, 4500 + TS_RUN_GAP_NS + 1, "second start");
		ASSERT_EQ(g->runs[1].end_ns, 7000, "second end");
		ASSERT_EQ(g->runs[1].busy_ns, 7000 - 4500 - TS_RUN_GAP_NS - 1, "second busy");
		ASSERT_EQ(g->runs[1].kernels, 1, "second kernels");
		ASSERT_EQ(g->runs[0].flags, 0, "no launch known");
		ASSERT_EQ(g->runs[0].launched, 0, "none launched");
	}
	ASSERT_EQ(g->stats.no_launch, 3, "no API records: every op counted");
	runs_free(r, g);
}

/* An operation that starts before its stream's open run began starts a run of its own. */
TEST(test_earlier_op_splits)
{
	struct got *g;
	struct runs *r = runs_new(&g);

	kernel(r, 1, 1, 5000, 6000);
	kernel(r, 1, 2, 4000, 4500);
	runs_flush(r);
	if (ASSERT_EQ(g->n, 2, "two runs")) {
		ASSERT_EQ(g->runs[0].start_ns, 5000, "the first closed first");
		ASSERT_EQ(g->runs[1].start_ns, 4000, "then the earlier op");
		ASSERT_EQ(g->runs[1].busy_ns, 500, "its busy");
	}
	runs_free(r, g);
}

TEST(test_streams_interleaved)
{
	struct got *g;
	struct runs *r = runs_new(&g);
	const struct ts_dev_run *a, *b, *c;

	kernel(r, 1, 0, 1000, 1100);
	kernel(r, 2, 0, 1050, 1150);
	kernel(r, 1, 0, 1200, 1300);
	kernel(r, 2, 0, 1250, 1350);
	op(r, RUNS_KERNEL, 1, 1, 0, 1260, 1270); /* stream 1 of another device */
	kernel(r, 1, 0, 1400, 1500);
	ASSERT_EQ(g->n, 0, "every run still open");
	runs_flush(r);
	ASSERT_EQ(g->n, 3, "three runs");
	a = find(g, 0, 1);
	b = find(g, 0, 2);
	c = find(g, 1, 1);
	if (a) {
		ASSERT_EQ(a->start_ns, 1000, "stream 1 start");
		ASSERT_EQ(a->end_ns, 1500, "stream 1 end");
		ASSERT_EQ(a->busy_ns, 300, "stream 1 busy");
		ASSERT_EQ(a->kernels, 3, "stream 1 kernels");
	}
	if (b) {
		ASSERT_EQ(b->start_ns, 1050, "stream 2 start");
		ASSERT_EQ(b->end_ns, 1350, "stream 2 end");
		ASSERT_EQ(b->busy_ns, 200, "stream 2 busy");
		ASSERT_EQ(b->kernels, 2, "stream 2 kernels");
	}
	if (c) {
		ASSERT_EQ(c->busy_ns, 10, "device 1 busy");
		ASSERT_EQ(c->kernels, 1, "device 1 kernels");
	}
	runs_free(r, g);
}

/* Two streams more than RUNS_OPEN: each new one closes the open run that ended first, which
 * is not the one opened first; no operation is lost. */
TEST(test_more_streams_than_open)
{
	struct got *g;
	struct runs *r = runs_new(&g);
	uint32_t total = 0;

	for (uint32_t s = 0; s < RUNS_OPEN; s++)
		kernel(r, s, 0, 1000 + s * 10, 1005 + s * 10);
	kernel(r, 0, 0, 2000, 2100); /* stream 0 now ends last */
	ASSERT_EQ(g->n, 0, "RUNS_OPEN streams fit");
	kernel(r, RUNS_OPEN, 0, 3000, 3100);
	if (ASSERT_EQ(r->stats.runs, 1, "one closed"))
		ASSERT_EQ(r->batch[0].stream, 1, "stream 1's run ended first");
	kernel(r, RUNS_OPEN + 1, 0, 3200, 3300);
	if (ASSERT_EQ(r->stats.runs, 2, "another closed"))
		ASSERT_EQ(r->batch[1].stream, 2, "then stream 2's");
	kernel(r, 1, 0, 3400, 3500); /* stream 1 again: a new run, closing stream 3's */
	if (ASSERT_EQ(r->stats.runs, 3, "a third closed"))
		ASSERT_EQ(r->batch[2].stream, 3, "stream 3's");
	runs_flush(r);
	ASSERT_EQ(g->n, RUNS_OPEN + 3, "every run emitted");
	for (uint32_t i = 0; i < g->n; i++)
		total += run_ops(&g->runs[i]);
	ASSERT_EQ(total, RUNS_OPEN + 4, "every op in exactly one run");
	ASSERT_EQ(g->stats.ops, RUNS_OPEN + 4, "stats.ops");
	ASSERT_EQ(g->stats.runs, RUNS_OPEN + 3, "stats.runs");
	for (uint32_t s = 0; s < RUNS_OPEN + 2; s++) {
		uint32_t n = 0;

		for (uint32_t i = 0; i < g->n; i++)
			n += g->runs[i].stream == s;
		ASSERT_EQ(n, s == 1 ? 2 : 1, "runs of the stream");
	}
	runs_free(r, g);
}

TEST(test_no_launch)
{
	struct got *g;
	struct runs *r = runs_new(&g);
	const struct ts_dev_run *run;

	runs_launch(r, 6, 100); /* another launch's: not joined */
	kernel(r, 1, 5, 1000, 1200);
	runs_flush(r);
	ASSERT_EQ(g->stats.no_launch, 1, "no_launch");
	run = find(g, 0, 1);
	if (run) {
		ASSERT_EQ(run->flags, 0, "no TS_RUN_F_LAUNCH");
		ASSERT_EQ(run->first_launch_ns, 0, "first launch");
		ASSERT_EQ(run->launched, 0, "launched");
		ASSERT_EQ(run->delay_ns, 0, "delay");
		ASSERT_EQ(run->delay_max_ns, 0, "delay max");
		ASSERT_EQ(run->kernels, 1, "kernels");
	}
	runs_free(r, g);
}

/* A launch is taken by its operation: a second operation of the same correlation has none. */
TEST(test_launch_taken_once)
{
	struct got *g;
	struct runs *r = runs_new(&g);

	runs_launch(r, 4, 100);
	kernel(r, 1, 4, 1000, 1100);
	kernel(r, 1, 4, 1200, 1300);
	runs_flush(r);
	ASSERT_EQ(g->stats.no_launch, 1, "the second has none");
	if (ASSERT_EQ(g->n, 1, "one run")) {
		ASSERT_EQ(g->runs[0].launched, 1, "launched");
		ASSERT_EQ(g->runs[0].delay_ns, 900, "delay");
	}
	runs_free(r, g);
}

/* Two correlation ids in one slot of the launch table: the newer launch evicts the older. */
TEST(test_launch_eviction)
{
	struct got *g;
	struct runs *r = runs_new(&g);
	const uint32_t a = 3, b = 3 + RUNS_LAUNCHES;

	runs_launch(r, a, 100);
	runs_launch(r, b, 200);
	kernel(r, 1, a, 1000, 1100);
	ASSERT_EQ(r->stats.no_launch, 1, "a's launch was evicted");
	kernel(r, 1, b, 1200, 1300);
	ASSERT_EQ(r->stats.no_launch, 1, "b's is there");
	runs_flush(r);
	if (ASSERT_EQ(g->n, 1, "one run")) {
		ASSERT_EQ(g->runs[0].flags, 0, "its first op was not launched");
		ASSERT_EQ(g->runs[0].first_launch_ns, 0, "first launch");
		ASSERT_EQ(g->runs[0].launched, 1, "b launched");
		ASSERT_EQ(g->runs[0].delay_ns, 1000, "b's delay, from b's launch");
		ASSERT_EQ(g->runs[0].delay_max_ns, 1000, "delay max");
	}
	runs_free(r, g);
}

/* The runtime call and the driver call it makes share a correlation id, in either order. */
TEST(test_runtime_and_driver)
{
	struct got *g;
	struct runs *r = runs_new(&g);
	const struct ts_dev_run *run;

	runs_launch(r, 9, 100); /* runtime first */
	runs_launch(r, 9, 150);
	runs_launch(r, 10, 250); /* driver first */
	runs_launch(r, 10, 200);
	kernel(r, 1, 9, 1000, 1100);
	kernel(r, 2, 10, 2000, 2100);
	runs_flush(r);
	ASSERT_EQ(g->stats.no_launch, 0, "both found");
	run = find(g, 0, 1);
	if (run) {
		ASSERT_EQ(run->first_launch_ns, 100, "the earlier kept");
		ASSERT_EQ(run->delay_ns, 900, "delay from the earlier");
	}
	run = find(g, 0, 2);
	if (run) {
		ASSERT_EQ(run->first_launch_ns, 200, "the earlier kept, coming second");
		ASSERT_EQ(run->delay_ns, 1800, "delay from the earlier");
	}
	runs_free(r, g);
}

TEST(test_end_before_start)
{
	struct got *g;
	struct runs *r = runs_new(&g);

	kernel(r, 1, 0, 2000, 1500);
	ASSERT_EQ(r->stats.bad_time, 1, "bad_time");
	kernel(r, 1, 0, 2100, 2200);
	runs_flush(r);
	if (ASSERT_EQ(g->n, 1, "one run")) {
		ASSERT_EQ(g->runs[0].start_ns, 2000, "start");
		ASSERT_EQ(g->runs[0].end_ns, 2200, "end");
		ASSERT_EQ(g->runs[0].busy_ns, 100, "the bad op not busy");
		ASSERT_EQ(g->runs[0].kernels, 2, "but counted");
	}
	ASSERT_EQ(g->stats.bad_time, 1, "bad_time once");
	runs_free(r, g);
}

TEST(test_start_before_launch)
{
	struct got *g;
	struct runs *r = runs_new(&g);

	runs_launch(r, 1, 5000);
	kernel(r, 1, 1, 4000, 4500);
	runs_flush(r);
	ASSERT_EQ(g->stats.bad_time, 1, "bad_time");
	ASSERT_EQ(g->stats.no_launch, 0, "the launch was found");
	if (ASSERT_EQ(g->n, 1, "one run")) {
		ASSERT_EQ(g->runs[0].flags, TS_RUN_F_LAUNCH, "launch known");
		ASSERT_EQ(g->runs[0].first_launch_ns, 5000, "first launch");
		ASSERT_EQ(g->runs[0].launched, 1, "launched");
		ASSERT_EQ(g->runs[0].delay_ns, 0, "no delay");
		ASSERT_EQ(g->runs[0].delay_max_ns, 0, "no delay max");
		ASSERT_EQ(g->runs[0].busy_ns, 500, "busy");
	}
	runs_free(r, g);
}

TEST(test_single)
{
	static const uint64_t start[] = { 1000, 1100, 1300 };
	struct got *g;
	struct runs *r = runs_new(&g);

	r->single = true;
	runs_launch(r, 2, 900);
	kernel(r, 1, 1, 1000, 1100);
	kernel(r, 1, 2, 1100, 1300);
	op(r, RUNS_MEMCPY, 0, 1, 3, 1300, 1600);
	ASSERT_EQ(g->n, 0, "batched until the flush");
	ASSERT_EQ(r->stats.runs, 3, "but made");
	runs_flush(r);
	if (ASSERT_EQ(g->n, 3, "a run per op")) {
		for (int i = 0; i < 3; i++) {
			ASSERT_EQ(g->runs[i].flags & TS_RUN_F_SINGLE, TS_RUN_F_SINGLE, "single");
			ASSERT_EQ(run_ops(&g->runs[i]), 1, "one op");
			ASSERT_EQ(g->runs[i].start_ns, start[i], "start");
		}
		ASSERT_EQ(g->runs[0].busy_ns, 100, "first busy");
		ASSERT_EQ(g->runs[1].busy_ns, 200, "second busy");
		ASSERT_EQ(g->runs[1].flags, TS_RUN_F_SINGLE | TS_RUN_F_LAUNCH, "second launched");
		ASSERT_EQ(g->runs[1].delay_ns, 200, "second delay");
		ASSERT_EQ(g->runs[2].memcpys, 1, "third a copy");
		ASSERT_EQ(g->runs[2].dtoh, 0, "not to the host");
	}
	runs_free(r, g);
}

TEST(test_batches)
{
	struct got *g;
	struct runs *r = runs_new(&g);
	const uint32_t n = 2 * TS_RUNS_PER_PROBE + 6;

	runs_flush(r);
	ASSERT_EQ(g->batches, 0, "nothing to flush: no batch");
	/* One stream, each op too far from the last: each closes the run before it. */
	for (uint32_t i = 0; i < n; i++)
		kernel(r, 1, 0, i * 10000, i * 10000 + 10);
	ASSERT_EQ(g->batches, 2, "two full batches before the flush");
	ASSERT_EQ(g->n, 2 * TS_RUNS_PER_PROBE, "of TS_RUNS_PER_PROBE");
	ASSERT_EQ(g->max_batch, TS_RUNS_PER_PROBE, "never more");
	runs_flush(r);
	ASSERT_EQ(g->batches, 3, "the flush emits the rest");
	ASSERT_EQ(g->last_batch, 6, "five closed and the open one");
	ASSERT_EQ(g->n, n, "every run");
	ASSERT_EQ(g->stats.runs, n, "stats.runs");
	for (uint32_t i = 0; i < g->n; i++)
		ASSERT_EQ(g->runs[i].start_ns, i * 10000, "in order");

	/* Single mode: the batches fill the same way. */
	r->single = true;
	for (uint32_t i = 0; i < TS_RUNS_PER_PROBE + 1; i++)
		kernel(r, 1, 0, 1000000 + i, 1000000 + i);
	ASSERT_EQ(g->batches, 4, "one full batch");
	ASSERT_EQ(g->last_batch, TS_RUNS_PER_PROBE, "full");
	runs_flush(r);
	ASSERT_EQ(g->batches, 5, "and the one left");
	ASSERT_EQ(g->last_batch, 1, "one");
	ASSERT_EQ(g->max_batch, TS_RUNS_PER_PROBE, "never more");
	runs_free(r, g);
}

/* A graph record around its own nodes' copy on one stream: busy is at most the run's length. */
TEST(test_busy_capped)
{
	struct got *g;
	struct runs *r = runs_new(&g);

	op(r, RUNS_GRAPH, 0, 3, 0, 1000, 5000);
	op(r, RUNS_MEMCPY, 0, 3, 0, 1500, 3000);
	runs_flush(r);
	if (ASSERT_EQ(g->n, 1, "one run")) {
		ASSERT_EQ(g->runs[0].busy_ns, 4000, "capped at end - start, not 5500");
		ASSERT_EQ(g->runs[0].end_ns, 5000, "the graph's end");
		ASSERT_EQ(g->runs[0].graphs, 1, "graphs");
		ASSERT_EQ(g->runs[0].memcpys, 1, "memcpys");
	}
	runs_free(r, g);
}

/* Times from a corrupt record can be anything: a sum that wrapped past 2^64 would read as
 * less than one of its terms (fuzz_cupti found a delay sum below its max). They saturate. */
TEST(test_sums_saturate)
{
	const uint64_t half = 1ull << 63;
	const struct ts_dev_run *run;
	struct got *g;
	struct runs *r = runs_new(&g);

	runs_launch(r, 1, 0);
	runs_launch(r, 2, 0);
	kernel(r, 1, 1, half, half + 10);
	kernel(r, 1, 2, half + 20, half + 30);
	kernel(r, 2, 0, 0, half + 1);
	kernel(r, 2, 0, 1, half + 2);
	runs_flush(r);
	run = find(g, 0, 1);
	if (run) {
		ASSERT_TRUE(run->delay_ns == UINT64_MAX, "the delay sum held at its limit");
		ASSERT_TRUE(run->delay_max_ns == half + 20, "delay max");
		ASSERT_EQ(run->busy_ns, 20, "busy");
	}
	run = find(g, 0, 2);
	if (run)
		ASSERT_TRUE(run->busy_ns == half + 2, "busy: the run's length, not a wrapped sum");
	runs_free(r, g);
}

/* ---- records.c: the toolkit's record structs ---- */

static void api(struct runs *r, CUpti_ActivityKind kind, uint32_t correlation, uint64_t start,
		int64_t offset)
{
	CUpti_ActivityAPI a;

	memset(&a, 0, sizeof(a));
	a.kind = kind;
	a.start = start;
	a.end = start + 50;
	a.correlationId = correlation;
	a.processId = 42;
	records_read(r, (const CUpti_Activity *)&a, offset);
}

static void kernel_rec(struct runs *r, uint32_t device, uint32_t stream, uint32_t correlation,
		       uint64_t start, uint64_t end, int64_t offset)
{
	CUpti_ActivityKernel10 k;

	memset(&k, 0, sizeof(k));
	k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	k.start = start;
	k.end = end;
	k.deviceId = device;
	k.contextId = 1;
	k.streamId = stream;
	k.correlationId = correlation;
	k.gridX = k.gridY = k.gridZ = 1;
	k.name = "k";
	records_read(r, (const CUpti_Activity *)&k, offset);
}

static void memcpy_rec(struct runs *r, uint8_t copy_kind, uint32_t stream, uint32_t correlation,
		       uint64_t start, uint64_t end)
{
	CUpti_ActivityMemcpy6 m;

	memset(&m, 0, sizeof(m));
	m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
	m.copyKind = copy_kind;
	m.bytes = 4096;
	m.start = start;
	m.end = end;
	m.deviceId = 0;
	m.contextId = 1;
	m.streamId = stream;
	m.correlationId = correlation;
	records_read(r, (const CUpti_Activity *)&m, 0);
}

TEST(test_records_kernel)
{
	struct got *g;
	struct runs *r = runs_new(&g);
	const struct ts_dev_run *run;

	api(r, CUPTI_ACTIVITY_KIND_RUNTIME, 1, 100, 0);
	api(r, CUPTI_ACTIVITY_KIND_DRIVER, 1, 130, 0);
	api(r, CUPTI_ACTIVITY_KIND_RUNTIME, 2, 1050, 0);
	kernel_rec(r, 2, 13, 1, 1000, 1500, 0);
	kernel_rec(r, 2, 13, 2, 1600, 2500, 0);
	runs_flush(r);
	ASSERT_EQ(g->stats.records, 5, "records");
	ASSERT_EQ(g->stats.ops, 2, "ops");
	ASSERT_EQ(g->stats.no_launch, 0, "no_launch");
	run = find(g, 2, 13);
	if (run) {
		ASSERT_EQ(run->start_ns, 1000, "start");
		ASSERT_EQ(run->end_ns, 2500, "end");
		ASSERT_EQ(run->busy_ns, 500 + 900, "busy");
		ASSERT_EQ(run->kernels, 2, "kernels");
		ASSERT_EQ(run->first_launch_ns, 100, "the runtime call's start");
		ASSERT_EQ(run->delay_ns, 900 + 550, "delay");
		ASSERT_EQ(run->delay_max_ns, 900, "delay max");
		ASSERT_EQ(run->flags, TS_RUN_F_LAUNCH, "flags");
	}
	runs_free(r, g);
}

/* A decode step: a graph replay, then its logits copied to the host; a copy to the device on
 * a copy stream. */
TEST(test_records_graph_memcpy)
{
	struct got *g;
	struct runs *r = runs_new(&g);
	CUpti_ActivityGraphTrace2 gt;
	const struct ts_dev_run *run;

	api(r, CUPTI_ACTIVITY_KIND_DRIVER, 2, 400, 0);
	memset(&gt, 0, sizeof(gt));
	gt.kind = CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
	gt.correlationId = 2;
	gt.start = 1000;
	gt.end = 9000;
	gt.deviceId = 0;
	gt.graphId = 77;
	gt.contextId = 1;
	gt.streamId = 7;
	records_read(r, (const CUpti_Activity *)&gt, 0);
	api(r, CUPTI_ACTIVITY_KIND_RUNTIME, 3, 8000, 0);
	memcpy_rec(r, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, 7, 3, 9500, 9700);
	memcpy_rec(r, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 8, 4, 10000, 10100);
	runs_flush(r);
	ASSERT_EQ(g->stats.records, 5, "records");
	ASSERT_EQ(g->stats.ops, 3, "ops");
	ASSERT_EQ(g->stats.no_launch, 1, "the HtoD copy's API record never came");
	run = find(g, 0, 7);
	if (run) {
		ASSERT_EQ(run->start_ns, 1000, "start");
		ASSERT_EQ(run->end_ns, 9700, "end");
		ASSERT_EQ(run->busy_ns, 8000 + 200, "busy");
		ASSERT_EQ(run->graphs, 1, "graphs");
		ASSERT_EQ(run->kernels, 0, "kernels");
		ASSERT_EQ(run->memcpys, 1, "memcpys");
		ASSERT_EQ(run->dtoh, 1, "dtoh");
		ASSERT_EQ(run->launched, 2, "launched");
		ASSERT_EQ(run->first_launch_ns, 400, "first launch");
		ASSERT_EQ(run->delay_ns, 600 + 1500, "delay");
		ASSERT_EQ(run->delay_max_ns, 1500, "delay max");
	}
	run = find(g, 0, 8);
	if (run) {
		ASSERT_EQ(run->memcpys, 1, "HtoD: memcpys");
		ASSERT_EQ(run->dtoh, 0, "HtoD: not dtoh");
		ASSERT_EQ(run->busy_ns, 100, "HtoD: busy");
		ASSERT_EQ(run->flags, 0, "HtoD: no launch");
	}
	runs_free(r, g);
}

TEST(test_records_offset)
{
	struct got *g;
	struct runs *r = runs_new(&g);

	r->single = true;
	/* +1000: both the launch and the kernel move. */
	api(r, CUPTI_ACTIVITY_KIND_RUNTIME, 1, 100, 1000);
	kernel_rec(r, 0, 1, 1, 2000, 2500, 1000);
	/* -1500: the launch would be before 0 and stays at 0. */
	api(r, CUPTI_ACTIVITY_KIND_RUNTIME, 2, 100, -1500);
	kernel_rec(r, 0, 1, 2, 2000, 2500, -1500);
	/* -1500 on a kernel whose start is below it, and one exactly at it. */
	kernel_rec(r, 0, 1, 3, 1499, 2000, -1500);
	kernel_rec(r, 0, 1, 4, 1500, 1501, -1500);
	runs_flush(r);
	if (ASSERT_EQ(g->n, 4, "four runs")) {
		ASSERT_EQ(g->runs[0].start_ns, 3000, "+: start");
		ASSERT_EQ(g->runs[0].end_ns, 3500, "+: end");
		ASSERT_EQ(g->runs[0].first_launch_ns, 1100, "+: launch");
		ASSERT_EQ(g->runs[0].delay_ns, 1900, "+: delay");
		ASSERT_EQ(g->runs[1].start_ns, 500, "-: start");
		ASSERT_EQ(g->runs[1].end_ns, 1000, "-: end");
		ASSERT_EQ(g->runs[1].first_launch_ns, 0, "-: launch clamped at 0");
		ASSERT_EQ(g->runs[1].flags, TS_RUN_F_LAUNCH | TS_RUN_F_SINGLE, "-: launch known");
		ASSERT_EQ(g->runs[1].delay_ns, 500, "-: delay from 0");
		ASSERT_EQ(g->runs[2].start_ns, 0, "-: start clamped at 0");
		ASSERT_EQ(g->runs[2].end_ns, 500, "-: end");
		ASSERT_EQ(g->runs[2].busy_ns, 500, "-: busy");
		ASSERT_EQ(g->runs[3].start_ns, 0, "-: start at the offset is 0");
		ASSERT_EQ(g->runs[3].end_ns, 1, "-: end");
	}
	ASSERT_EQ(g->stats.bad_time, 0, "no bad time");
	runs_free(r, g);
}

/* Offsets at the ends of their range: INT64_MIN (whose negation as an int64_t is undefined:
 * fuzz_cupti found it), and a time the offset would carry past 2^64, held at the limit
 * rather than wrapped to the start of the clock. */
TEST(test_records_offset_limits)
{
	const uint64_t half = 1ull << 63;
	struct got *g;
	struct runs *r = runs_new(&g);

	r->single = true;
	kernel_rec(r, 0, 1, 0, half - 1, half, INT64_MIN);
	kernel_rec(r, 0, 1, 0, half, UINT64_MAX, INT64_MIN);
	kernel_rec(r, 0, 1, 0, UINT64_MAX - 20, UINT64_MAX - 5, 10);
	kernel_rec(r, 0, 1, 0, 0, UINT64_MAX, INT64_MAX);
	runs_flush(r);
	if (ASSERT_EQ(g->n, 4, "four runs")) {
		ASSERT_EQ(g->runs[0].start_ns, 0, "below INT64_MIN's reach: 0");
		ASSERT_EQ(g->runs[0].end_ns, 0, "at it: 0");
		ASSERT_EQ(g->runs[1].start_ns, 0, "2^63 + INT64_MIN");
		ASSERT_EQ(g->runs[1].end_ns, half - 1, "UINT64_MAX + INT64_MIN");
		ASSERT_TRUE(g->runs[2].start_ns == UINT64_MAX - 10, "+10 below the limit");
		ASSERT_TRUE(g->runs[2].end_ns == UINT64_MAX, "+10 past it: held");
		ASSERT_EQ(g->runs[2].busy_ns, 10, "busy");
		ASSERT_EQ(g->runs[3].start_ns, INT64_MAX, "0 + INT64_MAX");
		ASSERT_TRUE(g->runs[3].end_ns == UINT64_MAX, "UINT64_MAX + INT64_MAX: held");
	}
	ASSERT_EQ(g->stats.bad_time, 0, "no end moved before its start");
	runs_free(r, g);
}

/* The legacy kernel kind is read like a concurrent kernel; a kind not read is counted. */
TEST(test_records_kinds)
{
	struct got *g;
	struct runs *r = runs_new(&g);
	CUpti_ActivityKernel10 k;
	CUpti_Activity marker = { .kind = CUPTI_ACTIVITY_KIND_MARKER };

	memset(&k, 0, sizeof(k));
	k.kind = CUPTI_ACTIVITY_KIND_KERNEL;
	k.start = 10;
	k.end = 20;
	k.streamId = 5;
	records_read(r, (const CUpti_Activity *)&k, 0);
	records_read(r, &marker, 0);
	runs_flush(r);
	ASSERT_EQ(g->stats.records, 2, "records");
	ASSERT_EQ(g->stats.unknown, 1, "unknown");
	ASSERT_EQ(g->stats.ops, 1, "ops");
	if (ASSERT_EQ(g->n, 1, "the kernel's run")) {
		ASSERT_EQ(g->runs[0].kernels, 1, "a kernel");
		ASSERT_EQ(g->runs[0].stream, 5, "stream");
	}
	runs_free(r, g);

	r = runs_new(&g);
	records_read(r, &marker, 0);
	runs_flush(r);
	ASSERT_EQ(r->stats.unknown, 1, "unknown alone");
	ASSERT_EQ(r->stats.records, 1, "records alone");
	ASSERT_EQ(g->batches, 0, "nothing emitted");
	runs_free(r, g);
}

/* CUPTI's overhead records are summed by kind, never made into runs; one whose end precedes its
 * start adds no time. */
TEST(test_records_overhead)
{
	struct got *g;
	struct runs *r = runs_new(&g);
	CUpti_ActivityOverhead3 o;
	static const struct {
		CUpti_ActivityOverheadKind kind;
		uint64_t start, end;
	} in[] = {
		{ CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH, 100, 150 },
		{ CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH, 200, 210 },
		{ CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION, 300, 1300 },
		{ CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE, 5, 7 },
		{ CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER, 10, 40 },
		{ CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING, 50, 20 },
	};

	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		memset(&o, 0, sizeof(o));
		o.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
		o.overheadKind = in[i].kind;
		o.start = in[i].start;
		o.end = in[i].end;
		records_read(r, (const CUpti_Activity *)&o, -1000);
	}
	runs_flush(r);
	ASSERT_EQ(r->stats.records, 6, "records");
	ASSERT_EQ(r->stats.overhead_records, 6, "overhead records");
	ASSERT_EQ(r->stats.unknown, 0, "none unknown");
	ASSERT_EQ(r->stats.ops, 0, "no operation");
	ASSERT_EQ(g->batches, 0, "no run");
	ASSERT_EQ(r->stats.overhead_ns[TS_DEVTIME_OVERHEAD_FLUSH], 60, "flush");
	ASSERT_EQ(r->stats.overhead_ns[TS_DEVTIME_OVERHEAD_INSTRUMENTATION], 1000,
		  "instrumentation");
	ASSERT_EQ(r->stats.overhead_ns[TS_DEVTIME_OVERHEAD_RESOURCE], 2, "resource");
	ASSERT_EQ(r->stats.overhead_ns[TS_DEVTIME_OVERHEAD_OTHER], 30,
		  "other kinds, time backwards none");
	runs_free(r, g);
}

int main(void)
{
	alarm(10); /* a hang is a failure, not a stuck test run */
	return check_run_all();
}
