// SPDX-License-Identifier: MIT
/*
 * Strings from outside into JSON: the JSON writer (user/lib/jsonw.c) with input strings as keys
 * and values, a request line (user/sinks/output.c, JSON and text) whose model, path, method,
 * connection, container and Kubernetes names come from the input, and the OTLP encoder
 * (user/sinks/otlp.c) on a span of that request with the service and host names from the input
 * too.
 *
 * Input: up to JSON_FUZZ_STRINGS strings, each ended by a NUL (or the end of the input).
 *
 * Property: each document is strict UTF-8 (checked here byte by byte: an OpenTelemetry
 * collector refuses a whole batch over one bad byte) and strict JSON (cJSON, nothing after
 * the value), and a string that was valid UTF-8 reads back exactly as it went in; the text
 * line is terminal text as fuzz_outputs.h wants it.
 */
#include "fuzz_outputs.h"
#include "lib/jsonw.h"
#include "sinks/otlp.h"
#include "sinks/output.h"
#include "pipeline/request.h"

#define JSON_FUZZ_STRINGS 8
#define JSON_FUZZ_STRING_MAX 512
#define JSON_FUZZ_T0 1000000000ull

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A string that was valid UTF-8 going in must read back the same. */
FUZZ_CHECKER static void same(const char *what, const cJSON *v, const char *want)
{
	if (!fuzz_utf8_valid((const uint8_t *)want, strlen(want)))
		return;
	FUZZ_CHECK(cJSON_IsString(v) && !strcmp(v->valuestring, want),
		   "%s \"%s\" read back as \"%s\"", what, want,
		   cJSON_IsString(v) ? v->valuestring : "(not a string)");
}

FUZZ_CHECKER static void same_key(const char *what, const cJSON *v, const char *want)
{
	if (!fuzz_utf8_valid((const uint8_t *)want, strlen(want)))
		return;
	FUZZ_CHECK(v && v->string && !strcmp(v->string, want), "%s \"%s\" read back as \"%s\"",
		   what, want, v && v->string ? v->string : "(none)");
}

static void fuzz_jsonw(char **s)
{
	struct jsonw w;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cJSON *j, *c;

	if (!f)
		abort();
	jsonw_begin(&w, f);
	jsonw_str(&w, s[0], s[1]);
	jsonw_arr_begin(&w, "a");
	jsonw_str(&w, NULL, s[2]);
	jsonw_str(&w, NULL, s[3]);
	jsonw_arr_end(&w);
	jsonw_obj_begin(&w, s[4]);
	jsonw_str(&w, "k", s[5]);
	jsonw_u64(&w, "u", UINT64_MAX);
	jsonw_i64(&w, "i", INT64_MIN);
	jsonw_obj_end(&w);
	jsonw_end(&w);
	if (fclose(f))
		abort();
	j = fuzz_check_json("jsonw", buf, len);
	c = j->child;
	same_key("key", c, s[0]);
	same("value", c, s[1]);
	c = c ? c->next : NULL;
	same("array item", c ? cJSON_GetArrayItem(c, 0) : NULL, s[2]);
	same("array item", c ? cJSON_GetArrayItem(c, 1) : NULL, s[3]);
	c = c ? c->next : NULL;
	same_key("object key", c, s[4]);
	same("nested value", c ? c->child : NULL, s[5]);
	cJSON_Delete(j);
	free(buf);
}

static struct request *make_request(char **s)
{
	struct request *r = request_new(7, 1, 0, s[0]);

