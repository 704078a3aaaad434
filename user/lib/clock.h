/* SPDX-License-Identifier: MIT */
/*
 * Time units and the one clock tokenscope reads: CLOCK_MONOTONIC, which is what the kernel's
 * bpf_ktime_get_ns() reads, so a time taken here and a record's time are on the same clock.
 */
#ifndef TS_CLOCK_H
#define TS_CLOCK_H

#include <stdint.h>
#include <time.h>

#define NS_PER_US 1000ull
#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull

/* CLOCK_MONOTONIC now, in nanoseconds. */
static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* The same, in seconds (for schedules, not for measurements). */
static inline double mono_s(void)
{
	return (double)mono_ns() / NS_PER_S;
}

#endif
