/* SPDX-License-Identifier: MIT */
/*
 * What one streamed frame means: its wire format, whether it carries generated output (a
 * "content frame" as docs/output.md's Definitions define it), whether it ends the stream or reports
 * an error, and the token counts it states. Parses the frame's JSON in memory and keeps no text.
 * Token counts are those the frame states: a later frame of the same stream supersedes an earlier
 * one (Anthropic's message_start says output_tokens 1, its message_delta the total).
 */
#ifndef TS_FRAME_H
#define TS_FRAME_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/frame_format.h"
#include "pipeline/req_info.h"
#include "pipeline/sse.h"

struct frame_info {
	enum frame_format format;
	bool done; /* data: [DONE], Ollama "done":true, Anthropic message_stop, TGI's last frame */
	bool content; /* carries generated output: text, reasoning or a tool call */
	/* The TTFT definitions of other tools (docs/output.md "TTFT definitions"): a message as
	 * `vllm bench serve` counts one (OpenAI: a non-empty "choices"; other dialects: any data
	 * message but an error), and non-empty answer text (no reasoning, no tool call) as AIPerf
	 * and LLMPerf count it. */
	bool chunk, text;
	bool error; /* an "error" member / event: error; a Responses stream failed or incomplete */
	bool invalid; /* not JSON and not [DONE] */
	/* -1 unknown; from usage / Ollama prompt_eval_count, eval_count /
	 * TGI details.generated_tokens / Anthropic usage / Responses usage */
	int64_t prompt_tokens, completion_tokens, cached_tokens;
	/* Of completion_tokens, the reasoning ones (OpenAI's *_tokens_details.reasoning_tokens);
	 * -1 unknown. */
	int64_t reasoning_tokens;
	/* With error: the error's code or type, or why a response is incomplete: letters, digits
	 * and "_.:-" only, cut to fit; "" when the frame names none. */
	char reason[FRAME_REASON_MAX];
	/* The model a Responses stream names in its first events (response.created,
	 * response.in_progress), as it came (the caller cleans it); "" otherwise. */
	char model[REQBODY_MODEL_MAX];
};

void frame_classify(const struct sse_frame *f, struct frame_info *out);

#endif
