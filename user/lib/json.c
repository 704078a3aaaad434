// SPDX-License-Identifier: MIT
/* The JSON reader; what it accepts is in json.h. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"

#define JV_ALIGN 16
/* Blocks taken from malloc once the caller's buffer is full: at least this large. */
#define JV_BLOCK_BYTES 16384
/* A number's run of bytes is copied here for strtod (a longer one into the arena). */
#define JV_NUMBER_LOCAL 64
/* A sign and 19 digits hold every long long; a longer run cannot fit one. */
#define JV_INTEGER_DIGITS 20

struct jv_block {
	struct jv_block *next;
	size_t cap, used;
	_Alignas(JV_ALIGN) unsigned char mem[];
};

struct jv_in {
	const char *p, *end;
	struct jv_arena *a;
	unsigned depth;
};

void jv_arena_init(struct jv_arena *a, void *mem, size_t cap)
{
	memset(a, 0, sizeof(*a));
	a->mem = mem;
	a->cap = mem ? cap : 0;
}

void jv_arena_reset(struct jv_arena *a)
{
	while (a->blocks) {
		struct jv_block *b = a->blocks;

		a->blocks = b->next;
		free(b);
	}
	a->used = 0;
}

/* n bytes of the cap at mem, of which *used are taken, aligned; NULL when they do not fit. */
static void *jv_bump(unsigned char *mem, size_t cap, size_t *used, size_t n)
{
	size_t at = (*used + JV_ALIGN - 1) & ~(size_t)(JV_ALIGN - 1);

	if (at > cap || n > cap - at)
		return NULL;
	*used = at + n;
	return mem + at;
}

static void *jv_alloc(struct jv_arena *a, size_t n)
{
	struct jv_block *b = a->blocks;
	void *p = jv_bump(a->mem, a->cap, &a->used, n);
	size_t cap = n > JV_BLOCK_BYTES ? n : JV_BLOCK_BYTES;

	if (p || (b && (p = jv_bump(b->mem, b->cap, &b->used, n))))
		return p;
	b = malloc(sizeof(*b) + cap);
	if (!b)
		return NULL;
	b->cap = cap;
	b->used = n;
	b->next = a->blocks;
	a->blocks = b;
	return b->mem;
}

static void jv_skip_ws(struct jv_in *in)
{
	while (in->p < in->end && (unsigned char)*in->p <= ' ')
		in->p++;
}

static bool jv_lit(struct jv_in *in, const char *lit, size_t n)
{
	if ((size_t)(in->end - in->p) < n || memcmp(in->p, lit, n))
		return false;
	in->p += n;
	return true;
}

static int jv_hex4(const char *s, uint32_t *out)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++) {
		char c = s[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

/* \uXXXX at s (and the low half of a surrogate pair after it) as UTF-8 at o; the bytes of
 * input it took, 0 when it is no valid escape. */
static size_t jv_unicode(const char *s, const char *end, char *o, size_t *olen)
{
	uint32_t cp, lo;
	size_t took = 6;

	if (end - s < 6)
		return 0;
	/* Four bytes that are no hex digits stand for U+0000, which ends the string. */
	if (jv_hex4(s + 2, &cp))
		cp = 0;
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return 0;
	if (cp >= 0xd800 && cp <= 0xdbff) {
		if (end - s < 12 || s[6] != '\\' || s[7] != 'u' || jv_hex4(s + 8, &lo) ||
		    lo < 0xdc00 || lo > 0xdfff)
			return 0;
		cp = 0x10000 + (((cp & 0x3ff) << 10) | (lo & 0x3ff));
		took = 12;
	}
	if (cp < 0x80) {
		o[0] = (char)cp;
		*olen = 1;
	} else if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		*olen = 2;
	} else if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		*olen = 3;
	} else {
		o[0] = (char)(0xf0 | (cp >> 18));
		o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[3] = (char)(0x80 | (cp & 0x3f));
		*olen = 4;
	}
	return took;
}

/* The string at in->p (its opening quote), decoded into the arena; NULL when it is not one. */
static const char *jv_string(struct jv_in *in)
{
	const char *s = in->p + 1, *q = s;
	char *out, *o;

	/* Its end first: the decoded string is never longer than the input. */
	while (q < in->end && *q != '"') {
		if (*q == '\\' && ++q == in->end)
			return NULL;
		q++;
	}
	if (q >= in->end)
		return NULL;
	out = o = jv_alloc(in->a, (size_t)(q - s) + 1);
	if (!out)
		return NULL;
	while (s < q) {
		size_t olen = 0, took;

		if (*s != '\\') {
			*o++ = *s++;
			continue;
		}
		switch (s[1]) {
		case 'b':
			*o++ = '\b';
			break;
		case 'f':
			*o++ = '\f';
			break;
		case 'n':
			*o++ = '\n';
			break;
		case 'r':
			*o++ = '\r';
			break;
		case 't':
			*o++ = '\t';
			break;
		case '"':
		case '\\':
		case '/':
			*o++ = s[1];
			break;
		case 'u':
			took = jv_unicode(s, q, o, &olen);
			if (!took)
				return NULL;
			o += olen;
			s += took;
			continue;
		default:
			return NULL;
		}
		s += 2;
	}
	*o = '\0';
	in->p = q + 1;
	return out;
}

