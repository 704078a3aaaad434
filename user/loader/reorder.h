/* SPDX-License-Identifier: MIT */
/*
 * The ring buffer's records put back in time order before the pipeline or a recording sees them.
 *
 * The kernel gathers each CPU's records in batches (include/events.h: TS_EV_BATCH) and puts a
 * batch in the ring when it is full or when user space asks at a drain. A batch is in its CPU's
 * order; between CPUs, and between a batch and a record that went to the ring alone, ring order
 * is no longer time order: a thread that moved from one CPU to another may have its later write
 * in the ring before its earlier one.
 *
 * So every record is taken apart from its batch, copied, and held. At each drain the loader first
 * has every CPU put its batch in the ring, then hands over, in time order, every held record no
 * later than a settle point a little before the drain began; the later ones wait for the next
 * drain, when records made before them on other CPUs are in. A record's time is the time it was
 * made: within a batch, never earlier than the record before it (a connection's first sight
 * carries the time its syscall began, which may be long before it was made).
 *
 * A record that arrives after records later than it were handed over (its program ran longer
 * than the settle margin, or a CPU's batch could not be flushed at a drain) is handed over at
 * the next release, first among its drain's, and counted late. A batch whose framing is broken
 * is counted bad and dropped, never read past its end.
 */
#ifndef TS_LOADER_REORDER_H
#define TS_LOADER_REORDER_H

#include <stddef.h>
#include <stdint.h>

/* How long before a drain began records are handed over: what a program may take from taking
 * its record's time to putting the record in its batch or the ring. */
#define REORDER_SETTLE_NS 2000000ull

struct reorder;

typedef int (*reorder_fn)(void *ctx, void *data, size_t size);

struct reorder *reorder_new(void);
void reorder_free(struct reorder *r);

/* A record from the ring: a batch's records, or the record itself, copied and held. -ENOMEM if
 * it could not be held (counted lost by the caller). */
int reorder_add(struct reorder *r, const void *data, size_t size);

/* Hands every held record of time <= upto to fn, in time order (records of one time in the
 * order they arrived); UINT64_MAX hands over all of them. Where memory runs out, none is handed
 * over: they wait for the next call. reorder_take and reorder_hand, into the reorder's own out. */
void reorder_release(struct reorder *r, uint64_t upto, reorder_fn fn, void *ctx);

/*
 * The same as reorder_release, for a caller that hands the records over outside a lock it holds
 * while the records are added: reorder_take moves every held record of time <= upto, in time
 * order, to out without copying them (out's memory and r's are exchanged; only the records
 * still held are copied), and reorder_hand hands them to fn. out is zeroed before its first use
 * and freed with reorder_out_free.
 */
struct reorder_out {
	unsigned char *arena;
	size_t cap;
	struct reorder_item *items;
	size_t n, items_cap;
};
void reorder_take(struct reorder *r, uint64_t upto, struct reorder_out *out);
void reorder_hand(struct reorder_out *out, reorder_fn fn, void *ctx);
void reorder_out_free(struct reorder_out *out);

/* Records held now, and their bytes. */
size_t reorder_held(const struct reorder *r);
size_t reorder_held_bytes(const struct reorder *r);

/* Records that arrived after later ones had been handed over, and the most by which one was
 * late (ns). */
uint64_t reorder_late(const struct reorder *r, uint64_t *max_ns);

/* Batches whose framing was broken (dropped whole), and the records they claimed. */
uint64_t reorder_bad(const struct reorder *r, uint64_t *records);

/* A record's time: when the kernel made it (0 for a record it cannot tell). */
uint64_t reorder_record_time(const void *data, size_t size);

#endif
