// SPDX-License-Identifier: MIT
/*
 * The Prometheus exporter: synthetic requests and GPU steps through the sink callbacks, the
 * rendered text checked line by line (buckets, sums, counts, counters, label escaping, the
 * pid and container labels, the cap on label sets and its overflow counter), when snapshots
 * are published, and the HTTP endpoint on a loopback port.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "sinks/httpd.h"
#include "pipeline/pipeline_impl.h"
#include "sinks/prom.h"

#define MS 1000000ull
#define BASE (1000 * MS) /* arrival times must be non-zero */

/* Whether text has exactly this line. */
static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; (p = strstr(p, line)); p++)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return true;
	return false;
}

static int count_lines_starting(const char *text, const char *prefix)
{
	int n = 0;
	size_t len = strlen(prefix);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, prefix, len))
			n++;
	return n;
}

/* Sample lines (not comments) starting with prefix that do (want) or do not contain needle. */
static int count_samples(const char *text, const char *prefix, const char *needle, bool want)
{
	int n = 0;
	size_t len = strlen(prefix);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		const char *eol = strchr(p, '\n');
		const char *hit = strstr(p, needle);
		bool has = hit && (!eol || hit < eol);

		if (*p != '#' && !strncmp(p, prefix, len) && has == want)
			n++;
	}
	return n;
}

#define ASSERT_LINE(text, line) \
	check_report(has_line(text, line), __FILE__, __LINE__, line, "missing")
#define ASSERT_NO_LINE(text, line) \
	check_report(!has_line(text, line), __FILE__, __LINE__, line, "present")

struct req_spec {
	const char *model;
	enum outcome outcome;
	uint64_t arrival_ms;
	const uint64_t *tokens_ms; /* content frame times, ms after BASE */
	int ntokens;
	uint64_t end_ms;
	int64_t prompt_tokens, completion_tokens, cached_tokens;
};

/* The pod of the requests made from here on (NULL: none). */
static const struct workload *pod_of_requests;

/* A request of model served by process pid, in container (NULL: none). */
static struct request *new_request(const char *model, uint32_t pid, const char *container)
{
	struct request *r = request_new(pid, 1, 0, "c");

	snprintf(r->info.model, sizeof(r->info.model), "%s", model);
	/* The short id is the full id's first 12 digits. */
	if (container)
		snprintf(r->workload.container_id, sizeof(r->workload.container_id), "%s%s",
			 container, "cdefcdefcdefcdefcdefcdefcdefcdefcdefcdefcdefcdefcdef");
	if (pod_of_requests) {
		const struct workload *w = pod_of_requests;

		memcpy(r->workload.k8s_namespace, w->k8s_namespace, sizeof(w->k8s_namespace));
		memcpy(r->workload.k8s_pod, w->k8s_pod, sizeof(w->k8s_pod));
		memcpy(r->workload.k8s_container, w->k8s_container, sizeof(w->k8s_container));
	}
	return r;
}

/* q finished, served by process pid in container (NULL: none). */
/* The socket wait of the requests fed from here on, ms; 0: unknown. */
static uint64_t wait_ms;

static void feed_from(const struct sink *s, const struct req_spec *q,
		      const struct gpu_attribution *ga, uint32_t pid, const char *container)
{
	struct request *r = new_request(q->model, pid, container);
	struct request_metrics m;
	struct gpu_attribution none = {
		-1, -1, -1, -1, -1, "none: no GPU steps seen", -1, -1, NULL, .has_steps = false
	};

	r->outcome = q->outcome;
	r->arrival_ns = BASE + q->arrival_ms * MS;
	r->received_ns = wait_ms ? r->arrival_ns - wait_ms * MS : 0;
	for (int i = 0; i < q->ntokens; i++)
		request_add_token(r, BASE + q->tokens_ms[i] * MS);
	r->end_ns = BASE + q->end_ms * MS;
	r->prompt_tokens = q->prompt_tokens;
	r->completion_tokens = q->completion_tokens;
	r->cached_tokens = q->cached_tokens;
	request_metrics(r, &m);
	s->request(s->ctx, r, &m, ga ? ga : &none);
	request_free(r);
}

static void feed(const struct sink *s, const struct req_spec *q, const struct gpu_attribution *ga)
{
	feed_from(s, q, ga, 1, NULL);
}

static void step(const struct sink *s, uint32_t pid, enum step_kind kind, uint64_t start_ms,
		 uint64_t end_ms)
{
	/* decode steps replay a graph for three requests; the others launch eagerly for one */
	struct gpu_step st = { .pid = pid,
			       .tid = pid,
			       .kind = kind,
			       .mode = kind == STEP_DECODE ? MODE_GRAPH : MODE_EAGER,
			       .batch = kind == STEP_DECODE ? 3 : 1 };

	st.start_ns = BASE + start_ms * MS;
	st.end_ns = BASE + end_ms * MS;
	s->gpu_step(s->ctx, &st);
}

static char *render(struct prom *p)
{
	char *buf = NULL;
	size_t len = 0;

	if (!ASSERT_OK(prom_render(p, &buf, &len), "render"))
		return NULL;
	ASSERT_EQ(strlen(buf), len, "length");
	return buf;
}

/* The exchanges in flight when tracing began, per server, from the status the pipeline gives
 * at the end: reported and not, the servers past the cap as pid "other". */
TEST(test_joined_requests)
{
	struct pipeline_status st = { 0 };
	struct prom *p = prom_new(NULL, NULL);
	struct sink s;
	char *t;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	s = prom_sink(p);
	st.joined.n = 2;
	st.joined.s[0] = (struct joined_server){ .pid = 4120, .in_flight = 3, .reported = 2 };
	st.joined.s[1] = (struct joined_server){ .pid = 0, .in_flight = 1, .reported = 0 };
	s.finish(s.ctx, &st);
	t = render(p);
	if (t) {
		ASSERT_LINE(t, "# TYPE tokenscope_joined_requests_total counter");
		ASSERT_LINE(t, "tokenscope_joined_requests_total{pid=\"4120\",reported=\"yes\"} 2");
		ASSERT_LINE(t, "tokenscope_joined_requests_total{pid=\"4120\",reported=\"no\"} 1");
		ASSERT_LINE(t, "tokenscope_joined_requests_total{pid=\"other\",reported=\"yes\"} 0");
		ASSERT_LINE(t, "tokenscope_joined_requests_total{pid=\"other\",reported=\"no\"} 1");
	}
	free(t);
	prom_free(p);
}

/* Requests that are not inference: by kind alone, out of the request families, and out of the
 * in-flight gauge they entered at their start. */
