// SPDX-License-Identifier: MIT
/*
 * Frame classification; the contract is in frame.h, the formats as captured from real servers
 * in tests/fixtures/ (README.md there).
 *
 * The format is told by the members a frame has, not by the request path, so a proxy or a
 * home-grown server that speaks a known dialect is recognised too. Strings are only ever
 * tested for being non-empty: the generated text is never copied.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"
#include "pipeline/frame.h"

/*
 * A frame's tree is built in scratch memory that is emptied when the frame is done (lib/json.h):
 * no malloc or free per node, which once made the tracer 8 % dearer at 10,000 frames/s when a
 * second thread (the metrics endpoint's, the OTLP sender's) made glibc's malloc take locks. The
 * scratch is per thread, and no tree outlives the frame_classify call that parsed it.
 */
/* A vLLM chat completion chunk's tree takes about 1 KB of it. */
#define FRAME_SCRATCH_BYTES 16384

static __thread struct {
	struct jv_arena arena;
	_Alignas(16) unsigned char mem[FRAME_SCRATCH_BYTES];
} frame_scratch;

#define FRAME_DONE_MARK "[DONE]"
/* 2^53: past it a JSON number is no longer an exact integer in a double, and no token count is
 * that large; a sum of a few counts below it cannot overflow int64_t. */
#define FRAME_COUNT_LIMIT 0x1p53

/* Anthropic Messages streaming event types (both the `event:` line and the JSON "type"). */
static const char *const frame_anthropic_types[] = {
	"message_start",       "message_delta",	     "message_stop", "content_block_start",
	"content_block_delta", "content_block_stop", "ping",
};

static bool frame_str_eq(const char *s, size_t len, const char *lit)
{
	return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

static bool frame_is_anthropic_type(const char *s, size_t len)
{
	for (size_t i = 0; i < sizeof(frame_anthropic_types) / sizeof(frame_anthropic_types[0]);
	     i++)
		if (frame_str_eq(s, len, frame_anthropic_types[i]))
			return true;
	return false;
}

static bool frame_nonempty_str(const struct jv *obj, const char *key)
{
	const struct jv *v = jv_get(obj, key);

	return jv_is_string(v) && v->str[0];
}

static bool frame_nonempty_array(const struct jv *obj, const char *key)
{
	const struct jv *v = jv_get(obj, key);

	return jv_is_array(v) && v->child;
}

static bool frame_str_is(const struct jv *obj, const char *key, const char *lit)
{
	const struct jv *v = jv_get(obj, key);

	return jv_is_string(v) && strcmp(v->str, lit) == 0;
}

/* A token count member: a non-negative integer, else -1. */
static int64_t frame_count(const struct jv *obj, const char *key)
{
	const struct jv *v = jv_get(obj, key);
	double d;

	if (!jv_is_number(v))
		return -1;
	d = v->num;
	/* The range test also rejects NaN and infinities before the cast. */
	if (!(d >= 0 && d < FRAME_COUNT_LIMIT) || d != (double)(int64_t)d)
		return -1;
	return (int64_t)d;
}

/*
 * OpenAI's usage object: in and out name its counts (chat completions: "prompt" and
 * "completion", as vLLM, SGLang, TGI's Messages API and llama.cpp send it; the Responses API:
 * "input" and "output"), each with its details (cached and reasoning tokens).
 */
static void frame_usage_of(const struct jv *usage, const char *in, const char *out_name,
			   struct frame_info *out)
{
	char key[32];

	if (!jv_is_object(usage))
		return;
	snprintf(key, sizeof(key), "%s_tokens", in);
	out->prompt_tokens = frame_count(usage, key);
	snprintf(key, sizeof(key), "%s_tokens_details", in);
	out->cached_tokens = frame_count(jv_get(usage, key), "cached_tokens");
	snprintf(key, sizeof(key), "%s_tokens", out_name);
	out->completion_tokens = frame_count(usage, key);
	snprintf(key, sizeof(key), "%s_tokens_details", out_name);
	out->reasoning_tokens = frame_count(jv_get(usage, key), "reasoning_tokens");
}

static void frame_openai_usage(const struct jv *root, struct frame_info *out)
{
	frame_usage_of(jv_get(root, "usage"), "prompt", "completion", out);
}

/* A reason's characters: a code's, never a sentence's. */
static bool frame_reason_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == ':' || c == '-';
}

