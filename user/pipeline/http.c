// SPDX-License-Identifier: MIT
/*
 * Incremental HTTP/1.1 message parser; the contract is in http.h.
 *
 * Framing follows RFC 9112 section 6.3: no body for 1xx/204/304 and answers to HEAD, then
 * Transfer-Encoding: chunked, then Content-Length, else (responses only) until the close.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pipeline/http.h"
#include "lib/ows.h"

#define HTTP_VERSION_PREFIX "HTTP/"
#define HTTP_VERSION_PREFIX_LEN 5
/* "HTTP/1.1": prefix, major, dot, minor */
#define HTTP_VERSION_LEN 8
#define HTTP_STATUS_DIGITS 3
/* A chunk size above 2^60 bytes is garbage; the bound also keeps size*16 from overflowing. */
#define HTTP_CHUNK_SIZE_LIMIT (UINT64_C(1) << 60)
/* Content-Length beyond this is garbage too (and fits int64_t). */
#define HTTP_CONTENT_LENGTH_LIMIT (INT64_C(1) << 60)

enum {
	HTTP_STATUS_SWITCHING = 101,
	HTTP_STATUS_NO_CONTENT = 204,
	HTTP_STATUS_NOT_MODIFIED = 304,
};

static void http_desync(struct http_parser *p)
{
	p->state = HTTP_ST_DESYNC;
}

void http_free(struct http_parser *p)
{
	if (p->hb)
		budget_give(p->budget, sizeof(*p->hb));
	free(p->hb);
	p->hb = NULL;
}

void http_set_budget(struct http_parser *p, struct budget *b)
{
	p->budget = b;
}

void http_set_labels(struct http_parser *p, const struct req_label_set *labels)
{
	p->labels = labels;
}

void http_init(struct http_parser *p, enum http_dir dir, const struct http_callbacks *cb, void *ctx)
{
	memset(p, 0, offsetof(struct http_parser, hb));
	p->hb = NULL;
	p->dir = dir;
	p->cb = cb;
	p->ctx = ctx;
	p->state = HTTP_ST_IDLE;
}

bool http_idle(const struct http_parser *p)
{
	return p->state == HTTP_ST_IDLE;
}

bool http_desynced(const struct http_parser *p)
{
	return p->state == HTTP_ST_DESYNC || p->state == HTTP_ST_UPGRADED;
}

void http_expect_no_body(struct http_parser *p)
{
	p->expect_no_body = true;
}

static void http_end(struct http_parser *p, uint64_t ts)
{
	p->state = HTTP_ST_IDLE;
	if (p->cb && p->cb->on_end)
		p->cb->on_end(p->ctx, ts);
}

static void http_emit_body(struct http_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	if (len && p->cb && p->cb->on_body)
		p->cb->on_body(p->ctx, buf, len, ts);
}

static void http_emit_gap(struct http_parser *p, size_t len)
{
	if (len && p->cb && p->cb->on_body_gap)
		p->cb->on_body_gap(p->ctx, len);
}

static void http_chunk_size_begin(struct http_parser *p)
{
	p->state = HTTP_ST_CHUNK_SIZE;
	p->remaining = 0;
	p->line_len = 0;
	p->size_digits = false;
	p->size_done = false;
}

void http_join_body(struct http_parser *p, bool chunked)
{
	if (chunked)
		http_chunk_size_begin(p);
	else
		p->state = HTTP_ST_BODY_CLOSE;
}

/* Case-insensitive compare of a counted string with a literal. */
static bool http_eq(const char *s, size_t len, const char *lit)
{
	return strlen(lit) == len && strncasecmp(s, lit, len) == 0;
}

/* Iterates the comma-separated, trimmed, non-empty elements of a header value: the list
 * syntax of RFC 9110 section 5.6.1 (Connection, Transfer-Encoding, repeated Content-Length). */
struct http_list_iter {
	const char *p, *end;
};

