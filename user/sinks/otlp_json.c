// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/jsonw.h"
#include "lib/utf8.h"
#include "sinks/otlp_json.h"

static const char *const child_names[OTLP_CHILD_MAX] = { "queue", "prefill", "decode" };

enum { SPAN_KIND_INTERNAL = 1, SPAN_KIND_SERVER = 2, SPAN_KIND_CLIENT = 3 };
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

static void put_time(const struct otlp_resource *o, struct jsonw *w, const char *key, uint64_t mono)
{
	int64_t wall;

	/* A recording's clocks may put a time before 1970 or past 2262: held at the nearest one
	 * representable, so that a span's times keep their order (its end is never before its
	 * start). */
	if (!clock_wall_ns(o->realtime_offset_ns, mono, &wall))
		wall = o->realtime_offset_ns < 0 && mono <= (uint64_t)INT64_MAX ? 0 : INT64_MAX;
	put_u64s(w, key, (uint64_t)wall);
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

static void attr_bool(struct jsonw *w, const char *key, bool v)
{
	attr_begin(w, key);
	jsonw_bool(w, "boolValue", v);
	attr_end(w);
}

/* A string array of one value (the HTTP conventions' header attributes are arrays). */
static void attr_str_one(struct jsonw *w, const char *key, const char *v)
{
	attr_begin(w, key);
	jsonw_obj_begin(w, "arrayValue");
	jsonw_arr_begin(w, "values");
	jsonw_obj_begin(w, NULL);
	jsonw_str(w, "stringValue", v);
	jsonw_obj_end(w);
	jsonw_arr_end(w);
	jsonw_obj_end(w);
	attr_end(w);
}

static void attr_endpoint(struct jsonw *w, const char *addr_key, const char *addr,
			  const char *port_key, uint16_t port)
{
	attr_str(w, addr_key, addr);
	attr_int(w, port_key, port);
}

/* Both kinds name both ends as the conventions do, so that a collector joins a client span to
 * the server span of the same connection (the one's client.* and server.* are the other's): a
 * server's span has server.* its own side and client.* the peer; a client's has client.* (and
 * network.local.*) its own side and server.* its upstream. A Unix socket has neither. */
static void attr_conn(struct jsonw *w, const struct request_ends *e, bool client)
{
	if (!e->inet)
		return;
	if (client) {
		attr_endpoint(w, "network.local.address", e->local_addr, "network.local.port",
			      e->local_port);
		attr_endpoint(w, "client.address", e->local_addr, "client.port", e->local_port);
		attr_endpoint(w, "server.address", e->peer_addr, "server.port", e->peer_port);
	} else {
		attr_endpoint(w, "server.address", e->local_addr, "server.port", e->local_port);
		attr_endpoint(w, "client.address", e->peer_addr, "client.port", e->peer_port);
	}
}

/* Disaggregated serving's join keys (reqbody.h): vLLM's kv_transfer_params, SGLang's bootstrap. */
static void attr_disagg(struct jsonw *w, const struct req_disagg *d)
{
	if (d->do_remote_prefill >= 0)
		attr_bool(w, "tokenscope.kv_transfer.do_remote_prefill", d->do_remote_prefill);
	if (d->do_remote_decode >= 0)
		attr_bool(w, "tokenscope.kv_transfer.do_remote_decode", d->do_remote_decode);
	if (d->remote_engine_id[0])
		attr_str(w, "tokenscope.kv_transfer.remote_engine_id", d->remote_engine_id);
	if (d->remote_request_id[0])
		attr_str(w, "tokenscope.kv_transfer.remote_request_id", d->remote_request_id);
	if (d->remote_host[0])
		attr_str(w, "tokenscope.kv_transfer.remote_host", d->remote_host);
	if (d->remote_port >= 0)
		attr_int(w, "tokenscope.kv_transfer.remote_port", d->remote_port);
	if (d->room_set)
		attr_int(w, "tokenscope.bootstrap.room", d->bootstrap_room);
	if (d->bootstrap_host[0])
		attr_str(w, "tokenscope.bootstrap.host", d->bootstrap_host);
	if (d->bootstrap_port >= 0)
		attr_int(w, "tokenscope.bootstrap.port", d->bootstrap_port);
}

/* The request's objectives (slo.h): tokenscope.slo.result, and per objective its limit in
 * seconds, where it came from and its verdict. */
static void attr_slo(struct jsonw *w, const struct slo_verdict *v)
{
	char key[64];

	if (!v->any)
		return;
	attr_str(w, "tokenscope.slo.result", slo_result_name(v->overall));
	for (int k = 0; k < SLO_METRICS; k++) {
		if (!v->limit_ns[k])
			continue;
		snprintf(key, sizeof(key), "tokenscope.slo.%s.limit", slo_metric_names[k]);
		attr_seconds(w, key, v->limit_ns[k]);
		snprintf(key, sizeof(key), "tokenscope.slo.%s.from", slo_metric_names[k]);
		attr_str(w, key, v->from[k] == SLO_FROM_HEADER ? "header" : "flag");
		snprintf(key, sizeof(key), "tokenscope.slo.%s.result", slo_metric_names[k]);
		attr_str(w, key, slo_result_name(v->result[k]));
	}
}

static void anomaly_text(unsigned a, char *out, size_t n)
{
	snprintf(out, n, "%s%s%s%s", a & OTLP_SLOW_TTFT ? "slow_ttft," : "",
		 a & OTLP_SLOW_ITL ? "slow_itl," : "", a & OTLP_NOT_OK ? "outcome," : "",
		 a & OTLP_SLO_MISSED ? "slo_missed," : "");
	if (*out)
		out[strlen(out) - 1] = 0;
}

/* tokenscope.kept: slow_ttft, slow_itl and error for an anomaly (comma-joined when several),
 * warm_up or random. */
static void kept_text(const struct otlp_span *s, char *out, size_t n)
{
	if (s->kept == OTLP_KEPT_WARM_UP) {
		snprintf(out, n, "warm_up");
		return;
	}
	if (s->kept == OTLP_KEPT_RANDOM || !s->anomaly) {
		snprintf(out, n, "random");
		return;
	}
	snprintf(out, n, "%s%s%s%s", s->anomaly & OTLP_SLOW_TTFT ? "slow_ttft," : "",
		 s->anomaly & OTLP_SLOW_ITL ? "slow_itl," : "",
		 s->anomaly & OTLP_NOT_OK ? "error," : "",
		 s->anomaly & OTLP_SLO_MISSED ? "slo_missed," : "");
	out[strlen(out) - 1] = 0;
}

static void put_event(const struct otlp_resource *o, struct jsonw *w, const char *name, uint64_t t,
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

/* The span's tokenscope.* attributes: where it was seen, why it was kept, its join keys,
 * objectives, labels, preemptions and stalls. */
static void attr_tokenscope(struct jsonw *w, const struct otlp_span *s)
{
	char why[40];

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
	kept_text(s, why, sizeof(why));
	attr_str(w, "tokenscope.kept", why);
	if (s->forwarded) {
		char hex[2 * OTLP_SPAN_ID_LEN + 1];

		tracectx_hex(hex, s->forwarded_parent, OTLP_SPAN_ID_LEN);
		attr_str(w, "tokenscope.trace.forwarded_parent", hex);
	}
	attr_disagg(w, &s->disagg);
	attr_slo(w, &s->slo);
	for (uint32_t i = 0; s->labels.spec && i < s->labels.spec->n; i++) {
		char key[64];

		if (!s->labels.set[i])
			continue;
		snprintf(key, sizeof(key), "tokenscope.label.%s", s->labels.spec->l[i].name);
		attr_str(w, key, s->labels.v[i]);
	}
	if (s->preemptions) {
		attr_int(w, "tokenscope.preemptions", s->preemptions);
		attr_int(w, "tokenscope.preempted_ns", s->preempted_ns);
	}
	if (s->stalls)
		attr_int(w, "tokenscope.stalls", s->stalls);
}

/* The span's events: its first and last token, its times out of the batch, its stalls, and
 * each token (anomalous requests only). */
static void put_events(const struct otlp_resource *o, struct jsonw *w, const struct otlp_span *s)
{
	jsonw_arr_begin(w, "events");
	if (s->first_token_ns)
		put_event(o, w, "first_token", s->first_token_ns, -1);
	/* Out of the engine's batch and back (docs/gpu.md "Preemption"); a span's events need no
	 * order. */
	for (uint32_t i = 0; i < s->npreempt; i++) {
		put_event(o, w, "gen_ai.preempted", s->preempt_from[i], -1);
		put_event(o, w, "gen_ai.resumed", s->preempt_to[i], -1);
	}
	/* Its slow gaps and their causes (docs/gpu.md "Who stalled me"). */
	for (uint32_t i = 0; i < s->nstall; i++) {
		jsonw_obj_begin(w, NULL);
		put_time(o, w, "timeUnixNano", s->stall[i].from_ns);
		jsonw_str(w, "name", "gen_ai.stall");
		jsonw_arr_begin(w, "attributes");
		attr_str(w, "tokenscope.stall.cause", stall_cause_name(s->stall[i].cause));
		attr_int(w, "tokenscope.stall.gap_ns", (int64_t)s->stall[i].gap_ns);
		attr_int(w, "tokenscope.stall.cause_ns", (int64_t)s->stall[i].cause_ns);
		if (s->stall[i].likely)
			attr_bool(w, "tokenscope.stall.likely", true);
		if (s->stall[i].by[0])
			attr_str(w, "tokenscope.stall.by", s->stall[i].by);
		jsonw_arr_end(w);
		jsonw_obj_end(w);
	}
	for (uint32_t i = 0; i < s->ntokens; i++)
		put_event(o, w, "token", s->token_ns[i], i);
	if (s->last_token_ns)
		put_event(o, w, "last_token", s->last_token_ns, -1);
	jsonw_arr_end(w);
}

static void put_span(const struct otlp_resource *o, struct jsonw *w, const struct otlp_span *s)
{
	size_t pathlen = strcspn(s->path, "?");
	char name[512];

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
	if (s->has_parent)
		put_hex(w, "parentSpanId", s->parent_id, OTLP_SPAN_ID_LEN);
	if (s->trace_state[0])
		jsonw_str(w, "traceState", s->trace_state);
	jsonw_str(w, "name", name);
	jsonw_u64(w, "kind", s->client ? SPAN_KIND_CLIENT : SPAN_KIND_SERVER);
	put_time(o, w, "startTimeUnixNano", s->start_ns);
	put_time(o, w, "endTimeUnixNano", s->end_ns);

	jsonw_arr_begin(w, "attributes");
	if (s->op)
		attr_str(w, "gen_ai.operation.name", s->op);
	if (s->api_type)
		attr_str(w, "openai.api.type", s->api_type);
	if (s->model[0])
		attr_str(w, "gen_ai.request.model", s->model);
	if (s->max_tokens >= 0)
		attr_int(w, "gen_ai.request.max_tokens", s->max_tokens);
	if (s->prompt_tokens >= 0)
		attr_int(w, "gen_ai.usage.input_tokens", s->prompt_tokens);
	if (s->tokens >= 0)
		attr_int(w, "gen_ai.usage.output_tokens", s->tokens);
	/* The GenAI conventions name these for the server; a client's are as it saw them. */
	if (s->ttft_ns >= 0)
		attr_seconds(w,
			     s->client ? "tokenscope.client.time_to_first_token"
				       : "gen_ai.server.time_to_first_token",
			     s->ttft_ns);
	if (s->tpot_ns >= 0)
		attr_seconds(w,
			     s->client ? "tokenscope.client.time_per_output_token"
				       : "gen_ai.server.time_per_output_token",
			     s->tpot_ns);
	attr_str(w, "http.request.method", s->method);
	/* url.path has no query (it may carry keys); it is not exported. */
	snprintf(name, sizeof(name), "%.*s", (int)pathlen, s->path);
	attr_str(w, "url.path", name);
	if (s->status > 0)
		attr_int(w, "http.response.status_code", s->status);
	attr_conn(w, &s->ends, s->client);
	if (s->request_id[0])
		attr_str_one(w, "http.request.header.x-request-id", s->request_id);
	attr_str(w, "tokenscope.outcome", outcome_name(s->outcome));
	/* error.type: a low-cardinality class of the error, as the GenAI conventions ask: the
	 * stream's own code where it named one, the HTTP status, or the outcome. */
	if (s->outcome != OUTCOME_OK) {
		char status[16];

		snprintf(status, sizeof(status), "%d", s->status);
		attr_str(w, "error.type",
			 s->error_reason[0]		    ? s->error_reason
			 : s->outcome == OUTCOME_HTTP_ERROR ? status
							    : outcome_name(s->outcome));
	}
	attr_tokenscope(w, s);
	jsonw_arr_end(w);

	put_events(o, w, s);
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

	for (int i = 0; i < OTLP_CHILD_MAX; i++) {
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

/* Where the serving process runs, by the semantic conventions, in the order the resource
 * carries them: each a member of struct workload, "" when not known. */
static const struct {
	const char *key;
	size_t off;
} workload_attrs[] = {
	{ "container.id", offsetof(struct workload, container_id) },
	{ "k8s.namespace.name", offsetof(struct workload, k8s_namespace) },
	{ "k8s.pod.name", offsetof(struct workload, k8s_pod) },
	{ "k8s.pod.uid", offsetof(struct workload, pod_uid) },
	{ "k8s.container.name", offsetof(struct workload, k8s_container) },
};
#define NWORKLOAD_ATTRS (sizeof(workload_attrs) / sizeof(workload_attrs[0]))

static const char *workload_attr(const struct workload *wl, size_t i)
{
	return (const char *)wl + workload_attrs[i].off;
}

static bool same_workload(const struct workload *a, const struct workload *b)
{
	for (size_t i = 0; i < NWORKLOAD_ATTRS; i++)
		if (strcmp(workload_attr(a, i), workload_attr(b, i)))
			return false;
	return true;
}

/* Whether the workload sets attribute key itself (it then wins over the environment's). */
static bool workload_sets(const struct workload *wl, const char *key)
{
	for (size_t i = 0; i < NWORKLOAD_ATTRS; i++)
		if (workload_attr(wl, i)[0] && !strcmp(key, workload_attrs[i].key))
			return true;
	return false;
}

/* The resource: the service, the node (host.name), where the serving process runs
 * (workload_attrs, each only when known), then the environment's attributes. */
static void put_resource(const struct otlp_resource *o, struct jsonw *w, const struct workload *wl)
{
	jsonw_obj_begin(w, "resource");
	jsonw_arr_begin(w, "attributes");
	attr_str(w, "service.name", o->service_name);
	if (o->hostname && o->hostname[0])
		attr_str(w, "host.name", o->hostname);
	for (size_t i = 0; i < NWORKLOAD_ATTRS; i++)
		if (workload_attr(wl, i)[0])
			attr_str(w, workload_attrs[i].key, workload_attr(wl, i));
	for (size_t i = 0; i < o->nattrs; i++)
		if (!workload_sets(wl, o->attrs[i].key))
			attr_str(w, o->attrs[i].key, o->attrs[i].value);
	jsonw_arr_end(w);
	jsonw_obj_end(w);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				      : -1;
}

/* s[0..n) trimmed of blanks, percent-decoded into out (cap); false when it does not fit or a
 * %XX is malformed. */
static bool decode_part(const char *s, size_t n, char *out, size_t cap, bool decode)
{
	char raw[256 * 3];
	size_t k = 0;

	while (n && (*s == ' ' || *s == '\t'))
		s++, n--;
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	for (size_t i = 0; i < n; i++) {
		int hi, lo;

		if (k + 1 >= sizeof(raw))
			return false;
		if (!decode || s[i] != '%') {
			raw[k++] = s[i];
			continue;
		}
		hi = i + 2 < n ? hexval(s[i + 1]) : -1;
		lo = i + 2 < n ? hexval(s[i + 2]) : -1;
		if (hi < 0 || lo < 0)
			return false;
		raw[k++] = (char)(hi << 4 | lo);
		i += 2;
	}
	if (k >= cap)
		return false;
	/* From the environment, but bound for a collector: valid UTF-8, no control bytes. */
	utf8_clean(out, cap, raw, k);
	return true;
}

int otlp_resource_attrs_parse(const char *text, struct otlp_attr *attrs, size_t max)
{
	size_t n = 0;

	for (const char *p = text; p && *p;) {
		size_t len = strcspn(p, ",");
		const char *eq = memchr(p, '=', len);

		if (strspn(p, " \t") == len) { /* an empty pair: skipped */
			p += len + (p[len] == ',');
			continue;
		}
		if (!eq || n == max ||
		    !decode_part(p, (size_t)(eq - p), attrs[n].key, sizeof(attrs[n].key), false) ||
		    !attrs[n].key[0] ||
		    !decode_part(eq + 1, len - (size_t)(eq + 1 - p), attrs[n].value,
				 sizeof(attrs[n].value), true))
			return -EINVAL;
		n++;
		p += len + (p[len] == ',');
	}
	return (int)n;
}

int otlp_json_encode(const struct otlp_resource *o, struct otlp_span *const *spans, size_t n,
		     char **buf, size_t *len)
{
	FILE *f = open_memstream(buf, len);
	struct jsonw w;

	if (!f)
		return -ENOMEM;
	jsonw_begin(&w, f);
	jsonw_arr_begin(&w, "resourceSpans");
	/* One resource per workload, in the order each first comes; its spans in their order. */
	for (size_t i = 0; i < n; i++) {
		bool first = true;

		for (size_t k = 0; k < i && first; k++)
			first = !same_workload(&spans[k]->wl, &spans[i]->wl);
		if (!first)
			continue;
		jsonw_obj_begin(&w, NULL);
		put_resource(o, &w, &spans[i]->wl);
		jsonw_arr_begin(&w, "scopeSpans");
		jsonw_obj_begin(&w, NULL);
		jsonw_obj_begin(&w, "scope");
		jsonw_str(&w, "name", "tokenscope");
		jsonw_obj_end(&w);
		jsonw_arr_begin(&w, "spans");
		for (size_t k = i; k < n; k++)
			if (same_workload(&spans[k]->wl, &spans[i]->wl))
				put_span(o, &w, spans[k]);
		jsonw_arr_end(&w);
		jsonw_obj_end(&w);
		jsonw_arr_end(&w);
		jsonw_obj_end(&w);
	}
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