/*
 * The reason of an error: prefix ("failed", "incomplete"; "" none), then ":" and the code v
 * names (a string, or an integer such as 500), each character outside frame_reason_char made
 * '_', cut to fit. The first reason a frame names stays.
 */
static void frame_reason(struct frame_info *out, const char *prefix, const struct jv *v)
{
	char num[24] = "";
	const char *s = NULL;
	size_t o = 0;

	if (out->reason[0])
		return;
	if (jv_is_string(v) && v->str[0])
		s = v->str;
	else if (jv_is_number(v) && v->num >= -1e15 && v->num <= 1e15 &&
		 v->num == (double)(int64_t)v->num) {
		snprintf(num, sizeof(num), "%lld", (long long)v->num);
		s = num;
	}
	for (; *prefix && o + 1 < sizeof(out->reason); prefix++)
		out->reason[o++] = *prefix;
	if (s && o && o + 1 < sizeof(out->reason))
		out->reason[o++] = ':';
	for (; s && *s && o + 1 < sizeof(out->reason); s++)
		out->reason[o++] = frame_reason_char(*s) ? *s : '_';
	out->reason[o] = 0;
}

/* The first of the members keys of obj that names a reason. */
static const struct jv *frame_first(const struct jv *obj, const char *const *keys, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct jv *v = jv_get(obj, keys[i]);

		if ((jv_is_string(v) && v->str[0]) || jv_is_number(v))
			return v;
	}
	return NULL;
}

/*
 * An error frame's reason, from the dialect's members: OpenAI's {"error":{"code","type"}},
 * vLLM's {"object":"error","type","code"}, Anthropic's {"error":{"type"}}, TGI's "error_type",
 * the Responses API's {"type":"error","code"}.
 */
static void frame_error_reason(const struct jv *root, struct frame_info *out)
{
	/* A string code ("rate_limit_exceeded") says more than a type ("server_error"), a type
	 * more than a number; vLLM's type is an exception's name and its code the HTTP status. */
	static const char *const code_first[] = { "code", "type" }, *const type_first[] = {
		"type", "code"
	};
	const struct jv *err = jv_get(root, "error");

	if (jv_is_object(err))
		frame_reason(out, "",
			     jv_is_string(jv_get(err, "code")) ? jv_get(err, "code")
							       : frame_first(err, type_first, 2));
	else if (jv_is_string(err))
		frame_reason(out, "", jv_get(root, "error_type"));
	else if (frame_str_is(root, "object", "error"))
		frame_reason(out, "", frame_first(root, type_first, 2));
	else
		frame_reason(out, "", frame_first(root, code_first, 1));
}

static void frame_openai(const struct jv *root, struct frame_info *out)
{
	const struct jv *choice;

	/* vllm bench serve counts the first message whose "choices" is non-empty, the role-only
	 * first frame included; a usage-only last frame ("choices": []) is not one. */
	out->chunk = frame_nonempty_array(root, "choices");
	jv_foreach(choice, jv_get(root, "choices"))
	{
		const struct jv *delta = jv_get(choice, "delta");
		bool text =
		    frame_nonempty_str(delta, "content") || frame_nonempty_str(choice, "text");

		/* The role-only first frame and the finish frame carry no output. */
		if (text || frame_nonempty_str(delta, "reasoning_content") ||
		    frame_nonempty_str(delta, "reasoning") ||
		    frame_nonempty_str(delta, "refusal") ||
		    frame_nonempty_array(delta, "tool_calls") ||
		    jv_is_object(jv_get(delta, "function_call")))
			out->content = true;
		if (text)
			out->text = true;
	}
	frame_openai_usage(root, out);
}

