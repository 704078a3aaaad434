// SPDX-License-Identifier: MIT
/* user/lib/escape.c: each output kind's escaping of strings from outside. */
#include <stdint.h>
#include <stdlib.h>

#include "cells.h"
#include "check.h"
#include "lib/escape.h"
#include "lib/utf8.h"

TEST(test_text_col_ascii)
{
	char out[ESCAPE_COL_BYTES(6)];

	ASSERT_STREQ(escape_text_col(out, sizeof(out), "POST", 6, true), "POST  ", "padded");
	ASSERT_STREQ(escape_text_col(out, sizeof(out), "POST", 6, false), "POST", "not padded");
	ASSERT_STREQ(escape_text_col(out, sizeof(out), "OPTIONS", 6, true), "OPTION", "cut");
	ASSERT_STREQ(escape_text_col(out, sizeof(out), "", 6, true), "      ", "empty");
}

/* An HTTP/2 :method can carry an escape sequence: it becomes U+FFFD, and the column is cut
 * after whole characters, never inside a replacement character. */
TEST(test_text_col_controls)
{
	char out[ESCAPE_COL_BYTES(6)];

	escape_text_col(out, sizeof(out), "\033[2J\033]0;x\007GET", 6, true);
	ASSERT_STREQ(out, "\xef\xbf\xbd[2J\xef\xbf\xbd]", "escapes replaced, cut at 6 cells");
	ASSERT_EQ(text_cells(out, strlen(out)), 6, "six cells");
	escape_text_col(out, sizeof(out),
			"\xc2\x9b"
			"31m\x7f\xff",
			6, true);
	ASSERT_STREQ(out,
		     "\xef\xbf\xbd"
		     "31m\xef\xbf\xbd\xef\xbf\xbd",
		     "C1 CSI, DEL, a stray byte");
	/* A right-to-left override would show the rest of the line reversed. */
	escape_text_col(out, sizeof(out),
			"a\xe2\x80\xae"
			"bc",
			6, false);
	ASSERT_STREQ(out,
		     "a\xef\xbf\xbd"
		     "bc",
		     "bidi override replaced");
}

/* A model name in a script of wide characters: cut at a character, by display width. */
TEST(test_text_col_wide)
{
	const char *name = "通义千问-72B-Instruct-量化版本";
	char out[ESCAPE_COL_BYTES(30)];

	escape_text_col(out, sizeof(out), name, 30, true);
	ASSERT_STREQ(out, name, "30 cells: 4 wide, 14 narrow, 4 wide");
	escape_text_col(out, sizeof(out), name, 23, true);
	ASSERT_STREQ(out, "通义千问-72B-Instruct- ", "23 cells: the next wide one does not fit");
	ASSERT_EQ(text_cells(out, strlen(out)), 23, "23 cells");
	escape_text_col(out, sizeof(out), name, 7, true);
	ASSERT_STREQ(out, "通义千 ", "a wide character that would cross the edge is left out");
	ASSERT_EQ(text_cells(out, strlen(out)), 7, "padded to 7");
	/* A combining accent takes no cell of its own. */
	escape_text_col(out, sizeof(out), "e\xcc\x81tude", 3, false);
	ASSERT_STREQ(out, "e\xcc\x81tu", "the mark stays with its letter");
	escape_text_col(out, sizeof(out), "🚀🚀", 3, true);
	ASSERT_STREQ(out, "🚀 ", "an emoji takes two cells");
}

/* Any bytes make a column of exactly the width, in printable UTF-8. */
TEST(test_text_col_any_bytes)
{
	unsigned char in[9];
	char out[ESCAPE_COL_BYTES(5)];
	uint32_t seed = 1;

	for (int i = 0; i < 200000; i++) {
		for (size_t k = 0; k < sizeof(in) - 1; k++) {
			seed = seed * 1103515245 + 12345;
			in[k] = (unsigned char)(seed >> 16);
			if (!in[k])
				in[k] = 0xe4;
		}
		in[sizeof(in) - 1] = 0;
		escape_text_col(out, sizeof(out), (const char *)in, 5, true);
		if (!ASSERT_EQ(text_cells(out, strlen(out)), 5, "five printable cells"))
			return;
	}
}

TEST(test_prom_label)
{
	char out[ESCAPE_PROM_LABEL_BYTES(5, 8)];

	escape_prom_label(out, "model", "a\"b\\\n\xff");
	ASSERT_STREQ(out, "model=\"a\\\"b\\\\\\n\xef\xbf\xbd\"", "escapes and U+FFFD");
}

TEST(test_html_filter)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len), *f;

	if (!ASSERT_OK_PTR(m, "memstream"))
		return;
	f = escape_html_open(m);
	escape_json(f, "</script><!--");
	fclose(f);
	fclose(m);
	ASSERT_STREQ(buf, "\"\\u003c/script>\\u003c!--\"", "no '<' left");
	free(buf);
}

int main(void)
{
	return check_run_all();
}
