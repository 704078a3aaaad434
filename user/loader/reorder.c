// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <linux/types.h>

#include "events.h"
#include "lib/grow.h"
#include "loader/reorder.h"

/* The most an arena keeps allocated once it has been emptied. */
#define REORDER_KEEP_BYTES (4u << 20)

struct reorder_item {
	uint64_t time;
	uint64_t seq; /* arrival order: the tie-break, so records of one time keep it */
	size_t off;   /* in the arena */
	size_t size;
};

struct reorder {
	/* The held records' bytes, each at an 8-byte boundary. */
	unsigned char *arena;
	size_t used, cap;
	/* What reorder_release takes the records into before it hands them over. */
	struct reorder_out own;
	struct reorder_item *h;
	size_t n, n_cap;
	uint64_t seq;
	bool sorted;	    /* h is in (time, seq) order */
	uint64_t last_time; /* of the latest record added */
	uint64_t released;  /* the highest upto handed over so far */
	uint64_t late, late_max_ns;
	uint64_t bad, bad_records;
};

struct reorder *reorder_new(void)
{
	struct reorder *r = calloc(1, sizeof(*r));

	if (r)
		r->sorted = true;
	return r;
}

void reorder_free(struct reorder *r)
{
	if (!r)
		return;
	free(r->arena);
	reorder_out_free(&r->own);
	free(r->h);
	free(r);
}

uint64_t reorder_record_time(const void *data, size_t size)
{
	const struct ts_event_hdr *h = data;

	if (size < sizeof(*h))
		return 0;
	switch (h->type) {
	case TS_EV_DATA:
		return size >= sizeof(struct ts_data_event) ? ((const struct ts_data_event *)data)->exit_ns
							     : 0;
	case TS_EV_CONN_OPEN:
	case TS_EV_CONN_CLOSE:
		return size >= sizeof(struct ts_conn_event) ? ((const struct ts_conn_event *)data)->ts_ns
							     : 0;
	case TS_EV_PROC_FORK:
	case TS_EV_PROC_EXIT:
	case TS_EV_PROC_MAP:
		return size >= sizeof(struct ts_proc_event) ? ((const struct ts_proc_event *)data)->ts_ns
							     : 0;
	case TS_EV_GPU_STEP:
		return size >= sizeof(struct ts_gpu_step_event)
			       ? ((const struct ts_gpu_step_event *)data)->end_ns
			       : 0;
	case TS_EV_GPU_CALL:
		return size >= sizeof(struct ts_gpu_call_event)
			       ? ((const struct ts_gpu_call_event *)data)->ts_ns
			       : 0;
	case TS_EV_DEV_RUNS: {
		/* The library's flush began it: the probe fired then. */
		const struct ts_dev_runs_event *e = data;
		size_t end = offsetof(struct ts_dev_runs_event, stats.flush_ns) + sizeof(uint64_t);

		return size >= end && e->abi == TS_DEVTIME_ABI ? e->stats.flush_ns : 0;
	}
	default:
		return 0;
	}
}

/* Room for need elements of elem bytes in *p (grow.h's doubling): 0, or -ENOMEM with *p as it
 * was. */
static int fit(void **p, size_t *cap, size_t need, size_t elem)
{
	void *q;

	if (need <= *cap)
		return 0;
	q = grow(*p, cap, need, elem, 64);
	if (!q)
		return -ENOMEM;
	*p = q;
	return 0;
}

/* A record's room in an arena: its bytes to the next 8-byte boundary. */
static size_t padded(size_t size)
{
	return (size + 7) & ~(size_t)7;
}

static int hold(struct reorder *r, const void *data, size_t size, uint64_t time)
{
	size_t room = padded(size);

	if (fit((void **)&r->arena, &r->cap, r->used + room, 1) ||
	    fit((void **)&r->h, &r->n_cap, r->n + 1, sizeof(*r->h)))
		return -ENOMEM;
	if (size)
		memcpy(r->arena + r->used, data, size);
	if (r->n && time < r->last_time)
		r->sorted = false;
	r->last_time = time;
	if (r->released && time <= r->released) {
		r->late++;
		if (r->released - time > r->late_max_ns)
			r->late_max_ns = r->released - time;
	}
	r->h[r->n++] = (struct reorder_item){ time, r->seq++, r->used, size };
	r->used += room;
	return 0;
}

