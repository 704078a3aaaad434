// SPDX-License-Identifier: MIT
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/escape.h"
#include "lib/utf8.h"

struct cp_range {
	unsigned lo, hi;
};

static bool in_ranges(unsigned cp, const struct cp_range *r, size_t n)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (cp < r[mid].lo)
			hi = mid;
		else if (cp > r[mid].hi)
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/* Characters of no width: the combining-mark blocks, zero-width spaces and joiners, variation
 * selectors. Not every nonspacing mark of Unicode: a mark outside these takes a cell, which
 * cuts a column a cell early, never late. */
static const struct cp_range zero_width[] = {
	{ 0x0300, 0x036f }, { 0x0483, 0x0489 },	  { 0x0591, 0x05bd }, { 0x0610, 0x061a },
	{ 0x064b, 0x065f }, { 0x0e31, 0x0e31 },	  { 0x0e34, 0x0e3a }, { 0x0e47, 0x0e4e },
	{ 0x1ab0, 0x1aff }, { 0x1dc0, 0x1dff },	  { 0x200b, 0x200d }, { 0x20d0, 0x20ff },
	{ 0x302a, 0x302d }, { 0x3099, 0x309a },	  { 0xfe00, 0xfe0f }, { 0xfe20, 0xfe2f },
	{ 0xfeff, 0xfeff }, { 0xe0100, 0xe01ef },
};

/* East Asian Wide and Fullwidth blocks, and the emoji blocks terminals draw two cells wide. */
static const struct cp_range wide[] = {
	{ 0x1100, 0x115f },   { 0x231a, 0x231b },   { 0x2329, 0x232a },	  { 0x23e9, 0x23ec },
	{ 0x23f0, 0x23f0 },   { 0x23f3, 0x23f3 },   { 0x25fd, 0x25fe },	  { 0x2614, 0x2615 },
	{ 0x2648, 0x2653 },   { 0x26aa, 0x26ab },   { 0x26bd, 0x26be },	  { 0x26c4, 0x26c5 },
	{ 0x26ce, 0x26ce },   { 0x26d4, 0x26d4 },   { 0x26ea, 0x26ea },	  { 0x26f2, 0x26f5 },
	{ 0x26fa, 0x26fa },   { 0x26fd, 0x26fd },   { 0x2705, 0x2705 },	  { 0x270a, 0x270b },
	{ 0x2728, 0x2728 },   { 0x274c, 0x274c },   { 0x2753, 0x2755 },	  { 0x2757, 0x2757 },
	{ 0x2795, 0x2797 },   { 0x27b0, 0x27b0 },   { 0x27bf, 0x27bf },	  { 0x2b1b, 0x2b1c },
	{ 0x2b50, 0x2b50 },   { 0x2b55, 0x2b55 },   { 0x2e80, 0x303e },	  { 0x3041, 0x33ff },
	{ 0x3400, 0x4dbf },   { 0x4e00, 0x9fff },   { 0xa000, 0xa4cf },	  { 0xa960, 0xa97f },
	{ 0xac00, 0xd7a3 },   { 0xf900, 0xfaff },   { 0xfe10, 0xfe19 },	  { 0xfe30, 0xfe6f },
	{ 0xff00, 0xff60 },   { 0xffe0, 0xffe6 },   { 0x16fe0, 0x16fe4 }, { 0x17000, 0x18cff },
	{ 0x1b000, 0x1b2ff }, { 0x1f004, 0x1f004 }, { 0x1f0cf, 0x1f0cf }, { 0x1f18e, 0x1f18e },
	{ 0x1f191, 0x1f19a }, { 0x1f200, 0x1f251 }, { 0x1f300, 0x1f64f }, { 0x1f680, 0x1f6ff },
	{ 0x1f7e0, 0x1f7eb }, { 0x1f90c, 0x1f9ff }, { 0x1fa70, 0x1faff }, { 0x20000, 0x2fffd },
	{ 0x30000, 0x3fffd },
};

#define NRANGES(a) (sizeof(a) / sizeof((a)[0]))

