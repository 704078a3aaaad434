// SPDX-License-Identifier: MIT
#include <stdlib.h>
#include <string.h>

#include "pipeline/buf.h"

void buf_reset(struct buf *b, struct budget *bg)
{
	budget_give(bg, b->cap);
	free(b->p);
	memset(b, 0, sizeof(*b));
}

void buf_append(struct buf *b, struct budget *bg, const uint8_t *p, size_t n, size_t max)
{
	if (b->len + n > max) {
		size_t keep = b->len < max ? max - b->len : 0;

		b->dropped += n - keep;
		n = keep;
	}
	if (!n)
		return;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		uint8_t *q;

		while (cap < b->len + n)
			cap *= 2;
		if (!budget_take(bg, cap - b->cap)) {
			b->dropped += n;
			return;
		}
		q = realloc(b->p, cap);
		if (!q) {
			budget_give(bg, cap - b->cap);
			b->dropped += n;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}
