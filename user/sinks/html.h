/* SPDX-License-Identifier: MIT */
/*
 * The HTML report (--html FILE): one self-contained page, written when the run ends, that reads
 * nothing from the network: its CSS and its script (html_page.html, built in) are inside, and
 * the script draws the charts as inline SVG. It shows the summary's figures, the latency
 * histograms, TTFT and ITL P50/P99 over time, each request's socket wait, queue, prefill and
 * decode, the GPU steps on a timeline, what was lost, and the diagnosis in words.
 *
 * A sink, in bounded memory: the first HTML_MAX_REQUESTS requests and HTML_MAX_STEPS GPU steps
 * are kept one by one and the rest counted (the page says how many it leaves out); TTFT and ITL
 * over time are coarse histograms per time bucket of every request (HTML_SERIES_BUCKETS, twice
 * as wide whenever the run outgrows them). The page's figures and histograms are the run's
 * summary itself (html_set_summary), written by summary_json as the {"summary":...} line of
 * --json is, so the two show one computation.
 *
 * The data is one JSON document in <script type="application/json" id="ts-data">, written with
 * every '<' as \u003c, so that no string in it (a model name) can close the element or open a
 * comment. Its requests and steps are tables ("columns", then "rows"): another per-request
 * field is one line in html.c's column table. No prompt or completion text is ever in it: only
 * numbers, model names and outcomes.
 */
#ifndef TS_HTML_H
#define TS_HTML_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/sink.h"

/* Requests and GPU steps kept one by one for the page's per-request and step charts (112 and
 * 40 bytes each, in arrays that double: 15 MB and 10 MB at most); the histograms, percentiles
 * and series cover every request. */
#define HTML_MAX_REQUESTS 100000
#define HTML_MAX_STEPS 200000
/* The page's own diagnosis (a live run) keeps every token gap of the requests it is given
 * (12 bytes each): it is given the kept requests while their gaps stay under this many, 12 MB;
 * the page says how many it was not given. */
#define HTML_DIAG_MAX_GAPS 1000000
/* Distinct model names kept; requests of later ones are shown as one "other models". */
#define HTML_MAX_MODELS 64
/* Time buckets of the TTFT and ITL series (from the first arrival), and the first bucket
 * width: a burst of a second gets a point every 10 ms; a longer run merges buckets two by two,
 * so that it has 60 to 120 of them (1.3 MB). */
#define HTML_SERIES_BUCKETS 120
#define HTML_SERIES_FIRST_NS 10000000ull

struct html;
struct summary;
struct diagnosis;

/* Creates a file beside path now (path.XXXXXX), so a bad path fails before tracing starts; the
 * page is written to it at the end (the sink's finish) and renamed to path by html_close, so
 * an earlier page at path stays whole until then. origin_ns: the run's time zero (CLOCK_MONOTONIC),
 * as for the timeline. 0, or a negative errno. */
int html_open(struct html **hp, const char *path, uint64_t origin_ns);
/* A replay: the recording's path, clocks (the origin becomes start_mono_ns; CLOCK_REALTIME is
 * real_offset_ns ahead of CLOCK_MONOTONIC) and host, shown in the page's header. Before the
 * first record. */
void html_set_source(struct html *h, const char *what, uint64_t start_mono_ns,
		     int64_t real_offset_ns, const char *host);
/* The run's summary (the summaries sink's total), and report's diagnosis. Without a diagnosis
 * the page keeps its own, over the requests it keeps. Before the end of the run. */
void html_set_summary(struct html *h, const struct summary *total, const struct diagnosis *d);
struct sink html_sink(struct html *h);
/* Closes the file, renames it to path once the page is whole (else removes it: a run that
 * never finished leaves path alone), and frees h: 0, or the first error writing the page
 * (-errno). */
int html_close(struct html *h);

#endif
