// SPDX-License-Identifier: MIT
#include <stdlib.h>

#include "pipeline/request_track.h"

struct request *request_new(uint32_t pid, uint64_t conn_id, uint32_t seq, const char *conn)
{
	struct request_track *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	request_init(&t->r, pid, conn_id, seq, conn);
	return &t->r;
}

void request_free(struct request *r)
{
	struct request_track *t = request_track(r);

	if (!r)
		return;
	/* Freed without finishing (the end of a run): its pair and the proxy's list forget it. */
	if (t->pair)
		request_track(t->pair)->pair = NULL;
	if (t->open.next) {
		t->open.prev->next = t->open.next;
		t->open.next->prev = t->open.prev;
	}
	request_release(r);
	free(t->batch);
	free(t);
}
