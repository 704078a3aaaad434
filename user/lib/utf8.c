// SPDX-License-Identifier: MIT
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "lib/utf8.h"

size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

uint32_t utf8_decode(const unsigned char *s, size_t len)
{
	static const unsigned char lead_mask[] = { 0, 0x7f, 0x1f, 0x0f, 0x07 };
	uint32_t cp = s[0] & lead_mask[len];

	for (size_t i = 1; i < len; i++)
		cp = cp << 6 | (s[i] & 0x3f);
	return cp;
}

bool utf8_printable(const unsigned char *s, size_t len)
{
	uint32_t cp;

	if (len == 1)
		return s[0] >= 0x20 && s[0] != 0x7f;
	if (len == 2)
		return !(s[0] == 0xc2 && s[1] < 0xa0); /* C1 controls */
	if (len != 3 || s[0] != 0xe2)
		return true;
	/* The bidirectional marks, embeddings, overrides and isolates: U+200E, U+200F,
	 * U+202A..U+202E, U+2066..U+2069 (all E2 80 xx or E2 81 xx). */
	cp = utf8_decode(s, len);
	return !(cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
		 (cp >= 0x2066 && cp <= 0x2069));
}

size_t utf8_clean(char *dst, size_t cap, const char *src, size_t n)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t o = 0;

	while (n) {
		size_t len = utf8_len(s, n), step = len ? len : 1;
		const char *out = (const char *)s;
		size_t out_len = len;

		if (!len || !utf8_printable(s, len)) {
			out = UTF8_REPLACEMENT;
			out_len = UTF8_REPLACEMENT_BYTES;
		}
		if (o + out_len >= cap)
			break;
		memcpy(dst + o, out, out_len);
		o += out_len;
		s += step;
		n -= step;
	}
	dst[o] = '\0';
	return o;
}
