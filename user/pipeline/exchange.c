// SPDX-License-Identifier: MIT
#include "pipeline/exchange.h"

void conn_add_frame(struct conn_table *t, struct request *r, const struct sse_frame *f, uint64_t ts)
{
	uint32_t n = r->ntokens;

	request_add_frame(r, f, ts);
	if (r->ntokens > n && t->sink.token)
		t->sink.token(t->sink.ctx, r);
}

void conn_add_message(struct conn_table *t, struct request *r, uint64_t ts)
{
	uint32_t n = r->ntokens;

	request_add_message(r, ts);
	if (r->ntokens > n && t->sink.token)
		t->sink.token(t->sink.ctx, r);
}
