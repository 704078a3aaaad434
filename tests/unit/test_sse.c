// SPDX-License-Identifier: MIT
/*
 * user/pipeline/sse.c: WHATWG event-stream rules, NDJSON lines, the frame size bound, gaps and
 * resync, and the same frames whichever byte boundaries the body arrives split at.
 */
#include <stdlib.h>

#include "check.h"
#include "pipeline/sse.h"

#define REC_FRAMES_MAX 32
#define REC_TEXT_MAX 256

struct srec {
	struct sse_parser p;
	size_t n;
	char data[REC_FRAMES_MAX][REC_TEXT_MAX];
	char event[REC_FRAMES_MAX][REC_TEXT_MAX];
	size_t data_len[REC_FRAMES_MAX];
	uint64_t ts[REC_FRAMES_MAX];
};

static void srec_on_frame(void *ctx, const struct sse_frame *f, uint64_t ts)
{
	struct srec *r = ctx;

	if (r->n >= REC_FRAMES_MAX)
		return;
	/* The frame must be NUL-terminated where it says it ends. */
	if (f->data[f->data_len] != '\0' || f->event[f->event_len] != '\0')
		return;
	snprintf(r->data[r->n], REC_TEXT_MAX, "%s", f->data);
	snprintf(r->event[r->n], REC_TEXT_MAX, "%s", f->event);
	r->data_len[r->n] = f->data_len;
	r->ts[r->n] = ts;
	r->n++;
}

static struct srec *srec_new(enum sse_mode mode)
{
	struct srec *r = calloc(1, sizeof(*r));

	sse_init(&r->p, mode, srec_on_frame, r);
	return r;
}

static void srec_free(struct srec *r)
{
	sse_free(&r->p);
	free(r);
}

static void feed(struct srec *r, const char *s, uint64_t ts)
{
	sse_feed(&r->p, (const uint8_t *)s, strlen(s), ts);
}

TEST(test_basic_fields)
{
	struct srec *r = srec_new(SSE_MODE_SSE);

	feed(r,
	     "data: a\n\n"
	     "data:b\n\n"	    /* no space */
	     "data:  c\n\n"	    /* only one space is removed */
	     "data: 1\ndata: 2\n\n" /* lines joined with LF */
	     ": comment\n\n"	    /* no data: nothing */
	     "event: e1\n\n"	    /* event without data: nothing, and reset */
	     "id: 7\nretry: 10\nfoo: bar\ndata: d\n\n"
	     "event: content_block_delta\ndata: {}\n\n"
	     "data\n\n" /* a field without a colon has an empty value */
	     "data: last\n\n",
	     4);
	if (!ASSERT_EQ(r->n, 8, "frames"))
		goto out;
	ASSERT_STREQ(r->data[0], "a", "space");
	ASSERT_STREQ(r->data[1], "b", "no space");
	ASSERT_STREQ(r->data[2], " c", "two spaces");
	ASSERT_STREQ(r->data[3], "1\n2", "joined");
	ASSERT_STREQ(r->event[4], "", "event reset after a dataless dispatch");
	ASSERT_STREQ(r->data[4], "d", "unknown fields ignored");
	ASSERT_STREQ(r->event[5], "content_block_delta", "event");
	ASSERT_STREQ(r->event[6], "", "event reset after dispatch");
	ASSERT_STREQ(r->data[6], "", "empty data");
	ASSERT_EQ(r->data_len[6], 0, "empty data length");
	ASSERT_STREQ(r->data[7], "last", "last");
	ASSERT_EQ(r->ts[7], 4, "ts");
	ASSERT_EQ(r->p.frames, 8, "counter");
out:
	srec_free(r);
}

TEST(test_line_endings)
{
	struct srec *r = srec_new(SSE_MODE_SSE);

	feed(r, "data: crlf\r\n\r\n", 1);
	feed(r, "data: cr\r\r", 2);
	feed(r, "data: a\r", 3);
	/* The LF of a CR LF split across feeds is not a second (blank) line. */
	feed(r, "\ndata: b\r\n", 4);
	feed(r, "\r\n", 5);
	if (!ASSERT_EQ(r->n, 3, "frames"))
		goto out;
	ASSERT_STREQ(r->data[0], "crlf", "crlf");
	ASSERT_STREQ(r->data[1], "cr", "cr");
	ASSERT_STREQ(r->data[2], "a\nb", "split crlf");
	ASSERT_EQ(r->ts[2], 5, "dispatched by the feed with the blank line");
out:
	srec_free(r);
}

