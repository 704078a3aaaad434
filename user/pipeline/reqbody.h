/* SPDX-License-Identifier: MIT */
/*
 * What a request body asks for: the model, whether it streams, its output-token limit and
 * whether it asked for usage in the stream. Reads the JSON in memory and keeps no prompt.
 *
 * A complete body is parsed whole (lib/json.h). A body cut by the capture limit (captured <
 * total), or one that is not JSON, is scanned instead: a small tokenizer that walks strings,
 * escapes and nesting exactly, so only real top-level keys count (a prompt quoting "model": "x"
 * does not), and a value cut off at the end of the capture is left unknown.
 */
#ifndef TS_REQBODY_H
#define TS_REQBODY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REQBODY_MODEL_MAX 128

struct req_info {
	/* "" if unknown; printable UTF-8 (utf8_clean), cut at a character if longer */
	char model[REQBODY_MODEL_MAX];
	int stream;	    /* 1, 0, or -1 unknown (absent: the default is the server's) */
	int64_t max_tokens; /* -1 unknown or unlimited */
	bool include_usage; /* stream_options.include_usage */
};

/*
 * max_tokens is the first found of max_completion_tokens, max_output_tokens (the Responses
 * API), max_tokens (OpenAI, Anthropic), options.num_predict or num_predict (Ollama),
 * parameters.max_new_tokens (TGI).
 */
void reqbody_parse(const uint8_t *buf, size_t captured, size_t total, struct req_info *out);

#endif
