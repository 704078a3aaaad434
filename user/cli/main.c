// SPDX-License-Identifier: MIT
/*
 * tokenscope: per-request TTFT, inter-token latency, tokens/s and end-to-end latency of a
 * running LLM streaming server, measured from the kernel.
 */
#include <argp.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/types.h>

#include "events.h"
#include "sinks/httpd.h"
#include "cli/report.h"
#include "loader/check.h"
#include "loader/run.h"
#include "loader/trace.h"
#include "lib/clock.h"
#include "lib/duration.h"
#include "lib/wrap.h"
#include "session/session.h"
#include "lib/version.h"

static volatile sig_atomic_t exiting;

/* The first SIGINT or SIGTERM ends the trace (the summary, the exporters' last batches); a
 * second one leaves the probes' removal to the kernel in the background if that is under way
 * (trace.h), and otherwise ends the process at once. Nothing is left stopped: the hold watchdog
 * continues what is held. */
static void on_signal(int sig)
{
	static const char msg[] = "tokenscope: interrupted again: exiting now\n";

	if (exiting == TRACE_RUNNING) {
		exiting = TRACE_ENDING;
	} else if (exiting == TRACE_REMOVING) {
		exiting = TRACE_LEAVE;
	} else if (exiting != TRACE_LEAVE) {
		if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
			_exit(128 + sig);
		_exit(128 + sig);
	}
}

const char *argp_program_version = "tokenscope " TOKENSCOPE_VERSION;
/* Usage errors exit 2, like the other errors of this kind in the tool. */
error_t argp_err_exit_status = 2;

static const char trace_doc[] =
    "Trace the streamed LLM requests a running server handles, from the kernel.\n"
    "\n"
    "EXAMPLES:\n"
    "  tokenscope trace -p 1234         # a line per request; a summary on Ctrl-C\n"
    "  tokenscope trace -p 1234 --json  # one JSON object per request\n"
    "  tokenscope trace -p 1234 --json --tokens   # ... with every token's time\n"
    "  tokenscope trace -p 1234 -d 30   # stop after 30 s\n"
    "  tokenscope trace -p 1234 10      # also a summary every 10 s\n"
    "  tokenscope trace -p 1234 10 6    # six 10 s summaries, then stop\n"
    "  tokenscope trace -p 1234 --listen :9464   # /metrics on 127.0.0.1:9464\n"
    "  tokenscope trace -p 1234 -d 60 --html run.html   # a report page at the end\n"
    "  tokenscope trace --all --listen :9464 --by-process   # ... with a pid label\n";

enum {
	OPT_TOKENS = 0x100,
	OPT_CAPTURE,
	OPT_RING,
	OPT_GPU_STEPS,
	OPT_KERNELS,
	OPT_LISTEN,
	OPT_TIMELINE,
	OPT_HTML,
	OPT_ALERT,
	OPT_ALERT_EXEC,
	OPT_PROMETHEUS,
	OPT_OTLP,
	OPT_SLOW_TTFT,
	OPT_SLOW_ITL,
	OPT_TRACE_SAMPLE,
	OPT_TRACE_WARM_UP,
	OPT_REQUESTS,
	OPT_OTLP_CA,
	OPT_ALL,
	OPT_NO_TRAFFIC,
	OPT_BY_PROCESS,
	OPT_DEVICE_TIMES,
	OPT_CONTAINER_STATE,
	OPT_NO_POD_LABELS,
	OPT_SELF_STATS,
	OPT_SLO,
	OPT_STALL_MS,
	OPT_LABEL,
	OPT_LABEL_TOP,
};

/* The options trace, record, top, run and report share (parse_shared): how requests are
 * shown, and the exporters that work on a replay too. Listed here once; each command's table
 * is its own options and these (options_with_shared). */