TEST(test_bom)
{
	struct srec *r = srec_new(SSE_MODE_SSE);

	feed(r, "\xef\xbb", 1);
	feed(r,
	     "\xbf"
	     "data: x\n\n",
	     2);
	ASSERT_EQ(r->n, 1, "BOM skipped");
	ASSERT_STREQ(r->data[0], "x", "data");
	srec_free(r);

	/* Bytes that only start like a BOM are data. */
	r = srec_new(SSE_MODE_NDJSON);
	feed(r, "\xef", 1);
	feed(r, "x\n", 2);
	ASSERT_EQ(r->n, 1, "frame");
	ASSERT_STREQ(r->data[0], "\xefx", "held byte kept");
	srec_free(r);
}

TEST(test_finish_flushes)
{
	struct srec *r = srec_new(SSE_MODE_SSE);

	feed(r, "data: [DONE]", 1);
	ASSERT_EQ(r->n, 0, "not yet");
	sse_finish(&r->p, 2);
	ASSERT_EQ(r->n, 1, "flushed");
	ASSERT_STREQ(r->data[0], "[DONE]", "data");
	ASSERT_EQ(r->ts[0], 2, "finish ts");
	/* The parser takes a new body after finish. */
	feed(r, "data: x\n", 3);
	sse_finish(&r->p, 4);
	ASSERT_EQ(r->n, 2, "event without blank line");
	sse_finish(&r->p, 5);
	ASSERT_EQ(r->n, 2, "nothing pending");
	srec_free(r);

	r = srec_new(SSE_MODE_NDJSON);
	feed(r, "{\"a\":1}\n{\"b\":", 1);
	feed(r, "2}", 2);
	sse_finish(&r->p, 3);
	ASSERT_EQ(r->n, 2, "ndjson flushed");
	ASSERT_STREQ(r->data[1], "{\"b\":2}", "last line");
	ASSERT_EQ(r->ts[1], 3, "finish ts");
	srec_free(r);
}

TEST(test_ndjson)
{
	struct srec *r = srec_new(SSE_MODE_NDJSON);

	feed(r, "{\"a\":1}\n\n  \r\n{\"b\":2}\r\n\x1e{\"c\":3}\n", 1);
	if (!ASSERT_EQ(r->n, 3, "frames"))
		goto out;
	ASSERT_STREQ(r->data[0], "{\"a\":1}", "first");
	ASSERT_STREQ(r->data[1], "{\"b\":2}", "CR stripped");
	ASSERT_STREQ(r->data[2], "{\"c\":3}", "RS stripped");
	ASSERT_STREQ(r->event[0], "", "no event");
out:
	srec_free(r);
}

TEST(test_oversize)
{
	struct srec *r = srec_new(SSE_MODE_SSE);
	size_t big = SSE_FRAME_MAX + 100;
	char *line = malloc(big);

	memset(line, 'x', big);
	feed(r, "data: ", 1);
	for (int i = 0; i < 3; i++)
		sse_feed(&r->p, (const uint8_t *)line, big, 1);
	feed(r, "\n\ndata: after\n\n", 2);
	ASSERT_EQ(r->p.oversize_frames, 1, "counted");
	ASSERT_EQ(r->n, 1, "the next frame is fine");
	ASSERT_STREQ(r->data[0], "after", "after");

	/* Exactly SSE_FRAME_MAX fits. */
	feed(r, "data: ", 3);
	sse_feed(&r->p, (const uint8_t *)line, SSE_FRAME_MAX, 3);
	feed(r, "\n\n", 3);
	ASSERT_EQ(r->n, 2, "max fits");
	ASSERT_EQ(r->data_len[1], SSE_FRAME_MAX, "length");

	/* So does an overlong event type: dropped, never truncated into another name. */
	feed(r, "event: ", 4);
	sse_feed(&r->p, (const uint8_t *)line, SSE_EVENT_MAX + 1, 4);
	feed(r, "\ndata: x\n\n", 4);
	ASSERT_EQ(r->p.oversize_frames, 2, "event too long");
	ASSERT_EQ(r->n, 2, "dropped");
	srec_free(r);

	r = srec_new(SSE_MODE_NDJSON);
	sse_feed(&r->p, (const uint8_t *)line, big, 1);
	feed(r, "\n{}\n", 1);
	ASSERT_EQ(r->p.oversize_frames, 1, "ndjson counted");
	ASSERT_EQ(r->n, 1, "ndjson next");
	srec_free(r);
	free(line);
}

