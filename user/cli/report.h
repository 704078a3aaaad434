/* SPDX-License-Identifier: MIT */
/* `tokenscope report FILE`: a recording replayed through the pipeline, with the diagnosis. */
#ifndef TS_REPORT_H
#define TS_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "session/sinks.h"

struct report_opts {
	const char *path;
	bool json, tokens, gpu_steps, verbose;
	bool all_requests; /* --requests all */
	struct export_opts ex;
	FILE *out, *err; /* NULL: stdout and stderr */
};

/* 0, or a negative errno after printing why (a cut or corrupt file is reported in full first). */
int report_run(const struct report_opts *o);

#endif
