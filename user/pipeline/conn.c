// SPDX-License-Identifier: MIT
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "pipeline/conn.h"
#include "pipeline/h1conn.h"
#include "pipeline/h2.h"
#include "pipeline/h2conn.h"
#include "pipeline/http.h"
#include "traffic.h"
/* The kernel's matcher of a streamed completion frame's start (--all's traffic rule), which
 * compiles on the host too: a stream joined mid-response is told by the same bytes. */
#include "../../bpf/lib/traffic.bpf.h"

/* Buckets of the connection table: it starts small and doubles as connections come (at most one
 * per bucket on average), so a scan over it (a process exit, a kernel loss) costs what the
 * connections alive cost, not what the largest table would. */
#define CONN_BUCKETS_MIN 64
#define CONN_BUCKETS_MAX (1u << 17)
/* Bytes all connections together may hold in heads, bodies and frames being assembled: 256
 * clients each half-way through a 64 KiB body, or 2,000 through a head, fit; a tracer that
 * traces everything within 64 MiB needs the cap (docs/security.md). */
#define CONN_MEMORY_BUDGET (16u << 20)
/* Bytes looked at to tell a connection joined mid-stream: HTTP/1.x text, or another protocol's
 * bytes; and the least a request line written past a connection's first bytes has ("GET / HTTP/"
 * and more), so that a short write of capitals is not taken for one. */
#define CONN_SNIFF_BYTES 16

enum conn_role {
	ROLE_NEW,
	ROLE_SERVER, /* the traced process serves HTTP on it */
	ROLE_CLIENT, /* the traced process calls an HTTP server on it (its requests go out) */
	ROLE_IGNORED,
};

struct conn {
	struct conn *next;
	struct conn_table *t;
	uint64_t id;
	uint32_t pid;
	int fd;
	char label[96];
	struct request_ends ends; /* the label's addresses and ports, as values */
	enum conn_role role;
	uint64_t expect[2]; /* next stream offset per direction (enum ts_dir) */
	uint64_t last_ns;   /* time of the latest record seen */
	/* Socket arrival (ts_data_event.queued_ns) of the read being fed; 0: unknown. */
	uint64_t rx_cur;
	/* accepted under tracing: its first bytes either way are its first ever */
	bool start_seen;
	/* AF_UNIX, first seen at a read or write (a socketpair, a worker's pipe): one that carries
	 * no HTTP is the process's own plumbing, counted apart (local_other) */
	bool local_plumbing;
	/* joined mid-stream (bytes came before any request line, either way) and no request line
	 * seen since: its role waits for one */
	bool waiting;
	/* TLS: the connection carries it; its plaintext (TS_SYS_TLS_* records) has come */
	bool tls, tls_plain;
	/* Started again (conn_tls): the next record of each direction sets where it stands. */
	bool rejoin[2];
	/* The protocol modules that follow it, once its role is decided: mods[0] the current one,
	 * mods[1] the one a 101 switched it from (HTTP/1.1 after an upgrade to h2c), kept for what
	 * it had left to close; mods[1] is only ever set with mods[0]. Bytes go to mods[0]; the
	 * connection's events to both. */
	struct conn_proto {
		const struct proto_ops *ops;
		void *m;
	} mods[2];
};

/* The protocols a connection may start in, tried in this order on its first bytes of either
 * direction at a syscall's start (pos: the bytes' stream offset): the first whose opener takes
 * them follows the connection. */
static bool h2_opens(const uint8_t *p, size_t n, uint64_t pos)
{
	return pos == 0 && h2_looks_like_preface(p, n);
}

static bool h1_opens(const uint8_t *p, size_t n, uint64_t pos)
{
	(void)pos;
	return http_looks_like_request(p, n);
}

static const struct {
	const struct proto_ops *ops;
	bool (*opens)(const uint8_t *p, size_t n, uint64_t pos);
} protocols[] = {
	{ &h2_proto, h2_opens },
	{ &h1_proto, h1_opens },
};

