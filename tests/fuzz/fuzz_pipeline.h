/* SPDX-License-Identifier: MIT */
/*
 * A pipeline as the loader sets one up, for fuzz_pipeline, with every output on and each checked
 * when the run ends (fuzz_outputs.h, and what they mean: fuzz_meaning.h): the request lines as text
 * and as JSON, the summaries (text and the {"summary"} JSON line), the diagnosis, top's frames, the
 * alerts' messages, the pipeline's own messages, the Prometheus exposition (every snapshot a tick
 * publishes, and the last), OTLP batches (the sink with no endpoint keeps its spans; a sink after
 * it encodes them on every tick, as the sender would), and with FP_HEAVY the alerts, the timeline
 * and the HTML report (which are files): those three cost most of a run, so half the inputs go
 * without. Options come from a byte of the input.
 */
#ifndef TS_FUZZ_PIPELINE_H
#define TS_FUZZ_PIPELINE_H

#include "sinks/alert.h"
#include "sinks/diagnosis.h"
#include "fuzz_meaning.h"
#include "sinks/html.h"
#include "sinks/otlp.h"
#include "sinks/output.h"
#include "pipeline/pipeline_impl.h"
#include "sinks/prom.h"
#include "sinks/summary.h"
#include "sinks/timeline.h"
#include "sinks/top.h"

enum {
	FP_TOKENS = 1,	     /* --tokens */
	FP_VERBOSE = 2,	     /* -v; the interval summaries of OP_TICK too */
	FP_GPU = 4,	     /* --gpu-steps and --kernels */
	FP_KEEP_RUNNING = 8, /* --all */
	FP_BY_PROCESS = 16,  /* --by-process: a pid label, top's PID column */
	FP_TTY = 32,	     /* top's frames as on a terminal (clear-screen first) */
	FP_HEAVY = 64,	     /* the timeline and the HTML report (files), and the alerts */
	FP_SLOW = 128,	     /* OTLP: every request anomalous (full detail, token events) */
};

/* Rules that hold on ordinary traffic and on none at all, so both firing and resolving run. */
static const char *const fuzz_alert_rules[] = {
	"ttft.p50 > 1us",
	"success < 99%",
	"rps >= 0 for 2s",
	"itl.p99 <= 5s for 1s",
};

/* Spans taken off the OTLP queue and encoded at a time. */
#define FUZZ_OTLP_BATCH 32

struct fuzz_stream {
	FILE *f;
	char *buf;
	size_t len;
};

struct fuzz_pipeline {
	struct pipeline pl;
	struct lines text_lines, json_lines;
	struct summaries sums;
	struct diagnosis diag;
	struct top top;
	struct prom *prom;
	struct alert_set alerts;
	struct otlp otlp;
	struct timeline tl;
	struct html *html;
	/* terminal text; JSON lines; top's frames */
	struct fuzz_stream text, json, frames;
	char tl_path[128], html_path[128];
	unsigned flags;
	struct fuzz_clock clock;       /* the times of every record fed (the interpreter's) */
	struct fuzz_otlp_run otlp_run; /* the spans encoded so far */
};

static void fuzz_stream_open(struct fuzz_stream *s)
{
	s->f = open_memstream(&s->buf, &s->len);
	if (!s->f)
		abort();
}

/* Closes the stream; its bytes stay in s->buf (freed by the caller). */
static void fuzz_stream_close(struct fuzz_stream *s)
{
	if (fclose(s->f))
		abort();
	s->f = NULL;
}

/* Every snapshot a tick publishes is an exposition like the last, and means what it must with
 * the records fed so far. */
static void fuzz_prom_publish(void *ctx, char *buf, size_t len)
{
	struct fuzz_pipeline *f = ctx;

	FUZZ_CHECK(strlen(buf) == len, "a snapshot of %zu bytes with a NUL at %zu", len,
		   strlen(buf));
	fuzz_check_prom(buf, len, NULL);
	fuzz_prom_meaning(buf, len, &f->clock);
	free(buf);
}