static bool http_list_next(struct http_list_iter *it, const char **el, size_t *elen)
{
	while (it->p < it->end) {
		const char *start = it->p;
		const char *comma = memchr(start, ',', (size_t)(it->end - start));
		const char *stop = comma ? comma : it->end;

		it->p = comma ? comma + 1 : it->end;
		*el = start;
		*elen = (size_t)(stop - start);
		ows_trim(el, elen);
		if (*elen)
			return true;
	}
	return false;
}

static int http_parse_decimal(const char *s, size_t len, int64_t limit, int64_t *out)
{
	int64_t v = 0;

	if (!len)
		return -EPROTO;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EPROTO;
		if (v > (limit - (s[i] - '0')) / 10)
			return -EPROTO;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 0;
}

struct http_head_flags {
	bool te_seen;	 /* a Transfer-Encoding header was present */
	bool conn_close; /* Connection: close */
	bool conn_keep;	 /* Connection: keep-alive */
};

void http_media_type(char *dst, size_t cap, const char *val, size_t len)
{
	const char *semi = memchr(val, ';', len);
	size_t n = semi ? (size_t)(semi - val) : len;

	ows_trim(&val, &n);
	if (n >= cap)
		n = cap - 1;
	for (size_t i = 0; i < n; i++)
		dst[i] = (char)tolower((unsigned char)val[i]);
	dst[n] = '\0';
}

static int http_header(struct http_parser *p, struct http_head_flags *fl, const char *name,
		       size_t nlen, const char *val, size_t vlen)
{
	struct http_head *h = &p->hb->head;
	struct http_list_iter it = { val, val + vlen };
	const char *el;
	size_t elen;

	if (http_eq(name, nlen, "content-length")) {
		int64_t v;

		/* Repeats (in one header or several) are allowed only if all are equal. */
		while (http_list_next(&it, &el, &elen)) {
			if (http_parse_decimal(el, elen, HTTP_CONTENT_LENGTH_LIMIT, &v))
				return -EPROTO;
			if (h->content_length >= 0 && h->content_length != v)
				return -EPROTO;
			h->content_length = v;
		}
	} else if (http_eq(name, nlen, "transfer-encoding")) {
		bool last_chunked = false, any = false;

		/* chunked counts only as the final coding (RFC 9112 section 6.3). */
		while (http_list_next(&it, &el, &elen)) {
			any = true;
			last_chunked = http_eq(el, elen, "chunked");
		}
		if (any) {
			fl->te_seen = true;
			h->chunked = last_chunked;
		}
	} else if (http_eq(name, nlen, "connection")) {
		while (http_list_next(&it, &el, &elen)) {
			if (http_eq(el, elen, "close"))
				fl->conn_close = true;
			else if (http_eq(el, elen, "keep-alive"))
				fl->conn_keep = true;
		}
	} else if (http_eq(name, nlen, "upgrade")) {
		while (http_list_next(&it, &el, &elen))
			if (http_eq(el, elen, "h2c"))
				h->upgrade_h2c = true;
	} else if (http_eq(name, nlen, "content-type")) {
		http_media_type(h->content_type, sizeof(h->content_type), val, vlen);
	} else if (p->dir == HTTP_DIR_REQUEST) {
		if (!tracectx_field(&h->trace, name, nlen, val, vlen) &&
		    !slo_head_field(&h->slo, name, nlen, val, vlen))
			req_labels_header(p->labels, &h->labels, name, nlen, val, vlen);
	}
	return 0;
}

static bool http_is_method_char(char c)
{
	return (c >= 'A' && c <= 'Z') || c == '-' || c == '_';
}

/* Parses "HTTP/1.x" at s (len bytes available); returns the minor version or -EPROTO. */
static int http_parse_version(const char *s, size_t len)
{
	if (len < HTTP_VERSION_LEN || memcmp(s, "HTTP/1.", HTTP_VERSION_LEN - 1) != 0)
		return -EPROTO;
	if (s[HTTP_VERSION_LEN - 1] < '0' || s[HTTP_VERSION_LEN - 1] > '9')
		return -EPROTO;
	return s[HTTP_VERSION_LEN - 1] - '0';
}

