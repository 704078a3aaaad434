// SPDX-License-Identifier: MIT
/*
 * SSE / NDJSON framing; the contract is in sse.h.
 *
 * SSE follows the WHATWG HTML "event stream interpretation": lines end with CR LF, LF or CR;
 * "field:value" with one optional space after the colon; a line without a colon is a field
 * with an empty value; ":" lines are comments; a blank line dispatches the event if it had a
 * data line. Field values are copied straight into the frame buffers, so no line buffer.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pipeline/sse.h"

/* UTF-8 byte-order mark, which an event stream may start with (and which is then ignored). */
static const uint8_t sse_bom[] = { 0xef, 0xbb, 0xbf };
/* RFC 7464 (application/json-seq) starts each record with RS. */
#define SSE_JSON_SEQ_RS 0x1e

static void sse_frame_reset(struct sse_parser *p)
{
	p->data_lines = 0;
	p->data_len = 0;
	p->event_len = 0;
	p->oversize = false;
}

static void sse_line_reset(struct sse_parser *p)
{
	p->state = SSE_ST_FIELD;
	p->field = SSE_FIELD_OTHER;
	p->name_len = 0;
}

void sse_init(struct sse_parser *p, enum sse_mode mode, sse_frame_fn on_frame, void *ctx)
{
	memset(p, 0, offsetof(struct sse_parser, event));
	p->event[0] = '\0';
	p->data = NULL;
	p->data_cap = 0;
	p->budget = NULL;
	p->mode = mode;
	p->on_frame = on_frame;
	p->ctx = ctx;
	sse_line_reset(p);
}

void sse_set_budget(struct sse_parser *p, struct budget *b)
{
	p->budget = b;
}

void sse_free(struct sse_parser *p)
{
	budget_give(p->budget, p->data_cap);
	free(p->data);
	p->data = NULL;
	p->data_cap = 0;
}

/* Room for need bytes plus the NUL; false (the frame is dropped as oversize) if it cannot. */
static bool sse_reserve(struct sse_parser *p, size_t need)
{
	size_t cap = p->data_cap ? p->data_cap : 512;
	char *n;

	if (need + 1 <= p->data_cap)
		return true;
	while (cap < need + 1)
		cap *= 2;
	if (cap > SSE_FRAME_MAX + 1)
		cap = SSE_FRAME_MAX + 1;
	if (!budget_take(p->budget, cap - p->data_cap))
		return false;
	n = realloc(p->data, cap);
	if (!n) {
		budget_give(p->budget, cap - p->data_cap);
		return false;
	}
	p->data = n;
	p->data_cap = cap;
	return true;
}

int sse_mode_for(const char *content_type)
{
	static const char *const ndjson[] = { "application/x-ndjson", "application/jsonl",
					      "application/json-seq" };

	if (!content_type)
		return -1;
	if (strcasecmp(content_type, "text/event-stream") == 0)
		return SSE_MODE_SSE;
	for (size_t i = 0; i < sizeof(ndjson) / sizeof(ndjson[0]); i++)
		if (strcasecmp(content_type, ndjson[i]) == 0)
			return SSE_MODE_NDJSON;
	return -1;
}

static void sse_data_append(struct sse_parser *p, const uint8_t *buf, size_t len)
{
	if (p->oversize)
		return;
	if (len > SSE_FRAME_MAX - p->data_len || !sse_reserve(p, p->data_len + len)) {
		p->oversize = true;
		return;
	}
	memcpy(p->data + p->data_len, buf, len);
	p->data_len += len;
}

static void sse_value_append(struct sse_parser *p, const uint8_t *buf, size_t len)
{
	if (p->field == SSE_FIELD_DATA) {
		sse_data_append(p, buf, len);
	} else if (p->field == SSE_FIELD_EVENT && !p->oversize) {
		/* A truncated event type would be misread, so an overlong one drops the frame. */
		if (len > SSE_EVENT_MAX - p->event_len) {
			p->oversize = true;
			return;
		}
		memcpy(p->event + p->event_len, buf, len);
		p->event_len += len;
	}
}

/* The field name is complete (a colon, or the end of a line without one). */
static void sse_field_begin(struct sse_parser *p)
{
	static const uint8_t lf = '\n';

	p->field = SSE_FIELD_OTHER;
	if (p->name_len == 4 && memcmp(p->name, "data", 4) == 0) {
		p->field = SSE_FIELD_DATA;
		/* Lines are joined with LF (WHATWG appends one per line, strips the last). */
		if (p->data_lines++)
			sse_data_append(p, &lf, 1);
	} else if (p->name_len == 5 && memcmp(p->name, "event", 5) == 0) {
		p->field = SSE_FIELD_EVENT;
		p->event_len = 0;
	}
}

static void sse_emit(struct sse_parser *p, uint64_t ts)
{
	struct sse_frame f = {
		.event = p->event,
		.event_len = p->event_len,
		.data = p->data,
		.data_len = p->data_len,
	};

	if (!sse_reserve(p, p->data_len))
		return;
	f.data = p->data;
	p->event[p->event_len] = '\0';
	p->data[p->data_len] = '\0';
	p->frames++;
	if (p->on_frame)
		p->on_frame(p->ctx, &f, ts);
}

static void sse_dispatch(struct sse_parser *p, uint64_t ts)
{
	if (p->oversize)
		p->oversize_frames++;
	else if (p->data_lines)
		sse_emit(p, ts);
	sse_frame_reset(p);
}

