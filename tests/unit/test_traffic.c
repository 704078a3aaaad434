// SPDX-License-Identifier: MIT
/*
 * bpf/lib/traffic.bpf.h on the host: which writes start like a streamed completion frame, on
 * the first TS_TRAFFIC_PEEK_BYTES bytes of every write real servers made (tests/fixtures), on
 * Ollama's NDJSON, and on bytes that must not match.
 */
#include <linux/types.h>
#include <stdbool.h>

#include "check.h"
#include "fixture.h"
#include "traffic.h"
#include "lib/traffic.bpf.h"

/* The kernel's view of one write: its first TS_TRAFFIC_PEEK_BYTES bytes in a zeroed buffer. */
static __u8 peek(const void *p, size_t len)
{
	__u8 buf[TRAFFIC_BUF_BYTES] = { 0 };
	__u32 n = len < TS_TRAFFIC_PEEK_BYTES ? len : TS_TRAFFIC_PEEK_BYTES;

	memcpy(buf, p, n);
	return traffic_match(buf, n);
}

static __u8 peek_str(const char *s)
{
	return peek(s, strlen(s));
}

/* The kind of each write of a fixture, as a string of '.', 'S' (SSE) and 'N' (NDJSON). */
static bool fixture_kinds(const char *name, char *out, size_t max)
{
	struct fixture f;
	size_t start = 0, i;

	if (fixture_load(&f, name))
		return false;
	for (i = 0; i < f.nwrites && i + 1 < max; i++) {
		__u8 k = peek(f.buf + start, f.writes[i] - start);

		out[i] = k == TS_TRAFFIC_SSE ? 'S' : k == TS_TRAFFIC_NDJSON ? 'N' : '.';
		start = f.writes[i];
	}
	out[i] = 0;
	fixture_free(&f);
	return true;
}

/*
 * Every write of every captured server: headers (alone or with the first frame), `[DONE]`, the
 * terminator and non-streamed bodies do not match; every write that starts a content frame after
 * its chunk-size line does (Node's 4-iovec writev appears here as its bytes; the iovec walk
 * is tested in tests/bpf/test_bpf_traffic.c).
 */
TEST(test_fixture_writes)
{
	static const struct {
		const char *name, *kinds;
	} cases[] = {
		{ "uvicorn_h11.resp", ".SSSSSS.." },
		{ "uvloop_vllm.resp", ".SSSSS" },
		{ "node_express.resp", ".SSSSS." },
		{ "aiohttp_completion.resp", ".SSSS.." },
		{ "tgi.resp", ".SSSS." },
		{ "error_frame.resp", ".SSS.." },
		{ "keepalive.resp", ".SSSSSS...." },
		/* content_block_* events match; ping, message_delta and message_stop do not (the
		 * message_start frame shares the first write with the headers). */
		{ "anthropic.resp", ".S.SSSSSSS..." },
		/* The Responses API: every event's line starts `event: response.`; the chunked
		 * terminator does not match. */
		{ "responses_text.resp", ".SSSSSSSSSS." },
		/* A Go map encodes its keys sorted: `{"created_at":...`. Ollama's own structs put
		 * "model" first (test_ollama_ndjson); a map-encoded stream is not recognised. */
		{ "go_ollama.resp", "......" },
	};
	char got[FIXTURE_WRITES_MAX + 1];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (!ASSERT_TRUE(fixture_kinds(cases[i].name, got, sizeof(got)), cases[i].name))
			continue;
		ASSERT_STREQ(got, cases[i].kinds, cases[i].name);
	}
}

/* Ollama's /api/chat and /api/generate objects (api.ChatResponse, api.GenerateResponse: the
 * model is the first field), chunked as Go's net/http writes them, and as json.dumps spaces
 * them. */
TEST(test_ollama_ndjson)
{
	ASSERT_EQ(
	    peek_str("7c\r\n{\"model\":\"llama3.2\",\"created_at\":\"2024-01-01T00:00:00Z\","
		     "\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"done\":false}\n"
		     "\r\n"),
	    TS_TRAFFIC_NDJSON, "chat, chunked");
	ASSERT_EQ(peek_str("{\"model\":\"llama3.2\",\"created_at\":\"2024-01-01T00:00:00Z\","
			   "\"response\":\"Hi\",\"done\":false}\n"),
		  TS_TRAFFIC_NDJSON, "generate, not chunked");
	ASSERT_EQ(peek_str("4a\r\n{\"model\": \"m\", \"response\": \"x\"}\n\r\n"),
		  TS_TRAFFIC_NDJSON, "json.dumps spacing");
}

