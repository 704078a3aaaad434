// SPDX-License-Identifier: MIT
/*
 * lib/json: the trees it builds, against cJSON's for the same bytes (cJSON read frames and
 * request bodies before it, and reads what tokenscope writes in the other tests). Both must
 * accept or refuse alike, and give the same types, keys, strings and numbers in the same order:
 * for hand-written texts at the edges of the grammar, every frame and body of the fuzz targets'
 * seeds and regression inputs, and random mutations of them. Also: the arena's blocks beyond
 * the caller's buffer, and nesting at the limit.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "json_compare.h"
#include "lib/json.h"

static int ndiffer;

/* Parses n bytes both ways; counts and shows (the first few) differences. */
static void compare(struct jv_arena *a, const char *s, size_t n, const char *what)
{
	const struct jv *v = jv_parse(a, s, n);
	cJSON *c = cJSON_ParseWithLength(s, n);
	const char *where = (v == NULL) != (c == NULL) ? "accepted by one only"
			    : v			       ? json_compare(v, c)
						       : NULL;
	bool same = !where;

	if (!same && ndiffer++ < 5)
		printf("  %s: %s (%zu bytes: %.60s)\n", what, where, n, s);
	cJSON_Delete(c);
	jv_arena_reset(a);
}

TEST(test_edges_like_cjson)
{
	static const char *const texts[] = {
		"{}",
		"[]",
		"  {\"a\" : [1, 2.5, -3e2, true, false, null, \"x\"]} ",
		"\"str\"",
		"12",
		"-",
		"+1",
		".5",
		"01",
		"1.",
		"1e400",
		"-1e400",
		"1.2.3",
		"99999999999999999999",
		"[1,]",
		"{\"a\":1,}",
		"{\"a\"}",
		"{\"a\":}",
		"{a:1}",
		"[",
		"{",
		"\"abc",
		"tru",
		"true false",
		"{\"a\":1} trailing",
		"\xef\xbb\xbf{}",
		"\xef\xbb\xbf{",
		"\xef\xbb\xbf[1]",
		"{\"s\":\"\\b\\f\\n\\r\\t\\\"\\\\\\/\"}",
		"{\"s\":\"\\q\"}",
		"{\"s\":\"\\u0041\\u00e9\"}",
		"{\"s\":\"\\u20ac\\ud83d\\ude00\"}",
		"{\"s\":\"\\ud83d\"}",
		"{\"s\":\"\\ud83dx\"}",
		"{\"s\":\"\\ude00\"}",
		"{\"s\":\"\\ud83d\\u0041\"}",
		"{\"s\":\"\\uzzzz\"}",
		"{\"s\":\"\\u00\"}",
		"{\"s\":\"a\\u0000b\"}",
		"{\"k\\u0000x\":1}",
		"{\"s\":\"\xff\xfe\"}",
		"{\"s\":\"a\tb\"}",
		"{\"a\":1,\"a\":2}",
		"\x01\x02{\"a\":1}",
		"[1 2]",
		"[\"a\" \"b\"]",
		"{\"a\":1 \"b\":2}",
		"nul",
		"null",
		"[null,]",
		"[[[[]]]]",
		"{\"\":\"\"}",
		"[1e5, 1E-5, -0, 0.0, "
		"123456789012345678901234567890123456789012345678901234567890123456]",
	};
	struct jv_arena a;
	char buf[4096];

	jv_arena_init(&a, buf, sizeof(buf));
	ndiffer = 0;
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		compare(&a, texts[i], strlen(texts[i]), "text");
	/* A NUL inside and a text cut at every length. */
	compare(&a, "{\"s\":\"a\0b\"}", 11, "raw NUL");
	for (size_t n = 0; n <= strlen(texts[2]); n++)
		compare(&a, texts[2], n, "cut");
	ASSERT_EQ(ndiffer, 0, "the same trees as cJSON's");
}

/* Every seed and regression input of the frame and body fuzz targets, whole, and each with
 * bytes changed at random (the same seed every run). */
