// SPDX-License-Identifier: MIT
#include <errno.h>
#include <string.h>

#include "pipeline/grpc.h"

void grpc_init(struct grpc_parser *p, grpc_message_fn on_message, void *ctx)
{
	memset(p, 0, sizeof(*p));
	p->on_message = on_message;
	p->ctx = ctx;
}

static void grpc_done(struct grpc_parser *p, uint64_t ts)
{
	p->messages++;
	p->on_message(p->ctx, p->len, p->damaged, ts);
	p->got = 0;
	p->damaged = false;
}

int grpc_feed(struct grpc_parser *p, const uint8_t *buf, size_t len, uint64_t ts)
{
	if (p->desync)
		return -EPROTO;
	while (len) {
		size_t n;

		if (p->got < GRPC_PREFIX_LEN) {
			p->prefix[p->got++] = *buf++;
			len--;
			if (p->got < GRPC_PREFIX_LEN)
				continue;
			/* The flag byte is 0 or 1 (compressed); anything else is not gRPC. */
			if (p->prefix[0] > 1) {
				p->desync = true;
				return -EPROTO;
			}
			p->len = (uint32_t)p->prefix[1] << 24 | (uint32_t)p->prefix[2] << 16 |
				 (uint32_t)p->prefix[3] << 8 | p->prefix[4];
			p->remaining = p->len;
			if (!p->remaining)
				grpc_done(p, ts);
			continue;
		}
		n = p->remaining < len ? p->remaining : len;
		p->remaining -= (uint32_t)n;
		buf += n;
		len -= n;
		if (!p->remaining)
			grpc_done(p, ts);
	}
	return 0;
}

void grpc_gap(struct grpc_parser *p, size_t len, uint64_t ts)
{
	if (p->desync || !len)
		return;
	if (p->got < GRPC_PREFIX_LEN || len > p->remaining) {
		p->desync = true;
		return;
	}
	p->damaged = true;
	p->remaining -= (uint32_t)len;
	if (!p->remaining)
		grpc_done(p, ts);
}

bool grpc_idle(const struct grpc_parser *p)
{
	return !p->desync && p->got == 0;
}
