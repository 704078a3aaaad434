// SPDX-License-Identifier: MIT
/* OTLP trace export without the network: spans built from synthetic requests through the sink,
 * encoded and read back with cJSON (ids, times, attributes, events, children, status); tail
 * sampling by trace id; the bounded queue; the endpoint URL. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "pipeline/proxy.h"
#include "pipeline/gpu.h"
#include "sinks/otlp.h"
#include "pipeline/request.h"
#include "pipeline/tracectx.h"

#define MS 1000000ull
/* 2023-11-14T22:13:20Z minus a boot time: what the caller would measure. */
#define OFFSET 1699999000000000000ll
#define T0 1000000000000ull /* arrival, kernel time */

struct req_spec {
	const char *method, *path, *model, *conn;
	int status;
	enum outcome outcome;
	uint64_t ttft, gap; /* first token after arrival; gap between tokens */
	uint32_t ntokens;
	int64_t prompt_tokens, completion_tokens;
	bool client;
	const struct workload *wl; /* where its process runs; NULL: on the host */
	const struct slo_rules *slo; /* the objectives it is judged on; NULL: none */
	const struct req_labels *labels; /* its --label values; NULL: none asked for */
};

/* The sequence number the next fed request gets: requests are named apart, as on a connection. */
static uint32_t feed_seq;

/* One end of a label, "addr:port" or "[addr]:port", into addr and port. */
static void label_end(const char *s, size_t n, char *addr, uint16_t *port)
{
	const char *colon = NULL;

	for (size_t i = 0; i < n; i++)
		if (s[i] == ':')
			colon = s + i;
	if (!colon)
		return;
	*port = (uint16_t)atoi(colon + 1);
	if (s[0] == '[')
		snprintf(addr, REQUEST_ADDR_MAX, "%.*s", (int)(colon - s - 2), s + 1);
	else
		snprintf(addr, REQUEST_ADDR_MAX, "%.*s", (int)(colon - s), s);
}

/* The ends conn.c would have made with the label (local "<-" or "->" peer, "#id"). */
static void ends_of_label(struct request_ends *e, const char *label)
{
	const char *arrow = strstr(label, "<-"), *hash;

	if (!arrow)
		arrow = strstr(label, "->");
	if (!arrow)
		return;
	hash = strchr(arrow, '#');
	e->inet = true;
	label_end(label, (size_t)(arrow - label), e->local_addr, &e->local_port);
	label_end(arrow + 2, hash ? (size_t)(hash - arrow - 2) : strlen(arrow + 2), e->peer_addr,
		  &e->peer_port);
}

static void feed(struct sink *sk, const struct req_spec *q, const struct gpu_attribution *ga)
{
	const char *label = q->conn ? q->conn : "127.0.0.1:8000<-10.0.0.2:5555#7";
	struct request *r = request_new(42, 7, feed_seq++, label);
	struct gpu_attribution none = {
		-1, -1, -1, -1, -1, "none", -1, -1, NULL, .has_steps = false
	};
	struct request_metrics m;
	uint64_t t = T0 + q->ttft;

	ends_of_label(&r->ends, label);
	snprintf(r->method, sizeof(r->method), "%s", q->method ? q->method : "POST");
	snprintf(r->path, sizeof(r->path), "%s", q->path ? q->path : "/v1/chat/completions");
	snprintf(r->info.model, sizeof(r->info.model), "%s", q->model ? q->model : "");
	r->info.max_tokens = 64;
	r->client = q->client;
	if (q->wl)
		r->workload = *q->wl;
	r->status = q->status;
	r->outcome = q->outcome;
	r->streamed = q->ntokens > 0;
	r->format = q->ntokens ? FMT_OPENAI_CHAT : FMT_UNKNOWN;
	r->arrival_ns = T0;
	for (uint32_t i = 0; i < q->ntokens; i++, t += q->gap)
		request_add_token(r, t);
	r->end_ns = (q->ntokens ? t - q->gap : T0) + 5 * MS;
	r->prompt_tokens = q->prompt_tokens;
	r->completion_tokens = q->completion_tokens;
	if (q->labels)
		r->labels = *q->labels;
	request_metrics(r, &m);
	slo_judge(q->slo, r, &m, &m.slo);
	sk->request(sk->ctx, r, &m, ga ? ga : &none);
	request_free(r);
}

static void opts_test(struct otlp_opts *o)
{
	otlp_opts_default(o);
	o->endpoint = NULL; /* spans stay queued */
	o->seed = 1234;
	o->realtime_offset_ns = OFFSET;
	o->slow_ttft_ns = 500 * MS;
	o->slow_itl_ns = 100 * MS;
	o->hostname = "gpu-node-1";
}

/* Takes every queued span, encodes them as one request and parses it. */
static cJSON *encode_all(struct otlp *o, size_t *nspans)
{
	struct otlp_span *spans[64];
	size_t n = otlp_take(o, spans, 64), len = 0;
	char *buf = NULL;
	cJSON *j = NULL;

	*nspans = n;
	if (ASSERT_OK(otlp_encode(o, spans, n, &buf, &len), "encode")) {
		ASSERT_EQ(strlen(buf), len, "length");
		j = cJSON_Parse(buf);
		ASSERT_OK_PTR(j, "valid JSON");
	}
	free(buf);
	for (size_t i = 0; i < n; i++)
		otlp_span_free(spans[i]);
	return j;
}

static cJSON *spans_of_resource(cJSON *rs)
{
	cJSON *ss = cJSON_GetArrayItem(cJSON_GetObjectItem(rs, "scopeSpans"), 0);

	return cJSON_GetObjectItem(ss, "spans");
}

static cJSON *spans_of(cJSON *root)
{
	return spans_of_resource(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "resourceSpans"), 0));
}

/* The value object of attribute key, or NULL. */
static cJSON *attr(cJSON *obj, const char *key)
{
	cJSON *a;

	cJSON_ArrayForEach(a, cJSON_GetObjectItem(obj, "attributes"))
	{
		cJSON *k = cJSON_GetObjectItem(a, "key");

		if (cJSON_IsString(k) && !strcmp(k->valuestring, key))
			return cJSON_GetObjectItem(a, "value");
	}
	return NULL;
}