TEST(test_corpora_like_cjson)
{
	static const char *const dirs[] = {
		"tests/fuzz/seeds/fuzz_frame",	     "tests/fuzz/seeds/fuzz_reqbody",
		"tests/fuzz/regressions/fuzz_frame", "tests/fuzz/regressions/fuzz_reqbody",
		"tests/fuzz/seeds/fuzz_json_string",
	};
	static const char junk[] = "{}[],:\"\\ 0123456789.eE+-tfnu\x01\xff";
	struct jv_arena a;
	char mem[16384], *buf = malloc(1 << 20);
	int files = 0, inputs = 0;
	unsigned seed = 1;

	jv_arena_init(&a, mem, sizeof(mem));
	ndiffer = 0;
	for (size_t d = 0; buf && d < sizeof(dirs) / sizeof(dirs[0]); d++) {
		DIR *dir = opendir(dirs[d]);
		struct dirent *de;

		while (dir && (de = readdir(dir))) {
			char path[512];
			FILE *f;
			size_t n;

			if (de->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", dirs[d], de->d_name);
			if (!(f = fopen(path, "rb")))
				continue;
			n = fread(buf, 1, (1 << 20) - 1, f);
			fclose(f);
			files++;
			compare(&a, buf, n, path);
			inputs++;
			/* From its first '{' or '[' on, as the frame and body are in these inputs.
			 */
			for (size_t i = 0; i < n; i++) {
				if (buf[i] != '{' && buf[i] != '[')
					continue;
				compare(&a, buf + i, n - i, path);
				for (int m = 0; m < 20 && n - i > 0; m++) {
					size_t at = i + (size_t)rand_r(&seed) % (n - i);
					char was = buf[at];

					buf[at] = junk[(size_t)rand_r(&seed) % (sizeof(junk) - 1)];
					compare(&a, buf + i, n - i, path);
					buf[at] = was;
					inputs += 2;
				}
				break;
			}
		}
		if (dir)
			closedir(dir);
	}
	printf("  %d files, %d inputs\n", files, inputs);
	ASSERT_TRUE(files >= 10, "the corpora were read");
	ASSERT_EQ(ndiffer, 0, "the same trees as cJSON's");
	free(buf);
}

/* A tree larger than the caller's buffer takes blocks from malloc, given back at reset (the
 * sanitizers see a leak or a use after it); a buffer of none works too. */
TEST(test_arena_blocks)
{
	size_t n = 200000, len = 0;
	char *s = malloc(n * 4 + 16), small[64];
	struct jv_arena a;
	const struct jv *v, *e;
	size_t count = 0;

	if (!ASSERT_OK_PTR(s, "memory"))
		return;
	s[len++] = '[';
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(s + len, "%s%zu", i ? "," : "", i % 10);
	s[len++] = ']';
	for (int round = 0; round < 2; round++) {
		jv_arena_init(&a, round ? NULL : small, round ? 0 : sizeof(small));
		v = jv_parse(&a, s, len);
		count = 0;
		if (ASSERT_OK_PTR(v, "parsed"))
			jv_foreach(e, v) count += jv_is_number(e) && e->num == (double)(count % 10);
		ASSERT_EQ(count, n, "every element, in order");
		ASSERT_TRUE(a.blocks != NULL, "blocks taken");
		jv_arena_reset(&a);
		ASSERT_TRUE(a.blocks == NULL && a.used == 0, "given back");
	}
	free(s);
}

TEST(test_depth_limit)
{
	char *s = malloc(2 * JV_DEPTH_MAX + 4);
	struct jv_arena a;

	if (!ASSERT_OK_PTR(s, "memory"))
		return;
	jv_arena_init(&a, NULL, 0);
	memset(s, '[', JV_DEPTH_MAX);
	memset(s + JV_DEPTH_MAX, ']', JV_DEPTH_MAX);
	ASSERT_OK_PTR(jv_parse(&a, s, 2 * JV_DEPTH_MAX), "at the limit");
	jv_arena_reset(&a);
	memset(s, '[', JV_DEPTH_MAX + 1);
	memset(s + JV_DEPTH_MAX + 1, ']', JV_DEPTH_MAX + 1);
	ASSERT_TRUE(jv_parse(&a, s, 2 * JV_DEPTH_MAX + 2) == NULL, "one past it");
	jv_arena_reset(&a);
	free(s);
}

TEST(test_get_first_of_twice)
{
	struct jv_arena a;
	const struct jv *v;

	jv_arena_init(&a, NULL, 0);
	v = jv_parse(&a, "{\"a\":1,\"b\":{\"c\":\"x\"},\"a\":2}", 27);
	ASSERT_TRUE(jv_get(v, "a") && jv_get(v, "a")->num == 1, "the first a");
	ASSERT_STREQ(jv_get(jv_get(v, "b"), "c")->str, "x", "nested");
	ASSERT_TRUE(jv_get(v, "z") == NULL && jv_get(jv_get(v, "a"), "a") == NULL, "none");
	jv_arena_reset(&a);
}

int main(void)
{
	return check_run_all();
}
