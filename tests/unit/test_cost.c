// SPDX-License-Identifier: MIT
/*
 * What tracing costs (pipeline/self_cost.h) as the sinks say it: the summary's cost line in its
 * three forms (BPF time counted, counted with no traced syscall, not counted), the JSON
 * summary's "cost" with nulls where nothing was counted, and the Prometheus families, whose
 * program series are there only while the kernel counts (bpf_stats). The measure itself is
 * checked against the kernel's own counters in tests/prom/run_cost.py.
 */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "lib/json.h"
#include "lib/jsonw.h"
#include "pipeline/pipeline_impl.h"
#include "sinks/prom.h"
#include "sinks/summary.h"

/* 3 s of which 2 counted: 1.5 ms in the syscall programs over 1,000 syscalls (1.50 µs each),
 * 2 ms in all programs; 0.06 s of CPU (2 %); 512 KiB of a 2 MiB ring (25 %). */
static struct self_cost counted(void)
{
	struct self_cost c = {
		.seq = 4,
		.wall_s = 3,
		.cpu_s = 0.06,
		.bpf_stats = true,
		.bpf_stats_known = true,
		.self_stats = true,
		.bpf_wall_s = 2,
		.bpf_s = 0.002,
		.bpf_sys_s = 0.0015,
		.bpf_syscalls = 1000,
		.ring_bytes = 2 << 20,
		.ring_peak_bytes = 512 << 10,
		.nprogs = 2,
	};

	c.progs[0] = (struct self_prog){ "ts_sys_enter", true, 700000, 5000 };
	c.progs[1] = (struct self_prog){ "ts_tls_enter", false, 123456789, 42 };
	return c;
}

/* The same run with the kernel's counting off all along: no BPF time counted. */
static struct self_cost uncounted(void)
{
	struct self_cost c = counted();

	c.bpf_wall_s = c.bpf_s = c.bpf_sys_s = 0;
	c.bpf_syscalls = 0;
	c.bpf_stats = false;
	return c;
}

static char *line(const struct self_cost *c)
{
	char *text = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);

	summary_print_cost(c, f);
	fclose(f);
	return text;
}

TEST(test_cost_line)
{
	struct self_cost c = counted();
	char *t = line(&c);

	ASSERT_STREQ(t,
		     "  cost: 1.50 µs of BPF per traced syscall, 2.0 % of one CPU in tokenscope, "
		     "ring peak 25 %\n",
		     "counted");
	free(t);
	c.bpf_syscalls = 0;
	t = line(&c);
	ASSERT_STREQ(t,
		     "  cost: no traced syscall, BPF 0.1 % of one CPU, 2.0 % of one CPU in "
		     "tokenscope, ring peak 25 %\n",
		     "no syscall");
	free(t);
	c = uncounted();
	c.ring_bytes = 0;
	t = line(&c);
	ASSERT_STREQ(t,
		     "  cost: BPF time not counted (--self-stats), 2.0 % of one CPU in tokenscope, "
		     "ring peak unknown\n",
		     "not counted");
	free(t);
}

/* The JSON "cost" of c (NULL: a replay's) in a, as its value. */
static const struct jv *cost_json(struct jv_arena *a, const struct self_cost *c)
{
	char *text = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);
	const struct jv *v;
	struct jsonw w;

	jsonw_begin(&w, f);
	summary_json_cost(&w, c);
	jsonw_end(&w);
	fclose(f);
	v = jv_parse(a, text, n);
	free(text);
	return v ? jv_get(v, "cost") : NULL;
}

static double num(const struct jv *o, const char *key)
{
	const struct jv *v = jv_get(o, key);

	return jv_is_number(v) ? v->num : -1;
}

