/* SPDX-License-Identifier: MIT */
/*
 * The device-time ABI: what a device-time library loaded into a GPU process hands to
 * tokenscope: runs of device work with their times on CLOCK_MONOTONIC, through the USDT probe
 * tokenscope:runs. Nothing in it is a vendor's: today's library is CUDA's (cupti/, CUPTI's
 * activity records, loaded through CUDA_INJECTION64_PATH), and another vendor's library fires
 * the same probes with the same structs. Shared by the library, the BPF program that attaches
 * to the probe, and the pipeline. The library and tokenscope come from different builds (a
 * server may run an older library than the tracer): every probe carries TS_DEVTIME_ABI, and a
 * reader ignores a version it does not know, counting it. This header was include/cupti_abi.h,
 * its names TS_CUPTI_* and ts_cupti_*: the layout and the version number are the same.
 *
 * A run is device work on one stream of one device with no gap longer than TS_RUN_GAP_NS
 * between two of its operations: a decode step's graph replay is one run, an eager prefill of
 * hundreds of kernels a few. The library cannot cut its records into GPU steps (a step is the
 * work between two host waits, which CUPTI does not report), and CUPTI delivers device records
 * after the step they belong to has ended; the pipeline places each run in its step.
 *
 * While a tracer is attached, the library flushes its buffers (CUPTI's) every
 * TS_DEVTIME_FLUSH_MS and then fires the probe once with no runs (a heartbeat) and
 * stats.flush_ns set to the time the flush began. CUPTI hands over only buffers whose every
 * record is complete, so an operation
 * that ended before flush_ns may still be held behind one that is running: the pipeline takes
 * a step's device times as complete only when a later run came, or after a quiet time
 * (user/pipeline/gpu.c).
 *
 * Like include/events.h, it includes nothing: the includer provides __u32 and __u64.
 */
#ifndef TS_DEVTIME_ABI_H
#define TS_DEVTIME_ABI_H

/* Bumped whenever struct ts_dev_run, struct ts_devtime_stats or the probe arguments change. */
#define TS_DEVTIME_ABI 2

/* The USDT provider and probe: STAP_PROBE4(tokenscope, runs, abi, runs, n, stats), where runs
 * points to an array of TS_RUNS_PER_PROBE runs whose first n are valid (the reader copies the
 * whole array, of a size it knows) and stats to the library's counters. Three probes with
 * those arguments; which one a tracer attaches to is how it asks what to collect (the
 * library reads their semaphores, the first found of these wins):
 *   kernels  every operation its own run, every step (--kernels);
 *   all      every step's device work (--device-times all);
 *   runs     sampled (the default): graph replays, copies and their launches always; eager
 *            kernels and their launches only in windows of TS_DEVTIME_SAMPLE_ON_MS every
 *            TS_DEVTIME_SAMPLE_PERIOD_MS (stats.sample_on_ns/sample_off_ns say when). */
#define TS_DEVTIME_PROVIDER "tokenscope"
#define TS_DEVTIME_PROBE "runs"
#define TS_DEVTIME_PROBE_ALL "all"
#define TS_DEVTIME_PROBE_KERNELS "kernels"
/* The sampled mode's duty cycle (the library's environment TOKENSCOPE_CUPTI_SAMPLE=ON/PERIOD
 * in milliseconds changes it). Eager kernels are what CUPTI's instrumentation costs most on
 * (a record and an API record per launch); a decode step replaying a CUDA graph is one record. */
#define TS_DEVTIME_SAMPLE_ON_MS 1000
#define TS_DEVTIME_SAMPLE_PERIOD_MS 10000

/* Device gaps up to this long between two operations of one stream join them into one run
 * (back-to-back kernels start 1 to 4 us apart on the device). */
#define TS_RUN_GAP_NS 2000ull
/* Runs per probe call; the BPF program copies at most this many. */
#define TS_RUNS_PER_PROBE 32
/* The library's flush and heartbeat period while a tracer is attached. */
#define TS_DEVTIME_FLUSH_MS 100

enum ts_run_flags {
	TS_RUN_F_LAUNCH = 1 << 0, /* first_launch_ns is known */
	TS_RUN_F_SINGLE = 1 << 1, /* one operation (per-kernel records, --kernels) */
};

