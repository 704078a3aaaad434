/* SPDX-License-Identifier: MIT */
/*
 * Time units and the one clock tokenscope reads: CLOCK_MONOTONIC, which is what the kernel's
 * bpf_ktime_get_ns() reads, so a time taken here and a record's time are on the same clock.
 */
#ifndef TS_CLOCK_H
#define TS_CLOCK_H

#include <stdbool.h>
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

/*
 * Wall time from the kernel's clock: offset_ns is CLOCK_REALTIME - CLOCK_MONOTONIC, read back to
 * back (clock_offset_now, or a recording's header); the CLOCK_REALTIME time of mono_ns goes into
 * *wall_ns. false when it is not a time after 1970 that int64 nanoseconds can hold: a recording's
 * clocks are input, and arithmetic on them must neither overflow nor make up a date.
 */
static inline bool clock_wall_ns(int64_t offset_ns, uint64_t mono_ns, int64_t *wall_ns)
{
	int64_t w;

	if (mono_ns > INT64_MAX || __builtin_add_overflow((int64_t)mono_ns, offset_ns, &w) || w < 0)
		return false;
	*wall_ns = w;
	return true;
}

/* This machine's CLOCK_REALTIME - CLOCK_MONOTONIC, the two read back to back. */
static inline int64_t clock_offset_now(void)
{
	struct timespec rt, mt;

	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_MONOTONIC, &mt);
	return (int64_t)(rt.tv_sec - mt.tv_sec) * (int64_t)NS_PER_S + (rt.tv_nsec - mt.tv_nsec);
}

#endif
