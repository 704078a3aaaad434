// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sinks/diagnosis.h"
#include "sinks/output.h"
#include "record/record.h"
#include "record/replay.h"
#include "sinks/summary.h"
#include "cli/report.h"

int report_run(const struct report_opts *o)
{
	/* With --prometheus, the standard output (out_f) carries the metrics text alone (for
	 * promtool, a file), so the lines go to the standard error (err_f); summaries go with the
	 * lines, or to the standard error with --json. */
	FILE *out_f = o->out ? o->out : stdout, *err_f = o->err ? o->err : stderr;
	FILE *out = o->ex.prometheus ? err_f : out_f;
	struct pipeline_opts po = { .verbose = o->verbose, .err = err_f };
	struct summaries sums;
	struct lines_opts lo = {
		.out = out, .json = o->json, .tokens = o->tokens, .gpu_steps = o->gpu_steps
	};
	struct lines lines;
	struct sink ls;
	struct export_opts eo = o->ex;
	struct exporters ex;
	struct record_reader rd;
	struct replay rp;
	struct diagnosis d;
	struct pipeline *pl;
	struct sink ds;
	int err, rc = 0;

	/* The header first: the outputs start knowing the recording's clocks and host. */
	err = record_reader_open(&rd, o->path);
	if (err) {
		fprintf(err_f, "tokenscope: %s: %s\n", o->path,
			rd.st.reason[0] ? rd.st.reason : strerror(-err));
		record_reader_close(&rd);
		return err;
	}
	pl = pipeline_new(&po);
	if (!pl) {
		record_reader_close(&rd);
		return -ENOMEM;
	}
	diagnosis_init(&d);
	diagnosis_set_wall_clock(&d, rd.meta.real_offset_ns);
	ds = diagnosis_sink(&d);
	pipeline_add_sink(pl, &ds);
	/* The timeline's zero is the recording's start: no record is earlier. Spans carry the
	 * recording's unix times and host. */
	eo.replay = true;
	eo.out = out_f;
	eo.err = err_f;
	err = exporters_start(&ex, &eo, pl, rd.meta.start_mono_ns);
	if (err) {
		rc = err;
		exporters_stop(&ex);
		goto out;
	}
	exporters_set_source(&ex, o->path, rd.meta.start_mono_ns, rd.meta.real_offset_ns,
			     rd.meta.hostname);
	/* Last: a request's line is written once every other sink has had it. */
	lines_init(&lines, &lo);
	ls = lines_sink(&lines);
	pipeline_add_sink(pl, &ls);
	/* After the lines: the total comes once the last request's line is out. */
	summaries_init(&sums, o->json ? err_f : out);
	if (o->json)
		summaries_set_json(&sums, out);
	exporters_set_summary(&ex, &sums.total, &d);
	ls = summaries_sink(&sums);
	pipeline_add_sink(pl, &ls);
	replay_init(&rp, pl, &rd.meta);
	err = replay_run(&rp, &rd);
	pipeline_finish(pl);
	exporters_flush(&ex);
	diagnosis_print(&d, o->json || o->ex.prometheus ? err_f : out_f);
	rc = exporters_stop(&ex);
	if (err) {
		fprintf(err_f,
			"tokenscope: %s: %s at byte %" PRId64 "; the report covers the %" PRIu64
			" records before it\n",
			o->path, rd.st.reason, rd.st.bad_offset, rd.st.records);
		rc = err;
	}
out:
	diagnosis_free(&d);
	pipeline_destroy(pl);
	record_reader_close(&rd);
	return rc;
}