static void frame_tgi(const struct jv *root, struct frame_info *out)
{
	const struct jv *token = jv_get(root, "token");
	const struct jv *details = jv_get(root, "details");

	if (frame_nonempty_str(token, "text") && !jv_is_true(jv_get(token, "special")))
		out->content = out->text = true;
	/* generated_text is null on every frame but the last. */
	if (jv_is_string(jv_get(root, "generated_text")))
		out->done = true;
	out->completion_tokens = frame_count(details, "generated_tokens");
	out->prompt_tokens = frame_count(details, "input_length");
}

static void frame_ollama(const struct jv *root, struct frame_info *out)
{
	const struct jv *msg = jv_get(root, "message");

	/* /api/generate streams "response", /api/chat "message"; thinking models add
	 * "thinking" beside either. */
	out->text = frame_nonempty_str(root, "response") || frame_nonempty_str(msg, "content");
	if (out->text || frame_nonempty_str(root, "thinking") ||
	    frame_nonempty_str(msg, "thinking") || frame_nonempty_array(msg, "tool_calls"))
		out->content = true;
	if (jv_is_true(jv_get(root, "done")))
		out->done = true;
	out->prompt_tokens = frame_count(root, "prompt_eval_count");
	out->completion_tokens = frame_count(root, "eval_count");
}

/*
 * Anthropic counts cached prompt tokens apart from input_tokens; prompt_tokens here is the
 * whole prompt (as OpenAI's is), cached_tokens the part read from the cache.
 */
static void frame_anthropic_usage(const struct jv *usage, struct frame_info *out)
{
	int64_t input = frame_count(usage, "input_tokens");
	int64_t read = frame_count(usage, "cache_read_input_tokens");
	int64_t created = frame_count(usage, "cache_creation_input_tokens");

	if (!jv_is_object(usage))
		return;
	/* Each count is below FRAME_COUNT_LIMIT (2^53): the sum cannot overflow. */
	if (input >= 0)
		out->prompt_tokens = input + (read > 0 ? read : 0) + (created > 0 ? created : 0);
	out->completion_tokens = frame_count(usage, "output_tokens");
	out->cached_tokens = read;
}

static void frame_anthropic(const struct jv *root, const char *type, size_t tlen,
			    struct frame_info *out)
{
	if (frame_str_eq(type, tlen, "content_block_delta")) {
		const struct jv *delta = jv_get(root, "delta");

		/* text_delta, input_json_delta (tool input) and thinking_delta; a
		 * signature_delta carries no output. */
		out->text = frame_nonempty_str(delta, "text");
		if (out->text || frame_nonempty_str(delta, "partial_json") ||
		    frame_nonempty_str(delta, "thinking"))
			out->content = true;
	} else if (frame_str_eq(type, tlen, "message_start")) {
		frame_anthropic_usage(jv_get(jv_get(root, "message"), "usage"), out);
	} else if (frame_str_eq(type, tlen, "message_delta")) {
		frame_anthropic_usage(jv_get(root, "usage"), out);
	} else if (frame_str_eq(type, tlen, "message_stop")) {
		out->done = true;
	}
}

static void frame_responses_usage(const struct jv *usage, struct frame_info *out)
{
	frame_usage_of(usage, "input", "output", out);
}

/*
 * The Responses API's stream: typed events (response.created, response.output_text.delta, ...,
 * response.completed). Lifecycle events carry no output; every other one is about output (an
 * item, a content part, a delta), so it is a chunk, and a delta that is not empty is output: the
 * answer's text (output_text), or output before or beside it (reasoning and its summary, a
 * refusal, a function call's or a tool's arguments, audio). A delta of a type not named here
 * counts as output too: new kinds of output come as new delta events. The stream ends with
 * response.completed, response.failed or response.incomplete (there is no [DONE]); the last two
 * and an error event are errors, with their reason.
 */