static const struct argp_option shared_options[] = {
	{ NULL, 0, NULL, 0, "Requests, files and exporters:", 1 },
	{ "json", 'j', NULL, 0, "One JSON object per finished request on stdout", 0 },
	{ "tokens", OPT_TOKENS, NULL, 0, "With --json: every content frame's time (token_ns)", 0 },
	{ "gpu-steps", OPT_GPU_STEPS, NULL, 0, "Also a line (or JSON object) per GPU step", 0 },
	{ "verbose", 'v', NULL, 0, "Report process forks and exits (live: and libbpf's messages)",
	  0 },
	{ "requests", OPT_REQUESTS, "WHICH", 0,
	  "inference (default): health checks, scrapes, /v1/models... counted apart; all: alike",
	  0 },
	{ "timeline", OPT_TIMELINE, "FILE", 0,
	  "Write a timeline of requests and GPU steps (Perfetto, chrome://tracing)", 0 },
	{ "html", OPT_HTML, "FILE", 0,
	  "Write an HTML report (charts, losses, diagnosis) to FILE at the end", 0 },
	{ "alert", OPT_ALERT, "RULE", 0, "Alert rule, e.g. 'ttft.p99 > 5s for 3m' (repeatable)",
	  0 },
	{ "alert-exec", OPT_ALERT_EXEC, "CMD", 0, "Run CMD when an alert fires or resolves", 0 },
	{ "slo", OPT_SLO, "SLO", 0,
	  "Judge every request on these objectives, e.g. 'ttft<=2s,tpot<=80ms,e2e<=30s' or "
	  "'model=llama*:ttft<=1s' (repeatable); llm-d's x-llm-d-slo-* headers override them",
	  0 },
	{ "stall-ms", OPT_STALL_MS, "MS", 0,
	  "A gap between two tokens of MS or more is a stall, its cause named (default: 3 "
	  "times the request's median gap, at least 50)",
	  0 },
	{ "label", OPT_LABEL, "NAME=SRC", 0,
	  "A request label from a header ('tenant=header:X-Tenant-Id') or a body value "
	  "('user=body:user', a dotted path; never a prompt field): in JSON and OTLP, a "
	  "Prometheus label, and the SLO lines split by it (repeatable, up to 4)",
	  0 },
	{ "label-top", OPT_LABEL_TOP, "K", 0,
	  "--label: values kept per label in Prometheus, those first seen on 2 requests; the "
	  "rest are 'other' (default 20)",
	  0 },
	{ "otlp", OPT_OTLP, "URL", 0,
	  "Send OpenTelemetry spans to an OTLP/HTTP collector (http[s]://host:4318/v1/traces), "
	  "or write them to a file (file:PATH); a replay's at the recording's times",
	  0 },
	{ "otlp-ca", OPT_OTLP_CA, "FILE", 0,
	  "--otlp https: verify the collector with these CA certificates (PEM)", 0 },
	{ "slow-ttft", OPT_SLOW_TTFT, "DUR", 0,
	  "--otlp: a request with a slower TTFT is exported in full (e.g. 2s)", 0 },
	{ "slow-itl", OPT_SLOW_ITL, "DUR", 0,
	  "--otlp: a request with a slower token gap is exported in full (e.g. 200ms)", 0 },
	{ "trace-sample", OPT_TRACE_SAMPLE, "RATIO", 0,
	  "--otlp: share of normal requests exported as summary spans (default 0.01)", 0 },
	{ "trace-warm-up", OPT_TRACE_WARM_UP, "N", 0,
	  "--otlp: the first N requests are exported whatever the ratio (default 20)", 0 },
	{},
};

static const struct argp_option trace_options[] = {
	{ "pid", 'p', "PID", 0, "Trace this process and its descendants (repeatable)", 0 },
	{ "all", OPT_ALL, NULL, 0,
	  "Find the inference servers on the node (vLLM, SGLang, TGI, llama.cpp, Ollama, and any "
	  "process seen writing streamed completions), also ones started later",
	  0 },
	{ "no-traffic", OPT_NO_TRAFFIC, NULL, 0,
	  "With --all: find servers by command line only, not by the frames they write", 0 },
	{ "by-process", OPT_BY_PROCESS, NULL, 0,
	  "A pid label on the request metrics (--listen); top: a row per model and process", 0 },
	{ "no-pod-labels", OPT_NO_POD_LABELS, NULL, 0,
	  "No namespace and pod labels on the request metrics of servers in Kubernetes pods", 0 },
	{ "container-state", OPT_CONTAINER_STATE, "DIR", 0,
	  "Also look in DIR for the container runtime's bundles, to name a server's pod "
	  "(containerd's or CRI-O's run directory; repeatable)",
	  0 },
	{ "kernels", OPT_KERNELS, NULL, 0,
	  "Also a line per CUDA launch and copy (a ring-buffer record each: costly)", 0 },
	{ "device-times", OPT_DEVICE_TIMES, "MODE", 0,
	  "From the CUPTI library: sampled (default: eager kernels 1 s in 10 s), all (every "
	  "step: costly), off",
	  0 },
	{ "duration", 'd', "SEC", 0, "Stop after SEC seconds", 0 },
	{ "capture-bytes", OPT_CAPTURE, "N", 0,
	  "Bytes copied per syscall (default 65536); more is counted as a gap", 0 },
	{ "ring-buffer-mb", OPT_RING, "MB", 0,
	  "Ring buffer size, a power of two (default 2); larger if records are lost", 0 },
	{ "self-stats", OPT_SELF_STATS, NULL, 0,
	  "Turn the kernel's BPF run-time counting (kernel.bpf_stats_enabled) on for the run, "
	  "so that its cost says the BPF time (it adds a few tens of ns per program run)",
	  0 },
	{ "listen", OPT_LISTEN, "ADDR:PORT", 0,
	  "Serve Prometheus metrics at http://ADDR:PORT/metrics (:PORT or PORT: on 127.0.0.1)", 0 },
	{ "output", 'o', "FILE", 0, "record: the file to write the event stream to", 0 },
	{},
};

