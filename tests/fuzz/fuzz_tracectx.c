// SPDX-License-Identifier: MIT
/*
 * user/pipeline/tracectx.c: header fields of a request fed to tracectx_field, as an HTTP/1.1
 * head or an HTTP/2 header block gives them, then tracectx_finish; each value from a buffer of
 * exactly its bytes, so a read past them is caught.
 *
 * Input: fields, each
 *   u8  which name: 0 traceparent, 1 tracestate, 2 x-request-id, 3 an upper-case spelling of
 *       the three in turn, anything else a name no one reads
 *   u16 the value's length (cut to what is left)
 *   ... the value
 *
 * Properties: a valid traceparent has no all-zero id and hexes back to 55 characters that
 * parse again to the same ids; tracestate is NUL-terminated within its bound, empty unless the
 * traceparent is valid, printable ASCII with no ", " at its start or end; x-request-id is
 * NUL-terminated within its bound.
 */
#include "fuzz.h"
#include "pipeline/tracectx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = { "traceparent", "tracestate",   "x-request-id", "TraceParent",
				     "TRACESTATE",  "X-Request-Id", "content-type" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	struct trace_ctx c;
	int nfields = 0;

	tracectx_init(&c);
	while (in.n && nfields++ < 64) {
		uint8_t which = fuzz_u8(&in);
		const char *name = names[which < 6 ? which : 6];
		size_t len = fuzz_u16(&in);
		char *val;

		if (len > in.n)
			len = in.n;
		val = malloc(len ? len : 1);
		if (!val)
			abort();
		memcpy(val, in.p, len);
		tracectx_field(&c, name, strlen(name), val, len);
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
