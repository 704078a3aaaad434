/* SPDX-License-Identifier: MIT */
/*
 * GPU steps: the timeline of every traced GPU process's steps (the work between two host waits,
 * from the kernel's step records), their classification, per-process statistics, and the
 * attribution of a request's latency to queue, prefill and decode by time.
 *
 * Classification (README "GPU steps"): a step that replays a CUDA graph and launches fewer than
 * GPU_PREFILL_MIN_LAUNCHES kernels eagerly is decode (vLLM and SGLang replay one graph per
 * decode step); one that launches kernels and replays no graph is prefill; one that does both
 * in quantity is mixed (chunked prefill batched with decodes); one with copies only is other.
 */
#ifndef TS_GPU_H
#define TS_GPU_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <linux/types.h>

#include "events.h"
#include "hist.h"
#include "request.h"

/* Eager launches from which a step that also replays a graph counts as mixed: a decode step's
 * sampling and bookkeeping add a handful of eager kernels around the graph. */
#define GPU_PREFILL_MIN_LAUNCHES 32
/* Steps kept (all processes together) to attribute requests; older ones are forgotten. */
#define GPU_HISTORY 16384
#define GPU_MAX_PROCS 64

enum step_kind { STEP_PREFILL, STEP_DECODE, STEP_MIXED, STEP_OTHER, STEP_KIND_MAX };

struct gpu_step {
	uint32_t pid, tid;
	uint64_t start_ns, wait_start_ns, end_ns;
	uint32_t launches, graph_launches, memcpys, memcpys_dtoh, waits;
	enum step_kind kind;
};

struct gpu_proc {
	uint32_t pid;
	uint64_t steps[STEP_KIND_MAX];
	struct hist *dur[STEP_KIND_MAX]; /* allocated on the process's first step */
	uint64_t launches, graph_launches;
	uint64_t wait_ns; /* time inside host waits */
	uint64_t first_ns, last_ns; /* first step's start, last step's end */
};

struct gpu_timeline {
	struct gpu_step *ring; /* GPU_HISTORY steps, oldest overwritten */
	uint32_t head, count;
	uint64_t steps;
	uint64_t calls; /* per-call records (--kernels) */
	struct gpu_proc procs[GPU_MAX_PROCS];
	uint32_t nprocs;
	uint64_t procs_dropped; /* GPU processes beyond GPU_MAX_PROCS (steps still attributed) */
};

/* How a request's latency was split. Values < 0 are unknown (printed as null). */
struct gpu_attribution {
	int64_t queue_ns, prefill_ns, decode_ns, gpu_ns, host_ns;
	const char *how; /* a short sentence: how it was decided, or why it could not be */
};

int gpu_init(struct gpu_timeline *g);
void gpu_free(struct gpu_timeline *g);
enum step_kind gpu_classify(uint32_t launches, uint32_t graph_launches);
const char *gpu_kind_name(enum step_kind k);
/* Adds a step record; the classified step is copied to *out when out is not NULL. */
void gpu_add(struct gpu_timeline *g, const struct ts_gpu_step_event *e, struct gpu_step *out);
bool gpu_seen(const struct gpu_timeline *g);
void gpu_attribute(const struct gpu_timeline *g, const struct request *r,
		   struct gpu_attribution *a);
/* Per-process statistics over the wall time [from_ns, to_ns] of the run. */
void gpu_print_stats(const struct gpu_timeline *g, FILE *f);

#endif