/* The commands that share trace_options; each is handed only the options it uses, so argp
 * refuses the others by name ("tokenscope top: unrecognized option '--json'") and --help lists
 * what works. */
enum {
	CMD_TRACE = 1 << 0,
	CMD_RECORD = 1 << 1,
	CMD_TOP = 1 << 2,
	CMD_RUN = 1 << 3,
};

/* The commands that use an option of trace_options. */
static unsigned int option_commands(int key)
{
	switch (key) {
	/* run traces the command it starts; it keeps -p and --all to say so. */
	case OPT_NO_TRAFFIC:
		return CMD_TRACE | CMD_RECORD | CMD_TOP;
	/* Request lines, GPU step lines and launch records: top draws a table instead. */
	case 'j':
	case OPT_TOKENS:
	case OPT_GPU_STEPS:
	case OPT_KERNELS:
		return CMD_TRACE | CMD_RECORD | CMD_RUN;
	case 'o':
		return CMD_RECORD;
	default:
		return CMD_TRACE | CMD_RECORD | CMD_TOP | CMD_RUN;
	}
}

/* Up to here the options of cmd out of trace_options, ended by a zero entry. */
#define TRACE_OPTIONS_MAX 64

/* The entries of tab that cmd uses (all of them when cmd is 0) after out's first n; returns
 * the new count. */
static size_t options_append(struct argp_option *out, size_t n, const struct argp_option *tab,
			     unsigned int cmd)
{
	for (const struct argp_option *o = tab; o->name || o->key || o->doc; o++) {
		if ((cmd && !(option_commands(o->key) & cmd)) || n + 1 >= TRACE_OPTIONS_MAX)
			continue;
		out[n] = *o;
		/* run takes -p and --all only to say why it refuses them: not in its --help. */
		if (cmd == CMD_RUN && (o->key == 'p' || o->key == OPT_ALL))
			out[n].flags |= OPTION_HIDDEN;
		n++;
	}
	out[n] = (struct argp_option){};
	return n;
}

/* A command's table: its own options, then the shared ones it uses. */
static void options_with_shared(const struct argp_option *own, unsigned int cmd,
				struct argp_option *out)
{
	options_append(out, options_append(out, 0, own, cmd), shared_options, cmd);
}

static void options_for(unsigned int cmd, struct argp_option *out)
{
	options_with_shared(trace_options, cmd, out);
}

/*
 * The smallest --capture-bytes: a chat completion's request line. With fewer bytes of each
 * read no connection is recognised as HTTP, so nothing at all would be reported.
 */
#define CAPTURE_MIN_LINE "POST /v1/chat/completions HTTP/1.1\r\n"
#define CAPTURE_MIN ((int)sizeof(CAPTURE_MIN_LINE) - 1)

static int parse_double(const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	/* strtod reads "nan" and "inf" too: -d nan would never end. */
	return errno || end == s || *end || !isfinite(*out) || *out < 0 ? -EINVAL : 0;
}

static int parse_ulong(const char *s, unsigned long max, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(s, &end, 10);
	return errno || end == s || *end || *out > max || s[0] == '-' ? -EINVAL : 0;
}

/* Set by cmd_record: the same options as trace, plus -o. */
static bool recording;
/* Set by cmd_top: the same options as trace, a live view instead of lines. */
static bool live_view;
/* Set by cmd_run: the same options as trace, then the command to start and trace. */
static bool running;
static char **run_argv;
/* The last option given that only --otlp uses (--slow-ttft, ...), to refuse it without. */
static const char *otlp_only;

/* Checks an --alert rule now, so a bad one is refused before anything is attached. */
static void export_add_alert(struct export_opts *ex, const char *text, struct argp_state *state)
{
	struct alert_rule r;
	char msg[512];

	if (alert_parse(text, &r, msg, sizeof(msg)))
		argp_error(state, "%s", msg);
	if (ex->nalerts == ALERT_MAX_RULES)
		argp_error(state, "at most %d --alert rules", ALERT_MAX_RULES);
	ex->alerts[ex->nalerts++] = text;
}

/* The options trace, record and report share: how requests are shown, and the exporters
 * that work on a replay too (all but --listen). Returns true when key was one of them. */