TEST(test_other_requests)
{
	static const char *const paths[] = {
		"/health",	 "/healthz?x=1", "/metrics", "/v1/models", "/v1/models/qwen",
		"/openapi.json", "/api/tags",	 "/",	     "/v1/chat"
	};
	static const char *const kinds[] = { "health", "health", "metrics", "models", "models",
					     "docs",   "models", "other",   "other" };
	struct prom *p = prom_new(NULL, NULL);
	struct request r;
	struct sink s;
	char *t;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	s = prom_sink(p);
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		memset(&r, 0, sizeof(r));
		request_init(&r, 42, i + 1, 0, "c");
		snprintf(r.method, sizeof(r.method), "GET");
		snprintf(r.path, sizeof(r.path), "%s", paths[i]);
		ASSERT_FALSE(request_is_inference(&r),
			     "a GET with no body, no stream: not inference");
		ASSERT_STREQ(request_other_kind(&r), kinds[i], paths[i]);
		s.request_start(s.ctx, &r);
		s.request_other(s.ctx, &r);
		request_release(&r);
	}
	t = render(p);
	if (t) {
		ASSERT_LINE(t, "tokenscope_other_requests_total{kind=\"health\"} 2");
		ASSERT_LINE(t, "tokenscope_other_requests_total{kind=\"metrics\"} 1");
		ASSERT_LINE(t, "tokenscope_other_requests_total{kind=\"models\"} 3");
		ASSERT_LINE(t, "tokenscope_other_requests_total{kind=\"docs\"} 1");
		ASSERT_LINE(t, "tokenscope_other_requests_total{kind=\"other\"} 2");
		/* (the label set their starts made stays, every count 0) */
		for (const char *l = strstr(t, "\ntokenscope_requests_total{"); l;
		     l = strstr(l + 1, "\ntokenscope_requests_total{"))
			ASSERT_TRUE(!strncmp(strchr(l, '}'), "} 0\n", 4),
				    "not in the request families");
		ASSERT_FALSE(strstr(t, "streams_in_flight{model=\"unknown\",role=\"server\"} 1"),
			     "none left in flight");
	}
	/* What makes one inference: a model, a prompt, a stream, a known response format. */
	memset(&r, 0, sizeof(r));
	request_init(&r, 42, 99, 0, "c");
	ASSERT_FALSE(request_is_inference(&r), "nothing known");
	r.info.prompt = true;
	ASSERT_TRUE(request_is_inference(&r), "a prompt in the body");
	r.info.prompt = false;
	r.streamed = true;
	ASSERT_TRUE(request_is_inference(&r), "a stream back");
	r.streamed = false;
	r.format = FMT_OPENAI_CHAT;
	ASSERT_TRUE(request_is_inference(&r), "a completion object back");
	request_release(&r);
	free(t);
	prom_free(p);
}