static const char *attr_s(cJSON *obj, const char *key)
{
	cJSON *v = cJSON_GetObjectItem(attr(obj, key), "stringValue");

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* intValue is a string; -999 when absent or not a string. */
static long long attr_i(cJSON *obj, const char *key)
{
	cJSON *v = cJSON_GetObjectItem(attr(obj, key), "intValue");

	return cJSON_IsString(v) ? strtoll(v->valuestring, NULL, 10) : -999;
}

static double attr_d(cJSON *obj, const char *key)
{
	cJSON *v = cJSON_GetObjectItem(attr(obj, key), "doubleValue");

	return cJSON_IsNumber(v) ? v->valuedouble : -999;
}

static const char *str(cJSON *obj, const char *key)
{
	cJSON *v = cJSON_GetObjectItem(obj, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A 64-bit time as the encoding wants it: a decimal string. */
static bool time_is(cJSON *obj, const char *key, uint64_t mono)
{
	char want[32];
	const char *got = str(obj, key);

	snprintf(want, sizeof(want), "%llu", (unsigned long long)(mono + OFFSET));
	return ASSERT_STREQ(got, want, key);
}

static bool is_hex(const char *s, size_t len)
{
	bool nonzero = false;

	if (!s || strlen(s) != len)
		return false;
	for (; *s; s++) {
		if (!isxdigit((unsigned char)*s) || isupper((unsigned char)*s))
			return false;
		nonzero |= *s != '0';
	}
	return nonzero;
}

static int count_events(cJSON *span, const char *name)
{
	cJSON *e;
	int n = 0;

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(span, "events"))
	{
		const char *nm = str(e, "name");

		n += nm && !strcmp(nm, name);
	}
	return n;
}

TEST(test_url)
{
	struct otlp_url u;
	char err[512];

	ASSERT_OK(otlp_parse_url("http://127.0.0.1:4318/v1/traces", &u, err, sizeof(err)), "ip");
	ASSERT_STREQ(u.host, "127.0.0.1", "host");
	ASSERT_EQ(u.port, 4318, "port");
	ASSERT_STREQ(u.path, "/v1/traces", "path");
	ASSERT_STREQ(u.hostport, "127.0.0.1:4318", "Host header");
	ASSERT_OK(otlp_parse_url("http://otel-collector", &u, err, sizeof(err)), "name");
	ASSERT_EQ(u.port, 80, "default port");
	ASSERT_STREQ(u.path, "/v1/traces", "default path");
	ASSERT_OK(otlp_parse_url("http://[::1]:4318/", &u, err, sizeof(err)), "ipv6");
	ASSERT_STREQ(u.host, "::1", "no brackets");
	ASSERT_STREQ(u.hostport, "[::1]:4318", "brackets in Host");
	ASSERT_STREQ(u.path, "/v1/traces", "'/' is the default path");
	ASSERT_OK(otlp_parse_url("HTTP://c:4318/otlp/v1/traces", &u, err, sizeof(err)), "case");
	ASSERT_STREQ(u.path, "/otlp/v1/traces", "own path");

	ASSERT_STREQ(u.full, "http://c:4318/otlp/v1/traces", "what is requested");
	ASSERT_FALSE(u.tls, "http is plain");
	ASSERT_OK(otlp_parse_url("https://collector.example", &u, err, sizeof(err)), "https");
	ASSERT_TRUE(u.tls, "https is TLS");
	ASSERT_EQ(u.port, 443, "https default port");
	ASSERT_STREQ(u.full, "https://collector.example/v1/traces", "https default path");
	ASSERT_EQ(otlp_parse_url("grpc://c:4317", &u, err, sizeof(err)), -EPROTONOSUPPORT, "grpc");
	const char *bad[] = { "c:4318",		 "http://",	      "http://:4318/",
			      "http://c:0/",	 "http://c:65536",    "http://c:43x8/",
			      "http://[::1/",	 "http://u@c/",	      "http://c/a b",
			      "http://c/a#frag", "http://[::1]x:80/", "https://",
			      "http://c%0a@x/",	 "http://a,b/",	      "http://c\\d/" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ASSERT_EQ(otlp_parse_url(bad[i], &u, err, sizeof(err)), -EINVAL, bad[i]);

	struct otlp o;
	struct otlp_opts opts;

	otlp_opts_default(&opts);
	opts.endpoint = "ftp://c:4318";
	ASSERT_EQ(otlp_init(&o, &opts), -EPROTONOSUPPORT, "init refuses another scheme");
	ASSERT_TRUE(strstr(o.error, "expected http[s]://") != NULL, "init says why");
	opts.endpoint = "http://127.0.0.1:4318";
	opts.sample_ratio = 1.5;
	ASSERT_EQ(otlp_init(&o, &opts), -EINVAL, "ratio above 1");
	otlp_close(&o); /* harmless after a failed init */
}

/* A slow first token: the full trace, an event per token, the GPU attribution as children. */
/* A collector's answer: Retry-After in seconds, what is not seconds, and other headers. */
TEST(test_retry_after)
{
	static const struct {
		const char *line;
		int v;
	} cases[] = {
		{ "Retry-After: 3\r\n", 3 },
		{ "retry-after:0", 0 },
		{ "RETRY-AFTER: \t 12 \r\n", 12 },
		{ "Retry-After: 99999999999\r\n", INT32_MAX },
		{ "Retry-After: Wed, 21 Oct 2026 07:28:00 GMT\r\n", -1 },
		{ "Retry-After: 3x\r\n", -1 },
		{ "Retry-After:\r\n", -1 },
		{ "Retry-After: -1\r\n", -1 },
		{ "Retry-Afte: 3\r\n", -2 },
		{ "Content-Length: 2\r\n", -2 },
		{ "", -2 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ASSERT_EQ(otlp_retry_after(cases[i].line, strlen(cases[i].line)), cases[i].v,
			  cases[i].line);
	/* Only n bytes are read: "Retry-After: 7" cut before its digit. */
	ASSERT_EQ(otlp_retry_after("Retry-After: 7", 13), -1, "length bounds the line");
}

TEST(test_anomalous)
{
	struct req_spec q = { .path = "/v1/chat/completions?api-version=2024",
			      .model = "llama-3-8b",
			      .status = 200,
			      .outcome = OUTCOME_OK,
			      .ttft = 800 * MS,
			      .gap = 20 * MS,
			      .ntokens = 5,
			      .prompt_tokens = 12,
			      .completion_tokens = 5 };
	struct gpu_attribution ga = { 100 * MS,	 200 * MS, 85 * MS, 60 * MS, 20 * MS,
				      "by time", -1,	   -1,	    NULL,    .has_steps = false };
	struct otlp_opts opts;
	struct otlp_stats st;
	struct otlp o;
	struct sink sk;
	size_t n;
	cJSON *j, *spans, *root, *e, *res;
	char rid[17];

	opts_test(&opts);
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	feed(&sk, &q, &ga);
	otlp_get_stats(&o, &st);
	ASSERT_EQ(st.anomalous, 1, "anomalous");
	j = encode_all(&o, &n);
	ASSERT_EQ(n, 1, "one trace queued");
	if (!j)
		goto out;

	res = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "resourceSpans"), 0),
				  "resource");
	ASSERT_STREQ(attr_s(res, "service.name"), "tokenscope", "service.name");
	ASSERT_STREQ(attr_s(res, "host.name"), "gpu-node-1", "host.name");
	ASSERT_STREQ(str(cJSON_GetObjectItem(
			     cJSON_GetArrayItem(
				 cJSON_GetObjectItem(
				     cJSON_GetArrayItem(cJSON_GetObjectItem(j, "resourceSpans"), 0),
				     "scopeSpans"),
				 0),
			     "scope"),
			 "name"),
		     "tokenscope", "scope");

	spans = spans_of(j);
	if (!ASSERT_EQ(cJSON_GetArraySize(spans), 4, "request span and 3 children"))
		goto out;
	root = cJSON_GetArrayItem(spans, 0);
	ASSERT_TRUE(is_hex(str(root, "traceId"), 32), "traceId: 32 hex digits");
	ASSERT_TRUE(is_hex(str(root, "spanId"), 16), "spanId: 16 hex digits");
	ASSERT_TRUE(!cJSON_GetObjectItem(root, "parentSpanId"), "a root");
	ASSERT_STREQ(str(root, "name"), "chat llama-3-8b", "name: {operation} {model}");
	ASSERT_EQ(cJSON_GetObjectItem(root, "kind")->valueint, 2, "SPAN_KIND_SERVER");
	time_is(root, "startTimeUnixNano", T0);
	time_is(root, "endTimeUnixNano", T0 + 800 * MS + 4 * 20 * MS + 5 * MS);

	ASSERT_STREQ(attr_s(root, "gen_ai.operation.name"), "chat", "operation");
	ASSERT_STREQ(attr_s(root, "gen_ai.request.model"), "llama-3-8b", "model");
	ASSERT_TRUE(!attr(root, "gen_ai.response.model"), "response model: not known");
	ASSERT_EQ(attr_i(root, "gen_ai.usage.input_tokens"), 12, "input tokens");
	ASSERT_EQ(attr_i(root, "gen_ai.usage.output_tokens"), 5, "output tokens");
	ASSERT_EQ(attr_i(root, "gen_ai.request.max_tokens"), 64, "max tokens");
	ASSERT_NEAR(attr_d(root, "gen_ai.server.time_to_first_token"), 0.8, 1e-12, "ttft s");
	ASSERT_NEAR(attr_d(root, "gen_ai.server.time_per_output_token"), 0.02, 1e-12, "tpot s");
	ASSERT_STREQ(attr_s(root, "http.request.method"), "POST", "method");
	ASSERT_STREQ(attr_s(root, "url.path"), "/v1/chat/completions", "path without query");
	ASSERT_EQ(attr_i(root, "http.response.status_code"), 200, "status");
	ASSERT_STREQ(attr_s(root, "server.address"), "127.0.0.1", "server.address");
	ASSERT_EQ(attr_i(root, "server.port"), 8000, "server.port");
	ASSERT_STREQ(attr_s(root, "client.address"), "10.0.0.2", "client.address");
	ASSERT_EQ(attr_i(root, "client.port"), 5555, "client.port");
	ASSERT_STREQ(attr_s(root, "tokenscope.outcome"), "ok", "outcome");
	ASSERT_STREQ(attr_s(root, "tokenscope.conn"), "127.0.0.1:8000<-10.0.0.2:5555#7", "conn");
	ASSERT_STREQ(attr_s(root, "tokenscope.anomaly"), "slow_ttft", "why in full");
	ASSERT_EQ(attr_i(root, "tokenscope.pid"), 42, "pid");

	ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(root, "events")), 7, "events");
	ASSERT_EQ(count_events(root, "token"), 5, "one event per token");
	ASSERT_EQ(count_events(root, "first_token"), 1, "first_token");
	ASSERT_EQ(count_events(root, "last_token"), 1, "last_token");
	int idx = 0;
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "events"))
	{
		const char *nm = str(e, "name");

		if (nm && !strcmp(nm, "first_token"))
			time_is(e, "timeUnixNano", T0 + 800 * MS);
		if (nm && !strcmp(nm, "last_token"))
			time_is(e, "timeUnixNano", T0 + 880 * MS);
		if (!nm || strcmp(nm, "token"))
			continue;
		ASSERT_EQ(attr_i(e, "index"), idx, "token index");
		time_is(e, "timeUnixNano", T0 + 800 * MS + idx * 20 * MS);
		idx++;
	}
	ASSERT_TRUE(cJSON_IsObject(cJSON_GetObjectItem(root, "status")), "status");
	ASSERT_TRUE(!cJSON_GetObjectItem(cJSON_GetObjectItem(root, "status"), "code"),
		    "ok: status UNSET");

	snprintf(rid, sizeof(rid), "%s", str(root, "spanId"));
	const char *names[] = { "queue", "prefill", "decode" };
	const uint64_t start[] = { T0, T0 + 100 * MS, T0 + 800 * MS };
	const uint64_t end[] = { T0 + 100 * MS, T0 + 300 * MS, T0 + 885 * MS };
	for (int i = 0; i < 3; i++) {
		cJSON *c = cJSON_GetArrayItem(spans, i + 1);

		ASSERT_STREQ(str(c, "name"), names[i], "child name");
		ASSERT_STREQ(str(c, "traceId"), str(root, "traceId"), "same trace");
		ASSERT_STREQ(str(c, "parentSpanId"), rid, "parentSpanId");
		ASSERT_TRUE(is_hex(str(c, "spanId"), 16), "child spanId");
		ASSERT_TRUE(strcmp(str(c, "spanId"), rid) != 0, "own span id");
		ASSERT_EQ(cJSON_GetObjectItem(c, "kind")->valueint, 1, "SPAN_KIND_INTERNAL");
		time_is(c, "startTimeUnixNano", start[i]);
		time_is(c, "endTimeUnixNano", end[i]);
	}
