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
/* Engine and request ids (vLLM's are UUIDs and "cmpl-..." forms); longer are cut. */
#define REQBODY_ID_MAX 128
/* Host names and addresses; longer are cut. */
#define REQBODY_HOST_MAX 96

/*
 * Disaggregated serving's join keys: what lets a prefill worker's request and the decode
 * worker's request of one user request be put together. Ids and hosts only, cleaned (utf8.c);
 * the rest of these objects (vLLM's remote_block_ids) is not read.
 */
struct req_disagg {
	/* vLLM's kv_transfer_params (its KV connectors: NixlConnector and others) */
	bool kv;				 /* the body had a kv_transfer_params object */
	int do_remote_prefill, do_remote_decode; /* 1, 0, or -1 absent (or null) */
	char remote_engine_id[REQBODY_ID_MAX];	 /* "" absent */
	char remote_request_id[REQBODY_ID_MAX];
	char remote_host[REQBODY_HOST_MAX];
	int32_t remote_port; /* -1 absent */
	/* SGLang's PD disaggregation: bootstrap_room (the same in both requests), host, port */
	bool room_set;
	int64_t bootstrap_room;
	char bootstrap_host[REQBODY_HOST_MAX];
	int32_t bootstrap_port; /* -1 absent */
};

struct req_info {
	/* "" if unknown; printable UTF-8 (utf8_clean), cut at a character if longer */
	char model[REQBODY_MODEL_MAX];
	int stream;	    /* 1, 0, or -1 unknown (absent: the default is the server's) */
	int64_t max_tokens; /* -1 unknown or unlimited */
	bool include_usage; /* stream_options.include_usage */
	/* A top-level key that holds a prompt: messages (chat, Anthropic, Ollama's chat), prompt
	 * (completions, Ollama's generate), input (the Responses API, embeddings) or inputs (TGI)
	 */
	bool prompt;
	struct req_disagg disagg;
};

/* The fields unknown, as a request starts (reqbody_parse begins so too). */
void reqbody_info_init(struct req_info *out);
/* Whether any join key was in the body. */
bool reqbody_has_disagg(const struct req_disagg *d);

/*
 * max_tokens is the first found of max_completion_tokens, max_output_tokens (the Responses
 * API), max_tokens (OpenAI, Anthropic), options.num_predict or num_predict (Ollama),
 * parameters.max_new_tokens (TGI). The join keys are kv_transfer_params.{do_remote_prefill,
 * do_remote_decode, remote_engine_id, remote_request_id, remote_host, remote_port} (vLLM) and
 * the top-level bootstrap_room, bootstrap_host, bootstrap_port (SGLang): a port is an integer
 * 0..65535, a room an integer 0..2^63 - 1 read exactly, anything else leaves them unknown.
 */
void reqbody_parse(const uint8_t *buf, size_t captured, size_t total, struct req_info *out);

#endif
