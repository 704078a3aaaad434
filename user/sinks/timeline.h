/* SPDX-License-Identifier: MIT */
/*
 * Timeline export (--timeline FILE): the run's requests and GPU steps as a Chrome Trace Event
 * Format file (JSON object form) that Perfetto (ui.perfetto.dev) and chrome://tracing open.
 * A sink: a request's events are written when it is reported and a GPU step's when it is (once
 * its batch is final, batch.h), so memory holds one request at most. Arrows (flow events) go
 * from each step to each token it produced, written with the request. Events are built in
 * memory and written to the file whole, after every request, every tick and every
 * TIMELINE_FLUSH_BYTES, so the file always ends at an event boundary; timeline_close writes the
 * closing "]}".
 *
 * A file left by a crash lacks only that "]}": append it (printf ']}' >> FILE) to open it.
 * Neither Perfetto ("JSON trace file is incomplete") nor chrome://tracing accepts an
 * unterminated object-form file; both accept a missing end only in the bare array form.
 *
 * Times are microseconds (ns fractions) from an origin, a CLOCK_MONOTONIC time kept in
 * otherData.origin_ns: the start of tracing when the caller gives it, else the first event seen
 * (a request's arrival or a GPU step's start). Perfetto drops events before 0, and requests are
 * reported when they end, so one that arrived before the first event seen would be lost in it:
 * the tracer gives the start of tracing.
 */
#ifndef TS_TIMELINE_H
#define TS_TIMELINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pipeline/sink.h"

/*
 * The "connections" process of the trace, and a connection's track (thread) in it. Perfetto
 * takes a tid to belong to one process at a time, as on Linux, and GPU steps keep their real
 * pid and tid, so both are offset past PID_MAX_LIMIT (4194304 on 64-bit kernels), which no real
 * process or thread id reaches.
 */
#define TIMELINE_CONN_PID 4194304
#define TIMELINE_CONN_TID(conn_id) (TIMELINE_CONN_PID + (conn_id))
/* Requests on one connection that overlap in time (HTTP/2 streams, HTTP/1.1 pipelining) go to
 * lanes, each a track of its own (a track's slices must nest): lane 0 is the connection's track,
 * lane k > 0 one past 2^29 from it, which a connection track would reach 2^29 - 2^22
 * connections into a run. Past the last lane, requests share it. */
#define TIMELINE_LANES 8
#define TIMELINE_LANE_TID(conn_id, k)                                                      \
	((k) ? TIMELINE_CONN_PID + (1ull << 29) + (uint64_t)(conn_id)*TIMELINE_LANES + (k) \
	     : TIMELINE_CONN_TID(conn_id))
/* Connections whose lanes are remembered: a direct-mapped cache; a collision forgets the
 * older connection's lanes (its next requests start again from lane 0). */
#define TIMELINE_LANE_CONNS 256
/* The GPUs' counters (NVML samples): a process of their own, past every real pid like the
 * connections', and at the top of the int32 range, which only a connection track 2^31 - 2^22
 * connections into a run would reach as a tid. */
#define TIMELINE_NVML_PID 2147483647u
/* A GPU process's device track (its steps' device times, from the CUPTI library): a thread of
 * that process with an id no real thread has, past PID_MAX_LIMIT as the connections' and below
 * the NVML process, which a connection track would reach 2^30 - 2^22 connections into a run. */
#define TIMELINE_DEVICE_TID(pid) ((1ull << 30) + (pid))
/* Connections and GPU processes whose track was named recently: a direct-mapped cache that keeps
 * memory bounded; a collision costs a repeated (harmless) naming event. */
#define TIMELINE_NAMED_CONNS 1024
#define TIMELINE_NAMED_PIDS 64
/* GPU steps between requests are written once this much is buffered (and at every tick). */
#define TIMELINE_FLUSH_BYTES 65536
/* The event buffer is kept between writes up to this size (a request of about 10,000 tokens). */
#define TIMELINE_KEEP_BYTES (1u << 20)

struct timeline {
	int fd;
	FILE *buf; /* events not yet written to fd */
	char *mem;
	size_t mem_len;
	bool started;	   /* the header is written: the origin is fixed */
	bool origin_given; /* by timeline_set_origin */
	uint64_t origin_ns;
	uint64_t events, requests, steps;
	uint64_t flows;		 /* arrows from GPU steps to tokens: the last flow id */
	uint64_t events_written; /* events when the buffer was last written out */
	uint64_t named_conns[TIMELINE_NAMED_CONNS]; /* track tid + 1 */
	struct {
		uint64_t conn_id1;		 /* conn_id + 1; 0: unused */
		uint64_t end_ns[TIMELINE_LANES]; /* the latest end of a request in each lane */
	} lanes[TIMELINE_LANE_CONNS];
	uint32_t named_pids[TIMELINE_NAMED_PIDS];
	uint32_t named_devices[TIMELINE_NAMED_PIDS]; /* pids whose device track is named */
	bool nvml_named;			     /* the GPUs' counter process */
	int err;				     /* first write error (negative errno) */
};

/* Creates (truncates) path; -errno when it cannot. Nothing is written before the first event. */
int timeline_open(struct timeline *t, const char *path);
/* The start of tracing (CLOCK_MONOTONIC ns, no later than any event); -EBUSY after an event. */
int timeline_set_origin(struct timeline *t, uint64_t origin_ns);
/* The sink to register with pipeline_add_sink; t must outlive the pipeline's use of it. */
struct sink timeline_sink(struct timeline *t);
struct device_sample;
/* A GPU sample: counter events ("C") for each device's utilisation (percent) and memory used
 * (bytes), at the time NVML was read (CLOCK_MONOTONIC, the events' clock); a value NVML did not
 * give has no event. Written out at the next tick. Live tracing only: a recording has no GPU
 * samples. */
void timeline_gpu_sample(struct timeline *t, const struct device_sample *s);
/* Writes the rest and the end of the file and closes it: 0, or the first error (-errno). */
int timeline_close(struct timeline *t);

#endif