out:
	cJSON_Delete(j);
	otlp_close(&o);
}

/* A preempted request: its count and time out as attributes, each time out of the batch and
 * back as events at their times; none of it for a request never preempted. */
/* A request that missed an objective is an anomaly, exported in full, its verdicts as
 * attributes; one that met its objectives is not. */
TEST(test_slo_attributes)
{
	struct slo_rules rules = { 0 };
	char msg[256];
	struct req_spec q = { .model = "m", .status = 200, .outcome = OUTCOME_OK, .ttft = 50 * MS,
			      .gap = 5 * MS, .ntokens = 4, .prompt_tokens = -1,
			      .completion_tokens = -1, .slo = &rules };
	struct otlp_opts opts;
	struct otlp_stats st;
	struct otlp o;
	struct sink sk;
	size_t n;
	cJSON *j, *span;

	struct req_label_set set = { 0 };
	struct req_labels lv = { .spec = &set };

	req_labels_parse(&set, "tenant=header:X-Tenant-Id", msg, sizeof(msg));
	req_labels_parse(&set, "user=body:user", msg, sizeof(msg));
	lv.set[0] = true;
	snprintf(lv.v[0], sizeof(lv.v[0]), "acme");
	q.labels = &lv;
	slo_parse(&rules, "ttft<=10ms,tpot<=20ms", msg, sizeof(msg));
	opts_test(&opts);
	opts.sample_ratio = 0;
	opts.warm_up = 0;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	feed(&sk, &q, NULL);
	q.ttft = 5 * MS;
	feed(&sk, &q, NULL);
	otlp_get_stats(&o, &st);
	ASSERT_EQ(st.anomalous, 1, "the miss alone is an anomaly");
	j = encode_all(&o, &n);
	if (ASSERT_EQ(n, 1, "one span exported") && j) {
		span = cJSON_GetArrayItem(spans_of(j), 0);
		ASSERT_STREQ(attr_s(span, "tokenscope.anomaly"), "slo_missed", "why");
		ASSERT_STREQ(attr_s(span, "tokenscope.slo.result"), "missed", "overall");
		ASSERT_STREQ(attr_s(span, "tokenscope.slo.ttft.result"), "missed", "ttft");
		ASSERT_STREQ(attr_s(span, "tokenscope.slo.tpot.result"), "met", "tpot");
		ASSERT_STREQ(attr_s(span, "tokenscope.slo.ttft.from"), "flag", "from");
		ASSERT_NEAR(attr_d(span, "tokenscope.slo.ttft.limit"), 0.01, 1e-12, "limit in s");
		ASSERT_TRUE(attr(span, "tokenscope.slo.e2e.result") == NULL, "no e2e objective");
		ASSERT_EQ(count_events(span, "token"), 4, "in full");
		ASSERT_STREQ(attr_s(span, "tokenscope.label.tenant"), "acme", "a label");
		ASSERT_TRUE(attr(span, "tokenscope.label.user") == NULL, "none where it had none");
	}
	cJSON_Delete(j);
	otlp_close(&o);
}

TEST(test_preempted_events)
{
	struct req_spec q = { .path = "/v1/chat/completions",
			      .model = "llama-3-8b",
			      .status = 200,
			      .outcome = OUTCOME_OK,
			      .ttft = 800 * MS,
			      .gap = 20 * MS,
			      .ntokens = 5,
			      .prompt_tokens = 12,
			      .completion_tokens = 5 };
	static const uint64_t from[] = { T0 + 820 * MS, T0 + 850 * MS };
	static const uint64_t to[] = { T0 + 835 * MS, T0 + 870 * MS };
	struct gpu_attribution ga = { .queue_ns = -1,
				      .prefill_ns = -1,
				      .decode_ns = -1,
				      .gpu_ns = -1,
				      .host_ns = -1,
				      .how = "by time",
				      .has_steps = true,
				      .preemptions = 2,
				      .preempted_ns = 35 * MS,
				      .preempt_from = from,
				      .preempt_to = to,
				      .npreempt_times = 2 };
	struct stall_report st = { .threshold_ns = 50 * MS, .n = 3, .nkept = 1 };
	struct otlp_opts opts;
	struct otlp o;
	struct sink sk;
	size_t n;
	cJSON *j, *root, *e;
	int k = 0;

	/* and a slow gap blamed on another request's prefill (two more not listed) */
	st.v[0] = (struct stall){ .token = 2, .from_ns = T0 + 840 * MS, .gap_ns = 90 * MS,
				  .cause_ns = 80 * MS, .cause = STALL_PREFILL, .nby = 1 };
	snprintf(st.v[0].by[0].conn, sizeof(st.v[0].by[0].conn), "10.0.0.1:8000<-10.0.0.2:5000#3");
	ga.stalls = &st;
	opts_test(&opts);
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	feed(&sk, &q, &ga);
	ga.preemptions = 0;
	ga.preempted_ns = 0;
	ga.stalls = NULL;
	feed(&sk, &q, &ga);
	j = encode_all(&o, &n);
	if (!ASSERT_EQ(n, 2, "two traces") || !j)
		goto out;
	root = cJSON_GetArrayItem(spans_of(j), 0);
	ASSERT_EQ(attr_i(root, "tokenscope.preemptions"), 2, "preemptions");
	ASSERT_EQ(attr_i(root, "tokenscope.preempted_ns"), 35 * MS, "time out of the batch");
	ASSERT_EQ(count_events(root, "gen_ai.preempted"), 2, "out twice");
	ASSERT_EQ(count_events(root, "gen_ai.resumed"), 2, "back twice");
	ASSERT_EQ(attr_i(root, "tokenscope.stalls"), 3, "every stall counted");
	ASSERT_EQ(count_events(root, "gen_ai.stall"), 1, "the listed one an event");
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "events"))
	{
		const char *nm = str(e, "name");

		if (nm && !strcmp(nm, "gen_ai.stall")) {
			time_is(e, "timeUnixNano", T0 + 840 * MS);
			ASSERT_STREQ(attr_s(e, "tokenscope.stall.cause"), "prefill", "its cause");
			ASSERT_EQ(attr_i(e, "tokenscope.stall.gap_ns"), 90 * MS, "its gap");
			ASSERT_STREQ(attr_s(e, "tokenscope.stall.by"),
				     "10.0.0.1:8000<-10.0.0.2:5000#3#0", "who: conn#seq");
		}
		if (nm && !strcmp(nm, "gen_ai.preempted"))
			time_is(e, "timeUnixNano", from[k]);
		if (nm && !strcmp(nm, "gen_ai.resumed"))
			time_is(e, "timeUnixNano", to[k++]);
	}
	/* The second trace's span (no children: queue and decode unknown). */
	if (!ASSERT_EQ(cJSON_GetArraySize(spans_of(j)), 2, "a span each"))
		goto out;
	root = cJSON_GetArrayItem(spans_of(j), 1);
	ASSERT_TRUE(!attr(root, "tokenscope.preemptions"), "never preempted: no attribute");
	ASSERT_TRUE(!attr(root, "tokenscope.stalls"), "no stall: no attribute");
	ASSERT_EQ(count_events(root, "gen_ai.preempted"), 0, "and no event");
