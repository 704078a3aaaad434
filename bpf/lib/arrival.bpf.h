/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Arrival times: when the bytes a server has not read yet reached its socket (sk_data_ready),
 * for the time a request waited before the server read it.
 * Part of tokenscope.bpf.c, which includes the parts in order; not a header to include alone.
 */
#ifndef TS_BPF_ARRIVAL_H
#define TS_BPF_ARRIVAL_H

/*
 * When the bytes a server has not read yet reached its socket, for the time a request waited
 * before the server's read returned it (the read is where TTFT starts; a busy event loop reads
 * late). Keyed by struct sock *: sk_data_ready runs in softirq context, where the process and fd
 * are unknown. The value is the arrival of the oldest unread byte, RX_NONE when everything was
 * read, RX_UNKNOWN when bytes are waiting whose arrival was not seen. Entries are made when a
 * traced process first uses a socket and removed at close; LRU because a process can exit
 * without closing.
 */
#define RX_NONE 0
#define RX_UNKNOWN 1

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, __u64);
	__type(value, __u64);
} rx_pending SEC(".maps");

/*
 * Local ports of the sockets in rx_pending, a bit each: sk_data_ready runs for every socket on
 * the machine, and an array load and a bit test turn almost all of them away before the hash
 * lookup. Bits are never cleared; a stale one costs a lookup that misses.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536 / 64);
	__type(key, __u32);
	__type(value, __u64);
} rx_ports SEC(".maps");

static __always_inline __u32 rx_queued(struct sock *sk)
{
	return BPF_CORE_READ(sk, sk_receive_queue.qlen);
}

/*
 * A traced process uses sk for the first time: start following its arrivals. Bytes already
 * waiting in a socket the process has just accepted are the connection's first: their arrival
 * is the time of the connection's latest packet (tcp_sock.tcp_mstamp, microseconds of the same
 * clock; the server has sent nothing yet). Bytes waiting anywhere else arrived when, is unknown.
 */
static __always_inline void rx_register(struct sock *sk, bool accepted)
{
	__u64 key = (__u64)sk, v = RX_NONE, *p;

	/* Before Linux 6.3 no tracepoint tells of arrivals: received_ns stays unknown (0). */
	if (!has_rx_ready || !atomics_ok())
		return;
	/* In the maps first: bytes arriving from here on are noted by sk_data_ready. */
	bpf_map_update_elem(&rx_pending, &key, &v, BPF_ANY);
	__u32 port = BPF_CORE_READ(sk, __sk_common.skc_num), word = port / 64;
	__u64 *bits = bpf_map_lookup_elem(&rx_ports, &word);

	if (bits && !(*bits & (1ull << (port % 64))))
		__sync_fetch_and_or(bits, 1ull << (port % 64));
	if (!rx_queued(sk))
		return;
	v = RX_UNKNOWN;
	if (accepted && BPF_CORE_READ(sk, sk_protocol) == IPPROTO_TCP) {
		__u64 us = BPF_CORE_READ((struct tcp_sock *)sk, tcp_mstamp);

		if (us && us * 1000 <= bpf_ktime_get_ns())
			v = us * 1000;
	}
	p = bpf_map_lookup_elem(&rx_pending, &key);
	if (p)
		*p = v;
}

/*
 * A read returned bytes: when the oldest of them arrived (0: not known), and the socket's state
 * for the next read: nothing pending if the queue is empty, RX_UNKNOWN if bytes were left (they
 * arrived at some time before now, which is not known closely enough to report).
 */
static __always_inline __u64 rx_take(struct conn *c)
{
	__u64 key = c->sk, *p, old;

	if (!has_rx_ready || !atomics_ok())
		return 0;
	p = bpf_map_lookup_elem(&rx_pending, &key);
	if (!p)
		return 0;
	old = *p;
	if (old != RX_NONE)
		__sync_val_compare_and_swap(p, old, RX_NONE);
	/* Bytes that arrive from here on set the slot themselves (sk_data_ready). */
	if (rx_queued((struct sock *)c->sk))
		__sync_val_compare_and_swap(p, RX_NONE, RX_UNKNOWN);
	return old > RX_UNKNOWN ? old : 0;
}

/* Bytes reached a socket (any socket on the machine; softirq or the sender's context): a traced
 * socket with nothing pending notes the time. */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(ts_rx_ready, struct sock *sk)
{
	__u32 port = sk->__sk_common.skc_num, word = port / 64;
	__u64 key = (__u64)sk, *bits = bpf_map_lookup_elem(&rx_ports, &word), *p;

	if (!atomics_ok() || !bits || !(*bits & (1ull << (port % 64))))
		return 0;
	p = bpf_map_lookup_elem(&rx_pending, &key);
	if (p && *p == RX_NONE)
		__sync_val_compare_and_swap(p, RX_NONE, bpf_ktime_get_ns());
	return 0;
}

#endif
