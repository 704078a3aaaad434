/* SPDX-License-Identifier: MIT */
/*
 * A cap on the bytes the parsers hold on behalf of connections. Hostile clients choose how many
 * connections stay half-way through a head or a body (each holds a head buffer or up to 64 KiB
 * of body), and a server how long a frame runs: without a cap they choose the tracer's memory.
 * Past the cap a buffer is refused; the parser then drops what it cannot keep, and counts it.
 */
#ifndef TS_BUDGET_H
#define TS_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct budget {
	size_t used, max;
	uint64_t refused; /* buffers refused because the cap was reached */
};

/* Takes n bytes, or refuses (false, counted). A NULL budget is unlimited. */
static inline bool budget_take(struct budget *b, size_t n)
{
	if (!b)
		return true;
	if (n > b->max - b->used) {
		b->refused++;
		return false;
	}
	b->used += n;
	return true;
}

/* Gives back n bytes taken earlier. */
static inline void budget_give(struct budget *b, size_t n)
{
	if (b)
		b->used -= n;
}

#endif
