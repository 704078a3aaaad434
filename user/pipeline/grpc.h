/* SPDX-License-Identifier: MIT */
/*
 * Splits the DATA bytes of one gRPC stream direction into its length-prefixed messages (a flag
 * byte, a 4-byte big-endian length, the message): each message is a frame, reported with the ts
 * of the feed that brought its last byte. Messages are not kept (their schema is unknown: a
 * message is one chunk of output), so nothing is buffered but the 5-byte prefix. A gap inside a
 * message is skipped exactly (the message is reported damaged); a gap in a prefix loses the
 * boundaries: every later call returns -EPROTO.
 */
#ifndef TS_GRPC_H
#define TS_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRPC_PREFIX_LEN 5

typedef void (*grpc_message_fn)(void *ctx, uint32_t len, bool damaged, uint64_t ts);

struct grpc_parser {
	grpc_message_fn on_message;
	void *ctx;
	uint8_t prefix[GRPC_PREFIX_LEN];
	uint8_t got;	    /* prefix bytes so far; GRPC_PREFIX_LEN inside a message */
	uint32_t len;	    /* the message's length */
	uint32_t remaining; /* its bytes still to come */
	bool damaged;	    /* bytes of it were lost */
	bool desync;
	uint64_t messages;
};

void grpc_init(struct grpc_parser *p, grpc_message_fn on_message, void *ctx);
/* 0, or -EPROTO once the boundaries are lost */
int grpc_feed(struct grpc_parser *p, const uint8_t *buf, size_t len, uint64_t ts);
void grpc_gap(struct grpc_parser *p, size_t len, uint64_t ts);
/* Between messages (a stream that ends elsewhere ended inside a message). */
bool grpc_idle(const struct grpc_parser *p);

#endif