TEST(test_histograms_and_counters)
{
	static const uint64_t toks[] = { 30, 40, 55 };
	static const uint64_t toks2[] = { 100, 300 };
	struct prom *p = prom_new(NULL, NULL);
	struct sink s;
	struct gpu_attribution ga = { 5 * MS,	 20 * MS, 30 * MS, 20 * MS, 5 * MS,
				      "by time", -1,	  -1,	   NULL,    .has_steps = false };
	/* preempted twice, 70 ms out of the batch in all (batch.h) */
	struct gpu_attribution gp = { .queue_ns = -1,
				      .prefill_ns = -1,
				      .decode_ns = -1,
				      .gpu_ns = -1,
				      .host_ns = -1,
				      .how = "by time",
				      .has_steps = true,
				      .preemptions = 2,
				      .preempted_ns = 70 * MS };
	char *t;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	s = prom_sink(p);
	/* llama, ok: TTFT 30 ms, gaps 10 and 15 ms, TPOT (55 - 30) / (3 - 1) = 12.5 ms, E2E 60 */
	feed(&s, &(struct req_spec){ "llama", OUTCOME_OK, 0, toks, 3, 60, 10, 3, 4 }, &ga);
	/* llama, http_error after 5 ms: E2E and the outcome only */
	feed(&s, &(struct req_spec){ "llama", OUTCOME_HTTP_ERROR, 100, NULL, 0, 105, -1, -1, -1 },
	     NULL);
	/* qwen, aborted after two frames: no TTFT/ITL/TPOT (ok requests only), output tokens */
	feed(&s, &(struct req_spec){ "qwen", OUTCOME_ABORTED, 0, toks2, 2, 400, -1, -1, -1 }, &gp);
	/* no model in the body */
	feed(&s, &(struct req_spec){ "", OUTCOME_OK, 0, toks, 1, 2000, -1, -1, -1 }, NULL);
	step(&s, 42, STEP_PREFILL, 10, 30);
	step(&s, 42, STEP_DECODE, 30, 40);
	step(&s, 43, STEP_DECODE, 30, 42);
	t = render(p);
	if (!t)
		goto out;

	/* TTFT: 30 ms is above 0.02 and at most 0.04 */
	ASSERT_LINE(t, "tokenscope_time_to_first_token_seconds_bucket{model=\"llama\",role="
		       "\"server\",le=\"0.02\"} 0");
	ASSERT_LINE(t, "tokenscope_time_to_first_token_seconds_bucket{model=\"llama\",role="
		       "\"server\",le=\"0.04\"} 1");
	ASSERT_LINE(t, "tokenscope_time_to_first_token_seconds_bucket{model=\"llama\",role="
		       "\"server\",le=\"10\"} 1");
	ASSERT_LINE(t, "tokenscope_time_to_first_token_seconds_bucket{model=\"llama\",role="
		       "\"server\",le=\"+Inf\"} 1");
	ASSERT_LINE(
	    t, "tokenscope_time_to_first_token_seconds_sum{model=\"llama\",role=\"server\"} 0.03");
	ASSERT_LINE(
	    t, "tokenscope_time_to_first_token_seconds_count{model=\"llama\",role=\"server\"} 1");
	ASSERT_EQ(
	    count_lines_starting(
		t, "tokenscope_time_to_first_token_seconds_bucket{model=\"llama\",role=\"server\""),
	    17, "16 bounds and +Inf");
	/* ITL: 10 ms falls in le="0.01" (bounds are inclusive), 15 ms in le="0.02" */
	ASSERT_LINE(t, "tokenscope_inter_token_latency_seconds_bucket{model=\"llama\",role="
		       "\"server\",le=\"0.005\"} 0");
	ASSERT_LINE(t, "tokenscope_inter_token_latency_seconds_bucket{model=\"llama\",role="
		       "\"server\",le=\"0.01\"} 1");
	ASSERT_LINE(t, "tokenscope_inter_token_latency_seconds_bucket{model=\"llama\",role="
		       "\"server\",le=\"0.02\"} 2");
	ASSERT_LINE(
	    t, "tokenscope_inter_token_latency_seconds_sum{model=\"llama\",role=\"server\"} 0.025");
	ASSERT_LINE(
	    t, "tokenscope_inter_token_latency_seconds_count{model=\"llama\",role=\"server\"} 2");
	/* TPOT bounds start at 0.01 */
	ASSERT_LINE(t, "tokenscope_time_per_output_token_seconds_bucket{model=\"llama\",role="
		       "\"server\",le=\"0.01\"} 0");
	ASSERT_LINE(t, "tokenscope_time_per_output_token_seconds_bucket{model=\"llama\",role="
		       "\"server\",le=\"0.025\"} 1");
	ASSERT_LINE(
	    t,
	    "tokenscope_time_per_output_token_seconds_sum{model=\"llama\",role=\"server\"} 0.0125");
	/* E2E over every outcome: 60 ms and 5 ms; duration bounds */
	ASSERT_LINE(t, "tokenscope_request_duration_seconds_bucket{model=\"llama\",role=\"server\","
		       "le=\"0.01\"} 1");
	ASSERT_LINE(t, "tokenscope_request_duration_seconds_bucket{model=\"llama\",role=\"server\","
		       "le=\"0.08\"} 2");
	ASSERT_LINE(t, "tokenscope_request_duration_seconds_bucket{model=\"llama\",role=\"server\","
		       "le=\"81.92\"} 2");
	ASSERT_LINE(
	    t, "tokenscope_request_duration_seconds_sum{model=\"llama\",role=\"server\"} 0.065");
	ASSERT_LINE(t,
		    "tokenscope_request_duration_seconds_count{model=\"llama\",role=\"server\"} 2");
	ASSERT_LINE(t,
		    "tokenscope_request_duration_seconds_count{model=\"qwen\",role=\"server\"} 1");
	ASSERT_LINE(t,
		    "tokenscope_request_duration_seconds_sum{model=\"unknown\",role=\"server\"} 2");
	/* attribution: queue 5 ms (le="0.005" inclusive), prefill 20 ms, decode 30 ms */
	ASSERT_LINE(t, "tokenscope_request_queue_seconds_bucket{model=\"llama\",role=\"server\",le="
		       "\"0.005\"} 1");
	ASSERT_LINE(t, "tokenscope_request_prefill_seconds_bucket{model=\"llama\",role=\"server\","
		       "le=\"0.01\"} 0");
	ASSERT_LINE(t, "tokenscope_request_prefill_seconds_bucket{model=\"llama\",role=\"server\","
		       "le=\"0.02\"} 1");
	ASSERT_LINE(t, "tokenscope_request_decode_seconds_bucket{model=\"llama\",role=\"server\","
		       "le=\"0.04\"} 1");
	ASSERT_LINE(t,
		    "tokenscope_request_decode_seconds_count{model=\"llama\",role=\"server\"} 1");
	/* ok-only latencies are absent for a model with no ok request */
	ASSERT_FALSE(
	    strstr(t,
		   "tokenscope_time_to_first_token_seconds_count{model=\"qwen\",role=\"server\"}"),
	    "no TTFT for aborted");
	ASSERT_FALSE(
	    strstr(t, "tokenscope_request_queue_seconds_count{model=\"qwen\",role=\"server\"}"),
	    "no queue when not attributed");
	/* counters: every outcome of every model, tokens by type */
	ASSERT_LINE(t,
		    "tokenscope_requests_total{model=\"llama\",role=\"server\",outcome=\"ok\"} 1");
	ASSERT_LINE(
	    t,
	    "tokenscope_requests_total{model=\"llama\",role=\"server\",outcome=\"http_error\"} 1");
	ASSERT_LINE(
	    t, "tokenscope_requests_total{model=\"llama\",role=\"server\",outcome=\"lost\"} 0");
	ASSERT_LINE(
	    t, "tokenscope_requests_total{model=\"qwen\",role=\"server\",outcome=\"aborted\"} 1");
	ASSERT_LINE(
	    t, "tokenscope_requests_total{model=\"unknown\",role=\"server\",outcome=\"ok\"} 1");
	ASSERT_LINE(t,
		    "tokenscope_tokens_total{model=\"llama\",role=\"server\",type=\"input\"} 10");
	ASSERT_LINE(t,
		    "tokenscope_tokens_total{model=\"llama\",role=\"server\",type=\"output\"} 3");
	ASSERT_LINE(t,
		    "tokenscope_tokens_total{model=\"llama\",role=\"server\",type=\"cached\"} 4");
	ASSERT_LINE(t, "tokenscope_tokens_total{model=\"qwen\",role=\"server\",type=\"output\"} 2");
	ASSERT_LINE(t, "tokenscope_tokens_total{model=\"qwen\",role=\"server\",type=\"input\"} 0");
	ASSERT_LINE(t, "tokenscope_streams_in_flight{model=\"llama\",role=\"server\"} 0");
	ASSERT_LINE(t, "tokenscope_events_lost_total 0");
	/* GPU steps by process and kind; durations by kind */
	ASSERT_LINE(t, "tokenscope_gpu_steps_total{pid=\"42\",kind=\"prefill\"} 1");
	ASSERT_LINE(t, "tokenscope_gpu_steps_total{pid=\"42\",kind=\"decode\"} 1");
	ASSERT_LINE(t, "tokenscope_gpu_steps_total{pid=\"43\",kind=\"decode\"} 1");
	ASSERT_LINE(t, "tokenscope_gpu_steps_total{pid=\"43\",kind=\"mixed\"} 0");
	/* by mode and batch range (graph coverage): only counts above 0 */
	ASSERT_LINE(t, "tokenscope_gpu_steps_by_mode_total{pid=\"42\",kind=\"decode\","
		       "mode=\"graph\",batch=\"3-4\"} 1");
	ASSERT_LINE(t, "tokenscope_gpu_steps_by_mode_total{pid=\"42\",kind=\"prefill\","
		       "mode=\"eager\",batch=\"1\"} 1");
	ASSERT_FALSE(strstr(t, "tokenscope_gpu_steps_by_mode_total{pid=\"43\",kind=\"mixed\""),
		     "no zero counts");
	ASSERT_LINE(t,
		    "tokenscope_gpu_step_duration_seconds_bucket{kind=\"decode\",le=\"0.01\"} 1");
	ASSERT_LINE(t,
		    "tokenscope_gpu_step_duration_seconds_bucket{kind=\"decode\",le=\"0.02\"} 2");
	ASSERT_LINE(t, "tokenscope_gpu_step_duration_seconds_sum{kind=\"decode\"} 0.022");
	ASSERT_LINE(t, "tokenscope_gpu_step_duration_seconds_count{kind=\"prefill\"} 1");
	/* no pid or container label unless asked for or known; no cap reached */
	ASSERT_FALSE(strstr(t, "pid=\"1\""), "no pid label without --by-process");
	ASSERT_FALSE(strstr(t, "container="), "no container label");
	ASSERT_FALSE(strstr(t, "tokenscope_label_overflow_total"), "no overflow");
	/* HELP and TYPE once per family */
	ASSERT_LINE(t, "tokenscope_dropped_bytes_total{where=\"stream\"} 0");
	ASSERT_LINE(t, "tokenscope_dropped_total{what=\"oversize_frame\"} 0");
	ASSERT_LINE(t, "tokenscope_traced_processes 0");
	/* preemptions counted under the request's label set, by outcome too; their time out */
	ASSERT_LINE(t, "tokenscope_preemptions_total{model=\"qwen\",role=\"server\"} 2");
	ASSERT_LINE(t, "tokenscope_preemptions_total{model=\"llama\",role=\"server\"} 0");
	ASSERT_LINE(t, "tokenscope_request_preempted_seconds_bucket{model=\"qwen\",role="
		       "\"server\",le=\"0.08\"} 1");
	ASSERT_LINE(
	    t, "tokenscope_request_preempted_seconds_sum{model=\"qwen\",role=\"server\"} 0.07");
	ASSERT_FALSE(strstr(t, "tokenscope_request_preempted_seconds_count{model=\"llama\""),
		     "none for a label set never preempted");
	/* steps without a CUPTI library: the host's figures */
	ASSERT_LINE(t, "tokenscope_gpu_steps_device_times_total{times=\"host-calls\"} 3");
	ASSERT_LINE(t, "tokenscope_gpu_steps_device_times_total{times=\"sampled-out\"} 0");
	ASSERT_LINE(t, "tokenscope_abandoned_requests_total{model=\"llama\",role=\"server\"} 0");
	ASSERT_EQ(count_lines_starting(t, "# TYPE "), 31, "families");
	ASSERT_EQ(count_lines_starting(t, "# HELP "), 31, "help lines");
	ASSERT_LINE(t, "tokenscope_other_requests_total{kind=\"health\"} 0");
	ASSERT_LINE(t, "# TYPE tokenscope_time_to_first_token_seconds histogram");
	ASSERT_LINE(t, "# TYPE tokenscope_requests_total counter");
	ASSERT_LINE(t, "# TYPE tokenscope_streams_in_flight gauge");
	ASSERT_LINE(t, "# TYPE tokenscope_gpu_step_duration_seconds histogram");
	ASSERT_TRUE(t[strlen(t) - 1] == '\n', "ends with a newline");
out:
	free(t);
	prom_free(p);
}

TEST(test_empty)
{
	struct prom *p = prom_new(NULL, NULL);
	char *t = p ? render(p) : NULL;

	if (!ASSERT_OK_PTR(t, "render"))
		goto out;
	/* every family announced, no series yet, no GPU families without steps */
	ASSERT_LINE(t, "# TYPE tokenscope_request_duration_seconds histogram");
	ASSERT_LINE(t, "tokenscope_events_lost_total 0");
	ASSERT_FALSE(strstr(t, "_bucket"), "no buckets");
	ASSERT_FALSE(strstr(t, "tokenscope_gpu"), "no GPU metrics");
out:
	free(t);
	prom_free(p);
}