static const struct proto_ops *conn_classify(const uint8_t *p, size_t n, uint64_t pos,
					     bool at_start)
{
	if (!at_start)
		return NULL;
	for (size_t i = 0; i < sizeof(protocols) / sizeof(protocols[0]); i++)
		if (protocols[i].opens(p, n, pos))
			return protocols[i].ops;
	return NULL;
}

/* The connection's modules in turn, the current one first (none before its role is decided). */
#define CONN_EACH_PROTO(c, pr) \
	for (struct conn_proto *pr = (c)->mods; pr < (c)->mods + 2 && pr->ops; pr++)

/* The direction the requests travel: in to a server, out from a client. */
static int conn_req_dir(const struct conn *c)
{
	return c->role == ROLE_CLIENT ? TS_DIR_OUT : TS_DIR_IN;
}

static bool conn_followed(const struct conn *c)
{
	return c->role == ROLE_SERVER || c->role == ROLE_CLIENT;
}

/* ---- classification ---- */

/*
 * What a connection joined mid-stream may carry at a syscall's start when it is HTTP/1.x: a
 * response head, a chunk-size line, SSE or NDJSON text, a JSON body; text, in short. Another
 * protocol's bytes (TLS records, binary RPC, a database's packets) hold control bytes early.
 */
static bool looks_like_http_text(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n && i < CONN_SNIFF_BYTES; i++)
		if ((p[i] < 0x20 && p[i] != '\t' && p[i] != '\r' && p[i] != '\n') || p[i] == 0x7f)
			return false;
	return n > 0;
}

static void conn_joined_note(struct conn *c, int in_flight, int reported)
{
	if (c->t->sink.joined)
		c->t->sink.joined(c->t->sink.ctx, c->pid, in_flight, reported);
}

/* Bytes before any request line: the connection was joined in its middle (counted once). */
static void conn_wait(struct conn *c)
{
	if (c->waiting || c->role != ROLE_NEW || c->start_seen || c->local_plumbing)
		return;
	c->waiting = true;
	c->t->stats.joined_conns++;
	c->t->stats.waiting_conns++;
	conn_joined_note(c, 1, 0);
}

/* The connection's role is decided: it no longer waits. One that is not followed (another
 * protocol, HTTP/2 joined after its start) was no HTTP/1.x connection joined: not counted so;
 * nor, as a server's exchange in flight, one on which the process turns out a client. */
static void conn_decided(struct conn *c, bool followed, bool client)
{
	if (!c->waiting)
		return;
	c->waiting = false;
	c->t->stats.waiting_conns--;
	if (!followed)
		c->t->stats.joined_conns--;
	if (!followed || client)
		conn_joined_note(c, -1, 0);
}

static void conn_ignore(struct conn *c)
{
	conn_decided(c, false, false);
	c->role = ROLE_IGNORED;
	if (c->local_plumbing)
		c->t->stats.local_other++;
	else
		c->t->stats.ignored_conns++;
}

/* A connection the traced process calls an HTTP server on: its label says local->peer. */
static void conn_become_client(struct conn *c)
{
	char *arrow = strstr(c->label, "<-");

	conn_decided(c, true, true);
	c->role = ROLE_CLIENT;
	c->t->stats.client_conns++;
	if (arrow)
		memcpy(arrow, "->", 2);
}

/* What the connection's modules know of it. */
static struct conn_ident conn_ident(const struct conn *c, bool client)
{
	return (struct conn_ident){ .t = c->t,
				    .pid = c->pid,
				    .conn_id = c->id,
				    .label = c->label,
				    .ends = &c->ends,
				    .client = client,
				    .tls = c->tls_plain };
}

/* The role and the protocol are decided: the connection is followed by ops' module (its first
 * bytes were that protocol's); client: the traced process sent them. Out of memory, it is
 * ignored. */
