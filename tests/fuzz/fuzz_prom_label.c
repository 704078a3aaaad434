// SPDX-License-Identifier: MIT
/*
 * Prometheus label values from outside (user/sinks/prom.c): the request body's model and the
 * server's container id and pod (namespace and name) label the request series, an alert rule's text
 * labels tokenscope_alert_firing. The escaping is static in prom.c, so it is driven through the
 * sink: finished requests with those labels, then prom_render.
 *
 * Input:
 *   u8  flags    bit 0: --by-process (a pid label too); bit 1: a second request on another
 *                process with the second model; bit 2: --no-pod-labels
 *   then NUL-ended strings: model, container, second model, alert rule
 *
 * Property: the exposition is strict UTF-8 and every sample line parses as the text format
 * 0.0.4 wants it: a metric name, label pairs name="value" whose values hold no raw newline,
 * double quote or backslash except as the escapes \\ \" \n, then a value; and a model that
 * was printable UTF-8 reads back from its label exactly.
 */
#include "sinks/alert.h"
#include "fuzz_outputs.h"
#include "sinks/prom.h"
#include "pipeline/request.h"

#define PROM_FUZZ_STRING_MAX 256
#define PROM_FUZZ_T0 1000000000ull

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Printable UTF-8: what a label must carry unchanged (control bytes may be replaced). */
FUZZ_CHECKER static bool printable(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return false;
	return fuzz_utf8_valid((const uint8_t *)s, strlen(s));
}

static void finish_request(const struct sink *s, uint32_t pid, const char *model,
			   const char *container)
{
	struct request *r = request_new(pid, pid, 0, "c");
	struct request_metrics m;

	if (!r)
		abort();
	snprintf(r->info.model, sizeof(r->info.model), "%s", model);
	/* The container id and, from the same string, the pod's names: labels all three. */
	snprintf(r->workload.container_id, sizeof(r->workload.container_id), "%s", container);
	snprintf(r->workload.k8s_namespace, sizeof(r->workload.k8s_namespace), "%s", container);
	snprintf(r->workload.k8s_pod, sizeof(r->workload.k8s_pod), "%s", container);
	r->status = 200;
	r->outcome = OUTCOME_OK;
	r->streamed = true;
	r->arrival_ns = PROM_FUZZ_T0;
	request_add_token(r, PROM_FUZZ_T0 + 1000);
	request_add_token(r, PROM_FUZZ_T0 + 2000);
	r->end_ns = PROM_FUZZ_T0 + 3000;
	r->prompt_tokens = r->completion_tokens = r->cached_tokens = -1;
	s->request_start(s->ctx, r);
	request_metrics(r, &m);
	s->request(s->ctx, r, &m, NULL);
	request_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	uint8_t flags = fuzz_u8(&in);
	char *model = fuzz_str(&in, PROM_FUZZ_STRING_MAX);
	char *container = fuzz_str(&in, PROM_FUZZ_STRING_MAX);
	char *model2 = fuzz_str(&in, PROM_FUZZ_STRING_MAX);
	char *rule = fuzz_str(&in, PROM_FUZZ_STRING_MAX);
	char label[REQBODY_MODEL_MAX], err[512], *buf = NULL;
	struct prom *p = prom_new(NULL, NULL);
	struct alert_set alerts;
	struct alert_rule ar;
	bool alerting = false;
	struct fuzz_prom_want w = { .label = "model" };
	struct sink s;
	size_t len = 0;

	if (!p)
		abort();
	prom_set_by_process(p, flags & 1);
	prom_set_pod_labels(p, !(flags & 4));
	s = prom_sink(p);
	/* The label is the model as the request record holds it (cut to its buffer). */
	snprintf(label, sizeof(label), "%s", model[0] ? model : "unknown");
	w.value = printable(label) ? label : NULL;
	finish_request(&s, 100, model, container);
	if (flags & 2)
		finish_request(&s, 101, model2, "");
	if (alert_parse(rule, &ar, err, sizeof(err)) == 0) {
		if (alert_init(&alerts, fuzz_devnull(), NULL) || alert_add(&alerts, &ar))
			abort();
		alerting = true;
		prom_set_extra(p, alert_render_prom, &alerts);
	}
	FUZZ_CHECK(prom_render(p, &buf, &len) == 0, "prom_render failed");
	fuzz_check_prom(buf, len, &w);
	FUZZ_CHECK(!w.value || w.seen, "no model label found");
	free(buf);
	if (alerting)
		alert_free(&alerts);
	prom_free(p);
	free(model);
	free(container);
	free(model2);
	free(rule);
	return 0;
}
