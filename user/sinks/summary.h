/* SPDX-License-Identifier: MIT */
/*
 * Aggregates over finished requests: counts by outcome, success rate, concurrency, TTFT / ITL /
 * TPOT / E2E histograms, token throughput. All times come from the requests (kernel clock).
 */
#ifndef TS_SUMMARY_H
#define TS_SUMMARY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/hist.h"
#include "pipeline/request.h"
#include "pipeline/sink.h"
#include "pipeline/slo.h"
#include "pipeline/step.h"

struct summary {
	uint64_t requests, streamed;
	uint64_t by_outcome[OUTCOME_MAX];
	uint64_t tokens;			 /* output tokens of finished requests */
	uint64_t window_start_ns, window_end_ns; /* earliest arrival, latest end */
	uint64_t busy_ns; /* sum of E2E: busy_ns / window = mean requests in flight */
	uint32_t inflight, inflight_max;
	struct hist ttft, itl, tpot, e2e;
	uint64_t itl_same_write; /* ITL gaps of 0: content frames of one write */
	/* ok served requests paired with their upstream request (a traced proxy): the proxy's own
	 * part of their TTFT (proxy_ttft_ms) */
	struct hist proxy_ttft;
	/* TTFT under the other tools' definitions (docs/output.md "TTFT definitions"), over the
	 * requests of ttft (ok, with a first output): to the first response body byte, the first
	 * chunk, the first answer text; ttft is the first output. And how many of those had bytes
	 * before their first chunk, a chunk before their first output, output before their
	 * first answer text: the causes named when the definitions disagree. */
	struct hist ttft_byte, ttft_chunk, ttft_text;
	uint64_t byte_first, chunk_first, output_first;
	/* Preemption (batch.h), over the finished requests whose GPU steps are known: how many,
	 * how many were preempted, how many times in all, and their time out of the batch. */
	uint64_t gpu_known, preempted, preemptions;
	struct hist preempted_time;
	/* The recompute tax (docs/gpu.md): prompt tokens recomputed (of the preempted requests
	 * whose usage said their prompt; recomp_prompt_unknown the others), generated tokens
	 * recomputed, and the recompute steps' time. */
	uint64_t recomp_prompt, recomp_prompt_unknown, recomp_generated, recomp_ns;
	/* Stalls (docs/gpu.md "Who stalled me") of the ok requests: gaps, the requests that had
	 * one, and the gaps' count and time by cause (of them, likely: without GPU steps). */
	uint64_t stalls, stalled, stall_likely;
	uint64_t stall_count[STALL_CAUSES], stall_ns[STALL_CAUSES];
	/* Engine to socket: every token's time from its step's end to its write (ok requests
	 * whose steps are known; gpu_attribution.e2s). */
	struct hist e2s;
	/* Requests their clients left before the end (request_abandoned), and what the servers
	 * did after: how long they went on writing, the frames and bytes they still wrote, the
	 * writes that failed, and the GPU steps that ran meanwhile (over those whose steps are
	 * known). */
	uint64_t abandoned, abandoned_frames, abandoned_bytes, abandoned_failed;
	uint64_t abandoned_steps, abandoned_steps_known, abandoned_went_on;
	struct hist went_on;
	/* Prefix-cache hits: of the requests whose usage said cached_tokens (and prompt_tokens),
	 * how many, their prompt and cached tokens; the others' guesses (prefix.h). */
	uint64_t cache_reported, cache_prompt, cache_cached;
	uint64_t cache_guess[CACHE_GUESSES];
	/* The requests' objectives (slo.h): attainment per objective and model, goodput; and per
	 * value of each --label (labels: theirs, from the first request that had them). */
	struct slo_tally slo;
	const struct req_label_set *labels;
	struct slo_tally slo_by_label[REQ_LABELS_MAX];
};

void summary_init(struct summary *s);
/* Starts a new interval: counts and histograms cleared, requests still in flight kept. */
void summary_reset_interval(struct summary *s);
void summary_start(struct summary *s, const struct request *r);
void summary_done(struct summary *s, const struct request *r, const struct request_metrics *m);
struct gpu_attribution;
/* A finished request's preemptions (gpu_attribution), when its GPU steps are known, and the
 * steps that ran after its client left. */
