/* SPDX-License-Identifier: MIT */
/*
 * A byte buffer a parser keeps on a connection's behalf (a request body, a non-streamed
 * response body), up to a size, charged to the parsers' memory budget; what finds no room is
 * counted, not kept.
 */
#ifndef TS_BUF_H
#define TS_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "pipeline/budget.h"

struct buf {
	uint8_t *p;
	size_t len, cap;
	uint64_t dropped;
};

/* Frees the bytes and gives them back to bg. */
void buf_reset(struct buf *b, struct budget *bg);
/* Keeps up to max bytes; what finds no room (max, or the memory budget) is counted dropped. */
void buf_append(struct buf *b, struct budget *bg, const uint8_t *p, size_t n, size_t max);

#endif
