// SPDX-License-Identifier: MIT
#include <string.h>

#include "runs.h"

_Static_assert((RUNS_LAUNCHES & (RUNS_LAUNCHES - 1)) == 0, "RUNS_LAUNCHES: a power of two");

void runs_init(struct runs *r, runs_emit_fn emit, void *ctx)
{
	memset(r, 0, sizeof(*r));
	r->emit = emit;
	r->ctx = ctx;
}

void runs_launch(struct runs *r, uint32_t correlation, uint64_t launch_ns)
{
	__typeof__(r->launch[0]) *l = &r->launch[correlation & (RUNS_LAUNCHES - 1)];

	if (l->used && l->correlation == correlation && l->ns <= launch_ns)
		return; /* the runtime call around the driver call it made: keep the earlier */
	l->used = true;
	l->correlation = correlation;
	l->ns = launch_ns;
}

/* The launch time of correlation, taken out of the table; false if it is not there. */
static bool take_launch(struct runs *r, uint32_t correlation, uint64_t *ns)
{
	__typeof__(r->launch[0]) *l = &r->launch[correlation & (RUNS_LAUNCHES - 1)];

	if (!l->used || l->correlation != correlation)
		return false;
	*ns = l->ns;
	l->used = false;
	return true;
}

static void emit_batch(struct runs *r)
{
	if (r->nbatch && r->emit)
		r->emit(r->ctx, r->batch, r->nbatch, &r->stats);
	r->nbatch = 0;
}

static void close_run(struct runs *r, const struct ts_dev_run *run)
{
	struct ts_dev_run *out = &r->batch[r->nbatch++];

	*out = *run;
	/* Operations overlapping on one stream (a graph record around its own nodes' copies,
	 * or clock interpolation error) never make a run busier than it is long. */
	if (out->busy_ns > out->end_ns - out->start_ns)
		out->busy_ns = out->end_ns - out->start_ns;
	r->stats.runs++;
	if (r->nbatch == TS_RUNS_PER_PROBE)
		emit_batch(r);
}

/* a + b, held at UINT64_MAX: a record's times can be anything, and a sum that wrapped would
 * read as less than one of its terms (a delay sum below its max, busy below one op). */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

/* Adds op (duration dur, device-start-after-launch delay, known) to run. */
static void add_op(struct ts_dev_run *run, const struct runs_op *op, uint64_t end, bool launched,
		   uint64_t delay)
{
	if (end > run->end_ns)
		run->end_ns = end;
	run->busy_ns = add_sat(run->busy_ns, end - op->start_ns);
	if (op->kind == RUNS_KERNEL)
		run->kernels++;
	else if (op->kind == RUNS_GRAPH)
		run->graphs++;
	else {
		run->memcpys++;
		if (op->dtoh)
			run->dtoh++;
	}
	if (launched) {
		run->launched++;
		run->delay_ns = add_sat(run->delay_ns, delay);
		if (delay > run->delay_max_ns)
			run->delay_max_ns = delay;
	}
}

void runs_op(struct runs *r, const struct runs_op *op)
{
	uint64_t end = op->end_ns, launch = 0, delay = 0;
	bool launched;
	int slot = -1, oldest = -1;
	struct ts_dev_run *run, one;

	r->stats.ops++;
	if (end < op->start_ns) {
		r->stats.bad_time++;
		end = op->start_ns;
	}
	launched = take_launch(r, op->correlation, &launch);
	if (!launched)
		r->stats.no_launch++;
	else if (launch <= op->start_ns)
		delay = op->start_ns - launch;
	else
		r->stats.bad_time++; /* started before it was launched: a clock error, no delay */

	if (!r->single) {
		for (int i = 0; i < RUNS_OPEN; i++) {
			if (!r->open_used[i]) {
				if (slot < 0)
					slot = i;
				continue;
			}
			if (r->open[i].device == op->device && r->open[i].stream == op->stream) {
				run = &r->open[i];
				if (op->start_ns >= run->start_ns &&
				    op->start_ns <= run->end_ns + TS_RUN_GAP_NS) {
					add_op(run, op, end, launched, delay);
					return;
				}
				/* A gap, or an operation before the run began: a new run. */
				close_run(r, run);
				r->open_used[i] = false;
				slot = i;
				break;
			}
			if (oldest < 0 || r->open[i].end_ns < r->open[oldest].end_ns)
				oldest = i;
		}
		if (slot < 0) {
			close_run(r, &r->open[oldest]);
			slot = oldest;
		}
		run = &r->open[slot];
	} else {
		run = &one;
	}
	memset(run, 0, sizeof(*run));
	run->start_ns = op->start_ns;
	run->end_ns = end;
	run->device = op->device;
	run->stream = op->stream;
	if (launched) {
		run->first_launch_ns = launch;
		run->flags |= TS_RUN_F_LAUNCH;
	}
	add_op(run, op, end, launched, delay);
	if (r->single) {
		run->flags |= TS_RUN_F_SINGLE;
		close_run(r, run);
	} else {
		r->open_used[slot] = true;
	}
}

void runs_flush(struct runs *r)
{
	for (int i = 0; i < RUNS_OPEN; i++) {
		if (r->open_used[i]) {
			close_run(r, &r->open[i]);
			r->open_used[i] = false;
		}
	}
	emit_batch(r);
}
