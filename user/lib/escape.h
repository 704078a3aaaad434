/* SPDX-License-Identifier: MIT */
/*
 * Strings from outside made safe for each kind of output, in one place.
 *
 * A model name, a request target, a method, a process or host name, a recording's header: any
 * of them can hold bytes that are not UTF-8, control characters and terminal escape sequences.
 * Where such a string enters a request record, utf8_clean() makes it printable UTF-8. Each output
 * kind then writes every string through its own function below, which checks again, so no field
 * and no caller can make an output carry what its reader cannot take:
 *
 *   terminal text (request lines, top, summaries)   escape_text_col: printable, cut at a
 *                                                   character to a display width
 *   JSON lines, OTLP JSON, the timeline             escape_json: strict UTF-8 JSON strings
 *   the HTML report's data                          escape_json through escape_html_open:
 *                                                   no '<' can end the script element
 *   Prometheus labels                               escape_prom_label: the exposition format's
 *                                                   escapes, strict UTF-8
 */
#ifndef TS_ESCAPE_H
#define TS_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/*
 * Bytes a column of width display cells can need: a cell's character is at most 4 bytes, and
 * characters of no width (combining marks) are kept only while they fit in this.
 */
#define ESCAPE_COL_BYTES(width) ((width)*4 + 16)

/*
 * s as one column of a terminal line, into dst (cap bytes, NUL-terminated), returned: every
 * byte that does not start well-formed UTF-8 and every character that is not utf8_printable (a
 * control character, a bidirectional override or mark) becomes U+FFFD; the
 * text is cut at a character so that it takes at most width cells (East Asian wide characters
 * take two, combining marks none); with pad, spaces fill it to width cells (left-aligned).
 */
const char *escape_text_col(char *dst, size_t cap, const char *s, unsigned width, bool pad);

/* Display cells of the code point cp in a terminal: 0, 1 or 2. */
int escape_cell_width(unsigned cp);

/* s as a JSON string (quotes included) on f: strict UTF-8, control characters escaped, bytes
 * that are not UTF-8 as \ufffd. */
void escape_json(FILE *f, const char *s);

/*
 * `key="value"` as the Prometheus text format wants it, into out (at least
 * ESCAPE_PROM_LABEL_BYTES(strlen(key), strlen(value)) bytes): backslash, double quote and newline
 * escaped, bytes that are not UTF-8 replaced by U+FFFD. Returns the end of what it wrote (its
 * NUL).
 */
#define ESCAPE_PROM_LABEL_BYTES(keylen, valuelen) ((keylen) + 3 * (valuelen) + 4)
char *escape_prom_label(char *out, const char *key, const char *value);
/* The same, written to f. */
void escape_prom_label_file(FILE *f, const char *key, const char *value);

/*
 * The HTML report's data is JSON inside a <script> element: a '<' in any string could end the
 * element (</script>) or open a comment (<!--). A stream made by escape_html_open writes what
 * it is given to f with every '<' as \u003c, which JSON reads back as '<'. NULL when it cannot be
 * made.
 */
FILE *escape_html_open(FILE *f);

#endif
