/* SPDX-License-Identifier: MIT */
/*
 * Log-linear histogram of nanosecond values: fixed memory, mergeable, relative error of a
 * reported percentile at most 1/HIST_SUB_BUCKETS (< 1 %). Values below HIST_SUB_BUCKETS ns
 * are exact. Count, sum, min and max are exact.
 */
#ifndef TS_HIST_H
#define TS_HIST_H

#include <stdint.h>

/* 128 sub-buckets per power of two: the bucket width is under 0.8 % of its lower bound. */
#define HIST_SUB_BITS 7
#define HIST_SUB_BUCKETS (1u << HIST_SUB_BITS)
/* Largest power of two kept apart; larger values share the last octave (2^48 ns = 78 h). */
#define HIST_MAX_EXP 48
#define HIST_BUCKETS ((HIST_MAX_EXP - HIST_SUB_BITS + 2) * HIST_SUB_BUCKETS)

struct hist {
	uint64_t count, sum, min, max;
	uint64_t buckets[HIST_BUCKETS];
};

/* The nearest rank of quantile q among n samples, from 1: the smallest rank with at least q of
 * them at or below it (at least 1). Every percentile of the project is taken at this rank. */
uint64_t quantile_rank(double q, uint64_t n);
/* The ascending order of uint64_t values, for qsort: what the quantile rule reads. */
int u64_cmp(const void *a, const void *b);

void hist_reset(struct hist *h);
void hist_add(struct hist *h, uint64_t v);
void hist_merge(struct hist *dst, const struct hist *src);
/* Value at quantile q in [0, 1] (the midpoint of its bucket, clamped to [min, max]); 0 when
 * empty. */
uint64_t hist_quantile(const struct hist *h, double q);
/* Bucket index of v and the lowest value of bucket i (exported for tests and exporters). */
unsigned int hist_bucket(uint64_t v);
uint64_t hist_bucket_low(unsigned int i);

/*
 * A coarse histogram for sliding windows, which keep many (one per second and label set): the
 * same buckets merged 2^WHIST_COARSEN_BITS by 2^WHIST_COARSEN_BITS, 32 sub-buckets per power of
 * two (relative error under 3.2 %), 32-bit counts, exact count, min and max. Its quantile is
 * hist_quantile's rule: nearest rank, the middle of its bucket, clamped to [min, max].
 */
#define WHIST_COARSEN_BITS 2
#define WHIST_BUCKETS (HIST_BUCKETS >> WHIST_COARSEN_BITS)

struct whist {
	uint32_t n;
	uint64_t min, max;
	uint32_t b[WHIST_BUCKETS];
};

void whist_reset(struct whist *h);
void whist_add(struct whist *h, uint64_t v);
void whist_merge(struct whist *dst, const struct whist *src);
/* Value at quantile q in [0, 1]; -1 when empty. */
double whist_quantile(const struct whist *h, double q);

#endif
