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

struct request *exchange_request(const struct conn_ident *id, uint32_t seq, enum req_proto proto)
{
	struct request *r = request_new(id->pid, id->conn_id, seq, id->label);

	if (!r)
		return NULL;
	r->proto = proto;
	r->tls = id->tls;
	r->client = id->client;
	if (id->ends)
		r->ends = *id->ends;
	return r;
}

void exchange_start(struct conn_table *t, struct request *r)
{
	/* In flight counts the streams the traced servers serve. */
	if (!r->client)
		t->inflight++;
	t->sink.request_start(t->sink.ctx, r);
}

void exchange_done(struct conn_table *t, struct request *r)
{
	if (!r->client)
		t->inflight--;
	t->sink.request_done(t->sink.ctx, r);
}
