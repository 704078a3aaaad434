// SPDX-License-Identifier: MIT
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>

#include "lib/clock.h"
#include "loader/cost.h"
#include "loader/kernel.h"
#include "loader/proc.h"

static double cpu_s(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts))
		return 0;
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

bool cost_bpf_stats_on(bool *known)
{
	char text[16];

	*known = proc_read_file("/proc/sys/kernel/bpf_stats_enabled", text, sizeof(text)) > 0;
	return *known && text[0] == '1';
}

int cost_start(struct cost_meter *m, bool self_stats)
{
	int err = 0;

	*m = (struct cost_meter){ .stats_fd = -1, .start_s = mono_s(), .start_cpu_s = cpu_s() };
	if (self_stats) {
		m->stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
		if (m->stats_fd < 0) {
			err = -errno;
			m->stats_fd = -1;
		}
	}
	m->c.self_stats = m->stats_fd >= 0;
	return err;
}

void cost_sample(struct cost_meter *m, struct kernel *k, uint64_t syscalls)
{
	struct self_cost *c = &m->c;
	double now = mono_s(), run_s = 0, sys_s = 0;
	uint64_t runs = 0;
	bool on;

	c->nprogs = kernel_prog_stats(k, c->progs, SELF_PROGS_MAX);
	for (uint32_t i = 0; i < c->nprogs; i++) {
		run_s += (double)c->progs[i].run_ns / 1e9;
		runs += c->progs[i].runs;
		if (c->progs[i].syscall)
			sys_s += (double)c->progs[i].run_ns / 1e9;
	}
	/*
	 * On: turned on here; or by the sysctl; or by another tool's descriptor, as --self-stats
	 * does, which the sysctl does not show: then runs were counted since the last sample (the
	 * kernel counts runs only while it counts time).
	 */
	on = cost_bpf_stats_on(&c->bpf_stats_known) || m->stats_fd >= 0 ||
	     (c->seq && runs > m->prev_runs);
	if (m->stats_fd >= 0)
		c->bpf_stats_known = true;
	/* Only stretches with bpf_stats on at both ends: run time and syscalls of the same time. */
	if (on && m->prev_on && c->seq) {
		c->bpf_wall_s += now - m->prev_s;
		c->bpf_s += run_s - m->prev_run_s;
		c->bpf_sys_s += sys_s - m->prev_sys_s;
		c->bpf_syscalls += syscalls - m->prev_syscalls;
	}
	m->prev_on = on;
	m->prev_s = now;
	m->prev_run_s = run_s;
	m->prev_sys_s = sys_s;
	m->prev_runs = runs;
	m->prev_syscalls = syscalls;
	c->bpf_stats = on;
	c->wall_s = now - m->start_s;
	c->cpu_s = cpu_s() - m->start_cpu_s;
	kernel_ring_fill(k, &c->ring_bytes, &c->ring_peak_bytes);
	c->seq++;
}

void cost_stop(struct cost_meter *m)
{
	if (m->stats_fd >= 0)
		close(m->stats_fd);
	m->stats_fd = -1;
}
