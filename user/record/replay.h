/* SPDX-License-Identifier: MIT */
/*
 * Replay: a recording (record.h) driven through a pipeline as the live loader drives it, so that
 * `report` gives what the live tracer gave.
 *
 * A drain mark (RECORD_EV_DRAIN, recordings of version 5 on) gives the pipeline the clock the
 * live run read and ticks it, as the live run did there. Older recordings have none: for them,
 * the ticks below stand in.
 *
 * Kernel-counter records (RECORD_EV_KSTATS) update pl->kstats and, when the lost count grew,
 * mark open requests maybe lost; a GPU sample (RECORD_EV_DEVICE_SAMPLE) goes to
 * pipeline_device_sample, as the live loader gave it; every other record goes to pipeline_feed;
 * sinks get a tick whenever kernel time has advanced by REPLAY_TICK_NS (the live loader's drain
 * period) since the last one, the first after the first record. Before the first record the
 * recording's roots (meta) are registered with the pipeline.
 */
#ifndef TS_REPLAY_H
#define TS_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline/pipeline.h"
#include "record/record.h"

#define REPLAY_TICK_NS (PIPELINE_TICK_MS * 1000 * 1000ull)

struct replay {
	struct pipeline *pl;
	const struct record_meta *meta; /* the recording's header: its roots */
	bool started;			/* roots registered */
	bool drains;			/* the recording has drain marks: ticks there only */
	bool ticked;			/* the first tick is done */
	uint64_t tick_ns;		/* kernel time of the last tick */
	struct device_sample *gpu;	/* the latest GPU sample read, with the first */
};

/* meta must stay valid while records are fed (a reader's, or record_replay's meta_out, which is
 * filled before the first record). */
void replay_init(struct replay *rp, struct pipeline *pl, const struct record_meta *meta);
/* One record; a feed for record_replay. < 0: the pipeline refused it (counted there). */
int replay_feed(void *replay, const void *rec, size_t len);
/* Every record of an open reader, then a last tick: record_next's result (0: the file was
 * whole); records the pipeline refused are counted in r->st.rejected. */
int replay_run(struct replay *rp, struct record_reader *r);
/* Frees what the replay holds (replay_run does it at its end). */
void replay_free(struct replay *rp);

#endif
