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

void hist_reset(struct hist *h);
void hist_add(struct hist *h, uint64_t v);
void hist_merge(struct hist *dst, const struct hist *src);
/* Value at quantile q in [0, 1] (the midpoint of its bucket, clamped to [min, max]); 0 when
 * empty. */
uint64_t hist_quantile(const struct hist *h, double q);
/* Bucket index of v and the lowest value of bucket i (exported for tests and exporters). */
unsigned int hist_bucket(uint64_t v);
uint64_t hist_bucket_low(unsigned int i);

#endif
