// SPDX-License-Identifier: MIT
/*
 * user/pipeline/reqbody.c: reqbody_parse on a body read whole (captured == total: lib/json, then
 * the scanner when lib/json refuses it) and on the same body cut by the capture limit (the
 * scanner), each time from a buffer of exactly the captured bytes, so a read past them is caught.
 *
 * Input:
 *   u16 cut      bytes the capture limit cut off the end, modulo the body's length + 1
 *   ... body
 *
 * Properties: the model is a NUL-terminated string inside its buffer, stream is -1, 0 or 1,
 * max_tokens -1 or a count, the join keys in their ranges and buffers, and every call returns (the
 * scanner's loop must make progress on any bytes: libFuzzer's -timeout catches one that does not).
 */
#include "fuzz.h"
#include "pipeline/labels.h"
#include "pipeline/reqbody.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_info(const struct req_info *r, const char *what)
{
	const struct req_disagg *d = &r->disagg;

	FUZZ_CHECK(memchr(r->model, 0, sizeof(r->model)) != NULL,
		   "%s: model not terminated inside its %zu bytes", what, sizeof(r->model));
	FUZZ_CHECK(r->stream >= -1 && r->stream <= 1, "%s: stream %d", what, r->stream);
	FUZZ_CHECK(r->max_tokens >= -1, "%s: max_tokens %lld", what, (long long)r->max_tokens);
	/* The join keys: ports 0..65535 or -1, a room only when it is a count, ids terminated. */
	FUZZ_CHECK(d->remote_port >= -1 && d->remote_port <= 65535 && d->bootstrap_port >= -1 &&
		       d->bootstrap_port <= 65535,
		   "%s: ports %d %d", what, d->remote_port, d->bootstrap_port);
	FUZZ_CHECK(!d->room_set || d->bootstrap_room >= 0, "%s: room %lld", what,
		   (long long)d->bootstrap_room);
	FUZZ_CHECK(d->do_remote_prefill >= -1 && d->do_remote_prefill <= 1 &&
		       d->do_remote_decode >= -1 && d->do_remote_decode <= 1,
		   "%s: do_remote_*", what);
	FUZZ_CHECK(memchr(d->remote_engine_id, 0, sizeof(d->remote_engine_id)) &&
		       memchr(d->remote_request_id, 0, sizeof(d->remote_request_id)) &&
		       memchr(d->remote_host, 0, sizeof(d->remote_host)) &&
		       memchr(d->bootstrap_host, 0, sizeof(d->bootstrap_host)),
		   "%s: a join key not terminated", what);
}

static void parse_copy(const uint8_t *body, size_t captured, size_t total, struct req_info *out)
{
	/* malloc(0) may give NULL: one byte more, never read, keeps the pointer real. */
	uint8_t *buf = malloc(captured ? captured : 1);

	if (!buf)
		abort();
	memcpy(buf, body, captured);
	reqbody_parse(buf, captured, total, out);
	free(buf);
}

/* --label's body values (labels.c) of the whole body: terminated in their bounds, and clean
 * text; a path through a prompt field can never have been given (req_labels_parse refuses
 * it). */
static void check_labels(const uint8_t *body, size_t len)
{
	static const char *const specs[] = { "user=body:user", "tenant=body:metadata.tenant",
					     "deep=body:a.b.c.d", "n=body:n" };
	struct req_label_set set = { 0 };
	struct req_labels lv = { 0 };
	uint8_t *buf = malloc(len ? len : 1);
	char msg[256];

	if (!buf)
		abort();
	memcpy(buf, body, len);
	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
		FUZZ_CHECK(req_labels_parse(&set, specs[i], msg, sizeof(msg)) == 0, "%s", msg);
	FUZZ_CHECK(req_labels_parse(&set, "p=body:messages.0.content", msg, sizeof(msg)) != 0,
		   "a prompt path taken");
	req_labels_body(&set, &lv, buf, len);
	for (uint32_t i = 0; i < set.n; i++) {
		FUZZ_CHECK(memchr(lv.v[i], 0, sizeof(lv.v[i])) != NULL, "label %u not terminated", i);
		FUZZ_CHECK(lv.set[i] || !lv.v[i][0], "label %u has a value but is not set", i);
		for (const char *p = lv.v[i]; *p; p++)
			FUZZ_CHECK((unsigned char)*p >= 0x20 && *p != 0x7f, "label %u control byte", i);
	}
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	size_t cut = fuzz_u16(&in) % (in.n + 1), total = in.n;
	struct req_info whole, part, over;

	parse_copy(in.p, total, total, &whole);
	check_info(&whole, "whole body");
	check_labels(in.p, total);
	parse_copy(in.p, total - cut, total, &part);
	check_info(&part, "cut body");
	/* More captured than the body holds (bytes of a pipelined request behind it). */
	parse_copy(in.p, total, total - cut, &over);
	check_info(&over, "body with bytes behind it");
	return 0;
}
