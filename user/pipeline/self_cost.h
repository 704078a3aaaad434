/* SPDX-License-Identifier: MIT */
/*
 * What tracing costs, as values: measured by the loader (user/loader/cost.c) while it runs and
 * handed to the sinks in the pipeline's status (docs/output.md, "Its own cost").
 */
#ifndef TS_SELF_COST_H
#define TS_SELF_COST_H

#include <stdbool.h>
#include <stdint.h>

/* A BPF program's counters as the kernel keeps them (they grow only while kernel.bpf_stats_enabled
 * is on): its name, whether it is a syscall program (met by every syscall on the machine), its
 * run time and its runs since it was loaded. */
struct self_prog {
	char name[32];
	bool syscall;
	uint64_t run_ns;
	uint64_t runs;
};

#define SELF_PROGS_MAX 40

/*
 * What tracing costs, measured by the live tracer while it runs (docs/output.md, "Its own
 * cost"); none in a replay. BPF time is counted by the kernel only while kernel.bpf_stats_enabled
 * is on, so the per-syscall figures are sums over the samples with it on at both ends: the run
 * time and the traced syscalls of the same stretches of time.
 */
struct self_cost {
	uint64_t seq;		  /* samples taken so far: a new one has a new seq */
	double wall_s;		  /* since the programs were attached */
	double cpu_s;		  /* tokenscope's own CPU time in that time, all its threads */
	bool bpf_stats;		  /* kernel.bpf_stats_enabled is on now */
	bool bpf_stats_known;	  /* ... read (else: unknown, counted as off) */
	bool self_stats;	  /* turned on for this run by --self-stats */
	double bpf_wall_s;	  /* the time BPF run time was counted in */
	double bpf_s;		  /* all programs' run time in it */
	double bpf_sys_s;	  /* the syscall programs' run time in it */
	uint64_t bpf_syscalls;	  /* traced socket syscalls in it (TS_STAT_SYSCALLS) */
	uint64_t ring_bytes;	  /* the ring buffer's size */
	uint64_t ring_peak_bytes; /* the most bytes it held waiting at any drain */
	uint32_t nprogs;
	struct self_prog progs[SELF_PROGS_MAX];
};

#endif
