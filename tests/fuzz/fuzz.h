/* SPDX-License-Identifier: MIT */
/*
 * What every libFuzzer target in tests/fuzz/ shares: a reader that takes integers and byte
 * runs off the front of the input (an input that runs out reads as zeros, so every input is a
 * valid program), a property check that aborts with a message (libFuzzer saves the input of
 * any abort), a strict UTF-8 validator written apart from user/ so it cannot share its bugs,
 * and the sink every target writes its output to.
 */
#ifndef TS_FUZZ_H
#define TS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fuzz_in {
	const uint8_t *p;
	size_t n;
};

static inline struct fuzz_in fuzz_in(const uint8_t *data, size_t size)
{
	return (struct fuzz_in){ data, size };
}

static inline uint8_t fuzz_u8(struct fuzz_in *in)
{
	uint8_t v = 0;

	if (in->n) {
		v = in->p[0];
		in->p++;
		in->n--;
	}
	return v;
}

/* Little endian, as the seeds in tests/fuzz/make_seeds.py write them. */
static inline uint16_t fuzz_u16(struct fuzz_in *in)
{
	uint16_t lo = fuzz_u8(in);

	return lo | (uint16_t)fuzz_u8(in) << 8;
}

static inline uint32_t fuzz_u32(struct fuzz_in *in)
{
	uint32_t lo = fuzz_u16(in);

	return lo | (uint32_t)fuzz_u16(in) << 16;
}

static inline uint64_t fuzz_u64(struct fuzz_in *in)
{
	uint64_t lo = fuzz_u32(in);

	return lo | (uint64_t)fuzz_u32(in) << 32;
}

/* Up to n bytes off the front (fewer when the input ends); *got says how many. */
static inline const uint8_t *fuzz_bytes(struct fuzz_in *in, size_t n, size_t *got)
{
	const uint8_t *p = in->p;

	if (n > in->n)
		n = in->n;
	in->p += n;
	in->n -= n;
	*got = n;
	return p;
}

/*
 * A NUL-terminated copy of the next string: the bytes up to a NUL (which is consumed) or to
 * the end of the input, at most max. malloc'd to exactly its size, so that AddressSanitizer
 * sees any read past the terminator.
 */
static inline char *fuzz_str(struct fuzz_in *in, size_t max)
{
	const uint8_t *nul = memchr(in->p, 0, in->n);
	size_t n = nul ? (size_t)(nul - in->p) : in->n, got;
	const uint8_t *p;
	char *s;

	if (n > max)
		n = max;
	p = fuzz_bytes(in, n, &got);
	if (in->n && in->p[0] == 0)
		fuzz_u8(in);
	s = malloc(got + 1);
	if (!s)
		abort();
	memcpy(s, p, got);
	s[got] = 0;
	return s;
}

/*
 * A function that checks what the code under test produced: not instrumented for coverage, so
 * the fuzzer neither spends its time there (checking every byte of an output cost more than
 * producing it) nor steers by the checker's branches instead of the code's.
 */
#define FUZZ_CHECKER __attribute__((noinline, no_sanitize("coverage")))

/* A broken property: say which, then abort so that libFuzzer keeps the input. */
#define FUZZ_CHECK(cond, ...)                                                               \
	do {                                                                                \
		if (!(cond)) {                                                              \
			fprintf(stderr, "%s:%d: property failed: %s: ", __FILE__, __LINE__, \
				#cond);                                                     \
			fprintf(stderr, __VA_ARGS__);                                       \
			fputc('\n', stderr);                                                \
			abort();                                                            \
		}                                                                           \
	} while (0)

/* A broken property found without a condition to show. */
#define FUZZ_FAIL(...)                                                           \
	do {                                                                     \
		fprintf(stderr, "%s:%d: property failed: ", __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__);                                    \
		fputc('\n', stderr);                                             \
		abort();                                                         \
	} while (0)

/*
 * Offset of the first byte of s[0..n) that is not well-formed UTF-8 by RFC 3629 (no overlong
 * forms, no UTF-16 surrogates, nothing above U+10FFFF, no truncated sequence), or n when all
 * of it is. By the table of well-formed byte sequences, not by decoding.
 */
FUZZ_CHECKER static inline size_t fuzz_utf8_bad(const uint8_t *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint8_t c = s[i];
		uint8_t lo = 0x80, hi = 0xbf;
		size_t len;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			len = 2;
		} else if (c >= 0xe0 && c <= 0xef) {
			len = 3;
			if (c == 0xe0)
				lo = 0xa0; /* below: overlong */
			else if (c == 0xed)
				hi = 0x9f; /* above: surrogates */
		} else if (c >= 0xf0 && c <= 0xf4) {
			len = 4;
			if (c == 0xf0)
				lo = 0x90; /* below: overlong */
			else if (c == 0xf4)
				hi = 0x8f; /* above: beyond U+10FFFF */
		} else {
			return i; /* 0x80-0xc1 cannot start a character, 0xf5-0xff are never used */
		}
		if (n - i < len)
			return i;
		if (s[i + 1] < lo || s[i + 1] > hi)
			return i;
		for (size_t k = 2; k < len; k++)
			if (s[i + k] < 0x80 || s[i + k] > 0xbf)
				return i;
		i += len;
	}
	return n;
}

FUZZ_CHECKER static inline bool fuzz_utf8_valid(const uint8_t *s, size_t n)
{
	return fuzz_utf8_bad(s, n) == n;
}

/* Prints where s[0..n) stops being UTF-8, for a failed property's message. */
static inline void fuzz_hexdump(const char *what, const void *p, size_t n)
{
	const uint8_t *s = p;

	fprintf(stderr, "%s (%zu bytes):", what, n);
	for (size_t i = 0; i < n && i < 256; i++)
		fprintf(stderr, " %02x", s[i]);
	fprintf(stderr, n > 256 ? " ...\n" : "\n");
}

/* Where output that is not checked goes: /dev/null, opened once and kept for the process. Built
 * with -DFUZZ_SHOW, stdout, to see what an input does (README in this directory). */
static inline FILE *fuzz_devnull(void)
{
	static FILE *f;

#ifdef FUZZ_SHOW
	return stdout;
#endif
	if (!f && !(f = fopen("/dev/null", "w")))
		abort();
	return f;
}

#endif