int escape_cell_width(unsigned cp)
{
	if (cp < 0x300)
		return 1;
	if (in_ranges(cp, zero_width, NRANGES(zero_width)))
		return 0;
	return in_ranges(cp, wide, NRANGES(wide)) ? 2 : 1;
}

const char *escape_text_col(char *dst, size_t cap, const char *src, unsigned width, bool pad)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t n = strlen(src), o = 0;
	unsigned cells = 0;

	while (n) {
		size_t len = utf8_len(s, n), step = len ? len : 1;
		const unsigned char *out = s;
		size_t out_len = len;
		int w;

		if (!len || !utf8_printable(s, len)) {
			out = (const unsigned char *)UTF8_REPLACEMENT;
			out_len = UTF8_REPLACEMENT_BYTES;
		}
		w = escape_cell_width(utf8_decode(out, out_len));
		if (cells + w > width || o + out_len >= cap)
			break;
		memcpy(dst + o, out, out_len);
		o += out_len;
		cells += w;
		s += step;
		n -= step;
	}
	while (pad && cells < width && o + 1 < cap) {
		dst[o++] = ' ';
		cells++;
	}
	dst[o] = '\0';
	return dst;
}

void escape_json(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s, *run = p;
	size_t left = strlen(s);

	/* Runs of bytes that need no escape go out in one fwrite: a byte at a time was most of
	 * the cost of a timeline. Bytes that are not UTF-8 become U+FFFD: one such byte makes a
	 * strict reader (an OpenTelemetry collector) refuse the whole document. */
	fputc('"', f);
	while (left) {
		size_t len = *p >= 0x80 ? utf8_len(p, left) : 1;

		if (len && (*p >= 0x80 || (*p >= 0x20 && *p != '"' && *p != '\\'))) {
			p += len;
			left -= len;
			continue;
		}
		fwrite(run, 1, p - run, f);
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
			if (len)
				fprintf(f, "\\u%04x", *p);
			else
				fputs("\\ufffd", f);
		}
		p++;
		left--;
		run = p;
	}
	fwrite(run, 1, p - run, f);
	fputc('"', f);
}

char *escape_prom_label(char *out, const char *key, const char *value)
{
	const unsigned char *s = (const unsigned char *)value;
	size_t n = strlen(value), klen = strlen(key);
	char *o = out;

	memcpy(o, key, klen);
	o += klen;
	*o++ = '=';
	*o++ = '"';
	while (n) {
		size_t len = utf8_len(s, n);

		if (*s == '\\' || *s == '"') {
			*o++ = '\\';
			*o++ = *s;
		} else if (*s == '\n') {
			*o++ = '\\';
			*o++ = 'n';
		} else if (len) {
			memcpy(o, s, len);
			o += len;
		} else {
			memcpy(o, UTF8_REPLACEMENT, UTF8_REPLACEMENT_BYTES);
			o += UTF8_REPLACEMENT_BYTES;
		}
		s += len ? len : 1;
		n -= len ? len : 1;
	}
	*o++ = '"';
	*o = 0;
	return o;
}

void escape_prom_label_file(FILE *f, const char *key, const char *value)
{
	char small[256], *buf = small;
	size_t need = ESCAPE_PROM_LABEL_BYTES(strlen(key), strlen(value));

	if (need > sizeof(small) && !(buf = malloc(need))) {
		/* Without memory the value is left out rather than written unescaped. */
		fprintf(f, "%s=\"\"", key);
		return;
	}
	escape_prom_label(buf, key, value);
	fputs(buf, f);
	if (buf != small)
		free(buf);
}

static ssize_t html_write(void *cookie, const char *buf, size_t n)
{
	FILE *f = cookie;
	size_t run = 0;

	for (size_t i = 0; i < n; i++) {
		if (buf[i] != '<')
			continue;
		fwrite(buf + run, 1, i - run, f);
		fputs("\\u003c", f);
		run = i + 1;
	}
	fwrite(buf + run, 1, n - run, f);
	return ferror(f) ? -1 : (ssize_t)n;
}

FILE *escape_html_open(FILE *f)
{
	return fopencookie(f, "w", (cookie_io_functions_t){ .write = html_write });
}
