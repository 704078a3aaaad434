/* SPDX-License-Identifier: MIT */
/*
 * Every sink of a run, one row each in the table of session/sinks.c: report's diagnosis, the
 * exporters (the GPU usage, alerts, Prometheus, the timeline, the HTML page, OTLP), the request
 * lines, the summaries and the live view. The session opens and registers them, gives them a
 * recording's source, ends and closes them through the calls below, the same way for the live
 * tracer and for a report replayed from a recording; the order is the table's (session.h).
 */
#ifndef TS_SESSION_SINKS_H
#define TS_SESSION_SINKS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <termios.h>

#include "pipeline/labels.h"
#include "pipeline/slo.h"
#include "sinks/alert.h"
#include "sinks/diagnosis.h"
#include "sinks/otlp.h"
#include "sinks/output.h"
#include "sinks/summary.h"
#include "sinks/timeline.h"
#include "sinks/top.h"

/* The options of the exporters (the request lines, the summaries, the diagnosis and the live
 * view take theirs from struct session_opts). */
struct export_opts {
	const char *listen;		     /* --listen ADDR:PORT, or NULL */
	const char *timeline;		     /* --timeline FILE, or NULL */
	const char *html;		     /* --html FILE, or NULL */
	const char *alerts[ALERT_MAX_RULES]; /* --alert rules (already checked by alert_parse) */
	int nalerts;
	const char *alert_exec; /* --alert-exec CMD, or NULL */
	bool prometheus;	/* report --prometheus: print the metrics text at the end */
	bool by_process;	/* --by-process: a pid label on the request metrics */
	bool no_pod_labels;	/* --no-pod-labels: no namespace and pod labels on them */
	const char *otlp_url;	/* --otlp URL, or NULL */
	const char *otlp_ca;	/* --otlp-ca FILE, or NULL */
	int64_t slow_ttft_ns, slow_itl_ns; /* anomalies exported in full; 0: not checked */
	double trace_sample;		   /* share of normal requests exported as summary spans */
	uint32_t trace_warm_up;		   /* the first requests exported whatever the ratio */
	/* --slo: the objectives every request is judged on (the pipeline's, slo.h); the sinks
	 * see the verdicts in request_metrics. */
	struct slo_rules slo;
	/* --stall-ms: a token gap this long or longer is a stall (stall.h); 0: per request */
	uint64_t stall_ns;
	/* --label: values requests carry (labels.h); JSON and OTLP show them, Prometheus and
	 * the summary's SLO lines split by them. label_top: Prometheus values kept per label. */
	struct req_label_set labels;
	uint32_t label_top;
};

struct httpd;
struct html;
struct prom;
struct device_sample;
struct device_usage;

/* The state of every row, each its own fields; zeroed, every row closes as a no-op. */
struct sinks {
	uint64_t origin_ns; /* time zero of the timeline and the HTML page */
	/* report's diagnosis */
	struct diagnosis diag;
	bool diag_on;
	/* GPU utilisation and memory: every sample the driver gives, for the summary */
	struct device_usage *gpu_usage;
	/* the exporters */
	struct alert_set alerts;
	bool alerts_on;
	struct httpd *httpd;
	struct prom *prom;
	bool print_prometheus;
	struct timeline tl;
	bool tl_open;
	const char *tl_path;
	struct html *html; /* --html: the page, written when the run ends */
	const char *html_path;
	struct otlp otlp; /* zeroed: closing is a no-op unless it was started */
	const char *otlp_url;
	/* the request lines, the summaries */
	struct lines lines;
	struct summaries sums;
	/* the live view, and the terminal's mode before its keys (raw) */
	struct top top;
	bool top_on, raw;
	struct termios saved;
};

struct session;
struct record_meta;

/* Opens the rows the session's options want, in the table's order, and registers their sinks:
 * those of the start (at_begin false), after which the GPU sampler starts if an output shows
 * its samples, or those opened when tracing begins (at_begin true: the live view). 0, or a
 * negative errno after printing why; sinks_close undoes it either way. */
int sinks_open(struct session *s, bool at_begin);
/* A replay: the recording at path and its header (clocks and host), before the first record:
 * the timeline's zero, the spans' unix times and host, the diagnosis's wall clock. */
void sinks_set_source(struct session *s, const char *path, const struct record_meta *m);
/* After pipeline_finish: what the rows still hold sent (the trace exporter's last spans, a
 * bounded wait), then what they print of the whole run (report's diagnosis). */
void sinks_finish(struct session *s);
/* Closes every row: the live view first (the terminal as it was), the GPU sampler stopped, the
 * others in the table's order (the GPUs' figures, the exporters' counters and, on stderr, how
 * many traces the collector did not get; the timeline and the HTML page written; the metrics
 * printed if asked; the endpoint stopped), then what their closing read (the alerts, the
 * diagnosis) freed. Returns the first error; traces not delivered are not one (tracing itself
 * worked). */
int sinks_close(struct session *s);
/* Whether a live trace's outputs show the GPUs' samples (--listen, --timeline, top): then the
 * loader samples them, and the summary has them too. A replay gets those its recording holds;
 * a plain trace's summary alone does not sample, so a run that asked for none of these prints
 * nothing new where there is no driver. */
bool sinks_want_device_samples(const struct session *s);

#endif
