/* SPDX-License-Identifier: MIT */
/*
 * GPU steps: the timeline of every traced GPU process's steps (the work between two host waits,
 * from the kernel's step records), their classification, per-process statistics, and the
 * attribution of a request's latency to queue, prefill and decode by time. Which steps each
 * request's tokens came from, and so each step's batch, is batch.h's.
 *
 * Classification (docs/gpu.md "Step kinds"): a step's kind is what it did for the requests,
 * from the tokens written after it (batch.h credits them): prefill when only first tokens
 * followed, decode when only next tokens did, mixed when both did. A step no token followed
 * (or shown before its tokens) is classified by its launch shape: one that replays a CUDA
 * graph and launches fewer than GPU_PREFILL_MIN_LAUNCHES kernels eagerly is decode, one that
 * launches kernels and replays no graph is prefill, one that does both in quantity is mixed,
 * one with copies only is other. Its mode says how its work was launched: graph, piecewise
 * (graph pieces between eager kernels) or eager.
 */
#ifndef TS_GPU_H
#define TS_GPU_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <linux/types.h>

#include "events.h"
#include "lib/hist.h"
#include "pipeline/gpu_report.h"
#include "pipeline/request.h"
#include "pipeline/step.h"

/* Eager launches from which a step that also replays a graph counts as mixed: a decode step's
 * sampling and bookkeeping add a handful of eager kernels around the graph. */
#define GPU_PREFILL_MIN_LAUNCHES 32
/* Steps kept (all processes together) to attribute requests; older ones are forgotten. */
#define GPU_HISTORY 16384
#define GPU_MAX_PROCS 64

/* Kernel time a step of a process with device times waits for them before it is shown
 * anyway (counted late); requests wait as long for the steps they overlap. */
#define GPU_DEVICE_WAIT_NS 2000000000ull
/* Steps waiting for their device times or their batch (batch.h) at once; one more releases
 * the oldest. */
#define GPU_PENDING_MAX 4096
/* A process's device times count as complete up to t when a run that started at t or later
 * has come, or a heartbeat after t came and this long passed since t (see gpu.c). */
#define GPU_DEVICE_QUIET_NS 200000000ull
/* Windows of the CUPTI library's sampled mode remembered per process (a held step is at most
 * GPU_DEVICE_WAIT_NS old, and a window lasts at least the library's 100 ms poll). */
#define GPU_CUPTI_WINDOWS 64
/* Runs that came before the record of the step they ran in (a flush during a long step): kept
 * for the step to take when it ends, up to GPU_DEVICE_WAIT_NS; beyond that, in no step. */
#define GPU_ORPHANS 1024

/* A step's batch window (batch.h: the writes that can still add to its batch). */
/*
 * How long after the end of the step that closes a window a write can still come in a record
 * that follows that step's: a write's record is made when its syscall returns, but carries the
 * time it was entered; a socket write lasts microseconds.
 */
#define GPU_BATCH_SLACK_NS 1000000ull
/* A step with no next step (its process went idle) closes this long after its end: the host
 * writes a step's tokens within milliseconds of it; the last requests of a burst wait as long. */
#define GPU_BATCH_WAIT_NS 250000000ull
/* A process's device-time library (CUPTI's today), as its records said. */
struct gpu_devtime {
	bool seen;		/* a record arrived: its steps wait for device times */
	uint64_t flush_ns;	/* the latest heartbeat (see gpu_devtime_complete) */
	uint64_t run_start_max; /* the latest start of a run received */
	uint64_t done_ns;	/* at the latest heartbeat: run_start_max, not past the heartbeat's
				 * flush (gpu_devtime_complete) */
	struct ts_devtime_stats stats; /* the library's counters, as last reported */
	uint64_t runs, busy_ns;	     /* runs received, and their device time */
	uint64_t late;		     /* runs whose step was shown before they came */
	uint64_t unplaced;	     /* runs in no host step of the process */
	/* When its eager kernels were collected (stats.sample_on_ns/off_ns; b 0: still open),
	 * the latest GPU_CUPTI_WINDOWS, oldest at whead; first_on_ns: the first window's start
	 * (steps before it ran before collection began). */
	struct gpu_span windows[GPU_CUPTI_WINDOWS];
	uint32_t whead, nwindows;
	uint64_t first_on_ns;
	uint64_t windows_seen; /* stats.windows when the latest was opened */
	/* Steps shown with their device times, and steps sampled out. */
	uint64_t steps_device, steps_sampled_out;
};

struct gpu_proc {
	uint32_t pid;
	struct gpu_devtime devtime;
	uint64_t steps[STEP_KIND_MAX];
	struct hist *dur[STEP_KIND_MAX]; /* allocated on the process's first step */
	uint64_t launches, graph_launches;
	uint64_t wait_ns;	    /* time inside host waits */
	uint64_t first_ns, last_ns; /* first step's start, last step's end */
	struct gpu_coverage coverage[MODE_MAX]; /* decode steps by mode */
	uint64_t work_id;	    /* its latest step that launched work (not other), 0: none */
};

