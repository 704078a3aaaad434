/* SPDX-License-Identifier: MIT */
/*
 * Recordings (`.tsr`): the raw event stream written to a file by `tokenscope record` and
 * replayed through the same pipeline by `tokenscope report` (every number is a function of
 * the event stream, so a replay reports exactly what the live tracer would have).
 *
 * File format, version 5 (version 4 had no RECORD_EV_DRAIN marks, and its replay ticks every
 * REPLAY_TICK_NS of kernel time; version 3 had no RECORD_EV_WORKLOAD records, version 2 no
 * RECORD_EV_DEVICE_SAMPLE records either; version 1 differed too in struct ts_data_event, which
 * lacked queued_ns). Every integer is little endian.
 *
 *   header (header_bytes long; v1 writes RECORD_HEADER_BYTES = 400)
 *     0  char magic[8]        "TSREC\0\0\0"
 *     8  u32  version         RECORD_VERSION: bumped only when old readers cannot read the file
 *    12  u32  header_bytes    offset of the first record; readers skip header bytes they do not
 *                             know, so fields can be added at the end without a version bump
 *    16  u64  start_mono_ns   CLOCK_MONOTONIC (the clock of every record) when recording began
 *    24  u64  start_real_ns   CLOCK_REALTIME at the same moment: wall time of a record is
 *                             start_real_ns + (ts - start_mono_ns); both at most
 *                             RECORD_CLOCK_MAX_NS
 *    32  u32  capture_bytes   --capture-bytes of the run (at most TS_CAPTURE_MAX)
 *    36  u32  nroots          PIDs named with -p (at most RECORD_MAX_ROOTS, each 1 to
 *                             RECORD_PID_MAX)
 *    40  char tool_version[32]  tokenscope version that recorded, NUL-padded
 *    72  char hostname[64]      NUL-padded (not terminated when 64 bytes long)
 *   136  u32  roots[64]       the first nroots are used
 *   392  u32  flags           0 (reserved)
 *   396  u32  reserved        0
 *
 *   then records, each:
 *     u32  len                bytes that follow: 16 <= len <= RECORD_MAX_BYTES
 *     u8   rec[len]           one ring-buffer record exactly as the kernel sent it
 *                             (include/events.h: struct ts_event_hdr first, hdr.size == len)
 *
 * Ring-buffer records are stored as they came, in the byte order of the machine that recorded
 * them; tokenscope runs on little-endian machines (x86_64, arm64) only.
 *
 * Two record types exist only in files: RECORD_EV_KSTATS, a snapshot of the kernel's counters
 * (lost records, bytes beyond capture, ...), which live only in a BPF map and not in the ring
 * buffer. The recorder writes one whenever they change, in stream order, so a replay marks the
 * same open requests as maybe lost and shows the same loss figures (nothing is lost silently).
 * RECORD_EV_DEVICE_SAMPLE, a GPU sample (pipeline/device_sample.h, NVML's today) as the live run
 * read it, at the point of the stream where its sinks got it, so a replay shows the same GPU
 * utilisation and memory. And
 * RECORD_EV_WORKLOAD, where a followed process runs (its container, its Kubernetes pod) as the
 * live run found it from /proc and the runtime's state, which a replay cannot read. And
 * RECORD_EV_DRAIN, the live run's tick after a drain of the ring buffer, with the clock it
 * read then: a replay ticks there, with that clock, and nowhere else. Each is written where
 * the pipeline was fed it (record/tap.h).
 *
 * Replay stops at the first record that cannot be framed (a zero or insane length, a length
 * that disagrees with hdr.size, a truncated last record): everything before it has been fed,
 * and the stats say where and why, so a recording cut short by a crash still gives a report.
 */
#ifndef TS_RECORD_H
#define TS_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>

#include <stdio.h>

#include "events.h"

#define RECORD_MAGIC "TSREC\0\0\0"
#define RECORD_MAGIC_BYTES 8
#define RECORD_VERSION 5
/* The first version with drain marks (RECORD_EV_DRAIN). */
#define RECORD_VERSION_DRAINS 5
/* Version 1 lacked ts_data_event.queued_ns; its data records are read with it 0 (unknown). */
#define RECORD_VERSION_OLDEST 1
#define RECORD_HEADER_BYTES 400
/* The largest header a reader accepts: a length beyond it means a corrupt file, not growth. */
#define RECORD_HEADER_MAX (1 << 20)
#define RECORD_TOOL_VERSION_BYTES 32
#define RECORD_HOST_BYTES 64
#define RECORD_MAX_ROOTS 64
/* The latest clock reading a header may hold, 2^62 ns: 146 years of uptime, or a wall clock in
 * 2116. Within it, every offset between the two clocks, and every wall time of a record, is
 * computed without overflow (lib/clock.h). */