struct shown {
	bool *json, *tokens, *gpu_steps, *verbose, *all_requests;
};

static bool parse_shared(int key, char *arg, struct argp_state *state, const struct shown *sh,
			 struct export_opts *ex)
{
	switch (key) {
	case 'j':
		*sh->json = true;
		return true;
	case OPT_TOKENS:
		*sh->tokens = true;
		return true;
	case OPT_GPU_STEPS:
		*sh->gpu_steps = true;
		return true;
	case 'v':
		*sh->verbose = true;
		return true;
	case OPT_REQUESTS:
		if (strcmp(arg, "inference") && strcmp(arg, "all"))
			argp_error(state, "invalid --requests '%s' (inference or all)", arg);
		*sh->all_requests = !strcmp(arg, "all");
		return true;
	case OPT_TIMELINE:
		ex->timeline = arg;
		return true;
	case OPT_HTML:
		ex->html = arg;
		return true;
	case OPT_ALERT:
		export_add_alert(ex, arg, state);
		return true;
	case OPT_ALERT_EXEC:
		ex->alert_exec = arg;
		return true;
	case OPT_OTLP: {
		struct otlp_url u;
		char msg[256];

		if (otlp_parse_url(arg, &u, msg, sizeof(msg)))
			argp_error(state, "invalid --otlp '%s': %s", arg, msg);
		ex->otlp_url = arg;
		return true;
	}
	case OPT_SLOW_TTFT:
	case OPT_SLOW_ITL: {
		double s;

		if (!duration_parse(arg, &s))
			argp_error(state, "invalid duration '%s' (with a unit: 200ms, 2s)", arg);
		*(key == OPT_SLOW_TTFT ? &ex->slow_ttft_ns : &ex->slow_itl_ns) = (int64_t)(s * 1e9);
		otlp_only = key == OPT_SLOW_TTFT ? "--slow-ttft" : "--slow-itl";
		return true;
	}
	case OPT_TRACE_SAMPLE:
		if (parse_double(arg, &ex->trace_sample) || ex->trace_sample > 1)
			argp_error(state, "invalid --trace-sample '%s' (0..1)", arg);
		otlp_only = "--trace-sample";
		return true;
	case OPT_TRACE_WARM_UP: {
		unsigned long n;

		if (parse_ulong(arg, UINT32_MAX, &n))
			argp_error(state, "invalid --trace-warm-up '%s' (a count)", arg);
		ex->trace_warm_up = (uint32_t)n;
		otlp_only = "--trace-warm-up";
		return true;
	}
	case OPT_OTLP_CA:
		ex->otlp_ca = arg;
		return true;
	case OPT_SLO: {
		char msg[512];

		if (slo_parse(&ex->slo, arg, msg, sizeof(msg)))
			argp_error(state, "%s", msg);
		return true;
	}
	case OPT_STALL_MS: {
		double ms;

		if (parse_double(arg, &ms) || ms <= 0 || ms > 3.6e6)
			argp_error(state, "invalid --stall-ms '%s' (milliseconds, above 0)", arg);
		ex->stall_ns = (uint64_t)(ms * 1e6);
		return true;
	}
	case OPT_LABEL: {
		char msg[512];

		if (req_labels_parse(&ex->labels, arg, msg, sizeof(msg)))
			argp_error(state, "%s", msg);
		return true;
	}
	case OPT_LABEL_TOP: {
		unsigned long k;

		if (parse_ulong(arg, 1000, &k) || !k)
			argp_error(state, "invalid --label-top '%s' (1..1000)", arg);
		ex->label_top = (uint32_t)k;
		return true;
	}
	}
	return false;
}

/* At the end of the command line: the shared options that only work with another one. */
static void shared_check(struct argp_state *state, const struct export_opts *ex)
{
	if (ex->otlp_ca && !ex->otlp_url)
		argp_error(state, "--otlp-ca is for --otlp https://...");
	if (otlp_only && !ex->otlp_url)
		argp_error(state, "%s chooses the spans --otlp sends: give --otlp", otlp_only);
	if (ex->alert_exec && !ex->nalerts)
		argp_error(state, "--alert-exec runs when an --alert rule fires: give --alert");
	if (ex->label_top && !ex->labels.n)
		argp_error(state, "--label-top caps the values of --label: give --label");
}

/* What trace, record, top and run are told: the live tracer's options and its session's. */
struct tracer_cli {
	struct trace_opts t;
	struct session_opts s;
};

/* A positional argument of trace, record, top or run: run's command (the rest of the line is
 * its), or the interval and the count. */
