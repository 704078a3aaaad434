/* SPDX-License-Identifier: MIT */
/*
 * What the tracer could not see, or let go rather than report a wrong number: one table, each
 * counter declared once, from which the summary's `lost`/`dropped` lines, the JSON summary's
 * "lost" and "dropped" objects, the Prometheus families and the HTML page's loss card are made.
 * Adding a counter is one line here and the line of pipeline_loss (pipeline.c) that fills it
 * from where it is counted.
 *
 * LOSS_COUNTERS(X): X(field, json, key, text, phrase, param, prom, label, meaning), in the
 * order every output lists them:
 *   field    the member of struct loss_report;
 *   json     LOSS_J_LOST or LOSS_J_DROPPED: the JSON summary's object, under key;
 *   text     where the text summary says it: LOSS_T_LOST (the `lost:` line), LOSS_T_DROPPED
 *            (the `dropped:` line), LOSS_T_ALONE (a `lost:` line of its own, when not 0),
 *            LOSS_T_DEVICE (the `lost (device times):` line), LOSS_T_INSIDE (within another
 *            counter's phrase), LOSS_T_CONNS (the connections and tls lines, written there);
 *   phrase   its words in that line, a printf format of the value and then param (%llu each);
 *   param    the member whose value the phrase shows after the count (zero: none);
 *   prom     LOSS_P_BYTES (tokenscope_dropped_bytes_total{where}), LOSS_P_DROPPED
 *            (tokenscope_dropped_total{what}), LOSS_P_DEVICE
 *            (tokenscope_device_times_lost_total{what}), LOSS_P_OWN (a family of its own,
 *            written by the Prometheus sink), under label;
 *   meaning  what it counts, in words (the HTML page's list).
 */
#ifndef TS_LOSS_H
#define TS_LOSS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOSS_COUNTERS(X)                                                                           \
	X(lost_events, LOSS_J_LOST, "records", LOSS_T_LOST,                                        \
	  "%llu records (%llu bytes) in the kernel", lost_bytes, LOSS_P_OWN, NULL,                 \
	  "records lost in the kernel (ring buffer full)")                                         \
	X(lost_bytes, LOSS_J_LOST, "record_bytes", LOSS_T_INSIDE, NULL, zero, LOSS_P_BYTES,        \
	  "kernel", "bytes in those lost records")                                                 \
	X(uncaptured_bytes, LOSS_J_LOST, "uncaptured_bytes", LOSS_T_LOST,                          \
	  "%llu bytes beyond capture", zero, LOSS_P_BYTES, "capture",                              \
	  "bytes beyond the capture size")                                                         \
	X(gap_bytes, LOSS_J_LOST, "stream_gap_bytes", LOSS_T_LOST,                                 \
	  "%llu bytes missing from streams", zero, LOSS_P_BYTES, "stream",                         \
	  "bytes missing from streams")                                                            \
	X(desyncs, LOSS_J_LOST, "desyncs", LOSS_T_LOST, "%llu desyncs", zero, LOSS_P_DROPPED,      \
	  "desync", "desyncs")                                                                     \
	X(bad_records, LOSS_J_LOST, "bad_records", LOSS_T_LOST, "%llu bad records", zero,          \
	  LOSS_P_DROPPED, "bad_record", "bad records")                                             \
	X(untraced_sockets, LOSS_J_LOST, "untraced_sockets", LOSS_T_ALONE,                         \
	  "%llu sockets not traced: the kernel's connection table was full", zero, LOSS_P_DROPPED, \
	  "untraced_socket", "sockets not traced: the kernel's connection table was full")         \
	X(partial_requests, LOSS_J_DROPPED, "partial_requests", LOSS_T_DROPPED,                    \
	  "%llu unfinished requests", zero, LOSS_P_DROPPED, "unfinished_request",                  \
	  "unfinished requests")                                                                   \
	X(orphan_responses, LOSS_J_DROPPED, "orphan_responses", LOSS_T_DROPPED,                    \
	  "%llu responses to unseen requests", zero, LOSS_P_DROPPED, "orphan_response",            \
	  "responses to requests never seen")                                                      \
	X(pipeline_overflow, LOSS_J_DROPPED, "pipeline_overflow", LOSS_T_DROPPED,                  \
	  "%llu requests past the pipelining limit", zero, LOSS_P_DROPPED, "pipelining_overflow",  \
	  "requests past the pipelining limit")                                                    \
	X(oversize_frames, LOSS_J_DROPPED, "oversize_frames", LOSS_T_DROPPED,                      \
	  "%llu frames over %llu KiB", frame_max_kib, LOSS_P_DROPPED, "oversize_frame",            \
	  "stream frames over 64 KiB")                                                             \
	X(damaged_frames, LOSS_J_DROPPED, "damaged_frames", LOSS_T_DROPPED,                        \
	  "%llu stream runs with missing bytes", zero, LOSS_P_DROPPED, "damaged_stream",           \
	  "stream runs with missing bytes")                                                        \
	X(budget_refused, LOSS_J_DROPPED, "budget_refused", LOSS_T_DROPPED,                        \
	  "%llu buffers over the %llu MiB memory cap", budget_max_mib, LOSS_P_DROPPED,             \
	  "memory_cap", "buffers refused at the memory cap")                                       \
	X(copy_failed, LOSS_J_LOST, "copy_failed", LOSS_T_ALONE,                                   \
	  "%llu reads of traced bytes from the process's memory failed (their bytes are counted "  \
	  "beyond capture)",                                                                       \
	  zero, LOSS_P_DROPPED, "copy_failed",                                                     \
	  "reads of traced bytes from the process's memory that failed")                           \
	X(tls_unread, LOSS_J_LOST, "tls_no_plaintext", LOSS_T_CONNS, NULL, zero, LOSS_P_OWN, NULL, \
	  "TLS connections that ended with no plaintext seen (no TLS library hooked)")             \
	X(tls_unjoined, LOSS_J_LOST, "tls_unjoined", LOSS_T_CONNS, NULL, zero, LOSS_P_OWN, NULL,   \
	  "TLS calls whose socket was not found (their plaintext lost)")                           \
	X(device_dropped, LOSS_J_LOST, "device_dropped", LOSS_T_DEVICE,                            \
	  "%llu records dropped by CUPTI", zero, LOSS_P_DEVICE, "cupti_dropped",                   \
	  "device-time records dropped by CUPTI")                                                  \
	X(device_pool_empty, LOSS_J_LOST, "device_pool_empty", LOSS_T_DEVICE,                      \
	  "%llu buffer requests refused (pool in use)", zero, LOSS_P_DEVICE, "buffer_refused",     \
	  "CUPTI buffer requests refused (pool in use)")                                           \
	X(device_unplaced, LOSS_J_LOST, "device_unplaced", LOSS_T_DEVICE,                          \
	  "%llu runs in no GPU step", zero, LOSS_P_DEVICE, "unplaced_run",                         \
	  "device runs in no GPU step")                                                            \
	X(device_late, LOSS_J_LOST, "device_late", LOSS_T_DEVICE,                                  \
	  "%llu steps shown before their device times", zero, LOSS_P_DEVICE, "late_step",          \
	  "GPU steps shown before their device times")                                             \
	X(device_abi_bad, LOSS_J_LOST, "device_abi_bad", LOSS_T_DEVICE,                            \
	  "%llu records of another library version", zero, LOSS_P_DEVICE, "other_version",         \
	  "device-time records of another library version")

