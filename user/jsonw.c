// SPDX-License-Identifier: MIT
#include <inttypes.h>
#include <math.h>

#include "jsonw.h"

void jsonw_escape(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\r':
			fputs("\\r", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
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
		jsonw_escape(w->f, key);
		fputc(':', w->f);
	}
}

void jsonw_str(struct jsonw *w, const char *key, const char *v)
{
	jsonw_key(w, key);
	if (v)
		jsonw_escape(w->f, v);
	else
		fputs("null", w->f);
}

void jsonw_u64(struct jsonw *w, const char *key, uint64_t v)
{
	jsonw_key(w, key);
	fprintf(w->f, "%" PRIu64, v);
}

void jsonw_i64(struct jsonw *w, const char *key, int64_t v)
{
	jsonw_key(w, key);
	fprintf(w->f, "%" PRId64, v);
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
