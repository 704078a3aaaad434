// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "record/record.h"
#include "record/replay.h"
#include "session/session.h"
#include "cli/report.h"

int report_run(const struct report_opts *o)
{
	struct session_opts so = { .json = o->json,
				   .tokens = o->tokens,
				   .gpu_steps = o->gpu_steps,
				   .report = true,
				   .verbose = o->verbose,
				   .all_requests = o->all_requests,
				   .ex = o->ex,
				   .out = o->out,
				   .err = o->err };
	FILE *err_f = o->err ? o->err : stderr;
	struct record_reader rd;
	struct session s;
	struct replay rp;
	int err = 0, rc;

	/* The header first: the outputs start knowing the recording's clocks and host. */
	err = record_reader_open(&rd, o->path);
	if (err) {
		fprintf(err_f, "tokenscope: %s: %s\n", o->path,
			rd.st.reason[0] ? rd.st.reason : strerror(-err));
		record_reader_close(&rd);
		return err;
	}
	/* The timeline's zero is the recording's start: no record is earlier. */
	rc = session_start(&s, &so, rd.meta.start_mono_ns);
	if (!rc) {
		session_set_source(&s, o->path, &rd.meta);
		replay_init(&rp, session_pipeline(&s), &rd.meta);
		err = replay_run(&rp, &rd);
		session_finish(&s);
	}
	/* The exporters' end (the Prometheus text, the OTLP counters), then what cut the file. */
	rc = session_stop(&s) ?: rc;
	if (err) {
		fprintf(err_f,
			"tokenscope: %s: %s at byte %" PRId64 "; the report covers the %" PRIu64
			" records before it\n",
			o->path, rd.st.reason, rd.st.bad_offset, rd.st.records);
		rc = err;
	}
	record_reader_close(&rd);
	return rc;
}
