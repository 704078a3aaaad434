/* SPDX-License-Identifier: MIT */
/*
 * The live tracer: loads and attaches the BPF programs, follows the named processes and their
 * descendants, drains the ring buffer on a short timer into the pipeline, and detaches on exit.
 */
#ifndef TS_TRACE_H
#define TS_TRACE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "cli/exporters.h"
#include "loader/uprobes.h"
#include "pipeline/pipeline.h"

struct trace_opts {
	uint32_t pids[PIPELINE_MAX_ROOTS];
	int npids;
	bool json, tokens, verbose;
	bool gpu_steps;	   /* a line per GPU step */
	bool gpu_calls;	   /* a line per CUDA launch and copy (--kernels) */
	enum uprobes_device device_times; /* what the CUPTI library collects */
	double duration_s; /* 0: until a signal or until every traced process exited */
	double interval_s; /* 0: no interval summaries */
	long count;	   /* stop after this many intervals; 0: no limit */
	uint32_t capture_bytes;
	uint32_t ring_mb;	 /* ring buffer size in MiB, a power of two */
	struct export_opts ex;	 /* Prometheus endpoint, timeline, alerts */
	const char *record_path; /* record: write the raw event stream here */
	bool all;	 /* --all: find inference servers on the node, and new ones as they start */
	bool no_traffic; /* --all by command line only: no look at untraced processes' writes */
	bool top;	 /* top: a live view instead of request lines */
	bool by_process; /* top: a row per model and process; the metrics: a pid label */
	/* run: the process was started for tracing and waits in attached() to exec its
	 * command (shown as run_name); attached() returns non-zero when it could not. */
	const char *run_name;
	int (*attached)(void *ctx);
	void *attached_ctx;
};

/* Returns 0, or a negative errno after printing why. */
int trace_run(const struct trace_opts *o, volatile sig_atomic_t *exiting);

#endif
