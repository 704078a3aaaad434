/* SPDX-License-Identifier: MIT */
/*
 * The live tracer: loads and attaches the BPF programs, follows the named processes and their
 * descendants, drains the ring buffer on a short timer into the pipeline, and detaches on exit.
 * A source of records: it feeds a pipeline it is given (pipeline.h) and calls its owner at the
 * moments of struct trace_hooks (the session: session/session.h); it knows no sink.
 */
#ifndef TS_TRACE_H
#define TS_TRACE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "loader/uprobes.h"
#include "loader/vendor.h"
#include "pipeline/pipeline.h"

/* --container-state directories kept. */
#define TRACE_STATE_DIRS_MAX 8

struct trace_opts {
	uint32_t pids[PIPELINE_MAX_ROOTS];
	int npids;
	bool verbose;
	bool gpu_calls;			  /* a record per CUDA launch and copy (--kernels) */
	enum uprobes_device device_times; /* what the CUPTI library collects */
	double duration_s; /* 0: until a signal or until every traced process exited */
	double interval_s; /* 0: no interval summaries */
	long count;	   /* stop after this many intervals; 0: no limit */
	uint32_t capture_bytes;
	uint32_t ring_mb; /* ring buffer size in MiB, a power of two */
	/* the GPUs sampled (each vendor's sampler: NVML) after each drain, for outputs that show
	 * them */
	bool device_samples;
	bool all;	 /* --all: find inference servers on the node, and new ones as they start */
	bool self_stats; /* --self-stats: kernel.bpf_stats_enabled on for the run */
	bool no_traffic; /* --all by command line only: no look at untraced processes' writes */
	/* --container-state: more places to find a container runtime's bundles (workload.h) */
	const char *container_state[TRACE_STATE_DIRS_MAX];
	int ncontainer_state;
	/* run: the process was started for tracing and waits in attached() to exec its
	 * command (shown as run_name); attached() returns non-zero when it could not. */
	const char *run_name;
	int (*attached)(void *ctx);
	void *attached_ctx;
	/* Said once a traced process maps a library of the GPU vendor (an index in vendor.h's
	 * rows), "" for nothing (run: no device-time library to give it) */
	char gpu_note[VENDORS_MAX][512];
};

/* What the tracer's owner does at each moment of a trace (ctx its own): begin once every
 * process is attached (non-zero: tracing stops); key after each drain when set (true: the
 * user asked to quit); finish once the last record was fed. */
struct trace_hooks {
	int (*begin)(void *ctx);
	bool (*key)(void *ctx);
	void (*finish)(void *ctx);
	void *ctx;
};

/* Whether every process named with -p exists: 0, or -ESRCH after saying which does not (before
 * anything is set up for the trace). */
/* Before a trace starts (its clock's origin taken, anything probed): waits while an earlier
 * tokenscope's child still removes its probes (release.h), saying so after half a second. */
void trace_wait_earlier(void);
int trace_check(const struct trace_opts *o);
/*
 * What *exiting holds: the owner's signal handler moves it on, trace_run reads it and says when
 * it is removing its probes (which waits for the kernel, about 0.1 s a probe on the development
 * VMs). A first SIGINT or SIGTERM ends the trace (TRACE_ENDING); one while the probes are being
 * removed leaves the rest to a child process (TRACE_LEAVE, release.h); one at any other time
 * after the first ends the process at once.
 */
enum {
	TRACE_RUNNING = 0,
	TRACE_ENDING = 1,
	TRACE_REMOVING = 2,
	TRACE_LEAVE = 3,
};

/* Traces into pl. Returns 0, or a negative errno after printing why. */
int trace_run(const struct trace_opts *o, struct pipeline *pl, const struct trace_hooks *h,
	      volatile sig_atomic_t *exiting);

#endif
