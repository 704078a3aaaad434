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

#include "pipeline/req_info.h"

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
