// SPDX-License-Identifier: MIT
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "gpu.h"
#include "jsonw.h"
#include "otlp.h"
#include "request.h"

/* Failures are reported at most this often (they are all counted). */
#define OTLP_WARN_INTERVAL_NS (60 * NS_PER_S)
/* What a trace costs in the body, to bound batches and the queue without encoding twice:
 * measured on encoded spans, with margin for longer names (a request span about
 * 1.7 KB, each child 215 bytes, a token event 110). */
#define OTLP_SPAN_BYTES 3072
#define OTLP_EVENT_BYTES 128
/* The collector's response head is read for its status and Retry-After only. */
#define OTLP_RESPONSE_HEAD 2048
#define OTLP_TRACE_ID_LEN 16
#define OTLP_SPAN_ID_LEN 8
/* Consistent probability sampling reads the trace id's low 56 bits (W3C trace context level 2
 * makes them random). */
#define OTLP_RANDOM_BITS 56

enum { CHILD_QUEUE, CHILD_PREFILL, CHILD_DECODE, CHILD_MAX };
static const char *const child_names[CHILD_MAX] = { "queue", "prefill", "decode" };

struct otlp_span {
	uint8_t trace_id[OTLP_TRACE_ID_LEN], span_id[OTLP_SPAN_ID_LEN];
	uint8_t child_id[CHILD_MAX][OTLP_SPAN_ID_LEN];
	uint64_t child_start[CHILD_MAX], child_end[CHILD_MAX]; /* kernel ns; end 0: unknown */
	uint32_t pid, seq;
	char conn[112], method[16], path[256], model[128];
	const char *op; /* GenAI operation, or NULL */
	int status;
	enum outcome outcome;
	enum frame_format format;
	uint64_t arrival_ns, end_ns, first_token_ns, last_token_ns; /* token times 0: none */
	int64_t ttft_ns, tpot_ns, itl_max_ns, tokens, prompt_tokens, max_tokens;
	bool tokens_from_usage;
	unsigned anomaly;
	uint32_t dropped_events;
	uint32_t ntokens; /* token_ns[] kept: anomalous requests only */
	uint64_t token_ns[];
};

/* xoshiro256** seeded through splitmix64: ids need to be unique and unpredictable enough to
 * sample on, not secret. */
static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4])
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

/* An id that is not all zeros (the OTLP encoding's "invalid"). */
static void rng_id(uint64_t s[4], uint8_t *id, size_t len)
{
	bool zero = true;

	while (zero) {
		for (size_t i = 0; i < len; i += 8) {
			uint64_t v = rng_next(s);

			memcpy(id + i, &v, len - i < 8 ? len - i : 8);
		}
		for (size_t i = 0; i < len; i++)
			zero &= !id[i];
	}
}

static uint64_t keep_threshold(double ratio)
{
	const uint64_t all = 1ull << OTLP_RANDOM_BITS;

	if (!(ratio > 0))
		return all;
	if (ratio >= 1)
		return 0;
	return (uint64_t)((1.0 - ratio) * (double)all);
}

static uint64_t id_randomness(const uint8_t trace_id[16])
{
	uint64_t r = 0;

	for (int i = OTLP_TRACE_ID_LEN - OTLP_RANDOM_BITS / 8; i < OTLP_TRACE_ID_LEN; i++)
		r = r << 8 | trace_id[i];
	return r;
}

bool otlp_sampled(const uint8_t trace_id[16], double ratio)
{
	return id_randomness(trace_id) >= keep_threshold(ratio);
}

void otlp_opts_default(struct otlp_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->sample_ratio = OTLP_DEFAULT_RATIO;
	opts->queue_max = OTLP_QUEUE_SPANS;
	opts->batch_max = OTLP_BATCH_SPANS;
	opts->flush_ms = OTLP_FLUSH_MS;
	opts->timeout_ms = OTLP_TIMEOUT_MS;
	opts->max_attempts = OTLP_MAX_ATTEMPTS;
	opts->backoff_ms = OTLP_BACKOFF_MS;
	opts->close_wait_ms = OTLP_CLOSE_WAIT_MS;
	opts->max_token_events = OTLP_MAX_TOKEN_EVENTS;
}