static void conn_follow(struct conn *c, bool client, const struct proto_ops *ops)
{
	struct conn_ident id = conn_ident(c, client);

	c->mods[0].m = ops->open(&id);
	if (!c->mods[0].m) {
		conn_ignore(c);
		return;
	}
	c->mods[0].ops = ops;
	if (client) {
		conn_become_client(c);
		return;
	}
	conn_decided(c, true, false);
	c->role = ROLE_SERVER;
}

static int conn_proto_feed(struct conn *c, bool req, const uint8_t *p, size_t n, uint64_t ts,
			   bool at_start, uint64_t rx_ns, size_t *used)
{
	if (!c->mods[0].ops)
		return 0;
	return c->mods[0].ops->feed(c->mods[0].m, req, p, n, ts, at_start, rx_ns, used);
}

/*
 * A 101 response switched the connection to another protocol; n bytes of it (p) followed the
 * 101 in the same write. A server's request that asked for h2c goes on as HTTP/2 stream 1 and
 * the connection as HTTP/2 (the client's preface comes next). Any other upgrade (WebSocket)
 * ends the request there, answered (101), and the connection is followed no further.
 */
static void conn_switched(struct conn *c, const uint8_t *p, size_t n, uint64_t ts)
{
	struct conn_ident id = conn_ident(c, false);
	struct h2conn *h2 = NULL;
	struct request *r;

	if (c->mods[0].ops != &h1_proto)
		return;
	if (c->role == ROLE_SERVER && h1conn_h2c_pending(c->mods[0].m))
		h2 = h2_proto.open(&id);
	r = h1conn_switched(c->mods[0].m, ts, h2 != NULL);
	if (!h2) {
		c->role = ROLE_IGNORED;
		return;
	}
	c->mods[1] = c->mods[0];
	c->mods[0] = (struct conn_proto){ &h2_proto, h2 };
	h2conn_adopt(h2, r);
	if (n)
		conn_proto_feed(c, false, p, n, ts, false, 0, NULL);
}

/* ---- the two directions ---- */

/* Bytes of the requests' direction: in to a server (a connection's role is decided here when
 * it reads first), out from a client. */
static void conn_feed_req(struct conn *c, const uint8_t *p, size_t n, uint64_t ts, bool at_start,
			  uint64_t pos)
{
	uint64_t rx = c->role == ROLE_SERVER ? c->rx_cur : 0;

	if (c->role == ROLE_NEW) {
		const struct proto_ops *ops = conn_classify(p, n, pos, at_start);

		if (ops) {
			conn_follow(c, false, ops);
		} else if (pos == 0 && (c->start_seen || !looks_like_http_text(p, n))) {
			/* The first bytes read are no request, from the connection's first byte (it
			 * was accepted under tracing), or bytes no HTTP/1.x message holds: another
			 * protocol. */
			conn_ignore(c);
		} else {
			/* Joined mid-stream (a pooled upstream connection reading the response in
			 * flight at attach): it waits for a request line. */
			conn_wait(c);
		}
		if (c->role != ROLE_SERVER)
			return;
		rx = c->rx_cur;
	}
	conn_proto_feed(c, true, p, n, ts, at_start, rx, NULL);
}

/*
 * A waiting connection's write that starts like a streamed completion frame (what --all's
 * traffic rule finds servers by: an SSE `data: {` or `event:` line, an NDJSON `{"model":`, after
 * an optional chunk-size line) is a server's response joined mid-stream: the connection serves
 * HTTP/1.x, and that response is reported from here (h1conn_join), chunked when a chunk-size
 * line starts the write, else delimited by the close. Any other bytes leave it waiting.
 */
