/* SPDX-License-Identifier: MIT */
/*
 * Prefix-cache hits a server does not report (docs/output.md, "Prefix-cache hits"): a request
 * whose usage says no cached_tokens gets a guess from its prefill time per prompt token against
 * the same server's recent requests. A prompt read from the cache skips most of its prefill, so
 * its time per token falls far below the server's cold requests'.
 *
 * The rule: a request's prefill time is its prefill GPU step where one was found, else its
 * TTFT minus its queue where the steps split it, else its TTFT; its size its usage's
 * prompt_tokens, else its body's bytes (each server's sizes kept apart by unit). Its rate is
 * time / size. Per server and unit the last PREFIX_WINDOW rates are kept; the cold rate is the
 * median of those at and above the widest gap between neighbouring sorted rates when that gap
 * is a factor of PREFIX_GAP or more (the fast cluster below it is the cache's), else the
 * median of all. A request is likely_cached when its rate is under the cold rate /
 * PREFIX_GAP, cold otherwise; unknown with fewer than PREFIX_MIN_SAMPLES rates before it, a
 * prompt under PREFIX_MIN_TOKENS tokens (PREFIX_MIN_BYTES bytes), no prefill time, or an
 * outcome other than ok. Never a count of tokens: only the flag.
 */
#ifndef TS_PREFIX_H
#define TS_PREFIX_H

#include <stdbool.h>
#include <stdint.h>

#define PREFIX_WINDOW 256
#define PREFIX_GAP 2.0
#define PREFIX_MIN_SAMPLES 8
#define PREFIX_MIN_TOKENS 16
#define PREFIX_MIN_BYTES 64
#define PREFIX_SERVERS 16

struct prefix_window {
	uint32_t pid;
	bool bytes; /* sizes in body bytes (no prompt_tokens reported) */
	double rate[PREFIX_WINDOW];
	uint32_t n, next;
};

struct prefix_fits {
	struct prefix_window w[PREFIX_SERVERS];
	uint32_t nw, next; /* past PREFIX_SERVERS, the oldest window is taken over */
};

struct request;
struct request_metrics;
struct gpu_attribution;
/* r's guess (CACHE_REPORTED when its usage said cached_tokens), its rate then added to its
 * server's window. */
enum cache_guess prefix_guess(struct prefix_fits *f, const struct request *r,
			      const struct request_metrics *m, const struct gpu_attribution *ga);

#endif
