// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/utf8.h"
#include "sinks/otlp.h"

/* Failures are reported at most this often (they are all counted). */
#define OTLP_WARN_INTERVAL_NS (60 * NS_PER_S)

void otlp_opts_default(struct otlp_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->sample_ratio = OTLP_DEFAULT_RATIO;
	opts->warm_up = OTLP_WARM_UP;
	opts->queue_max = OTLP_QUEUE_SPANS;
	opts->batch_max = OTLP_BATCH_SPANS;
	opts->flush_ms = OTLP_FLUSH_MS;
	opts->timeout_ms = OTLP_TIMEOUT_MS;
	opts->max_attempts = OTLP_MAX_ATTEMPTS;
	opts->backoff_ms = OTLP_BACKOFF_MS;
	opts->close_wait_ms = OTLP_CLOSE_WAIT_MS;
	opts->max_token_events = OTLP_MAX_TOKEN_EVENTS;
}

static void warn(struct otlp *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Keeps the message as last_error and prints it at most once a minute (outside the lock: a
 * blocked stderr must not hold up the sink callback). */
static void warn(struct otlp *o, const char *fmt, ...)
{
	char msg[sizeof(o->st.last_error)];
	uint64_t now = mono_ns();
	va_list ap;
	bool print;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&o->lock);
	memcpy(o->st.last_error, msg, sizeof(msg));
	print = o->o.err && (!o->last_warn_ns || now - o->last_warn_ns >= OTLP_WARN_INTERVAL_NS);
	if (print)
		o->last_warn_ns = now;
	pthread_mutex_unlock(&o->lock);
	if (print) {
		fprintf(o->o.err,
			"tokenscope: otlp: %s (counted; reported at most once a minute)\n", msg);
		fflush(o->o.err);
	}
}

/* Backpressure: waits while the queue has no room for cost and the sender can make some (it is
 * running and the collector takes batches). Called with the lock held. */
static void wait_room_locked(struct otlp *o, uint64_t cost)
{
	while (o->thread_started && !o->stopping && !o->collector_failing && o->count &&
	       (o->count >= o->o.queue_max || o->queued_bytes + cost > OTLP_QUEUE_BYTES)) {
		/* A queue full by bytes may hold less than a batch: send it now. */
		o->flush_now = true;
		pthread_cond_signal(&o->wake);
		pthread_cond_wait(&o->room, &o->lock);
	}
}

static void otlp_on_request(void *ctx, const struct request *r, const struct request_metrics *m,
			    const struct gpu_attribution *ga)
{
	struct otlp *o = ctx;
	struct otlp_ids ids;
	unsigned anomaly = otlp_anomaly(o->o.slow_ttft_ns, o->o.slow_itl_ns, r, m);
	struct otlp_span *s = NULL;
	bool wake = false, first_drop = false;
	enum otlp_kept kept;

	/* Joined mid-response: a span would start where tracing met it, not where it began. */
	if (r->joined)
		return;
	kept = anomaly				? OTLP_KEPT_ANOMALY
	       : o->requests_seen < o->o.warm_up ? OTLP_KEPT_WARM_UP
						 : OTLP_KEPT_RANDOM;

	o->requests_seen++;
	otlp_span_ids(o->id_key, r, &ids);
	/* Every span of a trace gets the same decision, on every node that samples so. */
	if (kept == OTLP_KEPT_RANDOM && !otlp_keep(ids.trace_id, o->keep_threshold)) {
		pthread_mutex_lock(&o->lock);
		o->st.sampled_out++;
		pthread_mutex_unlock(&o->lock);
		return;
	}
	s = otlp_span_new(&o->rng, r, m, ga, &ids, anomaly, o->o.max_token_events);
	if (s)
		s->kept = kept;
	pthread_mutex_lock(&o->lock);
	if (s && o->o.backpressure)
		wait_room_locked(o, otlp_span_cost(s));
	if (s && !o->stopping && o->count < o->o.queue_max &&
	    o->queued_bytes + otlp_span_cost(s) <= OTLP_QUEUE_BYTES) {
		o->queue[(o->head + o->count++) % o->o.queue_max] = s;
		o->queued_bytes += otlp_span_cost(s);
		o->st.anomalous += !!anomaly;
		o->st.warm_up += kept == OTLP_KEPT_WARM_UP;
		wake = o->count == o->o.batch_max;
		s = NULL;
	} else {
		o->st.dropped++;
		first_drop = !o->warned_full;
		o->warned_full = true;
	}
	pthread_mutex_unlock(&o->lock);
	otlp_span_free(s);
	if (wake)
		pthread_cond_signal(&o->wake);
	if (first_drop && o->o.err)
		fprintf(
		    o->o.err,
		    "tokenscope: otlp: the span queue is full (%u spans): spans are dropped and "
		    "counted until the collector catches up\n",
		    o->o.queue_max);
}

