// SPDX-License-Identifier: MIT
#include <string.h>

#include "hist.h"

void hist_reset(struct hist *h)
{
	memset(h, 0, sizeof(*h));
}

unsigned int hist_bucket(uint64_t v)
{
	unsigned int e;

	if (v < HIST_SUB_BUCKETS)
		return v;
	e = 63 - __builtin_clzll(v);
	if (e > HIST_MAX_EXP)
		return HIST_BUCKETS - 1;
	/* The HIST_SUB_BITS bits after the leading one select the sub-bucket. */
	return (e - HIST_SUB_BITS + 1) * HIST_SUB_BUCKETS +
	       ((v >> (e - HIST_SUB_BITS)) & (HIST_SUB_BUCKETS - 1));
}

uint64_t hist_bucket_low(unsigned int i)
{
	unsigned int e, sub;

	if (i < HIST_SUB_BUCKETS)
		return i;
	e = i / HIST_SUB_BUCKETS + HIST_SUB_BITS - 1;
	sub = i % HIST_SUB_BUCKETS;
	return (1ull << e) + ((uint64_t)sub << (e - HIST_SUB_BITS));
}

static uint64_t hist_bucket_width(unsigned int i)
{
	if (i < HIST_SUB_BUCKETS)
		return 1;
	return 1ull << (i / HIST_SUB_BUCKETS - 1);
}

void hist_add(struct hist *h, uint64_t v)
{
	if (!h->count || v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
	h->count++;
	h->sum += v;
	h->buckets[hist_bucket(v)]++;
}

void hist_merge(struct hist *dst, const struct hist *src)
{
	if (!src->count)
		return;
	if (!dst->count || src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
	dst->count += src->count;
	dst->sum += src->sum;
	for (unsigned int i = 0; i < HIST_BUCKETS; i++)
		dst->buckets[i] += src->buckets[i];
}

uint64_t hist_quantile(const struct hist *h, double q)
{
	uint64_t rank, seen = 0, v;

	if (!h->count)
		return 0;
	if (q <= 0)
		return h->min;
	if (q >= 1)
		return h->max;
	/* Nearest-rank: the smallest value with at least q of the samples at or below it. */
	rank = (uint64_t)(q * h->count);
	if ((double)rank < q * h->count)
		rank++;
	if (!rank)
		rank = 1;
	for (unsigned int i = 0; i < HIST_BUCKETS; i++) {
		seen += h->buckets[i];
		if (seen < rank)
			continue;
		v = hist_bucket_low(i) + hist_bucket_width(i) / 2;
		if (v < h->min)
			v = h->min;
		if (v > h->max)
			v = h->max;
		return v;
	}
	return h->max;
}
