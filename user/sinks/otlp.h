/* SPDX-License-Identifier: MIT */
/*
 * OpenTelemetry traces: a sink that turns finished requests into traces (otlp_span.h) and sends
 * them to a collector over OTLP/HTTP with the JSON encoding (otlp_json.h; POST {endpoint},
 * Content-Type application/json) through the libcurl transport (otlp_http.h: http and https), or
 * writes them to a file (file:PATH): each batch one line, the export request as it would be
 * POSTed (OTLP's file format), which needs no libcurl.
 *
 * Tail sampling: a request is anomalous when its TTFT is above slow_ttft_ns, a token gap is
 * above slow_itl_ns, or its outcome is not ok. Anomalous requests are always exported, with an
 * event `token` per content frame; the first warm_up requests as summary spans; the others as
 * summary spans with probability sample_ratio, decided from the trace id (consistent
 * probability sampling). Each request span says why it was kept (tokenscope.kept).
 *
 * At the start the sender POSTs an empty export request, and says plainly when the collector
 * does not answer it with a 2xx (the spans are queued and retried all the same).
 *
 * The sink callback only builds the span and puts it on a bounded queue; a thread batches
 * spans (batch_max, or every flush_ms), POSTs them and retries with backoff (429 and 5xx, and
 * no answer; a Retry-After in seconds is followed, capped). A full queue drops spans and counts
 * them: a slow or dead collector never blocks tracing. A replay (backpressure) has no kernel
 * to keep up with: there the callback waits for room while the collector accepts batches, and
 * otlp_close keeps sending while batches are accepted.
 *
 * Clocks: span times are the kernel's CLOCK_MONOTONIC times plus realtime_offset_ns
 * (CLOCK_REALTIME - CLOCK_MONOTONIC, measured once by the caller, or a recording's own from its
 * header): that offset is the only wall-clock input. Timeouts and backoff run on
 * CLOCK_MONOTONIC.
 */
#ifndef TS_OTLP_H
#define TS_OTLP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sinks/otlp_http.h"
#include "sinks/otlp_json.h"
#include "sinks/otlp_span.h"
#include "pipeline/sink.h"

/* Defaults (otlp_opts_default). A trace costs about 2.4 KB encoded (request span and three
 * children), plus 110 bytes per token event for anomalous ones. */
#define OTLP_QUEUE_SPANS 4096
/* Spans per POST; also bounded by OTLP_BATCH_BYTES so a body stays far below the collector's
 * default request limit (the OpenTelemetry Collector's is 20 MiB). */
#define OTLP_BATCH_SPANS 512
#define OTLP_BATCH_BYTES (4u << 20)
/* Spans waiting in the queue, by their estimated encoded size: bounds memory when every
 * request is anomalous and long while the collector is away. */
#define OTLP_QUEUE_BYTES (64u << 20)
#define OTLP_FLUSH_MS 1000
#define OTLP_TIMEOUT_MS 5000 /* one POST: connect (and TLS), send, the response */
#define OTLP_MAX_ATTEMPTS 5
#define OTLP_BACKOFF_MS 250	 /* before the first retry; doubled each time */
#define OTLP_BACKOFF_MAX_MS 4000 /* also caps a Retry-After */
#define OTLP_CLOSE_WAIT_MS 5000	 /* otlp_close: how long it keeps sending what is queued */
#define OTLP_CLOSE_QUIET_MS 300	 /* ... and from when it says that it is waiting */
/* Token events per span; more are counted in the span's droppedEventsCount. */
#define OTLP_MAX_TOKEN_EVENTS 8192
#define OTLP_DEFAULT_SERVICE "tokenscope"
#define OTLP_DEFAULT_RATIO 0.01
/* The first requests after the start are exported whatever the ratio: a newcomer's few test
 * requests show up in the trace backend, and the rest are sampled. */
#define OTLP_WARM_UP 20

struct otlp_opts {
	/* http[s]://host[:port][/path]; port 80 or 443 by default, path "/v1/traces" when
	 * empty. NULL: nothing is sent and spans stay queued for otlp_take() (tests). */
	const char *endpoint;
	const char *ca_file; /* https: the CA certificates to verify with; NULL: the system's */
	const char *service_name; /* service.name; NULL: "tokenscope" */
	const char *hostname;	  /* host.name; NULL: not sent */
	/* OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES as the environment gave them (NULL:
	 * unset): the service's name, and attributes added to every resource, host.name
	 * included, which then wins over hostname (a DaemonSet pod's host name is not its
	 * node's) */
	const char *env_service, *env_resource;
	int64_t slow_ttft_ns; /* anomaly thresholds; <= 0: not checked */
	int64_t slow_itl_ns;
	double sample_ratio; /* of normal requests, 0..1 */
	uint32_t warm_up;    /* the first requests exported whatever the ratio */
	bool no_probe; /* no empty export at start to see that the collector answers (tests) */
	int64_t realtime_offset_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC */
	uint64_t seed;		    /* trace and span ids; 0: from getrandom() */
	FILE *err;		    /* failures are reported here (at most one line a minute) */
	uint32_t queue_max, batch_max, flush_ms, timeout_ms, max_attempts, backoff_ms,
	    close_wait_ms, max_token_events;
	/* A replay: when the queue is full the sink callback waits for room instead of dropping,
	 * as long as the collector accepts batches (once one is given up on, until one is
	 * accepted again, a full queue drops as live); otlp_close waits close_wait_ms after the
	 * latest accepted batch rather than after it was called. */
	bool backpressure;
};