struct gpu_timeline {
	struct gpu_step *ring; /* GPU_HISTORY steps, oldest overwritten */
	uint32_t head, count;
	uint64_t steps;
	uint64_t calls; /* per-call records (--kernels) */
	struct gpu_proc procs[GPU_MAX_PROCS];
	uint32_t nprocs;
	uint64_t procs_dropped; /* GPU processes beyond GPU_MAX_PROCS (steps still attributed) */
	uint32_t devtime_procs;	/* processes with device times */
	/* Ids of the steps held for device times or their batch, oldest first. */
	uint64_t pending[GPU_PENDING_MAX];
	uint32_t pending_head, npending;
	uint64_t released_late; /* steps shown before their device times were known complete */
	struct {
		uint32_t pid;
		struct ts_dev_run run;
	} * orphans; /* GPU_ORPHANS, allocated with the first; oldest at orphan_head */
	uint32_t orphan_head, norphans;
	uint64_t devtime_abi_bad; /* records of a library whose ABI version this build cannot read */
	/* Steps shown before their batch was complete (the held steps reached GPU_PENDING_MAX),
	 * and tokens that came after their step was shown (its batch line is short of them). */
	uint64_t batch_early, batch_late;
};

int gpu_init(struct gpu_timeline *g);
void gpu_free(struct gpu_timeline *g);
/* A step's kind by its launch shape: the rule when no token followed it. */
enum step_kind gpu_classify(uint32_t launches, uint32_t graph_launches);
enum step_mode gpu_mode(uint32_t launches, uint32_t graph_launches);
/* A step's kind by the tokens that followed it: the requests whose first token came from it,
 * and those whose next token did; STEP_KIND_MAX when none did. */
enum step_kind gpu_kind_of_tokens(uint32_t firsts, uint32_t nexts);
/* Adds a step record; the classified step is copied to *out when out is not NULL. A step of a
 * process with device times is held (out->pending): gpu_next_ready gives it back. */
/* Whether a step record's times can be a step's: it ends no earlier than it started and than
 * its wait began, and it ends at all. Its first call may come after the wait began (another
 * thread launched while this one waited). A record that fails is a bad record, never a step: a
 * step that ends before it starts would give every duration built on it a negative or wrapped
 * value. */
bool gpu_step_times_ok(const struct ts_gpu_step_event *e);
void gpu_add(struct gpu_timeline *g, const struct ts_gpu_step_event *e, struct gpu_step *out);
/* Whether records of a library of this ABI version are read (this one's, and version 1's, whose
 * counters are shorter: events.h). */
static inline bool gpu_devtime_abi_known(uint32_t abi)
{
	return abi == TS_DEVTIME_ABI || abi == TS_DEVTIME_ABI_V1;
}
/* A record of the CUPTI injection library: its runs go to the steps they ran in. */
void gpu_add_runs(struct gpu_timeline *g, const struct ts_dev_runs_event *e);
/* The oldest held step, if its device times are complete (GPU_DEVICE_QUIET_NS) or it has
 * waited GPU_DEVICE_WAIT_NS of kernel time (record_ns: the latest record's), and its batch is
 * complete (gpu_step_closed at now_ns, the kernel clock), or all is set; copied to *out. */
bool gpu_next_ready(struct gpu_timeline *g, uint64_t record_ns, uint64_t now_ns, bool all,
		    struct gpu_step *out);
/* Whether the step's batch is final at now_ns (kernel clock): the writes that can add to it
 * come after its end and before the end of its process's next step that launched work, and
 * GPU_BATCH_SLACK_NS after that; with no next step, GPU_BATCH_WAIT_NS after its own end. */
bool gpu_step_closed(const struct gpu_step *s, uint64_t now_ns);
/* The kept step with this id; NULL when the history no longer holds it. */
struct gpu_step *gpu_step_by_id(const struct gpu_timeline *g, uint64_t id);
/* The steps kept that started at or after from_ns and ended by to_ns (every process's). */
uint32_t gpu_steps_within(const struct gpu_timeline *g, uint64_t from_ns, uint64_t to_ns);
/* Whether the device times of every process that has them are complete up to t_ns (the
 * request that ended then can be attributed), or waited long enough by now_ns. */
bool gpu_device_complete(const struct gpu_timeline *g, uint64_t t_ns, uint64_t now_ns);
/* The request's queue, prefill, decode and gpu/host split, its prefill the step its first
 * token came from (batch_prefill_step; NULL: none known); its steps and batches are
 * batch_attribute's (batch.h), called after this. */
void gpu_attribute(const struct gpu_timeline *g, const struct request *r,
		   const struct gpu_step *prefill, struct gpu_attribution *a);
/* Frees what gpu_attribute allocated (its rides). */
void gpu_attribution_free(struct gpu_attribution *a);
/* The report of every GPU process, into procs (GPU_MAX_PROCS of them). */
void gpu_report(const struct gpu_timeline *g, struct gpu_proc_report *procs,
		struct gpu_report *out);

#endif
