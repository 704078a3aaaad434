// SPDX-License-Identifier: MIT
/*
 * Trace context headers; the contract is in tracectx.h. The rules are the W3C Trace Context
 * recommendation's (section 3.2, traceparent; 3.3, tracestate), level 1.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "pipeline/tracectx.h"
#include "lib/ows.h"
#include "lib/utf8.h"

/* "00-" + 32 + "-" + 16 + "-" + 2 */
#define TP_LEN 55
#define TP_TRACE_AT 3
#define TP_PARENT_AT 36
#define TP_FLAGS_AT 53
/* A tracestate key or value is at most 256 characters. */
#define TS_KEY_MAX 256
#define TS_VALUE_MAX 256

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	return -1; /* upper case too: the W3C format is lower-case hex */
}

/* n bytes from 2n lower-case hex digits; false on any other character. */
static bool unhex(const char *s, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

static bool all_zero(const uint8_t *id, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (id[i])
			return false;
	return true;
}

int tracectx_parse_traceparent(const char *s, size_t n, struct trace_parent *out)
{
	struct trace_parent tp = { 0 };
	uint8_t version;

	if (n < TP_LEN || !unhex(s, &version, 1) || version == 0xff)
		return -EINVAL;
	/* Version 00 is exactly 55 characters; a later one may add fields after a '-'. */
	if (version == 0 ? n != TP_LEN : n > TP_LEN && s[TP_LEN] != '-')
		return -EINVAL;
	if (s[TP_TRACE_AT - 1] != '-' || s[TP_PARENT_AT - 1] != '-' || s[TP_FLAGS_AT - 1] != '-')
		return -EINVAL;
	if (!unhex(s + TP_TRACE_AT, tp.trace_id, sizeof(tp.trace_id)) ||
	    !unhex(s + TP_PARENT_AT, tp.parent_id, sizeof(tp.parent_id)) ||
	    !unhex(s + TP_FLAGS_AT, &tp.flags, 1))
		return -EINVAL;
	if (all_zero(tp.trace_id, sizeof(tp.trace_id)) ||
	    all_zero(tp.parent_id, sizeof(tp.parent_id)))
		return -EINVAL;
	tp.valid = true;
	*out = tp;
	return 0;
}

static bool key_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
	       ch == '*' || ch == '/';
}

/* key "=" value, as W3C tracestate list-member (simple or tenant@system key). */
static bool member_valid(const char *m, size_t n)
{
	const char *eq = memchr(m, '=', n);
	size_t klen, vlen;
	int ats = 0;

	if (!eq)
		return false;
	klen = (size_t)(eq - m);
	vlen = n - klen - 1;
	if (!klen || klen > TS_KEY_MAX || !vlen || vlen > TS_VALUE_MAX)
		return false;
	if (!((m[0] >= 'a' && m[0] <= 'z') || (m[0] >= '0' && m[0] <= '9')))
		return false;
	for (size_t i = 0; i < klen; i++) {
		if (m[i] == '@' && i + 1 < klen && ++ats == 1)
			continue;
		if (!key_char(m[i]))
			return false;
	}
	for (size_t i = 0; i < vlen; i++) {
		char ch = eq[1 + i];

		if (ch < 0x20 || ch > 0x7e || ch == ',' || ch == '=')
			return false;
	}
	return eq[vlen] != ' ';
}

/* The members of one tracestate field, after those of earlier fields (they combine as a list). */
static void state_add(struct trace_ctx *c, const char *v, size_t n)
{
	const char *end = v + n;
	bool full = false;

	while (v < end && !c->state_bad) {
		const char *comma = memchr(v, ',', (size_t)(end - v));
		const char *m = v, *stop = comma ? comma : end;
		size_t mlen = (size_t)(stop - m), have = strlen(c->state);

		v = comma ? comma + 1 : end;
		ows_trim(&m, &mlen);
		if (!mlen)
			continue; /* empty members are allowed, and mean nothing */
		if (!member_valid(m, mlen)) {
			c->state_bad = true;
			break;
		}
		if (full || c->nmembers >= TRACECTX_STATE_MEMBERS)
			continue;
		/* Whole members in order while they fit: a long one goes first, then the rest. */
		if (have + !!have + mlen > TRACECTX_STATE_MAX) {
			if (mlen <= TRACECTX_MEMBER_MAX)
				full = true;
			continue;
		}
		if (have)
			c->state[have++] = ',';
		memcpy(c->state + have, m, mlen);
		c->state[have + mlen] = '\0';
		c->nmembers++;
	}
}

static bool name_is(const char *name, size_t nlen, const char *lit)
{
	return strlen(lit) == nlen && strncasecmp(name, lit, nlen) == 0;
}

bool tracectx_field(struct trace_ctx *c, const char *name, size_t nlen, const char *val,
		    size_t vlen)
{
	ows_trim(&val, &vlen);
	if (name_is(name, nlen, "traceparent")) {
		/* Two fields are one list, which no version's format allows. */
		if (c->seen_tp || tracectx_parse_traceparent(val, vlen, &c->tp)) {
			memset(&c->tp, 0, sizeof(c->tp));
			c->malformed = true;
		}
		c->seen_tp = true;
		return true;
	}
	if (name_is(name, nlen, "tracestate")) {
		state_add(c, val, vlen);
		return true;
	}
	if (name_is(name, nlen, "x-request-id")) {
		if (!c->request_id[0])
			utf8_clean(c->request_id, sizeof(c->request_id), val, vlen);
		return true;
	}
	return false;
}

void tracectx_finish(struct trace_ctx *c)
{
	if (!c->tp.valid || c->state_bad) {
		c->state[0] = '\0';
		c->nmembers = 0;
	}
}
