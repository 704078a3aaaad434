/* SPDX-License-Identifier: MIT */
/*
 * Durations as the command line writes them: a number and a unit, "250us", "200ms", "5s", "3m",
 * "1h". Used by --slow-ttft, --slo and the alert rules.
 */
#ifndef TS_DURATION_H
#define TS_DURATION_H

#include <stdbool.h>

/* The longest duration accepted: 10^9 s (31 years) is surely a typo, and it leaves nanoseconds
 * in 64 bits (2^63 ns is 292 years) room to spare. */
#define DURATION_MAX_S 1e9

/* s to seconds; false when the unit is missing or unknown, the number is not a finite one at
 * least 0, or the duration is longer than DURATION_MAX_S (*seconds is not written then). */
bool duration_parse(const char *s, double *seconds);

#endif
