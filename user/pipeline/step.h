/* SPDX-License-Identifier: MIT */
/*
 * What the sinks are handed of the GPU: a step as a value (its classification, host calls and
 * device times), the steps a request's tokens came from, and how its latency was split
 * (gpu_attribution). Made by gpu.c and batch.c, which keep the step timeline and each request's
 * credits to themselves: a sink includes this, never gpu.h or batch.h.
 */
#ifndef TS_STEP_H
#define TS_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/gpu_report.h"

/* Disjoint device intervals kept per step for its busy time; more merge the closest two. */
#define GPU_STEP_SPANS 4

struct gpu_span {
	uint64_t a, b;
};

/* What the CUPTI injection library reported of a step's device work (device: any run). */
struct gpu_device {
	bool device;
	bool approx; /* busy_ns is an upper bound: more disjoint spans than were kept */
	uint32_t runs, kernels, graphs, memcpys;
	uint64_t start_ns, end_ns; /* first device start, last device end */
	uint64_t busy_ns;	   /* the union of the runs' device time */
	uint64_t launch_ns;	   /* the first known launch of the step's device work, 0 if none */
	uint64_t delay_ns;	   /* sum of launch-to-start delays of launched operations */
	uint32_t launched;	   /* operations those are over */
	uint8_t nspans;
	struct gpu_span spans[GPU_STEP_SPANS]; /* sorted, disjoint */
	uint64_t run_busy_ns;		       /* sum of the runs' own busy times */
};

struct gpu_step {
	uint64_t
	    id; /* 1, 2, ... in the order steps came: its ring slot is (id - 1) % GPU_HISTORY */
	uint32_t pid, tid;
	uint64_t start_ns, wait_start_ns, end_ns;
	uint32_t launches, graph_launches, memcpys, memcpys_dtoh, waits;
	/* kind: what the step did for the requests, from the tokens written after it when any
	 * were (by_tokens), else its launch shape (shape); mode: how its work was launched
	 * (docs/gpu.md "Step kinds"). firsts and nexts: the requests whose first token, and
	 * whose next token, came from it (batch = firsts + nexts). */
	enum step_kind kind, shape;
	enum step_mode mode;
	bool by_tokens;
	uint32_t firsts, nexts;
	bool pending;  /* not shown yet: held for its device times or its batch (batch.h) */
	bool dev_wait; /* held for its device times: its process has the CUPTI library */
	/* Its eager kernels ran outside the library's sampling windows: its device times are
	 * not all there, so none are shown (dev cleared). */
	bool sampled_out;
	bool settled; /* checked against the windows (gpu.c's cupti_settle) */
	/* Requests whose tokens came from it (batch.h), and the end of its process's next step
	 * that launched work, which closes the window of writes that can still add to it (0:
	 * none yet). */
	uint32_t batch;
	uint64_t next_end_ns;
	struct gpu_device dev;
};

/* One step a request's tokens came from, as the sinks see it (gpu_attribution.rides): tokens
 * [token, token + ntokens) came from it. known false: the history no longer holds the step
 * (only token and ntokens are set). */
struct batch_ride {
	uint32_t pid, tid;
	uint64_t start_ns, end_ns;
	uint32_t batch;
	bool known;
	uint32_t token, ntokens;
};

/* Why a gap between two tokens of a request was slow (docs/gpu.md "Who stalled me"). */
enum stall_cause {
	STALL_PREFILL,	  /* prefill or mixed steps of other requests */
	STALL_PREEMPTED,  /* the request out of the batch */
	STALL_BATCH,	  /* a longer decode step: the batch grew */
	STALL_HOST,	  /* host time, no GPU step running */
	STALL_LATE_WRITE, /* the token's step ended long before its write */
	STALL_UNKNOWN,	  /* no GPU step to tell, and no other request's prefill beside it */
	STALL_CAUSES
};
/* Stalls listed per request, and stalling requests named per stall. */
#define STALL_KEEP 8
#define STALL_BY 4

/* A request a stall is blamed on: its connection and place on it, its prompt (tokens: -1 when
 * its usage had not said by then; bytes: its body's length). */
struct stall_by {
	char conn[112];
	uint32_t seq;
	int64_t prompt_tokens, prompt_bytes;
};

/* One slow gap: before token `token`, from from_ns, gap_ns long; its cause, and the time of
 * that cause inside it. likely: without GPU steps, an overlap with other requests' prefill
 * windows (arrival to first token), not a step seen. batch_from, batch_to: STALL_BATCH's batch
 * before and in the longer step. by: the requests of STALL_PREFILL (nby of them, all there
 * were: nby_all). */
