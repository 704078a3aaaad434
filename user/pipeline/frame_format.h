/* SPDX-License-Identifier: MIT */
/*
 * A stream's wire format and an error's reason, as values a request carries to the sinks
 * (request.h); frame.c classifies frames into them.
 */
#ifndef TS_FRAME_FORMAT_H
#define TS_FRAME_FORMAT_H

enum frame_format {
	FMT_UNKNOWN,
	FMT_OPENAI_CHAT,
	FMT_OPENAI_COMPLETION,
	FMT_TGI,
	FMT_OLLAMA,
	FMT_ANTHROPIC,
	FMT_GRPC, /* gRPC length-prefixed messages (set by the connection, never classified) */
	FMT_OPENAI_RESPONSES, /* the Responses API's typed events (POST /v1/responses) */
};

/* An error's reason as a frame names it: a code such as "server_error" or
 * "incomplete:max_output_tokens", never a message (which may quote the prompt). */
#define FRAME_REASON_MAX 48

/* "openai-chat", "openai-completion", "openai-responses", "tgi", "ollama", "anthropic", "grpc",
 * "unknown" */
const char *frame_format_name(enum frame_format f);

#endif
