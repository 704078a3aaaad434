/* SPDX-License-Identifier: MIT */
/*
 * The user-side pipeline as a pure function of the event stream: records in, finished requests,
 * GPU steps and CUDA calls out to its sinks (the request lines are one: lines_sink; the
 * summaries another: summaries_sink). Driven by the live tracer (trace.c) and by tests with
 * recorded records alike.
 */
#ifndef TS_PIPELINE_H
#define TS_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pipeline/sink.h"
#include "pipeline/workload.h"

struct device_sample;

struct slo_rules;
struct req_label_set;

struct pipeline_opts {
	bool verbose; /* report every traced process's fork and exit */
	FILE *err;    /* messages */
	/* --slo's objectives (slo.h), judged on every finished request; NULL: none (a request's
	 * own head may still state some). Must outlive the pipeline. */
	const struct slo_rules *slo;
	/* --label: what requests carry from their heads and bodies (labels.h); NULL: none. Must
	 * outlive the pipeline. */
	const struct req_label_set *labels;
	/* --stall-ms: a token gap this long or longer is a stall (stall.h); 0: per request */
	uint64_t stall_ns;
};

/*
 * How often the live loader drains the ring buffer and ticks the pipeline, and the ticks of a
 * replay in kernel time. Each drain wakes the tracer: at 10,000 frames/s, 25 ms cost about a
 * quarter less of its CPU than 10 ms (make bench, section 2), and no output needs it sooner
 * (a terminal line, a scrape, an alert over minutes).
 */
#define PIPELINE_TICK_MS 25
#define PIPELINE_MAX_ROOTS 64
#define PIPELINE_MAX_SINKS 16
/* Request starts and ends held at once (waiting for device times or batches); one more lets
 * the oldest out. */
#define PIPELINE_MAX_HELD 4096

struct pipeline; /* opaque outside pipeline/ (pipeline_impl.h) */

/*
 * A tap: what the pipeline is fed, handed on before the pipeline acts on it, in the order it
 * came (a recording: record/tap.h). A replay turns each call back into the one it came from;
 * drain is the tick, with the clock the pipeline was given (pipeline_clock), so that a replay
 * ticks where the live run ticked. Any call may be NULL.
 */
struct pipeline_tap {
	void (*record)(void *ctx, const void *rec, size_t len);		     /* pipeline_feed */
	void (*kstats)(void *ctx, const uint64_t *stats, uint32_t n);	     /* pipeline_kstats */
	void (*sample)(void *ctx, const struct device_sample *s);	     /* whole, uncut */
	void (*workload)(void *ctx, uint32_t pid, const struct workload *w); /* label_process */
	void (*found)(void *ctx, uint32_t pid, uint32_t root); /* pipeline_process_found */
	void (*drain)(void *ctx, uint64_t clock_ns);	       /* pipeline_tick */
	void *ctx;
};

/* A new pipeline (NULL without memory, said on o->err); pipeline_destroy frees it. */
struct pipeline *pipeline_new(const struct pipeline_opts *o);
void pipeline_destroy(struct pipeline *pl);
/* Hands what the pipeline is fed to tap from now on (NULL: to nothing). */
void pipeline_set_tap(struct pipeline *pl, const struct pipeline_tap *tap);
/* --all: the run does not end when every traced process has exited. */
void pipeline_keep_running(struct pipeline *pl, bool on);
/* --requests all: every sink gets the requests that are not inference too (sink.others). */
void pipeline_all_requests(struct pipeline *pl, bool on);
/* Called when a traced process exits (the loader forgets its sockets). */
void pipeline_on_exit(struct pipeline *pl, void (*fn)(void *ctx, uint32_t pid), void *ctx);
/* The kernel's features the loader found (n at most RUN_FEATURES_MAX kept), for the sinks'
 * status: the JSON summary and /metrics say them. */
void pipeline_features(struct pipeline *pl, const struct run_feature *f, uint32_t n);
/* The loader's latest measure of what tracing costs (sink.h: self_cost), for the sinks. */
void pipeline_self_cost(struct pipeline *pl, const struct self_cost *c);
/* The kernel's counters (TS_STAT_*), n of them, as the loader read them after a drain or a
 * recording holds them: a grown lost-record count marks the open requests (as
 * pipeline_kernel_lost). */
void pipeline_kstats(struct pipeline *pl, const uint64_t *stats, uint32_t n);
/* The kernel's counters as last given (TS_STAT_MAX of them): the loader reads on from them. */
const uint64_t *pipeline_kstats_now(const struct pipeline *pl);
/* The latest kernel time in any record so far. */
uint64_t pipeline_record_ns(const struct pipeline *pl);
/* The traced processes alive now: n of them, and the pid of the i-th. */
uint32_t pipeline_nlive(const struct pipeline *pl);
uint32_t pipeline_live_pid(const struct pipeline *pl, uint32_t i);
/* Whether the traced processes have shown an HTTP connection: served, called, HTTP/2, TLS. */
bool pipeline_http_seen(const struct pipeline *pl);
/* Registers a process traced from the start; root: named by the user. */
int pipeline_add_process(struct pipeline *pl, uint32_t pid, bool root);
/* The root that pid, a traced process, descends from (a descendant found in /proc when root
 * was followed): its server, for what is counted per server (joined_servers). */
void pipeline_process_root(struct pipeline *pl, uint32_t pid, uint32_t root);
/* A process the loader follows that no -p named (a descendant found in /proc, a server --all
 * found), added as above: told to the tap alone, so that a replay follows it too; root is the
 * server it descends from, 0 for a server. */
void pipeline_process_found(struct pipeline *pl, uint32_t pid, uint32_t root);
/* Undoes pipeline_add_process (the kernel side could not follow pid after all). */
void pipeline_forget_process(struct pipeline *pl, uint32_t pid);
/* One ring-buffer record. -EINVAL for a malformed one (counted, skipped). */
int pipeline_feed(struct pipeline *pl, const void *rec, size_t len);
bool pipeline_all_exited(const struct pipeline *pl);
/* Labels a traced process (and, through fork records, its later children) with where it runs
 * (NULL: nowhere known); -ENOENT when pid is not a traced process. */
int pipeline_label_process(struct pipeline *pl, uint32_t pid, const struct workload *w);
/* The kernel's count of lost records now: when it grows, every open request may have lost
 * records of its own (the kernel cannot say whose). */
void pipeline_kernel_lost(struct pipeline *pl, uint64_t lost_events);
/* End of tracing: open requests that may have lost records are reported `lost`. */
void pipeline_finish(struct pipeline *pl);
void pipeline_loss(const struct pipeline *pl, struct loss_report *loss);
/* What the sinks are given at a tick; st->traced stays valid until the next call. */
void pipeline_status(struct pipeline *pl, struct pipeline_status *st);
/* Registers an exporter; -E2BIG beyond PIPELINE_MAX_SINKS. */
int pipeline_add_sink(struct pipeline *pl, const struct sink *s);
/* The live tracer's reading of the kernel clock (CLOCK_MONOTONIC, the records' clock), so that
 * the sinks' time moves on while no record comes. */
void pipeline_clock(struct pipeline *pl, uint64_t now_ns);
/* A new device sample (the loader, before the tick): cut down in place to the processes traced
 * now, then given to every sink. */
void pipeline_device_sample(struct pipeline *pl, struct device_sample *s);
/* Calls every sink's tick with the kernel time now (the loader, after each drain). */
void pipeline_tick(struct pipeline *pl);
/* An interval ended (the loader's --interval): every sink's interval (the summary prints its
 * interval's and starts a new one). */
void pipeline_interval(struct pipeline *pl);

#endif
