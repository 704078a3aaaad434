// SPDX-License-Identifier: MIT
/* The recording as a tap on what the pipeline is fed (see tap.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lib/clock.h"
#include "lib/version.h"
#include "lib/written.h"
#include "pipeline/workload.h"
#include "record/tap.h"

/* record_open's refusals, in words (the recording holds captured prompts). */
static const char *open_why(int err)
{
	switch (err) {
	case -ELOOP:
		return "it is a symbolic link, and a recording is never written through one "
		       "(give the path it points to)";
	case -EEXIST:
		return "the file exists and belongs to another user, who could read the "
		       "recording (remove it, or give another path)";
	case -EMLINK:
		return "the file has other hard links (remove it, or give another path)";
	default:
		return strerror(-err);
	}
}

int record_tap_open(struct record_tap *t, const char *path, uint32_t capture_bytes,
		    const uint32_t *pids, int npids)
{
	struct record_meta m;
	int err;

	*t = (struct record_tap){ .w = { .fd = -1 }, .path = path };
	record_meta_fill(&m, TOKENSCOPE_VERSION);
	m.capture_bytes = capture_bytes;
	for (int i = 0; i < npids && i < RECORD_MAX_ROOTS; i++)
		m.roots[m.nroots++] = pids[i];
	err = record_open(&t->w, path, &m);
	if (err) {
		fprintf(stderr, "tokenscope: cannot write %s: %s\n", path, open_why(err));
		t->path = NULL;
		return err;
	}
	fprintf(stderr, "tokenscope: recording the event stream to %s\n", path);
	return 0;
}

/* What a write returned: an I/O error stops the recording (tracing goes on), said once; a
 * record refused as malformed (-EINVAL) is counted by the writer. */
static bool tap_on(struct record_tap *t)
{
	return t->path && !t->err;
}

static void tap_result(struct record_tap *t, int err)
{
	if (err && err != -EINVAL) {
		t->err = err;
		fprintf(stderr, "tokenscope: recording stopped: %s\n", strerror(-err));
	}
}

static void tap_record(void *ctx, const void *rec, size_t len)
{
	struct record_tap *t = ctx;

	if (tap_on(t))
		tap_result(t, record_write(&t->w, rec, len));
}

static void tap_kstats(void *ctx, const uint64_t *stats, uint32_t n)
{
	struct record_tap *t = ctx;
	uint64_t all[TS_STAT_MAX] = { 0 };

	if (!tap_on(t))
		return;
	memcpy(all, stats, (n < TS_STAT_MAX ? n : TS_STAT_MAX) * sizeof(*stats));
	tap_result(t, record_write_kstats(&t->w, all));
}

static void tap_sample(void *ctx, const struct device_sample *s)
{
	struct record_tap *t = ctx;

	if (tap_on(t))
		tap_result(t, record_write_device_sample(&t->w, s));
}

/* Where a process runs matters to a replay only in a container: elsewhere it is nowhere. */
static void tap_workload(void *ctx, uint32_t pid, const struct workload *wl)
{
	struct record_tap *t = ctx;

	if (tap_on(t) && wl && wl->container_id[0])
		tap_result(t, record_write_workload(&t->w, pid, mono_ns(), wl));
}

/* A fork record for the file alone, so that a replay follows the process as the pipeline
 * does: its parent is the root it descends from (the replay then counts it for that server),
 * or 0 for a root. */
static void tap_found(void *ctx, uint32_t pid, uint32_t root)
{
	struct record_tap *t = ctx;
	struct ts_proc_event e = { .hdr = { TS_EV_PROC_FORK, sizeof(e), pid, pid }, .ppid = root };

	if (!tap_on(t))
		return;
	e.ts_ns = mono_ns();
	tap_result(t, record_write(&t->w, &e, sizeof(e)));
}

static void tap_drain(void *ctx, uint64_t clock_ns)
{
	struct record_tap *t = ctx;

	if (!tap_on(t))
		return;
	tap_result(t, record_write_drain(&t->w, clock_ns));
	if (tap_on(t))
		tap_result(t, record_flush(&t->w));
}

struct pipeline_tap record_tap_calls(struct record_tap *t)
{
	return (struct pipeline_tap){ .record = tap_record,
				      .kstats = tap_kstats,
				      .sample = tap_sample,
				      .workload = tap_workload,
				      .found = tap_found,
				      .drain = tap_drain,
				      .ctx = t };
}

int record_tap_close(struct record_tap *t)
{
	int err;

	if (!t->path)
		return 0;
	err = record_close(&t->w);
	if (err)
		fprintf(stderr, "tokenscope: %s: %s\n", t->path, strerror(-err));
	else if (!t->err)
		say_written(stderr, "the recording", t->path);
	t->path = NULL;
	return err ? err : t->err;
}
