// SPDX-License-Identifier: MIT
#include "pipeline/frame_format.h"

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
	case FMT_OPENAI_RESPONSES:
		return "openai-responses";
	case FMT_UNKNOWN:
		break;
	}
	return "unknown";
}
