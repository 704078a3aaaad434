// SPDX-License-Identifier: MIT
/*
 * user/pipeline/frame.c: frame_classify on any event type and data, as sse.c hands them over (each
 * NUL-terminated at its length, in a buffer of exactly that size, so a read past it is caught).
 *
 * Input:
 *   u8  elen     event type length, modulo SSE_EVENT_MAX + 1
 *   u8  event[elen]
 *   ... data
 *
 * Properties: the result is a known format with token counts of -1 or more, and the same frame
 * classified twice gives the same answer (the parse reuses per-thread scratch memory, so state
 * left by one frame must not leak into the next).
 */
#include "pipeline/frame.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *copy(const uint8_t *p, size_t n)
{
	char *s = malloc(n + 1);

	if (!s)
		abort();
	memcpy(s, p, n);
	s[n] = 0;
	return s;
}

static void check(const struct frame_info *fi)
{
	FUZZ_CHECK(fi->format >= FMT_UNKNOWN && fi->format <= FMT_ANTHROPIC, "format %d",
		   fi->format);
	FUZZ_CHECK(frame_format_name(fi->format) != NULL, "no name for format %d", fi->format);
	FUZZ_CHECK(fi->prompt_tokens >= -1 && fi->completion_tokens >= -1 &&
		       fi->cached_tokens >= -1,
		   "token counts %lld %lld %lld", (long long)fi->prompt_tokens,
		   (long long)fi->completion_tokens, (long long)fi->cached_tokens);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	size_t elen = fuzz_u8(&in) % (SSE_EVENT_MAX + 1);
	const uint8_t *ev = fuzz_bytes(&in, elen, &elen);
	char *event = copy(ev, elen), *body = copy(in.p, in.n);
	struct sse_frame f = { event, elen, body, in.n };
	struct frame_info a, b;

	frame_classify(&f, &a);
	check(&a);
	frame_classify(&f, &b);
	FUZZ_CHECK(!memcmp(&a, &b, sizeof(a)), "the same frame classified twice differs");
	free(event);
	free(body);
	return 0;
}
