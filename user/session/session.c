// SPDX-License-Identifier: MIT
/* A session: one pipeline, its sinks in their order, and where their output goes (session.h). */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "record/record.h"
#include "session/session.h"

/* Where each output goes: decided here, once (session.h). */
static void session_streams(struct session *s)
{
	s->out = s->o.out ? s->o.out : stdout;
	s->err = s->o.err ? s->o.err : stderr;
	s->lines_out = s->o.ex.prometheus ? s->err : s->out;
	s->summary_out = s->o.top ? NULL : s->o.json ? s->err : s->lines_out;
	s->diagnosis_out = s->o.json || s->o.ex.prometheus ? s->err : s->out;
}

int session_start(struct session *s, const struct session_opts *o, uint64_t origin_ns)
{
	struct pipeline_opts po = { .verbose = o->verbose };
	struct lines_opts lo = { .json = o->json,
				 .tokens = o->tokens,
				 .gpu_steps = o->gpu_steps,
				 .gpu_calls = o->gpu_calls,
				 .all_requests = o->all_requests };
	struct export_opts eo = o->ex;
	struct sink sk;
	int err;

	memset(s, 0, sizeof(*s));
	s->o = *o;
	session_streams(s);
	po.err = s->err;
	po.slo = &s->o.ex.slo;
	po.labels = &s->o.ex.labels;
	po.stall_ns = s->o.ex.stall_ns;
	s->pl = pipeline_new(&po);
	if (!s->pl)
		return -ENOMEM;
	pipeline_all_requests(s->pl, o->all_requests);
	if (o->report) {
		/* First: it sees every request before any exporter has. */
		diagnosis_init(&s->diag);
		s->diag_on = true;
		sk = diagnosis_sink(&s->diag);
		err = pipeline_add_sink(s->pl, &sk);
		if (err)
			return err;
	}
	eo.out = s->out;
	eo.err = s->err;
	eo.replay = o->report;
	err = exporters_start(&s->ex, &eo, s->pl, origin_ns);
	s->ex_started = true;
	if (err)
		return err;
	/* After the exporters: a request's line is written once they have had it. */
	if (!o->top) {
		lo.out = s->lines_out;
		lines_init(&s->lines, &lo);
		sk = lines_sink(&s->lines);
		err = pipeline_add_sink(s->pl, &sk);
		if (err)
			return err;
	}
	/* After the lines: the total comes once the last request's line is out. */
	summaries_init(&s->sums, s->summary_out);
	if (o->json)
		summaries_set_json(&s->sums, s->lines_out);
	exporters_set_summary(&s->ex, &s->sums.total, s->diag_on ? &s->diag : NULL);
	sk = summaries_sink(&s->sums);
	return pipeline_add_sink(s->pl, &sk);
}

struct pipeline *session_pipeline(struct session *s)
{
	return s->pl;
}

void session_set_source(struct session *s, const char *path, const struct record_meta *m)
{
	if (s->diag_on)
		diagnosis_set_wall_clock(&s->diag, m->real_offset_ns);
	/* The timeline's zero is the recording's start: no record is earlier. Spans carry the
	 * recording's unix times and host. */
	exporters_set_source(&s->ex, path, m->start_mono_ns, m->real_offset_ns, m->hostname);
}

int session_begin(void *ctx)
{
	struct session *s = ctx;
	struct sink sk;
	int err;

	if (!s->o.top)
		return 0;
	err = top_init(&s->top, s->out, isatty(fileno(s->out)), s->o.by_process);
	if (err)
		return err;
	s->top_on = true;
	/* Last: its frames show what every other sink has had. */
	sk = top_sink(&s->top);
	err = pipeline_add_sink(s->pl, &sk);
	if (err)
		return err;
	s->raw = isatty(STDIN_FILENO) && !top_term_raw(STDIN_FILENO, &s->saved);
	return 0;
}

struct device_sample *session_poll(void *ctx)
{
	struct session *s = ctx;

	return exporters_gpu_sample(&s->ex);
}

void session_cuda(void *ctx)
{
	struct session *s = ctx;

	exporters_cuda_seen(&s->ex);
}

bool session_key(void *ctx)
{
	(void)ctx;
	/* The frames are the sink's, on the pipeline's kernel time; here only the keys. */
	return top_keypress(STDIN_FILENO) == 1;
}

void session_finish(void *ctx)
{
	struct session *s = ctx;

	/* The sinks' finish: the summary's total among them. */
	pipeline_finish(s->pl);
	exporters_flush(&s->ex);
	if (s->diag_on)
		diagnosis_print(&s->diag, s->diagnosis_out);
}

int session_stop(struct session *s)
{
	int err = 0;

	if (s->raw)
		top_term_restore(STDIN_FILENO, &s->saved);
	if (s->top_on)
		top_free(&s->top);
	if (s->ex_started)
		err = exporters_stop(&s->ex);
	if (s->diag_on)
		diagnosis_free(&s->diag);
	pipeline_destroy(s->pl);
	memset(s, 0, sizeof(*s));
	return err;
}