/* NDJSON: one frame per line that has something other than whitespace. */
static void sse_ndjson_line_end(struct sse_parser *p, uint64_t ts)
{
	size_t start = 0, end = p->data_len;

	if (p->oversize) {
		p->oversize_frames++;
		sse_frame_reset(p);
		return;
	}
	while (start < end && (p->data[start] == SSE_JSON_SEQ_RS || p->data[start] == ' ' ||
			       p->data[start] == '\t' || p->data[start] == '\r'))
		start++;
	while (end > start &&
	       (p->data[end - 1] == '\r' || p->data[end - 1] == ' ' || p->data[end - 1] == '\t'))
		end--;
	if (end > start) {
		memmove(p->data, p->data + start, end - start);
		p->data_len = end - start;
		sse_emit(p, ts);
	}
	sse_frame_reset(p);
}

static void sse_line_end(struct sse_parser *p, uint64_t ts)
{
	if (p->state == SSE_ST_RESYNC) {
		/* The first line after a gap is the damaged tail of some line, so only a line
		 * that is seen whole and empty marks a frame boundary. */
		if (p->line_empty) {
			sse_frame_reset(p);
			sse_line_reset(p);
		}
		p->line_empty = true;
		return;
	}
	if (p->state == SSE_ST_FIELD) {
		if (p->name_len == 0) {
			sse_dispatch(p, ts);
			return;
		}
		sse_field_begin(p);
	}
	sse_line_reset(p);
}

static size_t sse_find_eol(const uint8_t *buf, size_t len)
{
	size_t i = 0;

	while (i < len && buf[i] != '\n' && buf[i] != '\r')
		i++;
	return i;
}

static void sse_feed_sse(struct sse_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	size_t i = 0;

	while (i < len) {
		uint8_t c = buf[i];
		size_t n;

		if (c == '\n' || c == '\r') {
			/* CR LF is one line end. */
			if (!(c == '\n' && p->cr))
				sse_line_end(p, ts);
			p->cr = c == '\r';
			i++;
			continue;
		}
		p->cr = false;
		switch (p->state) {
		case SSE_ST_RESYNC:
			p->line_empty = false;
			i += sse_find_eol(buf + i, len - i);
			break;
		case SSE_ST_FIELD:
			if (c == ':') {
				sse_field_begin(p);
				p->state = SSE_ST_VALUE_SPACE;
			} else {
				if (p->name_len < SSE_FIELD_MAX)
					p->name[p->name_len] = (char)c;
				/* Saturate so an endless name cannot wrap to a short one. */
				if (p->name_len <= SSE_FIELD_MAX)
					p->name_len++;
			}
			i++;
			break;
		case SSE_ST_VALUE_SPACE:
			p->state = SSE_ST_VALUE;
			if (c == ' ') {
				i++;
				break;
			}
			/* fallthrough */
		case SSE_ST_VALUE:
			n = sse_find_eol(buf + i, len - i);
			sse_value_append(p, buf + i, n);
			i += n;
			break;
		}
	}
}

static void sse_feed_ndjson(struct sse_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	while (len) {
		const uint8_t *lf = memchr(buf, '\n', len);
		size_t n = lf ? (size_t)(lf - buf) : len;

		if (p->state != SSE_ST_RESYNC)
			sse_data_append(p, buf, n);
		if (!lf)
			return;
		if (p->state == SSE_ST_RESYNC)
			sse_line_reset(p);
		else
			sse_ndjson_line_end(p, ts);
		buf += n + 1;
		len -= n + 1;
	}
}

static void sse_feed_body(struct sse_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	if (p->mode == SSE_MODE_NDJSON)
		sse_feed_ndjson(p, buf, len, ts);
	else
		sse_feed_sse(p, buf, len, ts);
}

int sse_feed(struct sse_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	while (!p->started && len) {
		if (buf[0] == sse_bom[p->bom_len]) {
			buf++;
			len--;
			if (++p->bom_len == sizeof(sse_bom))
				p->started = true;
			continue;
		}
		/* Not a BOM after all: the bytes held back are body. */
		p->started = true;
		sse_feed_body(p, sse_bom, p->bom_len, ts);
	}
	if (len)
		sse_feed_body(p, buf, len, ts);
	return 0;
}

void sse_gap(struct sse_parser *p, size_t len)
{
	if (!len)
		return;
	p->started = true;
	p->cr = false;
	p->line_empty = false;
	/* A second gap before the boundary damages the same region: count it once. */
	if (p->state != SSE_ST_RESYNC)
		p->damaged_frames++;
	sse_frame_reset(p);
	p->state = SSE_ST_RESYNC;
}

void sse_finish(struct sse_parser *p, uint64_t ts)
{
	if (!p->started && p->bom_len)
		sse_feed_body(p, sse_bom, p->bom_len, ts);
	if (p->state != SSE_ST_RESYNC) {
		if (p->mode == SSE_MODE_NDJSON) {
			sse_ndjson_line_end(p, ts);
		} else {
			/* WHATWG drops an unterminated event at end of stream; we report it, since
			 * the body is known to be complete here and the frame may be [DONE]. */
			if (p->state != SSE_ST_FIELD || p->name_len)
				sse_line_end(p, ts);
			sse_dispatch(p, ts);
		}
	}
	sse_frame_reset(p);
	sse_line_reset(p);
	p->cr = false;
	p->started = false;
	p->bom_len = 0;
}
