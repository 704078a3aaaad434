// SPDX-License-Identifier: MIT
#include "pipeline/step.h"

static const char *const kind_names[STEP_KIND_MAX] = {
	[STEP_PREFILL] = "prefill",
	[STEP_DECODE] = "decode",
	[STEP_MIXED] = "mixed",
	[STEP_OTHER] = "other",
};

const char *gpu_kind_name(enum step_kind k)
{
	return k < STEP_KIND_MAX ? kind_names[k] : "?";
}

const char *gpu_mode_name(enum step_mode m)
{
	static const char *const names[MODE_MAX] = {
		[MODE_NONE] = "none",
		[MODE_GRAPH] = "graph",
		[MODE_PIECEWISE] = "piecewise",
		[MODE_EAGER] = "eager",
	};

	return m < MODE_MAX ? names[m] : "?";
}

const char *gpu_kind_by(const struct gpu_step *s)
{
	return s->by_tokens ? "tokens" : "launches";
}

enum gpu_times gpu_step_times_of(const struct gpu_step *s)
{
	return s->dev.device	? GPU_TIMES_CUPTI
	       : s->sampled_out ? GPU_TIMES_SAMPLED_OUT
				: GPU_TIMES_HOST;
}

const char *gpu_times_name(enum gpu_times t)
{
	static const char *const names[GPU_TIMES_MAX] = { "cupti", "sampled-out", "host-calls" };

	return t < GPU_TIMES_MAX ? names[t] : "?";
}

const char *gpu_step_times(const struct gpu_step *s)
{
	return gpu_times_name(gpu_step_times_of(s));
}

static const char *const cause_names[STALL_CAUSES] = {
	[STALL_PREFILL] = "prefill", [STALL_PREEMPTED] = "preempted",	[STALL_BATCH] = "batch",
	[STALL_HOST] = "host",	     [STALL_LATE_WRITE] = "late_write", [STALL_UNKNOWN] = "unknown",
};

const char *stall_cause_name(enum stall_cause c)
{
	return c < STALL_CAUSES ? cause_names[c] : "?";
}
