// SPDX-License-Identifier: MIT
/* A recording through the pipeline, as the live loader drives it (see replay.h). */
#include <errno.h>
#include <stdlib.h>

#include "pipeline/device_sample.h"
#include "record/replay.h"

_Static_assert(RECORD_MAX_ROOTS >= PIPELINE_MAX_ROOTS, "a recording holds every -p");

void replay_init(struct replay *rp, struct pipeline *pl, const struct record_meta *meta)
{
	*rp = (struct replay){ .pl = pl,
			       .meta = meta,
			       .drains = meta && meta->version >= RECORD_VERSION_DRAINS };
}

int replay_feed(void *replay, const void *rec, size_t len)
{
	struct replay *rp = replay;
	struct pipeline *pl = rp->pl;
	const struct record_kstats_event *ks = record_kstats(rec, len);
	uint64_t clock_ns;
	int err = 0;

	if (!rp->started) {
		rp->started = true;
		/* As the live loader does before its first drain. */
		for (uint32_t i = 0; rp->meta && i < rp->meta->nroots && i < RECORD_MAX_ROOTS; i++)
			pipeline_add_process(pl, rp->meta->roots[i], true);
	}
	if (rp->drains && !record_drain(rec, len, &clock_ns)) {
		/* The live run's tick, with its clock. */
		pipeline_clock(pl, clock_ns);
		pipeline_tick(pl);
		return 0;
	}
	if (len >= sizeof(struct ts_event_hdr) &&
	    ((const struct ts_event_hdr *)rec)->type == RECORD_EV_WORKLOAD) {
		struct workload wl;
		uint32_t pid;

		err = record_workload(rec, len, &pid, &wl);
		if (!err)
			err = pipeline_label_process(pl, pid, &wl);
	} else if (len >= sizeof(struct ts_event_hdr) &&
		   ((const struct ts_event_hdr *)rec)->type == RECORD_EV_DEVICE_SAMPLE) {
		if (!rp->gpu && !(rp->gpu = malloc(sizeof(*rp->gpu))))
			return -ENOMEM;
		err = record_device_sample(rec, len, rp->gpu);
		if (!err)
			pipeline_device_sample(pl, rp->gpu);
	} else if (ks) {
		uint32_t n = ks->nstats < TS_STAT_MAX ? ks->nstats : TS_STAT_MAX;
		uint64_t stats[TS_STAT_MAX];

		for (uint32_t k = 0; k < n; k++)
			stats[k] = ks->stats[k];
		/* As the live loader does after each drain: a grown count marks open requests. */
		pipeline_kstats(pl, stats, n);
	} else {
		err = pipeline_feed(pl, rec, len);
	}
	if (rp->drains)
		return err;
	if (!rp->ticked || pipeline_record_ns(pl) >= rp->tick_ns + REPLAY_TICK_NS) {
		pipeline_tick(pl);
		rp->ticked = true;
		rp->tick_ns = pipeline_record_ns(pl);
	}
	return err;
}

int replay_run(struct replay *rp, struct record_reader *r)
{
	const void *rec;
	size_t len;
	int err;

	while ((err = record_next(r, &rec, &len)) > 0)
		if (replay_feed(rp, rec, len) < 0)
			r->st.rejected++;
	/* The live run ended on its last drain's tick; a recording without drain marks gets a
	 * last one of its own. */
	if (!rp->drains)
		pipeline_tick(rp->pl);
	replay_free(rp);
	return err;
}

void replay_free(struct replay *rp)
{
	free(rp->gpu);
	rp->gpu = NULL;
}
