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

/* OpenAI usage, as vLLM, SGLang, TGI's Messages API and llama.cpp send it. */
static void frame_openai_usage(const struct jv *root, struct frame_info *out)
{
	const struct jv *usage = jv_get(root, "usage");

	if (!jv_is_object(usage))
		return;
	out->prompt_tokens = frame_count(usage, "prompt_tokens");
	out->completion_tokens = frame_count(usage, "completion_tokens");
	out->cached_tokens = frame_count(jv_get(usage, "prompt_tokens_details"), "cached_tokens");
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

/* The frame's dialect, from the members it has; for Anthropic also its event type. */
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
	/* Anthropic's {"type":"error"} is told apart from others' by its event line. */
	if (f->event_len && (frame_is_anthropic_type(f->event, f->event_len) ||
			     (frame_str_eq(f->event, f->event_len, "error") &&
			      frame_str_is(root, "type", "error")))) {
		*atype = f->event;
		*atype_len = f->event_len;
		return FMT_ANTHROPIC;
	}
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

	if (f->event_len && frame_str_eq(f->event, f->event_len, "error"))
		out->error = true;
	/* Even a frame we cannot parse is known to be Anthropic's by its event line. */
	if (f->event_len && frame_is_anthropic_type(f->event, f->event_len))
		out->format = FMT_ANTHROPIC;

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
	case FMT_GRPC:
		break; /* never detected from JSON */
	}
	out->format = fmt;
	/* Outside OpenAI's dialect every data message is one, as a client reading the stream
	 * would take it: Anthropic's message_start, Ollama's and TGI's first line. */
	if (fmt != FMT_OPENAI_CHAT && fmt != FMT_OPENAI_COMPLETION && fmt != FMT_UNKNOWN &&
	    !out->error)
		out->chunk = true;
out:
	jv_arena_reset(&frame_scratch.arena);
}

const char *frame_format_name(enum frame_format f)
{
	switch (f) {
	case FMT_OPENAI_CHAT:
		return "openai-chat";
	case FMT_OPENAI_COMPLETION:
		return "openai-completion";
	case FMT_TGI:
		return "tgi";
	case FMT_OLLAMA:
		return "ollama";
	case FMT_ANTHROPIC:
		return "anthropic";
	case FMT_GRPC:
		return "grpc";
	case FMT_UNKNOWN:
		break;
	}
	return "unknown";
}
