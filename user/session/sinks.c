// SPDX-License-Identifier: MIT
/* Every sink of a run, one row each, in the order they run and close (sinks.h, session.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/written.h"
#include "record/record.h"
#include "session/session.h"
#include "sinks/html.h"
#include "sinks/httpd.h"
#include "sinks/prom.h"

/*
 * The sinks, one row each, in the order they are registered: a sink sees each request, step
 * and tick after the rows above it (docs/architecture.md, "Adding things"). A row says whether
 * the session's options want it and opens it into a sink (printing why on failure); the
 * columns after that are optional. The live view alone opens when tracing begins (at_begin).
 * A row's state is its fields of struct sinks, and its options are the session's
 * (session_opts, export_opts for the exporters); where its output goes is the session's
 * (session_streams).
 */
struct sink_row {
	const char *name;
	/* Opened when tracing begins (session_begin), after every other row, and closed first:
	 * the live view, whose frames show what every other sink has had and whose terminal is
	 * given back before any other row prints. */
	bool at_begin;
	/* NULL: every run has it. */
	bool (*wanted)(const struct session *s);
	int (*open)(struct session *s, struct sink *out);
	/* A replay: the recording's path and header, before the first record. */
	void (*set_source)(struct session *s, const char *path, const struct record_meta *m);
	/* After the last record (pipeline_finish): sends what it still holds. */
	void (*flush)(struct session *s);
	/* After every row's flush: prints what it has of the whole run. */
	void (*print)(struct session *s);
	/* Says what it wrote or failed to deliver; a row not opened closes as a no-op. */
	int (*close)(struct session *s);
	/* After every row's close, last row first: frees what other rows' closing read. */
	void (*release)(struct session *s);
};

/* Every GPU sample, for the summary's GPU lines. */
static void usage_sample(void *ctx, const struct device_sample *s)
{
	device_usage_add(ctx, s);
}

static bool diagnosis_wanted(const struct session *s)
{
	return s->o.report;
}

/* First: it sees every request before any exporter has. */
static int diagnosis_open(struct session *s, struct sink *out)
{
	diagnosis_init(&s->sinks.diag);
	s->sinks.diag_on = true;
	*out = diagnosis_sink(&s->sinks.diag);
	return 0;
}

static void diagnosis_source(struct session *s, const char *path, const struct record_meta *m)
{
	(void)path;
	if (s->sinks.diag_on)
		diagnosis_set_wall_clock(&s->sinks.diag, m->real_offset_ns);
}

static void diagnosis_row_print(struct session *s)
{
	if (s->sinks.diag_on)
		diagnosis_print(&s->sinks.diag, s->diagnosis_out);
}

/* After the HTML page, which shows it, is written. */
static void diagnosis_release(struct session *s)
{
	if (s->sinks.diag_on)
		diagnosis_free(&s->sinks.diag);
	s->sinks.diag_on = false;
}

/* A replay has no GPU to read (sinks.h). */
bool sinks_want_device_samples(const struct session *s)
{
	const struct export_opts *eo = &s->o.ex;

	return !s->o.report && (eo->listen || eo->timeline || s->o.top);
}

/* A replay gets the samples its recording holds: their summary too. */
static bool usage_wanted(const struct session *s)
{
	return sinks_want_device_samples(s) || s->o.report;
}

static int usage_open(struct session *s, struct sink *out)
{
	struct sinks *k = &s->sinks;

	k->gpu_usage = calloc(1, sizeof(*k->gpu_usage));
	if (!k->gpu_usage)
		return -ENOMEM;
	*out = (struct sink){ .name = "nvml", .ctx = k->gpu_usage, .device_sample = usage_sample };
	return 0;
}

static int usage_close(struct session *s)
{
	struct sinks *k = &s->sinks;

	if (k->gpu_usage) {
		device_usage_print(k->gpu_usage, s->counts_out);
		fflush(s->out);
	}
	free(k->gpu_usage);
	k->gpu_usage = NULL;
	return 0;
}

static bool alerts_wanted(const struct session *s)
{
	return s->o.ex.nalerts > 0;
}