/* In flight per model: counted from a request's arrival to its end. */
TEST(test_in_flight)
{
	struct prom *p = prom_new(NULL, NULL);
	struct request *r = request_new(1, 1, 0, "c");
	const uint64_t tok[] = { 20 };
	struct req_spec q = { "mistral", OUTCOME_OK, 0, tok, 1, 30, -1, -1, -1 };
	struct sink s;
	char *t = NULL;

	if (!ASSERT_OK_PTR(p, "prom") || !ASSERT_OK_PTR(r, "request"))
		goto out;
	s = prom_sink(p);
	snprintf(r->info.model, sizeof(r->info.model), "mistral");
	s.request_start(s.ctx, r);
	s.request_start(s.ctx, r);
	t = render(p);
	ASSERT_LINE(t, "tokenscope_streams_in_flight{model=\"mistral\",role=\"server\"} 2");
	free(t);
	feed(&s, &q, NULL);
	t = render(p);
	ASSERT_LINE(t, "tokenscope_streams_in_flight{model=\"mistral\",role=\"server\"} 1");
out:
	free(t);
	request_free(r);
	prom_free(p);
}

/* A request whose model came from its stream (a Responses stream's created event) began without
 * one: it leaves the "unknown" set's in-flight count, and is counted under its model. */
TEST(test_model_from_stream)
{
	struct prom *p = prom_new(NULL, NULL);
	struct request *r = request_new(1, 1, 0, "c");
	struct request_metrics m;
	struct sink s;
	char *t = NULL;

	if (!ASSERT_OK_PTR(p, "prom") || !ASSERT_OK_PTR(r, "request"))
		goto out;
	s = prom_sink(p);
	s.request_start(s.ctx, r);
	snprintf(r->info.model, sizeof(r->info.model), "qwen");
	r->model_from_stream = true;
	r->status = 200;
	r->arrival_ns = 1000;
	r->end_ns = 2000;
	request_metrics(r, &m);
	s.request(s.ctx, r, &m, NULL);
	t = render(p);
	ASSERT_LINE(t, "tokenscope_streams_in_flight{model=\"unknown\",role=\"server\"} 0");
	ASSERT_LINE(t, "tokenscope_streams_in_flight{model=\"qwen\",role=\"server\"} 0");
	ASSERT_LINE(t,
		    "tokenscope_requests_total{model=\"qwen\",role=\"server\",outcome=\"ok\"} 1");
out:
	free(t);
	request_free(r);
	prom_free(p);
}

TEST(test_label_escaping)
{
	struct prom *p = prom_new(NULL, NULL);
	struct sink s;
	char *t;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	s = prom_sink(p);
	feed(&s, &(struct req_spec){ "a\"b\\c\nd", OUTCOME_OK, 0, NULL, 0, 1, -1, -1, -1 }, NULL);
	/* a name cut inside a UTF-8 character by the capture limit, and a stray byte */
	feed(&s, &(struct req_spec){ "caf\xc3", OUTCOME_OK, 0, NULL, 0, 1, -1, -1, -1 }, NULL);
	feed(&s, &(struct req_spec){ "x\xffy\xc3\xa9", OUTCOME_OK, 0, NULL, 0, 1, -1, -1, -1 },
	     NULL);
	t = render(p);
	if (!t)
		goto out;
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"a\\\"b\\\\c\\nd\",role=\"server\","
		       "outcome=\"ok\"} 1");
	ASSERT_LINE(t, "tokenscope_request_duration_seconds_count{model=\"a\\\"b\\\\c\\nd\","
		       "role=\"server\"} 1");
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"caf\xef\xbf\xbd\",role=\"server\","
		       "outcome=\"ok\"} 1");
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"x\xef\xbf\xbdy\xc3\xa9\",role=\"server\","
		       "outcome=\"ok\"} 1");
out:
	free(t);
	prom_free(p);
}

/* Requests a traced process made as a client are counted apart, under role="client". */
TEST(test_role)
{
	struct prom *p = prom_new(NULL, NULL);
	struct sink s;
	struct request *r;
	struct request_metrics m;
	struct gpu_attribution none = {
		-1, -1, -1, -1, -1, "none", -1, -1, NULL, .has_steps = false
	};
	char *t;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	s = prom_sink(p);
	ASSERT_TRUE(s.clients, "the sink takes client requests");
	feed(&s, &(struct req_spec){ "m", OUTCOME_OK, 0, NULL, 0, 5, -1, -1, -1 }, NULL);
	for (int i = 0; i < 2; i++) {
		r = new_request("m", 1, NULL);
		r->client = true;
		r->outcome = OUTCOME_OK;
		r->arrival_ns = BASE;
		r->end_ns = BASE + 7 * MS;
		request_metrics(r, &m);
		s.request_start(s.ctx, r);
		s.request(s.ctx, r, &m, &none);
		request_free(r);
	}
	t = render(p);
	if (!t)
		goto out;
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"m\",role=\"server\",outcome=\"ok\"} 1");
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"m\",role=\"client\",outcome=\"ok\"} 2");
	ASSERT_LINE(t,
		    "tokenscope_request_duration_seconds_sum{model=\"m\",role=\"client\"} 0.014");
	ASSERT_LINE(t, "tokenscope_streams_in_flight{model=\"m\",role=\"client\"} 0");
out:
	free(t);
	prom_free(p);
}

TEST(test_model_cap)
{
	struct prom *p = prom_new(NULL, NULL);
	struct sink s;
	char name[32], line[128], *t;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	s = prom_sink(p);
	for (int i = 0; i < PROM_MAX_LABEL_SETS + 6; i++) {
		snprintf(name, sizeof(name), "m%d", i);
		feed(&s, &(struct req_spec){ name, OUTCOME_OK, 0, NULL, 0, 1, -1, -1, -1 }, NULL);
	}
	/* a model seen before the cap keeps its own series */
	feed(&s, &(struct req_spec){ "m0", OUTCOME_OK, 0, NULL, 0, 1, -1, -1, -1 }, NULL);
	t = render(p);
	if (!t)
		goto out;
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"m0\",role=\"server\",outcome=\"ok\"} 2");
	snprintf(line, sizeof(line),
		 "tokenscope_requests_total{model=\"m%d\",role=\"server\",outcome=\"ok\"} 1",
		 PROM_MAX_LABEL_SETS - 1);
	ASSERT_LINE(t, line);
	snprintf(line, sizeof(line),
		 "tokenscope_requests_total{model=\"m%d\",role=\"server\",outcome=\"ok\"} 1",
		 PROM_MAX_LABEL_SETS);
	ASSERT_NO_LINE(t, line);
	ASSERT_LINE(t,
		    "tokenscope_requests_total{model=\"other\",role=\"other\",outcome=\"ok\"} 6");
	ASSERT_EQ(count_lines_starting(t, "tokenscope_requests_total{") / OUTCOME_MAX,
		  PROM_MAX_LABEL_SETS + 1, "model label values");
	/* what went to "other" is counted, not silently merged */
	ASSERT_LINE(t, "# TYPE tokenscope_label_overflow_total counter");
	ASSERT_LINE(t, "tokenscope_label_overflow_total{family=\"requests\"} 6");
	ASSERT_LINE(t, "tokenscope_label_overflow_total{family=\"gpu_steps\"} 0");
out:
	free(t);
	prom_free(p);
}

/* The families a request feeds; each gets the pid and container labels. */
static const char *const request_families[] = {
	"tokenscope_requests_total",
	"tokenscope_tokens_total",
	"tokenscope_streams_in_flight",
	"tokenscope_time_to_first_token_seconds",
	"tokenscope_inter_token_latency_seconds",
	"tokenscope_time_per_output_token_seconds",
	"tokenscope_request_duration_seconds",
	"tokenscope_request_queue_seconds",
	"tokenscope_request_prefill_seconds",
	"tokenscope_request_decode_seconds",
	"tokenscope_request_socket_wait_seconds",
};

