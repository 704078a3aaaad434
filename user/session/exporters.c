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
static void usage_sample(void *ctx, const struct nvml_snapshot *s)
{
	nvml_usage_add(ctx, s);
}

void exporters_cuda_seen(struct exporters *x)
{
	nvml_say_why(x->nvml);
}

struct nvml_snapshot *exporters_gpu_sample(struct exporters *x)
{
	return x->nvml && nvml_latest(x->nvml, x->gpu) ? x->gpu : NULL;
}

int exporters_start(struct exporters *x, const struct export_opts *eo, struct pipeline *pl,
		    uint64_t origin_ns)
{
	/* A replay has no GPU to read; a plain trace's summary alone does not open NVML, so a run
	 * that asked for neither output prints nothing new where there is no driver. */
	bool want_gpu = !eo->replay && (eo->listen || eo->timeline || eo->top);
	/* A replay gets the samples its recording holds: their summary too. */
	bool want_usage = want_gpu || eo->replay;
	struct sink sink;
	int err;

	memset(x, 0, sizeof(*x));
	x->out = eo->out ? eo->out : stdout;
	x->err = eo->err ? eo->err : stderr;
	/* report --prometheus: out carries the metrics text alone. */
	x->print_to_stderr = eo->json || eo->prometheus;
	if (want_usage) {
		x->gpu = want_gpu ? calloc(1, sizeof(*x->gpu)) : NULL;
		x->gpu_usage = calloc(1, sizeof(*x->gpu_usage));
		if ((want_gpu && !x->gpu) || !x->gpu_usage)
			return -ENOMEM;
		sink = (struct sink){ .name = "nvml",
				      .ctx = x->gpu_usage,
				      .gpu_sample = usage_sample };
		err = pipeline_add_sink(pl, &sink);
		if (err)
			return err;
	}
	if (eo->listen) {
		/* Bound before anything is attached, so a busy port fails fast. */
		err = httpd_start(&x->httpd, eo->listen, x->err);
		if (err)
			return err;
		fprintf(x->err, "tokenscope: metrics at http://%s/metrics\n",
			httpd_address(x->httpd));
	}
	/* Alerts before the metrics: a tick evaluates them before the snapshot is rendered. */
	if (eo->nalerts) {
		err = alert_init(&x->alerts, x->err, eo->alert_exec);
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
		sink = alert_sink(&x->alerts);
		err = pipeline_add_sink(pl, &sink);
		if (err)
			return err;
	}
	if (eo->listen || eo->prometheus) {
		x->prom = prom_new(x->httpd ? httpd_publish : NULL, x->httpd);
		if (!x->prom)
			return -ENOMEM;
		x->print_prometheus = eo->prometheus;
		prom_set_by_process(x->prom, eo->by_process);
		prom_set_pod_labels(x->prom, !eo->no_pod_labels);
		x->labels = eo->labels;
		if (prom_set_labels(x->prom, &x->labels, eo->label_top))
			return -ENOMEM;
		if (x->alerts_on)
			prom_set_extra(x->prom, alert_render_prom, &x->alerts);
		sink = prom_sink(x->prom);
		err = pipeline_add_sink(pl, &sink);
		if (err)
			return err;
	}
	if (eo->timeline) {
		err = timeline_open(&x->tl, eo->timeline);
		x->tl_path = eo->timeline;
		if (err) {
			fprintf(x->err, "tokenscope: %s: %s\n", eo->timeline, strerror(-err));
			return err;
		}
		x->tl_open = true;
		timeline_set_origin(&x->tl, origin_ns);
		sink = timeline_sink(&x->tl);
		err = pipeline_add_sink(pl, &sink);
		if (err)
			return err;
	}
	if (eo->html) {
		err = html_open(&x->html, eo->html, origin_ns);
		if (err) {
			fprintf(x->err, "tokenscope: %s: %s\n", eo->html, strerror(-err));
			return err;
		}
		x->html_path = eo->html;
		sink = html_sink(x->html);
		err = pipeline_add_sink(pl, &sink);
		if (err)
			return err;
	}
	if (eo->otlp_url) {
		struct otlp_opts oo;
		char host[256] = "";

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
		sink = otlp_sink(&x->otlp);
		err = pipeline_add_sink(pl, &sink);
		if (err)
			return err;
	}
	/* Last, once every exporter is up: a failure above leaves no thread to stop. Without a
	 * driver the thread keeps why and ends; tracing goes on. */
	if (want_gpu) {
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
	if (x->otlp_url)
		otlp_set_source(&x->otlp, real_offset_ns, host);
	/* Before the first record: the timeline's zero is the start of the recording. */
	if (x->tl_open)
		timeline_set_origin(&x->tl, start_mono_ns);
	if (x->html)
		html_set_source(x->html, path, start_mono_ns, real_offset_ns, host);
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
	if (x->gpu_usage) {
		nvml_usage_print(x->gpu_usage, x->print_to_stderr ? x->err : x->out);
		fflush(x->out);
	}
	free(x->gpu);
	x->gpu = NULL;
	free(x->gpu_usage);
	x->gpu_usage = NULL;
	otlp_close(&x->otlp);
	if (x->otlp_url) {
		struct otlp_stats st;

		uint64_t lost;

		otlp_get_stats(&x->otlp, &st);
		otlp_print_stats(&st, x->otlp_url, x->print_to_stderr ? x->err : x->out);
		lost = st.dropped + st.failed + st.unsent;
		fflush(x->out); /* after the counters in a pipe too */
		if (lost)
			fprintf(x->err,
				"tokenscope: otlp: %llu traces not delivered to %s (%llu dropped, "
				"%llu failed, %llu unsent)\n",
				(unsigned long long)lost, x->otlp_url,
				(unsigned long long)st.dropped, (unsigned long long)st.failed,
				(unsigned long long)st.unsent);
		x->otlp_url = NULL;
	}

	if (x->tl_open) {
		err = timeline_close(&x->tl);
		if (err)
			fprintf(x->err, "tokenscope: writing the timeline failed: %s\n",
				strerror(-err));
		else
			say_written(x->err, "the timeline", x->tl_path);
		x->tl_open = false;
	}
	if (x->html) {
		int e = html_close(x->html);

		if (e) {
			fprintf(x->err, "tokenscope: writing the HTML report to %s failed: %s\n",
				x->html_path, strerror(-e));
			if (!err)
				err = e;
		} else {
			say_written(x->err, "the HTML report", x->html_path);
		}
		x->html = NULL;
	}
	if (x->print_prometheus && x->prom) {
		char *buf = NULL;
		size_t len = 0;

		if (!prom_render(x->prom, &buf, &len)) {
			fwrite(buf, 1, len, x->out);
			fflush(x->out);
		}
		free(buf);
	}
	if (x->alerts_on) {
		alert_free(&x->alerts);
		x->alerts_on = false;
	}
	httpd_stop(x->httpd);
	x->httpd = NULL;
	prom_free(x->prom);
	x->prom = NULL;
	return err;
}
