// SPDX-License-Identifier: MIT
/*
 * The ring's records put back in time order (loader/reorder.h): batches taken apart, two CPUs'
 * batches merged, a drain's newest records held to the next, a record that comes after later ones
 * were handed over counted late, a connection's first sight kept ahead of its data although it
 * carries an older time, and batches with broken framing dropped whole without a read past
 * their end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/types.h>

#include "check.h"
#include "events.h"
#include "loader/reorder.h"

struct got {
	uint64_t time[64];
	uint32_t type[64];
	int n;
};

static int take(void *ctx, void *data, size_t size)
{
	struct got *g = ctx;

	if (g->n < 64) {
		g->time[g->n] = reorder_record_time(data, size);
		g->type[g->n] = ((struct ts_event_hdr *)data)->type;
		g->n++;
	}
	return 0;
}

static struct ts_data_event data_at(uint64_t t)
{
	struct ts_data_event e = { .hdr = { .type = TS_EV_DATA, .size = sizeof(e) } };

	e.exit_ns = t;
	e.enter_ns = t - 10;
	return e;
}

/* A batch of its records laid out as the kernel lays them: header, then each record at an
 * 8-byte boundary. */
struct batch_buf {
	unsigned char b[4096];
	size_t used;
	uint32_t n;
};

static void batch_init(struct batch_buf *bb, uint32_t cpu)
{
	memset(bb, 0, sizeof(*bb));
	bb->used = sizeof(struct ts_event_hdr);
	((struct ts_event_hdr *)bb->b)->type = TS_EV_BATCH;
	((struct ts_event_hdr *)bb->b)->pid = cpu;
}

static void batch_put(struct batch_buf *bb, const void *rec, size_t size)
{
	memcpy(bb->b + bb->used, rec, size);
	bb->used += (size + 7) & ~(size_t)7;
	bb->n++;
	((struct ts_event_hdr *)bb->b)->size = bb->used;
	((struct ts_event_hdr *)bb->b)->tid = bb->n;
}

TEST(test_reorder_two_cpus)
{
	struct reorder *r = reorder_new();
	struct batch_buf a, b;
	struct got g = { 0 };
	uint64_t at[] = { 100, 300, 500 }, bt[] = { 200, 400, 600 };

	if (!ASSERT_OK_PTR(r, "new"))
		return;
	batch_init(&a, 0);
	batch_init(&b, 1);
	for (int i = 0; i < 3; i++) {
		struct ts_data_event x = data_at(at[i]), y = data_at(bt[i]);

		batch_put(&a, &x, sizeof(x));
		batch_put(&b, &y, sizeof(y));
	}
	/* CPU 1's batch reached the ring first. */
	ASSERT_OK(reorder_add(r, b.b, b.used), "add b");
	ASSERT_OK(reorder_add(r, a.b, a.used), "add a");
	ASSERT_EQ(reorder_held(r), 6, "six held");
	reorder_release(r, 450, take, &g);
	ASSERT_EQ(g.n, 4, "four up to 450");
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(g.time[i], 100 * (i + 1), "in time order");
	ASSERT_EQ(reorder_held(r), 2, "two held to the next drain");
	reorder_release(r, UINT64_MAX, take, &g);
	ASSERT_EQ(g.n, 6, "all handed over");
	ASSERT_EQ(g.time[4], 500, "then 500");
	ASSERT_EQ(g.time[5], 600, "then 600");
	ASSERT_EQ(reorder_late(r, NULL), 0, "none late");
	reorder_free(r);
}

TEST(test_reorder_late)
{
	struct reorder *r = reorder_new();
	struct ts_data_event x = data_at(1000), y = data_at(900);
	struct got g = { 0 };
	uint64_t max_ns;

	if (!ASSERT_OK_PTR(r, "new"))
		return;
	ASSERT_OK(reorder_add(r, &x, sizeof(x)), "add");
	reorder_release(r, 1500, take, &g);
	/* Made before the drain's settle point, but came after it. */
	ASSERT_OK(reorder_add(r, &y, sizeof(y)), "add late");
	reorder_release(r, 3000, take, &g);
	ASSERT_EQ(g.n, 2, "both handed over");
	ASSERT_EQ(g.time[1], 900, "the late one after");
	ASSERT_EQ(reorder_late(r, &max_ns), 1, "one late");
	ASSERT_EQ(max_ns, 600, "by 600 ns past the settle point");
	reorder_free(r);
}

TEST(test_reorder_first_sight_stays_first)
{
	struct reorder *r = reorder_new();
	struct ts_conn_event open = { .hdr = { .type = TS_EV_CONN_OPEN, .size = sizeof(open) } };
	struct ts_data_event before = data_at(4000), d = data_at(5000), other = data_at(4500);
	struct got g = { 0 };
	struct batch_buf a;

	if (!ASSERT_OK_PTR(r, "new"))
		return;
	/* CPU 0 wrote at 4000; then a read that blocked from 1000 to 5000 on a socket first seen
	 * there: its first sight carries 1000 and is made just before its data. CPU 1 wrote at
	 * 4500. */
	open.ts_ns = 1000;
	batch_init(&a, 0);
	batch_put(&a, &before, sizeof(before));
	batch_put(&a, &open, sizeof(open));
	batch_put(&a, &d, sizeof(d));
	ASSERT_OK(reorder_add(r, &other, sizeof(other)), "add other");
	ASSERT_OK(reorder_add(r, a.b, a.used), "add batch");
	reorder_release(r, UINT64_MAX, take, &g);
	ASSERT_EQ(g.n, 4, "four");
	ASSERT_EQ(g.time[0], 4000, "CPU 0's write first");
	ASSERT_EQ(g.type[1], TS_EV_CONN_OPEN, "then the first sight, where it was made");
	ASSERT_EQ(g.time[2], 4500, "then CPU 1's write");
	ASSERT_EQ(g.time[3], 5000, "then the read");
	reorder_free(r);
}