static void frame_responses(const struct jv *root, const char *type, struct frame_info *out)
{
	static const char *const code[] = { "code", "type" };
	const struct jv *resp = jv_get(root, "response");
	const struct jv *delta = jv_get(root, "delta");
	size_t n = strlen(type);

	if (!strcmp(type, "response.created") || !strcmp(type, "response.in_progress") ||
	    !strcmp(type, "response.queued")) {
		const struct jv *model = jv_get(resp, "model");

		if (jv_is_string(model))
			snprintf(out->model, sizeof(out->model), "%s", model->str);
		return;
	}
	if (!strcmp(type, "response.completed") || !strcmp(type, "response.failed") ||
	    !strcmp(type, "response.incomplete")) {
		out->done = true;
		frame_responses_usage(jv_get(resp, "usage"), out);
		if (!strcmp(type, "response.failed")) {
			out->error = true;
			frame_reason(out, "failed", frame_first(jv_get(resp, "error"), code, 1));
		} else if (!strcmp(type, "response.incomplete")) {
			out->error = true;
			frame_reason(out, "incomplete",
				     jv_get(jv_get(resp, "incomplete_details"), "reason"));
		}
		return;
	}
	if (!strcmp(type, "error")) {
		out->error = true;
		frame_reason(out, "", frame_first(root, code, 2));
		return;
	}
	out->chunk = true;
	/* vLLM once sent response.reasoning.delta with an object ({"content": "..."}). */
	if (n > 6 && !strcmp(type + n - 6, ".delta") &&
	    ((jv_is_string(delta) && delta->str[0]) || (jv_is_object(delta) && delta->child))) {
		out->content = true;
		out->text = !strcmp(type, "response.output_text.delta");
	}
}

/* The frame's dialect, from the members it has; for Anthropic and the Responses API also its
 * event type. */
static enum frame_format frame_detect(const struct jv *root, const struct sse_frame *f,
				      const char **atype, size_t *atype_len)
{
	const struct jv *type = jv_get(root, "type");
	const struct jv *object = jv_get(root, "object");
	const struct jv *choices = jv_get(root, "choices");

	if (jv_is_string(type) && frame_is_anthropic_type(type->str, strlen(type->str))) {
		*atype = type->str;
		*atype_len = strlen(type->str);
		return FMT_ANTHROPIC;
	}
	if (jv_is_string(type) && !strncmp(type->str, "response.", strlen("response."))) {
		*atype = type->str;
		*atype_len = strlen(type->str);
		return FMT_OPENAI_RESPONSES;
	}
	/* A {"type":"error"} is Anthropic's when it holds an "error" object, the Responses API's
	 * (a "code" and a "message" beside the type) otherwise. */
	if (jv_is_string(type) && !strcmp(type->str, "error") &&
	    !jv_is_object(jv_get(root, "error")) &&
	    (jv_get(root, "code") || jv_get(root, "sequence_number"))) {
		*atype = type->str;
		*atype_len = strlen(type->str);
		return FMT_OPENAI_RESPONSES;
	}
	if (f->event_len && (frame_is_anthropic_type(f->event, f->event_len) ||
			     (frame_str_eq(f->event, f->event_len, "error") &&
			      frame_str_is(root, "type", "error")))) {
		*atype = f->event;
		*atype_len = f->event_len;
		return FMT_ANTHROPIC;
	}
	if (f->event_len > strlen("response.") &&
	    !strncmp(f->event, "response.", strlen("response."))) {
		*atype = f->event;
		*atype_len = f->event_len;
		return FMT_OPENAI_RESPONSES;
	}
	/* A Responses API answer that was not streamed. */
	if (frame_str_is(root, "object", "response"))
		return FMT_OPENAI_RESPONSES;
	if (jv_is_string(object)) {
		if (strncmp(object->str, "chat.completion", strlen("chat.completion")) == 0)
			return FMT_OPENAI_CHAT;
		if (strcmp(object->str, "text_completion") == 0)
			return FMT_OPENAI_COMPLETION;
	}
	if (jv_is_array(choices)) {
		if (jv_get(choices->child, "delta"))
			return FMT_OPENAI_CHAT;
		if (jv_get(choices->child, "text"))
			return FMT_OPENAI_COMPLETION;
		return FMT_UNKNOWN;
	}
	if (jv_is_object(jv_get(root, "token")) || jv_get(root, "generated_text"))
		return FMT_TGI;
	if (jv_is_bool(jv_get(root, "done")) &&
	    (jv_get(root, "model") || jv_get(root, "created_at")))
		return FMT_OLLAMA;
	return FMT_UNKNOWN;
}

