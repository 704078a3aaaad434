/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Does a write start like a streamed completion frame? The matcher behind passive discovery
 * (include/traffic.h), on the first TS_TRAFFIC_PEEK_BYTES bytes of one write. It runs in the
 * kernel on every write of every untraced process (before the socket check, which costs more),
 * so it is byte compares in loops of constant bound, most of which stop at the first byte; it
 * compiles on the host as well, where tests/unit/test_traffic.c feeds it the bytes real servers
 * wrote.
 *
 * Recognised at the start of the write, or after one HTTP/1.1 chunk-size line (hex digits and
 * CRLF: the chunked stacks captured in tests/fixtures/ put one before each piece of the SSE
 * body, so there a frame never starts a write):
 *   SSE     `data:` with or without a space, then `{`;
 *           `event:` then `message_start`, `content_block_` (Anthropic) or `response.` (OpenAI
 *           Responses API): their frames carry `event:` lines before `data:`.
 *   NDJSON  `{"model":` then `"`, with or without a space: Ollama's objects start with the model.
 * `data: [DONE]` alone is not a match: a stream's content frames come before it.
 *
 * The includer provides __u8, __u32 and bool (vmlinux.h in BPF; linux/types.h and stdbool.h on
 * the host) and include/traffic.h.
 */
#ifndef TS_TRAFFIC_BPF_H
#define TS_TRAFFIC_BPF_H

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
/* The verifier sees a short loop of constant bound as straight code; gcc on the host ignores it. */
#ifdef __clang__
#define TRAFFIC_UNROLL _Pragma("unroll")
#else
#define TRAFFIC_UNROLL
#endif

/* The peek buffer: twice the peek, so that an offset below the peek plus a length up to the
 * peek stays inside it, which is what the verifier can prove about a masked offset. */
#define TRAFFIC_BUF_BYTES (2 * TS_TRAFFIC_PEEK_BYTES)
/* The shortest write that can match (`data:{`): shorter ones (Go's one-byte wake-up writes,
 * eventfd counters) are not read at all. */
#define TRAFFIC_MIN_BYTES 6
/* A chunk-size line's hex digits: 8 cover a 4 GiB chunk. */
#define TRAFFIC_HEX_MAX 8

static __always_inline __u8 traffic_byte(const __u8 *p, __u32 i)
{
	return p[i & (TRAFFIC_BUF_BYTES - 1)];
}

static __always_inline bool traffic_hex(__u8 c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Leading hex digits of p's n bytes, at most TRAFFIC_HEX_MAX. */
static __always_inline __u32 traffic_hex_run(const __u8 *p, __u32 n)
{
	__u32 h = 0;

	TRAFFIC_UNROLL
	for (__u32 i = 0; i < TRAFFIC_HEX_MAX; i++) {
		if (i >= n || !traffic_hex(p[i]))
			break;
		h++;
	}
	return h;
}

/* Whether p[at..] holds the len bytes of s (len is a constant after inlining). */
static __always_inline bool traffic_at(const __u8 *p, __u32 n, __u32 at, const char *s, __u32 len)
{
	if (at + len > n)
		return false;
	for (__u32 k = 0; k < len; k++)
		if (traffic_byte(p, at + k) != (__u8)s[k])
			return false;
	return true;
}

#define TRAFFIC_AT(p, n, at, lit) traffic_at(p, n, at, lit, sizeof(lit) - 1)

/* The offset after `HEX CRLF` at the start, or 0 when there is no chunk-size line. */
static __always_inline __u32 traffic_chunk_line(const __u8 *p, __u32 n)
{
	__u32 h = traffic_hex_run(p, n);

	if (h && h + 2 <= n && traffic_byte(p, h) == '\r' && traffic_byte(p, h + 1) == '\n')
		return h + 2;
	return 0;
}

/*
 * True when all n bytes are the beginning of a chunk-size line (hex digits, then CR or CRLF)
 * and nothing else: the frame itself is in the next piece of a writev, as Node writes it.
 */
static __always_inline bool traffic_need_more(const __u8 *p, __u32 n)
{
	__u32 h = traffic_hex_run(p, n);

	if (!h)
		return false;
	if (h == n)
		return true;
	if (traffic_byte(p, h) != '\r')
		return false;
	return h + 1 == n || (h + 2 == n && traffic_byte(p, h + 1) == '\n');
}

/* enum ts_traffic_kind of the n bytes at p (n <= TS_TRAFFIC_PEEK_BYTES; the buffer holds
 * TRAFFIC_BUF_BYTES). */
static __always_inline __u8 traffic_match(const __u8 *p, __u32 n)
{
	__u32 at = traffic_chunk_line(p, n);
	__u32 j;

	if (TRAFFIC_AT(p, n, at, "data:")) {
		j = at + 5;
		if (j < n && traffic_byte(p, j) == ' ')
			j++;
		return j < n && traffic_byte(p, j) == '{' ? TS_TRAFFIC_SSE : TS_TRAFFIC_NONE;
	}
	if (TRAFFIC_AT(p, n, at, "{\"model\":")) {
		j = at + 9;
		if (j < n && traffic_byte(p, j) == ' ')
			j++;
		return j < n && traffic_byte(p, j) == '"' ? TS_TRAFFIC_NDJSON : TS_TRAFFIC_NONE;
	}
	if (TRAFFIC_AT(p, n, at, "event:")) {
		j = at + 6;
		if (j < n && traffic_byte(p, j) == ' ')
			j++;
		if (TRAFFIC_AT(p, n, j, "message_start") || TRAFFIC_AT(p, n, j, "content_block_") ||
		    TRAFFIC_AT(p, n, j, "response."))
			return TS_TRAFFIC_SSE;
	}
	return TS_TRAFFIC_NONE;
}

#endif
