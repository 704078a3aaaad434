/* SPDX-License-Identifier: MIT */
/*
 * Runs of device work (include/devtime_abi.h) made from CUPTI's activity records: launch times
 * from the API records, joined to the kernels, graph replays and copies by correlation id, and
 * operations of one stream merged while the device gap between them stays within
 * TS_RUN_GAP_NS. Knows nothing of CUPTI's types (cupti/records.c reads those), so it is tested
 * and fuzzed on its own. Fixed memory: a table of recent launches, a few open runs, one batch.
 */
#ifndef TS_CUPTI_RUNS_H
#define TS_CUPTI_RUNS_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/types.h>

#include "devtime_abi.h"

/* Launches remembered until their operation's record arrives (a power of two). A launch
 * whose slot is taken by a newer one before its operation arrives is forgotten: the operation
 * counts in no_launch. */
#define RUNS_LAUNCHES 8192
/* Streams with a run open at once; one more closes the run that ended first. */
#define RUNS_OPEN 16

enum runs_kind { RUNS_KERNEL, RUNS_GRAPH, RUNS_MEMCPY };

struct runs_op {
	uint64_t start_ns, end_ns; /* device, on the host clock */
	uint32_t device, stream, correlation;
	enum runs_kind kind;
	bool dtoh; /* a copy from device to host */
};

/* Called with each full batch of runs, and with the rest at runs_flush. */
typedef void (*runs_emit_fn)(void *ctx, const struct ts_dev_run *runs, uint32_t n,
			     const struct ts_devtime_stats *stats);

struct runs {
	struct {
		uint64_t ns;
		uint32_t correlation;
		bool used;
	} launch[RUNS_LAUNCHES];
	struct ts_dev_run open[RUNS_OPEN];
	bool open_used[RUNS_OPEN];
	struct ts_dev_run batch[TS_RUNS_PER_PROBE];
	uint32_t nbatch;
	bool single; /* every operation a run of its own (per-kernel records) */
	struct ts_devtime_stats stats;
	runs_emit_fn emit;
	void *ctx;
};

void runs_init(struct runs *r, runs_emit_fn emit, void *ctx);
/* An API record: the launch of correlation began at launch_ns (host clock). When both the
 * runtime and the driver call are recorded for one launch, the earlier start is kept. */
void runs_launch(struct runs *r, uint32_t correlation, uint64_t launch_ns);
void runs_op(struct runs *r, const struct runs_op *op);
/* The end of a buffer: every open run is closed and every run made is emitted. */
void runs_flush(struct runs *r);

#endif