int otlp_parse_url(const char *url, struct otlp_url *u, char *err, size_t errlen)
{
	const char *p, *host, *host_end, *slash, *colon = NULL;
	size_t n;

	memset(u, 0, sizeof(*u));
	if (!strncasecmp(url, "https://", 8)) {
		snprintf(
		    err, errlen,
		    "'%s': https is not supported; tokenscope sends plain http: point it at an "
		    "OpenTelemetry Collector on loopback or in the cluster, and let the collector "
		    "forward with TLS",
		    url);
		return -EPROTONOSUPPORT;
	}
	if (strncasecmp(url, "http://", 7)) {
		snprintf(err, errlen, "'%s': expected http://host[:port][/path]", url);
		return strstr(url, "://") ? -EPROTONOSUPPORT : -EINVAL;
	}
	host = url + 7;
	slash = strchr(host, '/');
	host_end = slash ? slash : host + strlen(host);
	if (*host == '[') {
		const char *rb = memchr(host, ']', host_end - host);

		if (!rb) {
			snprintf(err, errlen, "'%s': unterminated [IPv6 address]", url);
			return -EINVAL;
		}
		if (rb + 1 < host_end && rb[1] != ':') {
			snprintf(err, errlen, "'%s': expected ':' after ']'", url);
			return -EINVAL;
		}
		colon = rb + 1 < host_end ? rb + 1 : NULL;
		n = rb - host - 1;
		if (n >= sizeof(u->host))
			goto too_long;
		memcpy(u->host, host + 1, n);
	} else {
		colon = memchr(host, ':', host_end - host);
		n = (colon ? colon : host_end) - host;
		if (n >= sizeof(u->host))
			goto too_long;
		memcpy(u->host, host, n);
	}
	if (!u->host[0] || memchr(host, '@', host_end - host)) {
		snprintf(err, errlen, "'%s': expected http://host[:port][/path] (no user info)",
			 url);
		return -EINVAL;
	}
	u->port = 80;
	if (colon) {
		unsigned long port = 0;

		for (p = colon + 1; p < host_end; p++) {
			if (!isdigit((unsigned char)*p) || (port = port * 10 + (*p - '0')) > 65535)
				break;
		}
		if (p < host_end || port == 0 || colon + 1 == host_end) {
			snprintf(err, errlen, "'%s': bad port", url);
			return -EINVAL;
		}
		u->port = port;
	}
	n = host_end - host;
	if (n >= sizeof(u->hostport))
		goto too_long;
	memcpy(u->hostport, host, n);
	p = slash && slash[1] ? slash : OTLP_DEFAULT_PATH;
	if (strlen(p) >= sizeof(u->path))
		goto too_long;
	for (const char *c = p; *c; c++) {
		if ((unsigned char)*c <= ' ' || *c == 0x7f || *c == '#') {
			snprintf(err, errlen,
				 "'%s': the path must be URL-encoded, without a fragment", url);
			return -EINVAL;
		}
	}
	strcpy(u->path, p);
	return 0;
too_long:
	snprintf(err, errlen, "'%.64s...': too long", url);
	return -EINVAL;
}

static int otlp_resolve(struct otlp *o)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *ai;
	char port[8];
	int rc;

	snprintf(port, sizeof(port), "%u", o->url.port);
	rc = getaddrinfo(o->url.host, port, &hints, &res);
	if (rc) {
		snprintf(o->error, sizeof(o->error), "OTLP endpoint host '%s': %s", o->url.host,
			 gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	o->naddrs = 0;
	for (ai = res; ai && o->naddrs < OTLP_MAX_ADDRS; ai = ai->ai_next) {
		if (ai->ai_addrlen > sizeof(o->addrs[0]))
			continue;
		memcpy(&o->addrs[o->naddrs], ai->ai_addr, ai->ai_addrlen);
		o->addrlens[o->naddrs++] = ai->ai_addrlen;
	}
	freeaddrinfo(res);
	if (!o->naddrs) {
		snprintf(o->error, sizeof(o->error), "OTLP endpoint host '%s': no address",
			 o->url.host);
		return -EHOSTUNREACH;
	}
	return 0;
}

/* ---- spans ---- */

static bool ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n >= k && !memcmp(s + n - k, suffix, k);
}

/* gen_ai.operation.name from the path (OpenAI, Anthropic, Ollama, TGI routes), else from the
 * stream's format; NULL when the request is no GenAI operation tokenscope knows. */