out:
	cJSON_Delete(j);
	otlp_close(&o);
}

/* A normal request sampled in: a summary span, no token events, no children unknown. */
TEST(test_summary)
{
	struct req_spec q = { .model = "m",
			      .status = 200,
			      .outcome = OUTCOME_OK,
			      .ttft = 100 * MS,
			      .gap = 20 * MS,
			      .ntokens = 30,
			      .prompt_tokens = -1,
			      .completion_tokens = -1 };
	struct otlp_opts opts;
	struct otlp o;
	struct sink sk;
	size_t n;
	cJSON *j, *root;

	opts_test(&opts);
	opts.sample_ratio = 1;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	feed(&sk, &q, NULL);
	j = encode_all(&o, &n);
	root = cJSON_GetArrayItem(spans_of(j), 0);
	ASSERT_EQ(cJSON_GetArraySize(spans_of(j)), 1, "no children when not attributed");
	ASSERT_EQ(count_events(root, "token"), 0, "no token events");
	ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(root, "events")), 2, "first and last");
	ASSERT_TRUE(!attr(root, "tokenscope.anomaly"), "not anomalous");
	ASSERT_TRUE(!attr(root, "gen_ai.usage.input_tokens"), "input tokens unknown");
	ASSERT_EQ(attr_i(root, "gen_ai.usage.output_tokens"), 30, "tokens from frames");
	ASSERT_STREQ(attr_s(root, "tokenscope.tokens_from"), "frames", "tokens_from");
	ASSERT_STREQ(attr_s(root, "server.address"), "127.0.0.1", "server.address");
	cJSON_Delete(j);
	otlp_close(&o);
}

/* Failures: ERROR with the outcome; a gap over slow_itl; a non-GenAI path; IPv6 and Unix. */
TEST(test_errors_and_names)
{
	struct req_spec aborted = { .model = "m",
				    .conn = "[::1]:8000<-[::1]:40000#3",
				    .status = 200,
				    .outcome = OUTCOME_ABORTED,
				    .ttft = 50 * MS,
				    .gap = 10 * MS,
				    .ntokens = 3,
				    .prompt_tokens = -1,
				    .completion_tokens = -1 };
	struct req_spec http500 = { .path = "/v1/completions",
				    .conn = "unix:fd9#4",
				    .status = 500,
				    .outcome = OUTCOME_HTTP_ERROR,
				    .prompt_tokens = -1,
				    .completion_tokens = -1 };
	struct req_spec stall = { .model = "m",
				  .status = 200,
				  .outcome = OUTCOME_OK,
				  .ttft = 50 * MS,
				  .gap = 150 * MS,
				  .ntokens = 3,
				  .prompt_tokens = -1,
				  .completion_tokens = -1 };
	struct req_spec health = { .method = "GET",
				   .path = "/health?verbose=1",
				   .status = 200,
				   .outcome = OUTCOME_OK,
				   .prompt_tokens = -1,
				   .completion_tokens = -1 };
	struct otlp_opts opts;
	struct otlp o;
	struct sink sk;
	size_t n;
	cJSON *j, *s, *status;

	opts_test(&opts);
	opts.sample_ratio = 1;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	feed(&sk, &aborted, NULL);
	feed(&sk, &http500, NULL);
	feed(&sk, &stall, NULL);
	feed(&sk, &health, NULL);
	j = encode_all(&o, &n);
	if (!ASSERT_EQ(cJSON_GetArraySize(spans_of(j)), 4, "four spans"))
		goto out;

	s = cJSON_GetArrayItem(spans_of(j), 0);
	status = cJSON_GetObjectItem(s, "status");
	ASSERT_EQ(cJSON_GetObjectItem(status, "code")->valueint, 2, "STATUS_CODE_ERROR");
	ASSERT_STREQ(str(status, "message"), "aborted", "message: the outcome");
	ASSERT_EQ(count_events(s, "token"), 3, "failures in full");
	ASSERT_STREQ(attr_s(s, "tokenscope.anomaly"), "outcome", "why");
	ASSERT_STREQ(attr_s(s, "server.address"), "::1", "IPv6 server.address");
	ASSERT_EQ(attr_i(s, "server.port"), 8000, "IPv6 server.port");

	s = cJSON_GetArrayItem(spans_of(j), 1);
	ASSERT_STREQ(str(s, "name"), "text_completion", "no model: the operation alone");
	ASSERT_STREQ(str(cJSON_GetObjectItem(s, "status"), "message"), "http_error", "http_error");
	ASSERT_EQ(attr_i(s, "http.response.status_code"), 500, "500");
	ASSERT_TRUE(!attr(s, "gen_ai.server.time_to_first_token"), "no TTFT without tokens");
	ASSERT_TRUE(!attr(s, "server.address"), "no address on a Unix socket");
	ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(s, "events")), 0, "no events");

	s = cJSON_GetArrayItem(spans_of(j), 2);
	ASSERT_STREQ(attr_s(s, "tokenscope.anomaly"), "slow_itl", "a gap over slow_itl");
	ASSERT_EQ(count_events(s, "token"), 3, "in full");
	ASSERT_NEAR(attr_d(s, "tokenscope.itl.max"), 0.15, 1e-12, "itl max");

	s = cJSON_GetArrayItem(spans_of(j), 3);
	ASSERT_STREQ(str(s, "name"), "GET /health", "not GenAI: {method} {path}");
	ASSERT_TRUE(!attr(s, "gen_ai.operation.name"), "no operation");
	ASSERT_STREQ(attr_s(s, "url.path"), "/health", "query left out");
out:
	cJSON_Delete(j);
	otlp_close(&o);
}

/* A request the traced process made to its upstream: a CLIENT span, server.* the upstream's,
 * network.local.* its own side, its TTFT as it saw it under tokenscope's own name. */
TEST(test_client_span)
{
	struct req_spec up = { .model = "m",
			       .conn = "127.0.0.1:5000->10.0.0.9:8000#9",
			       .status = 200,
			       .outcome = OUTCOME_OK,
			       .ttft = 50 * MS,
			       .gap = 10 * MS,
			       .ntokens = 3,
			       .prompt_tokens = -1,
			       .completion_tokens = -1,
			       .client = true };
	struct otlp_opts opts;
	struct otlp o;
	struct sink sk;
	size_t n;
	cJSON *j, *s;

	opts_test(&opts);
	opts.sample_ratio = 1;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	ASSERT_TRUE(sk.clients, "the OTLP sink takes client requests");
	feed(&sk, &up, NULL);
	j = encode_all(&o, &n);
	if (!ASSERT_EQ(cJSON_GetArraySize(spans_of(j)), 1, "one span"))
		goto out;
	s = cJSON_GetArrayItem(spans_of(j), 0);
	ASSERT_EQ(cJSON_GetObjectItem(s, "kind")->valueint, 3, "SPAN_KIND_CLIENT");
	ASSERT_STREQ(attr_s(s, "server.address"), "10.0.0.9", "server.address: the upstream");
	ASSERT_EQ(attr_i(s, "server.port"), 8000, "server.port");
	ASSERT_EQ(attr_i(s, "network.local.port"), 5000, "its own side");
	/* Its own side is the client of the connection, as the upstream's span names it. */
	ASSERT_STREQ(attr_s(s, "client.address"), "127.0.0.1", "client.address: its own side");
	ASSERT_EQ(attr_i(s, "client.port"), 5000, "client.port");
	ASSERT_NEAR(attr_d(s, "tokenscope.client.time_to_first_token"), 0.05, 1e-12, "its TTFT");
	ASSERT_TRUE(!attr(s, "gen_ai.server.time_to_first_token"), "not the server's");
out:
	cJSON_Delete(j);
	otlp_close(&o);
}

