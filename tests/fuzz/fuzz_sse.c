// SPDX-License-Identifier: MIT
/*
 * user/pipeline/sse.c, SSE and NDJSON, fed one or two response bodies split where the input says,
 * with gaps, each ended by sse_finish.
 *
 * Input:
 *   u8  flags    bit 0: NDJSON (else SSE); bit 1: control bytes with the top bit set are gaps;
 *                bit 2: two bodies through one parser (split at the u16 that follows);
 *                bits 3-5: k, a budget (sse_set_budget) of 256 << 2k bytes (0: none)
 *   u16 split    (only with bit 2) where the first body ends, modulo the payload's length
 *   u8  nctl     control bytes that follow (modulo SSE_FUZZ_CTL_MAX), used in turn: a gap of
 *                (v & 0x7f) + 1 bytes (dropped from the body) or a feed of v bytes (0: the rest)
 *   u8  ctl[nctl]
 *   ... payload
 *
 * Properties: every frame is terminated inside its buffers, within the size limits, with no
 * line end where the format allows none, and with the ts of the call that completed it; no
 * frame comes out of a gap; the frame counter counts the callbacks; the budget is never
 * overdrawn and whole again after sse_free; and a body without gaps (nor refusals of the
 * budget) gives exactly the frames of a plain reference parser written here from the WHATWG
 * rules (sse.h: an unterminated last event is reported at the end, and a BOM may start NDJSON
 * too).
 */
#include "fuzz.h"
#include "pipeline/sse.h"

#define SSE_FUZZ_CTL_MAX 32
#define SSE_FUZZ_FINISH_TS 1000000000ull
#define SSE_FUZZ_BUDGET_UNIT 256
static const uint8_t sse_fuzz_bom[] = { 0xef, 0xbb, 0xbf };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct frame_copy {
	uint8_t *event, *data;
	size_t event_len, data_len;
};

struct frame_list {
	struct frame_copy *f;
	size_t n, cap;
};

static void list_add(struct frame_list *l, const void *ev, size_t elen, const void *d, size_t dlen)
{
	struct frame_copy *c;

	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		l->f = realloc(l->f, l->cap * sizeof(*l->f));
		if (!l->f)
			abort();
	}
	c = &l->f[l->n++];
	c->event = malloc(elen + 1);
	c->data = malloc(dlen + 1);
	if (!c->event || !c->data)
		abort();
	memcpy(c->event, ev, elen);
	memcpy(c->data, d, dlen);
	c->event_len = elen;
	c->data_len = dlen;
}

static void list_free(struct frame_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->f[i].event);
		free(l->f[i].data);
	}
	free(l->f);
	memset(l, 0, sizeof(*l));
}

/* ---- the reference: whole bodies, no gaps ---- */

struct ref_sse {
	struct frame_list *out;
	uint8_t *data;
	size_t data_len, data_lines;
	uint8_t event[SSE_EVENT_MAX];
	size_t event_len;
	bool oversize;
};

static void ref_append(struct ref_sse *r, const uint8_t *p, size_t n)
{
	if (r->oversize)
		return;
	if (r->data_len + n > SSE_FRAME_MAX) {
		r->oversize = true;
		return;
	}
	memcpy(r->data + r->data_len, p, n);
	r->data_len += n;
}

static void ref_dispatch(struct ref_sse *r)
{
	if (!r->oversize && r->data_lines)
		list_add(r->out, r->event, r->event_len, r->data, r->data_len);
	r->data_len = r->data_lines = r->event_len = 0;
	r->oversize = false;
}

