/* SPDX-License-Identifier: MIT */
/* Display cells of text as escape_text_col counts them, for the tests of terminal columns. */
#ifndef TS_TEST_CELLS_H
#define TS_TEST_CELLS_H

#include <string.h>

#include "lib/escape.h"
#include "lib/utf8.h"

/* The cells of the n bytes at s; -1 if they are not printable UTF-8. */
static inline int text_cells(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	int w = 0;

	while (n) {
		size_t len = utf8_len(p, n);

		if (!len || (len == 1 && (*p < 0x20 || *p == 0x7f)))
			return -1;
		w += escape_cell_width(utf8_decode(p, len));
		p += len;
		n -= len;
	}
	return w;
}

#endif