/* Counts of requests (traces), not of spans: a trace is a request span and its children. */
struct otlp_stats {
	uint64_t exported;	 /* accepted by the collector (2xx) */
	uint64_t anomalous;	 /* queued with per-token detail */
	uint64_t sampled_out;	 /* normal requests the ratio left out */
	uint64_t warm_up;	 /* normal requests queued as among the first (OTLP_WARM_UP) */
	uint64_t dropped;	 /* queue full (or out of memory) */
	uint64_t failed;	 /* in batches given up on */
	uint64_t failed_batches; /* attempts exhausted, or refused with a 4xx other than 429 */
	uint64_t retries;	 /* POST attempts after a batch's first */
	uint64_t unsent;	 /* still queued when otlp_close stopped waiting */
	uint64_t batches;	 /* POSTs accepted */
	char last_error[256];	 /* the latest failure, "" if none */
};

struct otlp {
	struct otlp_opts o;
	char service[128], hostname[256];
	bool host_from_env; /* host.name came from OTEL_RESOURCE_ATTRIBUTES: kept */
	struct otlp_attr attrs[OTLP_RESOURCE_ATTRS_MAX]; /* the others it gave */
	size_t nattrs;
	struct otlp_url url;
	struct otlp_http *http;	  /* the sender thread's */
	FILE *file;		  /* file:PATH: the sender thread writes a line a batch */
	struct otlp_rng rng;	  /* used by the sink callback's thread only */
	uint64_t requests_seen;	  /* by the sink callback: the warm-up's count */
	uint64_t id_key;	  /* keys the requests' own ids (otlp_span_ids) */
	uint64_t keep_threshold;  /* sampling: keep when the id's low 56 bits are >= this */
	pthread_mutex_t lock;	  /* queue, stats, stopping */
	pthread_cond_t wake;	  /* CLOCK_MONOTONIC */
	pthread_cond_t room;	  /* backpressure: the sender took a batch, or gave up on one */
	bool collector_failing;	  /* the latest batch was given up on */
	struct otlp_span **queue; /* ring of queue_max */
	struct otlp_span **batch; /* the sender's, batch_max */
	uint32_t head, count;
	uint64_t queued_bytes; /* estimated encoded size of the queue */
	bool stopping, flush_now;
	uint64_t close_deadline_ns; /* CLOCK_MONOTONIC, set by otlp_close */
	bool thread_started, inited;
	pthread_t thread;
	uint64_t last_warn_ns; /* sender thread (and the callback's first drop) */
	bool warned_full;
	struct otlp_stats st;
	char error[256]; /* why otlp_init failed */
};

void otlp_opts_default(struct otlp_opts *opts);
/* Parses the endpoint, opens the transport (loading libcurl), starts the sender thread; the
 * host is resolved when sending (a proxy may be the one to resolve it). Negative errno on failure,
 * with o->error saying why; nothing to close then. */
int otlp_init(struct otlp *o, const struct otlp_opts *opts);
struct sink otlp_sink(struct otlp *o);
/* Where the spans come from when it is not this machine now (a recording's header): the offset
 * that turns their kernel times into unix times, and host.name ("" or NULL: not sent). Call
 * before the first span is queued: spans are encoded with the values current when sent. */
void otlp_set_source(struct otlp *o, int64_t realtime_offset_ns, const char *hostname);
/* Stops taking spans, sends what is queued for at most close_wait_ms (with backpressure: after
 * the latest accepted batch; a POST in progress is cut short then), counts the rest as unsent,
 * and frees everything but o->st. */
void otlp_close(struct otlp *o);
void otlp_get_stats(struct otlp *o, struct otlp_stats *st);
/* One summary line ("  otlp: ...") and, after a failure, the last error. */
void otlp_print_stats(const struct otlp_stats *st, const char *endpoint, FILE *f);

/* The pieces, for tests. */
/* Removes up to max queued spans (oldest first) into out; returns how many. */
size_t otlp_take(struct otlp *o, struct otlp_span **out, size_t max);
/* spans[0..n) encoded as the sender encodes them (otlp_json_encode with o's resource). */
int otlp_encode(const struct otlp *o, struct otlp_span *const *spans, size_t n, char **buf,
		size_t *len);

#endif
