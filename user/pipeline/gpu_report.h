/* SPDX-License-Identifier: MIT */
/*
 * What the sinks are handed of the GPU processes' statistics (pipeline_status.gpu): plain
 * values made by gpu_report (gpu.h) at each status, valid during the call. Sinks read these,
 * never the step timeline.
 */
#ifndef TS_GPU_REPORT_H
#define TS_GPU_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/types.h>

#include "cupti_abi.h"
#include "lib/hist.h"

enum step_kind { STEP_PREFILL, STEP_DECODE, STEP_MIXED, STEP_OTHER, STEP_KIND_MAX };

/* A GPU process's statistics as the sinks are handed them (pipeline_status): values, valid
 * during the call. */
struct gpu_proc_report {
	uint32_t pid;
	uint64_t steps[STEP_KIND_MAX];
	const struct hist *dur[STEP_KIND_MAX]; /* step durations by kind; NULL: none yet */
	uint64_t launches, graph_launches;
	uint64_t wait_ns;	    /* time inside host waits */
	uint64_t first_ns, last_ns; /* first step's start, last step's end */
	/* Device times (CUPTI), when its library reported (cupti): the library's counters as last
	 * reported, runs received and their device time, runs shown late or in no step, steps
	 * with device times and sampled out. */
	bool cupti;
	struct ts_cupti_stats cupti_stats;
	uint64_t runs, busy_ns, late, unplaced, steps_device, steps_sampled_out;
};

struct gpu_report {
	uint32_t nprocs;
	const struct gpu_proc_report *procs;
	uint64_t procs_dropped;		  /* GPU processes beyond GPU_MAX_PROCS */
	uint64_t batch_early, batch_late; /* as gpu_timeline's */
	uint32_t held_max;		  /* steps held at once, at most (GPU_PENDING_MAX) */
};

#endif