/* The OTLP queue, encoded batch by batch as the sender would and checked. */
static void fuzz_otlp_drain(struct fuzz_pipeline *f)
{
	struct otlp_span *spans[FUZZ_OTLP_BATCH];
	size_t n;

	while ((n = otlp_take(&f->otlp, spans, FUZZ_OTLP_BATCH))) {
		char *buf = NULL;
		size_t len = 0;

		if (otlp_encode(&f->otlp, spans, n, &buf, &len) == 0) {
			cJSON *j = fuzz_check_json("otlp batch", buf, len);

			fuzz_otlp_meaning(j, &f->clock, &f->otlp_run);
			cJSON_Delete(j);
			free(buf);
		}
		for (size_t i = 0; i < n; i++)
			otlp_span_free(spans[i]);
	}
}

static void fuzz_otlp_tick(void *ctx, const struct pipeline_status *st)
{
	(void)st;
	fuzz_otlp_drain(ctx);
}

static void fuzz_add_sink(struct fuzz_pipeline *f, struct sink s)
{
	if (pipeline_add_sink(&f->pl, &s))
		abort();
}

/* FP_HEAVY: objectives and labels, so that every request is judged, labelled and split. */
static struct slo_rules fuzz_slo;
static struct req_label_set fuzz_labels;

static void fuzz_pipeline_open(struct fuzz_pipeline *f, unsigned flags)
{
	struct pipeline_opts o = { .verbose = flags & FP_VERBOSE };
	struct lines_opts lo = {
		.tokens = flags & FP_TOKENS,
		.gpu_steps = flags & FP_GPU,
		.gpu_calls = flags & FP_GPU,
	};
	struct otlp_opts oo;

	memset(f, 0, sizeof(*f));
	f->flags = flags;
	fuzz_clock_init(&f->clock);
	fuzz_stream_open(&f->text);
	fuzz_stream_open(&f->json);
	fuzz_stream_open(&f->frames);
	o.err = f->text.f;
	if (flags & FP_HEAVY) {
		char msg[256];

		memset(&fuzz_slo, 0, sizeof(fuzz_slo));
		memset(&fuzz_labels, 0, sizeof(fuzz_labels));
		if (slo_parse(&fuzz_slo, "ttft<=5ms,tpot<=1ms", msg, sizeof(msg)) ||
		    req_labels_parse(&fuzz_labels, "tenant=header:X-Tenant-Id", msg, sizeof(msg)) ||
		    req_labels_parse(&fuzz_labels, "user=body:user", msg, sizeof(msg)))
			abort();
		o.slo = &fuzz_slo;
		o.labels = &fuzz_labels;
	}
	if (pipeline_init(&f->pl, &o))
		abort();
	f->pl.keep_running = flags & FP_KEEP_RUNNING;
	/* In the loader's order: alerts, then the metrics, the files, traces; the lines and the
	 * summaries last. */
	if (flags & FP_HEAVY) {
		if (alert_init(&f->alerts, f->text.f, NULL))
			abort();
		for (size_t i = 0; i < sizeof(fuzz_alert_rules) / sizeof(fuzz_alert_rules[0]);
		     i++) {
			struct alert_rule r;
			char err[256];

			if (alert_parse(fuzz_alert_rules[i], &r, err, sizeof(err)) ||
			    alert_add(&f->alerts, &r))
				abort();
		}
		fuzz_add_sink(f, alert_sink(&f->alerts));
	}
	f->prom = prom_new(fuzz_prom_publish, f);
	if (!f->prom)
		abort();
	prom_set_by_process(f->prom, flags & FP_BY_PROCESS);
	if (flags & FP_HEAVY) {
		prom_set_extra(f->prom, alert_render_prom, &f->alerts);
		if (prom_set_labels(f->prom, &fuzz_labels, 3))
			abort();
	}
	fuzz_add_sink(f, prom_sink(f->prom));
	diagnosis_init(&f->diag);
	fuzz_add_sink(f, diagnosis_sink(&f->diag));
	if (flags & FP_HEAVY) {
		snprintf(f->tl_path, sizeof(f->tl_path), "%s/timeline.json", fuzz_tmpdir());
		snprintf(f->html_path, sizeof(f->html_path), "%s/page.html", fuzz_tmpdir());
		if (timeline_open(&f->tl, f->tl_path))
			abort();
		fuzz_add_sink(f, timeline_sink(&f->tl));
		if (html_open(&f->html, f->html_path, 0))
			abort();
		html_set_summary(f->html, &f->sums.total, &f->diag);
		fuzz_add_sink(f, html_sink(f->html));
	}
	otlp_opts_default(&oo);
	oo.endpoint = NULL; /* spans stay queued for otlp_take */
	oo.hostname = "fuzz";
	oo.seed = 1;
	oo.sample_ratio = 1;
	oo.err = f->text.f;
	if (flags & FP_SLOW)
		oo.slow_ttft_ns = oo.slow_itl_ns = 1;
	if (otlp_init(&f->otlp, &oo))
		abort();
	fuzz_add_sink(f, otlp_sink(&f->otlp));
	fuzz_add_sink(f, (struct sink){ .name = "otlp-drain",
					.ctx = f,
					.tick = fuzz_otlp_tick,
					.finish = fuzz_otlp_tick });
	if (top_init(&f->top, f->frames.f, flags & FP_TTY, flags & FP_BY_PROCESS))
		abort();
	fuzz_add_sink(f, top_sink(&f->top));
	/* The request lines, then the summaries, last, as the loader registers them. */
	lo.out = f->text.f;
	lines_init(&f->text_lines, &lo);
	fuzz_add_sink(f, lines_sink(&f->text_lines));
	lo.out = f->json.f;
	lo.json = true;
	lines_init(&f->json_lines, &lo);
	fuzz_add_sink(f, lines_sink(&f->json_lines));
	summaries_init(&f->sums, f->text.f);
	summaries_set_json(&f->sums, f->json.f);
	fuzz_add_sink(f, summaries_sink(&f->sums));
}

