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

static struct request *of_link(struct request_link *l)
{
	return (struct request *)((char *)l - offsetof(struct request, open));
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
	to->seq = from->seq;
	to->arrival_ns = from->arrival_ns;
	to->first_token_ns = from->ntokens ? from->first_token_ns : 0;
	to->end_ns = from->end_ns;
}

void proxy_start(struct proxy *p, struct request *r)
{
	if (!r->client) {
		/* Newest last: the list stays in arrival order. */
		r->open.prev = p->open.prev;
		r->open.next = &p->open;
		p->open.prev->next = &r->open;
		p->open.prev = &r->open;
		return;
	}
	for (struct request_link *l = p->open.next; l != &p->open; l = l->next) {
		struct request *s = of_link(l);

		if (s->pid != r->pid || s->pair || s->peer.set || s->arrival_ns > r->arrival_ns)
			continue;
		s->pair = r;
		r->pair = s;
		peer_take(&s->peer, r);
		peer_take(&r->peer, s);
		p->paired++;
		return;
	}
}

void proxy_done(struct proxy *p, struct request *r)
{
	struct request *o = r->pair;

	(void)p;
	link_del(&r->open);
	if (!o)
		return;
	/* Each takes the other's times as they are now; the one finishing is final. */
	peer_take(&o->peer, r);
	o->peer.done = true;
	peer_take(&r->peer, o);
	o->pair = NULL;
	r->pair = NULL;
}
