// SPDX-License-Identifier: MIT
/*
 * Prefix-cache guesses (pipeline/prefix.h): none while the server's window is short, a request
 * much faster per prompt token than the cold cluster likely cached, one as slow cold; a
 * reported cached_tokens is never guessed; sizes in bytes kept apart from sizes in tokens; a
 * window where most requests hit still finds its cold rate above the gap.
 */
#include <string.h>

#include "check.h"
#include "pipeline/prefix.h"
#include "pipeline/request.h"
#include "pipeline/step.h"

#define MS 1000000LL

/* A finished ok request of pid with prompt tokens (-1: not reported, then 4 bytes each) and
 * a prefill step of prefill_ms; its guess. */
static enum cache_guess guess(struct prefix_fits *f, uint32_t pid, int64_t tokens, double prefill_ms,
			      int64_t cached)
{
	struct request r;
	struct request_metrics m;
	struct gpu_attribution ga = { -1, -1, -1, -1, -1, "none", -1, -1, NULL,
				      .has_steps = false };
	enum cache_guess g;

	memset(&r, 0, sizeof(r));
	request_init(&r, pid, 1, 0, "c");
	r.arrival_ns = 1000 * MS;
	request_add_token(&r, r.arrival_ns + (uint64_t)(prefill_ms * MS) + MS);
	r.end_ns = r.token_ns[0];
	r.outcome = OUTCOME_OK;
	r.prompt_tokens = tokens;
	r.prompt_bytes = tokens >= 0 ? tokens * 4 : 600;
	r.cached_tokens = cached;
	request_metrics(&r, &m);
	ga.prefill_ns = (int64_t)(prefill_ms * MS);
	g = prefix_guess(f, &r, &m, &ga);
	request_release(&r);
	return g;
}

TEST(test_prefix_guess)
{
	static struct prefix_fits f;
	int right = 0;

	memset(&f, 0, sizeof(f));
	/* The window fills: unknown until it has PREFIX_MIN_SAMPLES rates. */
	for (int i = 0; i < PREFIX_MIN_SAMPLES; i++)
		ASSERT_EQ(guess(&f, 7, 150, i % 3 ? 2 : 60, -1), CACHE_UNKNOWN, "too few yet");
	ASSERT_EQ(guess(&f, 7, 150, 61, -1), CACHE_COLD, "as slow as the cold ones");
	ASSERT_EQ(guess(&f, 7, 150, 2.5, -1), CACHE_LIKELY, "far faster per token");
	ASSERT_EQ(guess(&f, 7, 300, 118, -1), CACHE_COLD, "a longer prompt, the same rate");
	ASSERT_EQ(guess(&f, 7, 150, 3, 0), CACHE_REPORTED, "reported: no guess");
	ASSERT_EQ(guess(&f, 7, 8, 1, -1), CACHE_UNKNOWN, "too short a prompt");
	/* Another server, and bytes rather than tokens: windows of their own. */
	ASSERT_EQ(guess(&f, 8, 150, 2, -1), CACHE_UNKNOWN, "a new server's window");
	ASSERT_EQ(guess(&f, 7, -1, 2, -1), CACHE_UNKNOWN, "bytes: a window of their own");
	/* Mostly hits (9 in 10): the cold rate is still the slow cluster's. */
	for (int i = 0; i < 100; i++)
		right += guess(&f, 9, 150, i % 10 ? 2 : 60, -1) ==
			 (i < PREFIX_MIN_SAMPLES ? CACHE_UNKNOWN
			  : i % 10			? CACHE_LIKELY
							: CACHE_COLD);
	ASSERT_EQ(right, 100, "every guess right at 90 % hits");
	/* One speed only (no cache): all cold, none likely cached. */
	for (int i = 0; i < 20; i++)
		if (i >= PREFIX_MIN_SAMPLES)
			ASSERT_EQ(guess(&f, 10, 150, 60 + i % 4, -1), CACHE_COLD, "no cache");
		else
			guess(&f, 10, 150, 60 + i % 4, -1);
	ASSERT_STREQ(cache_guess_name(CACHE_LIKELY), "likely_cached", "name");
}

int main(void)
{
	return check_run_all();
}
