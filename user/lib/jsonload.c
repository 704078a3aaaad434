// SPDX-License-Identifier: MIT
/*
 * Lenient JSON reading; the contract is in jsonload.h.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/jsonload.h"
#include "lib/utf8.h"

/* The most bytes jsonload_rewrite() writes for one it reads: a number's digits as "%.17g"
 * writes them ("0.1", 3 bytes, becomes 19), more than U+FFFD for a byte. */
#define JSONLOAD_GROWTH 8
/* Every number past a double's range becomes this: it is no count either way. */
#define JSONLOAD_HUGE "1e308"
/* "%.17g" of a double, sign and exponent included. */
#define JSONLOAD_NUMBER_MAX 32
#define JSONLOAD_BOM "\xef\xbb\xbf"
#define JSONLOAD_ESCAPE_BYTES 6 /* \uXXXX */

static bool jsonload_space(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

struct jsonload_out {
	char *p;
	size_t n;
};

static void jsonload_put(struct jsonload_out *o, const void *s, size_t n)
{
	memcpy(o->p + o->n, s, n);
	o->n += n;
}

/* cJSON's parse_hex4: the four hex digits' value, 0 if any is not one. */
static unsigned jsonload_hex4(const char *s)
{
	unsigned v = 0;

	for (int k = 0; k < 4; k++) {
		char c = s[k];

		if (c >= '0' && c <= '9')
			v = v * 16 + (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v * 16 + (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v = v * 16 + (unsigned)(c - 'A' + 10);
		else
			return 0;
	}
	return v;
}

/*
 * The escape at s (a backslash, n bytes up to the string's closing quote, which s[1] may be) as
 * cJSON read it: its length, 0 if cJSON refused it; *nul if it read it as NUL (\u0000, or a \u
 * without four hex digits).
 */
static size_t jsonload_escape(const char *s, size_t n, bool *nul)
{
	unsigned hi, lo;

	*nul = false;
	/* cJSON took the closing quote for the escaped character too: the string then ends
	 * there. */
	if (s[1] && strchr("bfnrt\"\\/", s[1]))
		return 2;
	if (n < JSONLOAD_ESCAPE_BYTES || s[1] != 'u')
		return 0;
	hi = jsonload_hex4(s + 2);
	if (hi >= 0xdc00 && hi <= 0xdfff)
		return 0;
	if (hi < 0xd800 || hi > 0xdbff) {
		*nul = hi == 0;
		return JSONLOAD_ESCAPE_BYTES;
	}
	if (n < 2 * JSONLOAD_ESCAPE_BYTES || s[6] != '\\' || s[7] != 'u')
		return 0;
	lo = jsonload_hex4(s + 8);
	return lo >= 0xdc00 && lo <= 0xdfff ? 2 * JSONLOAD_ESCAPE_BYTES : 0;
}

/*
 * The string whose opening quote is at data[*i] (n bytes in all), as cJSON read it, in strict
 * JSON; *i past its closing quote. False if cJSON refused it.
 */
static bool jsonload_string(const char *data, size_t n, size_t *i, struct jsonload_out *o)
{
	size_t end = *i + 1, at = *i + 1;
	bool cut = false, nul;

	/* cJSON found the closing quote first, stepping over each escaped byte. */
	while (end < n && data[end] != '"')
		end += data[end] == '\\' ? 2 : 1;
	if (end >= n)
		return false;
	jsonload_put(o, "\"", 1);
	while (at < end) {
		unsigned char c = (unsigned char)data[at];
		size_t k;

		if (c == '\\') {
			k = jsonload_escape(data + at, end - at, &nul);
			if (!k)
				return false;
			cut |= nul;
			/* The escapes after a NUL are still checked: cJSON checked them. */
			if (!cut)
				jsonload_put(o, data + at, k);
		} else {
			k = c < ' ' ? 0 : utf8_len((const unsigned char *)data + at, end - at);
			cut |= c == '\0';
			if (!cut && k)
				jsonload_put(o, data + at, k);
			else if (!cut)
				jsonload_put(o, UTF8_REPLACEMENT, UTF8_REPLACEMENT_BYTES);
			if (!k)
				k = 1;
		}
		at += k;
	}
	jsonload_put(o, "\"", 1);
	*i = end + 1;
	return true;
}

/*
 * The number at data[*i] as cJSON read it: strtod() over the characters a number may have.
 * *i past what strtod() took; false if it took nothing, or if inside a container (nested) it
 * left some of those characters, which cannot come next there.
 */
static bool jsonload_number(const char *data, size_t n, size_t *i, bool nested,
			    struct jsonload_out *o)
{
	size_t k = 0, took;
	char *num, *end;
	double d;

	while (*i + k < n && data[*i + k] && strchr("0123456789+-eE.", data[*i + k]))
		k++;
	num = strndup(data + *i, k);
	if (!num)
		return false;
	d = strtod(num, &end);
	took = (size_t)(end - num);
	free(num);
	if (!took || (nested && took < k))
		return false;
	if (isinf(d))
		jsonload_put(o, d < 0 ? "-" JSONLOAD_HUGE : JSONLOAD_HUGE,
			     strlen(JSONLOAD_HUGE) + (d < 0));
	else
		o->n += (size_t)snprintf(o->p + o->n, JSONLOAD_NUMBER_MAX, "%.17g", d);
	*i += took;
	return true;
}

/* The literal data starts with, which cJSON took at the top level whatever followed; or NULL. */
static const char *jsonload_literal(const char *data, size_t n)
{
	static const char *const literals[] = { "true", "false", "null" };

	for (size_t l = 0; l < sizeof(literals) / sizeof(literals[0]); l++)
		if (n >= strlen(literals[l]) && memcmp(data, literals[l], strlen(literals[l])) == 0)
			return literals[l];
	return NULL;
}

/*
 * data as cJSON read it, in strict JSON (jsonload.h says what changes): a malloc'd copy of *len
 * bytes (set to the copy's length), or NULL where cJSON refused data too.
 */
static char *jsonload_rewrite(const char *data, size_t *len)
{
	size_t n = *len, depth = 0, i = 0;
	struct jsonload_out o = { malloc(n * JSONLOAD_GROWTH + JSONLOAD_NUMBER_MAX), 0 };

	if (!o.p)
		return NULL;
	/* cJSON skipped a byte order mark with two bytes or more after it. */
	if (n > strlen(JSONLOAD_BOM) + 1 && memcmp(data, JSONLOAD_BOM, strlen(JSONLOAD_BOM)) == 0)
		i = strlen(JSONLOAD_BOM);
	/* Till the end, or the end of the top-level value: cJSON ignored what came after it. */
	while (i < n) {
		unsigned char c = (unsigned char)data[i];
		const char *lit = depth ? NULL : jsonload_literal(data + i, n - i);

		if (lit) {
			jsonload_put(&o, lit, strlen(lit));
			break;
		}
		if (c == '"' || c == '-' || (c >= '0' && c <= '9')) {
			if (c == '"' ? !jsonload_string(data, n, &i, &o)
				     : !jsonload_number(data, n, &i, depth, &o))
				goto refused;
			if (!depth)
				break;
			continue;
		}
		if (c == '{' || c == '[')
			depth++;
		/* A control character between tokens becomes a space: cJSON skipped them. */
		jsonload_put(&o, c < ' ' && !jsonload_space(c) ? " " : data + i, 1);
		i++;
		if ((c == '}' || c == ']') && depth && --depth == 0)
			break;
	}
	o.p[o.n] = '\0';
	*len = o.n;
	return o.p;
refused:
	free(o.p);
	return NULL;
}

json_t *jsonload_lenient(const char *data, size_t len, size_t flags)
{
	json_error_t err;
	json_t *root = json_loadb(data, len, JSONLOAD_FLAGS | flags, &err);
	char *strict;

	if (root || json_error_code(&err) == json_error_duplicate_key)
		return root;
	strict = jsonload_rewrite(data, &len);
	if (!strict)
		return NULL;
	root = json_loadb(strict, len, JSONLOAD_FLAGS | flags, NULL);
	free(strict);
	return root;
}
