/* SPDX-License-Identifier: MIT */
/*
 * Per-request output: a text line (with a header) or one JSON object per line, in the schema
 * documented in docs/output.md; and the sink that writes them (lines_sink): requests, and with the
 * options GPU steps and CUDA calls, a line each as they come. Never prints prompt or
 * completion text.
 */
#ifndef TS_OUTPUT_H
#define TS_OUTPUT_H

#include <stdbool.h>
#include <stdio.h>

#include "pipeline/step.h"
#include "pipeline/request.h"
#include "pipeline/sink.h"

struct lines_opts {
	FILE *out;	/* where the lines go */
	bool json;	/* JSON objects instead of text lines */
	bool tokens;	/* JSON: every content frame's time */
	bool gpu_steps; /* a line per GPU step */
	bool gpu_calls; /* a line per CUDA launch and copy */
	/* text: a line for the requests that are not inference too (JSON always has them) */
	bool all_requests;
};

/*
 * Text: the GPU columns (queue, prefill, decode, steps, batch) are shown once a GPU step has
 * been seen, from the first request line after it, never before: without a GPU they would be
 * '-' on every line, and the line fits 100 columns without them. When they appear after the
 * header was written, a line says so and the header is written again with them. They stay
 * from then on: the columns change at most once in a run.
 */
struct lines {
	struct lines_opts o;
	bool header_done; /* text: the header is written before the first line */
	bool header_gpu;  /* ... with the GPU columns */
	bool gpu;	  /* a GPU step was seen: the lines have the GPU columns */
};

void lines_init(struct lines *l, const struct lines_opts *o);
/* The sink to register with pipeline_add_sink, after every other: a request's line is written
 * once the other sinks have had it. */
struct sink lines_sink(struct lines *l);

/* The text line's header and a request's line; gpu: with the GPU columns (struct lines). */
void output_text_header(FILE *f, bool gpu);
void output_text(FILE *f, const struct request *r, const struct request_metrics *m,
		 const struct gpu_attribution *ga, bool gpu);
void output_json(FILE *f, const struct request *r, const struct request_metrics *m,
		 const struct gpu_attribution *ga, bool tokens);
/* One GPU step (--gpu-steps), as a text line or a JSON object {"gpu_step":{...}}. */
void output_step_text(FILE *f, const struct gpu_step *s);
void output_step_json(FILE *f, const struct gpu_step *s);
/* One CUDA call (--kernels), as a text line or {"gpu_call":{...}}. */
void output_call_text(FILE *f, const struct ts_gpu_call_event *e);
void output_call_json(FILE *f, const struct ts_gpu_call_event *e);

#endif
