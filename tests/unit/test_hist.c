// SPDX-License-Identifier: MIT
/* The latency histogram: bucket layout, percentile error bound, merge, edge values. */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "lib/hist.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t exact_quantile(const uint64_t *v, size_t n, double q)
{
	size_t rank = (size_t)ceil(q * n);

	return v[(rank ? rank : 1) - 1];
}

TEST(test_buckets_cover_values)
{
	uint64_t prev_low = 0;

	for (unsigned int i = 1; i < HIST_BUCKETS; i++) {
		uint64_t low = hist_bucket_low(i);

		if (!ASSERT_TRUE(low > prev_low, "bucket bounds increase"))
			return;
		if (!ASSERT_EQ(hist_bucket(low), i, "a bucket's low value maps to it"))
			return;
		if (!ASSERT_EQ(hist_bucket(low - 1), i - 1, "the value below maps to the previous"))
			return;
		prev_low = low;
	}
	ASSERT_EQ(hist_bucket(~0ull), HIST_BUCKETS - 1, "huge values clamp to the last bucket");
}

TEST(test_quantile_error_bound)
{
	enum { N = 20000 };
	static uint64_t v[N];
	struct hist *h = calloc(1, sizeof(*h));
	const double qs[] = { 0.5, 0.9, 0.95, 0.99, 0.999 };
	unsigned int seed = 42;

	for (int i = 0; i < N; i++) {
		/* Log-uniform from 1 us to 100 s: every scale a latency can have. */
		double e = 3 + 8 * (rand_r(&seed) / (double)RAND_MAX);

		v[i] = (uint64_t)pow(10, e);
		hist_add(h, v[i]);
	}
	qsort(v, N, sizeof(v[0]), cmp_u64);
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		double want = exact_quantile(v, N, qs[i]), got = hist_quantile(h, qs[i]);

		ASSERT_TRUE(fabs(got - want) / want <= 0.01, "relative error <= 1 %");
	}
	ASSERT_EQ(hist_quantile(h, 0), v[0], "q0 is the min");
	ASSERT_EQ(hist_quantile(h, 1), v[N - 1], "q1 is the max");
	ASSERT_EQ(h->count, N, "count");
	free(h);
}

TEST(test_merge_equals_combined)
{
	struct hist *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b)),
		    *all = calloc(1, sizeof(*all));

	for (uint64_t i = 1; i < 5000; i++) {
		hist_add(i % 3 ? a : b, i * 997);
		hist_add(all, i * 997);
	}
	hist_merge(a, b);
	ASSERT_TRUE(memcmp(a, all, sizeof(*a)) == 0, "merge is exact");
	free(a);
	free(b);
	free(all);
}

TEST(test_small_and_empty)
{
	struct hist *h = calloc(1, sizeof(*h));

	ASSERT_EQ(hist_quantile(h, 0.5), 0, "empty");
	hist_add(h, 5);
	hist_add(h, 7);
	hist_add(h, 100);
	ASSERT_EQ(hist_quantile(h, 0.5), 7, "small values are exact");
	ASSERT_EQ(h->sum, 112, "sum");
	free(h);
}

int main(void)
{
	return check_run_all();
}