static void otlp_on_finish(void *ctx, const struct pipeline_status *st)
{
	struct otlp *o = ctx;

	(void)st;
	/* Send what is queued now rather than at the next flush. */
	pthread_mutex_lock(&o->lock);
	o->flush_now = true;
	pthread_mutex_unlock(&o->lock);
	pthread_cond_signal(&o->wake);
}

void otlp_set_source(struct otlp *o, int64_t realtime_offset_ns, const char *hostname)
{
	pthread_mutex_lock(&o->lock);
	o->o.realtime_offset_ns = realtime_offset_ns;
	if (!o->host_from_env)
		snprintf(o->hostname, sizeof(o->hostname), "%s", hostname ? hostname : "");
	pthread_mutex_unlock(&o->lock);
}

struct sink otlp_sink(struct otlp *o)
{
	return (struct sink){
		.name = "otlp",
		.ctx = o,
		.clients = true,
		.request = otlp_on_request,
		.finish = otlp_on_finish,
	};
}

size_t otlp_take(struct otlp *o, struct otlp_span **out, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&o->lock);
	while (n < max && o->count) {
		out[n] = o->queue[o->head];
		o->queued_bytes -= otlp_span_cost(out[n]);
		o->head = (o->head + 1) % o->o.queue_max;
		o->count--;
		n++;
	}
	pthread_mutex_unlock(&o->lock);
	return n;
}

int otlp_encode(const struct otlp *o, struct otlp_span *const *spans, size_t n, char **buf,
		size_t *len)
{
	const struct otlp_resource res = {
		.service_name = o->service,
		.hostname = o->hostname,
		.realtime_offset_ns = o->o.realtime_offset_ns,
		.attrs = o->attrs,
		.nattrs = o->nattrs,
	};

	return otlp_json_encode(&res, spans, n, buf, len);
}

/* ---- sending ---- */

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Sleeps until `until`, or until close's deadline once closing; false when closing's deadline
 * has passed (give up). Called with the lock held. */
static bool sleep_locked(struct otlp *o, uint64_t until)
{
	for (;;) {
		uint64_t now = mono_ns(), end = until;
		struct timespec ts;

		if (o->stopping) {
			if (now >= o->close_deadline_ns)
				return false;
			end = min_u64(until, o->close_deadline_ns);
		}
		if (now >= end)
			return true;
		ts.tv_sec = end / NS_PER_S;
		ts.tv_nsec = end % NS_PER_S;
		pthread_cond_timedwait(&o->wake, &o->lock, &ts);
	}
}

static bool retryable(int status)
{
	return status == 429 || status >= 500;
}

static void describe(struct otlp *o, int rc, const struct otlp_reply *reply, char *out, size_t n)
{
	const char *scheme = o->url.tls ? "https" : "http";

	if (o->file)
		snprintf(out, n, "writing %.200s: %s", o->url.path, strerror(-rc));
	else if (rc)
		snprintf(out, n, "POST %s://%.64s%.40s: %.140s", scheme, o->url.hostport,
			 o->url.path, reply->error[0] ? reply->error : strerror(-rc));
	else
		snprintf(out, n, "POST %s://%.64s%.40s: HTTP %d", scheme, o->url.hostport,
			 o->url.path, reply->status);
}