static int http_parse_request_line(struct http_head *h, const char *s, size_t len)
{
	const char *sp1 = memchr(s, ' ', len), *sp2, *target;
	size_t mlen, tlen;
	int minor;

	if (!sp1)
		return -EPROTO;
	mlen = (size_t)(sp1 - s);
	if (!mlen || mlen >= sizeof(h->method))
		return -EPROTO;
	memcpy(h->method, s, mlen);
	h->method[mlen] = '\0';

	target = sp1 + 1;
	sp2 = memchr(target, ' ', len - mlen - 1);
	if (!sp2 || sp2 == target)
		return -EPROTO;
	tlen = (size_t)(sp2 - target);
	minor = http_parse_version(sp2 + 1, (size_t)(s + len - sp2 - 1));
	if (minor < 0 || (size_t)(s + len - sp2 - 1) != HTTP_VERSION_LEN)
		return -EPROTO;
	h->version_minor = minor;
	if (tlen >= sizeof(h->path))
		tlen = sizeof(h->path) - 1;
	memcpy(h->path, target, tlen);
	h->path[tlen] = '\0';
	return 0;
}

static int http_parse_status_line(struct http_head *h, const char *s, size_t len)
{
	int minor = http_parse_version(s, len), status = 0;
	const char *d = s + HTTP_VERSION_LEN + 1;

	if (minor < 0 || len < HTTP_VERSION_LEN + 1 + HTTP_STATUS_DIGITS ||
	    s[HTTP_VERSION_LEN] != ' ')
		return -EPROTO;
	/* Three digits, the first the class (RFC 9110 section 15): "040" is not a status. */
	for (int i = 0; i < HTTP_STATUS_DIGITS; i++) {
		if (d[i] < (i ? '0' : '1') || d[i] > '9')
			return -EPROTO;
		status = status * 10 + (d[i] - '0');
	}
	/* The reason phrase is optional, but something other than SP after the code is not. */
	if (len > HTTP_VERSION_LEN + 1 + HTTP_STATUS_DIGITS && d[HTTP_STATUS_DIGITS] != ' ')
		return -EPROTO;
	h->version_minor = minor;
	h->status = status;
	return 0;
}

/* Length of the line at s without its CR LF / LF; *next is set past the LF. */
static size_t http_line(const char *s, const char *end, const char **next)
{
	const char *lf = memchr(s, '\n', (size_t)(end - s));
	size_t n;

	if (!lf)
		lf = end;
	n = (size_t)(lf - s);
	if (n && s[n - 1] == '\r')
		n--;
	*next = lf < end ? lf + 1 : end;
	return n;
}

static int http_parse_head(struct http_parser *p, struct http_head_flags *fl)
{
	const char *s = p->hb->text, *end = p->hb->text + p->head_len, *next;
	struct http_head *h = &p->hb->head;
	size_t n = http_line(s, end, &next);
	int err;

	memset(h, 0, sizeof(*h));
	h->content_length = -1;
	if (p->dir == HTTP_DIR_REQUEST)
		err = http_parse_request_line(h, s, n);
	else
		err = http_parse_status_line(h, s, n);
	if (err)
		return err;

	for (s = next; s < end; s = next) {
		const char *colon, *name, *val;
		size_t nlen, vlen;

		n = http_line(s, end, &next);
		if (!n)
			break;
		/* obs-fold continuation: its value belongs to a header we do not need. */
		if (ows_is(s[0]))
			continue;
		colon = memchr(s, ':', n);
		if (!colon || colon == s)
			return -EPROTO;
		name = s;
		nlen = (size_t)(colon - s);
		/* No whitespace is allowed between a field name and the colon. */
		if (ows_is(name[nlen - 1]))
			return -EPROTO;
		val = colon + 1;
		vlen = n - nlen - 1;
		ows_trim(&val, &vlen);
		err = http_header(p, fl, name, nlen, val, vlen);
		if (err)
			return err;
	}

	tracectx_finish(&h->trace);
	if (fl->conn_close)
		h->keep_alive = false;
	else if (fl->conn_keep)
		h->keep_alive = true;
	else
		h->keep_alive = h->version_minor >= 1;
	return 0;
}

