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

#include <jansson.h>

#include "pipeline/frame.h"
#include "lib/jsonload.h"

/*
 * jansson allocates every node, key, string and object hash table of a parsed frame and frees
 * them one by one: about 25 mallocs and frees for a chat completion chunk, at every frame. Once
 * the process has a second thread (the metrics endpoint's, the OTLP sender's), glibc's malloc
 * takes locks, and that alone made the tracer 8 % dearer at 10,000 frames/s. A frame is therefore
 * parsed into scratch memory that is emptied when the frame is done (6 % cheaper without a
 * thread; a thread then adds 2 %). jansson's allocation functions are process-wide: outside a
 * frame's parse (reqbody.c's), and for what does not fit, they call malloc and free as before.
 * The scratch is per thread, and no tree outlives the frame_classify call that parsed it; a tree
 * held wholly in the scratch is dropped without walking it (json_decref).
 */
/* A vLLM chat completion chunk's tree takes 2 KB of it. */
#define FRAME_SCRATCH_BYTES 16384
#define FRAME_SCRATCH_ALIGN 16

struct frame_scratch {
	bool hooked;  /* jansson's allocation functions point here (set by the first frame) */
	bool active;  /* a frame is being parsed */
	bool spilled; /* part of this frame's tree went to malloc: it must be freed node by node */
	size_t used;
	_Alignas(FRAME_SCRATCH_ALIGN) unsigned char mem[FRAME_SCRATCH_BYTES];
};

static __thread struct frame_scratch frame_scratch;

static void *frame_alloc(size_t n)
{
	struct frame_scratch *s = &frame_scratch;
	size_t at = (s->used + FRAME_SCRATCH_ALIGN - 1) & ~(size_t)(FRAME_SCRATCH_ALIGN - 1);

	if (!s->active)
		return malloc(n);
	if (n > sizeof(s->mem) - at) {
		s->spilled = true;
		return malloc(n);
	}
	s->used = at + n;
	return s->mem + at;
}

static void frame_free(void *p)
{
	uintptr_t a = (uintptr_t)p, lo = (uintptr_t)frame_scratch.mem;

	/* Scratch memory is given back all at once, when the frame is done. */
	if (a >= lo && a < lo + sizeof(frame_scratch.mem))
		return;
	free(p);
}

/*
 * Frames are read as leniently as they always were (jsonload.h); a key given twice keeps its
 * last value (jansson's choice, where cJSON, which read frames before, found the first): no
 * server's JSON encoder writes a key twice (they encode maps), so such a frame is not one to
 * trust either way, and rejecting duplicates would cost a check on every frame.
 */
#define FRAME_JSON_FLAGS 0

/* The frame's JSON in the scratch, else NULL. */
static json_t *frame_parse(const char *data, size_t len)
{
	struct frame_scratch *s = &frame_scratch;
	json_t *root;

	if (!s->hooked) {
		json_set_alloc_funcs(frame_alloc, frame_free);
		s->hooked = true;
	}
	s->active = true;
	s->spilled = false;
	s->used = 0;
	root = jsonload_lenient(data, len, FRAME_JSON_FLAGS);
	s->active = false;
	return root;
}

/* A tree wholly in the scratch needs no walk: the next frame reuses the memory. */
static void frame_drop(json_t *root)
{
	if (frame_scratch.spilled)
		json_decref(root);
}

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

static const json_t *frame_get(const json_t *obj, const char *key)
{
	return json_is_object(obj) ? json_object_get(obj, key) : NULL;
}