/* Sends one batch with retries; updates the counters. */
static void send_batch(struct otlp *o, struct otlp_span **spans, size_t n)
{
	char *body = NULL, what[sizeof(o->st.last_error) + 64];
	struct otlp_reply reply = { 0 };
	size_t len = 0;
	uint64_t backoff = (uint64_t)o->o.backoff_ms * NS_PER_MS;
	bool ok = false, again = false;
	int rc;
	uint32_t attempt;

	rc = otlp_encode(o, spans, n, &body, &len);
	for (attempt = 1; !rc; attempt++) {
		uint64_t now = mono_ns(), deadline = now + (uint64_t)o->o.timeout_ms * NS_PER_MS;
		uint64_t wait;

		pthread_mutex_lock(&o->lock);
		if (o->stopping)
			deadline = min_u64(deadline, o->close_deadline_ns);
		pthread_mutex_unlock(&o->lock);
		if (o->file) {
			/* A line a batch; a failed write is not retried (the disk is full, or
			 * gone). */
			errno = 0;
			if (fwrite(body, 1, len, o->file) == len && fputc('\n', o->file) != EOF &&
			    !fflush(o->file)) {
				ok = true;
				break;
			}
			describe(o, errno ? -errno : -EIO, &reply, what, sizeof(what));
			warn(o, "%s; %zu traces lost", what, n);
			break;
		}
		rc = otlp_http_post(o->http, body, len, deadline, &o->close_deadline_ns, &reply);
		if (!rc && reply.status >= 200 && reply.status < 300) {
			ok = true;
			break;
		}
		describe(o, rc, &reply, what, sizeof(what));
		if ((!rc && !retryable(reply.status)) || attempt >= o->o.max_attempts) {
			warn(o, "%s; gave up on %zu traces after %u attempt%s", what, n, attempt,
			     attempt > 1 ? "s" : "");
			break;
		}
		wait =
		    reply.retry_after_s >= 0 ? (uint64_t)reply.retry_after_s * NS_PER_S : backoff;
		wait = min_u64(wait, (uint64_t)OTLP_BACKOFF_MAX_MS * NS_PER_MS);
		backoff = min_u64(backoff * 2, (uint64_t)OTLP_BACKOFF_MAX_MS * NS_PER_MS);
		pthread_mutex_lock(&o->lock);
		again = sleep_locked(o, mono_ns() + wait);
		if (again)
			o->st.retries++;
		pthread_mutex_unlock(&o->lock);
		if (!again) {
			warn(o, "%s; gave up on %zu traces: tokenscope was exiting", what, n);
			break;
		}
		rc = 0;
	}
	if (rc == -ENOMEM && !body)
		warn(o, "no memory to encode %zu traces", n);
	free(body);
	pthread_mutex_lock(&o->lock);
	if (ok) {
		o->st.exported += n;
		o->st.batches++;
		/* A replay drains while the collector keeps up (a POST in progress reads it
		 * unlocked). */
		if (o->stopping && o->o.backpressure)
			__atomic_store_n(&o->close_deadline_ns,
					 mono_ns() + (uint64_t)o->o.close_wait_ms * NS_PER_MS,
					 __ATOMIC_RELAXED);
	} else {
		o->st.failed += n;
		o->st.failed_batches++;
	}
	o->collector_failing = !ok;
	pthread_mutex_unlock(&o->lock);
	if (!ok && o->o.backpressure)
		pthread_cond_broadcast(&o->room);
	for (size_t i = 0; i < n; i++)
		otlp_span_free(spans[i]);
}

/* Takes a batch: up to batch_max spans and OTLP_BATCH_BYTES (at least one span). Locked. */
static size_t take_batch_locked(struct otlp *o, struct otlp_span **out)
{
	uint64_t bytes = 0;
	size_t n = 0;

	while (n < o->o.batch_max && o->count) {
		struct otlp_span *s = o->queue[o->head];

		if (n && bytes + otlp_span_cost(s) > OTLP_BATCH_BYTES)
			break;
		bytes += otlp_span_cost(s);
		o->queued_bytes -= otlp_span_cost(s);
		out[n++] = s;
		o->head = (o->head + 1) % o->o.queue_max;
		o->count--;
	}
	return n;
}

/* One wait on the condition, until `until` at most. Called with the lock held. */
static void wait_locked(struct otlp *o, uint64_t until)
{
	struct timespec ts = { .tv_sec = until / NS_PER_S, .tv_nsec = until % NS_PER_S };

	pthread_cond_timedwait(&o->wake, &o->lock, &ts);
}

/*
 * At the start: an empty export request (valid OTLP: no resource spans), so that a collector
 * that is not there, or a wrong path, is said at once rather than when a first span is sent,
 * maybe minutes later. One line either way; nothing is counted.
 */
static void probe_collector(struct otlp *o)
{
	static const char empty[] = "{\"resourceSpans\":[]}";
	struct otlp_reply reply = { 0 };
	char what[sizeof(o->st.last_error) + 64];
	int rc = otlp_http_post(o->http, empty, sizeof(empty) - 1,
				mono_ns() + (uint64_t)o->o.timeout_ms * NS_PER_MS,
				&o->close_deadline_ns, &reply);

	if (!o->o.err)
		return;
	if (!rc && reply.status >= 200 && reply.status < 300) {
		fprintf(o->o.err, "tokenscope: otlp: the collector answered (HTTP %d)\n",
			reply.status);
		return;
	}
	describe(o, rc, &reply, what, sizeof(what));
	fprintf(o->o.err,
		"tokenscope: otlp: the collector does not take an empty export (%s): spans are "
		"queued and retried, and those lost are counted\n",
		what);
}