/* A batch's records, whole and within it, as many as it says: else nothing of it is read. */
static bool batch_ok(const unsigned char *b, size_t size)
{
	const struct ts_event_hdr *bh = (const void *)b;
	size_t off = sizeof(*bh);
	uint32_t n = 0;

	if (size < sizeof(*bh) || bh->size > size)
		return false;
	size = bh->size;
	while (off < size) {
		const struct ts_event_hdr *h = (const void *)(b + off);

		if (size - off < sizeof(*h) || h->size < sizeof(*h) || h->size > size - off ||
		    h->type == TS_EV_BATCH)
			return false;
		off += padded(h->size);
		n++;
	}
	return n == bh->tid;
}

int reorder_add(struct reorder *r, const void *data, size_t size)
{
	const struct ts_event_hdr *bh = data;
	const unsigned char *b = data;
	uint64_t time = 0;
	size_t off;

	if (size < sizeof(*bh) || bh->type != TS_EV_BATCH) {
		time = reorder_record_time(data, size);
		/* A record that carries no time it can be told by stays where it arrived. */
		return hold(r, data, size, time ? time : r->last_time);
	}
	if (!batch_ok(data, size)) {
		r->bad++;
		r->bad_records += bh->tid;
		return 0;
	}
	for (off = sizeof(*bh); off < bh->size;) {
		const struct ts_event_hdr *h = (const void *)(b + off);
		uint64_t t = reorder_record_time(h, h->size);
		int err;

		/* Made after the record before it on this CPU, whatever time it carries. */
		if (t > time)
			time = t;
		err = hold(r, h, h->size, time);
		if (err)
			return err;
		off += padded(h->size);
	}
	return 0;
}

static int by_time(const void *a, const void *b)
{
	const struct reorder_item *x = a, *y = b;

	if (x->time != y->time)
		return x->time < y->time ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

void reorder_take(struct reorder *r, uint64_t upto, struct reorder_out *out)
{
	unsigned char *arena = out->arena;
	size_t cap = out->cap, used = 0, k, keep = 0;

	if (!r->sorted)
		qsort(r->h, r->n, sizeof(*r->h), by_time);
	r->sorted = true;
	for (k = 0; k < r->n && r->h[k].time <= upto; k++)
		;
	if (upto > r->released)
		r->released = upto;
	/* The records handed over stay where they are, in the arena that goes to out; the rest
	 * are copied to out's old arena, which becomes r's. Without memory for that, or for
	 * out's list, nothing moves: they are handed over at the next take. */
	for (size_t j = k; j < r->n; j++)
		used += padded(r->h[j].size);
	if (fit((void **)&arena, &cap, used, 1) ||
	    fit((void **)&out->items, &out->items_cap, k, sizeof(*out->items))) {
		out->arena = arena;
		out->cap = cap;
		out->n = 0;
		return;
	}
	if (k)
		memcpy(out->items, r->h, k * sizeof(*r->h));
	out->n = k;
	used = 0;
	for (size_t j = k; j < r->n; j++) {
		memcpy(arena + used, r->arena + r->h[j].off, r->h[j].size);
		r->h[keep] = r->h[j];
		r->h[keep++].off = used;
		used += padded(r->h[j].size);
	}
	out->arena = r->arena;
	out->cap = r->cap;
	r->arena = arena;
	r->cap = cap;
	r->used = used;
	r->n = keep;
	r->last_time = keep ? r->h[keep - 1].time : 0;
}

void reorder_hand(struct reorder_out *out, reorder_fn fn, void *ctx)
{
	for (size_t i = 0; i < out->n; i++)
		fn(ctx, out->arena + out->items[i].off, out->items[i].size);
	out->n = 0;
	/* After a burst: memory back, but for what a drain usually holds. */
	if (out->cap > REORDER_KEEP_BYTES) {
		free(out->arena);
		out->arena = NULL;
		out->cap = 0;
	}
}

void reorder_release(struct reorder *r, uint64_t upto, reorder_fn fn, void *ctx)
{
	reorder_take(r, upto, &r->own);
	reorder_hand(&r->own, fn, ctx);
}

void reorder_out_free(struct reorder_out *out)
{
	free(out->arena);
	free(out->items);
	*out = (struct reorder_out){ 0 };
}

size_t reorder_held(const struct reorder *r)
{
	return r->n;
}

size_t reorder_held_bytes(const struct reorder *r)
{
	return r->used;
}

uint64_t reorder_late(const struct reorder *r, uint64_t *max_ns)
{
	if (max_ns)
		*max_ns = r->late_max_ns;
	return r->late;
}

uint64_t reorder_bad(const struct reorder *r, uint64_t *records)
{
	if (records)
		*records = r->bad_records;
	return r->bad;
}
