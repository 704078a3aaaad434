// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "session/exporters.h"
#include "lib/clock.h"
#include "lib/written.h"
#include "sinks/html.h"
#include "sinks/httpd.h"
#include "loader/nvml.h"
#include "sinks/prom.h"

/* Every GPU sample, for the summary's GPU lines. */
static void usage_sample(void *ctx, const struct device_sample *s)
{
	device_usage_add(ctx, s);
}

void exporters_cuda_seen(struct exporters *x)
{
	nvml_say_why(x->nvml);
}

struct device_sample *exporters_gpu_sample(struct exporters *x)
{
	return x->nvml && nvml_latest(x->nvml, x->gpu) ? x->gpu : NULL;
}

/*
 * The exporters, one row each, in the order their sinks are registered and closed (docs/
 * architecture.md, "Add a sink"): the GPU-usage sink (NVML samples for the summary), alerts
 * (before the metrics: a tick evaluates them before the snapshot is rendered), Prometheus,
 * the timeline, the HTML page, OTLP. A row says whether the options want it, opens it into a
 * sink (printing why on failure), takes a recording's source, and closes it (saying what it
 * wrote or failed to deliver); a row's state is its fields of struct exporters.
 */
struct exporter_row {
	const char *name;
	bool (*wanted)(const struct export_opts *eo);
	int (*open)(struct exporters *x, const struct export_opts *eo, uint64_t origin_ns,
		    struct sink *out);
	void (*set_source)(struct exporters *x, const char *path, uint64_t start_mono_ns,
			   int64_t real_offset_ns, const char *host);
	int (*close)(struct exporters *x);
};

/* A replay has no GPU to read; a plain trace's summary alone does not open NVML, so a run that
 * asked for neither output prints nothing new where there is no driver. */
static bool want_gpu(const struct export_opts *eo)
{
	return !eo->replay && (eo->listen || eo->timeline || eo->top);
}

/* A replay gets the samples its recording holds: their summary too. */
static bool usage_wanted(const struct export_opts *eo)
{
	return want_gpu(eo) || eo->replay;
}

static int usage_open(struct exporters *x, const struct export_opts *eo, uint64_t origin_ns,
		      struct sink *out)
{
	(void)origin_ns;
	x->gpu = want_gpu(eo) ? calloc(1, sizeof(*x->gpu)) : NULL;
	x->gpu_usage = calloc(1, sizeof(*x->gpu_usage));
	if ((want_gpu(eo) && !x->gpu) || !x->gpu_usage)
		return -ENOMEM;
	*out = (struct sink){ .name = "nvml", .ctx = x->gpu_usage, .device_sample = usage_sample };
	return 0;
}

static int usage_close(struct exporters *x)
{
	if (x->gpu_usage) {
		device_usage_print(x->gpu_usage, x->print_to_stderr ? x->err : x->out);
		fflush(x->out);
	}
	free(x->gpu);
	x->gpu = NULL;
	free(x->gpu_usage);
	x->gpu_usage = NULL;
	return 0;
}

static bool alerts_wanted(const struct export_opts *eo)
{
	return eo->nalerts > 0;
}

static int alerts_open(struct exporters *x, const struct export_opts *eo, uint64_t origin_ns,
		       struct sink *out)
{
	int err = alert_init(&x->alerts, x->err, eo->alert_exec);

	(void)origin_ns;
	if (err)
		return err;
	x->alerts_on = true;
	for (int i = 0; i < eo->nalerts; i++) {
		struct alert_rule r;
		char msg[512];

		err = alert_parse(eo->alerts[i], &r, msg, sizeof(msg));
		if (!err)
			err = alert_add(&x->alerts, &r);
		if (err) {
			fprintf(x->err, "tokenscope: %s\n", msg);
			return err;
		}
	}
	*out = alert_sink(&x->alerts);
	return 0;
}

static bool prom_wanted(const struct export_opts *eo)
{
	return eo->listen || eo->prometheus;
}

static int prom_open(struct exporters *x, const struct export_opts *eo, uint64_t origin_ns,
		     struct sink *out)
{
	(void)origin_ns;
	if (eo->listen) {
		/* Bound before anything is attached, so a busy port fails fast. */
		int err = httpd_start(&x->httpd, eo->listen, x->err);

		if (err)
			return err;
		fprintf(x->err, "tokenscope: metrics at http://%s/metrics\n",
			httpd_address(x->httpd));
	}
	x->prom = prom_new(x->httpd ? httpd_publish : NULL, x->httpd);
	if (!x->prom)
		return -ENOMEM;
	x->print_prometheus = eo->prometheus;
	prom_set_by_process(x->prom, eo->by_process);
	prom_set_pod_labels(x->prom, !eo->no_pod_labels);
	x->labels = eo->labels;
	if (prom_set_labels(x->prom, &x->labels, eo->label_top))
		return -ENOMEM;
	/* The alerts' series: their row opened before this one. */
	if (x->alerts_on)
		prom_set_extra(x->prom, alert_render_prom, &x->alerts);
	*out = prom_sink(x->prom);
	return 0;
}

