// SPDX-License-Identifier: MIT
/*
 * user/pipeline/frame.c on single frames of every format, then the whole chain http -> sse -> frame
 * on every captured fixture: one syscall per feed must give the known frame, content and
 * token counts with the write that completed each frame as its ts, and one byte per feed or
 * two feeds split at any byte must give the same frames stamped by position. Gaps inside
 * chunk data damage one frame and the stream goes on.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "check.h"
#include "fixture.h"
#include "pipeline/frame.h"
#include "pipeline/http.h"
#include "pipeline/sse.h"

#define PIPE_FRAMES_MAX 64
#define PIPE_ENDS_MAX 4

static struct frame_info classify(const char *event, const char *data)
{
	struct sse_frame f = { event, strlen(event), data, strlen(data) };
	struct frame_info fi;

	frame_classify(&f, &fi);
	return fi;
}

TEST(test_done_and_invalid)
{
	struct frame_info fi = classify("", "[DONE]");

	ASSERT_TRUE(fi.done, "done");
	ASSERT_FALSE(fi.invalid, "not invalid");
	ASSERT_FALSE(fi.content, "not content");
	ASSERT_EQ(fi.format, FMT_UNKNOWN, "format");
	ASSERT_EQ(fi.prompt_tokens, -1, "unknown tokens");
	ASSERT_TRUE(classify("", " [DONE]\r\n").done, "trimmed");
	ASSERT_TRUE(classify("", "not json").invalid, "text");
	ASSERT_TRUE(classify("", "").invalid, "empty");
	ASSERT_TRUE(classify("", "{\"choices\":[{\"delta\":{\"content\":\"x\"").invalid, "cut");
	fi = classify("", "123");
	ASSERT_FALSE(fi.invalid, "a number is JSON");
	ASSERT_FALSE(fi.content, "but no content");
	fi = classify("content_block_delta", "{oops");
	ASSERT_TRUE(fi.invalid, "invalid");
	ASSERT_EQ(fi.format, FMT_ANTHROPIC, "known by its event line");
}

TEST(test_openai_chat)
{
	struct frame_info fi;

	fi = classify(
	    "", "{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
		"\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}");
	ASSERT_EQ(fi.format, FMT_OPENAI_CHAT, "format");
	ASSERT_FALSE(fi.content, "vLLM role-only first frame");
	fi = classify("", "{\"choices\": [{\"delta\": {}, \"finish_reason\": \"stop\"}]}");
	ASSERT_EQ(fi.format, FMT_OPENAI_CHAT, "format without object");
	ASSERT_FALSE(fi.content, "finish frame");
	ASSERT_TRUE(classify("", "{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}").content,
		    "content");
	ASSERT_FALSE(classify("", "{\"choices\":[{\"delta\":{\"content\":null}}]}").content,
		     "null content");
	ASSERT_TRUE(
	    classify("", "{\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}").content,
	    "reasoning_content");
	ASSERT_TRUE(classify("", "{\"choices\":[{\"delta\":{\"reasoning\":\"hm\"}}]}").content,
		    "reasoning");
	ASSERT_TRUE(
	    classify("", "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}").content,
	    "tool_calls");
	ASSERT_FALSE(classify("", "{\"choices\":[{\"delta\":{\"tool_calls\":[]}}]}").content,
		     "empty tool_calls");
	ASSERT_TRUE(classify("", "{\"choices\":[{\"index\":1,\"delta\":{}},"
				 "{\"index\":0,\"delta\":{\"content\":\"x\"}}]}")
			.content,
		    "any choice");

	fi = classify("", "{\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":"
			  "{\"prompt_tokens\":12,\"completion_tokens\":4,\"total_tokens\":16,"
			  "\"prompt_tokens_details\":{\"cached_tokens\":8}}}");
	ASSERT_FALSE(fi.content, "usage frame");
	ASSERT_EQ(fi.format, FMT_OPENAI_CHAT, "usage format");
	ASSERT_EQ(fi.prompt_tokens, 12, "prompt");
	ASSERT_EQ(fi.completion_tokens, 4, "completion");
	ASSERT_EQ(fi.cached_tokens, 8, "cached");
	fi = classify("", "{\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,"
			  "\"prompt_tokens_details\":null}}");
	ASSERT_EQ(fi.prompt_tokens, 3, "usage without object");
	ASSERT_EQ(fi.cached_tokens, -1, "no details");
	fi = classify("", "{\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":null}");
	ASSERT_EQ(fi.completion_tokens, -1, "usage null");
	fi = classify(
	    "", "{\"choices\":[],\"usage\":{\"prompt_tokens\":1.5,\"completion_tokens\":-2}}");
	ASSERT_EQ(fi.prompt_tokens, -1, "not a count");
	ASSERT_EQ(fi.completion_tokens, -1, "negative");
}

TEST(test_openai_completion)
{
	struct frame_info fi =
	    classify("", "{\"object\":\"text_completion\",\"choices\":[{\"text\":"
			 "\" a\",\"finish_reason\":null}]}");

	ASSERT_EQ(fi.format, FMT_OPENAI_COMPLETION, "format");
	ASSERT_TRUE(fi.content, "text");
	fi = classify("", "{\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}");
	ASSERT_EQ(fi.format, FMT_OPENAI_COMPLETION, "format without object");
	ASSERT_FALSE(fi.content, "empty text");
}

TEST(test_tgi)
{
	struct frame_info fi;

	fi = classify("", "{\"index\":1,\"token\":{\"id\":450,\"text\":\" The\",\"logprob\":-0.5,"
			  "\"special\":false},\"generated_text\":null,\"details\":null}");
	ASSERT_EQ(fi.format, FMT_TGI, "format");
	ASSERT_TRUE(fi.content, "token");
	ASSERT_FALSE(fi.done, "not last");
	fi = classify("", "{\"index\":4,\"token\":{\"id\":2,\"text\":\"</s>\",\"special\":true},"
			  "\"generated_text\":\" The sky\",\"details\":{\"finish_reason\":"
			  "\"eos_token\",\"generated_tokens\":4,\"seed\":null}}");
	ASSERT_FALSE(fi.content, "special token");
	ASSERT_TRUE(fi.done, "last frame");
	ASSERT_EQ(fi.completion_tokens, 4, "generated_tokens");
	ASSERT_EQ(fi.prompt_tokens, -1, "no prompt count");
	fi = classify("", "{\"error\":\"Input validation error\",\"error_type\":\"validation\"}");
	ASSERT_TRUE(fi.error, "TGI error");
}

TEST(test_ollama)
{
	struct frame_info fi;

	fi = classify("", "{\"model\":\"llama3.2\",\"created_at\":\"2024-01-01T00:00:00Z\","
			  "\"response\":\"The\",\"done\":false}");
	ASSERT_EQ(fi.format, FMT_OLLAMA, "generate");
	ASSERT_TRUE(fi.content, "response");
	fi = classify("", "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},"
			  "\"done\":true,\"prompt_eval_count\":26,\"eval_count\":290,"
			  "\"eval_duration\":4709213000}");
	ASSERT_EQ(fi.format, FMT_OLLAMA, "chat");
	ASSERT_FALSE(fi.content, "empty last message");
	ASSERT_TRUE(fi.done, "done");
	ASSERT_EQ(fi.prompt_tokens, 26, "prompt_eval_count");
	ASSERT_EQ(fi.completion_tokens, 290, "eval_count");
	ASSERT_TRUE(classify("", "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":"
				 "\"\",\"thinking\":\"hmm\"},\"done\":false}")
			.content,
		    "thinking");
	ASSERT_TRUE(classify("", "{\"error\":\"model not found\"}").error, "error");
}

TEST(test_anthropic)
{
	struct frame_info fi;

	fi = classify("message_start",
		      "{\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,"
		      "\"cache_read_input_tokens\":10,\"cache_creation_input_tokens\":5,"
		      "\"output_tokens\":1}}}");
	ASSERT_EQ(fi.format, FMT_ANTHROPIC, "format");
	ASSERT_FALSE(fi.content, "start");
	ASSERT_EQ(fi.prompt_tokens, 40, "whole prompt");
	ASSERT_EQ(fi.cached_tokens, 10, "cache read");
	ASSERT_EQ(fi.completion_tokens, 1, "output so far");
	ASSERT_FALSE(classify("ping", "{\"type\": \"ping\"}").content, "ping");
	ASSERT_TRUE(classify("content_block_delta",
			     "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
			     "{\"type\":\"text_delta\",\"text\":\"Hi\"}}")
			.content,
		    "text_delta");
	ASSERT_FALSE(classify("content_block_delta",
			      "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
			      "{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}")
			 .content,
		     "empty partial_json");
	ASSERT_TRUE(classify("", "{\"type\":\"content_block_delta\",\"delta\":"
				 "{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\"}}")
			.content,
		    "partial_json, no event line");
	ASSERT_TRUE(classify("content_block_delta",
			     "{\"type\":\"content_block_delta\",\"delta\":"
			     "{\"type\":\"thinking_delta\",\"thinking\":\"so\"}}")
			.content,
		    "thinking_delta");
	ASSERT_FALSE(classify("content_block_delta",
			      "{\"type\":\"content_block_delta\",\"delta\":"
			      "{\"type\":\"signature_delta\",\"signature\":\"abc\"}}")
			 .content,
		     "signature_delta");
	fi = classify("message_delta", "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
				       "\"end_turn\"},\"usage\":{\"output_tokens\":15}}");
	ASSERT_EQ(fi.completion_tokens, 15, "final output");
	ASSERT_EQ(fi.prompt_tokens, -1, "not restated");
	/* Counts no tokenizer makes are unknown, and their sum cannot overflow. */
	fi = classify("message_delta",
		      "{\"type\":\"message_delta\",\"usage\":{\"input_tokens\":9000000000000000000,"
		      "\"cache_read_input_tokens\":9000000000000000000,\"output_tokens\":1}}");
	ASSERT_EQ(fi.prompt_tokens, -1, "absurd input count");
	ASSERT_EQ(fi.cached_tokens, -1, "absurd cache count");
	ASSERT_EQ(fi.completion_tokens, 1, "the sane one kept");
	ASSERT_TRUE(classify("message_stop", "{\"type\":\"message_stop\"}").done, "stop");
	fi = classify("error", "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
			       "\"message\":\"Overloaded\"}}");
	ASSERT_TRUE(fi.error, "error event");
	ASSERT_EQ(fi.format, FMT_ANTHROPIC, "anthropic error");
	ASSERT_FALSE(fi.done, "not done");
}