void summary_gpu(struct summary *s, const struct request *r, const struct gpu_attribution *ga);
struct jsonw;
/* The prefix cache's line (nothing when no request said or could be guessed), and the same as
 * JSON (key "prefix_cache"). */
void summary_print_cache(const struct summary *s, FILE *f);
void summary_json_cache(struct jsonw *w, const struct summary *s);
/* The abandoned requests' line (nothing when none), and the same as JSON (key "abandoned"). */
void summary_print_abandoned(const struct summary *s, FILE *f);
void summary_json_abandoned(struct jsonw *w, const struct summary *s);
/* Per-process GPU statistics over the run (the summary's GPU lines). */
/* The stalls' line and JSON object (docs/gpu.md "Who stalled me"). */
void summary_print_stalls(const struct summary *s, FILE *f);
void summary_json_stalls(struct jsonw *w, const struct summary *s);
void summary_print_gpu(const struct gpu_report *g, FILE *f);
/* The recompute tax's line against the prefill and mixed steps' time of g (nothing without
 * preemptions), and the same as JSON (key "recompute"; null without). */
void summary_print_recompute(const struct summary *s, const struct gpu_report *g, FILE *f);
struct jsonw;
void summary_json_recompute(struct jsonw *w, const struct summary *s, const struct gpu_report *g);
/* The cost line (pipeline_status.cost): the syscall programs' BPF time per traced syscall where
 * the kernel counted it, tokenscope's own CPU, the ring buffer's peak; and the same as JSON (key
 * "cost", null without a measure), with every program's counters. */
struct self_cost;
struct jsonw;
void summary_print_cost(const struct self_cost *c, FILE *f);
void summary_json_cost(struct jsonw *w, const struct self_cost *c);
void summary_print(const struct summary *s, const struct loss_report *loss, const char *title,
		   FILE *f);
/* The SLO lines (nothing when no request had an objective): attainment overall and per
 * objective, what was set apart, goodput, the objectives rules states (NULL: none given),
 * and a line per model when there were several. And the same as JSON (key "slo"; null when no
 * request had an objective). */
void summary_print_slo(const struct summary *s, const struct slo_rules *rules, FILE *f);
void summary_json_slo(struct jsonw *w, const struct summary *s, const struct slo_rules *rules);

struct jsonw;
/* A histogram as the JSON object under key, in milliseconds: {"count","p50","p90","p99","max"}
 * as the text summary prints them (hist_quantile; null when empty), and with buckets its
 * non-empty buckets too, "buckets":[[low_ms,high_ms,count],...] (a chart's data). Another
 * histogram of the summary (a new TTFT definition) is one more call in summary_json. */
void summary_json_hist(struct jsonw *w, const char *key, const struct hist *h, bool buckets);
/* The text summary's figures as fields of the JSON object being written (docs/output.md "JSON
 * lines": the {"summary":{...}} line of --json, and the HTML report's numbers): counts, in
 * flight, tokens, a summary_json_hist per histogram, and the loss report's counters. */
void summary_json(struct jsonw *w, const struct summary *s, const struct loss_report *loss,
		  bool buckets);

/* The summaries as a sink: the run's total, printed at the end with the loss report and the
 * GPU steps' statistics, and the interval's, printed and started anew on each interval (the
 * loader's --interval, pipeline_interval). */
struct summaries {
	FILE *out; /* NULL: kept, not printed */
	/* --json: the total as one line {"summary":{...}} at the end, after the request lines */
	FILE *json_out;
	struct summary total, interval;
};

void summaries_init(struct summaries *s, FILE *out);
/* --json: the total's JSON line goes to f (the request lines' stream); NULL: none. */
void summaries_set_json(struct summaries *s, FILE *f);
struct sink summaries_sink(struct summaries *s);
/* The total as of st (the sink's finish prints it so). */
void summaries_print_total(const struct summaries *s, const struct pipeline_status *st);

#endif
