// SPDX-License-Identifier: MIT
#include <string.h>

#include "lib/hist.h"

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

int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t quantile_rank(double q, uint64_t n)
{
	uint64_t rank = (uint64_t)(q * n);

	if ((double)rank < q * n)
		rank++;
	return rank ? rank : 1;
}

/* The middle of the buckets [lo, lo + 2^bits) of hist_bucket's, clamped to [min, max]. */
static uint64_t bucket_value(unsigned int lo, unsigned int bits, uint64_t min, uint64_t max)
{
	uint64_t low = hist_bucket_low(lo), high, v;

	if (lo + (1u << bits) < HIST_BUCKETS)
		high = hist_bucket_low(lo + (1u << bits));
	else
		high = low + (hist_bucket_width(HIST_BUCKETS - 1) << bits);
	v = low + (high - low) / 2;
	if (v < min)
		v = min;
	if (v > max)
		v = max;
	return v;
}

uint64_t hist_quantile(const struct hist *h, double q)
{
	uint64_t rank, seen = 0;

	if (!h->count)
		return 0;
	if (q <= 0)
		return h->min;
	if (q >= 1)
		return h->max;
	rank = quantile_rank(q, h->count);
	for (unsigned int i = 0; i < HIST_BUCKETS; i++) {
		seen += h->buckets[i];
		if (seen >= rank)
			return bucket_value(i, 0, h->min, h->max);
	}
	return h->max;
}

void whist_reset(struct whist *h)
{
	memset(h, 0, sizeof(*h));
}

void whist_add(struct whist *h, uint64_t v)
{
	if (!h->n || v < h->min)
		h->min = v;
	if (!h->n || v > h->max)
		h->max = v;
	h->n++;
	h->b[hist_bucket(v) >> WHIST_COARSEN_BITS]++;
}

void whist_merge(struct whist *dst, const struct whist *src)
{
	if (!src->n)
		return;
	if (!dst->n || src->min < dst->min)
		dst->min = src->min;
	if (!dst->n || src->max > dst->max)
		dst->max = src->max;
	dst->n += src->n;
	for (unsigned int i = 0; i < WHIST_BUCKETS; i++)
		dst->b[i] += src->b[i];
}

double whist_quantile(const struct whist *h, double q)
{
	uint64_t rank, seen = 0;

	if (!h->n)
		return -1;
	rank = quantile_rank(q, h->n);
	for (unsigned int i = 0; i < WHIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank)
			return (double)bucket_value(i << WHIST_COARSEN_BITS, WHIST_COARSEN_BITS,
						    h->min, h->max);
	}
	return (double)h->max;
}