#define NFAMILIES (sizeof(request_families) / sizeof(request_families[0]))

TEST(test_by_process)
{
	static const uint64_t toks[] = { 30, 40, 55 };
	struct gpu_attribution ga = { 5 * MS,	 20 * MS, 30 * MS, 20 * MS, 5 * MS,
				      "by time", -1,	  -1,	   NULL,    .has_steps = false };
	const struct req_spec a = { "llama", OUTCOME_OK, 0, toks, 3, 60, 10, 3, 4 };
	const struct req_spec b = { "llama", OUTCOME_ABORTED, 0, toks, 2, 80, -1, -1, -1 };
	struct prom *p = prom_new(NULL, NULL);
	struct request *open = NULL;
	struct sink s;
	char *t = NULL;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	prom_set_by_process(p, true);
	s = prom_sink(p);
	wait_ms = 1;
	feed_from(&s, &a, &ga, 4242, NULL);
	feed_from(&s, &a, NULL, 4242, NULL);
	feed_from(&s, &b, NULL, 777, NULL);
	wait_ms = 0;
	/* still streaming on 777 */
	open = new_request("llama", 777, NULL);
	s.request_start(s.ctx, open);
	step(&s, 42, STEP_DECODE, 30, 40);
	t = render(p);
	if (!t)
		goto out;
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"llama\",role=\"server\",pid=\"4242\","
		       "outcome=\"ok\"} 2");
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"llama\",role=\"server\",pid=\"4242\","
		       "outcome=\"aborted\"} 0");
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"llama\",role=\"server\",pid=\"777\","
		       "outcome=\"aborted\"} 1");
	ASSERT_LINE(t, "tokenscope_tokens_total{model=\"llama\",role=\"server\",pid=\"4242\",type="
		       "\"input\"} 20");
	ASSERT_LINE(t, "tokenscope_tokens_total{model=\"llama\",role=\"server\",pid=\"4242\",type="
		       "\"cached\"} 8");
	ASSERT_LINE(t, "tokenscope_tokens_total{model=\"llama\",role=\"server\",pid=\"777\",type="
		       "\"output\"} 2");
	ASSERT_LINE(t,
		    "tokenscope_streams_in_flight{model=\"llama\",role=\"server\",pid=\"777\"} 1");
	ASSERT_LINE(t,
		    "tokenscope_streams_in_flight{model=\"llama\",role=\"server\",pid=\"4242\"} 0");
	ASSERT_LINE(t,
		    "tokenscope_time_to_first_token_seconds_bucket{model=\"llama\",role=\"server\","
		    "pid=\"4242\",le=\"0.04\"} 2");
	ASSERT_LINE(t, "tokenscope_time_to_first_token_seconds_count{model=\"llama\",role="
		       "\"server\",pid=\"4242\"} 2");
	ASSERT_LINE(t, "tokenscope_inter_token_latency_seconds_sum{model=\"llama\",role=\"server\","
		       "pid=\"4242\"} 0.05");
	ASSERT_LINE(
	    t, "tokenscope_time_per_output_token_seconds_count{model=\"llama\",role=\"server\","
	       "pid=\"4242\"} 2");
	ASSERT_LINE(t, "tokenscope_request_duration_seconds_count{model=\"llama\",role=\"server\","
		       "pid=\"777\"} 1");
	ASSERT_LINE(t, "tokenscope_request_duration_seconds_sum{model=\"llama\",role=\"server\","
		       "pid=\"4242\"} 0.12");
	ASSERT_LINE(t, "tokenscope_request_queue_seconds_count{model=\"llama\",role=\"server\",pid="
		       "\"4242\"} 1");
	ASSERT_LINE(t, "tokenscope_request_prefill_seconds_sum{model=\"llama\",role=\"server\",pid="
		       "\"4242\"} 0.02");
	ASSERT_LINE(
	    t,
	    "tokenscope_request_decode_seconds_bucket{model=\"llama\",role=\"server\",pid=\"4242\","
	    "le=\"+Inf\"} 1");
	/* latencies of a process with no ok request are absent, as they are for a model */
	ASSERT_FALSE(
	    strstr(t,
		   "tokenscope_time_to_first_token_seconds_count{model=\"llama\",role=\"server\","
		   "pid=\"777\"}"),
	    "no TTFT for 777");
	/* every sample of every request family has the pid: no series without it */
	for (size_t i = 0; i < NFAMILIES; i++) {
		ASSERT_TRUE(count_samples(t, request_families[i], ",pid=\"", true) > 0,
			    request_families[i]);
		ASSERT_EQ(count_samples(t, request_families[i], ",pid=\"", false), 0,
			  request_families[i]);
	}
	/* the GPU families' pid label has the same name */
	ASSERT_LINE(t, "tokenscope_gpu_steps_total{pid=\"42\",kind=\"decode\"} 1");
	ASSERT_FALSE(strstr(t, "container="), "no container label when none is known");
	ASSERT_FALSE(strstr(t, "tokenscope_label_overflow_total"), "under the cap");
out:
	free(t);
	request_free(open);
	prom_free(p);
}

/* A container label on the series of processes that have a container id, and no label (not an
 * empty one) on the others; in flight counted on the same series the request ends on. */
TEST(test_container_label)
{
	const struct req_spec q = { "qwen", OUTCOME_OK, 0, NULL, 0, 10, 5, -1, -1 };
	const struct req_spec q2 = { "qwen", OUTCOME_OK, 0, NULL, 0, 20, 6, -1, -1 };
	const char *id = "0123456789ab";
	struct prom *p = prom_new(NULL, NULL), *pp = prom_new(NULL, NULL);
	struct request *open = NULL;
	struct sink s, sp;
	char *t = NULL;

	if (!ASSERT_OK_PTR(p, "prom_new") || !ASSERT_OK_PTR(pp, "prom_new"))
		goto out;
	s = prom_sink(p);
	open = new_request("qwen", 300, id);
	s.request_start(s.ctx, open);
	t = render(p);
	if (!t)
		goto out;
	ASSERT_LINE(t, "tokenscope_streams_in_flight{model=\"qwen\",role=\"server\",container="
		       "\"0123456789ab\"} 1");
	free(t);
	feed_from(&s, &q, NULL, 300, id);
	feed_from(&s, &q2, NULL, 301, NULL);
	t = render(p);
	if (!t)
		goto out;
	ASSERT_LINE(t, "tokenscope_streams_in_flight{model=\"qwen\",role=\"server\",container="
		       "\"0123456789ab\"} 0");
	ASSERT_LINE(t, "tokenscope_streams_in_flight{model=\"qwen\",role=\"server\"} 0");
	ASSERT_LINE(
	    t,
	    "tokenscope_requests_total{model=\"qwen\",role=\"server\",container=\"0123456789ab\","
	    "outcome=\"ok\"} 1");
	ASSERT_LINE(t,
		    "tokenscope_requests_total{model=\"qwen\",role=\"server\",outcome=\"ok\"} 1");
	ASSERT_LINE(
	    t, "tokenscope_tokens_total{model=\"qwen\",role=\"server\",container=\"0123456789ab\","
	       "type=\"input\"} 5");
	ASSERT_LINE(t, "tokenscope_tokens_total{model=\"qwen\",role=\"server\",type=\"input\"} 6");
	ASSERT_LINE(t, "tokenscope_request_duration_seconds_sum{model=\"qwen\",role=\"server\","
		       "container=\"0123456789ab\"} 0.01");
	ASSERT_LINE(t,
		    "tokenscope_request_duration_seconds_sum{model=\"qwen\",role=\"server\"} 0.02");
	ASSERT_EQ(count_lines_starting(t, "tokenscope_requests_total{"), 2 * OUTCOME_MAX,
		  "two label sets");
	ASSERT_FALSE(strstr(t, "container=\"\""), "no empty container label");
	ASSERT_FALSE(strstr(t, "pid="), "no pid label without --by-process");
	free(t);

	/* with --by-process: model, pid, container, in this order */
	prom_set_by_process(pp, true);
	sp = prom_sink(pp);
	feed_from(&sp, &q, NULL, 300, id);
	feed_from(&sp, &q2, NULL, 301, NULL);
	t = render(pp);
	if (!t)
		goto out;
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"qwen\",role=\"server\",pid=\"300\","
		       "container=\"0123456789ab\",outcome=\"ok\"} 1");
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"qwen\",role=\"server\",pid=\"301\","
		       "outcome=\"ok\"} 1");
	ASSERT_LINE(
	    t,
	    "tokenscope_request_duration_seconds_bucket{model=\"qwen\",role=\"server\",pid=\"300\","
	    "container=\"0123456789ab\",le=\"0.01\"} 1");
