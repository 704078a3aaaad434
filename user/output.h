/* SPDX-License-Identifier: MIT */
/*
 * Per-request output: a text line (with a header) or one JSON object per line, in the schema
 * documented in README.md. Never prints prompt or completion text.
 */
#ifndef TS_OUTPUT_H
#define TS_OUTPUT_H

#include <stdbool.h>
#include <stdio.h>

#include "gpu.h"
#include "request.h"

void output_text_header(FILE *f);
void output_text(FILE *f, const struct request *r, const struct request_metrics *m,
		 const struct gpu_attribution *ga);
void output_json(FILE *f, const struct request *r, const struct request_metrics *m,
		 const struct gpu_attribution *ga, bool tokens);
/* One GPU step (--gpu-steps), as a text line or a JSON object {"gpu_step":{...}}. */
void output_step_text(FILE *f, const struct gpu_step *s);
void output_step_json(FILE *f, const struct gpu_step *s);
/* One CUDA call (--kernels), as a text line or {"gpu_call":{...}}. */
void output_call_text(FILE *f, const struct ts_gpu_call_event *e);
void output_call_json(FILE *f, const struct ts_gpu_call_event *e);

#endif