/* The Responses API: which events are output, which end the stream, their usage and reasons. */
TEST(test_openai_responses)
{
	static const struct {
		const char *type, *delta;
		bool content, text;
	} deltas[] = {
		{ "response.output_text.delta", "\"Hi\"", true, true },
		{ "response.output_text.delta", "\"\"", false, false },
		{ "response.reasoning_text.delta", "\"Let\"", true, false },
		{ "response.reasoning_summary_text.delta", "\"So\"", true, false },
		{ "response.refusal.delta", "\"No\"", true, false },
		{ "response.function_call_arguments.delta", "\"{\\\"a\\\"\"", true, false },
		{ "response.custom_tool_call_input.delta", "\"x\"", true, false },
		{ "response.audio.transcript.delta", "\"x\"", true, false },
		{ "response.some_new_kind.delta", "\"x\"", true, false },
		/* vLLM once sent reasoning deltas as objects. */
		{ "response.reasoning.delta", "{\"content\":\"We\"}", true, false },
		{ "response.reasoning.delta", "{}", false, false },
	};
	struct frame_info fi;
	char data[256];

	for (size_t i = 0; i < sizeof(deltas) / sizeof(deltas[0]); i++) {
		snprintf(data, sizeof(data),
			 "{\"type\":\"%s\",\"sequence_number\":4,\"item_id\":\"x\",\"delta\":%s}",
			 deltas[i].type, deltas[i].delta);
		fi = classify(deltas[i].type, data);
		ASSERT_EQ(fi.format, FMT_OPENAI_RESPONSES, deltas[i].type);
		ASSERT_EQ(fi.content, deltas[i].content, deltas[i].type);
		ASSERT_EQ(fi.text, deltas[i].text, deltas[i].type);
		ASSERT_TRUE(fi.chunk, "a chunk");
		ASSERT_FALSE(fi.done || fi.error, "neither end nor error");
	}
	/* Lifecycle: no chunk, no output; the model is named. */
	fi = classify("response.created",
		      "{\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":"
		      "\"Qwen/Qwen3-8B\",\"status\":\"in_progress\",\"usage\":null}}");
	ASSERT_EQ(fi.format, FMT_OPENAI_RESPONSES, "created");
	ASSERT_FALSE(fi.chunk || fi.content, "created: no output");
	ASSERT_STREQ(fi.model, "Qwen/Qwen3-8B", "its model");
	fi = classify("",
		      "{\"type\":\"response.output_item.added\",\"item\":{\"type\":\"message\"}}");
	ASSERT_EQ(fi.format, FMT_OPENAI_RESPONSES, "known by its type without an event line");
	ASSERT_TRUE(fi.chunk && !fi.content, "an item: a chunk, not output");
	ASSERT_STREQ(fi.model, "", "no model");
	fi = classify(
	    "response.completed",
	    "{\"type\":\"response.completed\",\"response\":{\"status\":\"completed\","
	    "\"usage\":{\"input_tokens\":14,\"input_tokens_details\":{\"cached_tokens\":8},"
	    "\"output_tokens\":30,\"output_tokens_details\":{\"reasoning_tokens\":12}}}}");
	ASSERT_TRUE(fi.done && !fi.error && !fi.chunk, "completed ends the stream");
	ASSERT_EQ(fi.prompt_tokens, 14, "input");
	ASSERT_EQ(fi.completion_tokens, 30, "output");
	ASSERT_EQ(fi.cached_tokens, 8, "cached");
	ASSERT_EQ(fi.reasoning_tokens, 12, "reasoning");
	fi = classify("response.failed",
		      "{\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":"
		      "{\"code\":\"server_error\",\"message\":\"The engine died: Say hi\"}}}");
	ASSERT_TRUE(fi.done && fi.error, "failed: an error that ends the stream");
	ASSERT_STREQ(fi.reason, "failed:server_error", "its code, never its message");
	fi = classify("response.incomplete",
		      "{\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\","
		      "\"incomplete_details\":{\"reason\":\"max_output_tokens\"}}}");
	ASSERT_TRUE(fi.done && fi.error, "incomplete");
	ASSERT_STREQ(fi.reason, "incomplete:max_output_tokens", "why");
	fi = classify("response.failed", "{\"type\":\"response.failed\",\"response\":{}}");
	ASSERT_STREQ(fi.reason, "failed", "no code");
	fi = classify("error", "{\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":"
			       "\"Slow down\",\"param\":null,\"sequence_number\":3}");
	ASSERT_TRUE(fi.error && !fi.done, "an error event");
	ASSERT_EQ(fi.format, FMT_OPENAI_RESPONSES, "the Responses API's, not Anthropic's");
	ASSERT_STREQ(fi.reason, "rate_limit_exceeded", "code");
	fi = classify("response.output_text.delta", "{cut");
	ASSERT_TRUE(fi.invalid, "invalid");
	ASSERT_EQ(fi.format, FMT_OPENAI_RESPONSES, "known by its event line");
	/* Not streamed: the response object, with its usage. */
	fi = classify("", "{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\","
			  "\"output\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":9}}");
	ASSERT_EQ(fi.format, FMT_OPENAI_RESPONSES, "not streamed");
	ASSERT_EQ(fi.completion_tokens, 9, "its usage");
	ASSERT_FALSE(fi.chunk || fi.done, "not a stream's event");
}

