/* SPDX-License-Identifier: MIT */
/*
 * GPU utilisation and memory from NVML, the NVIDIA driver's management library.
 *
 * libnvidia-ml.so.1 is opened with dlopen at run time (so LD_LIBRARY_PATH is followed, and
 * tokenscope needs no NVIDIA package to build or run), never by running nvidia-smi. A thread of
 * tokenscope's own samples every device once per period (DEV_SAMPLE_PERIOD_MS) into a snapshot kept
 * under a mutex; readers copy the latest snapshot out, a plain value. Every value has a
 * "present" flag: a function the library lacks, or a query the device refuses
 * (NVML_ERROR_NOT_SUPPORTED, e.g. power on some boards), leaves that value absent, never zero.
 *
 * With no library, or a library that cannot initialise (no driver loaded), nvml_start prints one
 * message saying why and that GPU utilisation and memory will not be shown (with quiet, only
 * once nvml_say_why asks), and nothing else: no snapshot is ever published.
 *
 * Everything is bounded: DEV_MAX_DEVICES devices and DEV_MAX_PROCS processes per device are
 * kept, and what did not fit is counted in the snapshot.
 */
#ifndef TS_NVML_H
#define TS_NVML_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "loader/sampler.h"
#include "pipeline/device_sample.h"

/* The soname the driver installs; a path works too (tests). */
#define NVML_LIBRARY "libnvidia-ml.so.1"

struct nvml_opts {
	const char *library;	/* NULL: NVML_LIBRARY */
	unsigned int period_ms; /* 0: DEV_SAMPLE_PERIOD_MS */
	FILE *err;		/* the one message when NVML cannot be used; NULL: stderr */
	bool quiet;		/* nvml_start: that message only once nvml_say_why asks */
};

struct nvml;

/*
 * Opens the library and initialises it, without a thread (nvml_start does both). NULL when it
 * cannot: the message is printed.
 */
struct nvml *nvml_open(const struct nvml_opts *o);
/* Samples every device now into out (seq left 0). Only the thread calls it once one runs. */
void nvml_sample(struct nvml *n, struct device_sample *out);
/*
 * Opens NVML on a new thread that then samples once a period, starting at once; returns at
 * once. NULL only when memory or a thread cannot be had (printed). Opening can take seconds on
 * a machine whose driver keeps no state between clients, hence on the thread, which prints the
 * message if it fails and ends.
 */
struct nvml *nvml_start(const struct nvml_opts *o);
/* Copies the latest sample into out when its seq differs from out->seq: true then. */
bool nvml_latest(struct nvml *n, struct device_sample *out);
/* With quiet: says why NVML cannot be used, once, now if its thread found that out already, else
 * when it does (a traced process mapped a CUDA library: then the reason matters). */
void nvml_say_why(struct nvml *n);
/* Stops the thread (at once, not after a period), shuts NVML down and frees n; NULL is fine. */
void nvml_stop(struct nvml *n);

/* NVML as a GPU vendor's sampler (sampler.h): nvml_start quiet, with the defaults, and the
 * preflight's line about libnvidia-ml.so.1. */
extern const struct sampler_ops nvml_sampler;

#endif