/* Before the metrics: a tick evaluates them before the snapshot is rendered. */
static int alerts_open(struct session *s, struct sink *out)
{
	const struct export_opts *eo = &s->o.ex;
	struct sinks *k = &s->sinks;
	int err = alert_init(&k->alerts, s->err, eo->alert_exec);

	if (err)
		return err;
	k->alerts_on = true;
	for (int i = 0; i < eo->nalerts; i++) {
		struct alert_rule r;
		char msg[512];

		err = alert_parse(eo->alerts[i], &r, msg, sizeof(msg));
		if (!err)
			err = alert_add(&k->alerts, &r);
		if (err) {
			fprintf(s->err, "tokenscope: %s\n", msg);
			return err;
		}
	}
	*out = alert_sink(&k->alerts);
	return 0;
}

/* After every row's close: the metrics' text, closed before, renders their series. */
static void alerts_release(struct session *s)
{
	if (s->sinks.alerts_on)
		alert_free(&s->sinks.alerts);
	s->sinks.alerts_on = false;
}

static bool prom_wanted(const struct session *s)
{
	return s->o.ex.listen || s->o.ex.prometheus;
}

static int prom_open(struct session *s, struct sink *out)
{
	const struct export_opts *eo = &s->o.ex;
	struct sinks *k = &s->sinks;

	if (eo->listen) {
		/* Bound before anything is attached, so a busy port fails fast. */
		int err = httpd_start(&k->httpd, eo->listen, s->err);

		if (err)
			return err;
		fprintf(s->err, "tokenscope: metrics at http://%s/metrics\n",
			httpd_address(k->httpd));
	}
	k->prom = prom_new(k->httpd ? httpd_publish : NULL, k->httpd);
	if (!k->prom)
		return -ENOMEM;
	k->print_prometheus = eo->prometheus;
	prom_set_by_process(k->prom, eo->by_process);
	prom_set_pod_labels(k->prom, !eo->no_pod_labels);
	/* The session's options: they last as long as the sinks. */
	if (prom_set_labels(k->prom, &eo->labels, eo->label_top))
		return -ENOMEM;
	/* The alerts' series: their row opened before this one. */
	if (k->alerts_on)
		prom_set_extra(k->prom, alert_render_prom, &k->alerts);
	*out = prom_sink(k->prom);
	return 0;
}

static int prom_close(struct session *s)
{
	struct sinks *k = &s->sinks;

	if (k->print_prometheus && k->prom) {
		char *buf = NULL;
		size_t len = 0;

		if (!prom_render(k->prom, &buf, &len)) {
			fwrite(buf, 1, len, s->out);
			fflush(s->out);
		}
		free(buf);
	}
	httpd_stop(k->httpd);
	k->httpd = NULL;
	prom_free(k->prom);
	k->prom = NULL;
	return 0;
}

static bool timeline_wanted(const struct session *s)
{
	return s->o.ex.timeline != NULL;
}

static int timeline_row_open(struct session *s, struct sink *out)
{
	struct sinks *k = &s->sinks;
	const char *path = s->o.ex.timeline;
	int err = timeline_open(&k->tl, path);

	k->tl_path = path;
	if (err) {
		fprintf(s->err, "tokenscope: %s: %s\n", path, strerror(-err));
		return err;
	}
	k->tl_open = true;
	timeline_set_origin(&k->tl, k->origin_ns);
	*out = timeline_sink(&k->tl);
	return 0;
}

/* Before the first record: the timeline's zero is the start of the recording. */
static void timeline_source(struct session *s, const char *path, const struct record_meta *m)
{
	(void)path;
	if (s->sinks.tl_open)
		timeline_set_origin(&s->sinks.tl, m->start_mono_ns);
}

static int timeline_row_close(struct session *s)
{
	struct sinks *k = &s->sinks;
	int err;

	if (!k->tl_open)
		return 0;
	err = timeline_close(&k->tl);
	if (err)
		fprintf(s->err, "tokenscope: writing the timeline failed: %s\n", strerror(-err));
	else
		say_written(s->err, "the timeline", k->tl_path);
	k->tl_open = false;
	return err;
}

static bool html_wanted(const struct session *s)
{
	return s->o.ex.html != NULL;
}

static int html_row_open(struct session *s, struct sink *out)
{
	struct sinks *k = &s->sinks;
	int err = html_open(&k->html, s->o.ex.html, k->origin_ns);

	if (err) {
		fprintf(s->err, "tokenscope: %s: %s\n", s->o.ex.html, strerror(-err));
		return err;
	}
	k->html_path = s->o.ex.html;
	/* The page shows the run's summary as the summaries' row fills it, and report's
	 * diagnosis (the first row). */
	html_set_summary(k->html, &k->sums.total, k->diag_on ? &k->diag : NULL);
	*out = html_sink(k->html);
	return 0;
}

