// SPDX-License-Identifier: MIT
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/duration.h"
#include "lib/escape.h"
#include "sinks/alert.h"
#include "pipeline/step.h"
#include "pipeline/request.h"

static const char *const metric_names[AM_MAX] = {
	[AM_TTFT] = "ttft",	[AM_ITL] = "itl",	  [AM_TPOT] = "tpot",
	[AM_E2E] = "e2e",	[AM_QUEUE] = "queue",	  [AM_PREFILL] = "prefill",
	[AM_DECODE] = "decode", [AM_SUCCESS] = "success", [AM_RPS] = "rps",
	[AM_SLO] = "slo",
};

static const char ALERT_FORM[] =
    "expected METRIC OP VALUE [for DURATION], e.g. 'ttft.p99 > 5s for 3m', "
    "'success < 99% for 5m', 'itl.p99 >= 200ms'; METRIC is ttft|itl|tpot|e2e|queue|prefill|"
    "decode.p50|p90|p95|p99|p999, success, rps or slo.attainment";

static bool is_latency(enum alert_metric m)
{
	return m < AM_SUCCESS;
}

static int fail(char *err, size_t n, const char *text, const char *what)
{
	snprintf(err, n, "bad alert rule '%s': %s; %s", text, what, ALERT_FORM);
	return -EINVAL;
}

int alert_parse(const char *text, struct alert_rule *r, char *err, size_t errlen)
{
	char buf[128], *tok[6], *save = NULL, *dot;
	int n = 0;

	memset(r, 0, sizeof(*r));
	r->value = NAN;
	if (strlen(text) >= sizeof(buf))
		return fail(err, errlen, text, "too long");
	strcpy(buf, text);
	for (char *t = strtok_r(buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
		if (n == 6)
			return fail(err, errlen, text, "too many words");
		tok[n++] = t;
	}
	if (n != 3 && n != 5)
		return fail(err, errlen, text, "wrong number of words");

	/* metric */
	dot = strchr(tok[0], '.');
	if (dot)
		*dot = 0;
	r->metric = AM_MAX;
	for (int m = 0; m < AM_MAX; m++)
		if (!strcmp(tok[0], metric_names[m]))
			r->metric = m;
	if (r->metric == AM_MAX)
		return fail(err, errlen, text, "unknown metric");
	if (is_latency(r->metric)) {
		static const struct {
			const char *name;
			double q;
		} qs[] = { { "p50", 0.5 },
			   { "p90", 0.9 },
			   { "p95", 0.95 },
			   { "p99", 0.99 },
			   { "p999", 0.999 } };

		if (!dot)
			return fail(err, errlen, text, "a latency needs a percentile (ttft.p99)");
		for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++)
			if (!strcmp(dot + 1, qs[i].name))
				r->quantile = qs[i].q;
		if (!r->quantile)
			return fail(err, errlen, text, "unknown percentile");
	} else if (r->metric == AM_SLO) {
		if (!dot || strcmp(dot + 1, "attainment"))
			return fail(err, errlen, text, "the SLO metric is slo.attainment");
	} else if (dot) {
		return fail(err, errlen, text, "success and rps take no percentile");
	}

	/* operator */
	if (!strcmp(tok[1], ">"))
		r->op = AO_GT;
	else if (!strcmp(tok[1], ">="))
		r->op = AO_GE;
	else if (!strcmp(tok[1], "<"))
		r->op = AO_LT;
	else if (!strcmp(tok[1], "<="))
		r->op = AO_LE;
	else
		return fail(err, errlen, text, "unknown operator");

	/* threshold */
	if (is_latency(r->metric)) {
		if (!duration_parse(tok[2], &r->threshold))
			return fail(err, errlen, text,
				    "a latency threshold needs a unit (us, ms, s)");
	} else {
		char *end;

		r->threshold = strtod(tok[2], &end);
		if (end == tok[2] || !isfinite(r->threshold) || r->threshold < 0)
			return fail(err, errlen, text, "bad number");
		if (r->metric == AM_SUCCESS && strcmp(end, "%"))
			return fail(err, errlen, text, "success is a percentage (99%)");
		if (r->metric == AM_RPS && *end)
			return fail(err, errlen, text, "rps is a plain number");
		/* A share: 0.95, or 95%. */
		if (r->metric == AM_SLO && !strcmp(end, "%"))
			r->threshold /= 100;
		else if (r->metric == AM_SLO && (*end || r->threshold > 1))
			return fail(err, errlen, text,
				    "slo.attainment is a share (0.95) or a percentage (95%)");
	}

	/* for */
	if (n == 5) {
		double s;

		if (strcmp(tok[3], "for"))
			return fail(err, errlen, text, "expected 'for'");
		if (!duration_parse(tok[4], &s))
			return fail(err, errlen, text,
				    "a duration needs a unit (s, m, h) and is at most 1e9 s");
		r->for_ns = (uint64_t)(s * NS_PER_S);
	}
	snprintf(r->text, sizeof(r->text), "%s", text);
	return 0;
}