enum loss_json { LOSS_J_LOST, LOSS_J_DROPPED };
enum loss_text {
	LOSS_T_LOST,
	LOSS_T_DROPPED,
	LOSS_T_ALONE,
	LOSS_T_DEVICE,
	LOSS_T_INSIDE,
	LOSS_T_CONNS
};
enum loss_prom { LOSS_P_BYTES, LOSS_P_DROPPED, LOSS_P_DEVICE, LOSS_P_OWN };

/* Everything the tracer could not see, shown under every summary, and what it looked at. */
struct loss_report {
#define LOSS_FIELD(field, ...) uint64_t field;
	LOSS_COUNTERS(LOSS_FIELD)
#undef LOSS_FIELD
	/* What the phrases show beside the counts: the stream frame limit and the memory cap;
	 * zero is always 0, the param of the phrases that show nothing beside theirs. */
	uint64_t frame_max_kib, budget_max_mib, zero;
	size_t budget_max;
	/* Connections looked at (the summary's connections line; not losses). */
	uint64_t http_conns, ignored_conns, client_conns, h2_conns, h2_midway;
	uint64_t local_other; /* AF_UNIX sockets of the process's own, not HTTP (not shown) */
	/* connections joined mid-stream, and those of them no request line has come on since */
	uint64_t joined_conns, waiting_conns;
	/* ... and of those, the ones whose response in flight is reported from there */
	uint64_t joined_reported;
	/* connections that carried TLS; socket writes of TLS records, and the total time from
	 * the TLS write call to them */
	uint64_t tls_conns, tls_wire_writes, tls_wire_ns;
	/* Device times (a device-time library: CUPTI's today): some process reported them. */
	bool device_times;
};

/* A counter of the table, as the outputs read it. */
struct loss_counter {
	const char *field; /* its member's name */
	enum loss_json json;
	const char *key;
	enum loss_text text;
	const char *phrase; /* NULL: shown inside another's phrase, or in another line */
	size_t off;	    /* of its member in struct loss_report */
	size_t param_off;   /* of the member the phrase shows after the count */
	enum loss_prom prom;
	const char *label; /* NULL: LOSS_P_OWN */
	const char *meaning;
};

extern const struct loss_counter loss_counters[];
extern const size_t loss_ncounters;

/* The value of counter c in l, and of the member its phrase shows after it. */
uint64_t loss_value(const struct loss_report *l, const struct loss_counter *c);
uint64_t loss_param(const struct loss_report *l, const struct loss_counter *c);

#endif