/* An error frame's reason is a code, in the characters of a code, cut to fit. */
TEST(test_error_reasons)
{
	struct frame_info fi;

	fi = classify("", "{\"error\":{\"message\":\"quota\",\"type\":\"insufficient_quota\","
			  "\"code\":\"insufficient_quota\"}}");
	ASSERT_STREQ(fi.reason, "insufficient_quota", "OpenAI: a string code");
	fi = classify("", "{\"error\":{\"message\":\"x\",\"type\":\"server_error\",\"code\":500}}");
	ASSERT_STREQ(fi.reason, "server_error", "a type before a number");
	fi = classify("", "{\"object\":\"error\",\"message\":\"x\",\"type\":\"BadRequestError\","
			  "\"code\":400}");
	ASSERT_STREQ(fi.reason, "BadRequestError", "vLLM");
	fi = classify("", "{\"error\":{\"message\":\"x\",\"code\":503}}");
	ASSERT_STREQ(fi.reason, "503", "a number alone");
	fi = classify("", "{\"error\":\"Input validation error\",\"error_type\":\"validation\"}");
	ASSERT_STREQ(fi.reason, "validation", "TGI");
	fi = classify("", "{\"error\":\"model not found\"}");
	ASSERT_STREQ(fi.reason, "", "Ollama names none");
	fi = classify("error", "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}");
	ASSERT_STREQ(fi.reason, "overloaded_error", "Anthropic");
	fi = classify("", "{\"error\":{\"code\":\"a b\\n\\u001b[2J\\\"c\"}}");
	ASSERT_STREQ(fi.reason, "a_b___2J_c", "anything but a code's characters made _");
	fi = classify("", "{\"error\":{\"code\":\"0123456789012345678901234567890123456789"
			  "0123456789\"}}");
	ASSERT_EQ(strlen(fi.reason), FRAME_REASON_MAX - 1, "cut to fit");
}