out:
	free(t);
	request_free(open);
	prom_free(p);
	prom_free(pp);
}

/* A server in a Kubernetes pod: namespace and pod labels before the container's, escaped as any
 * label; prom_set_pod_labels(false) drops them and keeps the container's. */
TEST(test_pod_labels)
{
	static const uint64_t toks[] = { 30, 40 };
	const struct req_spec q = { "qwen", OUTCOME_OK, 0, toks, 2, 10, 5, -1, -1 };
	const struct workload pod = { .k8s_namespace = "ml",
				      .k8s_pod = "vllm-\"0\"",
				      .k8s_container = "engine" };
	struct prom *on = prom_new(NULL, NULL), *off = prom_new(NULL, NULL);
	struct request *r = NULL;
	struct sink s;
	char *t = NULL;

	if (!ASSERT_OK_PTR(on, "prom_new") || !ASSERT_OK_PTR(off, "prom_new"))
		goto out;
	prom_set_pod_labels(off, false);
	pod_of_requests = &pod;
	for (int k = 0; k < 2; k++) {
		s = prom_sink(k ? off : on);
		/* a start and an end counted on the same series (in flight back to 0) */
		r = new_request("qwen", 300, "0123456789ab");
		s.request_start(s.ctx, r);
		request_free(r);
		r = NULL;
		feed_from(&s, &q, NULL, 300, "0123456789ab");
	}
	pod_of_requests = NULL;
	t = render(on);
	if (!t)
		goto out;
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"qwen\",role=\"server\",namespace=\"ml\","
		       "pod=\"vllm-\\\"0\\\"\",container=\"0123456789ab\",outcome=\"ok\"} 1");
	ASSERT_LINE(t, "tokenscope_streams_in_flight{model=\"qwen\",role=\"server\",namespace="
		       "\"ml\",pod=\"vllm-\\\"0\\\"\",container=\"0123456789ab\"} 0");
	ASSERT_LINE(t,
		    "tokenscope_time_to_first_token_seconds_count{model=\"qwen\",role=\"server\","
		    "namespace=\"ml\",pod=\"vllm-\\\"0\\\"\",container=\"0123456789ab\"} 1");
	free(t);
	t = render(off);
	if (!t)
		goto out;
	ASSERT_FALSE(strstr(t, "namespace="), "no namespace label when turned off");
	ASSERT_FALSE(strstr(t, "pod="), "no pod label when turned off");
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"qwen\",role=\"server\",container="
		       "\"0123456789ab\",outcome=\"ok\"} 1");
out:
	free(t);
	request_free(r);
	prom_free(on);
	prom_free(off);
}

/* With --by-process the cap is on (model, pid, container) sets: the processes past it share
 * model="other",pid="other", and the requests and GPU steps that went there are counted. */
TEST(test_label_set_cap)
{
	const struct req_spec q = { "m", OUTCOME_OK, 0, NULL, 0, 1, -1, -1, -1 };
	struct prom *p = prom_new(NULL, NULL);
	struct request *open = NULL;
	char line[160], *t = NULL;
	struct sink s;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	prom_set_by_process(p, true);
	s = prom_sink(p);
	for (int i = 0; i < PROM_MAX_LABEL_SETS + 5; i++)
		feed_from(&s, &q, NULL, 1000 + i, NULL);
	/* a process seen before the cap keeps its series */
	feed_from(&s, &q, NULL, 1000, NULL);
	/* past the cap, a container does not bring its label back */
	feed_from(&s, &q, NULL, 5000, "0123456789ab");
	open = new_request("m", 5001, NULL);
	s.request_start(s.ctx, open);
	for (int i = 0; i < PROM_MAX_GPU_PIDS + 3; i++)
		step(&s, 100 + i, STEP_DECODE, 0, 1);
	t = render(p);
	if (!t)
		goto out;
	ASSERT_LINE(
	    t,
	    "tokenscope_requests_total{model=\"m\",role=\"server\",pid=\"1000\",outcome=\"ok\"} 2");
	snprintf(
	    line, sizeof(line),
	    "tokenscope_requests_total{model=\"m\",role=\"server\",pid=\"%d\",outcome=\"ok\"} 1",
	    1000 + PROM_MAX_LABEL_SETS - 1);
	ASSERT_LINE(t, line);
	snprintf(
	    line, sizeof(line),
	    "tokenscope_requests_total{model=\"m\",role=\"server\",pid=\"%d\",outcome=\"ok\"} 1",
	    1000 + PROM_MAX_LABEL_SETS);
	ASSERT_NO_LINE(t, line);
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"other\",role=\"other\",pid=\"other\","
		       "outcome=\"ok\"} 6");
	ASSERT_LINE(t, "tokenscope_request_duration_seconds_count{model=\"other\",role=\"other\","
		       "pid=\"other\"} 6");
	ASSERT_LINE(t,
		    "tokenscope_streams_in_flight{model=\"other\",role=\"other\",pid=\"other\"} 1");
	ASSERT_EQ(count_lines_starting(t, "tokenscope_requests_total{") / OUTCOME_MAX,
		  PROM_MAX_LABEL_SETS + 1, "label sets");
	ASSERT_FALSE(strstr(t, "container="), "no container past the cap");
	ASSERT_LINE(t, "tokenscope_label_overflow_total{family=\"requests\"} 6");
	ASSERT_LINE(t, "tokenscope_label_overflow_total{family=\"gpu_steps\"} 3");
	ASSERT_LINE(t, "tokenscope_gpu_steps_total{pid=\"other\",kind=\"decode\"} 3");
	ASSERT_EQ(count_lines_starting(t, "# TYPE tokenscope_label_overflow_total "), 1, "once");
out:
	free(t);
	request_free(open);
	prom_free(p);
}

/* --label: 10,000 distinct values from one hostile client stay "other" (each seen once); two
 * real tenants, seen twice, get their own series from their second request; the label sets
 * stay within the cap, and the in-flight gauge has the label empty. */