static const char *operation(const struct request *r)
{
	size_t n = strcspn(r->path, "?");

	if (ends_with(r->path, n, "/chat/completions") || ends_with(r->path, n, "/v1/messages") ||
	    ends_with(r->path, n, "/api/chat"))
		return "chat";
	if (ends_with(r->path, n, "/completions") || ends_with(r->path, n, "/api/generate") ||
	    ends_with(r->path, n, "/generate") || ends_with(r->path, n, "/generate_stream"))
		return "text_completion";
	if (ends_with(r->path, n, "/embeddings") || ends_with(r->path, n, "/api/embed"))
		return "embeddings";
	switch (r->format) {
	case FMT_OPENAI_CHAT:
	case FMT_ANTHROPIC:
		return "chat";
	case FMT_OPENAI_COMPLETION:
	case FMT_TGI:
		return "text_completion";
	default:
		return NULL;
	}
}

unsigned otlp_anomaly(const struct otlp_opts *opts, const struct request *r,
		      const struct request_metrics *m)
{
	unsigned a = 0;

	if (opts->slow_ttft_ns > 0 && m->ttft_ns > opts->slow_ttft_ns)
		a |= OTLP_SLOW_TTFT;
	if (opts->slow_itl_ns > 0 && m->itl_max_ns > opts->slow_itl_ns)
		a |= OTLP_SLOW_ITL;
	if (r->outcome != OUTCOME_OK)
		a |= OTLP_NOT_OK;
	return a;
}

static uint64_t span_cost(const struct otlp_span *s)
{
	return OTLP_SPAN_BYTES + (uint64_t)(s->ntokens + 2) * OTLP_EVENT_BYTES;
}

static struct otlp_span *span_new(struct otlp *o, const struct request *r,
				  const struct request_metrics *m, const struct gpu_attribution *ga,
				  const uint8_t trace_id[16], unsigned anomaly)
{
	uint32_t keep = anomaly ? r->ntokens : 0;
	struct otlp_span *s;

	if (keep > o->o.max_token_events)
		keep = o->o.max_token_events;
	s = calloc(1, sizeof(*s) + (size_t)keep * sizeof(s->token_ns[0]));
	if (!s)
		return NULL;
	memcpy(s->trace_id, trace_id, OTLP_TRACE_ID_LEN);
	rng_id(o->rng, s->span_id, OTLP_SPAN_ID_LEN);
	s->pid = r->pid;
	s->seq = r->seq;
	snprintf(s->conn, sizeof(s->conn), "%s", r->conn);
	snprintf(s->method, sizeof(s->method), "%s", r->method);
	snprintf(s->path, sizeof(s->path), "%s", r->path);
	snprintf(s->model, sizeof(s->model), "%s", r->info.model);
	s->op = operation(r);
	s->status = r->status;
	s->outcome = r->outcome;
	s->format = r->format;
	s->arrival_ns = r->arrival_ns;
	/* A request reported at the end of tracing may have no end of its own. */
	s->end_ns = r->end_ns >= r->arrival_ns ? r->end_ns : r->arrival_ns;
	if (r->ntokens) {
		s->first_token_ns = r->token_ns[0];
		s->last_token_ns = r->token_ns[r->ntokens - 1];
	}
	s->ttft_ns = m->ttft_ns;
	s->tpot_ns = m->tpot_ns;
	s->itl_max_ns = m->itl_max_ns;
	s->tokens = m->tokens;
	s->tokens_from_usage = m->tokens_from_usage;
	s->prompt_tokens = r->prompt_tokens;
	s->max_tokens = r->info.max_tokens;
	s->anomaly = anomaly;
	s->ntokens = keep;
	s->dropped_events = anomaly ? r->ntokens - keep : 0;
	if (keep)
		memcpy(s->token_ns, r->token_ns, (size_t)keep * sizeof(s->token_ns[0]));
	if (ga && ga->queue_ns >= 0 && ga->prefill_ns >= 0) {
		s->child_start[CHILD_QUEUE] = r->arrival_ns;
		s->child_end[CHILD_QUEUE] = r->arrival_ns + ga->queue_ns;
		s->child_start[CHILD_PREFILL] = s->child_end[CHILD_QUEUE];
		s->child_end[CHILD_PREFILL] = s->child_end[CHILD_QUEUE] + ga->prefill_ns;
	}
	if (ga && ga->decode_ns >= 0 && r->ntokens) {
		s->child_start[CHILD_DECODE] = r->first_token_ns;
		s->child_end[CHILD_DECODE] = r->first_token_ns + ga->decode_ns;
	}
	for (int i = 0; i < CHILD_MAX; i++)
		if (s->child_end[i])
			rng_id(o->rng, s->child_id[i], OTLP_SPAN_ID_LEN);
	return s;
}

