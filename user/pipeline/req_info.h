/* SPDX-License-Identifier: MIT */
/*
 * What a request body asked for, as a value a request carries to the sinks (request.h): the
 * model, whether it streams, its output-token limit, and disaggregated serving's join keys.
 * reqbody.c reads bodies into it.
 */
#ifndef TS_REQ_INFO_H
#define TS_REQ_INFO_H

#include <stdbool.h>
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

#endif
