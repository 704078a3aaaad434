/* SPDX-License-Identifier: MIT */
/*
 * What one streamed frame means: its wire format, whether it carries generated output (a
 * "content frame" as the README's Definitions define it), whether it ends the stream or reports an
 * error, and the token counts it states. Parses the frame's JSON in memory and keeps no text. Token
 * counts are those the frame states: a later frame of the same stream supersedes an earlier one
 * (Anthropic's message_start says output_tokens 1, its message_delta the total).
 */
#ifndef TS_FRAME_H
#define TS_FRAME_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/sse.h"

enum frame_format {
	FMT_UNKNOWN,
	FMT_OPENAI_CHAT,
	FMT_OPENAI_COMPLETION,
	FMT_TGI,
	FMT_OLLAMA,
	FMT_ANTHROPIC,
	FMT_GRPC, /* gRPC length-prefixed messages (set by the connection, never classified) */
};

struct frame_info {
	enum frame_format format;
	bool done; /* data: [DONE], Ollama "done":true, Anthropic message_stop, TGI's last frame */
	bool content; /* carries generated output: text, reasoning or a tool call */
	/* The TTFT definitions of other tools (README "TTFT definitions"): a message as `vllm bench
	 * serve` counts one (OpenAI: a non-empty "choices"; other dialects: any data message but
	 * an error), and non-empty answer text (no reasoning, no tool call) as AIPerf and LLMPerf
	 * count it. */
	bool chunk, text;
	bool error;   /* an "error" member / event: error */
	bool invalid; /* not JSON and not [DONE] */
	/* -1 unknown; from usage / Ollama prompt_eval_count, eval_count /
	 * TGI details.generated_tokens / Anthropic usage */
	int64_t prompt_tokens, completion_tokens, cached_tokens;
};

void frame_classify(const struct sse_frame *f, struct frame_info *out);
/* "openai-chat", "openai-completion", "tgi", "ollama", "anthropic", "grpc", "unknown" */
const char *frame_format_name(enum frame_format f);

#endif
