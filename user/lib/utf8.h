/* SPDX-License-Identifier: MIT */
/*
 * Text from outside (traffic, a recording, another process's name) made safe for every output.
 *
 * Strings taken from the bytes a server reads or writes can hold anything: bytes that are not
 * UTF-8 (a collector refuses a whole OTLP batch for one such byte, Prometheus a whole scrape),
 * newlines that split a JSON line or a text column, and terminal escape sequences. utf8_clean()
 * is applied where such a string enters a request record, so every sink gets clean text; the
 * encoders (JSON, Prometheus) check again with utf8_len(), so no caller can make them emit bytes
 * that are not UTF-8.
 */
#ifndef TS_UTF8_H
#define TS_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* U+FFFD REPLACEMENT CHARACTER, in UTF-8. */
#define UTF8_REPLACEMENT "\xef\xbf\xbd"
#define UTF8_REPLACEMENT_BYTES 3

/*
 * Length of the well-formed UTF-8 sequence at s (n >= 1 bytes available), 0 if there is none:
 * strict, as RFC 3629 (no overlong forms, no surrogates, nothing above U+10FFFF).
 */
size_t utf8_len(const unsigned char *s, size_t n);

/* The code point of the well-formed sequence of len (1 to 4) bytes at s (utf8_len's). */
uint32_t utf8_decode(const unsigned char *s, size_t len);

/*
 * Whether the well-formed character of len bytes at s may be shown as it is: not a control
 * character (C0, DEL, C1: some terminals obey C1 as escapes), nor a bidirectional mark, embedding,
 * override or isolate (a terminal that honours one shows the rest of the line in another order
 * than it was written).
 */
bool utf8_printable(const unsigned char *s, size_t len);

/*
 * Copies the n bytes of src into dst (cap >= 1 bytes, always NUL-terminated) as printable text:
 * well-formed UTF-8 kept; every byte that does not start one, NUL and every character that is not
 * utf8_printable replaced by U+FFFD; cut at a character boundary when dst is full. Returns the
 * bytes written, without the NUL. dst and src must not overlap.
 */
size_t utf8_clean(char *dst, size_t cap, const char *src, size_t n);

#endif
