/* SPDX-License-Identifier: MIT */
/*
 * The pipeline's insides: for the files of user/pipeline/ and the unit tests alone. Everything
 * else holds a struct pipeline * and uses pipeline.h.
 */
#ifndef TS_PIPELINE_IMPL_H
#define TS_PIPELINE_IMPL_H

#include "pipeline/conn.h"
#include "pipeline/gpu.h"
#include "pipeline/pipeline.h"
#include "pipeline/prefix.h"
#include "pipeline/proxy.h"
#include "pipeline/stall.h"

/* A traced process that has not exited, and where it runs (all "" when unknown). */
struct pipeline_proc {
	uint32_t pid;
	uint32_t root; /* the traced root it descends from (pipeline_process_root); 0: unknown */
	struct workload wl;
};

struct pipeline {
	struct pipeline_opts o;
	struct conn_table conns;
	struct gpu_timeline gpu;
	struct proxy proxy;	      /* pairs upstream requests with served ones */
	struct prefix_fits prefix;    /* prefix-cache hits guessed per server (prefix.h) */
	struct stall_table stalls;    /* first tokens, to name who stalled a request (stall.h) */
	struct pipeline_tap tap;      /* what the pipeline is fed, handed on (a recording) */
	uint64_t kstats[TS_STAT_MAX]; /* the kernel's counters, refreshed by the loader */
	uint64_t bad_records;
	uint64_t lost_seen; /* kernel lost-record count at the last pipeline_kernel_lost() */
	/* Traced processes still running: an exited one leaves at once, so the list (scanned at
	 * every request start) is as long as the processes alive, however many have forked. */
	struct pipeline_proc *live;
	uint32_t nlive;
	size_t live_cap;
	uint32_t *status_pids;				  /* the live pids as given to the sinks */
	struct gpu_proc_report status_gpu[GPU_MAX_PROCS]; /* the GPU report given to them */
	size_t status_cap;
	uint32_t roots[PIPELINE_MAX_ROOTS]; /* processes named with -p or found by --all */
	uint32_t nroots;
	bool keep_running; /* --all: the run does not end when every traced process has */
	bool all_requests; /* --requests all: every sink gets the other requests too */
	struct other_requests others;
	struct joined_servers joined;
	uint64_t last_ns;  /* the latest kernel time in any record so far */
	uint64_t clock_ns; /* the kernel clock as the loader last read it; 0: none (a replay) */
	struct sink sinks[PIPELINE_MAX_SINKS];
	int nsinks;
	/* Request starts and ends held for the sinks (pl_event), oldest first. */
	struct pl_event {
		struct request *r;
		bool start; /* its start; else its end (then the event owns it) */
	} held[PIPELINE_MAX_HELD];
	uint32_t held_head, nheld;
	struct run_feature features[RUN_FEATURES_MAX]; /* the loader's probe (pipeline_features) */
	uint32_t nfeatures;
	struct self_cost cost; /* the loader's measure of its own cost (pipeline_self_cost) */
	/* Called when a traced process exits (the loader forgets its sockets). */
	void (*on_exit)(void *ctx, uint32_t pid);
	void *on_exit_ctx;
};

/* In place (the tests keep one on the stack); pipeline_new/pipeline_destroy allocate. */
int pipeline_init(struct pipeline *pl, const struct pipeline_opts *o);
void pipeline_free(struct pipeline *pl);

#endif
