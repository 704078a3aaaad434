/* SPDX-License-Identifier: MIT */
/*
 * Prometheus exporter, as a pipeline sink: per-label-set fixed-bucket histograms and counters of
 * finished requests and GPU steps, rendered in the text exposition format 0.0.4. Bucket bounds
 * are those of the OpenTelemetry GenAI semantic conventions, so dashboards built for them fit.
 *
 * Labels stay few (each value of a label is a series of its own). Request metrics: `model` (the
 * request body's model, "unknown" when it was absent or not captured), `pid` (the server process
 * that served the request, only with prom_set_by_process), `namespace` and `pod` (on requests of
 * a server in a Kubernetes pod, unless prom_set_pod_labels turns them off), `container` (only
 * on requests of a process with a container id); beyond PROM_MAX_LABEL_SETS distinct sets of
 * these, one set collects the rest: model="other" (and pid="other"), no namespace, pod or
 * container, and tokenscope_label_overflow_total
 * counts what went there. Then `outcome` and `type`; for GPU steps `kind` and `pid` (beyond
 * PROM_MAX_GPU_PIDS processes, "other", counted the same way).
 *
 * Like every sink it is a pure function of the event stream. On tick it renders a snapshot
 * (at most once per PROM_RENDER_PERIOD_NS of kernel time while records keep coming, and on the
 * first quiet tick after a change) and hands it to the publisher, which owns it from then on:
 * the HTTP server serves the snapshot and never reads pipeline state.
 */
#ifndef TS_PROM_H
#define TS_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "pipeline/sink.h"

/* Distinct label sets of request metrics (model, pid, namespace, pod, container) kept apart; one
 * more set,
 * "other", collects the rest. */
#define PROM_MAX_LABEL_SETS 64
#define PROM_MAX_GPU_PIDS 64
/* Kernel time between snapshots while records keep coming: fresher than any scrape interval,
 * and rendering stays a small cost of the drain loop. */
#define PROM_RENDER_PERIOD_NS 200000000ull

/* Receives a snapshot: a malloc'd buffer of len bytes that the callee frees. */
typedef void (*prom_publish_fn)(void *ctx, char *buf, size_t len);

struct prom;

/* NULL on allocation failure. publish may be NULL (prom_render only, as in tests). */
struct prom *prom_new(prom_publish_fn publish, void *publish_ctx);
void prom_free(struct prom *p);
/* A `pid` label on the request metrics (--by-process); before the first record. */
void prom_set_by_process(struct prom *p, bool on);
/* `namespace` and `pod` labels on the request metrics of servers in pods (on by default: a node
 * runs a bounded number of pods, the kubelet's maxPods, 110 unless set); before the first
 * record. */
void prom_set_pod_labels(struct prom *p, bool on);
/*
 * --label: each label a label of the request metrics (labels.h). Its values are capped: a
 * value gets its own series once it has been seen on PROM_LABEL_PROMOTE requests, while fewer
 * than top values have one; every other value (and a value's requests before that) is "other".
 * The in-flight gauge has these labels empty. Before the first record; labels must outlive p.
 */
#define PROM_LABEL_TOP_DEFAULT 20
#define PROM_LABEL_TOP_MAX 1000
#define PROM_LABEL_PROMOTE 2
/* Values waiting for their second request, per label (the oldest replaced): a value must come
 * back before this many other new ones do. */
#define PROM_LABEL_CANDIDATES 2048
struct req_label_set;
int prom_set_labels(struct prom *p, const struct req_label_set *labels, uint32_t top);
/* The sink to give pipeline_add_sink; ctx is p. */
struct sink prom_sink(struct prom *p);
/* Lines appended to every snapshot by another module (the alerts' tokenscope_alert_firing). */
void prom_set_extra(struct prom *p, void (*render)(void *ctx, FILE *f), void *ctx);
struct device_sample;
/* The latest GPU sample (NVML), already cut down to the traced processes, for the
 * tokenscope_gpu_ families (copied). Before the first call there are none of them: no family
 * with made-up values where NVML is not there. -ENOMEM. */
int prom_set_gpu_sample(struct prom *p, const struct device_sample *s);
/* The metrics now, in the text exposition format: a malloc'd buffer the caller frees.
 * -ENOMEM on failure. */
int prom_render(struct prom *p, char **buf, size_t *len);

#endif