int alert_init(struct alert_set *a, FILE *out, const char *exec)
{
	memset(a, 0, sizeof(*a));
	a->out = out;
	a->exec = exec;
	a->merged = malloc(sizeof(*a->merged));
	if (!a->merged || window_init(&a->win, ALERT_WINDOW_S, (1u << WM_MAX) - 1) < 0) {
		free(a->merged);
		a->merged = NULL;
		return -ENOMEM;
	}
	return 0;
}

int alert_add(struct alert_set *a, const struct alert_rule *r)
{
	if (a->nrules == ALERT_MAX_RULES)
		return -E2BIG;
	a->rules[a->nrules++] = *r;
	return 0;
}

void alert_free(struct alert_set *a)
{
	alert_exec_drain(a, 5000);
	window_free(&a->win);
	free(a->merged);
	a->merged = NULL;
}

static void alert_on_request(void *ctx, const struct request *r, const struct request_metrics *m,
			     const struct gpu_attribution *ga)
{
	struct alert_set *a = ctx;

	window_add_request(&a->win, r, m, ga);
}

/* The window of an evaluation at second now_s: the ALERT_WINDOW_S seconds ending with it. */
static void alert_sum(const struct alert_set *a, uint64_t now_s, struct win_counts *c,
		      uint32_t what, struct whist *h)
{
	window_sum(&a->win, now_s >= ALERT_WINDOW_S ? now_s - ALERT_WINDOW_S + 1 : 0, now_s, c,
		   what, h);
}

/* The rule's metric over the window ending at second now_s; NAN when there is nothing. */
static double alert_value(struct alert_set *a, const struct alert_rule *r, uint64_t now_s)
{
	struct win_counts c;
	double v;

	alert_sum(a, now_s, &c, is_latency(r->metric) ? WM_BIT(r->metric) : 0, a->merged);
	if (r->metric == AM_RPS)
		return (double)c.requests / ALERT_WINDOW_S;
	if (r->metric == AM_SUCCESS)
		return c.requests ? 100.0 * c.ok / c.requests : NAN;
	if (r->metric == AM_SLO)
		return c.slo_met + c.slo_missed ? (double)c.slo_met / (c.slo_met + c.slo_missed)
						: NAN;
	v = whist_quantile(a->merged, r->quantile);
	return v < 0 ? NAN : v / 1e9;
}

static bool alert_holds(const struct alert_rule *r, double v)
{
	if (isnan(v))
		return false;
	switch (r->op) {
	case AO_GT:
		return v > r->threshold;
	case AO_GE:
		return v >= r->threshold;
	case AO_LT:
		return v < r->threshold;
	case AO_LE:
		return v <= r->threshold;
	}
	return false;
}

/* Which objective the window's requests missed most, and where their TTFT went. */
static void alert_slo_cause(const struct win_counts *c, char *out, size_t n)
{
	int worst = 0;
	size_t at;

	for (int k = 1; k < SLO_METRICS; k++)
		if (c->slo_missed_by[k] > c->slo_missed_by[worst])
			worst = k;
	at = (size_t)snprintf(out, n, "%s missed by %u of %u requests", slo_metric_names[worst],
			      c->slo_missed_by[worst], c->slo_met + c->slo_missed);
	if (at < n && c->ttft_ns && (worst == SLO_TTFT || worst == SLO_E2E))
		snprintf(out + at, n - at, " (queue %.0f%%, prefill %.0f%% of TTFT in the window)",
			 100.0 * c->queue_ns / c->ttft_ns, 100.0 * c->prefill_ns / c->ttft_ns);
	else if (at < n && c->gpu_ns + c->host_ns && worst == SLO_TPOT)
		snprintf(out + at, n - at, " (GPU %.0f%%, host %.0f%% of the token gaps)",
			 100.0 * c->gpu_ns / (c->gpu_ns + c->host_ns),
			 100.0 * c->host_ns / (c->gpu_ns + c->host_ns));
}

