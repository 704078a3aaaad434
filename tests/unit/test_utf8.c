// SPDX-License-Identifier: MIT
/*
 * user/lib/utf8.c: the strict UTF-8 check every encoder relies on, and the cleaning of strings from
 * traffic: controls and bytes that are not UTF-8 replaced, the result cut at a character.
 */
#include "check.h"
#include "lib/utf8.h"

TEST(test_len)
{
	static const struct {
		const char *s;
		size_t n, len;
	} cases[] = {
		{ "a", 1, 1 },
		{ "\xc3\xa9", 2, 2 },
		{ "\xe2\x82\xac", 3, 3 },
		{ "\xf0\x9f\x98\x80", 4, 4 },
		{ "\xf4\x8f\xbf\xbf", 4, 4 }, /* U+10FFFF */
		{ "\xc3\xa9", 1, 0 },	      /* cut */
		{ "\x80", 1, 0 },	      /* continuation alone */
		{ "\xc1\xbf", 2, 0 },	      /* overlong */
		{ "\xe0\x9f\xbf", 3, 0 },     /* overlong */
		{ "\xf0\x8f\xbf\xbf", 4, 0 }, /* overlong */
		{ "\xed\xa0\x80", 3, 0 },     /* surrogate */
		{ "\xf4\x90\x80\x80", 4, 0 }, /* past U+10FFFF */
		{ "\xf5\x80\x80\x80", 4, 0 },
		{ "\xe2\x28\xa1", 3, 0 }, /* bad continuation */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!ASSERT_EQ(utf8_len((const unsigned char *)cases[i].s, cases[i].n),
			       cases[i].len, cases[i].s))
			printf("  case %zu\n", i);
}

TEST(test_clean)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B" },
		{ "caf\xc3\xa9 \xe2\x82\xac", "caf\xc3\xa9 \xe2\x82\xac" },
		{ "a\x1b[31mb", "a" UTF8_REPLACEMENT "[31mb" },
		{ "x\ny\tz\x7f", "x" UTF8_REPLACEMENT "y" UTF8_REPLACEMENT "z" UTF8_REPLACEMENT },
		/* C1 controls (U+009B is CSI to some terminals); U+00A0 is text. */
		{ "\xc2\x9b"
		  "2J\xc2\xa0",
		  UTF8_REPLACEMENT "2J\xc2\xa0" },
		{ "\xff\xfe", UTF8_REPLACEMENT UTF8_REPLACEMENT },
		{ "\xe2\x82", UTF8_REPLACEMENT UTF8_REPLACEMENT },
	};
	char out[64];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		utf8_clean(out, sizeof(out), cases[i].in, strlen(cases[i].in));
		ASSERT_STREQ(out, cases[i].out, "cleaned");
	}
	/* NUL inside the counted bytes is a control too. */
	ASSERT_EQ(utf8_clean(out, sizeof(out), "a\0b", 3), 5, "NUL replaced");
	ASSERT_STREQ(out, "a" UTF8_REPLACEMENT "b", "NUL replaced");
}

TEST(test_cut_at_a_character)
{
	char out[6];

	/* 5 bytes of room: "ab" and one 3-byte character fit, a second does not. */
	ASSERT_EQ(utf8_clean(out, sizeof(out), "ab\xe2\x82\xac\xe2\x82\xac", 8), 5, "bytes");
	ASSERT_STREQ(out, "ab\xe2\x82\xac", "whole characters only");
	ASSERT_EQ(utf8_clean(out, sizeof(out), "abcd\xff", 5), 4, "no room for U+FFFD");
	ASSERT_STREQ(out, "abcd", "replacement not cut");
	ASSERT_EQ(utf8_clean(out, 1, "abc", 3), 0, "room for the NUL only");
	ASSERT_STREQ(out, "", "empty");
}

/* A bidirectional override would show the rest of a terminal line reversed (and the marks,
 * embeddings and isolates reorder it too): each becomes U+FFFD; other format characters stay. */
TEST(test_bidi_replaced)
{
	char out[64];

	utf8_clean(out, sizeof(out),
		   "a\xe2\x80\xae"
		   "b\xe2\x81\xa6"
		   "c\xe2\x80\x8f"
		   "d",
		   13);
	ASSERT_STREQ(out,
		     "a\xef\xbf\xbd"
		     "b\xef\xbf\xbd"
		     "c\xef\xbf\xbd"
		     "d",
		     "RLO, LRI, RLM");
	utf8_clean(out, sizeof(out), "x\xe2\x80\x8dy\xe2\x80\x94", 8);
	ASSERT_STREQ(out, "x\xe2\x80\x8dy\xe2\x80\x94", "a joiner and a dash kept");
}

/* Every byte string of up to 3 bytes cleans to text that utf8_len accepts end to end. */
TEST(test_exhaustive_short)
{
	unsigned char in[3];
	char out[16];

	for (uint32_t v = 0; v < (1u << 24); v += 7) {
		size_t n, i = 0;

		in[0] = v, in[1] = v >> 8, in[2] = v >> 16;
		n = utf8_clean(out, sizeof(out), (const char *)in, 3);
		while (i < n) {
			size_t len = utf8_len((const unsigned char *)out + i, n - i);

			if (!len || (len == 1 && ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)))
				break;
			i += len;
		}
		if (!ASSERT_EQ(i, n, "clean output is printable UTF-8"))
			return;
	}
}

int main(void)
{
	return check_run_all();
}