static int prom_close(struct exporters *x)
{
	if (x->print_prometheus && x->prom) {
		char *buf = NULL;
		size_t len = 0;

		if (!prom_render(x->prom, &buf, &len)) {
			fwrite(buf, 1, len, x->out);
			fflush(x->out);
		}
		free(buf);
	}
	httpd_stop(x->httpd);
	x->httpd = NULL;
	prom_free(x->prom);
	x->prom = NULL;
	return 0;
}

static bool timeline_wanted(const struct export_opts *eo)
{
	return eo->timeline != NULL;
}

static int timeline_row_open(struct exporters *x, const struct export_opts *eo, uint64_t origin_ns,
			     struct sink *out)
{
	int err = timeline_open(&x->tl, eo->timeline);

	x->tl_path = eo->timeline;
	if (err) {
		fprintf(x->err, "tokenscope: %s: %s\n", eo->timeline, strerror(-err));
		return err;
	}
	x->tl_open = true;
	timeline_set_origin(&x->tl, origin_ns);
	*out = timeline_sink(&x->tl);
	return 0;
}

/* Before the first record: the timeline's zero is the start of the recording. */
static void timeline_source(struct exporters *x, const char *path, uint64_t start_mono_ns,
			    int64_t real_offset_ns, const char *host)
{
	(void)path;
	(void)real_offset_ns;
	(void)host;
	if (x->tl_open)
		timeline_set_origin(&x->tl, start_mono_ns);
}

static int timeline_row_close(struct exporters *x)
{
	int err;

	if (!x->tl_open)
		return 0;
	err = timeline_close(&x->tl);
	if (err)
		fprintf(x->err, "tokenscope: writing the timeline failed: %s\n", strerror(-err));
	else
		say_written(x->err, "the timeline", x->tl_path);
	x->tl_open = false;
	return err;
}

static bool html_wanted(const struct export_opts *eo)
{
	return eo->html != NULL;
}

static int html_row_open(struct exporters *x, const struct export_opts *eo, uint64_t origin_ns,
			 struct sink *out)
{
	int err = html_open(&x->html, eo->html, origin_ns);

	if (err) {
		fprintf(x->err, "tokenscope: %s: %s\n", eo->html, strerror(-err));
		return err;
	}
	x->html_path = eo->html;
	*out = html_sink(x->html);
	return 0;
}

static void html_source(struct exporters *x, const char *path, uint64_t start_mono_ns,
			int64_t real_offset_ns, const char *host)
{
	if (x->html)
		html_set_source(x->html, path, start_mono_ns, real_offset_ns, host);
}

static int html_row_close(struct exporters *x)
{
	int err;

	if (!x->html)
		return 0;
	err = html_close(x->html);
	if (err)
		fprintf(x->err, "tokenscope: writing the HTML report to %s failed: %s\n",
			x->html_path, strerror(-err));
	else
		say_written(x->err, "the HTML report", x->html_path);
	x->html = NULL;
	return err;
}

static bool otlp_wanted(const struct export_opts *eo)
{
	return eo->otlp_url != NULL;
}

static int otlp_row_open(struct exporters *x, const struct export_opts *eo, uint64_t origin_ns,
			 struct sink *out)
{
	struct otlp_opts oo;
	char host[256] = "";
	int err;

	(void)origin_ns;
	otlp_opts_default(&oo);
	oo.endpoint = eo->otlp_url;
	oo.ca_file = eo->otlp_ca;
	oo.slow_ttft_ns = eo->slow_ttft_ns;
	oo.slow_itl_ns = eo->slow_itl_ns;
	oo.sample_ratio = eo->trace_sample;
	oo.warm_up = eo->trace_warm_up;
	oo.backpressure = eo->replay;
	oo.err = x->err;
	/* Spans need unix-epoch times: the one wall-clock reading, taken once. */
	oo.realtime_offset_ns = clock_offset_now();
	gethostname(host, sizeof(host) - 1);
	oo.hostname = host;
	oo.env_service = getenv("OTEL_SERVICE_NAME");
	oo.env_resource = getenv("OTEL_RESOURCE_ATTRIBUTES");
	err = otlp_init(&x->otlp, &oo);
	if (err) {
		fprintf(x->err, "tokenscope: %s\n", x->otlp.error);
		return err;
	}
	x->otlp_url = eo->otlp_url;
	*out = otlp_sink(&x->otlp);
	return 0;
}

