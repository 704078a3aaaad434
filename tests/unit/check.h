/* SPDX-License-Identifier: MIT */
/*
 * Minimal test harness shared by every C test program.
 *
 * A test is defined with TEST(test_x) { ... }: that registers it (before main runs), so no
 * test can be written and then forgotten; main() returns check_run_all(), which runs every
 * registered test in the order they are defined. ASSERT_* macros record a failure with
 * file:line and a label, and return false so a test can stop early:
 * `if (!ASSERT_EQ(a, b, "frames")) return;`.
 * Each test prints "PASS name" or "FAIL name"; the totals line "N passed, N failed, N skipped"
 * ends the program, whose exit status says whether any failed. tests/run.sh adds the
 * PASS/FAIL/SKIP lines of every program.
 */
#ifndef TS_CHECK_H
#define TS_CHECK_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_passed, check_failed, check_skipped;
static int check_cur_failed;
static const char *check_skip_reason;

static inline bool check_report(bool ok, const char *file, int line, const char *label,
				const char *fmt_expr)
{
	if (!ok) {
		check_cur_failed = 1;
		fprintf(stdout, "  %s:%d: %s: %s\n", file, line, label, fmt_expr);
	}
	return ok;
}

#define ASSERT_TRUE(c, label) check_report(!!(c), __FILE__, __LINE__, label, #c " is false")
#define ASSERT_FALSE(c, label) check_report(!(c), __FILE__, __LINE__, label, #c " is true")

#define ASSERT_EQ(a, b, label)                                                               \
	({                                                                                   \
		long long __a = (long long)(a), __b = (long long)(b);                        \
		bool __ok = __a == __b;                                                      \
		if (!__ok)                                                                   \
			fprintf(stdout, "  %s:%d: %s: %s = %lld, expected %lld\n", __FILE__, \
				__LINE__, label, #a, __a, __b);                              \
		if (!__ok)                                                                   \
			check_cur_failed = 1;                                                \
		__ok;                                                                        \
	})

#define ASSERT_STREQ(a, b, label)                                                                 \
	({                                                                                        \
		const char *__a = (a), *__b = (b);                                                \
		bool __ok = __a && __b && strcmp(__a, __b) == 0;                                  \
		if (!__ok) {                                                                      \
			fprintf(stdout, "  %s:%d: %s: %s = \"%s\", expected \"%s\"\n", __FILE__,  \
				__LINE__, label, #a, __a ? __a : "(null)", __b ? __b : "(null)"); \
			check_cur_failed = 1;                                                     \
		}                                                                                 \
		__ok;                                                                             \
	})

#define ASSERT_NEAR(a, b, tol, label)                                                              \
	({                                                                                         \
		double __a = (double)(a), __b = (double)(b);                                       \
		bool __ok = __a - __b <= (tol) && __b - __a <= (tol);                              \
		if (!__ok) {                                                                       \
			fprintf(stdout, "  %s:%d: %s: %s = %.9g, expected %.9g +- %g\n", __FILE__, \
				__LINE__, label, #a, __a, __b, (double)(tol));                     \
			check_cur_failed = 1;                                                      \
		}                                                                                  \
		__ok;                                                                              \
	})

#define ASSERT_OK(err, label) ASSERT_EQ((err) < 0 ? (err) : 0, 0, label)
#define ASSERT_OK_PTR(p, label) check_report((p) != NULL, __FILE__, __LINE__, label, #p " is NULL")

/* Mark the running test skipped (with a reason); use as `return SKIP("no root");`. */
/* libbpf's messages off where a test expects failures (symbols absent, probes refused), unless
 * TEST_LIBBPF_LOG is set: the kernel matrix sets it to rerun a failed test with them. Used only
 * where <bpf/libbpf.h> is included. */
#define LIBBPF_QUIET()                          \
	do {                                    \
		if (!getenv("TEST_LIBBPF_LOG")) \
			libbpf_set_print(NULL); \
	} while (0)

#define SKIP(reason) ((void)(check_skip_reason = (reason)))

/* The tests of this program, in the order they are defined (TEST). */
#define CHECK_MAX_TESTS 256
static struct {
	const char *name;
	void (*fn)(void);
} check_tests[CHECK_MAX_TESTS];
static int check_ntests, check_overflow;

static inline void check_register(const char *name, void (*fn)(void))
{
	if (check_ntests == CHECK_MAX_TESTS) {
		check_overflow++;
		return;
	}
	check_tests[check_ntests].name = name;
	check_tests[check_ntests++].fn = fn;
}

#define TEST(fn)                                                           \
	static void fn(void);                                              \
	__attribute__((constructor)) static void check_register_##fn(void) \
	{                                                                  \
		check_register(#fn, fn);                                   \
	}                                                                  \
	static void fn(void)

static inline void check_run(const char *name, void (*fn)(void))
{
	check_cur_failed = 0;
	check_skip_reason = NULL;
	fn();
	if (check_cur_failed) {
		check_failed++;
		printf("FAIL %s\n", name);
	} else if (check_skip_reason) {
		check_skipped++;
		printf("SKIP %s: %s\n", name, check_skip_reason);
	} else {
		check_passed++;
		printf("PASS %s\n", name);
	}
	fflush(stdout);
}

/* Runs every registered test, prints the totals line and returns the exit status. */
static inline int check_run_all(void)
{
	for (int i = 0; i < check_ntests; i++)
		check_run(check_tests[i].name, check_tests[i].fn);
	if (check_overflow) {
		printf("FAIL check: %d tests beyond CHECK_MAX_TESTS were not run\n",
		       check_overflow);
		check_failed++;
	}
	printf("%d passed, %d failed, %d skipped\n", check_passed, check_failed, check_skipped);
	return check_failed ? 1 : 0;
}

/* The whole file at path as a string (malloc'd, NUL-terminated), or NULL. */
static inline char *check_read_file(const char *path)
{
	FILE *fp = fopen(path, "rb");
	char *buf = NULL;
	size_t len = 0;
	FILE *mem;
	int c;

	if (!fp)
		return NULL;
	mem = open_memstream(&buf, &len);
	while ((c = fgetc(fp)) != EOF)
		fputc(c, mem);
	fclose(mem);
	fclose(fp);
	return buf;
}

#endif