static void html_source(struct session *s, const char *path, const struct record_meta *m)
{
	if (s->sinks.html)
		html_set_source(s->sinks.html, path, m->start_mono_ns, m->real_offset_ns,
				m->hostname);
}

static int html_row_close(struct session *s)
{
	struct sinks *k = &s->sinks;
	int err;

	if (!k->html)
		return 0;
	err = html_close(k->html);
	if (err)
		fprintf(s->err, "tokenscope: writing the HTML report to %s failed: %s\n",
			k->html_path, strerror(-err));
	else
		say_written(s->err, "the HTML report", k->html_path);
	k->html = NULL;
	return err;
}

static bool otlp_wanted(const struct session *s)
{
	return s->o.ex.otlp_url != NULL;
}

static int otlp_row_open(struct session *s, struct sink *out)
{
	const struct export_opts *eo = &s->o.ex;
	struct sinks *k = &s->sinks;
	struct otlp_opts oo;
	char host[256] = "";
	int err;

	otlp_opts_default(&oo);
	oo.endpoint = eo->otlp_url;
	oo.ca_file = eo->otlp_ca;
	oo.slow_ttft_ns = eo->slow_ttft_ns;
	oo.slow_itl_ns = eo->slow_itl_ns;
	oo.sample_ratio = eo->trace_sample;
	oo.warm_up = eo->trace_warm_up;
	/* report: records are replayed faster than they happened, so the exporter waits for
	 * room in its queue rather than dropping, and for it to drain at the end (both bounded
	 * by its retry policy); times and host.name come from the recording (otlp_source). */
	oo.backpressure = s->o.report;
	oo.err = s->err;
	/* Spans need unix-epoch times: the one wall-clock reading, taken once. */
	oo.realtime_offset_ns = clock_offset_now();
	gethostname(host, sizeof(host) - 1);
	oo.hostname = host;
	oo.env_service = getenv("OTEL_SERVICE_NAME");
	oo.env_resource = getenv("OTEL_RESOURCE_ATTRIBUTES");
	err = otlp_init(&k->otlp, &oo);
	if (err) {
		fprintf(s->err, "tokenscope: %s\n", k->otlp.error);
		return err;
	}
	k->otlp_url = eo->otlp_url;
	*out = otlp_sink(&k->otlp);
	return 0;
}

static void otlp_source(struct session *s, const char *path, const struct record_meta *m)
{
	(void)path;
	if (s->sinks.otlp_url)
		otlp_set_source(&s->sinks.otlp, m->real_offset_ns, m->hostname);
}

/* What the exporter still holds, sent (a bounded wait). */
static void otlp_flush(struct session *s)
{
	otlp_close(&s->sinks.otlp);
}

static int otlp_row_close(struct session *s)
{
	struct sinks *k = &s->sinks;
	struct otlp_stats st;
	uint64_t lost;

	otlp_close(&k->otlp);
	if (!k->otlp_url)
		return 0;
	otlp_get_stats(&k->otlp, &st);
	otlp_print_stats(&st, k->otlp_url, s->counts_out);
	lost = st.dropped + st.failed + st.unsent;
	fflush(s->out); /* after the counters in a pipe too */
	if (lost)
		fprintf(s->err,
			"tokenscope: otlp: %llu traces not delivered to %s (%llu dropped, %llu "
			"failed, %llu unsent)\n",
			(unsigned long long)lost, k->otlp_url, (unsigned long long)st.dropped,
			(unsigned long long)st.failed, (unsigned long long)st.unsent);
	k->otlp_url = NULL;
	return 0;
}

static bool lines_wanted(const struct session *s)
{
	return !s->o.top;
}

/* After the exporters: a request's line is written once they have had it. */
static int lines_open(struct session *s, struct sink *out)
{
	const struct session_opts *o = &s->o;
	struct lines_opts lo = { .out = s->lines_out,
				 .json = o->json,
				 .tokens = o->tokens,
				 .gpu_steps = o->gpu_steps,
				 .gpu_calls = o->gpu_calls,
				 .all_requests = o->all_requests };

	lines_init(&s->sinks.lines, &lo);
	*out = lines_sink(&s->sinks.lines);
	return 0;
}

