// SPDX-License-Identifier: MIT
/*
 * The head fields a request's head gives the pipeline, as an HTTP/1.1 head or an HTTP/2 header
 * block does (http.c, h2.c): user/pipeline/tracectx.c's tracectx_field, then tracectx_finish;
 * slo.c's slo_head_field (llm-d's objectives) and labels.c's req_labels_header (--label's
 * header fields) on the fields tracectx does not take; each value from a buffer of exactly its
 * bytes, so a read past them is caught.
 *
 * Input: fields, each
 *   u8  which name: 0 traceparent, 1 tracestate, 2 x-request-id, 3 an upper-case spelling of
 *       the three in turn, 7 x-llm-d-slo-ttft-ms, 8 X-LLM-D-SLO-TPOT-MS, 9 x-tenant-id,
 *       anything else a name no one reads
 *   u16 the value's length (cut to what is left)
 *   ... the value
 *
 * Properties: a valid traceparent has no all-zero id and hexes back to 55 characters that
 * parse again to the same ids; tracestate is NUL-terminated within its bound, empty unless the
 * traceparent is valid, printable ASCII with no ", " at its start or end; x-request-id is
 * NUL-terminated within its bound; an objective from a head is above 0 and at most
 * DURATION_MAX_S, and one that came is kept unless bad is said; a label's value is
 * NUL-terminated within its bound and valid UTF-8 with no control character.
 */
#include "fuzz.h"
#include "lib/duration.h"
#include "lib/utf8.h"
#include "pipeline/labels.h"
#include "pipeline/slo.h"
#include "pipeline/tracectx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether s is well-formed UTF-8 of printable characters only (what utf8_clean makes). */
static bool clean_text(const char *s)
{
	size_t n = strlen(s);

	for (size_t i = 0; i < n;) {
		size_t k = utf8_len((const unsigned char *)s + i, n - i);

		if (!k || !utf8_printable((const unsigned char *)s + i, k))
			return false;
		i += k;
	}
	return true;
}

static const char *const names[] = { "traceparent",	      "tracestate",
				     "x-request-id",	      "TraceParent",
				     "TRACESTATE",	      "X-Request-Id",
				     "content-type",	      "x-llm-d-slo-ttft-ms",
				     "X-LLM-D-SLO-TPOT-MS", "x-tenant-id" };
#define NAMES (sizeof(names) / sizeof(names[0]))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	struct trace_ctx c;
	struct slo_head sh = { 0 };
	struct req_label_set set = { 0 };
	struct req_labels lv = { 0 };
	char msg[256];
	bool slo_came = false;
	int nfields = 0;

	req_labels_parse(&set, "tenant=header:X-Tenant-Id", msg, sizeof(msg));
	tracectx_init(&c);
	while (in.n && nfields++ < 64) {
		uint8_t which = fuzz_u8(&in);
		const char *name = names[which < NAMES ? which : 6];
		size_t len = fuzz_u16(&in);
		char *val;

		if (len > in.n)
			len = in.n;
		val = malloc(len ? len : 1);
		if (!val)
			abort();
		memcpy(val, in.p, len);
		if (!tracectx_field(&c, name, strlen(name), val, len) &&
		    !slo_head_field(&sh, name, strlen(name), val, len))
			req_labels_header(&set, &lv, name, strlen(name), val, len);
		slo_came |= which == 7 || which == 8;
		free(val);
		in.p += len;
		in.n -= len;
	}
	tracectx_finish(&c);
	if (c.tp.valid) {
		char tp[56], hex[33];
		struct trace_parent again;
		bool zero_t = true, zero_p = true;

		for (int i = 0; i < TRACECTX_TRACE_ID_LEN; i++)
			zero_t &= !c.tp.trace_id[i];
		for (int i = 0; i < TRACECTX_SPAN_ID_LEN; i++)
			zero_p &= !c.tp.parent_id[i];
		FUZZ_CHECK(!zero_t && !zero_p, "a valid traceparent with an all-zero id");
		memcpy(tp, "00-", 3);
		tracectx_hex(hex, c.tp.trace_id, TRACECTX_TRACE_ID_LEN);
		memcpy(tp + 3, hex, 32);
		tp[35] = '-';
		tracectx_hex(hex, c.tp.parent_id, TRACECTX_SPAN_ID_LEN);
		memcpy(tp + 36, hex, 16);
		tp[52] = '-';
		tracectx_hex(hex, &c.tp.flags, 1);
		memcpy(tp + 53, hex, 2);
		tp[55] = '\0';
		FUZZ_CHECK(tracectx_parse_traceparent(tp, 55, &again) == 0 &&
			       tracectx_same(&again, &c.tp),
			   "the ids do not parse back: %s", tp);
	}
	for (int k = 0; k < SLO_METRICS; k++)
		FUZZ_CHECK(sh.limit_ns[k] >= 0 && sh.limit_ns[k] <= (int64_t)(DURATION_MAX_S * 1e9),
			   "an objective of %lld ns", (long long)sh.limit_ns[k]);
	FUZZ_CHECK(!slo_came || sh.bad || sh.limit_ns[SLO_TTFT] || sh.limit_ns[SLO_TPOT],
		   "an objective came, none kept and none said bad");
	FUZZ_CHECK(memchr(lv.v[0], 0, sizeof(lv.v[0])) != NULL, "label value not terminated");
	FUZZ_CHECK(clean_text(lv.v[0]), "label value not clean UTF-8: %s", lv.v[0]);
	FUZZ_CHECK(memchr(c.state, 0, sizeof(c.state)) != NULL, "tracestate not terminated");
	FUZZ_CHECK(c.tp.valid || !c.state[0], "tracestate kept without a valid traceparent");
	for (const char *p = c.state; *p; p++)
		FUZZ_CHECK(*p >= 0x20 && *p <= 0x7e, "tracestate byte %#x", (unsigned char)*p);
	if (c.state[0])
		FUZZ_CHECK(c.state[0] != ',' && c.state[strlen(c.state) - 1] != ',' &&
			       c.state[0] != ' ' && c.state[strlen(c.state) - 1] != ' ',
			   "tracestate not trimmed: %s", c.state);
	FUZZ_CHECK(memchr(c.request_id, 0, sizeof(c.request_id)) != NULL,
		   "x-request-id not terminated");
	return 0;
}