TEST(test_gap_resync)
{
	struct srec *r = srec_new(SSE_MODE_SSE);

	feed(r, "data: one\n\ndata: {\"tw", 1);
	sse_gap(&r->p, 10);
	feed(r, "o\"}\n\ndata: three\n\n", 2);
	ASSERT_EQ(r->p.damaged_frames, 1, "damaged");
	if (!ASSERT_EQ(r->n, 2, "frames"))
		goto out;
	ASSERT_STREQ(r->data[0], "one", "before");
	ASSERT_STREQ(r->data[1], "three", "after");

	/* A second gap before the boundary is the same damage. */
	feed(r, "data: fo", 3);
	sse_gap(&r->p, 1);
	feed(r, "u", 3);
	sse_gap(&r->p, 1);
	feed(r, "r\r\n\r\ndata: five\r\n\r\n", 3);
	ASSERT_EQ(r->p.damaged_frames, 2, "counted once");
	ASSERT_EQ(r->n, 3, "five");
	ASSERT_STREQ(r->data[2], "five", "five");

	/* Gap ending just before the LF that ends the damaged line. */
	feed(r, "data: six", 4);
	sse_gap(&r->p, 3);
	feed(r, "\n\ndata: seven\n\n", 4);
	ASSERT_EQ(r->n, 4, "seven");
	ASSERT_STREQ(r->data[3], "seven", "seven");

	/* A gap at end of body: finish drops what is damaged. */
	feed(r, "data: eight\n", 5);
	sse_gap(&r->p, 4);
	sse_finish(&r->p, 6);
	ASSERT_EQ(r->n, 4, "dropped at finish");
out:
	srec_free(r);

	r = srec_new(SSE_MODE_NDJSON);
	feed(r, "{\"a\":1}\n{\"b\"", 1);
	sse_gap(&r->p, 5);
	feed(r, ":2}\n{\"c\":3}\n", 2);
	ASSERT_EQ(r->n, 2, "ndjson resync at LF");
	ASSERT_STREQ(r->data[1], "{\"c\":3}", "after gap");
	ASSERT_EQ(r->p.damaged_frames, 1, "damaged");
	srec_free(r);
}

/* The same body split in two at every byte gives the same frames and ts by position. */
TEST(test_every_split)
{
	static const char body[] = "\xef\xbb\xbf: hi\r\nevent: a\r\ndata: 1\r\ndata: 2\r\n\r\n"
				   "data:x\r\rdata: y\n\nevent: b\ndata: {\"k\":\"v\"}\n\n";
	struct srec *ref = srec_new(SSE_MODE_SSE);
	size_t len = sizeof(body) - 1;

	for (size_t i = 0; i < len; i++)
		sse_feed(&ref->p, (const uint8_t *)body + i, 1, i);
	if (!ASSERT_EQ(ref->n, 4, "reference"))
		goto out;
	ASSERT_STREQ(ref->data[0], "1\n2", "ref data");
	ASSERT_STREQ(ref->event[3], "b", "ref event");
	for (size_t k = 1; k < len; k++) {
		struct srec *r = srec_new(SSE_MODE_SSE);
		bool ok = true;

		sse_feed(&r->p, (const uint8_t *)body, k, 0);
		sse_feed(&r->p, (const uint8_t *)body + k, len - k, 1);
		ok = ASSERT_EQ(r->n, ref->n, "frames");
		for (size_t i = 0; ok && i < r->n; i++)
			ok = ASSERT_STREQ(r->data[i], ref->data[i], "data") &&
			     ASSERT_STREQ(r->event[i], ref->event[i], "event") &&
			     ASSERT_EQ(r->ts[i], ref->ts[i] < k ? 0 : 1, "ts");
		srec_free(r);
		if (!ok) {
			printf("  split %zu\n", k);
			break;
		}
	}
out:
	srec_free(ref);
}

TEST(test_mode_for)
{
	ASSERT_EQ(sse_mode_for("text/event-stream"), SSE_MODE_SSE, "sse");
	ASSERT_EQ(sse_mode_for("application/x-ndjson"), SSE_MODE_NDJSON, "ndjson");
	ASSERT_EQ(sse_mode_for("application/jsonl"), SSE_MODE_NDJSON, "jsonl");
	ASSERT_EQ(sse_mode_for("application/json-seq"), SSE_MODE_NDJSON, "json-seq");
	ASSERT_EQ(sse_mode_for("application/json"), -1, "json");
	ASSERT_EQ(sse_mode_for(""), -1, "empty");
	ASSERT_EQ(sse_mode_for(NULL), -1, "null");
}

TEST(test_garbage)
{
	struct srec *r = srec_new(SSE_MODE_SSE);
	uint8_t buf[4096];
	uint64_t s = 88172645463325252ull;

	/* Random bytes: whatever frames come out, nothing overruns (ASan watches). */
	for (int round = 0; round < 200; round++) {
		for (size_t i = 0; i < sizeof(buf); i++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			/* Mostly syntax characters, so lines and fields do form. */
			buf[i] = s % 3 ? (uint8_t) "\n\r:d "[(s >> 8) % 5] : (uint8_t)(s >> 16);
		}
		sse_feed(&r->p, buf, sizeof(buf), round);
		if (round % 7 == 0)
			sse_gap(&r->p, 3);
	}
	sse_finish(&r->p, 0);
	ASSERT_TRUE(r->p.frames <= 200 * sizeof(buf), "survived");
	srec_free(r);
}

int main(void)
{
	return check_run_all();
}