TEST(test_cost_json)
{
	struct self_cost c = counted();
	struct jv_arena a = { 0 };
	const struct jv *o = cost_json(&a, &c), *el;
	int nprogs = 0;

	if (!ASSERT_OK_PTR(o, "parsed")) {
		jv_arena_reset(&a);
		return;
	}
	ASSERT_NEAR(num(o, "bpf_ns_per_syscall"), 1500, 0.01, "ns per syscall");
	ASSERT_NEAR(num(o, "cpu_ratio"), 0.02, 1e-9, "cpu ratio");
	ASSERT_NEAR(num(o, "bpf_cpu_ratio"), 0.001, 1e-9, "bpf ratio");
	ASSERT_NEAR(num(o, "ring_peak_ratio"), 0.25, 1e-9, "ring");
	ASSERT_NEAR(num(o, "traced_syscalls"), 1000, 0, "syscalls");
	ASSERT_TRUE(jv_is_true(jv_get(o, "self_stats")), "self_stats");
	jv_foreach(el, jv_get(o, "programs"))
	{
		if (nprogs++ == 1)
			ASSERT_NEAR(num(el, "run_ns"), 123456789, 0, "run_ns");
	}
	ASSERT_EQ(nprogs, 2, "programs");
	jv_arena_reset(&a);

	/* Nothing counted: nulls, never a figure. */
	c = uncounted();
	o = cost_json(&a, &c);
	if (ASSERT_OK_PTR(o, "parsed")) {
		const char *keys[] = { "bpf_counted_s", "bpf_s", "bpf_cpu_ratio", "traced_syscalls",
				       "bpf_ns_per_syscall" };

		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
			ASSERT_TRUE(jv_is_null(jv_get(o, keys[i])), keys[i]);
	}
	jv_arena_reset(&a);

	/* A replay: no measure at all. */
	ASSERT_TRUE(jv_is_null(cost_json(&a, NULL)), "replay");
	jv_arena_reset(&a);
}

static bool has_line(const char *text, const char *want)
{
	size_t n = strlen(want);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, want, n) && (p[n] == '\n' || !p[n]))
			return true;
	return false;
}

static char *render_with(const struct self_cost *c)
{
	struct pipeline_status st = { 0 };
	struct prom *p = prom_new(NULL, NULL);
	struct sink s;
	char *buf = NULL;
	size_t len = 0;

	if (!p)
		return NULL;
	s = prom_sink(p);
	st.cost = c;
	s.finish(s.ctx, &st);
	if (prom_render(p, &buf, &len))
		buf = NULL;
	prom_free(p);
	return buf;
}

TEST(test_cost_prom)
{
	struct self_cost c = counted();
	char *t = render_with(&c);

	if (!ASSERT_OK_PTR(t, "render"))
		return;
	ASSERT_TRUE(has_line(t, "tokenscope_self_cpu_seconds_total 0.060000"), "cpu");
	ASSERT_TRUE(has_line(t, "tokenscope_bpf_stats_enabled 1"), "stats on");
	ASSERT_TRUE(has_line(t, "tokenscope_bpf_run_seconds_total{program=\"ts_sys_enter\"} "
				"0.000700000"),
		    "run time");
	ASSERT_TRUE(has_line(t, "tokenscope_bpf_runs_total{program=\"ts_tls_enter\"} 42"), "runs");
	ASSERT_TRUE(has_line(t, "tokenscope_ring_buffer_bytes 2097152"), "ring");
	ASSERT_TRUE(has_line(t, "tokenscope_ring_buffer_peak_ratio 0.2500"), "peak");
	free(t);

	/* bpf_stats off: said by the gauge, and no program series. */
	c.bpf_stats = false;
	t = render_with(&c);
	if (ASSERT_OK_PTR(t, "render off")) {
		ASSERT_TRUE(has_line(t, "tokenscope_bpf_stats_enabled 0"), "stats off");
		ASSERT_TRUE(!strstr(t, "tokenscope_bpf_run_seconds_total"), "no run series");
		ASSERT_TRUE(!strstr(t, "tokenscope_bpf_runs_total"), "no runs series");
	}
	free(t);

	/* A replay: no cost family at all. */
	t = render_with(NULL);
	if (ASSERT_OK_PTR(t, "render replay"))
		ASSERT_TRUE(!strstr(t, "tokenscope_self_cpu") &&
				!strstr(t, "tokenscope_ring_buffer"),
			    "replay");
	free(t);
}

int main(void)
{
	return check_run_all();
}
