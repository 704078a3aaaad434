// SPDX-License-Identifier: MIT
/*
 * The JSON writer's exact bytes: string escapes (written by runs, not byte by byte), integers
 * printed by hand against printf over every digit count and both ends of their range, and an
 * object with each kind of value.
 */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "lib/escape.h"
#include "lib/jsonw.h"

/* What f holds, as a string the caller frees. */
struct mem {
	FILE *f;
	char *buf;
	size_t len;
};

static bool mem_open(struct mem *m)
{
	memset(m, 0, sizeof(*m));
	m->f = open_memstream(&m->buf, &m->len);
	return ASSERT_OK_PTR(m->f, "open_memstream");
}

static const char *mem_text(struct mem *m)
{
	fflush(m->f);
	return m->buf;
}

static void mem_close(struct mem *m)
{
	fclose(m->f);
	free(m->buf);
}

TEST(test_escape)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "", "\"\"" },
		{ "plain text", "\"plain text\"" },
		{ "a\"b", "\"a\\\"b\"" },
		{ "\\", "\"\\\\\"" },
		{ "line\nbreak\r\ttab", "\"line\\nbreak\\r\\ttab\"" },
		{ "\x01x\x1f", "\"\\u0001x\\u001f\"" },
		{ "\"\"\\\\", "\"\\\"\\\"\\\\\\\\\"" },
		/* DEL and UTF-8 pass through as they are. */
		{ "\x7f caf\xc3\xa9 \xe2\x82\xac", "\"\x7f caf\xc3\xa9 \xe2\x82\xac\"" },
		{ "end\n", "\"end\\n\"" },
		{ "\nstart", "\"\\nstart\"" },
		/* Not UTF-8: a lone continuation byte, a cut sequence, an overlong '/', a
		 * surrogate, a code point past U+10FFFF; each byte that starts no character is
		 * U+FFFD. */
		{ "a\x80"
		  "b",
		  "\"a\\ufffdb\"" },
		{ "caf\xc3", "\"caf\\ufffd\"" },
		{ "\xc0\xaf", "\"\\ufffd\\ufffd\"" },
		{ "\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"" },
		{ "\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"" },
		{ "\xe2\x82\xac\xff\xf0\x9f\x98\x80", "\"\xe2\x82\xac\\ufffd\xf0\x9f\x98\x80\"" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mem m;

		if (!mem_open(&m))
			return;
		escape_json(m.f, cases[i].in);
		ASSERT_STREQ(mem_text(&m), cases[i].out, "escaped");
		mem_close(&m);
	}
}

static bool check_u64(uint64_t v)
{
	char want[32], got[JSONW_U64_DIGITS + 1];
	size_t n = jsonw_fmt_u64(got, v);

	got[n] = 0;
	snprintf(want, sizeof(want), "%" PRIu64, v);
	return ASSERT_STREQ(got, want, "as printf prints it");
}

TEST(test_integers)
{
	struct mem m;
	struct jsonw w;
	uint64_t p = 1;

	/* Every digit count, and the values on both sides of each power of ten. */
	for (int i = 0; i < 20; i++, p *= 10)
		if (!check_u64(p) || !check_u64(p - 1) || !check_u64(p + 1))
			return;
	check_u64(UINT64_MAX);
	check_u64(1234567890123456789ull);

	if (!mem_open(&m))
		return;
	jsonw_begin(&w, m.f);
	jsonw_u64(&w, "a", 0);
	jsonw_u64(&w, "b", UINT64_MAX);
	jsonw_i64(&w, "c", -1);
	jsonw_i64(&w, "d", INT64_MIN);
	jsonw_i64(&w, "e", INT64_MAX);
	jsonw_i64(&w, "f", 0);
	jsonw_end(&w);
	ASSERT_STREQ(mem_text(&m),
		     "{\"a\":0,\"b\":18446744073709551615,\"c\":-1,\"d\":-9223372036854775808,"
		     "\"e\":9223372036854775807,\"f\":0}",
		     "integers");
	mem_close(&m);
}

TEST(test_object)
{
	struct mem m;
	struct jsonw w;

	if (!mem_open(&m))
		return;
	jsonw_begin(&w, m.f);
	jsonw_str(&w, "s", "x\"y");
	jsonw_str(&w, "n", NULL);
	jsonw_num(&w, "d", 1.0 / 3, 3);
	jsonw_num(&w, "nan", 0.0 / 0.0, 3);
	jsonw_bool(&w, "t", true);
	jsonw_null(&w, "z");
	jsonw_obj_begin(&w, "o");
	jsonw_u64(&w, "k", 7);
	jsonw_obj_end(&w);
	jsonw_arr_begin(&w, "arr");
	jsonw_i64(&w, NULL, -2);
	jsonw_str(&w, NULL, "q");
	jsonw_arr_end(&w);
	jsonw_end(&w);
	ASSERT_STREQ(mem_text(&m),
		     "{\"s\":\"x\\\"y\",\"n\":null,\"d\":0.333,\"nan\":null,\"t\":true,\"z\":null,"
		     "\"o\":{\"k\":7},\"arr\":[-2,\"q\"]}",
		     "object");
	mem_close(&m);
}

int main(void)
{
	return check_run_all();
}