TEST(test_token_event_cap)
{
	struct req_spec q = { .status = 200,
			      .outcome = OUTCOME_STREAM_ERROR,
			      .ttft = 10 * MS,
			      .gap = MS,
			      .ntokens = 5,
			      .prompt_tokens = -1,
			      .completion_tokens = -1 };
	struct otlp_opts opts;
	struct otlp o;
	struct sink sk;
	size_t n;
	cJSON *j, *s;

	opts_test(&opts);
	opts.max_token_events = 3;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	feed(&sk, &q, NULL);
	j = encode_all(&o, &n);
	s = cJSON_GetArrayItem(spans_of(j), 0);
	ASSERT_EQ(count_events(s, "token"), 3, "capped");
	ASSERT_EQ(cJSON_GetObjectItem(s, "droppedEventsCount")->valueint, 2, "droppedEventsCount");
	cJSON_Delete(j);
	otlp_close(&o);
}

/* Runs n normal requests (and one anomalous) at ratio; returns how many were queued. */
/* Normal requests (and one slow one, last) through a sink of that ratio and warm-up: the
 * normal ones kept. ids_agree: each kept by the ratio has an id that passes the sampler;
 * kept_ok: each says why it was kept (tokenscope.kept), warm-up ones first. */
static size_t sample_run_w(double ratio, uint32_t warm_up, uint64_t seed, size_t n,
			   struct otlp_stats *st, bool *ids_agree, bool *kept_ok)
{
	struct req_spec normal = { .model = "m",
				   .status = 200,
				   .outcome = OUTCOME_OK,
				   .ttft = 100 * MS,
				   .gap = 10 * MS,
				   .ntokens = 4,
				   .prompt_tokens = -1,
				   .completion_tokens = -1 };
	struct req_spec slow = normal;
	struct otlp_span *spans[64];
	struct otlp_opts opts;
	struct otlp o;
	struct sink sk;
	size_t kept = 0, k;

	slow.ttft = 900 * MS;
	feed_seq = 0;
	opts_test(&opts);
	opts.sample_ratio = ratio;
	opts.warm_up = warm_up;
	opts.seed = seed;
	opts.queue_max = 2048;
	if (otlp_init(&o, &opts))
		return 0;
	sk = otlp_sink(&o);
	for (size_t i = 0; i < n; i++)
		feed(&sk, &normal, NULL);
	feed(&sk, &slow, NULL);
	*ids_agree = true;
	*kept_ok = true;
	/* The decision is the trace id's: every queued normal span's id passes the sampler. */
	while ((k = otlp_take(&o, spans, 64))) {
		for (size_t i = 0; i < k; i++) {
			char *buf = NULL;
			size_t len;
			cJSON *j, *s;
			uint8_t id[16];
			const char *hex;

			otlp_encode(&o, &spans[i], 1, &buf, &len);
			j = cJSON_Parse(buf);
			s = cJSON_GetArrayItem(spans_of(j), 0);
			hex = str(s, "traceId");
			for (int b = 0; hex && b < 16; b++)
				sscanf(hex + 2 * b, "%2hhx", &id[b]);
			const char *why = attr_s(s, "tokenscope.kept");
			bool anomalous = attr(s, "tokenscope.anomaly") != NULL;
			const char *want = anomalous	    ? "slow_ttft"
					   : kept < warm_up ? "warm_up"
							    : "random";

			if (!anomalous && kept >= warm_up && (!hex || !otlp_sampled(id, ratio)))
				*ids_agree = false;
			if (!why || strcmp(why, want))
				*kept_ok = false;
			kept += !anomalous;
			cJSON_Delete(j);
			free(buf);
			otlp_span_free(spans[i]);
		}
	}
	otlp_get_stats(&o, st);
	otlp_close(&o);
	return kept;
}

static size_t sample_run(double ratio, uint64_t seed, size_t n, struct otlp_stats *st,
			 bool *ids_agree)
{
	bool kept_ok;
	size_t kept = sample_run_w(ratio, 0, seed, n, st, ids_agree, &kept_ok);

	ASSERT_TRUE(kept_ok, "each span says why it was kept");
	return kept;
}

/* The first requests whatever the ratio, then the ratio's. */
TEST(test_sampling_warm_up)
{
	struct otlp_stats st;
	bool agree, kept_ok;
	size_t kept;

	kept = sample_run_w(0, 20, 5, 100, &st, &agree, &kept_ok);
	ASSERT_EQ(kept, 20, "ratio 0: the first 20 only");
	ASSERT_EQ(st.warm_up, 20, "counted as warm-up");
	ASSERT_EQ(st.sampled_out, 80, "the rest sampled out");
	ASSERT_EQ(st.anomalous, 1, "the slow one as ever");
	ASSERT_TRUE(kept_ok, "warm_up on the first 20, slow_ttft on the slow one");
	kept = sample_run_w(0, 20, 5, 7, &st, &agree, &kept_ok);
	ASSERT_EQ(kept, 7, "fewer than the warm-up: all of them");
	ASSERT_EQ(st.sampled_out, 0, "none sampled out");
	kept = sample_run_w(1, 3, 5, 10, &st, &agree, &kept_ok);
	ASSERT_EQ(kept, 10, "ratio 1: all");
	ASSERT_EQ(st.warm_up, 3, "3 of them warm-up");
	ASSERT_TRUE(kept_ok && agree, "warm_up on 3, random on 7, ids sampled");
}

TEST(test_sampling)
{
	struct otlp_stats st;
	bool agree;
	size_t kept, again;

	kept = sample_run(0.5, 99, 1000, &st, &agree);
	printf("  ratio 0.5: %zu of 1000 normal requests kept\n", kept);
	ASSERT_TRUE(kept >= 430 && kept <= 570, "about half");
	ASSERT_EQ(st.sampled_out, 1000 - kept, "sampled_out counts the rest");
	ASSERT_EQ(st.anomalous, 1, "the slow one, always");
	ASSERT_TRUE(agree, "kept ids pass otlp_sampled");
	again = sample_run(0.5, 99, 1000, &st, &agree);
	ASSERT_EQ(again, kept, "reproducible for a seed");

	kept = sample_run(0, 5, 1000, &st, &agree);
	ASSERT_EQ(kept, 0, "ratio 0: none");
	ASSERT_EQ(st.sampled_out, 1000, "all sampled out");
	ASSERT_EQ(st.anomalous, 1, "anomalous even at 0");

	kept = sample_run(1, 5, 200, &st, &agree);
	ASSERT_EQ(kept, 200, "ratio 1: all");
	ASSERT_EQ(st.sampled_out, 0, "none sampled out");

	/* The rule itself: the low 56 bits against (1 - ratio) * 2^56. */
	uint8_t id[16] = { 0 };
	ASSERT_FALSE(otlp_sampled(id, 0.5), "randomness 0: only at ratio 1");
	ASSERT_TRUE(otlp_sampled(id, 1), "ratio 1 keeps all");
	memset(id + 9, 0xff, 7);
	ASSERT_TRUE(otlp_sampled(id, 0.001), "max randomness: any ratio > 0");
	ASSERT_FALSE(otlp_sampled(id, 0), "ratio 0 keeps none");
	memset(id, 0, sizeof(id));
	id[9] = 0x80; /* exactly half */
	ASSERT_TRUE(otlp_sampled(id, 0.5), "half at 0.5");
	id[9] = 0x7f;
	ASSERT_FALSE(otlp_sampled(id, 0.5), "just under half");
	memset(id, 0xff, 9); /* the high bits do not count */
	ASSERT_FALSE(otlp_sampled(id, 0.5), "high bits ignored");
}

TEST(test_queue_full)
{
	struct req_spec q = { .status = 200,
			      .outcome = OUTCOME_OK,
			      .ttft = 10 * MS,
			      .gap = MS,
			      .ntokens = 2,
			      .prompt_tokens = -1,
			      .completion_tokens = -1 };
	struct otlp_span *spans[64];
	struct otlp_opts opts;
	struct otlp_stats st;
	struct otlp o;
	struct sink sk;
	size_t n;

	opts_test(&opts);
	opts.sample_ratio = 1;
	opts.queue_max = 10;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	for (int i = 0; i < 25; i++)
		feed(&sk, &q, NULL);
	otlp_get_stats(&o, &st);
	ASSERT_EQ(st.dropped, 15, "dropped when full");
	n = otlp_take(&o, spans, 4);
	ASSERT_EQ(n, 4, "take");
	for (size_t i = 0; i < n; i++)
		otlp_span_free(spans[i]);
	feed(&sk, &q, NULL);
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	ASSERT_EQ(st.dropped, 15, "room again after a take");
	ASSERT_EQ(st.unsent, 7, "left at close: unsent");
}

/* A recording's clocks and host replace the ones given at init: every time is the kernel time
 * plus the new offset, exactly, and host.name is the recording's. */
