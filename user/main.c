// SPDX-License-Identifier: MIT
/*
 * tokenscope: per-request TTFT, inter-token latency, tokens/s and end-to-end latency of a
 * running LLM streaming server, measured from the kernel.
 */
#include <argp.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "httpd.h"
#include "trace.h"

#define TOKENSCOPE_VERSION "0.1.0"

static volatile sig_atomic_t exiting;

static void on_signal(int sig)
{
	(void)sig;
	exiting = 1;
}

const char *argp_program_version = "tokenscope " TOKENSCOPE_VERSION;
/* Usage errors exit 2, like the other errors of this kind in the tool. */
error_t argp_err_exit_status = 2;
const char *argp_program_bug_address = "the tokenscope issue tracker";

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
	"  tokenscope trace -p 1234 --listen :9464   # Prometheus metrics on 127.0.0.1:9464\n";

enum {
	OPT_TOKENS = 0x100,
	OPT_CAPTURE,
	OPT_RING,
	OPT_GPU_STEPS,
	OPT_KERNELS,
	OPT_LISTEN,
};

static const struct argp_option trace_options[] = {
	{ "pid", 'p', "PID", 0, "Trace this process and its descendants (repeatable)", 0 },
	{ "json", 'j', NULL, 0, "One JSON object per finished request on stdout", 0 },
	{ "tokens", OPT_TOKENS, NULL, 0, "With --json: every content frame's time (token_ns)", 0 },
	{ "gpu-steps", OPT_GPU_STEPS, NULL, 0, "Also a line (or JSON object) per GPU step", 0 },
	{ "kernels", OPT_KERNELS, NULL, 0,
	  "Also a line per CUDA launch and copy (a ring-buffer record each: costly)", 0 },
	{ "duration", 'd', "SEC", 0, "Stop after SEC seconds", 0 },
	{ "capture-bytes", OPT_CAPTURE, "N", 0,
	  "Bytes copied per syscall (default 65536); more is counted as a gap", 0 },
	{ "ring-buffer-mb", OPT_RING, "MB", 0,
	  "Ring buffer size, a power of two (default 2); larger if records are lost", 0 },
	{ "verbose", 'v', NULL, 0, "Report process forks and exits, and libbpf messages", 0 },
	{ "listen", OPT_LISTEN, "ADDR:PORT", 0,
	  "Serve Prometheus metrics at http://ADDR:PORT/metrics (:PORT or PORT: on 127.0.0.1)", 0 },
	{},
};

static int parse_double(const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return errno || end == s || *end || *out < 0 ? -EINVAL : 0;
}

static int parse_ulong(const char *s, unsigned long max, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(s, &end, 10);
	return errno || end == s || *end || *out > max || s[0] == '-' ? -EINVAL : 0;
}

static error_t trace_parse(int key, char *arg, struct argp_state *state)
{
	struct trace_opts *o = state->input;
	static int positional;
	unsigned long v;

	switch (key) {
	case 'p':
		if (parse_ulong(arg, INT_MAX, &v) || v == 0)
			argp_error(state, "invalid PID '%s'", arg);
		if (o->npids == PIPELINE_MAX_ROOTS)
			argp_error(state, "at most %d -p options", PIPELINE_MAX_ROOTS);
		o->pids[o->npids++] = v;
		break;
	case 'j':
		o->json = true;
		break;
	case OPT_TOKENS:
		o->tokens = true;
		break;
	case OPT_GPU_STEPS:
		o->gpu_steps = true;
		break;
	case OPT_KERNELS:
		o->gpu_calls = true;
		break;
	case 'd':
		if (parse_double(arg, &o->duration_s) || o->duration_s == 0)
			argp_error(state, "invalid duration '%s' (seconds, > 0)", arg);
		break;
	case OPT_CAPTURE:
		if (parse_ulong(arg, TS_CAPTURE_MAX, &v))
			argp_error(state, "invalid --capture-bytes '%s' (0..%d)", arg,
				   TS_CAPTURE_MAX);
		o->capture_bytes = v;
		break;
	case OPT_RING:
		if (parse_ulong(arg, TS_RING_MAX_MB, &v) || v == 0 || (v & (v - 1)))
			argp_error(state, "invalid --ring-buffer-mb '%s' (a power of two, 1..%d)",
				   arg, TS_RING_MAX_MB);
		o->ring_mb = v;
		break;
	case 'v':
		o->verbose = true;
		break;
	case OPT_LISTEN: {
		struct sockaddr_storage addr;
		socklen_t addrlen;

		if (httpd_parse_listen(arg, &addr, &addrlen))
			argp_error(state, "invalid --listen '%s' (ADDR:PORT, :PORT or PORT)", arg);
		o->listen = arg;
		break;
	}
	case ARGP_KEY_ARG:
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
		break;
	case ARGP_KEY_END:
		if (!o->npids)
			argp_error(state, "no process given: use -p PID");
		if (o->tokens && !o->json)
			argp_error(state, "--tokens needs --json");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static int cmd_trace(int argc, char **argv)
{
	static const struct argp argp = { trace_options, trace_parse, "[interval [count]]",
					  trace_doc,	 NULL,	      NULL,
					  NULL };
	struct trace_opts o = { .capture_bytes = TS_CAPTURE_DEFAULT,
				.ring_mb = TS_RING_DEFAULT_MB };
	struct sigaction sa = { .sa_handler = on_signal };
	int err;

	/* argp names the program after argv[0]: say "tokenscope trace", not "trace". */
	argv[0] = "tokenscope trace";
	err = argp_parse(&argp, argc, argv, 0, NULL, &o);
	if (err)
		return 2;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* Output goes to a pipe as often as to a terminal: a line at a time either way. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	err = trace_run(&o, &exiting);
	return err ? 1 : 0;
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
		   "  version   print the version\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "trace"))
		return cmd_trace(argc - 1, argv + 1);
	if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
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