static void ref_sse_line(struct ref_sse *r, const uint8_t *l, size_t n)
{
	const uint8_t *colon = memchr(l, ':', n);
	size_t name = colon ? (size_t)(colon - l) : n;
	const uint8_t *v = colon ? colon + 1 : l + n;
	size_t vlen = (size_t)(l + n - v);

	if (!n) {
		ref_dispatch(r);
		return;
	}
	if (vlen && v[0] == ' ') {
		v++;
		vlen--;
	}
	if (name == 4 && !memcmp(l, "data", 4)) {
		if (r->data_lines++)
			ref_append(r, (const uint8_t *)"\n", 1);
		ref_append(r, v, vlen);
	} else if (name == 5 && !memcmp(l, "event", 5)) {
		r->event_len = 0;
		if (vlen > SSE_EVENT_MAX) {
			r->oversize = true;
		} else if (!r->oversize) {
			memcpy(r->event, v, vlen);
			r->event_len = vlen;
		}
	}
}

static void ref_parse(bool ndjson, const uint8_t *b, size_t n, struct frame_list *out)
{
	struct ref_sse r = { .out = out };
	size_t i = 0;

	r.data = malloc(SSE_FRAME_MAX + 1);
	if (!r.data)
		abort();
	if (n >= sizeof(sse_fuzz_bom) && !memcmp(b, sse_fuzz_bom, sizeof(sse_fuzz_bom)))
		i = sizeof(sse_fuzz_bom);
	while (i < n) {
		size_t s = i, e;

		if (ndjson) {
			while (i < n && b[i] != '\n')
				i++;
			e = i;
			i += i < n;
			if (e - s > SSE_FRAME_MAX)
				continue;
			while (s < e &&
			       (b[s] == 0x1e || b[s] == ' ' || b[s] == '\t' || b[s] == '\r'))
				s++;
			while (e > s && (b[e - 1] == '\r' || b[e - 1] == ' ' || b[e - 1] == '\t'))
				e--;
			if (e > s)
				list_add(out, "", 0, b + s, e - s);
			continue;
		}
		while (i < n && b[i] != '\r' && b[i] != '\n')
			i++;
		e = i;
		if (i < n)
			i += b[i] == '\r' && i + 1 < n && b[i + 1] == '\n' ? 2 : 1;
		ref_sse_line(&r, b + s, e - s);
	}
	if (!ndjson)
		ref_dispatch(&r); /* sse_finish reports an unterminated last event */
	free(r.data);
}

/* ---- the parser under test ---- */

struct sctx {
	struct sse_parser *p;
	struct budget budget;
	bool ndjson, in_feed;
	uint64_t ts, fed, calls;
	struct frame_list got;
};

static void on_frame(void *ctx, const struct sse_frame *f, uint64_t ts)
{
	struct sctx *c = ctx;

	c->calls++;
	FUZZ_CHECK(c->in_feed, "a frame out of sse_gap");
	FUZZ_CHECK(ts == c->ts, "frame ts %llu, the call had %llu", (unsigned long long)ts,
		   (unsigned long long)c->ts);
	FUZZ_CHECK(f->event && f->data, "NULL event or data");
	FUZZ_CHECK(f->event_len <= SSE_EVENT_MAX, "event of %zu bytes", f->event_len);
	FUZZ_CHECK(f->data_len <= SSE_FRAME_MAX, "frame of %zu bytes", f->data_len);
	FUZZ_CHECK(f->event[f->event_len] == 0 && f->data[f->data_len] == 0, "not terminated");
	FUZZ_CHECK(f->data_len <= c->fed, "a frame of %zu bytes from %llu bytes fed", f->data_len,
		   (unsigned long long)c->fed);
	FUZZ_CHECK(!memchr(f->event, '\n', f->event_len) && !memchr(f->event, '\r', f->event_len),
		   "a line end in the event type");
	if (c->ndjson) {
		FUZZ_CHECK(f->data_len > 0, "an empty NDJSON frame");
		FUZZ_CHECK(!memchr(f->data, '\n', f->data_len), "an LF inside an NDJSON frame");
		FUZZ_CHECK(f->event_len == 0, "an NDJSON frame with an event type");
	} else {
		FUZZ_CHECK(!memchr(f->data, '\r', f->data_len), "a CR inside SSE data");
	}
	list_add(&c->got, f->event, f->event_len, f->data, f->data_len);
}

