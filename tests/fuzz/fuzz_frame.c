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
 * Properties: the result is a known format with token counts of -1 or more; an error's reason
 * is terminated and holds a code's characters only (letters, digits, "_.:-": never a message's
 * text), and only an error has one; the model a stream names is terminated; and the same frame
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

FUZZ_CHECKER static void check(const struct frame_info *fi)
{
	FUZZ_CHECK(fi->format >= FMT_UNKNOWN && fi->format <= FMT_OPENAI_RESPONSES &&
		       fi->format != FMT_GRPC,
		   "format %d", fi->format);
	FUZZ_CHECK(frame_format_name(fi->format) != NULL, "no name for format %d", fi->format);
	FUZZ_CHECK(fi->prompt_tokens >= -1 && fi->completion_tokens >= -1 &&
		       fi->cached_tokens >= -1 && fi->reasoning_tokens >= -1,
		   "token counts %lld %lld %lld %lld", (long long)fi->prompt_tokens,
		   (long long)fi->completion_tokens, (long long)fi->cached_tokens,
		   (long long)fi->reasoning_tokens);
	FUZZ_CHECK(memchr(fi->reason, 0, sizeof(fi->reason)), "reason not terminated");
	FUZZ_CHECK(memchr(fi->model, 0, sizeof(fi->model)), "model not terminated");
	FUZZ_CHECK(!fi->reason[0] || fi->error, "a reason without an error: \"%s\"", fi->reason);
	for (const char *c = fi->reason; *c; c++)
		FUZZ_CHECK((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			       (*c >= '0' && *c <= '9') || strchr("_.:-", *c),
			   "reason \"%s\" holds 0x%02x", fi->reason, (unsigned char)*c);
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
