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
#include <stdio.h>
#include <linux/types.h>

#include "devtime_abi.h"
#include "lib/hist.h"

enum step_kind { STEP_PREFILL, STEP_DECODE, STEP_MIXED, STEP_OTHER, STEP_KIND_MAX };
/* How a step's work was launched (docs/gpu.md "Modes"): none (copies only), one CUDA graph
 * with a few eager kernels, graph pieces between eager kernels (two or more graphs, or one
 * with GPU_PREFILL_MIN_LAUNCHES eager kernels or more), or eager kernels only. */
enum step_mode { MODE_NONE, MODE_GRAPH, MODE_PIECEWISE, MODE_EAGER, MODE_MAX };

/* Batch sizes in buckets for graph coverage: 0 (no token followed), 1, 2, 3-4, 5-8, ...,
 * 257 and more. */
#define GPU_BATCH_BUCKETS 11
/* The bucket of a batch size, and the size range of a bucket (hi 0 past the first: no
 * bound). */
static inline uint32_t gpu_batch_bucket(uint32_t batch)
{
	uint32_t b = 1;

	if (!batch)
		return 0;
	while (b + 1 < GPU_BATCH_BUCKETS && batch > (1u << (b - 1)))
		b++;
	return b;
}
static inline void gpu_batch_bucket_range(uint32_t b, uint32_t *lo, uint32_t *hi)
{
	*lo = b < 2 ? b : (1u << (b - 2)) + 1;
	*hi = !b ? 0 : b + 1 < GPU_BATCH_BUCKETS ? 1u << (b - 1) : 0;
}

/* Batch sizes lo to hi as a label: "2", "3-4", "257+" (hi 0: no bound). */
static inline void gpu_batch_range_name(uint32_t lo, uint32_t hi, char *buf, size_t len)
{
	if (lo == hi)
		snprintf(buf, len, "%u", lo);
	else if (!hi)
		snprintf(buf, len, "%u+", lo);
	else
		snprintf(buf, len, "%u-%u", lo, hi);
}

/* A process's decode steps of one mode (docs/gpu.md "Graph coverage"): how many, the range of
 * their batches (requests credited), and their count and time by batch bucket. */
struct gpu_coverage {
	uint64_t steps;
	uint32_t batch_lo, batch_hi;
	uint64_t bucket_steps[GPU_BATCH_BUCKETS], bucket_ns[GPU_BATCH_BUCKETS];
};

/* A decode step of this batch and duration into c. */
static inline void gpu_coverage_add(struct gpu_coverage *c, uint32_t batch, uint64_t dur_ns)
{
	uint32_t b = gpu_batch_bucket(batch);

	if (!c->steps || batch < c->batch_lo)
		c->batch_lo = batch;
	if (batch > c->batch_hi)
		c->batch_hi = batch;
	c->steps++;
	c->bucket_steps[b]++;
	c->bucket_ns[b] += dur_ns;
}

/* A GPU process's statistics as the sinks are handed them (pipeline_status): values, valid
 * during the call. */
struct gpu_proc_report {
	uint32_t pid;
	uint64_t steps[STEP_KIND_MAX];
	const struct hist *dur[STEP_KIND_MAX]; /* step durations by kind; NULL: none yet */
	uint64_t launches, graph_launches;
	uint64_t wait_ns;	    /* time inside host waits */
	uint64_t first_ns, last_ns; /* first step's start, last step's end */
	struct gpu_coverage coverage[MODE_MAX]; /* its decode steps by mode */
	/* Device times (CUPTI's library today), when its library reported (device_times): the
	 * library's counters as last reported, runs received and their device time, runs shown
	 * late or in no step, steps with device times and sampled out. */
	bool device_times;
	struct ts_devtime_stats devtime_stats;
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
