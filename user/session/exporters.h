/* SPDX-License-Identifier: MIT */
/*
 * The exporters a run asked for (Prometheus endpoint, timeline file, alerts), set up as pipeline
 * sinks the same way for the live tracer and for a report replayed from a recording.
 */
#ifndef TS_EXPORTERS_H
#define TS_EXPORTERS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sinks/alert.h"
#include "sinks/otlp.h"
#include "pipeline/pipeline.h"
#include "pipeline/slo.h"
#include "sinks/timeline.h"

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
	bool json; /* the summary (and the exporters' counters) go to stderr */
	bool top;  /* tokenscope top: its frames show the GPU samples */
	/* report: records are replayed faster than they happened, so the trace exporter waits
	 * for room in its queue rather than dropping, and for it to drain at the end (both
	 * bounded by its retry policy); times and host.name come from exporters_set_source. */
	bool replay;
	/* Where outputs and messages go; NULL: stdout and stderr. */
	FILE *out, *err;
};

struct httpd;
struct html;
struct prom;
struct summary;
struct diagnosis;
struct nvml;
struct device_sample;
struct device_usage;

struct exporters {
	struct httpd *httpd;
	struct prom *prom;
	struct req_label_set labels; /* --label, as the metrics' labels (a copy: they outlive eo) */
	struct timeline tl;
	bool tl_open;
	const char *tl_path;
	struct html *html; /* --html: the page, written when the run ends */
	const char *html_path;
	struct alert_set alerts;
	bool alerts_on;
	bool print_prometheus;
	struct otlp otlp; /* zeroed: closing is a no-op unless it was started */
	const char *otlp_url;
	bool print_to_stderr; /* the counters: with --json or --prometheus */
	/* GPU utilisation and memory (NVML): sampled in a live trace whose output carries them,
	 * --listen, --timeline or top, and then in the summary too. */
	struct nvml *nvml;
	struct device_sample *gpu;	/* the latest sample, cut down to the traced processes */
	struct device_usage *gpu_usage; /* every sample, for the summary */
	FILE *out, *err;		/* export_opts' (stdout and stderr by default) */
};

/* Starts what eo asks for and registers the sinks; origin_ns is the timeline's time zero (a
 * CLOCK_MONOTONIC time no record precedes). Prints why on failure. */
int exporters_start(struct exporters *x, const struct export_opts *eo, struct pipeline *pl,
		    uint64_t origin_ns);
/* After each drain and before the tick: a new GPU sample, if the sampler has one (valid until
 * the next call), else NULL. */
struct device_sample *exporters_gpu_sample(struct exporters *x);
/* A traced process has a CUDA library hooked: why there is no GPU sample is said now (once). */
void exporters_cuda_seen(struct exporters *x);
/* A replay: the records (of the recording at path) were made on host, recording from when
 * CLOCK_MONOTONIC read start_mono_ns, with CLOCK_REALTIME real_offset_ns ahead of it (a
 * recording's header, record_meta). Call before the first record is fed, so that every span
 * carries the recording's unix times, not this machine's. */
void exporters_set_source(struct exporters *x, const char *path, uint64_t start_mono_ns,
			  int64_t real_offset_ns, const char *host);
/* The run's summary (the summaries sink's total) and report's diagnosis (NULL in a live run),
 * which the HTML page shows as they are. Before the first record. */
void exporters_set_summary(struct exporters *x, const struct summary *total,
			   const struct diagnosis *d);
/* After pipeline_finish, before the summary: sends what the trace exporter still holds
 * (bounded wait). */
void exporters_flush(struct exporters *x);
/* After the summary: stops the GPU sampler and prints the GPUs' figures, prints the exporters'
 * counters (and, on stderr, how many traces the collector did not get), closes the timeline and
 * the HTML page, prints the metrics if asked, stops the endpoint. Returns the first error; traces
 * not delivered are not one (tracing itself worked). */
int exporters_stop(struct exporters *x);

#endif