TEST(test_request_label_cap)
{
	const struct req_spec q = { "m", OUTCOME_OK, 0, NULL, 0, 1, -1, -1, -1 };
	struct req_label_set set = { 0 };
	struct prom *p = prom_new(NULL, NULL);
	char msg[256], *t = NULL;
	struct sink s;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	req_labels_parse(&set, "tenant=header:X-Tenant-Id", msg, sizeof(msg));
	if (!ASSERT_OK(prom_set_labels(p, &set, 3), "labels"))
		goto out;
	s = prom_sink(p);
	for (int i = 0; i < 10000; i++) {
		char v[32];
		struct request *r = new_request("m", 1, NULL), *one;
		struct request_metrics m;
		struct gpu_attribution none = { -1, -1, -1, -1, -1, "none", -1, -1, NULL,
						.has_steps = false };

		snprintf(v, sizeof(v), "hostile-%d", i);
		/* Every 100th, a real tenant's request (two tenants, alternately). */
		if (i % 100 == 0)
			snprintf(v, sizeof(v), "%s", i % 200 ? "acme" : "globex");
		r->labels.spec = &set;
		r->labels.set[0] = true;
		snprintf(r->labels.v[0], sizeof(r->labels.v[0]), "%s", v);
		one = r;
		s.request_start(s.ctx, one);
		r->outcome = q.outcome;
		r->arrival_ns = BASE;
		r->end_ns = BASE + MS;
		request_metrics(r, &m);
		s.request(s.ctx, r, &m, &none);
		request_free(r);
	}
	t = render(p);
	if (!t)
		goto out;
	/* acme and globex: 50 requests each, the first of each under "other" */
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"m\",role=\"server\",tenant=\"acme\","
		       "outcome=\"ok\"} 49");
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"m\",role=\"server\",tenant=\"globex\","
		       "outcome=\"ok\"} 49");
	ASSERT_LINE(t, "tokenscope_requests_total{model=\"m\",role=\"server\",tenant=\"other\","
		       "outcome=\"ok\"} 9902");
	ASSERT_LINE(t, "tokenscope_label_other_requests_total{label=\"tenant\"} 9902");
	ASSERT_LINE(t, "tokenscope_streams_in_flight{model=\"m\",role=\"server\",tenant=\"\"} 0");
	ASSERT_EQ(count_lines_starting(t, "tokenscope_requests_total{") / OUTCOME_MAX, 4,
		  "label sets: acme, globex, other, and the in-flight gauge's");
	ASSERT_FALSE(strstr(t, "hostile"), "no hostile value named");
out:
	free(t);
	prom_free(p);
}

struct published {
	int n;
	char *last;
};

static void publish(void *ctx, char *buf, size_t len)
{
	struct published *pub = ctx;

	(void)len;
	free(pub->last);
	pub->last = buf;
	pub->n++;
}

/* The sink's tick and finish with the pipeline's status at kernel time now. */
/* A tick at kernel time now, the latest record at record_ns. */
static void prom_tick_clock(struct sink *s, struct pipeline *pl, uint64_t record_ns, uint64_t now)
{
	struct pipeline_status st;

	pipeline_status(pl, &st);
	st.record_ns = record_ns;
	st.now_ns = now;
	s->tick(s->ctx, &st);
}

/* A tick after records up to now. */
static void prom_tick_at(struct sink *s, struct pipeline *pl, uint64_t now)
{
	prom_tick_clock(s, pl, now, now);
}

static void prom_finish_at(struct sink *s, struct pipeline *pl)
{
	struct pipeline_status st;

	pipeline_status(pl, &st);
	s->finish(s->ctx, &st);
}

TEST(test_publish_on_tick)
{
	struct pipeline_opts po = { .err = stderr };
	struct published pub = { 0 };
	struct pipeline pl;
	struct prom *p;
	struct sink s;

	if (!ASSERT_OK(pipeline_init(&pl, &po), "pipeline"))
		return;
	p = prom_new(publish, &pub);
	if (!ASSERT_OK_PTR(p, "prom_new"))
		goto out;
	s = prom_sink(p);
	ASSERT_EQ(pub.n, 1, "a snapshot before the first tick");
	ASSERT_TRUE(pub.last && has_line(pub.last, "tokenscope_events_lost_total 0"), "valid");

	feed(&s, &(struct req_spec){ "m", OUTCOME_OK, 0, NULL, 0, 1, -1, -1, -1 }, NULL);
	prom_tick_at(&s, &pl, BASE);
	ASSERT_EQ(pub.n, 2, "records came: published");
	ASSERT_LINE(pub.last,
		    "tokenscope_requests_total{model=\"m\",role=\"server\",outcome=\"ok\"} 1");

	/* more records within the period: held back while they keep coming ... */
	feed(&s, &(struct req_spec){ "m", OUTCOME_OK, 0, NULL, 0, 1, -1, -1, -1 }, NULL);
	prom_tick_at(&s, &pl, BASE + PROM_RENDER_PERIOD_NS / 2);
	ASSERT_EQ(pub.n, 2, "within the period");
	/* ... and published at the first quiet tick */
	prom_tick_at(&s, &pl, BASE + PROM_RENDER_PERIOD_NS / 2);
	ASSERT_EQ(pub.n, 3, "quiet tick");
	ASSERT_LINE(pub.last,
		    "tokenscope_requests_total{model=\"m\",role=\"server\",outcome=\"ok\"} 2");
	/* nothing new: nothing rendered */
	prom_tick_at(&s, &pl, BASE + PROM_RENDER_PERIOD_NS / 2);
	ASSERT_EQ(pub.n, 3, "idle");
	/* the kernel's lost-record count is a change on its own */
	pl.kstats[TS_STAT_LOST_EVENTS] = 7;
	prom_tick_at(&s, &pl, BASE + PROM_RENDER_PERIOD_NS / 2);
	ASSERT_EQ(pub.n, 4, "lost records");
	ASSERT_LINE(pub.last, "tokenscope_events_lost_total 7");
	/* failed reads of the process's memory, counted in the kernel, too */
	pl.kstats[TS_STAT_COPY_FAILED] = 3;
	prom_tick_at(&s, &pl, BASE + PROM_RENDER_PERIOD_NS / 2);
	ASSERT_EQ(pub.n, 5, "failed reads");
	ASSERT_LINE(pub.last, "tokenscope_dropped_total{what=\"copy_failed\"} 3");
	/* under steady load, once per period */
	for (int i = 1; i <= 10; i++)
		prom_tick_at(&s, &pl,
			     BASE + PROM_RENDER_PERIOD_NS / 2 + i * PROM_RENDER_PERIOD_NS / 10);
	ASSERT_EQ(pub.n, 6, "one per period");
	/* Live, the kernel clock moves on without records: still quiet, a change is published at
	 * once. */
	feed(&s, &(struct req_spec){ "m", OUTCOME_OK, 0, NULL, 0, 1, -1, -1, -1 }, NULL);
	prom_tick_clock(&s, &pl, BASE + PROM_RENDER_PERIOD_NS / 2 + PROM_RENDER_PERIOD_NS + 1,
			BASE + PROM_RENDER_PERIOD_NS / 2 + PROM_RENDER_PERIOD_NS + 1);
	ASSERT_EQ(pub.n, 6, "records within the period: held back");
	prom_tick_clock(&s, &pl, BASE + PROM_RENDER_PERIOD_NS / 2 + PROM_RENDER_PERIOD_NS + 1,
			BASE + PROM_RENDER_PERIOD_NS / 2 + PROM_RENDER_PERIOD_NS + 2);
	ASSERT_EQ(pub.n, 7, "the clock alone moved: a quiet tick, published");
	ASSERT_LINE(pub.last,
		    "tokenscope_requests_total{model=\"m\",role=\"server\",outcome=\"ok\"} 3");
	/* the end of tracing publishes the final state */
	feed(&s, &(struct req_spec){ "m", OUTCOME_LOST, 0, NULL, 0, 1, -1, -1, -1 }, NULL);
	prom_finish_at(&s, &pl);
	ASSERT_EQ(pub.n, 8, "finish");
	ASSERT_LINE(pub.last,
		    "tokenscope_requests_total{model=\"m\",role=\"server\",outcome=\"lost\"} 1");
out:
	prom_free(p);
	free(pub.last);
	pipeline_free(&pl);
}

/* TLS families appear once a connection carried TLS: by whether its plaintext was seen, and the
 * calls whose plaintext could not be placed. */
