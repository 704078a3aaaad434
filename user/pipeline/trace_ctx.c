// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <string.h>

#include "pipeline/trace_ctx.h"

void tracectx_init(struct trace_ctx *c)
{
	memset(c, 0, sizeof(*c));
}

void tracectx_hex(char *out, const uint8_t *id, size_t n)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", id[i]);
	out[2 * n] = '\0';
}

bool tracectx_same(const struct trace_parent *a, const struct trace_parent *b)
{
	return a->valid && b->valid && !memcmp(a->trace_id, b->trace_id, sizeof(a->trace_id)) &&
	       !memcmp(a->parent_id, b->parent_id, sizeof(a->parent_id));
}