static void trace_positional(struct trace_opts *o, char *arg, struct argp_state *state)
{
	static int positional;
	unsigned long v;

	if (running) {
		/* The command and its arguments: nothing after it is tokenscope's. */
		run_argv = &state->argv[state->next - 1];
		state->next = state->argc;
		return;
	}
	if (live_view)
		argp_error(state,
			   "unexpected argument '%s': top redraws every second "
			   "(an interval [count] is for trace and record)",
			   arg);
	if (positional == 0) {
		if (parse_double(arg, &o->interval_s) || o->interval_s == 0)
			argp_error(state, "invalid interval '%s' (seconds, > 0)", arg);
	} else if (positional == 1) {
		if (parse_ulong(arg, LONG_MAX, &v) || v == 0)
			argp_error(state, "invalid count '%s'", arg);
		o->count = v;
	} else {
		argp_error(state, "unexpected argument '%s'", arg);
	}
	positional++;
}

/* The end of the command line of trace, record, top or run: what needs another option. */
static void trace_end(struct trace_opts *o, struct session_opts *so, struct argp_state *state)
{
	if (running) {
		if (!run_argv)
			argp_error(state, "no command given: tokenscope run [OPTION...] -- "
					  "CMD [ARG...]");
		if (o->npids || o->all)
			argp_error(state, "run traces the command it starts: -p and --all "
					  "are for trace");
	} else if (!o->npids && !o->all) {
		argp_error(state, "no process given: use -p PID or --all");
	}
	if (o->no_traffic && !o->all)
		argp_error(state, "--no-traffic is for --all");
	shared_check(state, &so->ex);
	if (so->ex.no_pod_labels && !so->ex.listen)
		argp_error(state, "--no-pod-labels is for the metrics of --listen");
	if (so->by_process && !live_view && !so->ex.listen)
		argp_error(state, "--by-process labels the metrics of --listen (or splits "
				  "the rows of tokenscope top): give --listen");
	so->ex.by_process = so->by_process;
	so->verbose = o->verbose;
	so->gpu_calls = o->gpu_calls;
	if (recording != !!so->record.path)
		argp_error(state,
			   recording ? "record needs -o FILE" : "-o is for tokenscope record");
	if (so->tokens && !so->json)
		argp_error(state, "--tokens needs --json");
}