static void conn_join(struct conn *c, const uint8_t *p, size_t n, uint64_t ts, bool at_start)
{
	uint8_t peek[TRAFFIC_BUF_BYTES] = { 0 };
	uint32_t m = n < TS_TRAFFIC_PEEK_BYTES ? (uint32_t)n : TS_TRAFFIC_PEEK_BYTES;
	uint8_t kind;
	bool chunked;

	if (!c->waiting || !at_start || c->mods[0].ops)
		return;
	memcpy(peek, p, m);
	kind = traffic_match(peek, m);
	if (kind != TS_TRAFFIC_SSE && kind != TS_TRAFFIC_NDJSON)
		return;
	chunked = traffic_chunk_line(peek, m) > 0;
	conn_follow(c, false, &h1_proto);
	/* The requests' direction, not seen yet, owes nothing from before its first record. */
	if (!c->expect[TS_DIR_IN])
		c->rejoin[TS_DIR_IN] = true;
	if (c->mods[0].ops != &h1_proto ||
	    !h1conn_join(c->mods[0].m, chunked,
			 kind == TS_TRAFFIC_SSE ? SSE_MODE_SSE : SSE_MODE_NDJSON, ts))
		return;
	c->t->stats.joined_reported++;
	conn_joined_note(c, 0, 1);
	conn_proto_feed(c, false, p, n, ts, at_start, 0, NULL);
}

/* Bytes of the responses' direction: out from a server, in to a client. */
static void conn_feed_resp(struct conn *c, const uint8_t *p, size_t n, uint64_t ts, bool at_start,
			   uint64_t pos)
{
	const struct proto_ops *ops;
	size_t used;

	if (conn_followed(c)) {
		if (conn_proto_feed(c, false, p, n, ts, at_start, 0, &used) == PROTO_SWITCHED)
			conn_switched(c, p + used, n - used, ts);
		return;
	}
	if (c->role != ROLE_NEW)
		return;
	/*
	 * The traced process sends a request first, or first since it was joined mid-stream (a
	 * pooled upstream connection open before attach, the response in flight then read and
	 * skipped): it is a client there from now on, and this write is its request. Past the
	 * connection's first bytes, a whole request line is asked for, not a short write of
	 * capitals. Any other write leaves the role to a later request line: a connection seen
	 * first after tracing began (its offsets count from there) may be a server connection
	 * joined in the middle of a response, which is followed from its next request; a protocol
	 * whose server speaks first is ignored when its first read is not an HTTP request.
	 */
	ops = conn_classify(p, n, pos, at_start);
	if (ops && (pos == 0 || n >= CONN_SNIFF_BYTES)) {
		conn_follow(c, true, ops);
		conn_proto_feed(c, true, p, n, ts, at_start, 0, NULL);
	} else {
		conn_wait(c);
		conn_join(c, p, n, ts, at_start);
	}
}

/*
 * The other side closed (a read returned 0) or refused a write: every exchange still open on
 * the connection was abandoned, even if a server goes on to end the response (Go's net/http
 * writes the chunked terminator after its handler sees the hang-up); a client's upstream that
 * closed before the end of a response aborted it.
 */
static void conn_peer_gone(struct conn *c, uint64_t ts)
{
	CONN_EACH_PROTO(c, pr)
		pr->ops->peer_gone(pr->m, ts);
}

/* A write of the traced process's, begun at ts, failed: the peer was gone (after the hang-up
 * was noted: the request the write was for went on writing). */
static void conn_write_failed(struct conn *c, uint64_t ts)
{
	CONN_EACH_PROTO(c, pr)
		pr->ops->write_failed(pr->m, ts);
}

/* n bytes of direction dir were not seen. */
static void conn_gap(struct conn *c, int dir, uint64_t n, uint64_t ts)
{
	if (!n || !conn_followed(c))
		return;
	c->t->stats.gap_bytes += n;
	if (c->mods[0].ops)
		c->mods[0].ops->gap(c->mods[0].m, dir == conn_req_dir(c), n, ts);
}

/* ---- table ---- */