TEST(test_errors)
{
	struct frame_info fi =
	    classify("", "{\"error\": {\"object\": \"error\", \"message\": \"x\", "
			 "\"type\": \"InternalServerError\", \"code\": 500}}");

	ASSERT_TRUE(fi.error, "openai error object");
	ASSERT_FALSE(fi.content, "no content");
	ASSERT_TRUE(classify("", "{\"object\":\"error\",\"message\":\"bad\",\"code\":400}").error,
		    "vLLM error response");
	ASSERT_FALSE(classify("", "{\"choices\":[],\"error\":null}").error, "null is no error");
	ASSERT_TRUE(classify("error", "{}").error, "event: error");
}

/* Frames are read leniently (lib/json.h): what strict JSON readers refuse but a frame may hold
 * is still classified. */
TEST(test_lenient_frames)
{
	static const char bad_utf8[] = "{\"object\":\"chat.completion.chunk\",\"choices\":"
				       "[{\"delta\":{\"content\":\"\xe2\x82\"}}]}";
	static const char raw_nul[] = "{\"choices\":[{\"delta\":{\"content\":\"\0x\"}}]}";
	struct sse_frame f = { "", 0, raw_nul, sizeof(raw_nul) - 1 };
	struct frame_info fi;

	fi = classify("", bad_utf8);
	ASSERT_FALSE(fi.invalid, "half a character");
	ASSERT_TRUE(fi.content, "is content");
	fi = classify("", "{\"choices\":[{\"delta\":{\"content\":\"a\tb\"}}]}");
	ASSERT_TRUE(fi.content && !fi.invalid, "a raw tab in a string");
	fi = classify("", "{\"choices\":[],\"usage\":{\"prompt_tokens\":99999999999999999999,"
			  "\"completion_tokens\":3}}");
	ASSERT_FALSE(fi.invalid, "an integer past int64_t");
	ASSERT_EQ(fi.prompt_tokens, -1, "is no count");
	ASSERT_EQ(fi.completion_tokens, 3, "the others are");
	fi = classify("", "{\"choices\":[],\"usage\":{\"prompt_tokens\":1e400,"
			  "\"completion_tokens\":01}}");
	ASSERT_FALSE(fi.invalid, "numbers outside JSON's grammar");
	ASSERT_EQ(fi.prompt_tokens, -1, "past a double");
	ASSERT_EQ(fi.completion_tokens, 1, "a leading zero");
	fi = classify("", "{\"choices\":[{\"delta\":{\"content\":\"\\u0000x\"}}]}");
	ASSERT_FALSE(fi.content || fi.invalid, "\\u0000 ends the string");
	frame_classify(&f, &fi);
	ASSERT_FALSE(fi.content || fi.invalid, "so does a NUL");
	fi = classify("", "{\"choices\":[{\"delta\":{\"content\\u0000x\":\"y\"}}]}");
	ASSERT_TRUE(fi.content && !fi.invalid, "and a key's");
	fi = classify("", "\xef\xbb\xbf{\"choices\":[{\"text\":\"y\"}]} trailing");
	ASSERT_TRUE(fi.content && !fi.invalid, "a byte order mark, bytes after the value");
	fi = classify("", "{\"choices\":[{\"text\":\"\"}],\"choices\":[{\"text\":\"y\"}]}");
	ASSERT_FALSE(fi.content, "a key given twice: the first counts");
	ASSERT_TRUE(classify("", "{\"choices\":[{\"text\":\"\\q\"}]}").invalid, "a bad escape");
	ASSERT_TRUE(classify("", "{\"a\":1,}").invalid, "a trailing comma");
}