struct stall {
	uint32_t token;
	uint64_t from_ns, gap_ns, cause_ns;
	enum stall_cause cause;
	bool likely;
	uint32_t batch_from, batch_to;
	uint32_t nby, nby_all;
	struct stall_by by[STALL_BY];
	/* STALL_PREFILL from the steps: the longest prefill or mixed step in the gap (the
	 * timeline's arrow starts there); step_end_ns 0: none */
	uint32_t step_pid, step_tid;
	uint64_t step_end_ns;
};

/* A request's stalls: every gap at or over threshold_ns (`--stall-ms`, else three times its
 * median gap and at least 50 ms), counted and timed by cause; the first STALL_KEEP listed. */
struct stall_report {
	uint64_t threshold_ns;
	uint32_t n, nkept, likely; /* likely: of the n, those told by overlap */
	uint64_t count[STALL_CAUSES], ns[STALL_CAUSES];
	struct stall v[STALL_KEEP];
};

const char *stall_cause_name(enum stall_cause c);

/* How a request's latency was split. Values < 0 are unknown (printed as null). */
struct gpu_attribution {
	int64_t queue_ns, prefill_ns, decode_ns, gpu_ns, host_ns;
	const char *how; /* a short sentence: how it was decided, or why it could not be */
	/* Device time (CUPTI) of the prefill step, and of the steps between the first token and
	 * the end; -1 without device times (0 in an initialiser that stops before them: shown
	 * only with source). */
	int64_t prefill_gpu_ns, decode_gpu_ns;
	/* "cupti": gpu/host from device intervals; "host-calls": from the host's CUDA calls
	 * (some overlapping step had no device times); NULL: not split. */
	const char *source;
	/* The steps its tokens came from (batch.h). has_steps false (zero): not known (no GPU
	 * step was seen; shown as null). steps: after the first token; batch_steps of them
	 * still had their batch, whose mean is batch_mean. rides: every step its tokens came
	 * from, the first token's included, oldest first (nrides; NULL when none), owned by the
	 * attribution: gpu_attribution_free. */
	bool has_steps;
	uint32_t steps, batch_steps;
	double batch_mean;
	/* Times it was preempted (out of the batch, then recomputed: batch.h) and the time out
	 * of the batch; shown only with has_steps. */
	uint32_t preemptions;
	int64_t preempted_ns;
	/* when it went out of the batch and came back, for the first npreempt_times of them
	 * (the request's own arrays: valid while it is) */
	const uint64_t *preempt_from, *preempt_to;
	uint32_t npreempt_times;
	struct batch_ride *rides;
	uint32_t nrides;
	/* Left by its client (request_abandoned): the GPU steps (of every traced engine) that ran
	 * wholly between the client leaving and the server's last write attempt for it, the work
	 * that went on for nobody; shown only with has_steps. */
	uint32_t steps_after_gone;
	/* The recompute tax of its preemptions (docs/gpu.md "The recompute tax"): the tokens it
	 * had generated at each (recomputed with its prompt, each time), and the recompute steps'
	 * time; shown with has_steps and preemptions. */
	uint64_t recomputed_generated;
	uint64_t recompute_ns;
	/* Engine to socket (docs/gpu.md "Engine to socket"): for each of its tokens whose step is
	 * known, the time from that step's end to the write that carried the token, sorted (ne2s;
	 * NULL when none: no steps, or none of its steps still kept), owned by the attribution. */
	uint64_t *e2s;
	uint32_t ne2s;
	/* Its slow gaps and their causes (stall.h); NULL with fewer than two tokens, or for a
	 * client's request. Owned by the attribution. */
	struct stall_report *stalls;
};

const char *gpu_kind_name(enum step_kind k);
const char *gpu_mode_name(enum step_mode m);
/* "tokens" or "launches": the rule that gave the step its kind. */
const char *gpu_kind_by(const struct gpu_step *s);
/* Where a step's figures come from: "cupti" (the device's own times), "sampled-out" (eager
 * kernels outside the library's sampling windows: the host's only), "host-calls" (no device
 * times for its process, or not yet collecting). */
enum gpu_times { GPU_TIMES_CUPTI, GPU_TIMES_SAMPLED_OUT, GPU_TIMES_HOST, GPU_TIMES_MAX };
enum gpu_times gpu_step_times_of(const struct gpu_step *s);
const char *gpu_times_name(enum gpu_times t);
const char *gpu_step_times(const struct gpu_step *s);

#endif
