/* SPDX-License-Identifier: MIT */
/*
 * JSON from traffic into jansson, read as leniently as tokenscope always has.
 *
 * tokenscope read frames and request bodies with cJSON before jansson, and cJSON accepted
 * texts that jansson refuses. jsonload_lenient() accepts them still, with the values cJSON
 * gave, so that what a server sends is classified as it was:
 * - anything after the top-level value (JSON_DISABLE_EOF_CHECK, and for a scalar the rewrite
 *   below) and a top-level value that is not an object or array (JSON_DECODE_ANY);
 * - integers past int64_t (JSON_DECODE_INT_AS_REAL: every number is a double, as cJSON's);
 * - \u0000 in a string (JSON_ALLOW_NUL); callers read strings as C strings, so it ends the
 *   string there, as it did in cJSON;
 * - what only a rewrite makes strict JSON, done only once jansson has refused the text: bytes
 *   that are not UTF-8 and control characters unescaped in a string (each becomes U+FFFD,
 *   which is what utf8_clean() made of them and which keeps a string non-empty and unlike any
 *   ASCII word), a NUL in a string, raw, or \u0000 in a key (jansson refuses that even with
 *   JSON_ALLOW_NUL), or a \u escape without four hex digits (cJSON read it as NUL): the string
 *   ends there; control characters between tokens (cJSON skipped
 *   every byte up to ' '), a UTF-8 byte order mark, numbers outside JSON's grammar ("01", "1.",
 *   "-.5") or past a double's range ("1e400", which becomes 1e308: no count either way).
 * Still different: nesting deeper than 1000 levels, which cJSON refused and jansson reads up to
 * 2048, and a bad escape after a NUL in a string, which cJSON refused and the rewrite drops
 * with the rest of that string.
 */
#ifndef TS_JSONLOAD_H
#define TS_JSONLOAD_H

#include <stddef.h>

#include <jansson.h>

/* The flags jsonload_lenient() always adds to the caller's. */
#define JSONLOAD_FLAGS \
	(JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL)

/*
 * The value of the len bytes at data, NULL if even the lenient reading fails (or if flags has
 * JSON_REJECT_DUPLICATES and a key is given twice). flags adds to JSONLOAD_FLAGS.
 */
json_t *jsonload_lenient(const char *data, size_t len, size_t flags);

#endif
