/* SPDX-License-Identifier: MIT */
/*
 * Loads a wire fixture (tests/fixtures/README.md): NAME.resp or NAME.req, and for a response
 * the byte count of each write syscall from NAME.resp.writes, so a test can replay it one
 * syscall per feed. Fixtures are found under $TS_FIXTURES (default tests/fixtures).
 */
#ifndef TS_FIXTURE_H
#define TS_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE_DIR_DEFAULT "tests/fixtures"
#define FIXTURE_WRITES_MAX 256
#define FIXTURE_PATH_MAX 512

struct fixture {
	uint8_t *buf;
	size_t len;
	size_t nwrites;
	size_t writes[FIXTURE_WRITES_MAX]; /* end offset of each write */
};

static inline FILE *fixture_open(const char *file, const char *suffix, bool optional)
{
	const char *dir = getenv("TS_FIXTURES");
	char path[FIXTURE_PATH_MAX];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s%s", dir && *dir ? dir : FIXTURE_DIR_DEFAULT, file,
		 suffix);
	fp = fopen(path, "rb");
	if (!fp && !optional)
		fprintf(stdout, "  cannot open fixture %s\n", path);
	return fp;
}

static inline void fixture_free(struct fixture *f)
{
	free(f->buf);
	f->buf = NULL;
}

/* Loads `file` (e.g. "uvicorn_h11.resp"); 0 or -1. Without a .writes file, one write. */
static inline int fixture_load(struct fixture *f, const char *file)
{
	FILE *fp = fixture_open(file, "", false);
	size_t cap = 4096, n, end = 0, w;

	memset(f, 0, sizeof(*f));
	if (!fp)
		return -1;
	f->buf = malloc(cap);
	while (f->buf && (n = fread(f->buf + f->len, 1, cap - f->len, fp)) > 0) {
		f->len += n;
		if (f->len == cap) {
			uint8_t *grown = realloc(f->buf, cap *= 2);

			if (!grown)
				free(f->buf);
			f->buf = grown;
		}
	}
	fclose(fp);
	if (!f->buf)
		return -1;

	fp = fixture_open(file, ".writes", true);
	if (!fp) {
		f->writes[f->nwrites++] = f->len;
		return 0;
	}
	while (f->nwrites < FIXTURE_WRITES_MAX && fscanf(fp, "%zu", &w) == 1) {
		end += w;
		f->writes[f->nwrites++] = end;
	}
	fclose(fp);
	if (end != f->len) {
		fprintf(stdout, "  %s: writes add up to %zu, file has %zu\n", file, end, f->len);
		fixture_free(f); /* callers free only what loaded */
		return -1;
	}
	return 0;
}

/* Index of the write that carried byte `off`. */
static inline size_t fixture_write_of(const struct fixture *f, size_t off)
{
	size_t i = 0;

	while (i + 1 < f->nwrites && off >= f->writes[i])
		i++;
	return i;
}

/* Start offset of write i. */
static inline size_t fixture_write_start(const struct fixture *f, size_t i)
{
	return i ? f->writes[i - 1] : 0;
}

/*
 * How a test replays a fixture: one syscall per feed (ts = write index), one byte per feed
 * (ts = byte offset, which tells exactly which byte completed each event), or two feeds split
 * at `split` (ts 0 and 1).
 */
enum fixture_plan { PLAN_WRITES, PLAN_BYTES, PLAN_SPLIT };

/* The ts a plan gives to the event completed by byte `off`. */
static inline uint64_t fixture_plan_ts(const struct fixture *f, enum fixture_plan plan,
				       size_t split, size_t off)
{
	switch (plan) {
	case PLAN_WRITES:
		return fixture_write_of(f, off);
	case PLAN_BYTES:
		return off;
	case PLAN_SPLIT:
		break;
	}
	return off < split ? 0 : 1;
}

/* Calls feed(ctx, buf, len, ts) for each feed of the plan; stops at the first error. */
static inline int
fixture_replay(const struct fixture *f, enum fixture_plan plan, size_t split,
	       int (*feed)(void *ctx, const uint8_t *buf, size_t len, uint64_t ts), void *ctx)
{
	int err = 0;

	switch (plan) {
	case PLAN_WRITES:
		for (size_t i = 0; i < f->nwrites && !err; i++)
			err = feed(ctx, f->buf + fixture_write_start(f, i),
				   f->writes[i] - fixture_write_start(f, i), i);
		break;
	case PLAN_BYTES:
		for (size_t i = 0; i < f->len && !err; i++)
			err = feed(ctx, f->buf + i, 1, i);
		break;
	case PLAN_SPLIT:
		err = feed(ctx, f->buf, split, 0);
		if (!err)
			err = feed(ctx, f->buf + split, f->len - split, 1);
		break;
	}
	return err;
}

#endif