TEST(test_set_source)
{
	/* Recorded a day and 123 ns before this process's offset would say. */
	const int64_t recorded = OFFSET - 86400000000123ll;
	struct req_spec q = { .status = 200,
			      .outcome = OUTCOME_OK,
			      .ttft = 600 * MS, /* slow: token events too */
			      .gap = 7 * MS,
			      .ntokens = 3,
			      .prompt_tokens = -1,
			      .completion_tokens = -1 };
	struct otlp_opts opts;
	struct otlp o;
	struct sink sk;
	cJSON *j, *span, *e, *res;
	char want[32];
	size_t n;
	int i = 0;

	opts_test(&opts);
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	otlp_set_source(&o, recorded, "recorded-host");
	sk = otlp_sink(&o);
	feed(&sk, &q, NULL);
	j = encode_all(&o, &n);
	ASSERT_EQ(n, 1, "one span");
	span = cJSON_GetArrayItem(spans_of(j), 0);
	snprintf(want, sizeof(want), "%llu", (unsigned long long)(T0 + recorded));
	ASSERT_STREQ(str(span, "startTimeUnixNano"), want, "start: arrival + recorded offset");
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(span, "events"))
	{
		const char *nm = str(e, "name");

		if (!nm || strcmp(nm, "token"))
			continue;
		snprintf(want, sizeof(want), "%llu",
			 (unsigned long long)(T0 + q.ttft + i++ * q.gap + recorded));
		ASSERT_STREQ(str(e, "timeUnixNano"), want, "token event: its time + offset");
	}
	ASSERT_EQ(i, 3, "token events");
	res = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "resourceSpans"), 0),
				  "resource");
	ASSERT_STREQ(attr_s(res, "host.name"), "recorded-host", "host.name of the recording");
	cJSON_Delete(j);
	otlp_set_source(&o, recorded, "");
	feed(&sk, &q, NULL);
	j = encode_all(&o, &n);
	res = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "resourceSpans"), 0),
				  "resource");
	ASSERT_TRUE(attr(res, "host.name") == NULL, "no host: not sent");
	cJSON_Delete(j);
	otlp_close(&o);
}

/* Backpressure waits for a sender; without one (no endpoint) a full queue still drops rather
 * than waiting for ever. */
TEST(test_backpressure_no_sender)
{
	struct req_spec q = { .status = 200,
			      .outcome = OUTCOME_OK,
			      .ttft = 10 * MS,
			      .gap = MS,
			      .ntokens = 2,
			      .prompt_tokens = -1,
			      .completion_tokens = -1 };
	struct otlp_opts opts;
	struct otlp_stats st;
	struct otlp o;
	struct sink sk;

	opts_test(&opts);
	opts.sample_ratio = 1;
	opts.queue_max = 10;
	opts.backpressure = true;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	for (int i = 0; i < 25; i++)
		feed(&sk, &q, NULL);
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	ASSERT_EQ(st.dropped, 15, "dropped when full");
	ASSERT_EQ(st.unsent, 10, "the rest unsent");
}

/* file:PATH: each batch one line of the file, the export request as it would be POSTed. */
TEST(test_file_export)
{
	struct req_spec q = { .status = 200,
			      .outcome = OUTCOME_OK,
			      .ttft = 10 * MS,
			      .gap = MS,
			      .ntokens = 3,
			      .prompt_tokens = -1,
			      .completion_tokens = -1 };
	char path[64] = "/tmp/ts-otlp-XXXXXX", endpoint[80], err[128], line[65536];
	struct otlp_opts opts;
	struct otlp_stats st;
	struct otlp_url u;
	struct otlp o;
	struct sink sk;
	int fd = mkstemp(path), lines = 0, spans = 0;
	FILE *f;

	if (!ASSERT_TRUE(fd >= 0, "mkstemp"))
		return;
	close(fd);
	ASSERT_OK(otlp_parse_url("file:/tmp/x.jsonl", &u, err, sizeof(err)), "file:PATH");
	ASSERT_TRUE(u.file && !strcmp(u.path, "/tmp/x.jsonl"), "its path");
	ASSERT_EQ(otlp_parse_url("file:", &u, err, sizeof(err)), -EINVAL, "no path");
	snprintf(endpoint, sizeof(endpoint), "file:%s", path);
	opts_test(&opts);
	opts.endpoint = endpoint;
	opts.sample_ratio = 1;
	opts.batch_max = 4;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		goto out;
	sk = otlp_sink(&o);
	for (int i = 0; i < 10; i++)
		feed(&sk, &q, NULL);
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	ASSERT_EQ(st.exported, 10, "all written");
	ASSERT_EQ(st.failed + st.unsent + st.dropped, 0, "none lost");
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		cJSON *j = cJSON_Parse(line), *rs, *ss, *sp;

		lines++;
		ASSERT_TRUE(line[strlen(line) - 1] == '\n', "a whole line");
		rs = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "resourceSpans"), 0);
		ss = cJSON_GetArrayItem(cJSON_GetObjectItem(rs, "scopeSpans"), 0);
		sp = cJSON_GetObjectItem(ss, "spans");
		ASSERT_TRUE(cJSON_IsArray(sp), "an export request");
		spans += cJSON_GetArraySize(sp);
		cJSON_Delete(j);
	}
	if (f)
		fclose(f);
	ASSERT_TRUE(lines >= 3 && lines <= 10, "a line a batch of at most 4");
	ASSERT_EQ(spans, 10, "every request span");
	opts.endpoint = "file:/nonexistent-dir/x.jsonl";
	ASSERT_EQ(otlp_init(&o, &opts), -ENOENT, "a file that cannot be made");
	ASSERT_TRUE(strstr(o.error, "cannot write") != NULL, "says why");
out:
	unlink(path);
}

/* A request of the traced proxy with the traceparent tp ("" none); pid 42. */
static struct request *traced(uint64_t conn_id, uint32_t seq, bool client, const char *tp)
{
	struct request *r = request_new(42, conn_id, seq, client ? "a->b#1" : "a<-b#1");

	r->client = client;
	if (tp[0])
		tracectx_field(&r->trace, "traceparent", 11, tp, strlen(tp));
	tracectx_finish(&r->trace);
	return r;
}

/* The served request s and its upstream call c, paired as proxy.c pairs them. */
static void pair(struct request *s, struct request *c)
{
	s->peer = (struct request_peer){
		.set = true, .conn_id = c->conn_id, .seq = c->seq, .tp = c->trace.tp
	};
	c->peer = (struct request_peer){
		.set = true, .conn_id = s->conn_id, .seq = s->seq, .tp = s->trace.tp
	};
}

static bool is_zero(const uint8_t *id, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (id[i])
			return false;
	return true;
}