/*
 * Called while the start line is still incomplete: is what we have so far a plausible
 * beginning of a request line (an upper-case method) or a status line ("HTTP/")? This
 * rejects TLS records, HTTP/2 frames and binary protocols after a few bytes.
 */
static bool http_start_plausible(const struct http_parser *p)
{
	size_t n = p->head_len;

	if (p->dir == HTTP_DIR_RESPONSE) {
		if (n > HTTP_VERSION_PREFIX_LEN)
			n = HTTP_VERSION_PREFIX_LEN;
		return memcmp(p->hb->text, HTTP_VERSION_PREFIX, n) == 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (p->hb->text[i] == ' ')
			return i > 0;
		if (i >= HTTP_METHOD_MAX - 1 || !http_is_method_char(p->hb->text[i]))
			return false;
	}
	return true;
}

/* The head is complete: report it and choose how the body is delimited. */
static int http_head_done(struct http_parser *p, uint64_t ts)
{
	struct http_head_flags fl = { 0 };
	const struct http_head *h = &p->hb->head;
	int err = http_parse_head(p, &fl);

	if (err)
		return err;
	/* A request with a coding we cannot delimit is a 400 for the server too. */
	if (p->dir == HTTP_DIR_REQUEST && fl.te_seen && !h->chunked)
		return -EPROTO;
	if (p->cb && p->cb->on_head)
		p->cb->on_head(p->ctx, h, ts);

	if (p->dir == HTTP_DIR_RESPONSE) {
		bool interim = h->status >= 100 && h->status < 200;
		bool no_body = interim || h->status == HTTP_STATUS_NO_CONTENT ||
			       h->status == HTTP_STATUS_NOT_MODIFIED || p->expect_no_body;

		/* An interim response is followed by the final one to the same request. */
		if (!interim)
			p->expect_no_body = false;
		if (no_body) {
			http_end(p, ts);
			/* Switching Protocols: what follows is not HTTP/1.x. */
			if (h->status == HTTP_STATUS_SWITCHING)
				p->state = HTTP_ST_UPGRADED;
			return 0;
		}
	}
	if (h->chunked) {
		http_chunk_size_begin(p);
	} else if (h->content_length > 0) {
		p->state = HTTP_ST_BODY_LENGTH;
		p->remaining = (uint64_t)h->content_length;
	} else if (h->content_length == 0 || p->dir == HTTP_DIR_REQUEST) {
		http_end(p, ts);
	} else {
		p->state = HTTP_ST_BODY_CLOSE;
	}
	return 0;
}

static long http_feed_head(struct http_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	const uint8_t *lf = memchr(buf, '\n', len);
	size_t n = lf ? (size_t)(lf - buf) + 1 : len;

	if (p->head_len + n > HTTP_HEAD_MAX || memchr(buf, '\0', n))
		return -EPROTO;
	if (!p->hb) {
		if (!budget_take(p->budget, sizeof(*p->hb)))
			return -ENOBUFS;
		p->hb = malloc(sizeof(*p->hb));
		if (!p->hb) {
			budget_give(p->budget, sizeof(*p->hb));
			return -ENOMEM;
		}
	}
	memcpy(p->hb->text + p->head_len, buf, n);
	p->head_len += n;
	if (p->line_start == 0 && !http_start_plausible(p))
		return -EPROTO;
	if (!lf)
		return (long)n;

	/* An empty line (LF or CR LF alone) ends the head. */
	if (p->line_start > 0 &&
	    (p->head_len - p->line_start == 1 ||
	     (p->head_len - p->line_start == 2 && p->hb->text[p->line_start] == '\r'))) {
		int err;

		p->hb->text[p->head_len] = '\0';
		err = http_head_done(p, ts);
		http_free(p);
		return err ? -EPROTO : (long)n;
	}
	p->line_start = p->head_len;
	return (long)n;
}