static struct conn **conn_slot(struct conn_table *t, uint64_t id)
{
	struct conn **pp = &t->buckets[id % t->nbuckets];

	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	return pp;
}

/* The label ("local<-peer#id") and the same ends as values. */
static void conn_label(char *out, size_t n, struct request_ends *ends,
		       const struct ts_conn_event *e)
{
	char *l = ends->local_addr, *p = ends->peer_addr;

	_Static_assert(sizeof(ends->local_addr) >= INET6_ADDRSTRLEN, "an IPv6 address fits");
	memset(ends, 0, sizeof(*ends));
	if (e->family == AF_INET || e->family == AF_INET6) {
		int af = e->family == AF_INET ? AF_INET : AF_INET6;
		const char *fmt = af == AF_INET ? "%s:%u<-%s:%u#%llu" : "[%s]:%u<-[%s]:%u#%llu";

		inet_ntop(af, e->local_addr, l, sizeof(ends->local_addr));
		inet_ntop(af, e->peer_addr, p, sizeof(ends->peer_addr));
		ends->inet = true;
		ends->local_port = e->local_port;
		ends->peer_port = e->peer_port;
		snprintf(out, n, fmt, l, e->local_port, p, e->peer_port,
			 (unsigned long long)e->conn_id);
	} else {
		snprintf(out, n, "unix:fd%d#%llu", e->fd, (unsigned long long)e->conn_id);
	}
}

