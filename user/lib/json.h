/* SPDX-License-Identifier: MIT */
/*
 * A JSON reader for what the pipeline parses whole: stream frames and request bodies.
 *
 * One pass builds a tree in an arena the caller empties when it is done with the tree: a frame
 * costs no malloc and no free, and nothing is copied but the strings, decoded. The grammar is
 * JSON's, read leniently where servers and clients are known to be loose, and where a stricter
 * reading would only lose a frame:
 * - bytes in strings are taken as they are (not checked as UTF-8, control characters too);
 *   a string is a C string, so one holding \u0000 ends there (as does a \u escape whose four
 *   bytes are no hex digits);
 * - a number is what strtod reads of the longest run of [0-9+-.eE] ("01" and "1." are numbers);
 * - anything after the top-level value is ignored, and a UTF-8 byte order mark before it skipped;
 * - whitespace is every byte up to and including ' '.
 * An object's members keep their order; jv_get gives the first of a key given twice. Nesting
 * deeper than JV_DEPTH_MAX levels is refused.
 */
#ifndef TS_JSON_H
#define TS_JSON_H

#include <stdbool.h>
#include <stddef.h>

#define JV_DEPTH_MAX 1000

enum jv_type {
	JV_NULL = 1,
	JV_FALSE,
	JV_TRUE,
	JV_NUMBER,
	JV_STRING,
	JV_ARRAY,
	JV_OBJECT,
};

struct jv {
	struct jv *next;  /* the next element or member of the parent */
	struct jv *child; /* an array's or object's first */
	const char *key;  /* a member's key (NUL-terminated), else NULL */
	const char *str;  /* a string's value (NUL-terminated) */
	double num;	  /* a number's value */
	/* A number written as an integer ([-]digits) that fits: its exact value (num may have
	 * rounded it: ids such as SGLang's bootstrap_room go up to 2^63 - 1). */
	long long integer;
	bool is_integer;
	enum jv_type type;
};

/*
 * Where trees are built: the caller's buffer first, then blocks from malloc while a tree is
 * larger, all given back by jv_arena_reset (the blocks freed). Zeroed, it has no buffer.
 */
struct jv_block;
struct jv_arena {
	unsigned char *mem;
	size_t cap, used;
	struct jv_block *blocks; /* beyond mem, freed at reset */
};

void jv_arena_init(struct jv_arena *a, void *mem, size_t cap);
void jv_arena_reset(struct jv_arena *a);

/* The tree of the n bytes at s, in a; NULL when they are not JSON (or memory ran out). */
const struct jv *jv_parse(struct jv_arena *a, const char *s, size_t n);

static inline bool jv_is(const struct jv *v, enum jv_type t)
{
	return v && v->type == t;
}

#define jv_is_null(v) jv_is(v, JV_NULL)
#define jv_is_true(v) jv_is(v, JV_TRUE)
#define jv_is_number(v) jv_is(v, JV_NUMBER)
#define jv_is_string(v) jv_is(v, JV_STRING)
#define jv_is_array(v) jv_is(v, JV_ARRAY)
#define jv_is_object(v) jv_is(v, JV_OBJECT)

static inline bool jv_is_bool(const struct jv *v)
{
	return jv_is(v, JV_TRUE) || jv_is(v, JV_FALSE);
}

/* Each element of an array or member of an object v, in order (none for anything else). */
#define jv_foreach(el, v) for ((el) = (v) ? (v)->child : NULL; (el); (el) = (el)->next)

/* The first member of obj named key; NULL when obj is no object or has none. */
const struct jv *jv_get(const struct jv *obj, const char *key);

#endif
