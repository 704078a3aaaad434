/* SPDX-License-Identifier: MIT */
/*
 * A session: the owner of one run of tokenscope (trace, run, record, top or report). It builds
 * the pipeline, opens every sink from one table (session/sinks.c) and registers them in its
 * canonical order, decides once where each output goes (stdout or stderr), and ends them. Its
 * driver (the live loader, loader/trace.c, or the replay of a recording, record/replay.c) feeds
 * the pipeline through pipeline.h and calls the session at the moments below; it knows no sink.
 *
 * The canonical order of the sinks, the table's (a sink sees each request, step and tick after
 * those before it): the diagnosis (report), the exporters (the GPU usage, alerts, Prometheus,
 * the timeline, the HTML page, OTLP), the request lines (not in the live view), the summaries,
 * and the live view (top, opened when tracing begins). They close in the same order, the live
 * view first (sinks.h).
 *
 * Where outputs go, decided in session_start: request lines to out, or to err when out carries
 * the Prometheus text of `report --prometheus`; the summaries with the lines, or to err with
 * --json (the total's JSON line then goes with the lines), or nowhere in the live view; the
 * report's diagnosis to out, or to err with --json or --prometheus; the exporters' counters and
 * the GPUs' figures to out, or to err with --json or --prometheus; messages to err.
 */
#ifndef TS_SESSION_H
#define TS_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pipeline/pipeline.h"
#include "record/tap.h"
#include "session/sinks.h"

struct record_meta;

struct session_opts {
	bool json, tokens, gpu_steps, gpu_calls; /* the request lines (lines_opts) */
	bool top;				 /* the live view instead of request lines */
	bool by_process;			 /* top: a row per model and process */
	bool report;	   /* a recording replayed: its diagnosis, kept and printed at the end */
	bool verbose;	   /* the pipeline reports every traced process's fork and exit */
	bool all_requests; /* --requests all: the other requests in every output, as inference */
	struct export_opts ex;
	FILE *out, *err; /* NULL: stdout and stderr */
	/* record: the event stream written to path (record/tap.h), its header naming the
	 * capture size and the nroots processes named with -p */
	struct {
		const char *path;
		uint32_t capture_bytes;
		const uint32_t *roots;
		int nroots;
	} record;
};

struct session {
	struct session_opts o;
	struct pipeline *pl;
	FILE *out, *err;
	FILE *lines_out, *summary_out, *diagnosis_out, *counts_out;
	struct sinks sinks;    /* every row's state (session/sinks.h) */
	struct record_tap tap; /* record: the recording, a tap on the pipeline */
};

/* Builds the pipeline and every sink but the live view, in the canonical order; origin_ns is
 * the time zero of the timeline and the HTML page (a CLOCK_MONOTONIC time no record precedes).
 * 0, or a negative errno after printing why; session_stop undoes it either way. */
int session_start(struct session *s, const struct session_opts *o, uint64_t origin_ns);
/* What the driver feeds. */
struct pipeline *session_pipeline(struct session *s);
/* Whether the live loader is to sample the GPUs for the outputs (sinks_want_device_samples). */
bool session_device_samples(const struct session *s);
/* A replay: the recording at path and its header (clocks and host), before the first record. */
void session_set_source(struct session *s, const char *path, const struct record_meta *m);

/* The live loader's calls (struct trace_hooks), each with the session as ctx:
 * begin, once every process is attached: the live view starts (its sink is the last one, its
 * screen and keys); 0 or a negative errno; */
int session_begin(void *s);
/* key, in the live view after each drain: true when a key asked to quit; */
bool session_key(void *s);
/* finish, once the last record was fed (a replay's end too): every sink's finish, the
 * summaries among them, what the trace exporter still holds sent, and a report's diagnosis. */
void session_finish(void *s);

/* Closes every sink (sinks_close) and the recording, and frees everything; the first error (a
 * file that could not be written), else 0. */
int session_stop(struct session *s);

#endif
