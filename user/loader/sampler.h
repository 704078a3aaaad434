/* SPDX-License-Identifier: MIT */
/*
 * A GPU vendor's sampler, as the loader calls it: a thread of the sampler's own takes every
 * device's utilisation, memory, clock, power and compute processes once a period into a struct
 * device_sample (pipeline/device_sample.h), and the loader takes the latest after each drain.
 * Each vendor's sampler module exports one table of these calls (nvml.c's nvml_sampler), named
 * in the vendor's row of the registry (vendor.h); trace.c and check.c call through it, never a
 * sampler by name. A type alone, so that a sampler and the registry depend on it and not on each
 * other.
 */
#ifndef TS_SAMPLER_H
#define TS_SAMPLER_H

#include <stdbool.h>

#include "pipeline/device_sample.h"

struct sampler_ops {
	/* Starts sampling on a thread of its own and returns at once, the sampler's state; NULL
	 * only when memory or a thread cannot be had (said). Why its library cannot be used, when
	 * the thread finds that out, is kept until say_why. */
	void *(*start)(void);
	/* Copies the latest sample into out when its seq differs from out->seq: true then. */
	bool (*latest)(void *s, struct device_sample *out);
	/* Says why the library cannot be used, once: now if known, else when it is (a traced
	 * process mapped one of the vendor's libraries: then the reason matters). */
	void (*say_why)(void *s);
	/* Stops the thread at once and frees the state; NULL is fine. */
	void (*stop)(void *s);
	/* tokenscope check's line: its name, the library the sampler opens (whether the dynamic
	 * loader can), and what it says when it can and when it cannot. */
	const char *check_name, *library, *check_ok, *check_off;
};

#endif