TEST(test_format_names)
{
	ASSERT_STREQ(frame_format_name(FMT_OPENAI_CHAT), "openai-chat", "chat");
	ASSERT_STREQ(frame_format_name(FMT_OPENAI_COMPLETION), "openai-completion", "completion");
	ASSERT_STREQ(frame_format_name(FMT_TGI), "tgi", "tgi");
	ASSERT_STREQ(frame_format_name(FMT_OLLAMA), "ollama", "ollama");
	ASSERT_STREQ(frame_format_name(FMT_ANTHROPIC), "anthropic", "anthropic");
	ASSERT_STREQ(frame_format_name(FMT_UNKNOWN), "unknown", "unknown");
	ASSERT_STREQ(frame_format_name((enum frame_format)99), "unknown", "out of range");
}

/* A frame is parsed into scratch memory that is emptied when it is done: a frame far larger
 * than the scratch (the rest comes from malloc), the same frame cut in the middle, and the
 * caller's own cJSON trees, made before, between and after frames, which must stay intact.
 * Under the sanitizers, scratch given to free or reused under a live tree would show. */
TEST(test_scratch_memory)
{
	const char *head = "{\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":"
			   "{\"content\":\"x\"}}],\"usage\":{\"prompt_tokens\":5,"
			   "\"completion_tokens\":7},\"pad\":{";
	cJSON *before = cJSON_Parse("{\"a\":[1,2,3],\"b\":\"kept\"}"), *after;
	char *big = malloc(SSE_FRAME_MAX);
	struct frame_info fi;
	size_t n;
	char cut;

	if (!ASSERT_OK_PTR(big, "malloc") || !ASSERT_OK_PTR(before, "a caller's tree"))
		goto out;
	n = snprintf(big, SSE_FRAME_MAX, "%s", head);
	/* Some 3,000 members: ten times the scratch in nodes and strings. */
	for (int i = 0; n < SSE_FRAME_MAX - 64; i++)
		n += snprintf(big + n, SSE_FRAME_MAX - n, "%s\"k%d\":\"v%d\"", i ? "," : "", i, i);
	snprintf(big + n, SSE_FRAME_MAX - n, "}}");

	for (int round = 0; round < 3; round++) {
		fi = classify("", big);
		ASSERT_FALSE(fi.invalid, "a large frame parses");
		ASSERT_TRUE(fi.content, "content");
		ASSERT_EQ(fi.prompt_tokens, 5, "prompt tokens");
		ASSERT_EQ(fi.completion_tokens, 7, "completion tokens");
		cut = big[n / 2];
		big[n / 2] = 0;
		ASSERT_TRUE(classify("", big).invalid, "cut in the middle");
		big[n / 2] = cut;
		fi = classify("", "{\"choices\":[{\"text\":\"y\"}]}");
		ASSERT_TRUE(fi.content && fi.format == FMT_OPENAI_COMPLETION, "a small one after");
	}
	after = cJSON_Parse("{\"c\":\"also kept\"}");
	classify("", "{\"choices\":[{\"delta\":{\"content\":\"z\"}}]}");
	if (ASSERT_OK_PTR(after, "a tree made after frames")) {
		ASSERT_STREQ(cJSON_GetObjectItem(after, "c")->valuestring, "also kept", "intact");
		cJSON_Delete(after);
	}
	ASSERT_STREQ(cJSON_GetObjectItem(before, "b")->valuestring, "kept", "intact");
	ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(before, "a")), 3, "intact");
out:
	cJSON_Delete(before);
	free(big);
}

/* ---- the chain on captured fixtures ---- */

struct pframe {
	uint64_t ts;
	struct frame_info fi;
};

struct pipe {
	struct http_parser http;
	struct sse_parser sse;
	bool streaming;
	struct pframe fr[PIPE_FRAMES_MAX];
	size_t nfr;
	uint64_t end_ts[PIPE_ENDS_MAX];
	size_t nend;
	size_t body_gap;
};

static void pipe_on_frame(void *ctx, const struct sse_frame *f, uint64_t ts)
{
	struct pipe *p = ctx;

	if (p->nfr < PIPE_FRAMES_MAX) {
		p->fr[p->nfr].ts = ts;
		frame_classify(f, &p->fr[p->nfr].fi);
		p->nfr++;
	}
}

static void pipe_on_head(void *ctx, const struct http_head *h, uint64_t ts)
{
	struct pipe *p = ctx;
	int mode = sse_mode_for(h->content_type);

	(void)ts;
	p->streaming = h->status == 200 && mode >= 0;
	if (p->streaming) {
		/* A keep-alive connection may stream again: drop the last body's buffer. */
		sse_free(&p->sse);
		sse_init(&p->sse, (enum sse_mode)mode, pipe_on_frame, p);
	}
}

static void pipe_on_body(void *ctx, const uint8_t *buf, size_t len, uint64_t ts)
{
	struct pipe *p = ctx;

	if (p->streaming)
		sse_feed(&p->sse, buf, len, ts);
}

static void pipe_on_gap(void *ctx, size_t len)
{
	struct pipe *p = ctx;

	p->body_gap += len;
	if (p->streaming)
		sse_gap(&p->sse, len);
}

static void pipe_on_end(void *ctx, uint64_t ts)
{
	struct pipe *p = ctx;

	if (p->streaming)
		sse_finish(&p->sse, ts);
	p->streaming = false;
	if (p->nend < PIPE_ENDS_MAX)
		p->end_ts[p->nend++] = ts;
}

static const struct http_callbacks pipe_cb = {
	.on_head = pipe_on_head,
	.on_body = pipe_on_body,
	.on_body_gap = pipe_on_gap,
	.on_end = pipe_on_end,
};