/* Doubles the buckets; the table stays as it is when memory runs out (chains grow instead). */
static void conn_table_grow(struct conn_table *t)
{
	uint32_t n = t->nbuckets * 2;
	struct conn **b = calloc(n, sizeof(*b));

	if (!b)
		return;
	for (uint32_t i = 0; i < t->nbuckets; i++) {
		while (t->buckets[i]) {
			struct conn *c = t->buckets[i];

			t->buckets[i] = c->next;
			c->next = b[c->id % n];
			b[c->id % n] = c;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = n;
}

static struct conn *conn_new(struct conn_table *t, uint64_t id, uint32_t pid, int fd)
{
	struct conn *c;
	struct conn **pp;

	if (t->count >= t->nbuckets && t->nbuckets < CONN_BUCKETS_MAX)
		conn_table_grow(t);
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->t = t;
	c->id = id;
	c->pid = pid;
	c->fd = fd;
	snprintf(c->label, sizeof(c->label), "pid%u:fd%d#%llu", pid, fd, (unsigned long long)id);
	pp = conn_slot(t, id);
	c->next = *pp;
	*pp = c;
	t->count++;
	t->stats.conns++;
	return c;
}

static void conn_free(struct conn *c)
{
	CONN_EACH_PROTO(c, pr)
		pr->ops->free(pr->m);
	free(c);
}

int conn_table_init(struct conn_table *t, const struct conn_sink *sink)
{
	memset(t, 0, sizeof(*t));
	t->nbuckets = CONN_BUCKETS_MIN;
	t->budget.max = CONN_MEMORY_BUDGET;
	t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
	if (!t->buckets)
		return -ENOMEM;
	t->sink = *sink;
	return 0;
}

void conn_table_free(struct conn_table *t)
{
	for (uint32_t i = 0; t->buckets && i < t->nbuckets; i++) {
		while (t->buckets[i]) {
			struct conn *c = t->buckets[i];

			t->buckets[i] = c->next;
			conn_free(c);
		}
	}
	free(t->buckets);
	t->buckets = NULL;
	t->count = 0;
}

void conn_on_open(struct conn_table *t, const struct ts_conn_event *e)
{
	struct conn *c = *conn_slot(t, e->conn_id);

	if (!c)
		c = conn_new(t, e->conn_id, e->hdr.pid, e->fd);
	if (c) {
		conn_label(c->label, sizeof(c->label), &c->ends, e);
		c->start_seen = e->syscall == TS_SYS_ACCEPT;
		c->local_plumbing = e->family == AF_UNIX && e->syscall != TS_SYS_ACCEPT &&
				    e->syscall != TS_SYS_CONNECT;
	}
}

static bool is_plaintext(const struct ts_data_event *e)
{
	return e->syscall == TS_SYS_TLS_READ || e->syscall == TS_SYS_TLS_WRITE;
}

static void conn_end(struct conn_table *t, struct conn *c, uint64_t ts);

/*
 * HTTP/2 frames on a connection whose role is not known yet. A server may write its SETTINGS
 * before it reads the client's preface: at the start of its side, that starts an HTTP/2 server
 * connection. Any other frames mean the connection was first seen after its start: the header
 * table its blocks refer to is unknown, so it is counted and not followed (never guessed).
 * Returns true when the record was dealt with here.
 */
static bool conn_h2_unannounced(struct conn *c, int dir, const uint8_t *p, size_t n, uint64_t pos)
{
	if (dir == TS_DIR_OUT && pos == 0 && h2_looks_like_server_preface(p, n)) {
		conn_follow(c, false, &h2_proto);
		return false; /* fed as the server's side */
	}
	if (h2_looks_like_preface(p, n) || !h2_looks_like_frame(p, n))
		return false;
	conn_decided(c, false, false);
	c->role = ROLE_IGNORED;
	c->t->stats.h2_midway++;
	return true;
}

/*
 * A connection that carries TLS: the kernel said so (its first bytes were a TLS record), or its
 * plaintext came. Plaintext that comes after encrypted bytes were fed (the connection was first
 * seen in the middle of a TLS record, so the kernel could not tell) starts the connection again,
 * from its next request: what was fed was ciphertext. Returns the connection to go on with.
 */
static struct conn *conn_tls(struct conn_table *t, struct conn *c, const struct ts_data_event *e)
{
	if (!c->tls) {
		c->tls = true;
		t->stats.tls_conns++;
	}
	if (!is_plaintext(e) || c->tls_plain)
		return c;
	if (c->expect[TS_DIR_IN] || c->expect[TS_DIR_OUT] || c->role != ROLE_NEW) {
		char label[sizeof(c->label)];
		struct request_ends ends = c->ends;

		memcpy(label, c->label, sizeof(label));
		/* Not counted as a TLS connection left unread: its plaintext came. */
		c->tls_plain = true;
		/* Nor as joined: the connection starts again, from its plaintext. */
		conn_decided(c, false, false);
		conn_end(t, c, e->enter_ns);
		c = conn_new(t, e->conn_id, e->hdr.pid, e->fd);
		if (!c)
			return NULL;
		memcpy(c->label, label, sizeof(label));
		c->ends = ends;
		t->stats.conns--; /* the same connection */
		c->tls = true;
		c->rejoin[TS_DIR_IN] = c->rejoin[TS_DIR_OUT] = true;
	}
	c->tls_plain = true;
	return c;
}

void conn_on_data(struct conn_table *t, const struct ts_data_event *e)
{
	struct conn *c = *conn_slot(t, e->conn_id);
	int dir = e->dir & 1;
	/* Token times are when the server began the write; arrival is when the read returned. */
	uint64_t ts = dir == TS_DIR_OUT ? e->enter_ns : e->exit_ns;
	uint64_t skip = 0, end;

	if (!c)
		c = conn_new(t, e->conn_id, e->hdr.pid, e->fd);
	if (c && (e->status == TS_DATA_TLS || is_plaintext(e)))
		c = conn_tls(t, c, e);
	if (!c || c->role == ROLE_IGNORED)
		return;
	c->last_ns = ts;
	if (e->status != TS_DATA_BYTES) {
		if (!conn_followed(c))
			return;
		conn_peer_gone(c, ts);
		if (e->status == TS_DATA_RESET && dir == TS_DIR_OUT)
			conn_write_failed(c, ts);
		return;
	}
	if (c->expect[dir] == 0 && (c->role == ROLE_NEW || c->rejoin[dir]) && e->syscall_pos > 0)
		c->expect[dir] = e->syscall_pos; /* joined mid-connection: nothing before is owed */
	c->rejoin[dir] = false;
	if (e->pos > c->expect[dir])
		conn_gap(c, dir, e->pos - c->expect[dir], ts);
	else
		skip = c->expect[dir] - e->pos; /* bytes already fed (should not happen) */
	if (skip < e->data_bytes) {
		bool at_start = e->pos == e->syscall_pos && !skip;

		if (c->role == ROLE_NEW && at_start &&
		    conn_h2_unannounced(c, dir, e->data + skip, e->data_bytes - skip, e->pos))
			return;

		if (dir == TS_DIR_IN)
			/* The kernel's arrival time holds for the syscall's first bytes only. */
			c->rx_cur = at_start ? e->queued_ns : 0;
		if (dir == conn_req_dir(c))
			conn_feed_req(c, e->data + skip, e->data_bytes - skip, ts, at_start,
				      e->pos);
		else
			conn_feed_resp(c, e->data + skip, e->data_bytes - skip, ts, at_start,
				       e->pos);
		c->expect[dir] = e->pos + e->data_bytes;
	}
	if (e->last) {
		end = e->syscall_pos + e->syscall_bytes;
		if (end > c->expect[dir]) {
			conn_gap(c, dir, end - c->expect[dir], ts);
			c->expect[dir] = end;
		}
	}
}

static void conn_end(struct conn_table *t, struct conn *c, uint64_t ts)
{
	struct conn **pp = conn_slot(t, c->id);

	if (c->tls && !c->tls_plain)
		t->stats.tls_unread++;
	if (conn_followed(c)) {
		CONN_EACH_PROTO(c, pr)
			pr->ops->close(pr->m, ts);
	}
	*pp = c->next;
	t->count--;
	conn_free(c);
}

void conn_on_close(struct conn_table *t, const struct ts_conn_event *e)
{
	struct conn *c = *conn_slot(t, e->conn_id);

	if (!c)
		return;
	/* Bytes whose records were lost at the very end are owed too. */
	/* A direction still to be rejoined owes nothing from before its first record. */
	if (e->rx_bytes > c->expect[TS_DIR_IN] && !c->rejoin[TS_DIR_IN])
		conn_gap(c, TS_DIR_IN, e->rx_bytes - c->expect[TS_DIR_IN], e->ts_ns);
	if (e->tx_bytes > c->expect[TS_DIR_OUT] && !c->rejoin[TS_DIR_OUT])
		conn_gap(c, TS_DIR_OUT, e->tx_bytes - c->expect[TS_DIR_OUT], e->ts_ns);
	conn_end(t, c, e->ts_ns);
}

void conn_close_pid(struct conn_table *t, uint32_t pid, uint64_t ts)
{
	for (uint32_t i = 0; i < t->nbuckets; i++) {
		struct conn *c = t->buckets[i];

		while (c) {
			struct conn *next = c->next;

			if (c->pid == pid)
				conn_end(t, c, ts);
			c = next;
		}
	}
}

void conn_mark_open_maybe_lost(struct conn_table *t)
{
	for (uint32_t i = 0; i < t->nbuckets; i++) {
		for (struct conn *c = t->buckets[i]; c; c = c->next) {
			CONN_EACH_PROTO(c, pr)
				pr->ops->mark_maybe_lost(pr->m);
		}
	}
}

uint32_t conn_finish_maybe_lost(struct conn_table *t)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < t->nbuckets; i++) {
		for (struct conn *c = t->buckets[i]; c; c = c->next) {
			CONN_EACH_PROTO(c, pr)
				n += pr->ops->finish_maybe_lost(pr->m, c->last_ns);
		}
	}
	return n;
}

uint32_t conn_inflight(const struct conn_table *t)
{
	return t->inflight;
}
