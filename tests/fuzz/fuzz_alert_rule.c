// SPDX-License-Identifier: MIT
/*
 * The --alert rule parser (alert_parse, user/sinks/alert.c) on any text, and an accepted rule added
 * to an alert set, evaluated over a few finished requests and rendered for Prometheus.
 *
 * Input: the rule, up to its first NUL.
 *
 * Properties: a refused rule comes with a terminated message; an accepted one has a known
 * metric and operator, a finite threshold that is not negative, its text terminated inside
 * its buffer, and survives being evaluated (UBSan checks the conversions of the threshold and
 * of `for` into nanoseconds).
 */
#include <math.h>

#include "sinks/alert.h"
#include "pipeline/gpu.h"
#include "fuzz.h"
#include "pipeline/request.h"

#define ALERT_FUZZ_T0 1000000000000ull
#define ALERT_FUZZ_S 1000000000ull

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void evaluate(const struct alert_rule *r)
{
	/* The pipeline always passes an attribution; here one that says nothing is known. */
	const struct gpu_attribution ga = {
		-1, -1, -1, -1, -1, "no GPU steps", -1, -1, NULL, .has_steps = false
	};
	struct alert_set a;
	struct sink s;

	if (alert_init(&a, fuzz_devnull(), NULL))
		abort();
	FUZZ_CHECK(alert_add(&a, r) == 0, "an accepted rule was not added");
	s = alert_sink(&a);
	for (int i = 0; i < 3; i++) {
		struct request *q = request_new(1, 1, i, "c");
		struct request_metrics m;
		uint64_t end;

		if (!q)
			abort();
		q->status = 200;
		q->outcome = i == 2 ? OUTCOME_ABORTED : OUTCOME_OK;
		q->arrival_ns = ALERT_FUZZ_T0 + i * ALERT_FUZZ_S;
		request_add_token(q, q->arrival_ns + 1000000);
		request_add_token(q, q->arrival_ns + 3000000);
		q->end_ns = q->arrival_ns + 4000000;
		q->prompt_tokens = q->completion_tokens = q->cached_tokens = -1;
		request_metrics(q, &m);
		s.request(s.ctx, q, &m, &ga);
		end = q->end_ns;
		request_free(q);
		alert_evaluate(&a, end + ALERT_FUZZ_S);
	}
	alert_evaluate(&a, ALERT_FUZZ_T0 + 3600 * ALERT_FUZZ_S);
	alert_render_prom(&a, fuzz_devnull());
	alert_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	char *text = fuzz_str(&in, size);
	struct alert_rule r;
	char err[512];

	err[0] = 0;
	if (alert_parse(text, &r, err, sizeof(err))) {
		FUZZ_CHECK(memchr(err, 0, sizeof(err)) && err[0], "refused without a message");
	} else {
		FUZZ_CHECK(r.metric < AM_MAX, "metric %d", r.metric);
		FUZZ_CHECK(r.op >= AO_GT && r.op <= AO_LE, "operator %d", r.op);
		FUZZ_CHECK(isfinite(r.threshold) && r.threshold >= 0, "\"%s\": threshold %g", text,
			   r.threshold);
		FUZZ_CHECK(memchr(r.text, 0, sizeof(r.text)), "text not terminated");
		evaluate(&r);
	}
	free(text);
	return 0;
}
