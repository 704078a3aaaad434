/* SPDX-License-Identifier: MIT */
/*
 * Pairs a traced proxy's upstream requests (role client) with the requests it serves: a proxy
 * that forwards each request once, as it reads them (nginx, an API gateway), writes the upstream
 * request of the oldest served request still waiting for one. So an upstream request is paired,
 * when it is written, with a served request of the same process that arrived before it, is
 * still open and has no upstream yet: the one whose W3C traceparent it carries unchanged (a
 * forwarding proxy's; the bytes say so whatever the order of the calls), else the oldest. Beyond
 * that header this is an inference from order and times, not from the bytes (a proxy may
 * rewrite everything): a gateway that calls several upstreams for one request, or retries,
 * pairs its later calls with later requests.
 *
 * While both are open each points at the other (request_track.h); whichever finishes first leaves
 * its times in the other's struct request_peer, and the rest is filled when the second finishes.
 */
#ifndef TS_PROXY_H
#define TS_PROXY_H

#include "pipeline/request.h"
#include "pipeline/request_track.h"

struct proxy {
	struct request_link open; /* served requests open, oldest first (a circular list) */
	uint64_t paired;	  /* upstream requests paired */
};

void proxy_init(struct proxy *p);
/* A request started (read whole by a server, written whole by a client). */
void proxy_start(struct proxy *p, struct request *r);
/* A request finished: what its pair needs of it is copied there, and the pair is undone. */
void proxy_done(struct proxy *p, struct request *r);

#endif
