/* SPDX-License-Identifier: MIT */
/*
 * A device sample as a value: every GPU's utilisation, memory, clock and power and its compute
 * processes at one time, which a vendor's sampler in the loader takes (NVML's: loader/nvml.c)
 * and the pipeline hands to the sinks cut down to the traced processes; and what the sinks do
 * with one: a line per device or its processes, and the run's figures for the summary. Nothing
 * here is a vendor's: a sampler fills it from whatever management library its GPUs have.
 *
 * Every value has a "present" flag: a function the library lacks, or a query the device refuses,
 * leaves that value absent, never zero. Everything is bounded: DEV_MAX_DEVICES devices and
 * DEV_MAX_PROCS processes per device are kept, and what did not fit is counted in the sample.
 */
#ifndef TS_DEVICE_SAMPLE_H
#define TS_DEVICE_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define DEV_MAX_DEVICES 16
#define DEV_MAX_PROCS 64
/* The longest name or UUID a sampler reads, in bytes (NVML's _V2_BUFFER_SIZE); the sample keeps
 * them cleaned as utf8_clean does, where a byte may become 3 (U+FFFD). */
#define DEV_NAME_BYTES 96
#define DEV_TEXT_MAX (DEV_NAME_BYTES * 3 + 1)
/* How often a sampler takes one (nvml_opts.period_ms may set another). */
#define DEV_SAMPLE_PERIOD_MS 1000

struct sampled_proc {
	uint32_t pid;
	bool mem_present; /* NVML, for one, reports "not available" under some virtualisation */
	uint64_t mem_bytes;
};

struct sampled_device {
	uint32_t index;	  /* the vendor's index (NVML's, as nvidia-smi and DCGM number them) */
	uint64_t mono_ns; /* CLOCK_MONOTONIC when this device was sampled */
	char name[DEV_TEXT_MAX]; /* "" when absent */
	char uuid[DEV_TEXT_MAX]; /* "" when absent */
	bool util_present, mem_present, clock_present, power_present, procs_present;
	uint32_t util_pct; /* kernels running, percent of the library's last sample period */
	uint64_t mem_used, mem_total; /* bytes */
	uint64_t sm_clock_hz;
	uint32_t power_mw; /* milliwatts, as NVML gives it */
	uint32_t nprocs;
	uint32_t procs_dropped; /* compute processes beyond DEV_MAX_PROCS (or all of them when
				 * the library asked for more room than tokenscope gives it) */
	struct sampled_proc procs[DEV_MAX_PROCS];
};

struct device_sample {
	uint64_t seq; /* samples taken so far: 0 before the first */
	uint32_t ndevices;
	uint32_t devices_dropped; /* devices beyond DEV_MAX_DEVICES */
	struct sampled_device devices[DEV_MAX_DEVICES];
};

/* Keeps in s only the processes keep() says yes to (the traced ones), in their order. */
void device_sample_keep_procs(struct device_sample *s, bool (*keep)(void *ctx, uint32_t pid),
			      void *ctx);

/*
 * A device's sample as one line without its newline: "GPU 0 NAME: util 45%, memory 1.00 GiB of
 * 8.00 GiB, SM 1980 MHz, 350.1 W" (n/a for utilisation or memory the device does not give;
 * clock and power left out then).
 */
void sampled_device_print(const struct sampled_device *d, FILE *f);
/* Its processes (the traced ones, once kept) as one line: "GPU 0 memory of pid 12 512.0 MiB,
 * pid 13 n/a", at most max_procs of them, then how many more. */
void sampled_procs_print(const struct sampled_device *d, unsigned int max_procs, FILE *f);

/* The run's figures for the summary, from every sample given to device_usage_add. */
struct device_usage_proc {
	uint32_t gpu, pid;
	uint64_t mem_max;
};

struct device_usage_dev {
	uint32_t index;
	char name[DEV_TEXT_MAX], uuid[DEV_TEXT_MAX];
	uint64_t samples;
	uint64_t util_n, util_sum;
	uint32_t util_max;
	uint64_t mem_n, mem_used_max, mem_total;
	uint64_t clock_n, clock_sum_mhz;
	uint64_t power_n, power_sum_mw;
	uint32_t power_max_mw;
};

struct device_usage {
	uint64_t samples;
	uint32_t ndevices;
	struct device_usage_dev devices[DEV_MAX_DEVICES];
	uint32_t nprocs;
	struct device_usage_proc procs[DEV_MAX_PROCS];
	uint64_t procs_dropped;	  /* (gpu, pid) pairs beyond DEV_MAX_PROCS in the summary */
	uint32_t devices_dropped; /* the most any sample left out */
	uint32_t listed_dropped;  /* the most processes any sample left out on one device */
};

void device_usage_add(struct device_usage *u, const struct device_sample *s);
/* "  gpu 0 NAME (UUID): ..." lines; nothing when no sample was added. */
void device_usage_print(const struct device_usage *u, FILE *f);

#endif