static void *otlp_run(void *arg)
{
	struct otlp *o = arg;
	uint64_t next_flush;

	if (o->http && !o->o.no_probe)
		probe_collector(o);
	next_flush = mono_ns() + (uint64_t)o->o.flush_ms * NS_PER_MS;
	pthread_mutex_lock(&o->lock);
	for (;;) {
		size_t n;

		/* A full batch, the flush interval, the pipeline's end, or close: whichever comes
		 * first. */
		while (!o->stopping && !o->flush_now && o->count < o->o.batch_max &&
		       mono_ns() < next_flush)
			wait_locked(o, next_flush);
		if (o->stopping && (!o->count || mono_ns() >= o->close_deadline_ns))
			break;
		if (!o->count) {
			o->flush_now = false;
			next_flush = mono_ns() + (uint64_t)o->o.flush_ms * NS_PER_MS;
			continue;
		}
		n = take_batch_locked(o, o->batch);
		if (!o->count)
			o->flush_now = false;
		pthread_mutex_unlock(&o->lock);
		if (o->o.backpressure)
			pthread_cond_broadcast(&o->room);
		send_batch(o, o->batch, n);
		pthread_mutex_lock(&o->lock);
		next_flush = mono_ns() + (uint64_t)o->o.flush_ms * NS_PER_MS;
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

/*
 * The environment's resource (OpenTelemetry's SDK variables): OTEL_RESOURCE_ATTRIBUTES's pairs
 * (its service.name and host.name replace tokenscope's; the rest are added to every resource),
 * and OTEL_SERVICE_NAME, which wins over both. A malformed OTEL_RESOURCE_ATTRIBUTES is refused
 * whole, as a usage error would be.
 */
static int otlp_env_resource(struct otlp *o, const struct otlp_opts *opts)
{
	struct otlp_attr all[OTLP_RESOURCE_ATTRS_MAX];
	int n = otlp_resource_attrs_parse(opts->env_resource, all, OTLP_RESOURCE_ATTRS_MAX);

	if (n < 0) {
		snprintf(o->error, sizeof(o->error),
			 "OTEL_RESOURCE_ATTRIBUTES: expected up to %d key=value pairs separated by "
			 "commas, values percent-encoded (keys to 127 bytes, values to 255)",
			 OTLP_RESOURCE_ATTRS_MAX);
		return -EINVAL;
	}
	for (int i = 0; i < n; i++) {
		if (!strcmp(all[i].key, "service.name")) {
			snprintf(o->service, sizeof(o->service), "%s", all[i].value);
		} else if (!strcmp(all[i].key, "host.name")) {
			snprintf(o->hostname, sizeof(o->hostname), "%s", all[i].value);
			o->host_from_env = true;
		} else {
			o->attrs[o->nattrs++] = all[i];
		}
	}
	if (opts->env_service && opts->env_service[0])
		utf8_clean(o->service, sizeof(o->service), opts->env_service,
			   strlen(opts->env_service));
	return 0;
}

int otlp_init(struct otlp *o, const struct otlp_opts *opts)
{
	pthread_condattr_t ca;
	uint64_t seed;
	int rc;

	memset(o, 0, sizeof(*o));
	o->o = *opts;
	if (!(opts->sample_ratio >= 0 && opts->sample_ratio <= 1)) {
		snprintf(o->error, sizeof(o->error), "sample ratio %g: expected 0 to 1",
			 opts->sample_ratio);
		return -EINVAL;
	}
	if (!opts->queue_max || !opts->batch_max || !opts->flush_ms || !opts->timeout_ms ||
	    !opts->max_attempts) {
		snprintf(o->error, sizeof(o->error),
			 "otlp options: queue, batch, flush, timeout and attempts must be > 0 "
			 "(start from otlp_opts_default)");
		return -EINVAL;
	}
	snprintf(o->service, sizeof(o->service), "%s",
		 opts->service_name ? opts->service_name : OTLP_DEFAULT_SERVICE);
	snprintf(o->hostname, sizeof(o->hostname), "%s", opts->hostname ? opts->hostname : "");
	rc = otlp_env_resource(o, opts);
	if (rc)
		return rc;
	o->o.service_name = o->service;
	o->o.hostname = o->hostname;
	o->o.endpoint = NULL; /* the parsed form is kept in o->url */
	o->keep_threshold = otlp_keep_threshold(opts->sample_ratio);
	if (opts->endpoint) {
		rc = otlp_parse_url(opts->endpoint, &o->url, o->error, sizeof(o->error));
		if (rc)
			return rc;
		if (o->url.file) {
			o->file = fopen(o->url.path, "we");
			if (!o->file) {
				rc = -errno;
				snprintf(o->error, sizeof(o->error),
					 "otlp: cannot write %.200s: %s", o->url.path,
					 strerror(errno));
				return rc;
			}
		} else {
			rc = otlp_http_open(&o->http, &o->url, opts->ca_file, o->error,
					    sizeof(o->error));
			if (rc)
				return rc;
		}
	}
	seed = opts->seed;
	if (!seed && getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = mono_ns() ^ ((uint64_t)getpid() << 32);
	otlp_rng_seed(&o->rng, seed);
	otlp_rng_id(&o->rng, (uint8_t *)&o->id_key, sizeof(o->id_key));
	o->queue = calloc(opts->queue_max, sizeof(*o->queue));
	o->batch = calloc(opts->batch_max, sizeof(*o->batch));
	if (!o->queue || !o->batch) {
		free(o->queue);
		free(o->batch);
		otlp_http_close(o->http);
		o->http = NULL;
		if (o->file)
			fclose(o->file);
		o->file = NULL;
		snprintf(o->error, sizeof(o->error), "otlp: no memory for the span queue");
		return -ENOMEM;
	}
	pthread_mutex_init(&o->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&o->wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&o->room, NULL);
	o->inited = true;
	if (opts->endpoint) {
		rc = -pthread_create(&o->thread, NULL, otlp_run, o);
		if (rc) {
			snprintf(o->error, sizeof(o->error), "otlp: cannot start the sender: %s",
				 strerror(-rc));
			otlp_close(o);
			return rc;
		}
		o->thread_started = true;
	}
	return 0;
}

void otlp_close(struct otlp *o)
{
	if (!o->inited)
		return;
	pthread_mutex_lock(&o->lock);
	o->stopping = true;
	/* Read without the lock by a POST in progress (otlp_http_post). */
	__atomic_store_n(&o->close_deadline_ns,
			 mono_ns() + (uint64_t)o->o.close_wait_ms * NS_PER_MS, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&o->lock);
	pthread_cond_broadcast(&o->wake);
	pthread_cond_broadcast(&o->room);
	if (o->thread_started) {
		struct timespec t;
		uint32_t left;

		/* A wait that remains is said: the collector is slow or away. */
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_nsec += OTLP_CLOSE_QUIET_MS * 1000000L;
		t.tv_sec += t.tv_nsec / 1000000000L;
		t.tv_nsec %= 1000000000L;
		if (pthread_timedjoin_np(o->thread, NULL, &t)) {
			pthread_mutex_lock(&o->lock);
			left = o->count;
			pthread_mutex_unlock(&o->lock);
			if (o->o.err)
				fprintf(
				    o->o.err,
				    "tokenscope: otlp: sending the last %u spans to the collector "
				    "(at most %.1f s; Ctrl-C again to leave them)\n",
				    left, o->o.close_wait_ms / 1000.0);
			pthread_join(o->thread, NULL);
		}
	}
	o->thread_started = false;
	otlp_http_close(o->http);
	o->http = NULL;
	if (o->file && fclose(o->file))
		warn(o, "writing %.200s: %s", o->url.path, strerror(errno));
	o->file = NULL;
	o->st.unsent += o->count;
	while (o->count) {
		otlp_span_free(o->queue[o->head]);
		o->head = (o->head + 1) % o->o.queue_max;
		o->count--;
	}
	free(o->queue);
	free(o->batch);
	o->queue = o->batch = NULL;
	pthread_cond_destroy(&o->wake);
	pthread_cond_destroy(&o->room);
	pthread_mutex_destroy(&o->lock);
	o->inited = false;
}

void otlp_get_stats(struct otlp *o, struct otlp_stats *st)
{
	if (o->inited)
		pthread_mutex_lock(&o->lock);
	*st = o->st;
	if (o->inited)
		pthread_mutex_unlock(&o->lock);
}

void otlp_print_stats(const struct otlp_stats *st, const char *endpoint, FILE *f)
{
	fprintf(f,
		"  otlp: %llu traces exported (%llu anomalous, %llu warm-up queued), %llu sampled "
		"out,\n        %llu dropped (queue full), %llu failed batches (%llu traces), %llu "
		"retries, %llu unsent at exit\n",
		(unsigned long long)st->exported, (unsigned long long)st->anomalous,
		(unsigned long long)st->warm_up, (unsigned long long)st->sampled_out,
		(unsigned long long)st->dropped, (unsigned long long)st->failed_batches,
		(unsigned long long)st->failed, (unsigned long long)st->retries,
		(unsigned long long)st->unsent);
	if (st->last_error[0])
		fprintf(f, "  otlp: last error (%s): %s\n", endpoint ? endpoint : "collector",
			st->last_error);
}
