/* SPDX-License-Identifier: MIT */
/*
 * What the pipeline keeps with a request besides what was seen of it: its proxy pairing and its
 * place in the proxy's list of open served requests (proxy.c), and the GPU steps its tokens came
 * from (batch.c) and its first token's record (stall.c). request_new allocates a request inside its track; the sinks are handed the
 * request alone (request.h), a value that reaches none of this. For pipeline/ only.
 */
#ifndef TS_REQUEST_TRACK_H
#define TS_REQUEST_TRACK_H

#include "pipeline/request.h"

struct batch_state;

/* A node of the proxy's list of open served requests (proxy.h); unlinked: both NULL. */
struct request_link {
	struct request_link *prev, *next;
};

struct request_track {
	struct request r; /* first: every request (request_new) is its track's */
	/* Proxy pairing (proxy.h): the pair while both are open, and the node of the list of open
	 * served requests. */
	struct request *pair;
	struct request_link open;
	/* The GPU steps its tokens came from (batch.h); NULL until the first. */
	struct batch_state *batch;
	/* Its first token's record in the stall table (stall.h), as index + 1; 0: none. */
	uint32_t first_slot;
};

static inline struct request_track *request_track(struct request *r)
{
	return (struct request_track *)r;
}

static inline const struct request_track *request_track_c(const struct request *r)
{
	return (const struct request_track *)r;
}

#endif
