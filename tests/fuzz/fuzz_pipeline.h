/* SPDX-License-Identifier: MIT */
/*
 * A pipeline as the loader sets one up, for fuzz_pipeline and fuzz_record: options picked by a
 * byte of the input, and the exporters that are pure functions of the event stream (Prometheus
 * with a publisher that takes each snapshot, alerts without --alert-exec, a timeline into
 * /dev/null), all writing to /dev/null. The OTLP sink is left out: its encoder has a target of
 * its own (fuzz_json_string) and its queue would only fill.
 */
#ifndef TS_FUZZ_PIPELINE_H
#define TS_FUZZ_PIPELINE_H

#include "sinks/alert.h"
#include "fuzz.h"
#include "sinks/output.h"
#include "pipeline/pipeline.h"
#include "sinks/prom.h"
#include "sinks/summary.h"
#include "sinks/timeline.h"

enum {
	FP_JSON = 1,
	FP_TOKENS = 2,
	FP_VERBOSE = 4, /* also the summaries at the end (their percentiles cost most of a run) */
	FP_GPU = 8,	/* --gpu-steps and --kernels */
	FP_KEEP_RUNNING = 16, /* --all */
	FP_PROM = 32,	      /* --listen (with --by-process when FP_VERBOSE is set too) */
	FP_ALERTS = 64,	      /* --alert */
	FP_TIMELINE = 128,    /* --timeline */
};

/* Rules that hold on ordinary traffic and on none at all, so both firing and resolving run. */
static const char *const fuzz_alert_rules[] = {
	"ttft.p50 > 1us",
	"success < 99%",
	"rps >= 0 for 2s",
	"itl.p99 <= 5s for 1s",
};

struct fuzz_pipeline {
	struct pipeline pl;
	struct lines lines;
	struct summaries sums;
	struct prom *prom;
	struct alert_set alerts;
	struct timeline tl;
	bool alerts_on, tl_on;
	unsigned flags;
};

/* The publisher owns each snapshot: a scrape would serve it, here it is only checked. */
static void fuzz_prom_publish(void *ctx, char *buf, size_t len)
{
	(void)ctx;
	FUZZ_CHECK(strlen(buf) == len, "a snapshot of %zu bytes with a NUL at %zu", len,
		   strlen(buf));
	free(buf);
}

static void fuzz_pipeline_open(struct fuzz_pipeline *f, unsigned flags)
{
	struct pipeline_opts o = {
		.verbose = flags & FP_VERBOSE,
		.err = fuzz_devnull(),
	};
	struct lines_opts lo = {
		.out = fuzz_devnull(),
		.json = flags & FP_JSON,
		.tokens = flags & FP_TOKENS,
		.gpu_steps = flags & FP_GPU,
		.gpu_calls = flags & FP_GPU,
	};
	struct sink s;

	memset(f, 0, sizeof(*f));
	f->flags = flags;
	if (pipeline_init(&f->pl, &o))
		abort();
	f->pl.keep_running = flags & FP_KEEP_RUNNING;
	if (flags & FP_PROM) {
		f->prom = prom_new(fuzz_prom_publish, NULL);
		if (!f->prom)
			abort();
		prom_set_by_process(f->prom, flags & FP_VERBOSE);
		s = prom_sink(f->prom);
		pipeline_add_sink(&f->pl, &s);
	}
	if (flags & FP_ALERTS) {
		if (alert_init(&f->alerts, fuzz_devnull(), NULL))
			abort();
		for (size_t i = 0; i < sizeof(fuzz_alert_rules) / sizeof(fuzz_alert_rules[0]);
		     i++) {
			struct alert_rule r;
			char err[256];

			if (alert_parse(fuzz_alert_rules[i], &r, err, sizeof(err)) ||
			    alert_add(&f->alerts, &r))
				abort();
		}
		f->alerts_on = true;
		s = alert_sink(&f->alerts);
		pipeline_add_sink(&f->pl, &s);
		if (f->prom)
			prom_set_extra(f->prom, alert_render_prom, &f->alerts);
	}
	if (flags & FP_TIMELINE) {
		if (timeline_open(&f->tl, "/dev/null"))
			abort();
		f->tl_on = true;
		s = timeline_sink(&f->tl);
		pipeline_add_sink(&f->pl, &s);
	}
	/* The request lines, then the summaries, last, as the loader registers them. */
	lines_init(&f->lines, &lo);
	s = lines_sink(&f->lines);
	pipeline_add_sink(&f->pl, &s);
	summaries_init(&f->sums, fuzz_devnull());
	s = summaries_sink(&f->sums);
	pipeline_add_sink(&f->pl, &s);
}

/* The end of a run, as the loader does it: lost requests, the sinks' finish, the summaries. */
static void fuzz_pipeline_close(struct fuzz_pipeline *f)
{
	/* The sinks' finish: the summary's total among them. */
	pipeline_finish(&f->pl);
	if (f->flags & FP_VERBOSE)
		pipeline_interval(&f->pl);
	if (f->prom) {
		char *buf;
		size_t len;

		if (prom_render(f->prom, &buf, &len) == 0)
			fuzz_prom_publish(NULL, buf, len);
	}
	pipeline_free(&f->pl);
	if (f->tl_on)
		timeline_close(&f->tl);
	if (f->alerts_on)
		alert_free(&f->alerts);
	prom_free(f->prom);
}

#endif