static struct pipe *pipe_new(void)
{
	struct pipe *p = calloc(1, sizeof(*p));

	http_init(&p->http, HTTP_DIR_RESPONSE, &pipe_cb, p);
	return p;
}

static void pipe_free(struct pipe *p)
{
	http_free(&p->http);
	sse_free(&p->sse);
	free(p);
}

static int pipe_feed(void *ctx, const uint8_t *buf, size_t len, uint64_t ts)
{
	struct pipe *p = ctx;

	return http_feed(&p->http, buf, len, ts);
}

/* What a request record would take from the frames. */
struct summary {
	size_t frames, content, done, errors, invalid;
	enum frame_format format;
	int64_t first_content_ts, last_content_ts, done_ts, error_ts;
	int64_t prompt, completion, cached; /* a later statement supersedes an earlier one */
};

static struct summary summarize(const struct pipe *p)
{
	struct summary s = { .format = FMT_UNKNOWN,
			     .first_content_ts = -1,
			     .last_content_ts = -1,
			     .done_ts = -1,
			     .error_ts = -1,
			     .prompt = -1,
			     .completion = -1,
			     .cached = -1 };

	for (size_t i = 0; i < p->nfr; i++) {
		const struct frame_info *fi = &p->fr[i].fi;

		s.frames++;
		if (s.format == FMT_UNKNOWN)
			s.format = fi->format;
		if (fi->content) {
			if (!s.content++)
				s.first_content_ts = (int64_t)p->fr[i].ts;
			s.last_content_ts = (int64_t)p->fr[i].ts;
		}
		if (fi->done && !s.done++)
			s.done_ts = (int64_t)p->fr[i].ts;
		if (fi->error && !s.errors++)
			s.error_ts = (int64_t)p->fr[i].ts;
		s.invalid += fi->invalid;
		if (fi->prompt_tokens >= 0)
			s.prompt = fi->prompt_tokens;
		if (fi->completion_tokens >= 0)
			s.completion = fi->completion_tokens;
		if (fi->cached_tokens >= 0)
			s.cached = fi->cached_tokens;
	}
	return s;
}

static bool pipe_same(const struct pipe *ref, const struct pipe *p, const struct fixture *f,
		      enum fixture_plan plan, size_t split)
{
	if (!ASSERT_EQ(p->nfr, ref->nfr, "frames") || !ASSERT_EQ(p->nend, ref->nend, "ends"))
		return false;
	for (size_t i = 0; i < p->nfr; i++) {
		const struct frame_info *a = &p->fr[i].fi, *b = &ref->fr[i].fi;

		if (!ASSERT_EQ(p->fr[i].ts, fixture_plan_ts(f, plan, split, ref->fr[i].ts), "ts") ||
		    !ASSERT_TRUE(memcmp(a, b, sizeof(*a)) == 0, "same frame")) {
			printf("  plan %d split %zu frame %zu\n", plan, split, i);
			return false;
		}
	}
	for (size_t i = 0; i < p->nend; i++)
		if (!ASSERT_EQ(p->end_ts[i], fixture_plan_ts(f, plan, split, ref->end_ts[i]),
			       "end"))
			return false;
	return true;
}

struct stream_expect {
	const char *name;
	enum frame_format format;
	size_t frames, content, done, errors;
	int64_t first_content, last_content, done_ts, error_ts; /* write index */
	int64_t prompt, completion, cached;
	size_t ends;
	uint64_t end_ts[2];
};

static const struct stream_expect streams[] = {
	{ "uvicorn_h11", FMT_OPENAI_CHAT, 7, 4, 1, 0, 2, 5, 7, -1, -1, -1, -1, 1, { 8 } },
	{ "uvloop_vllm", FMT_OPENAI_CHAT, 8, 4, 1, 0, 1, 4, 5, -1, 12, 4, 8, 1, { 5 } },
	{ "node_express", FMT_OPENAI_CHAT, 7, 4, 1, 0, 1, 4, 6, -1, -1, -1, -1, 1, { 6 } },
	{ "go_ollama", FMT_OLLAMA, 5, 4, 1, 0, 0, 3, 4, -1, 26, 4, -1, 1, { 5 } },
	{ "aiohttp_completion",
	  FMT_OPENAI_COMPLETION,
	  5,
	  4,
	  1,
	  0,
	  1,
	  4,
	  5,
	  -1,
	  -1,
	  -1,
	  -1,
	  1,
	  { 6 } },
	{ "tgi", FMT_TGI, 4, 3, 1, 0, 1, 3, 4, -1, -1, 4, -1, 1, { 5 } },
	{ "anthropic", FMT_ANTHROPIC, 12, 3, 1, 0, 3, 8, 11, -1, 35, 15, 10, 1, { 12 } },
	{ "error_frame", FMT_OPENAI_CHAT, 4, 1, 1, 1, 2, 2, 4, 3, -1, -1, -1, 1, { 5 } },
	{ "keepalive", FMT_OPENAI_CHAT, 7, 4, 1, 0, 2, 5, 7, -1, -1, -1, -1, 2, { 8, 10 } },
	/* The Responses API: lifecycle, item and part events are frames; the deltas are the
	 * content; response.completed (or .failed) ends the stream and states usage. */
	{ "responses_text", FMT_OPENAI_RESPONSES, 10, 4, 1, 0, 5, 8, 10, -1, 14, 5, 8, 1, { 11 } },
	{ "responses_reasoning",
	  FMT_OPENAI_RESPONSES,
	  16,
	  6,
	  1,
	  0,
	  5,
	  14,
	  16,
	  -1,
	  14,
	  7,
	  8,
	  1,
	  { 17 } },
	{ "responses_tool", FMT_OPENAI_RESPONSES, 7, 2, 1, 0, 4, 5, 7, -1, 14, 3, 8, 1, { 8 } },
	{ "responses_failed", FMT_OPENAI_RESPONSES, 7, 2, 1, 1, 5, 6, 7, 7, 14, 2, 8, 1, { 8 } },
	/* Cut after two deltas: no end of the stream, no end of the body. */
	{ "responses_cut", FMT_OPENAI_RESPONSES, 6, 2, 0, 0, 5, 6, -1, -1, -1, -1, -1, 0, { 0 } },
};

