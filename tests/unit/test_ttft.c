// SPDX-License-Identifier: MIT
/*
 * TTFT under each tool's definition (docs/output.md "TTFT definitions"): a request's first body
 * byte, first chunk, first output and first answer text from its frames, tokens per chunk from
 * usage, and the summary's table with a line naming the cause where the definitions differ.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pipeline/request.h"
#include "pipeline/sse.h"
#include "sinks/summary.h"

static void feed(struct request *r, const char *event, const char *data, uint64_t ts)
{
	struct sse_frame f = { event, strlen(event), data, strlen(data) };

	request_add_frame(r, &f, ts);
}

#define MS 1000000ull

/* A reasoning model's stream as vLLM sends it with continuous usage stats: an SSE comment,
 * the role-only chunk, reasoning, then answer text, each frame stating the running count. */
static struct request *reasoning_request(uint64_t t0)
{
	struct request *r = request_new(1, 1, 0, "c");

	r->arrival_ns = t0;
	request_body_bytes(r, 14, t0 + 10 * MS); /* ": keep-alive" */
	feed(r, "",
	     "{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],"
	     "\"usage\":{\"completion_tokens\":0}}",
	     t0 + 20 * MS);
	feed(r, "",
	     "{\"choices\":[{\"delta\":{\"reasoning_content\":\"a\"}}],"
	     "\"usage\":{\"completion_tokens\":1}}",
	     t0 + 30 * MS);
	feed(r, "",
	     "{\"choices\":[{\"delta\":{\"reasoning_content\":\"b\"}}],"
	     "\"usage\":{\"completion_tokens\":2}}",
	     t0 + 40 * MS);
	feed(r, "",
	     "{\"choices\":[{\"delta\":{\"content\":\"c\"}}],"
	     "\"usage\":{\"completion_tokens\":5}}",
	     t0 + 50 * MS);
	feed(r, "",
	     "{\"choices\":[{\"delta\":{\"content\":\"d\"}}],"
	     "\"usage\":{\"completion_tokens\":7}}",
	     t0 + 60 * MS);
	feed(r, "", "{\"choices\":[],\"usage\":{\"completion_tokens\":7}}", t0 + 61 * MS);
	feed(r, "", "[DONE]", t0 + 62 * MS);
	request_close(r, t0 + 62 * MS, true);
	return r;
}

TEST(test_ttft_definitions)
{
	struct request *r = reasoning_request(1000 * MS);
	struct request_metrics m;

	request_metrics(r, &m);
	ASSERT_EQ(r->outcome, OUTCOME_OK, "ok");
	ASSERT_EQ(m.ttft_byte_ns, 10 * MS, "first byte: the comment");
	ASSERT_EQ(m.ttft_chunk_ns, 20 * MS, "first chunk: the role-only frame");
	ASSERT_EQ(m.ttft_ns, 30 * MS, "first output: reasoning");
	ASSERT_EQ(m.ttft_text_ns, 50 * MS, "first content: answer text");
	ASSERT_EQ(m.tokens, 7, "tokens from usage");
	ASSERT_EQ(r->ntokens, 4, "four content frames");
	ASSERT_TRUE(m.tokens_per_chunk_mean == 7.0 / 4, "mean tokens per chunk");
	/* 1, 1, 3, 2 tokens: nearest-rank median 1, max 3 */
	ASSERT_EQ(m.tokens_per_chunk_p50, 1, "median from the running counts");
	ASSERT_EQ(m.tokens_per_chunk_max, 3, "max");
	request_free(r);

	/* Usage only at the end: the mean is known, the median and max are not. */
	r = request_new(1, 1, 0, "c");
	r->arrival_ns = 1;
	feed(r, "", "{\"choices\":[{\"delta\":{\"content\":\"c\"}}]}", 2);
	feed(r, "", "{\"choices\":[{\"delta\":{\"content\":\"d\"}}]}", 3);
	feed(r, "", "{\"choices\":[],\"usage\":{\"completion_tokens\":6}}", 4);
	request_close(r, 5, true);
	request_metrics(r, &m);
	ASSERT_TRUE(m.tokens_per_chunk_mean == 3.0, "mean 6 / 2");
	ASSERT_EQ(m.tokens_per_chunk_p50, -1, "no median");
	ASSERT_EQ(m.tokens_per_chunk_max, -1, "no max");
	ASSERT_EQ(m.ttft_byte_ns, -1, "no body bytes were reported");
	ASSERT_EQ(m.ttft_chunk_ns, 1, "first chunk with content");
	request_free(r);

	/* As many tokens as frames, or one more (the end-of-sequence token, counted and never
	 * streamed): no tokens per chunk. */
	for (int extra = 0; extra <= 1; extra++) {
		char usage[96];

		r = request_new(1, 1, 0, "c");
		r->arrival_ns = 1;
		feed(r, "", "{\"choices\":[{\"delta\":{\"content\":\"c\"}}]}", 2);
		feed(r, "", "{\"choices\":[{\"delta\":{\"content\":\"d\"}}]}", 3);
		snprintf(usage, sizeof(usage),
			 "{\"choices\":[],\"usage\":{\"completion_tokens\":%d}}", 2 + extra);
		feed(r, "", usage, 4);
		request_close(r, 5, true);
		request_metrics(r, &m);
		ASSERT_TRUE(isnan(m.tokens_per_chunk_mean), "a token per frame");
		request_free(r);
	}
}

/* The summary's table, and a line per definition that differs, naming the cause; none when
 * the definitions agree. */
TEST(test_ttft_definitions_summary)
{
	struct loss_report loss = { 0 };
	struct summary s;
	struct request_metrics m;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	summary_init(&s);
	for (int i = 0; i < 10; i++) {
		struct request *r = reasoning_request((uint64_t)(i + 1) * 1000 * MS);

		request_metrics(r, &m);
		summary_start(&s, r);
		summary_done(&s, r, &m);
		request_free(r);
	}
	f = open_memstream(&text, &len);
	summary_print(&s, &loss, "summary", f);
	fclose(f);
	ASSERT_TRUE(strstr(text, "TTFT definition") != NULL, "the table");
	ASSERT_TRUE(strstr(text, "first chunk -33% against first output: 10 of 10 requests sent "
				 "a chunk with no output first") != NULL,
		    "role-only chunk named");
	ASSERT_TRUE(strstr(text, "first content +67% against first output: 10 of 10 requests "
				 "streamed reasoning") != NULL,
		    "reasoning named");
	ASSERT_TRUE(strstr(text, "first byte -50% against first chunk: 10 of 10") != NULL,
		    "bytes before the first message named");
	free(text);

	/* One frame with everything, at once: the definitions agree, nothing is said. */
	summary_init(&s);
	for (int i = 0; i < 10; i++) {
		struct request *r = request_new(1, 1, 0, "c");

		r->arrival_ns = 1000 * MS;
		request_body_bytes(r, 16, 1030 * MS);
		feed(r, "",
		     "{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"x\"}}]}",
		     1030 * MS);
		feed(r, "", "[DONE]", 1040 * MS);
		request_close(r, 1040 * MS, true);
		request_metrics(r, &m);
		summary_start(&s, r);
		summary_done(&s, r, &m);
		request_free(r);
	}
	text = NULL;
	f = open_memstream(&text, &len);
	summary_print(&s, &loss, "summary", f);
	fclose(f);
	ASSERT_TRUE(strstr(text, "TTFT definition") != NULL, "the table");
	ASSERT_TRUE(strstr(text, "TTFT differs") == NULL, "no difference line");
	free(text);
}

int main(void)
{
	return check_run_all();
}
