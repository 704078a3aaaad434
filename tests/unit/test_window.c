// SPDX-License-Identifier: MIT
/* The sliding window that top and the alert rules share: slots by second, reuse, late samples,
 * summing a range of seconds, what a finished request adds, and the coarse histogram's
 * percentile against the full one's. */
#include <stdlib.h>

#include "check.h"
#include "pipeline/gpu.h"
#include "lib/hist.h"
#include "pipeline/request.h"
#include "sinks/window.h"

#define S 1000000000ull
#define MS 1000000ull

/* A request that ended at end with the given TTFT, two tokens 10 ms apart, and outcome o. */
static struct request *req(uint64_t end, uint64_t ttft, enum outcome o, struct request_metrics *m)
{
	struct request *r = request_new(1, 1, 0, "c");

	r->arrival_ns = end - ttft - 10 * MS;
	request_add_token(r, end - 10 * MS);
	request_add_token(r, end);
	r->end_ns = end;
	r->outcome = o;
	request_metrics(r, m);
	return r;
}

TEST(test_request_counts_and_samples)
{
	struct window w;
	struct win_counts c;
	struct whist *h = malloc(sizeof(*h));
	struct request_metrics m;
	struct gpu_attribution ga = { .queue_ns = 30 * MS,
				      .prefill_ns = 10 * MS,
				      .decode_ns = 10 * MS,
				      .gpu_ns = 8 * MS,
				      .host_ns = 2 * MS,
				      .how = "",
				      -1,
				      -1,
				      NULL };
	struct request *ok = req(100 * S + 1, 40 * MS, OUTCOME_OK, &m);

	ASSERT_OK_PTR(h, "scratch");
	ASSERT_OK(window_init(&w, 10, (1u << WM_MAX) - 1), "init");
	ASSERT_TRUE(window_add_request(&w, ok, &m, &ga), "ok request");
	request_free(ok);
	struct request *bad = req(100 * S + 2, 40 * MS, OUTCOME_HTTP_ERROR, &m);
	ASSERT_TRUE(window_add_request(&w, bad, &m, NULL), "error request");
	request_free(bad);

	window_sum(&w, 100, 100, &c, WM_BIT(WM_TTFT), h);
	ASSERT_EQ(c.requests, 2, "every outcome counted");
	ASSERT_EQ(c.ok, 1, "one ok");
	ASSERT_EQ(c.tokens, 4, "tokens of both");
	ASSERT_EQ(c.attributed, 1, "attributed");
	ASSERT_EQ(c.queue_ns, 30 * MS, "queue sum");
	ASSERT_EQ(c.prefill_ns, 10 * MS, "prefill sum");
	ASSERT_EQ(c.ttft_ns, 40 * MS, "ttft sum");
	ASSERT_EQ(c.gpu_ns + c.host_ns, 10 * MS, "gap split");
	ASSERT_EQ(h->n, 1, "TTFT of ok requests only");
	ASSERT_NEAR(whist_quantile(h, 0.99), 40.0 * MS, 1, "a single sample is exact");
	window_sum(&w, 100, 100, NULL, WM_BIT(WM_E2E), h);
	ASSERT_EQ(h->n, 2, "E2E of every outcome");
	window_sum(&w, 100, 100, NULL, WM_BIT(WM_ITL), h);
	ASSERT_EQ(h->n, 1, "one gap");
	window_sum(&w, 101, 200, &c, WM_BIT(WM_TTFT), h);
	ASSERT_EQ(c.requests, 0, "nothing later");
	ASSERT_EQ(h->n, 0, "empty histogram");
	ASSERT_TRUE(whist_quantile(h, 0.5) < 0, "empty: -1");
	window_free(&w);
	free(h);
}

TEST(test_slots_reused_and_late_samples)
{
	struct window w;
	struct win_counts c;

	ASSERT_OK(window_init(&w, 3, 1), "init");
	ASSERT_TRUE(window_add(&w, 10, 0, 5), "second 10");
	ASSERT_TRUE(window_add(&w, 11, 0, 5), "second 11");
	ASSERT_TRUE(window_add(&w, 13, 0, 5), "second 13 takes 10's slot");
	ASSERT_FALSE(window_add(&w, 10, 0, 5), "second 10 has left the window");
	ASSERT_TRUE(window_add(&w, 11, 0, 7), "second 11 still kept");
	ASSERT_FALSE(window_add(&w, 11, 1, 7), "an id not kept");
	ASSERT_FALSE(window_add(&w, 11, 40, 7), "an id past 31");

	struct whist *h = malloc(sizeof(*h));
	ASSERT_OK_PTR(h, "scratch");
	window_sum(&w, 0, 100, &c, 1, h);
	ASSERT_EQ(h->n, 3, "seconds 11 (twice) and 13");
	ASSERT_EQ(h->min, 5, "min");
	ASSERT_EQ(h->max, 7, "max");
	window_sum(&w, 12, 13, NULL, 1, h);
	ASSERT_EQ(h->n, 1, "a range of seconds");
	window_clear(&w);
	window_sum(&w, 0, 100, NULL, 1, h);
	ASSERT_EQ(h->n, 0, "cleared");
	window_free(&w);
	free(h);
}

/* The coarse histogram's percentile is the full one's rule on coarser buckets: within 3.2 % of
 * it, and both are clamped to the exact extremes. */
TEST(test_whist_against_hist)
{
	struct hist *full = calloc(1, sizeof(*full));
	struct whist *coarse = calloc(1, sizeof(*coarse));
	uint64_t v = 12345;

	ASSERT_OK_PTR(full, "hist");
	ASSERT_OK_PTR(coarse, "whist");
	for (int i = 0; i < 5000; i++) {
		v = v * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t x = 1000 + (v >> 40) % 50000000;

		hist_add(full, x);
		whist_add(coarse, x);
	}
	const double qs[] = { 0.01, 0.5, 0.9, 0.99, 0.999 };
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		double a = (double)hist_quantile(full, qs[i]), b = whist_quantile(coarse, qs[i]);

		ASSERT_NEAR(b, a, a * 0.032, "coarse within 3.2 % of the full histogram");
	}
	ASSERT_NEAR(whist_quantile(coarse, 1.0), (double)full->max, 0, "q=1 is the maximum");
	whist_reset(coarse);
	whist_add(coarse, 6 * S);
	whist_add(coarse, 6 * S);
	ASSERT_NEAR(whist_quantile(coarse, 0.99), 6.0 * S, 0, "clamped: equal samples are exact");
	free(full);
	free(coarse);
}

int main(void)
{
	return check_run_all();
}