static bool check_summary(const struct stream_expect *e, const struct summary *s)
{
	return ASSERT_EQ(s->format, e->format, e->name) &&
	       ASSERT_EQ(s->frames, e->frames, e->name) &&
	       ASSERT_EQ(s->content, e->content, e->name) && ASSERT_EQ(s->done, e->done, e->name) &&
	       ASSERT_EQ(s->errors, e->errors, e->name) && ASSERT_EQ(s->invalid, 0, e->name) &&
	       ASSERT_EQ(s->first_content_ts, e->first_content, e->name) &&
	       ASSERT_EQ(s->last_content_ts, e->last_content, e->name) &&
	       ASSERT_EQ(s->done_ts, e->done_ts, e->name) &&
	       ASSERT_EQ(s->error_ts, e->error_ts, e->name) &&
	       ASSERT_EQ(s->prompt, e->prompt, e->name) &&
	       ASSERT_EQ(s->completion, e->completion, e->name) &&
	       ASSERT_EQ(s->cached, e->cached, e->name);
}

TEST(test_fixture_streams)
{
	for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
		const struct stream_expect *e = &streams[i];
		struct pipe *ref = pipe_new(), *p;
		struct summary s;
		char file[64];
		struct fixture f;
		bool ok;

		snprintf(file, sizeof(file), "%s.resp", e->name);
		if (!ASSERT_OK(fixture_load(&f, file), e->name)) {
			pipe_free(ref);
			return;
		}
		ok = ASSERT_OK(fixture_replay(&f, PLAN_BYTES, 0, pipe_feed, ref), "bytes");

		p = pipe_new();
		ok = ok && ASSERT_OK(fixture_replay(&f, PLAN_WRITES, 0, pipe_feed, p), "writes") &&
		     pipe_same(ref, p, &f, PLAN_WRITES, 0);
		s = summarize(p);
		ok = ok && check_summary(e, &s) && ASSERT_EQ(p->nend, e->ends, e->name);
		for (size_t m = 0; ok && m < e->ends; m++)
			ok = ASSERT_EQ(p->end_ts[m], e->end_ts[m], e->name);
		ok = ok && ASSERT_EQ(p->sse.damaged_frames + p->sse.oversize_frames, 0, e->name);
		pipe_free(p);

		for (size_t k = 1; ok && k < f.len; k++) {
			p = pipe_new();
			ok = ASSERT_OK(fixture_replay(&f, PLAN_SPLIT, k, pipe_feed, p), "split") &&
			     pipe_same(ref, p, &f, PLAN_SPLIT, k);
			pipe_free(p);
		}
		if (!ok)
			printf("  fixture %s\n", e->name);
		pipe_free(ref);
		fixture_free(&f);
	}
}

/* Feeds every write; write w loses `gap` bytes after its first `a`. */
static int pipe_feed_gap(struct pipe *p, const struct fixture *f, size_t w, size_t a, size_t gap)
{
	int err = 0;

	for (size_t i = 0; i < f->nwrites && !err; i++) {
		size_t start = fixture_write_start(f, i), len = f->writes[i] - start;

		if (i != w) {
			err = http_feed(&p->http, f->buf + start, len, i);
			continue;
		}
		err = http_feed(&p->http, f->buf + start, a, i);
		http_gap(&p->http, gap);
		if (!err)
			err = http_feed(&p->http, f->buf + start + a + gap, len - a - gap, i);
	}
	return err;
}

TEST(test_gap_damages_one_frame)
{
	struct pipe *p = pipe_new();
	struct summary s;
	struct fixture f;

	if (!ASSERT_OK(fixture_load(&f, "uvicorn_h11.resp"), "load"))
		goto out;
	/* Write 3 carries the second content frame; lose 50 bytes in its middle. */
	ASSERT_OK(pipe_feed_gap(p, &f, 3, 40, 50), "feed");
	s = summarize(p);
	ASSERT_EQ(p->body_gap, 50, "exact skip");
	ASSERT_EQ(p->sse.damaged_frames, 1, "damaged frame counted");
	ASSERT_EQ(s.frames, 6, "the others found");
	ASSERT_EQ(s.content, 3, "content");
	ASSERT_EQ(s.last_content_ts, 5, "later content frames");
	ASSERT_EQ(s.done_ts, 7, "done");
	ASSERT_EQ(p->nend, 1, "end");
	ASSERT_EQ(p->end_ts[0], 8, "end ts");
	fixture_free(&f);
out:
	pipe_free(p);
}

