/* SPDX-License-Identifier: MIT */
/*
 * The tracer's own cost, measured while it runs (pipeline/self_cost.h): its CPU time, the BPF
 * programs' run time and runs as the kernel counts them with kernel.bpf_stats_enabled on, and the
 * ring buffer's peak. --self-stats turns bpf_stats on for the run: the kernel keeps it on while
 * the descriptor it gave is open, so it goes off at exit whatever ends the run (the sysctl
 * kernel.bpf_stats_enabled does not show a descriptor's hold).
 */
#ifndef TS_COST_H
#define TS_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/self_cost.h"

struct kernel;

struct cost_meter {
	int stats_fd;	    /* --self-stats: the descriptor that keeps bpf_stats on; -1 */
	double start_s;	    /* CLOCK_MONOTONIC at the start */
	double start_cpu_s; /* the process's CPU time then */
	bool prev_on;	    /* bpf_stats on at the previous sample */
	double prev_s;	    /* ... its time */
	double prev_run_s;  /* ... all programs' run time */
	double prev_sys_s;  /* ... the syscall programs' */
	uint64_t prev_runs; /* ... all programs' runs */
	uint64_t prev_syscalls;
	struct self_cost c; /* the latest sample */
};

/* Starts measuring (after the programs are attached); self_stats turns bpf_stats on. 0, or
 * the negative errno of turning it on (the meter works on without it). */
int cost_start(struct cost_meter *m, bool self_stats);
/* A sample: CPU time, the programs' counters (k), the ring's fill, and syscalls, the traced
 * socket syscalls so far (TS_STAT_SYSCALLS). The result is m->c. */
void cost_sample(struct cost_meter *m, struct kernel *k, uint64_t syscalls);
/* Turns bpf_stats off again if --self-stats turned it on. */
void cost_stop(struct cost_meter *m);
/* Whether the sysctl kernel.bpf_stats_enabled is 1 (*known false when it cannot be read); a
 * descriptor that holds the counting on (--self-stats, another tool's) does not show there. */
bool cost_bpf_stats_on(bool *known);

#endif
