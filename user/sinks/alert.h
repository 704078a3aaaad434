/* SPDX-License-Identifier: MIT */
/*
 * Alerts for when no Prometheus is there: rules such as `ttft.p99 > 5s for 3m`, evaluated on a
 * sliding window of finished requests, as a pipeline sink. A rule fires when its condition held
 * at every evaluation (once per second of kernel time) for its `for` duration, and resolves when
 * it stops holding. Firing and resolving each print one line, with the value and the likely
 * cause from the queue/prefill/decode attribution, and can run a command.
 *
 * Rule form: METRIC OP VALUE [for DURATION]
 *   METRIC    ttft|itl|tpot|e2e|queue|prefill|decode . p50|p90|p95|p99|p999,
 *             or success (percent of requests ok), or rps (finished requests per second),
 *             or slo.attainment (of the requests with objectives, --slo or llm-d's headers,
 *             the share that met all of theirs: 0.95 or 95%; errors count as misses, those
 *             their clients left, and unknown verdicts, not at all)
 *   OP        > >= < <=
 *   VALUE     a time with a unit (us, ms, s, m) for latencies, a percentage for success, a
 *             number for rps
 *   DURATION  with a unit (s, m, h); default 0 (fires at the first evaluation that holds)
 */
#ifndef TS_ALERT_H
#define TS_ALERT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pipeline/sink.h"
#include "sinks/window.h"

#define ALERT_MAX_RULES 16
/* The window metrics are computed over: window.h's slots, whist_quantile's percentiles (under
 * 3.2 % relative error, clamped to the window's exact minimum and maximum). */
#define ALERT_WINDOW_S 60

/* The latency metrics are the window's. */
enum alert_metric {
	AM_TTFT = WM_TTFT,
	AM_ITL = WM_ITL,
	AM_TPOT = WM_TPOT,
	AM_E2E = WM_E2E,
	AM_QUEUE = WM_QUEUE,
	AM_PREFILL = WM_PREFILL,
	AM_DECODE = WM_DECODE,
	AM_SUCCESS = WM_MAX,
	AM_RPS,
	AM_SLO, /* slo.attainment: the share of requests with objectives that met them all */
	AM_MAX,
};

enum alert_op { AO_GT, AO_GE, AO_LT, AO_LE };

struct alert_rule {
	char text[128]; /* as given, normalised */
	enum alert_metric metric;
	double quantile; /* latency metrics */
	enum alert_op op;
	double threshold; /* seconds, percent or requests/s */
	uint64_t for_ns;
	/* state */
	bool firing;
	uint64_t holding_since_ns; /* 0: the condition does not hold */
	double value;		   /* at the last evaluation; NAN when there were no samples */
	/* --alert-exec: the rule's running command, and the next one, started when it ends (a
	 * rule's commands run one at a time, in order: a resolve never overtakes its firing) */
	int exec_pid; /* 0: none running */
	bool exec_pending;
	char pend_state[16], pend_value[32], pend_cause[160];
};

struct alert_set {
	struct alert_rule rules[ALERT_MAX_RULES];
	int nrules;
	struct window win;    /* ALERT_WINDOW_S seconds, every latency metric kept */
	struct whist *merged; /* a metric over the window, at evaluation */
	uint64_t last_eval_s;
	const char *exec; /* --alert-exec command, or NULL */
	FILE *out;
	uint64_t fired, resolved;
};

/* Parses rule text into r; on error returns -EINVAL and writes a message naming the problem and
 * the expected form into err. */
int alert_parse(const char *text, struct alert_rule *r, char *err, size_t errlen);
int alert_init(struct alert_set *a, FILE *out, const char *exec);
int alert_add(struct alert_set *a, const struct alert_rule *r);
void alert_free(struct alert_set *a);
struct sink alert_sink(struct alert_set *a);
/* Evaluates every rule at kernel time now_ns (the sink's tick does this once per second). */
void alert_evaluate(struct alert_set *a, uint64_t now_ns);
/* Starts the --alert-exec commands still waiting for a rule's previous one, waiting up to
 * timeout_ms for those; says on a->out what it could not start. alert_free does this with 5 s. */
void alert_exec_drain(struct alert_set *a, int timeout_ms);
/* tokenscope_alert_firing{rule="..."} 0|1 for every rule, in the Prometheus text format. */
void alert_render_prom(void *alert_set, FILE *f);
/*
 * The command --alert-exec runs for a transition: `sh -c EXEC`, in this process's environment
 * (env) with TOKENSCOPE_ALERT_RULE, _STATE, _VALUE and _CAUSE set to the values given (each
 * replacing any of that name env holds). Built before fork, so that the child calls execve
 * alone: the tracer has threads, and a child of a threaded process may call only
 * async-signal-safe functions (setenv allocates: it could wait for ever on a lock another thread
 * held at the fork). The values go in the environment, never into the command line.
 */
#define ALERT_CMD_VARS 4
struct alert_cmd {
	char *argv[4];
	char **envp;		    /* NULL-terminated */
	char *vars[ALERT_CMD_VARS]; /* the four "NAME=value" strings envp holds */
};
/* 0, or -ENOMEM (nothing to free then). */
int alert_cmd_build(struct alert_cmd *c, const char *exec, char *const *env, const char *rule,
		    const char *state, const char *value, const char *cause);
void alert_cmd_free(struct alert_cmd *c);

#endif