/* The digits of buf (an optional '-' first) as an exact integer, when they are nothing else and
 * fit. */
static bool jv_integer(const char *buf, size_t n, long long *out)
{
	char *end;

	if (!n || n > JV_INTEGER_DIGITS)
		return false;
	for (size_t i = buf[0] == '-'; i < n; i++)
		if (buf[i] < '0' || buf[i] > '9')
			return false;
	errno = 0;
	*out = strtoll(buf, &end, 10);
	return errno == 0 && (size_t)(end - buf) == n;
}

static bool jv_number(struct jv_in *in, double *out, long long *integer, bool *is_integer)
{
	char local[JV_NUMBER_LOCAL], *buf = local, *after;
	size_t n = 0;

	while (in->p + n < in->end) {
		char c = in->p[n];

		if (!((c >= '0' && c <= '9') || c == '+' || c == '-' || c == 'e' || c == 'E' ||
		      c == '.'))
			break;
		n++;
	}
	if (n >= sizeof(local) && !(buf = jv_alloc(in->a, n + 1)))
		return false;
	memcpy(buf, in->p, n);
	buf[n] = '\0';
	/* tokenscope never sets a locale: strtod's decimal point is '.'. */
	*out = strtod(buf, &after);
	if (after == buf)
		return false;
	*is_integer = jv_integer(buf, (size_t)(after - buf), integer);
	in->p += after - buf;
	return true;
}

static struct jv *jv_value(struct jv_in *in);

static struct jv *jv_node(struct jv_in *in, enum jv_type t)
{
	struct jv *v = jv_alloc(in->a, sizeof(*v));

	if (v) {
		memset(v, 0, sizeof(*v));
		v->type = t;
	}
	return v;
}

/* An array or object at in->p (its bracket): elements, or members with their keys. */
static struct jv *jv_container(struct jv_in *in, bool object)
{
	struct jv *v = jv_node(in, object ? JV_OBJECT : JV_ARRAY), **tail;
	char close = object ? '}' : ']';

	if (!v || ++in->depth > JV_DEPTH_MAX)
		return NULL;
	tail = &v->child;
	in->p++;
	jv_skip_ws(in);
	if (in->p < in->end && *in->p == close) {
		in->p++;
		in->depth--;
		return v;
	}
	for (;;) {
		const char *key = NULL;
		struct jv *e;

		jv_skip_ws(in);
		if (object) {
			if (in->p >= in->end || *in->p != '"' || !(key = jv_string(in)))
				return NULL;
			jv_skip_ws(in);
			if (in->p >= in->end || *in->p != ':')
				return NULL;
			in->p++;
		}
		e = jv_value(in);
		if (!e)
			return NULL;
		e->key = key;
		*tail = e;
		tail = &e->next;
		jv_skip_ws(in);
		if (in->p >= in->end)
			return NULL;
		if (*in->p == close)
			break;
		if (*in->p != ',')
			return NULL;
		in->p++;
	}
	in->p++;
	in->depth--;
	return v;
}

static struct jv *jv_value(struct jv_in *in)
{
	struct jv *v;
	char c;

	jv_skip_ws(in);
	if (in->p >= in->end)
		return NULL;
	c = *in->p;
	if (c == '{' || c == '[')
		return jv_container(in, c == '{');
	if (c == '"') {
		const char *s = jv_string(in);

		if (!s || !(v = jv_node(in, JV_STRING)))
			return NULL;
		v->str = s;
		return v;
	}
	if (c == '-' || (c >= '0' && c <= '9')) {
		double d;
		long long i = 0;
		bool is_int = false;

		if (!jv_number(in, &d, &i, &is_int) || !(v = jv_node(in, JV_NUMBER)))
			return NULL;
		v->num = d;
		v->integer = i;
		v->is_integer = is_int;
		return v;
	}
	if (jv_lit(in, "null", 4))
		return jv_node(in, JV_NULL);
	if (jv_lit(in, "false", 5))
		return jv_node(in, JV_FALSE);
	if (jv_lit(in, "true", 4))
		return jv_node(in, JV_TRUE);
	return NULL;
}

const struct jv *jv_parse(struct jv_arena *a, const char *s, size_t n)
{
	struct jv_in in = { .p = s, .end = s + n, .a = a };

	if (!s)
		return NULL;
	/* A byte order mark, where two bytes or more follow it. */
	if (n >= 5 && !memcmp(s, "\xef\xbb\xbf", 3))
		in.p += 3;
	return jv_value(&in);
}

const struct jv *jv_get(const struct jv *obj, const char *key)
{
	if (!jv_is(obj, JV_OBJECT))
		return NULL;
	/* The first bytes compared inline: most members differ there (a frame's reader asks
	 * for a dozen keys of each object). */
	for (const struct jv *m = obj->child; m; m = m->next)
		if (m->key[0] == key[0] && !strcmp(m->key, key))
			return m;
	return NULL;
}
