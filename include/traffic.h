/* SPDX-License-Identifier: MIT */
/*
 * Passive discovery (`--all`): the kernel side looks at the first bytes every untraced process
 * writes to a socket and remembers the processes whose writes start like a streamed completion
 * frame, in map `traffic_seen` (tgid -> struct ts_traffic_seen); user space drains the map and
 * attaches to them. Nothing crosses the ring buffer for an untraced process. Shared by bpf/ and
 * user/; only fixed-width types, nothing included.
 */
#ifndef TS_TRAFFIC_H
#define TS_TRAFFIC_H

/*
 * Bytes looked at per write: the longest prefix recognised is a chunk-size line of 8 hex digits
 * and CRLF (10) followed by `event: content_block_` (21).
 */
#define TS_TRAFFIC_PEEK_BYTES 32
/* Pieces of a writev/sendmsg the peek may span: Node writes [size, CRLF, frame, CRLF]. */
#define TS_TRAFFIC_PEEK_IOVS 3
/* Processes remembered between two drains by user space (an LRU: the oldest go first). */
#define TS_TRAFFIC_MAX 1024

/* What the first bytes of a write looked like. */
enum ts_traffic_kind {
	TS_TRAFFIC_NONE = 0,
	TS_TRAFFIC_SSE = 1,    /* `data: {`, `data:{` (TGI), `event: message_start|content_block_|
				* response.` (Anthropic, OpenAI Responses) */
	TS_TRAFFIC_NDJSON = 2, /* `{"model":"` (Ollama's /api/chat and /api/generate) */
};

/* Value of map `traffic_seen`. */
struct ts_traffic_seen {
	__u64 first_ns; /* bpf_ktime_get_ns() of the first matching write */
	__u64 last_ns;	/* ... and of the latest */
	__u32 matches;	/* matching writes to stream sockets since the entry was made */
	__u8 kind;	/* enum ts_traffic_kind of the first match */
	__u8 pad[3];
	char comm[16]; /* the process's (its leader's): user space checks the pid was not reused */
};

_Static_assert(sizeof(struct ts_traffic_seen) == 40, "ts_traffic_seen layout");

#endif