void otlp_span_free(struct otlp_span *s)
{
	free(s);
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
	uint8_t trace_id[OTLP_TRACE_ID_LEN];
	unsigned anomaly = otlp_anomaly(&o->o, r, m);
	struct otlp_span *s = NULL;
	bool wake = false, first_drop = false;

	rng_id(o->rng, trace_id, sizeof(trace_id));
	if (!anomaly && id_randomness(trace_id) < o->keep_threshold) {
		pthread_mutex_lock(&o->lock);
		o->st.sampled_out++;
		pthread_mutex_unlock(&o->lock);
		return;
	}
	s = span_new(o, r, m, ga, trace_id, anomaly);
	pthread_mutex_lock(&o->lock);
	if (s && o->o.backpressure)
		wait_room_locked(o, span_cost(s));
	if (s && !o->stopping && o->count < o->o.queue_max &&
	    o->queued_bytes + span_cost(s) <= OTLP_QUEUE_BYTES) {
		o->queue[(o->head + o->count++) % o->o.queue_max] = s;
		o->queued_bytes += span_cost(s);
		o->st.anomalous += !!anomaly;
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
	snprintf(o->hostname, sizeof(o->hostname), "%s", hostname ? hostname : "");
	pthread_mutex_unlock(&o->lock);
}

struct sink otlp_sink(struct otlp *o)
{
	return (struct sink){
		.name = "otlp",
		.ctx = o,
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
		o->queued_bytes -= span_cost(out[n]);
		o->head = (o->head + 1) % o->o.queue_max;
		o->count--;
		n++;
	}
	pthread_mutex_unlock(&o->lock);
	return n;
}

/* ---- encoding: OTLP/JSON (protobuf JSON mapping; ids as hex, 64-bit integers as strings,
 * enums as numbers) ---- */

enum { SPAN_KIND_INTERNAL = 1, SPAN_KIND_SERVER = 2 };
enum { STATUS_CODE_UNSET = 0, STATUS_CODE_ERROR = 2 };

static void put_hex(struct jsonw *w, const char *key, const uint8_t *id, size_t len)
{
	char hex[2 * OTLP_TRACE_ID_LEN + 1];

	for (size_t i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", id[i]);
	jsonw_str(w, key, hex);
}

static void put_u64s(struct jsonw *w, const char *key, uint64_t v)
{
	jsonw_key(w, key);
	fprintf(w->f, "\"%" PRIu64 "\"", v);
}

static void put_time(const struct otlp *o, struct jsonw *w, const char *key, uint64_t mono)
{
	put_u64s(w, key, mono + (uint64_t)o->o.realtime_offset_ns);
}

static void attr_begin(struct jsonw *w, const char *key)
{
	jsonw_obj_begin(w, NULL);
	jsonw_str(w, "key", key);
	jsonw_obj_begin(w, "value");
}

static void attr_end(struct jsonw *w)
{
	jsonw_obj_end(w);
	jsonw_obj_end(w);
}

static void attr_str(struct jsonw *w, const char *key, const char *v)
{
	attr_begin(w, key);
	jsonw_str(w, "stringValue", v);
	attr_end(w);
}

static void attr_int(struct jsonw *w, const char *key, int64_t v)
{
	attr_begin(w, key);
	jsonw_key(w, "intValue");
	fprintf(w->f, "\"%" PRId64 "\"", v);
	attr_end(w);
}

/* Nanoseconds as seconds, exactly: nine decimals. */
static void attr_seconds(struct jsonw *w, const char *key, int64_t ns)
{
	attr_begin(w, key);
	jsonw_num(w, "doubleValue", ns / 1e9, 9);
	attr_end(w);
}

/* "addr:port" or "[addr]:port" from [s, end) into the address/port attributes. */
static void attr_endpoint(struct jsonw *w, const char *s, const char *end, const char *addr_key,
			  const char *port_key)
{
	const char *colon = NULL, *a = s, *a_end;
	char addr[64];
	long port = 0;

	for (const char *p = end; p > s; p--) {
		if (p[-1] == ':') {
			colon = p - 1;
			break;
		}
	}
	if (!colon || colon + 1 == end)
		return;
	for (const char *p = colon + 1; p < end; p++) {
		if (!isdigit((unsigned char)*p))
			return;
		port = port * 10 + (*p - '0');
		if (port > 65535)
			return;
	}
	a_end = colon;
	if (*a == '[' && a_end > a && a_end[-1] == ']') {
		a++;
		a_end--;
	}
	if (a_end <= a || (size_t)(a_end - a) >= sizeof(addr))
		return;
	memcpy(addr, a, a_end - a);
	addr[a_end - a] = 0;
	attr_str(w, addr_key, addr);
	attr_int(w, port_key, port);
}

/* server.* from the local side of "local<-peer#N", client.* from the peer side; a Unix socket
 * ("unix:fdN#N") has neither. */
static void attr_conn(struct jsonw *w, const char *conn)
{
	const char *arrow = strstr(conn, "<-"), *hash;

	if (!arrow)
		return;
	hash = strrchr(arrow, '#');
	attr_endpoint(w, conn, arrow, "server.address", "server.port");
	attr_endpoint(w, arrow + 2, hash ? hash : arrow + strlen(arrow), "client.address",
		      "client.port");
}

static void anomaly_text(unsigned a, char *out, size_t n)
{
	snprintf(out, n, "%s%s%s", a & OTLP_SLOW_TTFT ? "slow_ttft," : "",
		 a & OTLP_SLOW_ITL ? "slow_itl," : "", a & OTLP_NOT_OK ? "outcome," : "");
	if (*out)
		out[strlen(out) - 1] = 0;
}

static void put_event(const struct otlp *o, struct jsonw *w, const char *name, uint64_t t,
		      int64_t index)
{
	jsonw_obj_begin(w, NULL);
	put_time(o, w, "timeUnixNano", t);
	jsonw_str(w, "name", name);
	if (index >= 0) {
		jsonw_arr_begin(w, "attributes");
		attr_int(w, "index", index);
		jsonw_arr_end(w);
	}
	jsonw_obj_end(w);
}

static void put_span(const struct otlp *o, struct jsonw *w, const struct otlp_span *s)
{
	size_t pathlen = strcspn(s->path, "?");
	char name[512], why[40];

	/* The span name, before attributes reuse the buffer. */
	if (s->op && s->model[0])
		snprintf(name, sizeof(name), "%s %s", s->op, s->model);
	else if (s->op)
		snprintf(name, sizeof(name), "%s", s->op);
	else
		snprintf(name, sizeof(name), "%s %.*s", s->method, (int)pathlen, s->path);

	jsonw_obj_begin(w, NULL);
	put_hex(w, "traceId", s->trace_id, OTLP_TRACE_ID_LEN);
	put_hex(w, "spanId", s->span_id, OTLP_SPAN_ID_LEN);
	jsonw_str(w, "name", name);
	jsonw_u64(w, "kind", SPAN_KIND_SERVER);
	put_time(o, w, "startTimeUnixNano", s->arrival_ns);
	put_time(o, w, "endTimeUnixNano", s->end_ns);

	jsonw_arr_begin(w, "attributes");
	if (s->op)
		attr_str(w, "gen_ai.operation.name", s->op);
	if (s->model[0])
		attr_str(w, "gen_ai.request.model", s->model);
	if (s->max_tokens >= 0)
		attr_int(w, "gen_ai.request.max_tokens", s->max_tokens);
	if (s->prompt_tokens >= 0)
		attr_int(w, "gen_ai.usage.input_tokens", s->prompt_tokens);
	if (s->tokens >= 0)
		attr_int(w, "gen_ai.usage.output_tokens", s->tokens);
	if (s->ttft_ns >= 0)
		attr_seconds(w, "gen_ai.server.time_to_first_token", s->ttft_ns);
	if (s->tpot_ns >= 0)
		attr_seconds(w, "gen_ai.server.time_per_output_token", s->tpot_ns);
	attr_str(w, "http.request.method", s->method);
	/* url.path has no query (it may carry keys); it is not exported. */
	snprintf(name, sizeof(name), "%.*s", (int)pathlen, s->path);
	attr_str(w, "url.path", name);
	if (s->status > 0)
		attr_int(w, "http.response.status_code", s->status);
	attr_conn(w, s->conn);
	attr_str(w, "tokenscope.outcome", outcome_name(s->outcome));
	attr_str(w, "tokenscope.conn", s->conn);
	attr_int(w, "tokenscope.pid", s->pid);
	attr_int(w, "tokenscope.seq", s->seq);
	attr_str(w, "tokenscope.format", frame_format_name(s->format));
	if (s->tokens >= 0)
		attr_str(w, "tokenscope.tokens_from", s->tokens_from_usage ? "usage" : "frames");
	if (s->itl_max_ns >= 0)
		attr_seconds(w, "tokenscope.itl.max", s->itl_max_ns);
	anomaly_text(s->anomaly, why, sizeof(why));
	if (*why)
		attr_str(w, "tokenscope.anomaly", why);
	jsonw_arr_end(w);

	jsonw_arr_begin(w, "events");
	if (s->first_token_ns)
		put_event(o, w, "first_token", s->first_token_ns, -1);
	for (uint32_t i = 0; i < s->ntokens; i++)
		put_event(o, w, "token", s->token_ns[i], i);
	if (s->last_token_ns)
		put_event(o, w, "last_token", s->last_token_ns, -1);
	jsonw_arr_end(w);
	if (s->dropped_events)
		jsonw_u64(w, "droppedEventsCount", s->dropped_events);

	/* OpenTelemetry: instrumentation leaves a span it does not know to have failed UNSET (OK
	 * is for an operator's override); tokenscope's failures are its outcomes. */
	jsonw_obj_begin(w, "status");
	if (s->outcome != OUTCOME_OK) {
		jsonw_u64(w, "code", STATUS_CODE_ERROR);
		jsonw_str(w, "message", outcome_name(s->outcome));
	}
	jsonw_obj_end(w);
	jsonw_obj_end(w);

	for (int i = 0; i < CHILD_MAX; i++) {
		if (!s->child_end[i])
			continue;
		jsonw_obj_begin(w, NULL);
		put_hex(w, "traceId", s->trace_id, OTLP_TRACE_ID_LEN);
		put_hex(w, "spanId", s->child_id[i], OTLP_SPAN_ID_LEN);
		put_hex(w, "parentSpanId", s->span_id, OTLP_SPAN_ID_LEN);
		jsonw_str(w, "name", child_names[i]);
		jsonw_u64(w, "kind", SPAN_KIND_INTERNAL);
		put_time(o, w, "startTimeUnixNano", s->child_start[i]);
		put_time(o, w, "endTimeUnixNano", s->child_end[i]);
		jsonw_obj_end(w);
	}
}

int otlp_encode(const struct otlp *o, struct otlp_span *const *spans, size_t n, char **buf,
		size_t *len)
{
	FILE *f = open_memstream(buf, len);
	struct jsonw w;

	if (!f)
		return -ENOMEM;
	jsonw_begin(&w, f);
	jsonw_arr_begin(&w, "resourceSpans");
	jsonw_obj_begin(&w, NULL);
	jsonw_obj_begin(&w, "resource");
	jsonw_arr_begin(&w, "attributes");
	attr_str(&w, "service.name", o->service);
	if (o->hostname[0])
		attr_str(&w, "host.name", o->hostname);
	jsonw_arr_end(&w);
	jsonw_obj_end(&w);
	jsonw_arr_begin(&w, "scopeSpans");
	jsonw_obj_begin(&w, NULL);
	jsonw_obj_begin(&w, "scope");
	jsonw_str(&w, "name", "tokenscope");
	jsonw_obj_end(&w);
	jsonw_arr_begin(&w, "spans");
	for (size_t i = 0; i < n; i++)
		put_span(o, &w, spans[i]);
	jsonw_arr_end(&w);
	jsonw_obj_end(&w);
	jsonw_arr_end(&w);
	jsonw_obj_end(&w);
	jsonw_arr_end(&w);
	jsonw_end(&w);
	if (ferror(f)) {
		fclose(f);
		free(*buf);
		*buf = NULL;
		return -ENOMEM;
	}
	if (fclose(f)) {
		free(*buf);
		*buf = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* ---- sending: HTTP/1.1 POST over a plain TCP socket, one connection per batch ---- */

/* How long one poll() may sleep before looking at close's deadline again. */
#define OTLP_POLL_SLICE_NS (100 * NS_PER_MS)

/* Waits for events on fd until deadline (CLOCK_MONOTONIC ns), or close's deadline once
 * otlp_close has set one: -ETIMEDOUT past either. */
static int wait_fd(const struct otlp *o, int fd, short events, uint64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = events };

	for (;;) {
		uint64_t now = mono_ns(), end = deadline;
		uint64_t closing = __atomic_load_n(&o->close_deadline_ns, __ATOMIC_RELAXED);
		int rc;

		if (closing && closing < end)
			end = closing;
		if (now >= end)
			return -ETIMEDOUT;
		if (end - now > OTLP_POLL_SLICE_NS)
			end = now + OTLP_POLL_SLICE_NS;
		rc = poll(&p, 1, (int)((end - now + NS_PER_MS - 1) / NS_PER_MS));
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

static int connect_one(const struct otlp *o, const struct sockaddr *sa, socklen_t len,
		       uint64_t deadline)
{
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int err = 0, rc;
	socklen_t elen = sizeof(err);

	if (fd < 0)
		return -errno;
	if (connect(fd, sa, len) == 0)
		return fd;
	if (errno != EINPROGRESS) {
		rc = -errno;
		goto fail;
	}
	rc = wait_fd(o, fd, POLLOUT, deadline);
	if (rc)
		goto fail;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
		err = errno;
	if (!err)
		return fd;
	rc = -err;
fail:
	close(fd);
	return rc;
}

static int send_all(const struct otlp *o, int fd, const char *p, size_t n, uint64_t deadline)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k > 0) {
			p += k;
			n -= k;
		} else if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
			int rc = wait_fd(o, fd, POLLOUT, deadline);

			if (rc)
				return rc;
		} else {
			return k < 0 ? -errno : -EPIPE;
		}
	}
	return 0;
}

int otlp_parse_response(char *head, int *status, int *retry_after_s)
{
	char *line, *save = NULL;

	*retry_after_s = -1;
	/* A status is three digits, the first its class: "040" is no answer. */
	if (strncmp(head, "HTTP/1.", 7) || !isdigit((unsigned char)head[7]) || head[8] != ' ' ||
	    head[9] < '1' || head[9] > '9' || !isdigit((unsigned char)head[10]) ||
	    !isdigit((unsigned char)head[11]))
		return -EPROTO;
	*status = (head[9] - '0') * 100 + (head[10] - '0') * 10 + (head[11] - '0');
	strtok_r(head, "\r\n", &save);
	while ((line = strtok_r(NULL, "\r\n", &save))) {
		if (!strncasecmp(line, "Retry-After:", 12)) {
			char *end;
			long v = strtol(line + 12, &end, 10);

			if (end != line + 12 && v >= 0)
				*retry_after_s = v > INT32_MAX ? INT32_MAX : (int)v;
		}
	}
	return 0;
}

/* One POST; 0 with *status once a response head came back, else a negative errno. */
static int http_post(struct otlp *o, const char *body, size_t len, uint64_t deadline, int *status,
		     int *retry_after_s)
{
	char head[OTLP_RESPONSE_HEAD + 1], req[1024];
	size_t got = 0;
	int fd = -ECONNREFUSED, rc, n;

	for (int i = 0; i < o->naddrs; i++) {
		fd =
		    connect_one(o, (const struct sockaddr *)&o->addrs[i], o->addrlens[i], deadline);
		if (fd >= 0)
			break;
	}
	if (fd < 0)
		return fd;
	n = snprintf(req, sizeof(req),
		     "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: tokenscope\r\n"
		     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
		     "Connection: close\r\n\r\n",
		     o->url.path, o->url.hostport, len);
	rc = send_all(o, fd, req, n, deadline);
	if (!rc)
		rc = send_all(o, fd, body, len, deadline);
	/* The head is enough: its end, the buffer's, or the server closing. */
	while (!rc && got < OTLP_RESPONSE_HEAD) {
		ssize_t k = recv(fd, head + got, OTLP_RESPONSE_HEAD - got, 0);

		if (k > 0) {
			got += k;
			head[got] = 0;
			if (strstr(head, "\r\n\r\n"))
				break;
		} else if (k == 0) {
			break;
		} else if (errno == EAGAIN || errno == EINTR) {
			rc = wait_fd(o, fd, POLLIN, deadline);
		} else {
			rc = -errno;
		}
	}
	close(fd);
	if (rc)
		return rc;
	head[got] = 0;
	return otlp_parse_response(head, status, retry_after_s);
}

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

static void describe(struct otlp *o, int rc, int status, char *out, size_t n)
{
	if (rc)
		snprintf(out, n, "POST http://%.64s%.40s: %s", o->url.hostport, o->url.path,
			 strerror(-rc));
	else
		snprintf(out, n, "POST http://%.64s%.40s: HTTP %d", o->url.hostport, o->url.path,
			 status);
}

/* Sends one batch with retries; updates the counters. */
static void send_batch(struct otlp *o, struct otlp_span **spans, size_t n)
{
	char *body = NULL, what[160];
	size_t len = 0;
	uint64_t backoff = (uint64_t)o->o.backoff_ms * NS_PER_MS;
	bool ok = false, again = false;
	int rc, status = 0, retry_after = -1;
	uint32_t attempt;

	rc = otlp_encode(o, spans, n, &body, &len);
	for (attempt = 1; !rc; attempt++) {
		uint64_t now = mono_ns(), deadline = now + (uint64_t)o->o.timeout_ms * NS_PER_MS;
		uint64_t wait;

		pthread_mutex_lock(&o->lock);
		if (o->stopping)
			deadline = min_u64(deadline, o->close_deadline_ns);
		pthread_mutex_unlock(&o->lock);
		rc = http_post(o, body, len, deadline, &status, &retry_after);
		if (!rc && status >= 200 && status < 300) {
			ok = true;
			break;
		}
		describe(o, rc, status, what, sizeof(what));
		if ((!rc && !retryable(status)) || attempt >= o->o.max_attempts) {
			warn(o, "%s; gave up on %zu traces after %u attempt%s", what, n, attempt,
			     attempt > 1 ? "s" : "");
			break;
		}
		wait = retry_after >= 0 ? (uint64_t)retry_after * NS_PER_S : backoff;
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
		/* A replay drains while the collector keeps up (wait_fd reads it unlocked). */
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

		if (n && bytes + span_cost(s) > OTLP_BATCH_BYTES)
			break;
		bytes += span_cost(s);
		o->queued_bytes -= span_cost(s);
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

static void *otlp_run(void *arg)
{
	struct otlp *o = arg;
	uint64_t next_flush = mono_ns() + (uint64_t)o->o.flush_ms * NS_PER_MS;

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
	o->o.service_name = o->service;
	o->o.hostname = o->hostname;
	o->o.endpoint = NULL; /* the parsed form is kept in o->url */
	o->keep_threshold = keep_threshold(opts->sample_ratio);
	if (opts->endpoint) {
		rc = otlp_parse_url(opts->endpoint, &o->url, o->error, sizeof(o->error));
		if (rc)
			return rc;
		rc = otlp_resolve(o);
		if (rc)
			return rc;
	}
	seed = opts->seed;
	if (!seed && getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = mono_ns() ^ ((uint64_t)getpid() << 32);
	for (int i = 0; i < 4; i++)
		o->rng[i] = splitmix64(&seed);
	o->queue = calloc(opts->queue_max, sizeof(*o->queue));
	o->batch = calloc(opts->batch_max, sizeof(*o->batch));
	if (!o->queue || !o->batch) {
		free(o->queue);
		free(o->batch);
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
	/* Read without the lock by a POST in progress (wait_fd). */
	__atomic_store_n(&o->close_deadline_ns,
			 mono_ns() + (uint64_t)o->o.close_wait_ms * NS_PER_MS, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&o->lock);
	pthread_cond_broadcast(&o->wake);
	pthread_cond_broadcast(&o->room);
	if (o->thread_started)
		pthread_join(o->thread, NULL);
	o->thread_started = false;
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
	fprintf(
	    f,
	    "  otlp: %llu traces exported (%llu anomalous queued), %llu sampled out, %llu "
	    "dropped (queue full), %llu failed batches (%llu traces), %llu retries, %llu unsent "
	    "at exit\n",
	    (unsigned long long)st->exported, (unsigned long long)st->anomalous,
	    (unsigned long long)st->sampled_out, (unsigned long long)st->dropped,
	    (unsigned long long)st->failed_batches, (unsigned long long)st->failed,
	    (unsigned long long)st->retries, (unsigned long long)st->unsent);
	if (st->last_error[0])
		fprintf(f, "  otlp: last error (%s): %s\n", endpoint ? endpoint : "collector",
			st->last_error);
}