/* The end of a run, as the loader does it, then every output checked. */
static void fuzz_pipeline_close(struct fuzz_pipeline *f)
{
	char *buf;
	size_t len;

	/* The sinks' finish: the summary's total, top's last frame, the page. */
	pipeline_finish(&f->pl);
	if (f->flags & FP_VERBOSE)
		pipeline_interval(&f->pl);
	diagnosis_print(&f->diag, f->text.f);
	if (prom_render(f->prom, &buf, &len) == 0)
		fuzz_prom_publish(f, buf, len);
	fuzz_otlp_drain(f);
	fuzz_otlp_run_end(&f->otlp_run);
	otlp_close(&f->otlp);
	pipeline_free(&f->pl);
	if (f->flags & FP_HEAVY)
		alert_free(&f->alerts);
	prom_free(f->prom);
	top_free(&f->top);
	diagnosis_free(&f->diag);

	fuzz_stream_close(&f->text);
	fuzz_stream_close(&f->json);
	fuzz_stream_close(&f->frames);
#ifdef FUZZ_SHOW
	fwrite(f->text.buf, 1, f->text.len, stdout);
	fwrite(f->json.buf, 1, f->json.len, stdout);
	fwrite(f->frames.buf, 1, f->frames.len, stdout);
#endif
	fuzz_check_text("text output", f->text.buf, f->text.len, NULL);
	fuzz_text_meaning("text output", f->text.buf, f->text.len, &f->clock);
	fuzz_check_json_lines("JSON lines", f->json.buf, f->json.len);
	fuzz_json_lines_meaning("JSON lines", f->json.buf, f->json.len, &f->clock);
	fuzz_check_text("top", f->frames.buf, f->frames.len, f->flags & FP_TTY ? TOP_CLEAR : NULL);
	free(f->text.buf);
	free(f->json.buf);
	free(f->frames.buf);

	if (f->flags & FP_HEAVY) {
		FUZZ_CHECK(timeline_close(&f->tl) == 0, "the timeline could not be written");
		FUZZ_CHECK(html_close(f->html) == 0, "the page could not be written");
		buf = fuzz_read_file(f->tl_path, &len);
		FUZZ_CHECK(buf, "no timeline file");
		cJSON_Delete(fuzz_check_json("timeline", buf, len));
		free(buf);
		buf = fuzz_read_file(f->html_path, &len);
		FUZZ_CHECK(buf, "no HTML page");
		fuzz_check_html(buf, len);
		free(buf);
	}
}

#endif