TEST(test_frame_starts)
{
	ASSERT_EQ(peek_str("data: {\"id\":\"x\"}\n\n"), TS_TRAFFIC_SSE, "SSE, not chunked");
	ASSERT_EQ(peek_str("data:{\"token\":{}}\n\n"), TS_TRAFFIC_SSE, "TGI: no space");
	/* The kernel does not read writes shorter than the shortest match. */
	ASSERT_EQ(peek_str("data:{"), TS_TRAFFIC_SSE, "shortest match");
	ASSERT_EQ(strlen("data:{"), TRAFFIC_MIN_BYTES, "TRAFFIC_MIN_BYTES is the shortest match");
	ASSERT_EQ(peek_str("9\r\ndata: {}\n\n\r\n"), TS_TRAFFIC_SSE, "one hex digit");
	ASSERT_EQ(peek_str("1A2B\r\ndata: {"), TS_TRAFFIC_SSE, "upper-case hex");
	/* 8 hex digits, CRLF and the longest event name fill the peek exactly. */
	ASSERT_EQ(peek_str("fffffff0\r\nevent: content_block_delta\ndata: {}"), TS_TRAFFIC_SSE,
		  "longest prefix within the peek");
	ASSERT_EQ(peek_str("event: message_start\ndata: {}"), TS_TRAFFIC_SSE, "Anthropic start");
	ASSERT_EQ(peek_str("3f\r\nevent: response.output_text.delta\ndata: {"), TS_TRAFFIC_SSE,
		  "OpenAI Responses API");
}

TEST(test_not_frames)
{
	static const char *const no[] = {
		"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\n",
		"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
		"0\r\n\r\n",
		"data: hello\n\n",
		"data: ",
		"data:",
		"5\r\ndata",
		"{\"object\":\"list\",\"data\":[]}",
		"{\"models\":[{\"name\":\"x\"}]}",
		"{\"model\":1}",
		"7\r\n{\"id\":1}\r\n",
		"event: ping\ndata: {\"type\":\"ping\"}\n\n",
		"event: message_stop\n",
		"zz\r\ndata: {}",
		"123456789\r\ndata: {}", /* 9 hex digits: no chunk-size line we read */
		"12\rdata: {}",
		" data: {}",
		"DATA: {}",
		"",
	};

	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (!ASSERT_EQ(peek_str(no[i]), TS_TRAFFIC_NONE, "no match"))
			printf("  bytes: \"%s\"\n", no[i]);
	/* A frame start cut before its decisive byte is no match; the whole one is. */
	static const char sse[] = "a6\r\ndata: {\"id\":\"chatcmpl-1\"}";
	for (size_t n = 0; n < 11; n++)
		ASSERT_EQ(peek(sse, n), TS_TRAFFIC_NONE, "cut before the brace");
	ASSERT_EQ(peek(sse, 11), TS_TRAFFIC_SSE, "up to the brace");
	/* Binary bytes (a TLS record) do not match. */
	ASSERT_EQ(peek("\x17\x03\x03\x00\x40\x9a", 6), TS_TRAFFIC_NONE, "TLS record");
}

/* When the first piece of a writev is worth reading the next one for. */
TEST(test_need_more)
{
	static const char *const yes[] = { "a6", "a6\r", "a6\r\n", "0", "fffffff0\r\n", "da" };
	static const char *const no[] = { "", "data", "a6\r\nd", "a6\n", "HTTP/1.1", "a6 " };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (!ASSERT_TRUE(traffic_need_more((const __u8 *)yes[i], strlen(yes[i])), "more"))
			printf("  bytes: \"%s\"\n", yes[i]);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (!ASSERT_FALSE(traffic_need_more((const __u8 *)no[i], strlen(no[i])), "no more"))
			printf("  bytes: \"%s\"\n", no[i]);
}

int main(void)
{
	return check_run_all();
}
