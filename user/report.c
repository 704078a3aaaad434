// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "diagnosis.h"
#include "output.h"
#include "record.h"
#include "summary.h"
#include "report.h"

/* The pipeline's feed, which first gives the exporters the recording's clocks and host: the
 * header is read by record_replay, after the exporters started and before the first record. */
struct report_feeder {
	struct record_feeder fe;
	struct exporters *ex;
	const struct record_meta *meta;
	bool anchored;
};

static int report_feed(void *ctx, const void *rec, size_t len)
{
	struct report_feeder *rf = ctx;

	if (!rf->anchored) {
		exporters_set_source(rf->ex, rf->meta->start_mono_ns, rf->meta->start_real_ns,
				     rf->meta->hostname);
		rf->anchored = true;
	}
	return record_feed_pipeline(&rf->fe, rec, len);
}

int report_run(const struct report_opts *o)
{
	/* With --prometheus, stdout carries the metrics text alone (for promtool, a file), so
	 * the lines go to stderr; summaries go with the lines, or to stderr with --json. */
	FILE *out = o->ex.prometheus ? stderr : stdout;
	struct pipeline_opts po = { .verbose = o->verbose, .err = stderr };
	struct summaries sums;
	struct lines_opts lo = {
		.out = out, .json = o->json, .tokens = o->tokens, .gpu_steps = o->gpu_steps
	};
	struct lines lines;
	struct sink ls;
	struct record_replay_stats st = { 0 };
	struct record_meta meta = { 0 };
	struct export_opts eo = o->ex;
	struct exporters ex;
	struct report_feeder rf = { .ex = &ex, .meta = &meta };
	struct diagnosis d;
	struct pipeline pl;
	struct sink ds;
	int err, rc = 0;

	err = pipeline_init(&pl, &po);
	if (err)
		return err;
	diagnosis_init(&d);
	ds = diagnosis_sink(&d);
	pipeline_add_sink(&pl, &ds);
	record_feeder_init(&rf.fe, &pl, &meta);
	/* The timeline's zero is the recording's start: no record is earlier. The header is read
	 * before the first record is fed, and exporters only see records, so they start here
	 * (failing before the replay if they cannot) and get the header's clocks from
	 * report_feed. */
	eo.replay = true;
	err = exporters_start(&ex, &eo, &pl, 0);
	if (err) {
		rc = err;
		exporters_stop(&ex);
		goto out;
	}
	/* Last: a request's line is written once every other sink has had it. */
	lines_init(&lines, &lo);
	ls = lines_sink(&lines);
	pipeline_add_sink(&pl, &ls);
	/* After the lines: the total comes once the last request's line is out. */
	summaries_init(&sums, o->json ? stderr : out);
	ls = summaries_sink(&sums);
	pipeline_add_sink(&pl, &ls);
	err = record_replay(o->path, report_feed, &rf, &meta, &st);
	if (!st.header_ok) {
		fprintf(stderr, "tokenscope: %s: %s\n", o->path,
			st.reason[0] ? st.reason : strerror(-err));
		rc = err ? err : -EINVAL;
		exporters_stop(&ex);
		goto out;
	}
	diagnosis_set_wall_clock(&d, meta.start_mono_ns, meta.start_real_ns);
	pipeline_tick(&pl);
	pipeline_finish(&pl);
	exporters_flush(&ex);
	diagnosis_print(&d, o->json || o->ex.prometheus ? stderr : stdout);
	rc = exporters_stop(&ex);
	if (err) {
		fprintf(stderr,
			"tokenscope: %s: %s at byte %" PRId64 "; the report covers the %" PRIu64
			" records before it\n",
			o->path, st.reason, st.bad_offset, st.records);
		rc = err;
	}
out:
	diagnosis_free(&d);
	pipeline_free(&pl);
	return rc;
}