static int http_hex(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* chunk-size [ chunk-ext ] CRLF; extensions are skipped up to the LF. */
static long http_feed_chunk_size(struct http_parser *p, const uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		uint8_t c = buf[i];
		int d = http_hex(c);

		if (++p->line_len > HTTP_CHUNK_LINE_MAX)
			return -EPROTO;
		if (c == '\n') {
			if (!p->size_digits)
				return -EPROTO;
			if (p->remaining == 0) {
				p->state = HTTP_ST_TRAILER;
				p->line_len = 0;
				p->trailer_len = 0;
			} else {
				p->state = HTTP_ST_CHUNK_DATA;
			}
			return (long)i + 1;
		}
		if (p->size_done)
			continue;
		if (d >= 0) {
			p->remaining = p->remaining * 16 + (uint64_t)d;
			if (p->remaining > HTTP_CHUNK_SIZE_LIMIT)
				return -EPROTO;
			p->size_digits = true;
		} else if (p->size_digits && (c == ';' || c == '\r' || ows_is((char)c))) {
			p->size_done = true;
		} else {
			return -EPROTO;
		}
	}
	return (long)len;
}

static long http_feed_trailer(struct http_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	for (size_t i = 0; i < len; i++) {
		if (++p->trailer_len > HTTP_HEAD_MAX)
			return -EPROTO;
		if (buf[i] == '\n') {
			if (p->line_len == 0) {
				http_end(p, ts);
				return (long)i + 1;
			}
			p->line_len = 0;
		} else if (buf[i] != '\r') {
			p->line_len++;
		}
	}
	return (long)len;
}

static long http_feed_data(struct http_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	size_t n = len < p->remaining ? len : (size_t)p->remaining;

	http_emit_body(p, buf, n, ts);
	p->remaining -= n;
	if (p->remaining == 0) {
		if (p->state == HTTP_ST_CHUNK_DATA)
			p->state = HTTP_ST_CHUNK_DATA_CR;
		else
			http_end(p, ts);
	}
	return (long)n;
}

/* Consumes a prefix of buf in the current state, at least one byte (len >= 1); returns its
 * length or -EPROTO. */
static long http_step(struct http_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	switch (p->state) {
	case HTTP_ST_IDLE:
		/* RFC 9112 section 2.2: empty lines before a start line are ignored. */
		if (buf[0] == '\r' || buf[0] == '\n')
			return 1;
		p->state = HTTP_ST_HEAD;
		p->head_len = 0;
		p->line_start = 0;
		/* fallthrough */
	case HTTP_ST_HEAD:
		return http_feed_head(p, buf, len, ts);
	case HTTP_ST_BODY_LENGTH:
	case HTTP_ST_CHUNK_DATA:
		return http_feed_data(p, buf, len, ts);
	case HTTP_ST_BODY_CLOSE:
		http_emit_body(p, buf, len, ts);
		return (long)len;
	case HTTP_ST_CHUNK_SIZE:
		return http_feed_chunk_size(p, buf, len);
	case HTTP_ST_CHUNK_DATA_CR:
		/* A bare LF after chunk data is tolerated, as most parsers do. */
		if (buf[0] == '\r')
			p->state = HTTP_ST_CHUNK_DATA_LF;
		else if (buf[0] == '\n')
			http_chunk_size_begin(p);
		else
			return -EPROTO;
		return 1;
	case HTTP_ST_CHUNK_DATA_LF:
		if (buf[0] != '\n')
			return -EPROTO;
		http_chunk_size_begin(p);
		return 1;
	case HTTP_ST_TRAILER:
		return http_feed_trailer(p, buf, len, ts);
	case HTTP_ST_DESYNC:
	case HTTP_ST_UPGRADED:
		break;
	}
	return -EPROTO;
}

