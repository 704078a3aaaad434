/* SPDX-License-Identifier: MIT */
/*
 * The recording as a tap on the pipeline (pipeline.h, struct pipeline_tap): everything the
 * pipeline is fed, written to a `.tsr` file (record.h) in the order it was fed, so that a replay
 * (replay.h) makes the same calls. The session opens one for `tokenscope record`; the loader
 * knows nothing of it.
 *
 * What is written: every ring-buffer record; the kernel's counters whenever they change; each
 * GPU sample whole, before the pipeline cuts it down to the traced processes; where a followed
 * process runs, when it runs in a container; a fork record for a process the loader found
 * itself (a descendant in /proc, a server --all found), which the header does not name; and at
 * every tick a drain mark with the clock the pipeline was given, after which what was written
 * reaches the file (a recorder killed then leaves every drained record). A write error stops
 * the recording, said once; tracing goes on, and the error is the recording's close's.
 */
#ifndef TS_RECORD_TAP_H
#define TS_RECORD_TAP_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/pipeline.h"
#include "record/record.h"

struct record_tap {
	struct record_writer w;
	const char *path;
	int err; /* the first write error: nothing more is written */
};

/* Opens path (record_open) with a header of this run: the version, the clocks now, the host,
 * capture_bytes and the npids roots named with -p. Says where it records, or why it cannot;
 * 0 or a negative errno. */
int record_tap_open(struct record_tap *t, const char *path, uint32_t capture_bytes,
		    const uint32_t *pids, int npids);
/* The tap's calls, for pipeline_set_tap (t outlives the pipeline's use of them). */
struct pipeline_tap record_tap_calls(struct record_tap *t);
/* Flushes and closes the file, and says it was written: 0, or the first error (said). Safe
 * on a tap never opened. */
int record_tap_close(struct record_tap *t);

#endif