TEST(test_tls_families)
{
	struct pipeline_opts po = { .err = stderr };
	struct published pub = { 0 };
	struct pipeline pl;
	struct prom *p;
	struct sink s;

	if (!ASSERT_OK(pipeline_init(&pl, &po), "pipeline"))
		return;
	p = prom_new(publish, &pub);
	if (!ASSERT_OK_PTR(p, "prom_new"))
		goto out;
	s = prom_sink(p);
	ASSERT_TRUE(pub.last && !strstr(pub.last, "tokenscope_tls"), "no TLS families before");
	pl.conns.stats.tls_conns = 3;
	pl.conns.stats.tls_unread = 1;
	pl.kstats[TS_STAT_TLS_UNJOINED] = 2;
	prom_tick_at(&s, &pl, BASE);
	ASSERT_EQ(pub.n, 2, "published");
	ASSERT_LINE(pub.last, "# TYPE tokenscope_tls_connections_total counter");
	ASSERT_LINE(pub.last, "tokenscope_tls_connections_total{plaintext=\"seen\"} 2");
	ASSERT_LINE(pub.last, "tokenscope_tls_connections_total{plaintext=\"none\"} 1");
	ASSERT_LINE(pub.last, "tokenscope_tls_unjoined_calls_total 2");
out:
	prom_free(p);
	free(pub.last);
	pipeline_free(&pl);
}

TEST(test_parse_listen)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	socklen_t len;
	char host[INET6_ADDRSTRLEN];

	ASSERT_OK(httpd_parse_listen("9464", &ss, &len), "PORT");
	ASSERT_EQ(a4->sin_family, AF_INET, "family");
	ASSERT_EQ(ntohs(a4->sin_port), 9464, "port");
	ASSERT_STREQ(inet_ntop(AF_INET, &a4->sin_addr, host, sizeof(host)), "127.0.0.1",
		     "loopback by default");
	ASSERT_OK(httpd_parse_listen(":9464", &ss, &len), ":PORT");
	ASSERT_STREQ(inet_ntop(AF_INET, &a4->sin_addr, host, sizeof(host)), "127.0.0.1",
		     "loopback by default");
	ASSERT_OK(httpd_parse_listen("0.0.0.0:80", &ss, &len), "any address, when named");
	ASSERT_STREQ(inet_ntop(AF_INET, &a4->sin_addr, host, sizeof(host)), "0.0.0.0", "named");
	ASSERT_EQ(ntohs(a4->sin_port), 80, "port");
	ASSERT_OK(httpd_parse_listen("[::1]:9464", &ss, &len), "IPv6");
	ASSERT_EQ(a6->sin6_family, AF_INET6, "family");
	ASSERT_EQ(ntohs(a6->sin6_port), 9464, "port");
	ASSERT_EQ(len, sizeof(*a6), "length");
	ASSERT_OK(httpd_parse_listen("127.0.0.1:0", &ss, &len), "port 0: any free port");
	static const char *const bad[] = {
		"",	     ":",	  "127.0.0.1:",	  "65536",	  "-1",
		"+5",	     "host:9464", "1.2.3:80",	  "::1:9464",	  "[::1]",
		"[::1:9464", "9464x",	  "[1.2.3.4]:80", "1.2.3.4:80:80"
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (!ASSERT_EQ(httpd_parse_listen(bad[i], &ss, &len), -EINVAL, "malformed"))
			printf("  input: '%s'\n", bad[i]);
}

/* One HTTP/1.0 exchange with 127.0.0.1:port; the whole response in out. */
static int http_get(int port, const char *method, const char *path, char *out, size_t size)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	char req[128];
	size_t got = 0;
	ssize_t n;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: x\r\n\r\n", method, path);
	if (write(fd, req, n) != n) {
		close(fd);
		return -EIO;
	}
	while (got + 1 < size && (n = read(fd, out + got, size - 1 - got)) > 0)
		got += n;
	out[got] = 0;
	close(fd);
	return 0;
}

TEST(test_httpd)
{
	static const char metrics[] = "# TYPE x counter\nx 1\n";
	struct httpd *h = NULL, *h2 = NULL;
	char resp[4096], want[128], *errs = NULL;
	size_t errs_len = 0;
	FILE *err = open_memstream(&errs, &errs_len);
	const char *addr;
	int port, rc;

	rc = httpd_start(&h, "127.0.0.1:0", err);
	if (!ASSERT_OK(rc, "start on a free port"))
		goto out;
	addr = httpd_address(h);
	ASSERT_TRUE(!strncmp(addr, "127.0.0.1:", 10), "address");
	port = atoi(addr + 10);
	ASSERT_TRUE(port > 0, "the real port");
	httpd_publish(h, strdup(metrics), strlen(metrics));

	if (ASSERT_OK(http_get(port, "GET", "/metrics", resp, sizeof(resp)), "GET /metrics")) {
		ASSERT_TRUE(!strncmp(resp, "HTTP/1.", 7) && strstr(resp, " 200 "), "200");
		ASSERT_TRUE(strstr(resp, "Content-Type: text/plain; version=0.0.4"), "type");
		ASSERT_TRUE(strstr(resp, "\r\n\r\n# TYPE x counter\nx 1\n"), "the snapshot");
	}
	/* a new snapshot replaces the old one */
	httpd_publish(h, strdup("x 2\n"), 4);
	if (ASSERT_OK(http_get(port, "GET", "/metrics", resp, sizeof(resp)), "GET again"))
		ASSERT_TRUE(strstr(resp, "\r\n\r\nx 2\n"), "the new snapshot");
	if (ASSERT_OK(http_get(port, "GET", "/", resp, sizeof(resp)), "GET /"))
		ASSERT_TRUE(strstr(resp, " 404 "), "404");
	if (ASSERT_OK(http_get(port, "POST", "/metrics", resp, sizeof(resp)), "POST"))
		ASSERT_TRUE(strstr(resp, " 405 "), "405");

	/* the same port again: a clear message */
	snprintf(want, sizeof(want), "127.0.0.1:%d", port);
	rc = httpd_start(&h2, want, err);
	ASSERT_EQ(rc, -EADDRINUSE, "busy port");
	ASSERT_TRUE(h2 == NULL, "no server");
	fflush(err);
	snprintf(want, sizeof(want),
		 "tokenscope: cannot listen on 127.0.0.1:%d: Address already in use\n", port);
	ASSERT_STREQ(errs, want, "message");
out:
	httpd_stop(h);
	httpd_stop(h2);
	fclose(err);
	free(errs);
}

/* tokenscope_request_socket_wait_seconds: every outcome, only where the arrival is known. */
TEST(test_socket_wait)
{
	static const uint64_t toks[] = { 30, 40 };
	struct prom *p = prom_new(NULL, NULL);
	struct sink s;
	char *t = NULL;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	s = prom_sink(p);
	wait_ms = 3;
	feed(&s, &(struct req_spec){ "llama", OUTCOME_OK, 10, toks, 2, 50, -1, -1, -1 }, NULL);
	wait_ms = 30;
	feed(&s, &(struct req_spec){ "llama", OUTCOME_ABORTED, 10, toks, 1, 35, -1, -1, -1 }, NULL);
	wait_ms = 0;
	feed(&s, &(struct req_spec){ "llama", OUTCOME_OK, 10, toks, 2, 50, -1, -1, -1 }, NULL);
	t = render(p);
	if (!t)
		goto out;
	ASSERT_LINE(t, "# TYPE tokenscope_request_socket_wait_seconds histogram");
	ASSERT_LINE(t, "tokenscope_request_socket_wait_seconds_bucket{model=\"llama\",role="
		       "\"server\",le=\"0.005\"} 1");
	ASSERT_LINE(t, "tokenscope_request_socket_wait_seconds_bucket{model=\"llama\",role="
		       "\"server\",le=\"0.04\"} 2");
	ASSERT_LINE(
	    t, "tokenscope_request_socket_wait_seconds_sum{model=\"llama\",role=\"server\"} 0.033");
	ASSERT_LINE(
	    t, "tokenscope_request_socket_wait_seconds_count{model=\"llama\",role=\"server\"} 2");
out:
	free(t);
	prom_free(p);
}

int main(void)
{
	return check_run_all();
}