	if (!r)
		abort();
	snprintf(r->method, sizeof(r->method), "%s", s[1]);
	snprintf(r->path, sizeof(r->path), "%s", s[2]);
	snprintf(r->info.model, sizeof(r->info.model), "%s", s[3]);
	/* Where it runs: its JSON k8s object, its OTLP resource, from the input too. */
	snprintf(r->workload.container_id, sizeof(r->workload.container_id), "%s", s[4]);
	snprintf(r->workload.k8s_namespace, sizeof(r->workload.k8s_namespace), "%s", s[5]);
	snprintf(r->workload.k8s_pod, sizeof(r->workload.k8s_pod), "%s", s[6]);
	snprintf(r->workload.k8s_container, sizeof(r->workload.k8s_container), "%s", s[7]);
	r->status = 500;
	r->outcome = OUTCOME_HTTP_ERROR; /* not ok: OTLP exports it whatever the sampling */
	r->streamed = true;
	r->format = FMT_OPENAI_CHAT;
	r->arrival_ns = JSON_FUZZ_T0;
	request_add_token(r, JSON_FUZZ_T0 + 10);
	request_add_token(r, JSON_FUZZ_T0 + 20);
	r->end_ns = JSON_FUZZ_T0 + 30;
	r->prompt_tokens = r->completion_tokens = r->cached_tokens = -1;
	return r;
}

static void fuzz_output(const struct request *r, const struct request_metrics *m,
			const struct gpu_attribution *ga)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cJSON *j;

	if (!f)
		abort();
	output_json(f, r, m, ga, true);
	if (fclose(f))
		abort();
	j = fuzz_check_json("output_json", buf, len);
	if (r->info.model[0]) /* else null */
		same("model", cJSON_GetObjectItemCaseSensitive(j, "model"), r->info.model);
	same("path", cJSON_GetObjectItemCaseSensitive(j, "path"), r->path);
	cJSON_Delete(j);
	free(buf);

	/* The text line: its method and peer straight from the input, never cleaned before. */
	buf = NULL;
	len = 0;
	f = open_memstream(&buf, &len);
	if (!f)
		abort();
	for (int gpu = 0; gpu < 2; gpu++) {
		output_text_header(f, gpu);
		output_text(f, r, m, ga, gpu);
	}
	if (fclose(f))
		abort();
	fuzz_check_text("output_text", buf, len, NULL);
	free(buf);
}

static void fuzz_otlp(const struct request *r, const struct request_metrics *m,
		      const struct gpu_attribution *ga, char **s)
{
	struct otlp_opts opts;
	struct otlp_span *spans[4];
	struct otlp o;
	struct sink sk;
	char *buf = NULL;
	size_t n, len = 0;

	otlp_opts_default(&opts);
	opts.endpoint = NULL; /* spans stay queued for otlp_take */
	opts.service_name = s[5];
	opts.hostname = s[6];
	opts.seed = 1;
	opts.sample_ratio = 1;
	opts.queue_max = opts.batch_max = 4;
	if (otlp_init(&o, &opts))
		abort();
	if (s[7][0])
		otlp_set_source(&o, 0, s[7]);
	sk = otlp_sink(&o);
	sk.request(sk.ctx, r, m, ga);
	n = otlp_take(&o, spans, 4);
	FUZZ_CHECK(n == 1, "%zu spans queued for one request", n);
	if (otlp_encode(&o, spans, n, &buf, &len) == 0) {
		cJSON_Delete(fuzz_check_json("otlp_encode", buf, len));
		free(buf);
	}
	for (size_t i = 0; i < n; i++)
		otlp_span_free(spans[i]);
	otlp_close(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	struct gpu_attribution ga = { 1, 2, 3, 2, 1, "by time", -1, -1, NULL, .has_steps = false };
	struct request_metrics m;
	char *s[JSON_FUZZ_STRINGS];
	struct request *r;

	for (int i = 0; i < JSON_FUZZ_STRINGS; i++)
		s[i] = fuzz_str(&in, JSON_FUZZ_STRING_MAX);
	fuzz_jsonw(s);
	r = make_request(s);
	request_metrics(r, &m);
	fuzz_output(r, &m, &ga);
	fuzz_otlp(r, &m, &ga, s);
	request_free(r);
	for (int i = 0; i < JSON_FUZZ_STRINGS; i++)
		free(s[i]);
	return 0;
}
