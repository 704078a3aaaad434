/* SPDX-License-Identifier: MIT */
/*
 * `tokenscope top`: a live table of the requests finished in the last TOP_WINDOW_S seconds of
 * kernel time, one row per model (per model and server process with by_process), redrawn once
 * per second of kernel time, as a pipeline sink.
 *
 * The window is the TOP_WINDOW_S whole seconds before the current one (a second is shown once
 * it is over), kept as one slot per second, so memory is fixed: TOP_MAX_MODELS rows, each with
 * its slots allocated on its first request; a row whose requests all left the window is reused.
 * The slots are window.h's; percentiles are whist_quantile's (32 sub-buckets per power of two,
 * under 3.2 % relative error, clamped to the window's exact minimum and maximum).
 *
 * On a terminal (tty) each frame clears the screen first; otherwise every line of a frame starts
 * with its kernel time in seconds and no escape byte is written (logs, pipes, kubectl exec).
 */
#ifndef TS_TOP_H
#define TS_TOP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <termios.h>

#include "pipeline/step.h"
#include "lib/hist.h"
#include "pipeline/device_sample.h"
#include "pipeline/sink.h"
#include "sinks/window.h"

#define TOP_WINDOW_S 10
/* One more slot than the window: the second in progress fills while the window's are read. */
#define TOP_SLOTS (TOP_WINDOW_S + 1)
/* Rows kept; requests of further models are counted (footer) until a row frees up. */
#define TOP_MAX_MODELS 32
/* Display cells of the MODEL column, and with --by-process (beside a PID column). */
#define TOP_MODEL_COL_MAX 24
#define TOP_MODEL_COL_PID 16
/* GPU lines: traced processes listed per device, and the age from which a sample says it. */
#define TOP_GPU_PROCS 4
#define TOP_GPU_STALE_NS (3 * DEV_SAMPLE_PERIOD_MS * 1000000ull)
/* ANSI: cursor home, then erase the screen. */
#define TOP_CLEAR "\033[H\033[2J"

struct top_model {
	char model[REQBODY_MODEL_MAX]; /* "" when the body did not say */
	uint32_t pid;		       /* server process (by_process), else 0 */
	uint64_t last_s;	       /* second of its latest request */
	struct window win;	       /* TOP_SLOTS seconds, TTFT and ITL kept */
};

struct top {
	FILE *out;
	bool tty, by_process;
	struct top_model models[TOP_MAX_MODELS];
	uint32_t nmodels;
	struct window steps;   /* TOP_SLOTS seconds of GPU step durations, by step kind */
	struct whist *scratch; /* window merge, at render */
	uint64_t first_s;      /* first second anything was seen; the rate's start */
	bool started;
	uint64_t last_frame_s; /* second of the latest frame */
	bool framed;
	uint64_t requests;	   /* every finished request seen */
	uint64_t models_dropped;   /* requests not shown: every row was in use */
	struct device_sample *gpu; /* the latest GPU sample given; NULL before the first */
	uint32_t in_flight;	   /* as of the latest pipeline status */
	uint64_t lost_events;
	int64_t wall_offset_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC: the header's time of day */
};

/* -ENOMEM when the step window cannot be allocated. */
int top_init(struct top *t, FILE *out, bool tty, bool by_process);
void top_free(struct top *t);
struct sink top_sink(struct top *t);
/* The latest GPU sample (NVML, cut down to the traced processes), shown from the next frame on:
 * a line per device. -ENOMEM when there is no room for it (the frame then has no GPU lines). */
int top_set_gpu_sample(struct top *t, const struct device_sample *s);
/* Draws one frame for the window ending at the second of now_ns. */
void top_render(struct top *t, uint64_t now_ns, FILE *f);

/* Terminal: 1 when 'q' was read from fd without blocking, 0 when not, -errno on error. */
int top_keypress(int fd);
/* Puts the terminal in non-canonical, no-echo mode (signals stay: Ctrl-C still works), saving
 * its settings; -errno on error (-ENOTTY when fd is not a terminal). */
int top_term_raw(int fd, struct termios *saved);
void top_term_restore(int fd, const struct termios *saved);

#endif