static void compare(const struct frame_list *got, const struct frame_list *want)
{
	FUZZ_CHECK(got->n == want->n, "%zu frames, the reference found %zu", got->n, want->n);
	for (size_t i = 0; i < got->n; i++) {
		const struct frame_copy *a = &got->f[i], *b = &want->f[i];

		FUZZ_CHECK(a->event_len == b->event_len &&
			       !memcmp(a->event, b->event, a->event_len),
			   "frame %zu: event differs from the reference", i);
		if (a->data_len != b->data_len || memcmp(a->data, b->data, a->data_len)) {
			fuzz_hexdump("parser", a->data, a->data_len);
			fuzz_hexdump("reference", b->data, b->data_len);
			FUZZ_FAIL("frame %zu: data differs from the reference", i);
		}
	}
}

/* One body through p: feeds and gaps as the control bytes say, then sse_finish. */
static void run_body(struct sctx *c, const uint8_t *b, size_t n, const uint8_t *ctl, size_t nctl,
		     size_t *k, bool gaps)
{
	struct sse_parser *p = c->p;
	bool gapped = false;
	size_t off = 0;

	list_free(&c->got);
	while (off < n) {
		uint8_t v = nctl ? ctl[(*k)++ % nctl] : 0;
		size_t len;

		if (gaps && (v & 0x80)) {
			uint64_t damaged = p->damaged_frames;

			len = (size_t)(v & 0x7f) + 1;
			if (len > n - off)
				len = n - off;
			c->in_feed = false;
			sse_gap(p, len);
			FUZZ_CHECK(p->damaged_frames <= damaged + 1,
				   "one gap, several damaged counts");
			gapped = true;
			off += len;
			continue;
		}
		len = v ? v : n - off;
		if (len > n - off)
			len = n - off;
		c->in_feed = true;
		c->ts++;
		c->fed += len;
		FUZZ_CHECK(sse_feed(p, b + off, len, c->ts) == 0, "sse_feed failed");
		FUZZ_CHECK(c->budget.used <= c->budget.max, "budget overdrawn: %zu of %zu",
			   c->budget.used, c->budget.max);
		off += len;
	}
	c->in_feed = true;
	c->ts = SSE_FUZZ_FINISH_TS + c->ts;
	sse_finish(p, c->ts);
	FUZZ_CHECK(p->frames == c->calls, "frames %llu, callbacks %llu",
		   (unsigned long long)p->frames, (unsigned long long)c->calls);
	if (!gapped && !c->budget.refused) {
		struct frame_list want = { 0 };

		ref_parse(c->ndjson, b, n, &want);
		compare(&c->got, &want);
		list_free(&want);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	uint8_t flags = fuzz_u8(&in);
	size_t split = flags & 4 ? fuzz_u16(&in) : 0;
	size_t nctl = fuzz_u8(&in) % SSE_FUZZ_CTL_MAX, k = 0;
	const uint8_t *ctl = fuzz_bytes(&in, nctl, &nctl);
	struct sse_parser p;
	struct sctx c = { .p = &p, .ndjson = flags & 1 };

	split = flags & 4 && in.n ? split % in.n : in.n;
	c.budget.max = (size_t)SSE_FUZZ_BUDGET_UNIT << (2 * ((flags >> 3) & 7));
	sse_init(&p, c.ndjson ? SSE_MODE_NDJSON : SSE_MODE_SSE, on_frame, &c);
	if ((flags >> 3) & 7)
		sse_set_budget(&p, &c.budget);
	run_body(&c, in.p, split, ctl, nctl, &k, flags & 2);
	if (flags & 4)
		run_body(&c, in.p + split, in.n - split, ctl, nctl, &k, flags & 2);
	sse_free(&p);
	FUZZ_CHECK(c.budget.used == 0, "%zu budget bytes still taken after sse_free",
		   c.budget.used);
	list_free(&c.got);
	return 0;
}
