// SPDX-License-Identifier: MIT
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/proxy.h"

void proxy_init(struct proxy *p)
{
	p->open.prev = p->open.next = &p->open;
	p->paired = 0;
}

static struct request_track *of_link(struct request_link *l)
{
	return (struct request_track *)((char *)l - offsetof(struct request_track, open));
}

static void link_del(struct request_link *l)
{
	if (!l->next)
		return;
	l->prev->next = l->next;
	l->next->prev = l->prev;
	l->prev = l->next = NULL;
}

/* What one side knows of the other now. */
static void peer_take(struct request_peer *to, const struct request *from)
{
	to->set = true;
	snprintf(to->conn, sizeof(to->conn), "%s", from->conn);
	to->conn_id = from->conn_id;
	to->seq = from->seq;
	to->tp = from->trace.tp;
	to->arrival_ns = from->arrival_ns;
	to->first_token_ns = from->ntokens ? from->first_token_ns : 0;
	to->end_ns = from->end_ns;
}

/* The oldest served request of r's process that arrived before r, is open and not paired; with
 * same_context, also one whose traceparent is r's. */
static struct request_track *oldest_free(struct proxy *p, const struct request *r,
					 bool same_context)
{
	for (struct request_link *l = p->open.next; l != &p->open; l = l->next) {
		struct request_track *st = of_link(l);
		const struct request *s = &st->r;

		if (s->pid != r->pid || st->pair || s->peer.set || s->arrival_ns > r->arrival_ns)
			continue;
		if (!same_context || tracectx_same(&s->trace.tp, &r->trace.tp))
			return st;
	}
	return NULL;
}

void proxy_start(struct proxy *p, struct request *r)
{
	struct request_track *rt = request_track(r);

	if (!r->client) {
		/* Newest last: the list stays in arrival order. */
		rt->open.prev = p->open.prev;
		rt->open.next = &p->open;
		p->open.prev->next = &rt->open;
		p->open.prev = &rt->open;
		return;
	}
	/* The served request whose traceparent it carries unchanged, if one is open: that one is
	 * certainly its own (a forwarding proxy sends the calls in any order); else the oldest. */
	for (int by_context = 1; by_context >= 0; by_context--) {
		struct request_track *st = oldest_free(p, r, by_context);

		if (!st)
			continue;
		st->pair = r;
		rt->pair = &st->r;
		peer_take(&st->r.peer, r);
		peer_take(&r->peer, &st->r);
		p->paired++;
		return;
	}
}

void proxy_done(struct proxy *p, struct request *r)
{
	struct request_track *rt = request_track(r);
	struct request *o = rt->pair;

	(void)p;
	link_del(&rt->open);
	if (!o)
		return;
	/* Each takes the other's times as they are now; the one finishing is final. */
	peer_take(&o->peer, r);
	o->peer.done = true;
	peer_take(&r->peer, o);
	request_track(o)->pair = NULL;
	rt->pair = NULL;
}