/* The likely cause, from the attribution of the window's requests. */
static void alert_cause(const struct alert_set *a, const struct alert_rule *r, uint64_t now_s,
			char *out, size_t n)
{
	struct win_counts c;
	uint64_t ttft, queue, prefill, gpu, host;

	alert_sum(a, now_s, &c, 0, NULL);
	ttft = c.ttft_ns, queue = c.queue_ns, prefill = c.prefill_ns;
	gpu = c.gpu_ns, host = c.host_ns;
	if ((r->metric == AM_TTFT || r->metric == AM_QUEUE || r->metric == AM_PREFILL) && ttft) {
		snprintf(out, n, "%s (queue %.0f%%, prefill %.0f%% of TTFT in the window)",
			 queue >= prefill ? "queueing" : "prefill", 100.0 * queue / ttft,
			 100.0 * prefill / ttft);
	} else if ((r->metric == AM_ITL || r->metric == AM_TPOT || r->metric == AM_DECODE) &&
		   gpu + host) {
		snprintf(out, n, "%s (GPU %.0f%%, host %.0f%% of the token gaps in the window)",
			 gpu >= host ? "the GPU step" : "the host around it",
			 100.0 * gpu / (gpu + host), 100.0 * host / (gpu + host));
	} else if (r->metric == AM_SLO && c.slo_missed) {
		alert_slo_cause(&c, out, n);
	} else {
		snprintf(out, n, "unknown (no GPU attribution)");
	}
}

static void alert_format_value(const struct alert_rule *r, double v, char *out, size_t n)
{
	if (isnan(v))
		snprintf(out, n, "no data");
	else if (r->metric == AM_SUCCESS)
		snprintf(out, n, "%.2f%%", v);
	else if (r->metric == AM_RPS)
		snprintf(out, n, "%.2f/s", v);
	else if (r->metric == AM_SLO)
		snprintf(out, n, "%.1f%%", 100 * v);
	else if (v < 1)
		snprintf(out, n, "%.1f ms", v * 1e3);
	else
		snprintf(out, n, "%.2f s", v);
}

/* Whether r's last command still runs. */
static bool exec_running(struct alert_rule *r)
{
	if (r->exec_pid > 0 && waitpid(r->exec_pid, NULL, WNOHANG) != 0)
		r->exec_pid = 0; /* ended (or reaped already: ECHILD) */
	return r->exec_pid > 0;
}

static const char *const alert_cmd_names[ALERT_CMD_VARS] = {
	"TOKENSCOPE_ALERT_RULE",
	"TOKENSCOPE_ALERT_STATE",
	"TOKENSCOPE_ALERT_VALUE",
	"TOKENSCOPE_ALERT_CAUSE",
};

/* Whether the environment entry e names one of the variables the command is given. */
static bool alert_cmd_own(const char *e)
{
	for (int i = 0; i < ALERT_CMD_VARS; i++) {
		size_t n = strlen(alert_cmd_names[i]);

		if (!strncmp(e, alert_cmd_names[i], n) && e[n] == '=')
			return true;
	}
	return false;
}