TEST(test_trace_context_ids)
{
	static const char tp[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
	static const char tp2[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01";
	static const char other[] = "00-99999999999999999999999999999999-2222222222222222-01";
	const uint64_t key = 77;
	struct request *s = traced(1, 0, false, tp), *c = traced(2, 0, true, tp);
	struct otlp_ids si, ci, again;

	/* nginx forwards the traceparent unchanged: the upstream call takes its parent-id, and
	 * the served span, whose parent that would be, is the root here: no cycle. */
	pair(s, c);
	otlp_span_ids(key, s, &si);
	otlp_span_ids(key, c, &ci);
	ASSERT_TRUE(request_trace_forwarded(s) && si.forwarded, "forwarded unchanged");
	ASSERT_TRUE(!memcmp(si.trace_id, s->trace.tp.trace_id, 16), "served: the caller's trace");
	ASSERT_TRUE(is_zero(si.parent_id, 8), "served: no parent (it would be its child's id)");
	ASSERT_TRUE(!memcmp(ci.trace_id, si.trace_id, 16), "client: the same trace");
	ASSERT_TRUE(!memcmp(ci.span_id, c->trace.tp.parent_id, 8), "client: the parent-id's span");
	ASSERT_TRUE(!memcmp(ci.parent_id, si.span_id, 8), "client: child of the served span");
	ASSERT_TRUE(memcmp(si.span_id, ci.span_id, 8) != 0, "two spans");
	otlp_span_ids(key, s, &again);
	ASSERT_TRUE(!memcmp(&again, &si, sizeof(si)), "the same ids in either order, every time");
	request_free(s);
	request_free(c);

	/* A gateway that sends its own traceparent (same trace, a new parent-id, which names the
	 * gateway's own span): the served span is the child of the incoming parent-id, the client
	 * span has an id of its own (taking the header's would make a loop possible), child of
	 * the served span. */
	s = traced(1, 0, false, tp);
	c = traced(2, 0, true, tp2);
	pair(s, c);
	otlp_span_ids(key, s, &si);
	otlp_span_ids(key, c, &ci);
	ASSERT_TRUE(!si.forwarded && !memcmp(si.parent_id, s->trace.tp.parent_id, 8),
		    "served: child of the incoming parent-id");
	ASSERT_TRUE(memcmp(ci.span_id, c->trace.tp.parent_id, 8) != 0 &&
			!memcmp(ci.trace_id, c->trace.tp.trace_id, 16) &&
			!memcmp(ci.parent_id, si.span_id, 8),
		    "client: its own id in the header's trace, child of the served span");
	request_free(s);
	request_free(c);

	/* Not paired (an application's SDK call): the span its header names, no parent. */
	c = traced(2, 0, true, tp2);
	otlp_span_ids(key, c, &ci);
	ASSERT_TRUE(!memcmp(ci.span_id, c->trace.tp.parent_id, 8) && is_zero(ci.parent_id, 8),
		    "unpaired client: the header's span, a root here");
	request_free(c);

	/* An upstream call in another trace than its served request: no parent across traces. */
	s = traced(1, 0, false, tp);
	c = traced(2, 0, true, other);
	pair(s, c);
	otlp_span_ids(key, c, &ci);
	ASSERT_TRUE(!memcmp(ci.trace_id, c->trace.tp.trace_id, 16) && is_zero(ci.parent_id, 8),
		    "another trace: in the header's trace, no parent");
	request_free(s);
	request_free(c);

	/* No trace context: the served span starts a trace, its upstream call joins it. */
	s = traced(1, 3, false, "");
	c = traced(2, 0, true, "");
	pair(s, c);
	otlp_span_ids(key, s, &si);
	otlp_span_ids(key, c, &ci);
	ASSERT_TRUE(is_zero(si.parent_id, 8) && !si.forwarded, "served: a root");
	ASSERT_TRUE(!memcmp(ci.trace_id, si.trace_id, 16) && !memcmp(ci.parent_id, si.span_id, 8),
		    "client: in the served trace, its child");
	otlp_span_ids(key + 1, s, &again);
	ASSERT_TRUE(memcmp(again.span_id, si.span_id, 8) != 0, "another run, other ids");
	request_free(s);
	request_free(c);

	/* Not paired, no context: a trace of its own; a malformed traceparent changes nothing. */
	c = traced(2, 0, true, "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01");
	ASSERT_TRUE(c->trace.malformed && !c->trace.tp.valid, "malformed");
	otlp_span_ids(key, c, &ci);
	ASSERT_TRUE(is_zero(ci.parent_id, 8) && !is_zero(ci.span_id, 8) &&
			!is_zero(ci.trace_id, 16),
		    "its own ids");
	request_free(c);
}

/* The parent of span id `id` among n spans' ids (trace and span); NULL when none is one of them. */
static const struct otlp_ids *parent_of(const struct otlp_ids *all, int n, const struct otlp_ids *x)
{
	if (is_zero(x->parent_id, 8))
		return NULL;
	for (int i = 0; i < n; i++)
		if (!memcmp(all[i].trace_id, x->trace_id, 16) &&
		    !memcmp(all[i].span_id, x->parent_id, 8))
			return &all[i];
	return NULL;
}

/* Whether following parents from any of the n spans comes back to it. */
static bool has_loop(const struct otlp_ids *all, int n)
{
	for (int i = 0; i < n; i++) {
		const struct otlp_ids *p = &all[i];

		for (int k = 0; k <= n && (p = parent_of(all, n, p)); k++)
			if (p == &all[i])
				return true;
	}
	return false;
}

/*
 * The outside fuzz run's loop: one client sends two requests of one trace (parents A and B)
 * through a proxy that forwards traceparent unchanged but sends the upstream calls in the
 * other order. Paired by order, the four spans' parents went CLIENT b -> SERVER 1 -> CLIENT a
 * -> SERVER 2 -> CLIENT b. Paired by the header they carry, each call is its own request's;
 * and whatever the pairing, the ids make no loop.
 */
TEST(test_trace_context_no_loop)
{
	static const char tp_a[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-aaaaaaaaaaaaaaaa-01";
	static const char tp_b[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-bbbbbbbbbbbbbbbb-01";
	const uint64_t key = 77;
	struct proxy p;
	struct request *s1 = traced(1, 0, false, tp_a), *s2 = traced(2, 0, false, tp_b);
	struct request *cb = traced(3, 0, true, tp_b), *ca = traced(4, 0, true, tp_a);
	struct otlp_ids ids[4];

	s1->arrival_ns = 100, s2->arrival_ns = 200, cb->arrival_ns = 300, ca->arrival_ns = 400;
	proxy_init(&p);
	proxy_start(&p, s1);
	proxy_start(&p, s2);
	proxy_start(&p, cb);
	proxy_start(&p, ca);
	ASSERT_TRUE(cb->peer.set && cb->peer.conn_id == 2, "b's call paired with b's request");
	ASSERT_TRUE(ca->peer.set && ca->peer.conn_id == 1, "a's call paired with a's request");
	otlp_span_ids(key, s1, &ids[0]);
	otlp_span_ids(key, s2, &ids[1]);
	otlp_span_ids(key, cb, &ids[2]);
	otlp_span_ids(key, ca, &ids[3]);
	ASSERT_TRUE(ids[0].forwarded && ids[1].forwarded, "both served spans roots");
	ASSERT_TRUE(!memcmp(ids[3].parent_id, ids[0].span_id, 8) &&
			!memcmp(ids[2].parent_id, ids[1].span_id, 8),
		    "each call the child of its own request");
	ASSERT_FALSE(has_loop(ids, 4), "no loop");
	proxy_done(&p, cb);
	proxy_done(&p, ca);
	proxy_done(&p, s1);
	proxy_done(&p, s2);
	request_free(s1);
	request_free(s2);
	request_free(cb);
	request_free(ca);

	/* The pairing crossed anyway (paired by hand, as order alone did): still no loop. */
	s1 = traced(1, 0, false, tp_a);
	s2 = traced(2, 0, false, tp_b);
	cb = traced(3, 0, true, tp_b);
	ca = traced(4, 0, true, tp_a);
	pair(s1, cb);
	pair(s2, ca);
	otlp_span_ids(key, s1, &ids[0]);
	otlp_span_ids(key, s2, &ids[1]);
	otlp_span_ids(key, cb, &ids[2]);
	otlp_span_ids(key, ca, &ids[3]);
	ASSERT_FALSE(has_loop(ids, 4), "no loop when paired wrongly");
	for (int i = 0; i < 4; i++)
		ASSERT_TRUE(memcmp(ids[i].span_id, ids[i].parent_id, 8) != 0,
			    "never its own parent");
	request_free(s1);
	request_free(s2);
	request_free(cb);
	request_free(ca);
}

TEST(test_trace_context_encoded)
{
	static const char tp[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
	struct otlp_opts opts;
	struct otlp o;
	struct sink sk;
	struct request *r;
	struct request_metrics m;
	struct gpu_attribution none = {
		-1, -1, -1, -1, -1, "none", -1, -1, NULL, .has_steps = false
	};
	size_t n;
	cJSON *j, *s, *v;

	opts_test(&opts);
	opts.sample_ratio = 1;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	r = traced(5, 0, false, tp);
	tracectx_field(&r->trace, "tracestate", 10, "congo=t61rcWkgMzE", 17);
	tracectx_field(&r->trace, "x-request-id", 12, "rid-1", 5);
	tracectx_finish(&r->trace);
	ends_of_label(&r->ends, "10.0.0.1:8000<-10.0.0.2:5555#5");
	r->info.disagg.kv = true;
	r->info.disagg.do_remote_prefill = 1;
	snprintf(r->info.disagg.remote_engine_id, REQBODY_ID_MAX, "eng-1");
	r->info.disagg.remote_port = 5600;
	r->info.disagg.room_set = true;
	r->info.disagg.bootstrap_room = INT64_MAX;
	snprintf(r->path, sizeof(r->path), "/v1/chat/completions");
	r->arrival_ns = T0;
	r->end_ns = T0 + 10 * MS;
	request_metrics(r, &m);
	sk.request(sk.ctx, r, &m, &none);
	request_free(r);
	j = encode_all(&o, &n);
	if (!ASSERT_EQ(n, 1, "one span"))
		goto out;
	s = cJSON_GetArrayItem(spans_of(j), 0);
	ASSERT_STREQ(str(s, "traceId"), "4bf92f3577b34da6a3ce929d0e0e4736", "the caller's trace");
	ASSERT_STREQ(str(s, "parentSpanId"), "00f067aa0ba902b7", "child of its parent-id");
	ASSERT_STREQ(str(s, "traceState"), "congo=t61rcWkgMzE", "tracestate kept");
	v = attr(s, "http.request.header.x-request-id");
	v = cJSON_GetObjectItem(v, "arrayValue");
	v = v ? cJSON_GetArrayItem(cJSON_GetObjectItem(v, "values"), 0) : NULL;
	ASSERT_STREQ(v ? str(v, "stringValue") : NULL, "rid-1", "x-request-id, a string array");
	ASSERT_STREQ(attr_s(s, "client.address"), "10.0.0.2", "client.address: the peer");
	ASSERT_EQ(attr_i(s, "server.port"), 8000, "server.port: its own");
	ASSERT_STREQ(attr_s(s, "tokenscope.kv_transfer.remote_engine_id"), "eng-1", "engine id");
	ASSERT_EQ(attr_i(s, "tokenscope.kv_transfer.remote_port"), 5600, "remote port");
	ASSERT_EQ(attr_i(s, "tokenscope.bootstrap.room"), INT64_MAX, "room, exact");
	ASSERT_TRUE(!attr(s, "tokenscope.kv_transfer.remote_host"), "absent keys absent");
out:
	cJSON_Delete(j);
	otlp_close(&o);
}

/* Spans of processes that run in different places go under a resource each, with the names
 * the semantic conventions give them; a workload's spans stay together, in their order. */
TEST(test_resource_per_workload)
{
	static const struct workload pod = {
		.container_id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		.pod_uid = "12345678-aaaa-bbbb-cccc-0123456789ab",
		.k8s_namespace = "inference",
		.k8s_pod = "vllm-0",
		.k8s_container = "engine",
	};
	static const struct workload plain = {
		.container_id = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
	};
	const struct workload *where[] = { &pod, &plain, NULL, &pod };
	struct otlp_opts opts;
	struct otlp o;
	struct sink sk;
	size_t n;
	cJSON *j, *rs, *res;

	opts_test(&opts);
	opts.sample_ratio = 1;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		struct req_spec q = { .model = "m",
				      .status = 200,
				      .outcome = OUTCOME_OK,
				      .ttft = 10 * MS,
				      .gap = 5 * MS,
				      .ntokens = 2,
				      .prompt_tokens = -1,
				      .completion_tokens = -1,
				      .wl = where[i] };

		feed(&sk, &q, NULL);
	}
	j = encode_all(&o, &n);
	ASSERT_EQ(n, 4, "four spans");
	if (!j)
		goto out;
	rs = cJSON_GetObjectItem(j, "resourceSpans");
	if (!ASSERT_EQ(cJSON_GetArraySize(rs), 3, "a resource per workload"))
		goto out;
	res = cJSON_GetObjectItem(cJSON_GetArrayItem(rs, 0), "resource");
	ASSERT_STREQ(attr_s(res, "host.name"), "gpu-node-1", "the node");
	ASSERT_STREQ(attr_s(res, "k8s.namespace.name"), "inference", "k8s.namespace.name");
	ASSERT_STREQ(attr_s(res, "k8s.pod.name"), "vllm-0", "k8s.pod.name");
	ASSERT_STREQ(attr_s(res, "k8s.pod.uid"), pod.pod_uid, "k8s.pod.uid");
	ASSERT_STREQ(attr_s(res, "k8s.container.name"), "engine", "k8s.container.name");
	ASSERT_STREQ(attr_s(res, "container.id"), pod.container_id, "container.id");
	ASSERT_EQ(cJSON_GetArraySize(spans_of_resource(cJSON_GetArrayItem(rs, 0))), 2,
		  "the pod's two spans together");
	res = cJSON_GetObjectItem(cJSON_GetArrayItem(rs, 1), "resource");
	ASSERT_STREQ(attr_s(res, "container.id"), plain.container_id, "a plain container's id");
	ASSERT_TRUE(attr(res, "k8s.pod.name") == NULL, "and no pod");
	res = cJSON_GetObjectItem(cJSON_GetArrayItem(rs, 2), "resource");
	ASSERT_TRUE(attr(res, "container.id") == NULL, "a host process: no container");
	ASSERT_STREQ(attr_s(res, "service.name"), "tokenscope", "but the service");
out:
	cJSON_Delete(j);
	otlp_close(&o);
}

/* OTEL_RESOURCE_ATTRIBUTES: pairs percent-decoded and trimmed; anything malformed refuses the
 * whole; its host.name and service.name replace tokenscope's, OTEL_SERVICE_NAME wins over both,
 * the rest go on every resource unless the workload set the key. */
TEST(test_env_resource)
{
	static const struct workload pod = { .k8s_namespace = "inference", .k8s_pod = "p-0" };
	struct otlp_attr a[OTLP_RESOURCE_ATTRS_MAX];
	struct req_spec q = { .model = "m",
			      .status = 200,
			      .outcome = OUTCOME_OK,
			      .ttft = 10 * MS,
			      .gap = 5 * MS,
			      .ntokens = 2,
			      .prompt_tokens = -1,
			      .completion_tokens = -1,
			      .wl = &pod };
	struct otlp_opts opts;
	struct otlp o;
	struct sink sk;
	size_t n;
	cJSON *j, *res;
	char many[1024] = "";

	ASSERT_EQ(
	    otlp_resource_attrs_parse(" k8s.node.name = gpu-7 ,deployment.environment=prod%2Ceu,,",
				      a, OTLP_RESOURCE_ATTRS_MAX),
	    2, "two pairs, an empty one skipped");
	ASSERT_STREQ(a[0].key, "k8s.node.name", "key trimmed");
	ASSERT_STREQ(a[0].value, "gpu-7", "value trimmed");
	ASSERT_STREQ(a[1].value, "prod,eu", "percent-decoded");
	ASSERT_EQ(otlp_resource_attrs_parse(NULL, a, OTLP_RESOURCE_ATTRS_MAX), 0, "unset");
	ASSERT_EQ(otlp_resource_attrs_parse("a=1,b", a, OTLP_RESOURCE_ATTRS_MAX), -EINVAL, "no =");
	ASSERT_EQ(otlp_resource_attrs_parse("=1", a, OTLP_RESOURCE_ATTRS_MAX), -EINVAL, "no key");
	ASSERT_EQ(otlp_resource_attrs_parse("a=%zz", a, OTLP_RESOURCE_ATTRS_MAX), -EINVAL,
		  "bad escape");
	ASSERT_EQ(otlp_resource_attrs_parse("a=%4", a, OTLP_RESOURCE_ATTRS_MAX), -EINVAL,
		  "short escape");
	for (int i = 0; i <= OTLP_RESOURCE_ATTRS_MAX; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "k%d=v,", i);
	ASSERT_EQ(otlp_resource_attrs_parse(many, a, OTLP_RESOURCE_ATTRS_MAX), -EINVAL, "too many");
	ASSERT_EQ(otlp_resource_attrs_parse("a=%1b[31m", a, 1), 1, "an escape byte");
	ASSERT_FALSE(strchr(a[0].value, 0x1b), "never reaches a collector");

	opts_test(&opts);
	opts.sample_ratio = 1;
	opts.env_resource = "a=%zz";
	ASSERT_EQ(otlp_init(&o, &opts), -EINVAL, "malformed: refused");
	ASSERT_TRUE(strstr(o.error, "OTEL_RESOURCE_ATTRIBUTES") != NULL, "and named");
	opts.env_resource = "host.name=node-9,service.name=env-svc,k8s.node.name=node-9,"
			    "k8s.pod.name=not-this-one";
	opts.env_service = "vllm-fleet";
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	otlp_set_source(&o, OFFSET, "recorded-host");
	sk = otlp_sink(&o);
	feed(&sk, &q, NULL);
	j = encode_all(&o, &n);
	if (!j)
		goto out;
	res = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "resourceSpans"), 0),
				  "resource");
	ASSERT_STREQ(attr_s(res, "service.name"), "vllm-fleet", "OTEL_SERVICE_NAME wins");
	ASSERT_STREQ(attr_s(res, "host.name"), "node-9", "the environment's host.name is kept");
	ASSERT_STREQ(attr_s(res, "k8s.node.name"), "node-9", "added");
	ASSERT_STREQ(attr_s(res, "k8s.pod.name"), "p-0", "the workload's own pod wins");
	ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(res, "attributes")), 5,
		  "service, host, namespace, pod, node: each once");
out:
	cJSON_Delete(j);
	otlp_close(&o);
}

int main(void)
{
	return check_run_all();
}