void frame_classify(const struct sse_frame *f, struct frame_info *out)
{
	const char *data = f->data, *atype = NULL;
	size_t len = f->data_len, atype_len = 0;
	enum frame_format fmt;
	const struct jv *err;
	const struct jv *root;

	memset(out, 0, sizeof(*out));
	out->format = FMT_UNKNOWN;
	out->prompt_tokens = out->completion_tokens = out->cached_tokens = -1;
	out->reasoning_tokens = -1;

	if (f->event_len && frame_str_eq(f->event, f->event_len, "error"))
		out->error = true;
	/* Even a frame we cannot parse is known to be Anthropic's, or the Responses API's, by its
	 * event line. */
	if (f->event_len && frame_is_anthropic_type(f->event, f->event_len))
		out->format = FMT_ANTHROPIC;
	else if (f->event_len > strlen("response.") &&
		 !strncmp(f->event, "response.", strlen("response.")))
		out->format = FMT_OPENAI_RESPONSES;

	while (len && (*data == ' ' || *data == '\t' || *data == '\r' || *data == '\n')) {
		data++;
		len--;
	}
	while (len && (data[len - 1] == ' ' || data[len - 1] == '\t' || data[len - 1] == '\r' ||
		       data[len - 1] == '\n'))
		len--;
	if (frame_str_eq(data, len, FRAME_DONE_MARK)) {
		out->done = true;
		return;
	}

	if (!frame_scratch.arena.mem)
		jv_arena_init(&frame_scratch.arena, frame_scratch.mem, sizeof(frame_scratch.mem));
	root = jv_parse(&frame_scratch.arena, data, len);
	if (!root) {
		jv_arena_reset(&frame_scratch.arena);
		out->invalid = true;
		return;
	}
	if (!jv_is_object(root))
		goto out;

	/* OpenAI and vLLM: {"error":{...}} or {"object":"error"}; TGI and Ollama:
	 * {"error":"..."}; Anthropic: {"type":"error","error":{...}}. */
	err = jv_get(root, "error");
	if ((err && !jv_is_null(err)) || frame_str_is(root, "object", "error"))
		out->error = true;

	fmt = frame_detect(root, f, &atype, &atype_len);
	if (out->error)
		frame_error_reason(root, out);
	switch (fmt) {
	case FMT_ANTHROPIC:
		frame_anthropic(root, atype, atype_len, out);
		break;
	case FMT_OPENAI_CHAT:
	case FMT_OPENAI_COMPLETION:
	case FMT_UNKNOWN:
		/* Unknown includes a usage-only frame without "object" ("choices": []), which
		 * still states usage. */
		frame_openai(root, out);
		break;
	case FMT_TGI:
		frame_tgi(root, out);
		break;
	case FMT_OLLAMA:
		frame_ollama(root, out);
		break;
	case FMT_OPENAI_RESPONSES:
		if (atype)
			frame_responses(root, atype, out);
		else /* not streamed: the response object itself */
			frame_responses_usage(jv_get(root, "usage"), out);
		break;
	case FMT_GRPC:
		break; /* never detected from JSON */
	}
	out->format = fmt;
	/* Outside OpenAI's dialect every data message is one, as a client reading the stream
	 * would take it: Anthropic's message_start, Ollama's and TGI's first line. */
	if (fmt != FMT_OPENAI_CHAT && fmt != FMT_OPENAI_COMPLETION && fmt != FMT_UNKNOWN &&
	    fmt != FMT_OPENAI_RESPONSES && !out->error)
		out->chunk = true;
out:
	jv_arena_reset(&frame_scratch.arena);
}
