/* SPDX-License-Identifier: MIT */
/*
 * A small JSON writer onto a stdio stream: objects written field by field in one pass, strings
 * escaped, integers printed exactly (nanosecond timestamps exceed a double's 53 bits after a
 * long uptime), NaN and infinities as null.
 */
#ifndef TS_JSONW_H
#define TS_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct jsonw {
	FILE *f;
	bool need_comma;
};

void jsonw_begin(struct jsonw *w, FILE *f); /* '{' */
void jsonw_end(struct jsonw *w);	    /* '}' */
void jsonw_key(struct jsonw *w, const char *key);
void jsonw_str(struct jsonw *w, const char *key, const char *v); /* NULL -> null */
void jsonw_u64(struct jsonw *w, const char *key, uint64_t v);
void jsonw_i64(struct jsonw *w, const char *key, int64_t v);
void jsonw_null(struct jsonw *w, const char *key);
/* Fixed-point with `decimals` digits; non-finite -> null. */
void jsonw_num(struct jsonw *w, const char *key, double v, int decimals);
void jsonw_bool(struct jsonw *w, const char *key, bool v);
/* Nested object or array under key (key NULL inside an array). */
void jsonw_obj_begin(struct jsonw *w, const char *key);
void jsonw_obj_end(struct jsonw *w);
void jsonw_arr_begin(struct jsonw *w, const char *key);
void jsonw_arr_end(struct jsonw *w);
/* The decimal digits of v (no terminating NUL) into out, which has room for JSONW_U64_DIGITS;
 * returns how many. What jsonw_u64 prints, for writers that format by hand. */
#define JSONW_U64_DIGITS 20
size_t jsonw_fmt_u64(char *out, uint64_t v);

#endif