#define RECORD_CLOCK_MAX_NS (1ull << 62)
/* The largest pid Linux gives (PID_MAX_LIMIT on 64-bit). */
#define RECORD_PID_MAX (4u * 1024 * 1024)
/* Largest record length accepted: a data record with the most payload the capture limit allows
 * (the kernel sends at most TS_CHUNK_BYTES per record; the margin leaves room for new types). */
#define RECORD_MAX_BYTES (TS_CAPTURE_MAX + sizeof(struct ts_data_event))
/* Bytes buffered by the writer between write(2) calls. */
#define RECORD_BUF_BYTES (64 * 1024)

/* File-only record: the kernel's counters (enum ts_stat order) at this point of the stream. */
#define RECORD_EV_KSTATS 0x10000
struct record_kstats_event {
	struct ts_event_hdr hdr; /* type RECORD_EV_KSTATS, size 24 + 8 * nstats, pid 0, tid 0 */
	__u32 nstats;		 /* counters that follow; a reader uses the ones it knows */
	__u32 pad;
	__u64 stats[]; /* enum ts_stat order */
};

/* File-only record: a GPU sample (struct device_sample, every process on each GPU), then
 * ndevices devices, each followed by its nprocs processes. It is the record once named
 * RECORD_EV_NVML (struct record_nvml_event and the RECORD_NVML_* flags): the same type number
 * and the same bytes, so every recording made before the rename reads as it did. */
#define RECORD_EV_DEVICE_SAMPLE 0x10001
#define RECORD_SAMPLE_TEXT 296 /* DEV_TEXT_MAX rounded up to 8 */
enum record_sample_flags {
	RECORD_SAMPLE_UTIL = 1 << 0,
	RECORD_SAMPLE_MEM = 1 << 1,
	RECORD_SAMPLE_CLOCK = 1 << 2,
	RECORD_SAMPLE_POWER = 1 << 3,
	RECORD_SAMPLE_PROCS = 1 << 4,
};
struct record_sample_event {
	struct ts_event_hdr
	    hdr; /* type RECORD_EV_DEVICE_SAMPLE, size: all that follows too; pid 0 */
	__u64 seq;
	__u32 ndevices, devices_dropped;
};
struct record_sample_device {
	__u32 index, flags; /* RECORD_SAMPLE_*: which fields the sampler gave */
	__u32 util_pct, power_mw;
	__u64 mono_ns, mem_used, mem_total, sm_clock_hz;
	__u32 nprocs, procs_dropped;
	char name[RECORD_SAMPLE_TEXT], uuid[RECORD_SAMPLE_TEXT]; /* NUL-padded */
};
struct record_sample_proc {
	__u32 pid, mem_present;
	__u64 mem_bytes;
};

/* File-only record: where process hdr.pid runs (pipeline/workload.h), as the tracer labelled it;
 * its strings NUL-padded. */
#define RECORD_EV_WORKLOAD 0x10002
struct record_workload_event {
	struct ts_event_hdr hdr; /* type RECORD_EV_WORKLOAD, size sizeof; pid: the process */
	__u64 ts_ns;		 /* when it was labelled */
	char container_id[72], pod_uid[40], k8s_namespace[64], k8s_pod[256], k8s_container[64];
};

/* File-only record: the live run ticked here, its pipeline's clock at clock_ns. */
#define RECORD_EV_DRAIN 0x10003
struct record_drain_event {
	struct ts_event_hdr hdr; /* type RECORD_EV_DRAIN, size sizeof, pid 0 */
	__u64 clock_ns;
};

/* A header's strings, as the reader gives them: printable UTF-8 (utf8_clean), where a byte may
 * become three (U+FFFD). */
struct record_meta {
	char tool_version[RECORD_TOOL_VERSION_BYTES * 3 + 1];
	char hostname[RECORD_HOST_BYTES * 3 + 1];
	uint64_t start_mono_ns, start_real_ns;
	/* Set by the reader: start_real_ns - start_mono_ns, which turns a record's time into wall
	 * time (lib/clock.h's clock_wall_ns); both clocks in range, it always fits. */
	int64_t real_offset_ns;
	uint32_t capture_bytes;
	uint32_t roots[RECORD_MAX_ROOTS];
	uint32_t nroots;
	/* Set by the reader: the file's format version and header length. */
	uint32_t version, header_bytes;
};

struct record_writer {
	int fd;
	unsigned char *buf;
	size_t used;
	uint64_t records, bytes; /* records written, and file bytes (header included) */
	uint64_t rejected;	 /* records refused by record_write (-EINVAL) */
	int err;		 /* the first write error: every later call returns it */
	uint64_t kstats[TS_STAT_MAX];
	bool kstats_written;
};

struct record_replay_stats {
	bool header_ok;	    /* the header was valid: the report covers what was fed */
	uint64_t records;   /* records fed */
	uint64_t rejected;  /* records the feed callback returned < 0 for (replay goes on) */
	uint64_t bytes;	    /* file bytes read up to the end or to bad_offset */
	int64_t bad_offset; /* byte offset of the first bad record or header; -1 when whole */
	char reason[128];   /* why replay stopped early; "" when whole */
};