/* Strings are C strings: a \\u0000 ends one (FRAME_JSON_FLAGS). */
static const char *frame_str(const json_t *v)
{
	return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool frame_nonempty_str(const json_t *obj, const char *key)
{
	const char *s = frame_str(frame_get(obj, key));

	return s && s[0];
}

static bool frame_nonempty_array(const json_t *obj, const char *key)
{
	const json_t *v = frame_get(obj, key);

	return json_is_array(v) && json_array_size(v) > 0;
}

static bool frame_str_is(const json_t *obj, const char *key, const char *lit)
{
	const char *s = frame_str(frame_get(obj, key));

	return s && strcmp(s, lit) == 0;
}

/* A token count member: a non-negative integer, else -1. */
static int64_t frame_count(const json_t *obj, const char *key)
{
	const json_t *v = frame_get(obj, key);
	double d;

	if (!json_is_number(v))
		return -1;
	d = json_number_value(v);
	/* The range test also rejects NaN and infinities before the cast. */
	if (!(d >= 0 && d < FRAME_COUNT_LIMIT) || d != (double)(int64_t)d)
		return -1;
	return (int64_t)d;
}

/* OpenAI usage, as vLLM, SGLang, TGI's Messages API and llama.cpp send it. */
static void frame_openai_usage(const json_t *root, struct frame_info *out)
{
	const json_t *usage = frame_get(root, "usage");

	if (!json_is_object(usage))
		return;
	out->prompt_tokens = frame_count(usage, "prompt_tokens");
	out->completion_tokens = frame_count(usage, "completion_tokens");
	out->cached_tokens =
	    frame_count(frame_get(usage, "prompt_tokens_details"), "cached_tokens");
}

static bool frame_openai_choice(const json_t *choice)
{
	const json_t *delta = frame_get(choice, "delta");

	/* The role-only first frame and the finish frame carry no output. */
	return frame_nonempty_str(delta, "content") ||
	       frame_nonempty_str(delta, "reasoning_content") ||
	       frame_nonempty_str(delta, "reasoning") || frame_nonempty_str(delta, "refusal") ||
	       frame_nonempty_array(delta, "tool_calls") ||
	       json_is_object(frame_get(delta, "function_call")) ||
	       frame_nonempty_str(choice, "text");
}

static void frame_openai(const json_t *root, struct frame_info *out)
{
	const json_t *choices = frame_get(root, "choices"), *choice;
	const char *key;
	size_t i;

	/* An object's members count as choices too, as they always have (cJSON walked an object's
	 * members as it walks an array's elements). */
	if (json_is_array(choices)) {
		json_array_foreach(choices, i, choice) out->content |= frame_openai_choice(choice);
	} else if (json_is_object(choices)) {
		json_object_foreach((json_t *)choices, key, choice) out->content |=
		    frame_openai_choice(choice);
	}
	frame_openai_usage(root, out);
}

static void frame_tgi(const json_t *root, struct frame_info *out)
{
	const json_t *token = frame_get(root, "token");
	const json_t *details = frame_get(root, "details");

	if (frame_nonempty_str(token, "text") && !json_is_true(frame_get(token, "special")))
		out->content = true;
	/* generated_text is null on every frame but the last. */
	if (json_is_string(frame_get(root, "generated_text")))
		out->done = true;
	out->completion_tokens = frame_count(details, "generated_tokens");
	out->prompt_tokens = frame_count(details, "input_length");
}

static void frame_ollama(const json_t *root, struct frame_info *out)
{
	const json_t *msg = frame_get(root, "message");

	/* /api/generate streams "response", /api/chat "message"; thinking models add
	 * "thinking" beside either. */
	if (frame_nonempty_str(root, "response") || frame_nonempty_str(root, "thinking") ||
	    frame_nonempty_str(msg, "content") || frame_nonempty_str(msg, "thinking") ||
	    frame_nonempty_array(msg, "tool_calls"))
		out->content = true;
	if (json_is_true(frame_get(root, "done")))
		out->done = true;
	out->prompt_tokens = frame_count(root, "prompt_eval_count");
	out->completion_tokens = frame_count(root, "eval_count");
}

/*
 * Anthropic counts cached prompt tokens apart from input_tokens; prompt_tokens here is the
 * whole prompt (as OpenAI's is), cached_tokens the part read from the cache.
 */
static void frame_anthropic_usage(const json_t *usage, struct frame_info *out)
{
	int64_t input = frame_count(usage, "input_tokens");
	int64_t read = frame_count(usage, "cache_read_input_tokens");
	int64_t created = frame_count(usage, "cache_creation_input_tokens");

	if (!json_is_object(usage))
		return;
	/* Each count is below FRAME_COUNT_LIMIT (2^53): the sum cannot overflow. */
	if (input >= 0)
		out->prompt_tokens = input + (read > 0 ? read : 0) + (created > 0 ? created : 0);
	out->completion_tokens = frame_count(usage, "output_tokens");
	out->cached_tokens = read;
}

static void frame_anthropic(const json_t *root, const char *type, size_t tlen,
			    struct frame_info *out)
{
	if (frame_str_eq(type, tlen, "content_block_delta")) {
		const json_t *delta = frame_get(root, "delta");

		/* text_delta, input_json_delta (tool input) and thinking_delta; a
		 * signature_delta carries no output. */
		if (frame_nonempty_str(delta, "text") ||
		    frame_nonempty_str(delta, "partial_json") ||
		    frame_nonempty_str(delta, "thinking"))
			out->content = true;
	} else if (frame_str_eq(type, tlen, "message_start")) {
		frame_anthropic_usage(frame_get(frame_get(root, "message"), "usage"), out);
	} else if (frame_str_eq(type, tlen, "message_delta")) {
		frame_anthropic_usage(frame_get(root, "usage"), out);
	} else if (frame_str_eq(type, tlen, "message_stop")) {
		out->done = true;
	}
}

/* The frame's dialect, from the members it has; for Anthropic also its event type. */
static enum frame_format frame_detect(const json_t *root, const struct sse_frame *f,
				      const char **atype, size_t *atype_len)
{
	const char *type = frame_str(frame_get(root, "type"));
	const char *object = frame_str(frame_get(root, "object"));
	const json_t *choices = frame_get(root, "choices");

	if (type && frame_is_anthropic_type(type, strlen(type))) {
		*atype = type;
		*atype_len = strlen(type);
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
	if (object) {
		if (strncmp(object, "chat.completion", strlen("chat.completion")) == 0)
			return FMT_OPENAI_CHAT;
		if (strcmp(object, "text_completion") == 0)
			return FMT_OPENAI_COMPLETION;
	}
	if (json_is_array(choices)) {
		if (frame_get(json_array_get(choices, 0), "delta"))
			return FMT_OPENAI_CHAT;
		if (frame_get(json_array_get(choices, 0), "text"))
			return FMT_OPENAI_COMPLETION;
		return FMT_UNKNOWN;
	}
	if (json_is_object(frame_get(root, "token")) || frame_get(root, "generated_text"))
		return FMT_TGI;
	if (json_is_boolean(frame_get(root, "done")) &&
	    (frame_get(root, "model") || frame_get(root, "created_at")))
		return FMT_OLLAMA;
	return FMT_UNKNOWN;
}

void frame_classify(const struct sse_frame *f, struct frame_info *out)
{
	const char *data = f->data, *atype = NULL;
	size_t len = f->data_len, atype_len = 0;
	enum frame_format fmt;
	const json_t *err;
	json_t *root;

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

	root = frame_parse(data, len);
	if (!root) {
		out->invalid = true;
		return;
	}
	if (!json_is_object(root))
		goto out;

	/* OpenAI and vLLM: {"error":{...}} or {"object":"error"}; TGI and Ollama:
	 * {"error":"..."}; Anthropic: {"type":"error","error":{...}}. */
	err = frame_get(root, "error");
	if ((err && !json_is_null(err)) || frame_str_is(root, "object", "error"))
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
out:
	frame_drop(root);
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
