// SPDX-License-Identifier: MIT
#include <math.h>
#include <string.h>

#include "lib/jsonw.h"
#include "lib/escape.h"

/* Two digits per division: a timeline formats a timestamp per token. */
static const char jsonw_digit_pairs[] = "00010203040506070809"
					"10111213141516171819"
					"20212223242526272829"
					"30313233343536373839"
					"40414243444546474849"
					"50515253545556575859"
					"60616263646566676869"
					"70717273747576777879"
					"80818283848586878889"
					"90919293949596979899";

size_t jsonw_fmt_u64(char *out, uint64_t v)
{
	char digits[JSONW_U64_DIGITS];
	char *p = digits + sizeof(digits);
	size_t n;

	while (v >= 100) {
		p -= 2;
		memcpy(p, jsonw_digit_pairs + 2 * (v % 100), 2);
		v /= 100;
	}
	if (v >= 10) {
		p -= 2;
		memcpy(p, jsonw_digit_pairs + 2 * v, 2);
	} else {
		*--p = '0' + v;
	}
	n = digits + sizeof(digits) - p;
	memcpy(out, p, n);
	return n;
}

void jsonw_begin(struct jsonw *w, FILE *f)
{
	w->f = f;
	w->need_comma = false;
	fputc('{', f);
}

void jsonw_end(struct jsonw *w)
{
	fputc('}', w->f);
}

void jsonw_key(struct jsonw *w, const char *key)
{
	if (w->need_comma)
		fputc(',', w->f);
	w->need_comma = true;
	if (key) {
		escape_json(w->f, key);
		fputc(':', w->f);
	}
}

void jsonw_str(struct jsonw *w, const char *key, const char *v)
{
	jsonw_key(w, key);
	if (v)
		escape_json(w->f, v);
	else
		fputs("null", w->f);
}

void jsonw_u64(struct jsonw *w, const char *key, uint64_t v)
{
	char buf[JSONW_U64_DIGITS];

	jsonw_key(w, key);
	fwrite(buf, 1, jsonw_fmt_u64(buf, v), w->f);
}

void jsonw_i64(struct jsonw *w, const char *key, int64_t v)
{
	char buf[JSONW_U64_DIGITS + 1];
	size_t n = 0;

	jsonw_key(w, key);
	if (v < 0)
		buf[n++] = '-';
	n += jsonw_fmt_u64(buf + n, v < 0 ? -(uint64_t)v : (uint64_t)v);
	fwrite(buf, 1, n, w->f);
}

void jsonw_null(struct jsonw *w, const char *key)
{
	jsonw_key(w, key);
	fputs("null", w->f);
}

void jsonw_num(struct jsonw *w, const char *key, double v, int decimals)
{
	jsonw_key(w, key);
	if (isfinite(v))
		fprintf(w->f, "%.*f", decimals, v);
	else
		fputs("null", w->f);
}

void jsonw_bool(struct jsonw *w, const char *key, bool v)
{
	jsonw_key(w, key);
	fputs(v ? "true" : "false", w->f);
}

void jsonw_obj_begin(struct jsonw *w, const char *key)
{
	jsonw_key(w, key);
	fputc('{', w->f);
	w->need_comma = false;
}

void jsonw_obj_end(struct jsonw *w)
{
	fputc('}', w->f);
	w->need_comma = true;
}

void jsonw_arr_begin(struct jsonw *w, const char *key)
{
	jsonw_key(w, key);
	fputc('[', w->f);
	w->need_comma = false;
}

void jsonw_arr_end(struct jsonw *w)
{
	fputc(']', w->f);
	w->need_comma = true;
}