int http_feed(struct http_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	size_t off = 0;

	if (p->state == HTTP_ST_DESYNC || p->state == HTTP_ST_UPGRADED)
		return -EPROTO;
	p->last_ts = ts;
	/* Every step consumes a byte or more, or fails: the loop ends by construction. */
	while (off < len) {
		long n = http_step(p, buf + off, len - off, ts);

		if (n <= 0) {
			http_desync(p);
			return -EPROTO;
		}
		off += (size_t)n;
		if (p->state == HTTP_ST_UPGRADED) {
			p->upgraded_at = off;
			return 0;
		}
	}
	return 0;
}

bool http_upgraded(const struct http_parser *p, size_t *off)
{
	if (p->state != HTTP_ST_UPGRADED)
		return false;
	*off = p->upgraded_at;
	return true;
}

void http_gap(struct http_parser *p, size_t len)
{
	if (!len)
		return;
	switch (p->state) {
	case HTTP_ST_BODY_CLOSE:
		http_emit_gap(p, len);
		return;
	case HTTP_ST_BODY_LENGTH:
		if (len > p->remaining)
			break;
		p->remaining -= len;
		http_emit_gap(p, len);
		/* The lost bytes are normally the uncaptured tail of the latest syscall, so its
		 * ts is the best we have for the end. */
		if (p->remaining == 0)
			http_end(p, p->last_ts);
		return;
	case HTTP_ST_CHUNK_DATA:
		if (len <= p->remaining) {
			p->remaining -= len;
			http_emit_gap(p, len);
			if (p->remaining == 0)
				p->state = HTTP_ST_CHUNK_DATA_CR;
			return;
		}
		/* Senders end chunk data with CR LF, so a gap over it is still exact; beyond
		 * it lies a chunk-size line of unknown length. */
		if (len - p->remaining > 2)
			break;
		len -= (size_t)p->remaining;
		http_emit_gap(p, (size_t)p->remaining);
		p->remaining = 0;
		p->state = HTTP_ST_CHUNK_DATA_CR;
		/* fallthrough */
	case HTTP_ST_CHUNK_DATA_CR:
		if (len == 1) {
			p->state = HTTP_ST_CHUNK_DATA_LF;
			return;
		}
		if (len == 2) {
			http_chunk_size_begin(p);
			return;
		}
		break;
	case HTTP_ST_CHUNK_DATA_LF:
		if (len == 1) {
			http_chunk_size_begin(p);
			return;
		}
		break;
	default:
		break;
	}
	http_desync(p);
}

void http_close(struct http_parser *p, uint64_t ts)
{
	if (p->state == HTTP_ST_DESYNC)
		return;
	if (p->state == HTTP_ST_BODY_CLOSE)
		http_end(p, ts);
	p->state = HTTP_ST_IDLE;
	p->expect_no_body = false;
}

bool http_looks_like_request(const uint8_t *p, size_t n)
{
	size_t i = 0;

	while (i < n && i < 8 && p[i] >= 'A' && p[i] <= 'Z')
		i++;
	if (i == n && n < 8)
		return n > 0;
	if (i < 3 || i > 7 || p[i] != ' ')
		return false;
	if (i + 1 == n)
		return true;
	return p[i + 1] == '/' || p[i + 1] == '*' || (p[i + 1] >= 'a' && p[i + 1] <= 'z');
}

bool http_looks_like_response(const uint8_t *p, size_t n)
{
	return n > 0 && memcmp(p, "HTTP/", n < 5 ? n : 5) == 0;
}