struct ts_dev_run {
	__u64 start_ns, end_ns; /* device time of the first start and the last end */
	__u64 busy_ns;		/* the operations' device time: their sum (a stream runs one
				 * operation at a time), the gaps between them left out */
	__u64 first_launch_ns;	/* host time the first operation was launched (flags) */
	__u64 delay_ns;		/* sum over launched operations of device start - launch */
	__u64 delay_max_ns;	/* the longest of those */
	__u32 device, stream;	/* the vendor's device and stream ids (CUPTI's) */
	__u32 kernels, graphs;	/* eager kernels, and CUDA graph replays (graph-level records) */
	__u32 memcpys, dtoh;	/* copies, and of those device to host */
	__u32 launched;		/* operations whose launch time was known */
	__u32 flags;		/* TS_RUN_F_* */
};

/* Counters of one process's library since it was loaded (cumulative: a reader keeps the last
 * value per process). */
/* The vendor library's own overhead kinds, as counted (CUPTI's beside each). */
enum ts_devtime_overhead {
	TS_DEVTIME_OVERHEAD_FLUSH,	     /* CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH */
	TS_DEVTIME_OVERHEAD_INSTRUMENTATION, /* ..._CUPTI_INSTRUMENTATION */
	TS_DEVTIME_OVERHEAD_RESOURCE,	     /* ..._CUPTI_RESOURCE */
	TS_DEVTIME_OVERHEAD_OTHER,	     /* every other kind */
	TS_DEVTIME_OVERHEADS,
};

struct ts_devtime_stats {
	__u64 records;	   /* activity records read */
	__u64 ops;	   /* of those, kernels, graph replays and copies */
	__u64 runs;	   /* runs handed to the probe */
	__u64 dropped;	   /* records CUPTI reported dropped (no buffer, buffer full) */
	__u64 pool_empty;  /* buffer requests refused: every pool buffer was in use */
	__u64 bad_time;	   /* operations whose end preceded their start: not counted busy */
	__u64 unknown;	   /* records of a kind the library does not read */
	__u64 no_launch;   /* operations whose launch was not found (evicted or not seen) */
	__u64 runs_unsent; /* runs made while no tracer was attached (not sent) */
	__u32 clock;	   /* how device times reach CLOCK_MONOTONIC: TS_DEVTIME_CLOCK_* */
	__u32 pad;
	__u64 clock_err_ns; /* TS_DEVTIME_CLOCK_OFFSET: the bound on the measured offset's error */
	__u64 flush_ns;	    /* a heartbeat: the time the flush began */
	/* What is collected (TS_DEVTIME_MODE_*) and, in the sampled mode, the latest window of
	 * eager-kernel records: sample_on_ns is when it began (after collection was on), and
	 * sample_off_ns when the latest one ended (before collection went off); the window is
	 * open while sample_off_ns < sample_on_ns. In the other modes sample_on_ns is when
	 * collection began and sample_off_ns 0. The library fires a heartbeat at each change. */
	__u32 mode;
	__u32 sample_on_ms, sample_period_ms; /* the sampled mode's duty cycle */
	__u32 pad2;
	__u64 sample_on_ns, sample_off_ns;
	__u64 windows; /* sampling windows opened */
	/* Its own cost: completed buffers read, and the time spent reading them and making
	 * runs (CLOCK_MONOTONIC, the probe calls included). */
	__u64 buffers, read_ns;
	/* CUPTI's own overhead records (CUPTI_ACTIVITY_KIND_OVERHEAD): their count and time by
	 * TS_DEVTIME_OVERHEAD_*. */
	__u64 overhead_records;
	__u64 overhead_ns[TS_DEVTIME_OVERHEADS];
};

enum ts_devtime_mode {
	TS_DEVTIME_MODE_SAMPLED = 1,
	TS_DEVTIME_MODE_ALL = 2,
	TS_DEVTIME_MODE_KERNELS = 3,
};

enum ts_devtime_clock {
	/* CUPTI asks the library for every host timestamp it uses, and the library answers
	 * CLOCK_MONOTONIC; CUPTI maps the device's timestamps onto those. */
	TS_DEVTIME_CLOCK_CALLBACK = 1,
	/* A CUPTI without the timestamp callback: its own clock, moved by an offset to
	 * CLOCK_MONOTONIC measured once a second between two reads of CLOCK_MONOTONIC. */
	TS_DEVTIME_CLOCK_OFFSET = 2,
};

#endif