int alert_cmd_build(struct alert_cmd *c, const char *exec, char *const *env, const char *rule,
		    const char *state, const char *value, const char *cause)
{
	const char *values[ALERT_CMD_VARS] = { rule, state, value, cause };
	size_t n = 0, k = 0;

	memset(c, 0, sizeof(*c));
	while (env && env[n])
		n++;
	c->envp = malloc((n + ALERT_CMD_VARS + 1) * sizeof(*c->envp));
	if (!c->envp)
		return -ENOMEM;
	for (int i = 0; i < ALERT_CMD_VARS; i++) {
		if (asprintf(&c->vars[i], "%s=%s", alert_cmd_names[i], values[i]) < 0) {
			c->vars[i] = NULL;
			alert_cmd_free(c);
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < n; i++)
		if (!alert_cmd_own(env[i]))
			c->envp[k++] = env[i];
	for (int i = 0; i < ALERT_CMD_VARS; i++)
		c->envp[k++] = c->vars[i];
	c->envp[k] = NULL;
	c->argv[0] = "sh";
	c->argv[1] = "-c";
	c->argv[2] = (char *)exec;
	c->argv[3] = NULL;
	return 0;
}

void alert_cmd_free(struct alert_cmd *c)
{
	for (int i = 0; i < ALERT_CMD_VARS; i++)
		free(c->vars[i]);
	free(c->envp);
	memset(c, 0, sizeof(*c));
}

static void exec_spawn(struct alert_set *a, struct alert_rule *r, const char *state,
		       const char *value, const char *cause)
{
	struct alert_cmd c;
	pid_t pid;

	if (alert_cmd_build(&c, a->exec, environ, r->text, state, value, cause)) {
		fprintf(a->out, "tokenscope: --alert-exec: out of memory\n");
		return;
	}
	pid = fork();
	if (pid == 0) {
		execve("/bin/sh", c.argv, c.envp);
		_exit(127);
	}
	if (pid < 0)
		fprintf(a->out, "tokenscope: --alert-exec: fork failed: %s\n", strerror(errno));
	r->exec_pid = pid > 0 ? pid : 0;
	alert_cmd_free(&c);
}

/* Starts the pending command of r if its previous one has ended. */
static void exec_pending_start(struct alert_set *a, struct alert_rule *r)
{
	if (!r->exec_pending || exec_running(r))
		return;
	r->exec_pending = false;
	exec_spawn(a, r, r->pend_state, r->pend_value, r->pend_cause);
}

/*
 * Runs the command for a transition of r, never waiting for it. While r's previous command
 * still runs, the new one waits its turn (checked at every evaluation); a later transition
 * replaces a waiting one: the command then hears the latest state.
 */
static void alert_run_exec(struct alert_set *a, struct alert_rule *r, const char *state,
			   const char *value, const char *cause)
{
	if (!a->exec)
		return;
	if (exec_running(r)) {
		r->exec_pending = true;
		snprintf(r->pend_state, sizeof(r->pend_state), "%s", state);
		snprintf(r->pend_value, sizeof(r->pend_value), "%s", value);
		snprintf(r->pend_cause, sizeof(r->pend_cause), "%s", cause);
		return;
	}
	exec_spawn(a, r, state, value, cause);
}

void alert_exec_drain(struct alert_set *a, int timeout_ms)
{
	for (int waited = 0;; waited += 10) {
		bool left = false;

		for (int i = 0; i < a->nrules; i++) {
			exec_pending_start(a, &a->rules[i]);
			left |= a->rules[i].exec_pending;
		}
		if (!left)
			return;
		if (waited >= timeout_ms)
			break;
		usleep(10000);
	}
	for (int i = 0; i < a->nrules; i++)
		if (a->rules[i].exec_pending)
			fprintf(a->out,
				"tokenscope: --alert-exec: not run for '%s' (%s): the command for "
				"its previous state still runs after %d ms\n",
				a->rules[i].text, a->rules[i].pend_state, timeout_ms);
}

void alert_evaluate(struct alert_set *a, uint64_t now_ns)
{
	uint64_t now_s = now_ns / NS_PER_S;

	for (int i = 0; i < a->nrules; i++)
		exec_pending_start(a, &a->rules[i]);

	for (int i = 0; i < a->nrules; i++) {
		struct alert_rule *r = &a->rules[i];
		char value[32], cause[160];
		bool holds;

		r->value = alert_value(a, r, now_s);
		holds = alert_holds(r, r->value);
		if (!holds) {
			r->holding_since_ns = 0;
			if (r->firing) {
				r->firing = false;
				a->resolved++;
				alert_format_value(r, r->value, value, sizeof(value));
				fprintf(a->out,
					"tokenscope: alert RESOLVED '%s': value %s over the last "
					"%d s\n",
					r->text, value, ALERT_WINDOW_S);
				fflush(a->out);
				alert_run_exec(a, r, "resolved", value, "");
			}
			continue;
		}
		if (!r->holding_since_ns)
			r->holding_since_ns = now_ns;
		if (r->firing || now_ns - r->holding_since_ns < r->for_ns)
			continue;
		r->firing = true;
		a->fired++;
		alert_format_value(r, r->value, value, sizeof(value));
		alert_cause(a, r, now_s, cause, sizeof(cause));
		fprintf(a->out,
			"tokenscope: alert FIRING '%s': value %s over the last %d s; likely "
			"cause: %s\n",
			r->text, value, ALERT_WINDOW_S, cause);
		fflush(a->out);
		alert_run_exec(a, r, "firing", value, cause);
	}
}

static void alert_on_tick(void *ctx, const struct pipeline_status *st)
{
	struct alert_set *a = ctx;
	uint64_t now_ns = st->now_ns;

	/* Once per second of kernel time. */
	if (!now_ns || now_ns / NS_PER_S == a->last_eval_s)
		return;
	a->last_eval_s = now_ns / NS_PER_S;
	alert_evaluate(a, now_ns);
}

/* The end of a run (or of a replayed recording shorter than a second) is evaluated too. */
static void alert_on_finish(void *ctx, const struct pipeline_status *st)
{
	struct alert_set *a = ctx;

	if (st->now_ns)
		alert_evaluate(a, st->now_ns);
}

struct sink alert_sink(struct alert_set *a)
{
	return (struct sink){
		.name = "alerts",
		.ctx = a,
		.request = alert_on_request,
		.tick = alert_on_tick,
		.finish = alert_on_finish,
	};
}

void alert_render_prom(void *ctx, FILE *f)
{
	const struct alert_set *a = ctx;

	if (!a->nrules)
		return;
	fprintf(f,
		"# HELP tokenscope_alert_firing Whether an --alert rule is firing (1) or not (0).\n"
		"# TYPE tokenscope_alert_firing gauge\n");
	for (int i = 0; i < a->nrules; i++) {
		fputs("tokenscope_alert_firing{", f);
		escape_prom_label_file(f, "rule", a->rules[i].text);
		fprintf(f, "} %d\n", a->rules[i].firing ? 1 : 0);
	}
}
