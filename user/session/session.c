// SPDX-License-Identifier: MIT
/* A session: one pipeline, its sinks in their order, and where their output goes (session.h). */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "session/session.h"
#include "sinks/top.h"

/* Where each output goes: decided here, once (session.h). */
static void session_streams(struct session *s)
{
	s->out = s->o.out ? s->o.out : stdout;
	s->err = s->o.err ? s->o.err : stderr;
	s->lines_out = s->o.ex.prometheus ? s->err : s->out;
	s->summary_out = s->o.top ? NULL : s->o.json ? s->err : s->lines_out;
	s->diagnosis_out = s->o.json || s->o.ex.prometheus ? s->err : s->out;
	/* report --prometheus: out carries the metrics text alone. */
	s->counts_out = s->o.json || s->o.ex.prometheus ? s->err : s->out;
}

int session_start(struct session *s, const struct session_opts *o, uint64_t origin_ns)
{
	struct pipeline_opts po = { .verbose = o->verbose };
	int err;

	memset(s, 0, sizeof(*s));
	s->o = *o;
	session_streams(s);
	s->sinks.origin_ns = origin_ns;
	po.err = s->err;
	po.slo = &s->o.ex.slo;
	po.labels = &s->o.ex.labels;
	po.stall_ns = s->o.ex.stall_ns;
	s->pl = pipeline_new(&po);
	if (!s->pl)
		return -ENOMEM;
	pipeline_all_requests(s->pl, o->all_requests);
	/* Every row of the table but the live view's, in its order. */
	err = sinks_open(s, false);
	if (err || !o->record.path)
		return err;
	/* Once every sink is up (a failure above writes no file): from here on, what the
	 * pipeline is fed goes to the file too. */
	err = record_tap_open(&s->tap, o->record.path, o->record.capture_bytes, o->record.roots,
			      o->record.nroots);
	if (!err) {
		struct pipeline_tap calls = record_tap_calls(&s->tap);

		pipeline_set_tap(s->pl, &calls);
	}
	return err;
}

bool session_device_samples(const struct session *s)
{
	return sinks_want_device_samples(s);
}

struct pipeline *session_pipeline(struct session *s)
{
	return s->pl;
}

void session_set_source(struct session *s, const char *path, const struct record_meta *m)
{
	/* The timeline's zero is the recording's start: no record is earlier. Spans carry the
	 * recording's unix times and host. */
	sinks_set_source(s, path, m);
}

int session_begin(void *ctx)
{
	/* The live view's row: last, its frames show what every other sink has had. */
	return sinks_open(ctx, true);
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
	/* Then the rows' end: the trace exporter's last spans, report's diagnosis. */
	sinks_finish(s);
}

int session_stop(struct session *s)
{
	int err = sinks_close(s);
	int e = record_tap_close(&s->tap);

	if (e && !err)
		err = e;
	pipeline_destroy(s->pl);
	memset(s, 0, sizeof(*s));
	return err;
}