TEST(test_gap_in_last_writev)
{
	struct pipe *p = pipe_new();
	struct summary s;
	struct fixture f;

	if (!ASSERT_OK(fixture_load(&f, "uvloop_vllm.resp"), "load"))
		goto out;
	/* Write 5 is finish frame, usage frame, [DONE] and terminator: lose part of usage. */
	ASSERT_OK(pipe_feed_gap(p, &f, 5, 250, 60), "feed");
	s = summarize(p);
	ASSERT_EQ(p->sse.damaged_frames, 1, "damaged");
	ASSERT_EQ(s.frames, 7, "usage frame lost");
	ASSERT_EQ(s.content, 4, "content intact");
	ASSERT_EQ(s.prompt, -1, "usage unknown");
	ASSERT_EQ(s.done_ts, 5, "[DONE] still found");
	ASSERT_EQ(p->nend, 1, "end");
	fixture_free(&f);
out:
	pipe_free(p);
}

TEST(test_gap_in_ndjson)
{
	struct pipe *p = pipe_new();
	struct summary s;
	struct fixture f;

	if (!ASSERT_OK(fixture_load(&f, "go_ollama.resp"), "load"))
		goto out;
	/* Write 2 is "78\r\n{...}\n\r\n": lose bytes of that object. */
	ASSERT_OK(pipe_feed_gap(p, &f, 2, 20, 30), "feed");
	s = summarize(p);
	ASSERT_EQ(p->sse.damaged_frames, 1, "damaged");
	ASSERT_EQ(s.frames, 4, "frames");
	ASSERT_EQ(s.content, 3, "content");
	ASSERT_EQ(s.completion, 4, "final object intact");
	fixture_free(&f);
out:
	pipe_free(p);
}

TEST(test_truncated_stream)
{
	struct fixture f;

	if (!ASSERT_OK(fixture_load(&f, "node_express.resp"), "load"))
		return;
	/* Cut anywhere and closed: frames so far are whole ones, the message never ends. */
	for (size_t k = 0; k < f.len; k++) {
		struct pipe *p = pipe_new();
		struct summary s;

		ASSERT_OK(http_feed(&p->http, f.buf, k, 0), "prefix");
		http_close(&p->http, 1);
		s = summarize(p);
		if (!ASSERT_EQ(p->nend, 0, "no end") || !ASSERT_EQ(s.invalid, 0, "no half frame")) {
			printf("  prefix %zu\n", k);
			pipe_free(p);
			break;
		}
		pipe_free(p);
	}
	fixture_free(&f);
}

/* The TTFT definitions' flags (frame.h): chunk as vllm bench serve counts one, text as AIPerf
 * and LLMPerf count answer text; output (content) is either or reasoning or a tool call. */
TEST(test_chunk_and_text)
{
	struct frame_info fi;

	fi = classify("", "{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
			  "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}");
	ASSERT_TRUE(fi.chunk, "role-only frame is a chunk");
	ASSERT_FALSE(fi.content, "with no output");
	ASSERT_FALSE(fi.text, "and no text");
	fi = classify("", "{\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}");
	ASSERT_TRUE(fi.chunk && fi.content, "reasoning: chunk and output");
	ASSERT_FALSE(fi.text, "reasoning is not answer text");
	fi = classify("", "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}");
	ASSERT_TRUE(fi.content && !fi.text, "a tool call is output, not text");
	fi = classify("", "{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],"
			  "\"usage\":{\"completion_tokens\":3}}");
	ASSERT_TRUE(fi.chunk && fi.content && fi.text, "content");
	ASSERT_EQ(fi.completion_tokens, 3, "running usage");
	fi = classify("", "{\"object\":\"text_completion\",\"choices\":[{\"text\":\"a\"}]}");
	ASSERT_TRUE(fi.chunk && fi.text, "completion text");
	fi = classify("", "{\"object\":\"chat.completion.chunk\",\"choices\":[],"
			  "\"usage\":{\"completion_tokens\":9}}");
	ASSERT_FALSE(fi.chunk, "usage-only frame with empty choices: not a chunk");
	fi = classify("", "{\"error\":{\"message\":\"x\"}}");
	ASSERT_FALSE(fi.chunk, "error");
	fi = classify("message_start", "{\"type\":\"message_start\",\"message\":{\"usage\":"
				       "{\"input_tokens\":5,\"output_tokens\":1}}}");
	ASSERT_TRUE(fi.chunk && !fi.content, "Anthropic message_start is a chunk");
	fi = classify("content_block_delta",
		      "{\"type\":\"content_block_delta\",\"delta\":{\"type\":\"thinking_delta\","
		      "\"thinking\":\"t\"}}");
	ASSERT_TRUE(fi.content && !fi.text, "Anthropic thinking");
	fi = classify("content_block_delta",
		      "{\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\","
		      "\"text\":\"t\"}}");
	ASSERT_TRUE(fi.text, "Anthropic text");
	fi = classify("", "{\"model\":\"m\",\"message\":{\"content\":\"\",\"thinking\":\"t\"},"
			  "\"done\":false}");
	ASSERT_TRUE(fi.chunk && fi.content && !fi.text, "Ollama thinking");
	fi = classify("", "{\"model\":\"m\",\"response\":\"a\",\"done\":false}");
	ASSERT_TRUE(fi.text, "Ollama generate");
	fi = classify("", "{\"token\":{\"text\":\"a\",\"special\":false},\"generated_text\":null}");
	ASSERT_TRUE(fi.chunk && fi.text, "TGI");
	fi = classify("", "[DONE]");
	ASSERT_FALSE(fi.chunk, "[DONE]");
}

int main(void)
{
	return check_run_all();
}