/* After the lines: the total comes once the last request's line is out. */
static int summaries_open(struct session *s, struct sink *out)
{
	struct summaries *sums = &s->sinks.sums;

	summaries_init(sums, s->summary_out);
	if (s->o.json)
		summaries_set_json(sums, s->lines_out);
	*out = summaries_sink(sums);
	return 0;
}

static bool top_wanted(const struct session *s)
{
	return s->o.top;
}

/* Its screen on out, its keys on stdin (raw when it is a terminal). */
static int top_open(struct session *s, struct sink *out)
{
	struct sinks *k = &s->sinks;
	int err = top_init(&k->top, s->out, isatty(fileno(s->out)), s->o.by_process);

	if (err)
		return err;
	k->top_on = true;
	k->raw = isatty(STDIN_FILENO) && !top_term_raw(STDIN_FILENO, &k->saved);
	*out = top_sink(&k->top);
	return 0;
}

static int top_close(struct session *s)
{
	struct sinks *k = &s->sinks;

	if (k->raw)
		top_term_restore(STDIN_FILENO, &k->saved);
	k->raw = false;
	if (k->top_on)
		top_free(&k->top);
	k->top_on = false;
	return 0;
}

static const struct sink_row sink_rows[] = {
	{ .name = "diagnosis",
	  .wanted = diagnosis_wanted,
	  .open = diagnosis_open,
	  .set_source = diagnosis_source,
	  .print = diagnosis_row_print,
	  .release = diagnosis_release },
	{ .name = "gpu usage", .wanted = usage_wanted, .open = usage_open, .close = usage_close },
	{ .name = "alerts",
	  .wanted = alerts_wanted,
	  .open = alerts_open,
	  .release = alerts_release },
	{ .name = "prometheus", .wanted = prom_wanted, .open = prom_open, .close = prom_close },
	{ .name = "timeline",
	  .wanted = timeline_wanted,
	  .open = timeline_row_open,
	  .set_source = timeline_source,
	  .close = timeline_row_close },
	{ .name = "html",
	  .wanted = html_wanted,
	  .open = html_row_open,
	  .set_source = html_source,
	  .close = html_row_close },
	{ .name = "otlp",
	  .wanted = otlp_wanted,
	  .open = otlp_row_open,
	  .set_source = otlp_source,
	  .flush = otlp_flush,
	  .close = otlp_row_close },
	{ .name = "lines", .wanted = lines_wanted, .open = lines_open },
	{ .name = "summaries", .open = summaries_open },
	{ .name = "top",
	  .at_begin = true,
	  .wanted = top_wanted,
	  .open = top_open,
	  .close = top_close },
};
#define SINK_ROWS (sizeof(sink_rows) / sizeof(sink_rows[0]))

int sinks_open(struct session *s, bool at_begin)
{
	for (size_t i = 0; i < SINK_ROWS; i++) {
		const struct sink_row *row = &sink_rows[i];
		struct sink sink;
		int err;

		if (row->at_begin != at_begin || (row->wanted && !row->wanted(s)))
			continue;
		err = row->open(s, &sink);
		if (!err)
			err = pipeline_add_sink(s->pl, &sink);
		if (err)
			return err;
	}
	return 0;
}

void sinks_set_source(struct session *s, const char *path, const struct record_meta *m)
{
	for (size_t i = 0; i < SINK_ROWS; i++)
		if (sink_rows[i].set_source)
			sink_rows[i].set_source(s, path, m);
}

void sinks_finish(struct session *s)
{
	for (size_t i = 0; i < SINK_ROWS; i++)
		if (sink_rows[i].flush)
			sink_rows[i].flush(s);
	for (size_t i = 0; i < SINK_ROWS; i++)
		if (sink_rows[i].print)
			sink_rows[i].print(s);
}

/* The rows opened at begin, or the others, in the table's order; the first error kept. */
static void close_rows(struct session *s, bool at_begin, int *err)
{
	for (size_t i = 0; i < SINK_ROWS; i++) {
		const struct sink_row *row = &sink_rows[i];
		int e;

		if (row->at_begin != at_begin || !row->close)
			continue;
		e = row->close(s);
		if (e && !*err)
			*err = e;
	}
}

int sinks_close(struct session *s)
{
	int err = 0;

	/* Every row is closed whatever the others did (a row not opened closes as a no-op). */
	close_rows(s, true, &err);
	close_rows(s, false, &err);
	for (size_t i = SINK_ROWS; i-- > 0;)
		if (sink_rows[i].release)
			sink_rows[i].release(s);
	return err;
}