TEST(test_reorder_bad_batches)
{
	struct reorder *r = reorder_new();
	struct ts_data_event x = data_at(100);
	struct batch_buf a;
	struct got g = { 0 };
	uint64_t records;

	if (!ASSERT_OK_PTR(r, "new"))
		return;
	batch_init(&a, 0);
	batch_put(&a, &x, sizeof(x));
	batch_put(&a, &x, sizeof(x));

	/* Cut short: the ring record is smaller than the batch says. */
	ASSERT_OK(reorder_add(r, a.b, a.used - 8), "add cut");
	/* A count that does not match its records. */
	((struct ts_event_hdr *)a.b)->tid = 3;
	ASSERT_OK(reorder_add(r, a.b, a.used), "add miscounted");
	((struct ts_event_hdr *)a.b)->tid = 2;
	/* A record that claims to run past the batch. */
	((struct ts_event_hdr *)(a.b + sizeof(struct ts_event_hdr)))->size = 4000;
	ASSERT_OK(reorder_add(r, a.b, a.used), "add overrun");
	/* A record smaller than a header: no progress would be made. */
	((struct ts_event_hdr *)(a.b + sizeof(struct ts_event_hdr)))->size = 0;
	ASSERT_OK(reorder_add(r, a.b, a.used), "add zero");
	/* A header alone. */
	ASSERT_OK(reorder_add(r, a.b, 4), "add short");
	reorder_release(r, UINT64_MAX, take, &g);
	ASSERT_EQ(reorder_bad(r, &records), 4, "four bad batches");
	ASSERT_EQ(records, 2 + 3 + 2 + 2, "the records they claimed");
	/* The 4-byte one is not a batch header: held as a record of unknown time. */
	ASSERT_EQ(g.n, 1, "nothing of a bad batch handed over");
	reorder_free(r);
}

TEST(test_reorder_many)
{
	struct reorder *r = reorder_new();
	struct batch_buf bb[4];
	struct got g = { 0 };
	bool ordered = true;

	if (!ASSERT_OK_PTR(r, "new"))
		return;
	/* Four CPUs, interleaved times, their batches in reverse. */
	for (int c = 0; c < 4; c++) {
		batch_init(&bb[c], c);
		for (int i = 0; i < 10; i++) {
			struct ts_data_event x = data_at(1000 + i * 40 + c * 10);

			batch_put(&bb[c], &x, sizeof(x));
		}
	}
	for (int c = 3; c >= 0; c--)
		ASSERT_OK(reorder_add(r, bb[c].b, bb[c].used), "add");
	reorder_release(r, 1200, take, &g);
	reorder_release(r, UINT64_MAX, take, &g);
	ASSERT_EQ(g.n, 40, "all forty");
	for (int i = 1; i < g.n; i++)
		ordered &= g.time[i] == g.time[i - 1] + 10;
	ASSERT_TRUE(ordered, "every one 10 ns after the one before");
	reorder_free(r);
}
TEST(test_reorder_take)
{
	struct reorder *r = reorder_new();
	struct reorder_out out = { 0 };
	struct got g = { 0 };
	uint64_t t[] = { 500, 100, 400, 200, 300 };

	if (!ASSERT_OK_PTR(r, "new"))
		return;
	for (int i = 0; i < 5; i++) {
		struct ts_data_event x = data_at(t[i]);

		ASSERT_OK(reorder_add(r, &x, sizeof(x)), "add");
	}
	reorder_take(r, 300, &out);
	ASSERT_EQ(reorder_held(r), 2, "two still held");
	/* Records added while the taken ones are handed over (the drainer, in the loader). */
	for (int i = 0; i < 2; i++) {
		struct ts_data_event x = data_at(450 + 100 * i);

		ASSERT_OK(reorder_add(r, &x, sizeof(x)), "add after the take");
	}
	reorder_hand(&out, take, &g);
	ASSERT_EQ(g.n, 3, "three handed over");
	reorder_take(r, UINT64_MAX, &out);
	reorder_hand(&out, take, &g);
	ASSERT_EQ(g.n, 7, "then the other four");
	static const uint64_t want[] = { 100, 200, 300, 400, 450, 500, 550 };

	for (int i = 0; i < 7; i++)
		ASSERT_EQ(g.time[i], want[i], "in time order");
	ASSERT_EQ(reorder_held(r), 0, "none held");
	reorder_out_free(&out);
	reorder_free(r);
}
TEST(test_reorder_empty)
{
	struct reorder *r = reorder_new();
	struct reorder_out out = { 0 };
	struct got g = { 0 };

	if (!ASSERT_OK_PTR(r, "new"))
		return;
	/* A drain with nothing held, as every drain of an idle trace is. */
	reorder_take(r, 1000, &out);
	reorder_hand(&out, take, &g);
	reorder_release(r, 2000, take, &g);
	reorder_take(r, UINT64_MAX, &out);
	reorder_hand(&out, take, &g);
	ASSERT_EQ(g.n, 0, "nothing handed over");
	ASSERT_EQ(reorder_late(r, NULL), 0, "nothing late");
	reorder_out_free(&out);
	reorder_free(r);
}

int main(void)
{
	return check_run_all();
}