/*
 * Fills the clocks (CLOCK_MONOTONIC and CLOCK_REALTIME read back to back), the hostname and the
 * version, and zeroes the rest; the caller sets capture_bytes and roots. These clocks only map kernel times to wall
 * time in a report; no latency is ever computed from them.
 */
void record_meta_fill(struct record_meta *m, const char *tool_version);

/* Creates (truncates) path with mode 0600 (records hold captured request and response bytes)
 * and writes the header. 0 or a negative errno. */
int record_open(struct record_writer *w, const char *path, const struct record_meta *meta);
/* Appends one ring-buffer record. -EINVAL (counted in w->rejected, nothing written) when len is
 * outside [16, RECORD_MAX_BYTES] or disagrees with hdr.size; other negative errno: I/O error. */
int record_write(struct record_writer *w, const void *rec, size_t len);
/* Appends a RECORD_EV_DEVICE_SAMPLE record of the sample s. */
struct device_sample;
int record_write_device_sample(struct record_writer *w, const struct device_sample *s);
/* The sample of a RECORD_EV_DEVICE_SAMPLE record into *s, its strings made printable (utf8_clean);
 * -EINVAL (s then undefined) when the record is not one or does not hold what it says. */
int record_device_sample(const void *rec, size_t len, struct device_sample *s);
/* Appends a RECORD_EV_WORKLOAD record: process pid runs in wl (labelled at ts_ns). */
struct workload;
int record_write_workload(struct record_writer *w, uint32_t pid, uint64_t ts_ns,
			  const struct workload *wl);
/* The process and workload of a RECORD_EV_WORKLOAD record, its strings made printable;
 * -EINVAL when the record is not one. */
int record_workload(const void *rec, size_t len, uint32_t *pid, struct workload *wl);
/* Appends a RECORD_EV_DRAIN mark: a tick, with the clock at clock_ns. */
int record_write_drain(struct record_writer *w, uint64_t clock_ns);
/* The clock of a RECORD_EV_DRAIN mark; -EINVAL when the record is not one. */
int record_drain(const void *rec, size_t len, uint64_t *clock_ns);
/* Appends a RECORD_EV_KSTATS record when the counters differ from the last written ones. */
int record_write_kstats(struct record_writer *w, const uint64_t kstats[TS_STAT_MAX]);
/* Writes buffered records to the file (the loader calls it after each drain, so a killed
 * recorder leaves a file with every drained record). */
int record_flush(struct record_writer *w);
/* Flushes, fsyncs (where the file supports it) and closes; the first error wins. Safe on a
 * zeroed writer, on one whose record_open failed, and twice. */
int record_close(struct record_writer *w);

/*
 * A reader: the header first (record_reader_open fills meta, so that a report can set up its
 * outputs with the recording's clocks and host before any record), then the records in order
 * (record_next). st says how far it got and, when it stopped early, where and why.
 */
struct record_reader {
	struct record_meta meta;       /* valid when st.header_ok */
	struct record_replay_stats st; /* rejected: the caller's to count */
	FILE *f;
	char *iobuf;
	unsigned char *rec; /* the current record (grown to the largest seen) */
	size_t cap;
	bool done; /* the end, or an error (err), was reached */
	int err;
};

/* Opens path and reads its header: 0, or the errors of record_replay below (st.reason says). */
int record_reader_open(struct record_reader *r, const char *path);
/* The next record in *rec (valid until the next call; a version 1 data record upgraded): 1; 0
 * at the end of a whole file; a negative errno (as record_replay's) at the first record that
 * cannot be framed, and at every call after. */
int record_next(struct record_reader *r, const void **rec, size_t *len);
/* Safe after a failed open, and twice. */
void record_reader_close(struct record_reader *r);

/*
 * Validates the header and feeds every record, in order, to feed (RECORD_EV_KSTATS records
 * included: replay_feed handles them). A negative return from feed counts the record
 * in st->rejected; replay goes on. Returns:
 *   0                  the file was whole;
 *   -EBADMSG           a record with a corrupt length, or a truncated header;
 *   -EPROTO            a truncated last record;
 *   -ENOEXEC           not a tokenscope recording (wrong magic or too short to hold one);
 *   -EPROTONOSUPPORT   a format version this reader does not know;
 *   other negative     an I/O error (open, read) or -ENOMEM.
 * st->reason and st->bad_offset say what and where; st->header_ok says whether a report of the
 * records fed (possibly none) makes sense. meta_out may be NULL.
 */
int record_replay(const char *path, int (*feed)(void *ctx, const void *rec, size_t len), void *ctx,
		  struct record_meta *meta_out, struct record_replay_stats *st);

/* Returns the kernel counters record, or NULL when rec is not a valid one. */
const struct record_kstats_event *record_kstats(const void *rec, size_t len);

#endif
