/* SPDX-License-Identifier: MIT */
/* Growing arrays: the one doubling realloc every growable array in user/ goes through. */
#ifndef TS_GROW_H
#define TS_GROW_H

#include <stddef.h>
#include <stdlib.h>

/*
 * The array p (*cap elements of elem bytes) with room for need elements: p itself when it has
 * it, else reallocated to first elements or twice *cap, doubled until need fits, and *cap set.
 * NULL when memory runs out: p and *cap are then as they were.
 */
static inline void *grow(void *p, size_t *cap, size_t need, size_t elem, size_t first)
{
	size_t c = *cap ? *cap : first;
	void *n;

	if (need <= *cap)
		return p;
	while (c < need)
		c *= 2;
	n = realloc(p, c * elem);
	if (n)
		*cap = c;
	return n;
}

#endif