static void otlp_source(struct exporters *x, const char *path, uint64_t start_mono_ns,
			int64_t real_offset_ns, const char *host)
{
	(void)path;
	(void)start_mono_ns;
	if (x->otlp_url)
		otlp_set_source(&x->otlp, real_offset_ns, host);
}

static int otlp_row_close(struct exporters *x)
{
	struct otlp_stats st;
	uint64_t lost;

	otlp_close(&x->otlp);
	if (!x->otlp_url)
		return 0;
	otlp_get_stats(&x->otlp, &st);
	otlp_print_stats(&st, x->otlp_url, x->print_to_stderr ? x->err : x->out);
	lost = st.dropped + st.failed + st.unsent;
	fflush(x->out); /* after the counters in a pipe too */
	if (lost)
		fprintf(x->err,
			"tokenscope: otlp: %llu traces not delivered to %s (%llu dropped, %llu "
			"failed, %llu unsent)\n",
			(unsigned long long)lost, x->otlp_url, (unsigned long long)st.dropped,
			(unsigned long long)st.failed, (unsigned long long)st.unsent);
	x->otlp_url = NULL;
	return 0;
}

static const struct exporter_row exporter_rows[] = {
	{ "gpu usage", usage_wanted, usage_open, NULL, usage_close },
	{ "alerts", alerts_wanted, alerts_open, NULL, NULL },
	{ "prometheus", prom_wanted, prom_open, NULL, prom_close },
	{ "timeline", timeline_wanted, timeline_row_open, timeline_source, timeline_row_close },
	{ "html", html_wanted, html_row_open, html_source, html_row_close },
	{ "otlp", otlp_wanted, otlp_row_open, otlp_source, otlp_row_close },
};
#define EXPORTER_ROWS (sizeof(exporter_rows) / sizeof(exporter_rows[0]))

int exporters_start(struct exporters *x, const struct export_opts *eo, struct pipeline *pl,
		    uint64_t origin_ns)
{
	memset(x, 0, sizeof(*x));
	x->out = eo->out ? eo->out : stdout;
	x->err = eo->err ? eo->err : stderr;
	/* report --prometheus: out carries the metrics text alone. */
	x->print_to_stderr = eo->json || eo->prometheus;
	for (size_t i = 0; i < EXPORTER_ROWS; i++) {
		const struct exporter_row *row = &exporter_rows[i];
		struct sink sink;
		int err;

		if (!row->wanted(eo))
			continue;
		err = row->open(x, eo, origin_ns, &sink);
		if (!err)
			err = pipeline_add_sink(pl, &sink);
		if (err)
			return err;
	}
	/* Last, once every exporter is up: a failure above leaves no thread to stop. Without a
	 * driver the thread keeps why and ends; tracing goes on. */
	if (want_gpu(eo)) {
		/* Why there are no GPU figures is said once a traced process maps a CUDA
		 * library: not on every run of a machine without a GPU. */
		struct nvml_opts no = { .quiet = true };

		x->nvml = nvml_start(&no);
		if (!x->nvml)
			return -ENOMEM;
	}
	return 0;
}

void exporters_set_source(struct exporters *x, const char *path, uint64_t start_mono_ns,
			  int64_t real_offset_ns, const char *host)
{
	for (size_t i = 0; i < EXPORTER_ROWS; i++)
		if (exporter_rows[i].set_source)
			exporter_rows[i].set_source(x, path, start_mono_ns, real_offset_ns, host);
}

void exporters_set_summary(struct exporters *x, const struct summary *total,
			   const struct diagnosis *d)
{
	if (x->html)
		html_set_summary(x->html, total, d);
}

void exporters_flush(struct exporters *x)
{
	otlp_close(&x->otlp);
}

int exporters_stop(struct exporters *x)
{
	int err = 0;

	nvml_stop(x->nvml);
	x->nvml = NULL;
	/* In the table's order; every row is closed whatever the others did (a row not opened
	 * closes as a no-op). */
	for (size_t i = 0; i < EXPORTER_ROWS; i++) {
		int e = exporter_rows[i].close ? exporter_rows[i].close(x) : 0;

		if (e && !err)
			err = e;
	}
	/* The alerts last: the metrics' text, closed above, renders their series. */
	if (x->alerts_on) {
		alert_free(&x->alerts);
		x->alerts_on = false;
	}
	return err;
}