static error_t trace_parse(int key, char *arg, struct argp_state *state)
{
	struct tracer_cli *c = state->input;
	struct trace_opts *o = &c->t;
	struct session_opts *so = &c->s;
	const struct shown sh = { &so->json, &so->tokens, &so->gpu_steps, &o->verbose,
				  &so->all_requests };
	unsigned long v;

	if (parse_shared(key, arg, state, &sh, &so->ex))
		return 0;
	switch (key) {
	case 'p':
		if (parse_ulong(arg, INT_MAX, &v) || v == 0)
			argp_error(state, "invalid PID '%s'", arg);
		if (o->npids == PIPELINE_MAX_ROOTS)
			argp_error(state, "at most %d -p options", PIPELINE_MAX_ROOTS);
		o->pids[o->npids++] = v;
		break;
	case OPT_KERNELS:
		o->gpu_calls = true;
		break;
	case OPT_DEVICE_TIMES:
		if (!strcmp(arg, "sampled"))
			o->device_times = UPROBES_DEVICE_SAMPLED;
		else if (!strcmp(arg, "all"))
			o->device_times = UPROBES_DEVICE_ALL;
		else if (!strcmp(arg, "off"))
			o->device_times = UPROBES_DEVICE_OFF;
		else
			argp_error(state, "invalid --device-times '%s' (sampled, all or off)", arg);
		break;
	case 'd':
		if (parse_double(arg, &o->duration_s) || o->duration_s == 0)
			argp_error(state, "invalid duration '%s' (seconds, > 0)", arg);
		break;
	case OPT_CAPTURE:
		if (parse_ulong(arg, TS_CAPTURE_MAX, &v))
			argp_error(state, "invalid --capture-bytes '%s' (%d..%d)", arg, CAPTURE_MIN,
				   TS_CAPTURE_MAX);
		if (v < CAPTURE_MIN)
			argp_error(
			    state,
			    "--capture-bytes %lu is too small: at least %d, the request line "
			    "of a chat completion (POST /v1/chat/completions HTTP/1.1); with "
			    "less no connection is recognised as HTTP and nothing is reported",
			    v, CAPTURE_MIN);
		o->capture_bytes = v;
		break;
	case OPT_RING:
		if (parse_ulong(arg, TS_RING_MAX_MB, &v) || v == 0 || (v & (v - 1)))
			argp_error(state, "invalid --ring-buffer-mb '%s' (a power of two, 1..%d)",
				   arg, TS_RING_MAX_MB);
		o->ring_mb = v;
		break;
	case OPT_LISTEN: {
		struct sockaddr_storage addr;
		socklen_t addrlen;

		if (httpd_parse_listen(arg, &addr, &addrlen))
			argp_error(state, "invalid --listen '%s' (ADDR:PORT, :PORT or PORT)", arg);
		so->ex.listen = arg;
		break;
	}
	case 'o':
		so->record.path = arg;
		break;
	case OPT_ALL:
		o->all = true;
		break;
	case OPT_NO_TRAFFIC:
		o->no_traffic = true;
		break;
	case OPT_SELF_STATS:
		o->self_stats = true;
		break;
	case OPT_BY_PROCESS:
		so->by_process = true;
		break;
	case OPT_NO_POD_LABELS:
		so->ex.no_pod_labels = true;
		break;
	case OPT_CONTAINER_STATE:
		if (o->ncontainer_state == TRACE_STATE_DIRS_MAX)
			argp_error(state, "at most %d --container-state directories",
				   TRACE_STATE_DIRS_MAX);
		if (access(arg, R_OK | X_OK))
			argp_error(state, "--container-state %s: %s", arg, strerror(errno));
		o->container_state[o->ncontainer_state++] = arg;
		break;
	case ARGP_KEY_ARG:
		trace_positional(o, arg, state);
		break;
	case ARGP_KEY_END:
		trace_end(o, so, state);
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* The options of trace, record, top and run before the command line is read. */
static struct tracer_cli trace_defaults(void)
{
	return (struct tracer_cli){
		.t = { .capture_bytes = TS_CAPTURE_DEFAULT, .ring_mb = TS_RING_DEFAULT_MB },
		.s = { .ex.trace_sample = OTLP_DEFAULT_RATIO, .ex.trace_warm_up = OTLP_WARM_UP }
	};
}

/* A trace (or, with run_argv, tokenscope run): the session that owns its pipeline and sinks,
 * and the live tracer feeding it. Returns the exit status. */
static int traced(struct tracer_cli *c, char *const run_argv[])
{
	struct session s;
	struct trace_hooks h = { session_begin, c->s.top ? session_key : NULL, session_finish, &s };
	uint64_t origin;
	int rc, err;

	if (trace_check(&c->t))
		return 1;
	/* Not while an earlier run's probes are still being taken off: its time is no part of
	 * this run's. */
	trace_wait_earlier();
	/* Every record is later than now (the clock of bpf_ktime_get_ns): the timeline's 0. */
	origin = mono_ns();
	/* Lines for a person (not JSON, not the live view's frames): within 100 columns. */
	if (!c->s.json && !c->s.top) {
		FILE *w = wrap_open(stdout, WRAP_WIDTH);

		if (w)
			stdout = w;
	}
	/* record: the header names the capture size and the processes named with -p. */
	c->s.record.capture_bytes = c->t.capture_bytes;
	c->s.record.roots = c->t.pids;
	c->s.record.nroots = c->t.npids;
	err = session_start(&s, &c->s, origin);
	/* The outputs say whether the loader samples the GPUs for them. */
	c->t.device_samples = !err && session_device_samples(&s);
	if (err)
		rc = 1;
	else if (run_argv)
		rc = run_command(&c->t, session_pipeline(&s), &h, run_argv, &exiting);
	else
		rc = trace_run(&c->t, session_pipeline(&s), &h, &exiting) ? 1 : 0;
	err = session_stop(&s);
	return err && !run_argv ? 1 : rc;
}

/* trace, record and top: the same loop, each with the options it uses (cmd, CMD_*). */
static int run_tracer(int argc, char **argv, const char *name, const char *doc, unsigned int cmd)
{
	struct argp_option options[TRACE_OPTIONS_MAX];
	const struct argp argp = { options, trace_parse, cmd == CMD_TOP ? "" : "[interval [count]]",
				   doc,	    NULL,	 NULL,
				   NULL };
	struct tracer_cli o = trace_defaults();

	options_for(cmd, options);
	struct sigaction sa = { .sa_handler = on_signal };

	/* argp names the program after argv[0]: say "tokenscope trace", not "trace". */
	argv[0] = (char *)name;
	if (argp_parse(&argp, argc, argv, 0, NULL, &o))
		return 2;
	o.s.top = live_view;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* Output goes to a pipe as often as to a terminal: a line at a time either way. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	return traced(&o, NULL);
}

static const char run_doc[] =
    "Start a command and trace it from its first instruction: its requests, and its GPU "
    "steps with device times when the CUDA driver loads tokenscope's CUPTI library (named in "
    "CUDA_INJECTION64_PATH for the command). Takes the options of trace. Signals sent to "
    "tokenscope are passed on to the command (Ctrl-C reaches it from the terminal); tracing "
    "ends when it exits, and tokenscope exits with its status.\n"
    "\n"
    "EXAMPLES:\n"
    "  tokenscope run -- python3 -m vllm.entrypoints.openai.api_server --model M\n"
    "  tokenscope run --json --gpu-steps -- ./server --port 8000\n"
    "  tokenscope run --listen :9464 -d 600 -- ./server   # traced 10 min, then runs on\n";

static int cmd_run(int argc, char **argv)
{
	struct argp_option options[TRACE_OPTIONS_MAX];
	const struct argp argp = { options, trace_parse, "[--] CMD [ARG...]", run_doc, NULL,
				   NULL,    NULL };
	struct tracer_cli o = trace_defaults();

	options_for(CMD_RUN, options);
	running = true;
	argv[0] = "tokenscope run";
	/* In order: the command's own options are not tokenscope's. */
	if (argp_parse(&argp, argc, argv, ARGP_IN_ORDER, NULL, &o))
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	return traced(&o, run_argv);
}

static int cmd_trace(int argc, char **argv)
{
	return run_tracer(argc, argv, "tokenscope trace", trace_doc, CMD_TRACE);
}

static const char record_doc[] =
    "Record the raw event stream of a running server to a file, for `tokenscope report` "
    "elsewhere. Takes the options of trace; request lines are printed as in trace.\n"
    "\n"
    "The file holds the captured request and response bytes, prompts included: it is "
    "created readable by its owner only.\n"
    "\n"
    "EXAMPLES:\n"
    "  tokenscope record -p 1234 -o run.tsr -d 60\n";

static int cmd_record(int argc, char **argv)
{
	recording = true;
	return run_tracer(argc, argv, "tokenscope record", record_doc, CMD_RECORD);
}

static const char top_doc[] =
    "A live view of the traced server, refreshed every second: a row per model (and per "
    "process with --by-process) with requests/s, TTFT and ITL p50/p99, tokens/s, success, "
    "and the queue/prefill/GPU shares. q quits. Not a terminal: plain lines every second. "
    "Takes the options of trace, but not those of request lines (--json, --tokens, --gpu-steps, "
    "--kernels) nor an interval.\n"
    "\n"
    "EXAMPLES:\n"
    "  tokenscope top -p 1234\n"
    "  tokenscope top --all --by-process\n";

static int cmd_top(int argc, char **argv)
{
	live_view = true;
	return run_tracer(argc, argv, "tokenscope top", top_doc, CMD_TOP);
}

static const char report_doc[] =
    "Replay a recording made with `tokenscope record` through the same pipeline as trace: the "
    "same request lines, summary and exporters, then a diagnosis of TTFT and ITL P99.\n"
    "\n"
    "EXAMPLES:\n"
    "  tokenscope report run.tsr\n"
    "  tokenscope report run.tsr --json --timeline run.json\n"
    "  tokenscope report run.tsr --html run.html\n"
    "  tokenscope report run.tsr --prometheus | promtool check metrics\n"
    "  tokenscope report run.tsr --otlp http://127.0.0.1:4318/v1/traces\n";

static const struct argp_option report_options[] = {
	{ "prometheus", OPT_PROMETHEUS, NULL, 0, "Print the metrics text at the end", 0 },
	{ "by-process", OPT_BY_PROCESS, NULL, 0,
	  "With --prometheus: a pid label on the request metrics", 0 },
	{},
};

static error_t report_parse(int key, char *arg, struct argp_state *state)
{
	struct report_opts *o = state->input;
	const struct shown sh = { &o->json, &o->tokens, &o->gpu_steps, &o->verbose,
				  &o->all_requests };

	if (parse_shared(key, arg, state, &sh, &o->ex))
		return 0;
	switch (key) {
	case OPT_PROMETHEUS:
		o->ex.prometheus = true;
		break;
	case OPT_BY_PROCESS:
		o->ex.by_process = true;
		break;
	case ARGP_KEY_ARG:
		if (o->path)
			argp_error(state, "one recording at a time");
		o->path = arg;
		break;
	case ARGP_KEY_END:
		if (!o->path)
			argp_error(state, "no recording given: tokenscope report FILE");
		if (o->ex.by_process && !o->ex.prometheus)
			argp_error(state, "--by-process labels the metrics: give --prometheus");
		shared_check(state, &o->ex);
		if (o->tokens && !o->json)
			argp_error(state, "--tokens needs --json");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static int cmd_report(int argc, char **argv)
{
	struct argp_option options[TRACE_OPTIONS_MAX];
	const struct argp argp = { options, report_parse, "FILE", report_doc, NULL, NULL, NULL };
	struct report_opts o = { .ex.trace_sample = OTLP_DEFAULT_RATIO,
				 .ex.trace_warm_up = OTLP_WARM_UP };
	int rc;

	options_with_shared(report_options, 0, options);
	argv[0] = "tokenscope report";
	if (argp_parse(&argp, argc, argv, 0, NULL, &o))
		return 2;
	/* Lines for a person (not JSON, not the metrics text): within 100 columns. */
	if (!o.json && !o.ex.prometheus)
		o.out = wrap_open(stdout, WRAP_WIDTH);
	rc = report_run(&o) ? 1 : 0;
	if (o.out)
		fclose(o.out);
	return rc;
}

static const char check_doc[] =
    "Say what this node can do, one line each, and what to do about anything missing: the "
    "kernel and its features (with what stands in where one is missing), the capabilities, the "
    "BPF programs loaded and attached (and taken off again), uprobes, tracefs, the TLS and CUDA "
    "libraries, the CUPTI library, NVML, libcurl, the container runtimes' state. Nothing is "
    "traced. Exits 0 when tracing can start here, 1 when it cannot.\n"
    "\n"
    "EXAMPLES:\n"
    "  tokenscope check\n"
    "  tokenscope check --json\n";

static const struct argp_option check_options[] = {
	{ "json", 'j', NULL, 0, "One JSON object instead of the lines", 0 },
	{ "verbose", 'v', NULL, 0, "libbpf's messages (the verifier's log on a refusal)", 0 },
	{ 0 }
};

struct check_cli {
	bool json, verbose;
};

static error_t check_parse(int key, char *arg, struct argp_state *state)
{
	struct check_cli *o = state->input;

	(void)arg;
	switch (key) {
	case 'j':
		o->json = true;
		break;
	case 'v':
		o->verbose = true;
		break;
	case ARGP_KEY_ARG:
		argp_error(state, "check takes no arguments");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static int cmd_check(int argc, char **argv)
{
	static const struct argp argp = { check_options, check_parse, NULL, check_doc,
					  NULL,		 NULL,	      NULL };
	struct check_cli o = { 0 };

	argv[0] = "tokenscope check";
	if (argp_parse(&argp, argc, argv, 0, NULL, &o))
		return 2;
	return check_run(stdout, o.json, o.verbose);
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: tokenscope COMMAND [OPTION...]\n"
		   "\n"
		   "Latency of streamed LLM requests (TTFT, inter-token latency, tokens/s, "
		   "E2E),\nmeasured from the kernel with eBPF, without touching the server.\n"
		   "\n"
		   "Commands:\n"
		   "  trace     trace a running server (tokenscope trace --help)\n"
		   "  run       start a server and trace it (tokenscope run -- CMD ARG...)\n"
		   "  top       a live view, refreshed every second\n"
		   "  record    trace and write the event stream to a file\n"
		   "  report    replay a recording through the same pipeline, with a diagnosis\n"
		   "  check     what this node can do (kernel, capabilities, libraries)\n"
		   "  version   print the version\n");
}

int main(int argc, char **argv)
{
	/*
	 * Buffers of 128 KiB and more (a /metrics body, the listener thread's copy of it, an OTLP
	 * batch) are mapped for themselves and unmapped at free. glibc otherwise raises that
	 * threshold to the largest buffer freed and then carves such buffers from the thread's
	 * arena, where the next body, a few bytes longer, no longer fits the hole the last one
	 * left: the tracer's RSS grew in 128 KiB steps (+256 KiB in 4 minutes of scrapes) with
	 * nothing leaked.
	 */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	/* Every message within a 100-column terminal (lib/wrap.h). */
	FILE *wrapped = wrap_open(stderr, WRAP_WIDTH);

	if (wrapped)
		stderr = wrapped;
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "trace"))
		return cmd_trace(argc - 1, argv + 1);
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1);
	if (!strcmp(argv[1], "top"))
		return cmd_top(argc - 1, argv + 1);
	if (!strcmp(argv[1], "record"))
		return cmd_record(argc - 1, argv + 1);
	if (!strcmp(argv[1], "report"))
		return cmd_report(argc - 1, argv + 1);
	if (!strcmp(argv[1], "check"))
		return cmd_check(argc - 1, argv + 1);
	if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
		if (argc > 2) {
			fprintf(stderr, "tokenscope %s: takes no option or argument: '%s'\n",
				argv[1], argv[2]);
			return 2;
		}
		printf("%s\n", argp_program_version);
		return 0;
	}
	if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "tokenscope: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
