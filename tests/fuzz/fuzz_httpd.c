// SPDX-License-Identifier: MIT
/*
 * The /metrics listener (user/sinks/httpd.c over libmicrohttpd), which faces the network: one
 * listener on 127.0.0.1 for the whole run, and per input a few clients that send what the input
 * says (request lines, headers, bodies, garbage), in pieces, slowly or not, half-closing or not,
 * then a well-behaved scrape. Clients of one input come from their own loopback addresses
 * (127.0.0.2 and up, a new one per input), so the per-address limit of one input never meets
 * another's connections still being closed; the scrape comes from 127.0.0.1.
 *
 * Input: u8 snapshot length, the snapshot (published first; the listener serves its copy), then
 * ops until the input ends: a byte whose low three bits are the op and whose high bits its
 * client (of FUZZ_CLIENTS):
 *   0 SEND   u16 length, bytes   the client (connected first if it is not) sends them
 *   1 SHUT                       it half-closes (it sends nothing more)
 *   2 READ                       what has come for it is read, without waiting
 *   3 CLOSE                      it closes; a later op connects it again
 *   4 PAUSE  u8                  its low three bits in 100 us pass
 *   5 SPEC   NUL-ended string    httpd_parse_listen on it (the --listen argument)
 *   other                        SEND
 * At the end a well-behaved scrape, then what has come for each client is read and checked.
 *
 * Properties: what a client reads is a sequence of HTTP/1.x responses, each with a status line
 * of a known status and, for the listener's own (200, 404, 405; libmicrohttpd's refusals end
 * the connection and are checked for their status alone), a Content-Length its body has (a
 * response to HEAD has none), every 200
 * body the snapshot exactly, nothing after the last (which may be on its way still, unless the
 * listener closed the connection); the scrape gets 200 and the snapshot at once, whatever
 * connections the clients left open;
 * httpd_parse_listen either refuses a spec or gives an IPv4 or IPv6 address of its size.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"
#include "sinks/httpd.h"

#define FUZZ_CLIENTS 3
#define FUZZ_SNAPSHOT_MAX 255
#define FUZZ_DEADLINE_MS 3000
#define FUZZ_READ_MAX (1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct client {
	int fd;
	bool shut;
	char *buf;
	size_t len;
	char *sent; /* what it sent, to know whether a HEAD was among it (a 200 then has no body) */
	size_t nsent;
	bool head_sent;
};

static struct httpd *listener;
static struct sockaddr_in listener_addr;
static unsigned run;

static void start(void)
{
	const char *a, *colon;

	if (listener)
		return;
	if (httpd_start(&listener, "127.0.0.1:0", stderr))
		abort();
	a = httpd_address(listener);
	colon = strrchr(a, ':');
	listener_addr.sin_family = AF_INET;
	listener_addr.sin_port = htons((uint16_t)atoi(colon + 1));
	listener_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ll + ts.tv_nsec / 1000000;
}

/* A connect interrupted by a signal (libFuzzer's timer) goes on in the background: whether it
 * got through. */
static bool connected(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	int err = 0;
	socklen_t len = sizeof(err);

	while (poll(&pfd, 1, FUZZ_DEADLINE_MS) < 0 && errno == EINTR)
		;
	return !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) && !err;
}

/* Sends all of n bytes, going on after a signal interrupted the call; false on an error. */
static bool send_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		c += w;
		n -= (size_t)w;
	}
	return true;
}

/*
 * A connection from 127.0.0.<host>. Closed with a reset (SO_LINGER 0), as a client may, and so
 * that its port is free at once: a closing client's TIME_WAIT would hold it for a minute, and
 * a scrape per input used up the loopback's ephemeral ports in about a minute and a half.
 */
static int connect_from(uint8_t host)
{
	struct sockaddr_in from = { .sin_family = AF_INET };
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		abort();
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	from.sin_addr.s_addr = htonl(0x7f000000u | host);
	if (bind(fd, (struct sockaddr *)&from, sizeof(from)) ||
	    (connect(fd, (struct sockaddr *)&listener_addr, sizeof(listener_addr)) &&
	     !(errno == EINTR && connected(fd)))) {
		fprintf(stderr, "fuzz_httpd: cannot connect from 127.0.0.%u: %s\n", host,
			strerror(errno));
		abort();
	}
	return fd;
}

enum { TAKE_END, TAKE_DATA, TAKE_NONE };

/* Appends what has come, waiting up to wait_ms for the first byte: TAKE_DATA, TAKE_NONE when
 * nothing came, TAKE_END at the end of the stream. */
static int take(struct client *c, int wait_ms)
{
	struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
	char chunk[16384];
	ssize_t n;

	if (poll(&pfd, 1, wait_ms) <= 0)
		return TAKE_NONE;
	n = recv(c->fd, chunk, sizeof(chunk), MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		return TAKE_END; /* a reset counts: the listener closes with data unread */
	if (n < 0)
		return TAKE_NONE;
	FUZZ_CHECK(c->len + (size_t)n <= FUZZ_READ_MAX, "more than %d bytes of responses",
		   FUZZ_READ_MAX);
	c->buf = realloc(c->buf, c->len + (size_t)n + 1);
	if (!c->buf)
		abort();
	memcpy(c->buf + c->len, chunk, (size_t)n);
	c->len += (size_t)n;
	c->buf[c->len] = 0;
	return TAKE_DATA;
}

static bool known_status(int s)
{
	/* Served: 200, 404, 405; refused by libmicrohttpd: 400, 413, 414, 417, 431, 500, 501,
	 * 505. */
	static const int ok[] = { 200, 400, 404, 405, 413, 414, 417, 431, 500, 501, 505 };

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (s == ok[i])
			return true;
	return false;
}

/* The responses a client read. */
FUZZ_CHECKER static void check_responses(const struct client *c, const char *snap, size_t snap_len,
					 bool cut_ok)
{
	const char *p = c->buf, *end = c->buf + c->len;

	while (p < end) {
		const char *head_end = memmem(p, (size_t)(end - p), "\r\n\r\n", 4), *cl;
		long body = -1;
		int status;

		if (!head_end && cut_ok)
			return;
		if (!head_end)
			fuzz_hexdump("responses", c->buf, c->len);
		FUZZ_CHECK(head_end, "a response head that does not end");
		FUZZ_CHECK(!strncmp(p, "HTTP/1.", 7) && p[7] >= '0' && p[7] <= '1' && p[8] == ' ',
			   "not a status line: %.20s", p);
		status = atoi(p + 9);
		FUZZ_CHECK(known_status(status), "status %d", status);
		/* libmicrohttpd's own answer to a request it refused, after which it closes the
		 * connection: its status is checked, not its framing. Debian's 0.9.75 sometimes
		 * writes such a 400's head twice in one write (found by this target, when a head
		 * passes the connection's memory limit); the listener's own answers (200, 404, 405)
		 * are checked whole. */
		if (status != 200 && status != 404 && status != 405)
			return;
		cl = memmem(p, (size_t)(head_end - p), "\r\nContent-Length: ", 18);
		if (cl)
			body = atol(cl + 18);
		head_end += 4;
		/* A response to HEAD has no body (its Content-Length is the GET's): without telling
		 * which request a response answers, a client that sent a HEAD may have a response
		 * followed directly by the next, or by nothing. */
		if (c->head_sent && (head_end == end || !strncmp(head_end, "HTTP/1.", 7))) {
			p = head_end;
			continue;
		}
		FUZZ_CHECK(body >= 0, "status %d without a Content-Length", status);
		if (end - head_end < body && cut_ok)
			return;
		FUZZ_CHECK(end - head_end >= body, "a body of %ld bytes cut at %td", body,
			   end - head_end);
		if (status == 200)
			FUZZ_CHECK((size_t)body == snap_len && !memcmp(head_end, snap, snap_len),
				   "a 200 whose body is not the snapshot");
		p = head_end + body;
	}
}

static void client_close(struct client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->shut = false;
}

/*
 * What has come for a client so far, read without waiting, then it is closed; its responses are
 * checked. The last may still be on its way (cut_ok) unless the listener had closed the
 * connection.
 */
static void finish(struct client *c, const char *snap, size_t snap_len)
{
	bool ended = false;
	int r;

	if (c->fd >= 0) {
		while ((r = take(c, 0)) == TAKE_DATA)
			;
		ended = r == TAKE_END;
		client_close(c);
	}
	c->head_sent = c->sent && memmem(c->sent, c->nsent, "HEAD", 4);
	if (c->len)
		check_responses(c, snap, snap_len, !ended);
	free(c->buf);
	free(c->sent);
	c->buf = c->sent = NULL;
	c->len = c->nsent = 0;
}

static void check_spec(const char *spec)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;

	if (httpd_parse_listen(spec, &ss, &len))
		return;
	FUZZ_CHECK((ss.ss_family == AF_INET && len == sizeof(struct sockaddr_in)) ||
		       (ss.ss_family == AF_INET6 && len == sizeof(struct sockaddr_in6)),
		   "spec \"%s\" gave family %d, length %u", spec, ss.ss_family, len);
}

/* Whether buf holds a whole response: its head, and as much body as its Content-Length says. */
static bool response_whole(const char *buf, size_t len)
{
	const char *end = buf ? memmem(buf, len, "\r\n\r\n", 4) : NULL, *cl;

	if (!end)
		return false;
	cl = memmem(buf, (size_t)(end - buf), "\r\nContent-Length: ", 18);
	return cl && (size_t)(end + 4 - buf) + (size_t)atol(cl + 18) <= len;
}

/* The scrape every input ends with: a 200 with the snapshot, at once, however many connections
 * the clients left open. */
static void scrape(const char *snap, size_t snap_len)
{
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	struct client c = { .fd = connect_from(1) };
	int64_t deadline = now_ms() + FUZZ_DEADLINE_MS;

	/* Read until the response is whole, then reset the connection: a half-close would leave
	 * this side in TIME_WAIT once the listener closed, a port of 127.0.0.1 held for a minute
	 * per input (what the tests after these, opening thousands of connections from it, need).
	 */
	FUZZ_CHECK(send_all(c.fd, req, sizeof(req) - 1), "send: %s", strerror(errno));
	while (!response_whole(c.buf, c.len)) {
		FUZZ_CHECK(take(&c, FUZZ_DEADLINE_MS) != TAKE_END && now_ms() < deadline,
			   "the scrape was not answered in %d ms: %.40s", FUZZ_DEADLINE_MS,
			   c.buf ? c.buf : "(nothing)");
	}
	FUZZ_CHECK(c.len > 12 && !strncmp(c.buf + 9, "200", 3), "the scrape got no 200: %.40s",
		   c.buf ? c.buf : "(nothing)");
	client_close(&c);
	check_responses(&c, snap, snap_len, false);
	free(c.buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	size_t snap_len = fuzz_u8(&in), got;
	const uint8_t *s = fuzz_bytes(&in, snap_len, &snap_len);
	struct client cl[FUZZ_CLIENTS];
	uint8_t host = (uint8_t)(2 + run++ % 250);
	char *snap = malloc(snap_len + 1), *copy;

	start();
	if (!snap)
		abort();
	memcpy(snap, s, snap_len);
	snap[snap_len] = 0;
	/* The listener takes ownership of its copy. */
	copy = malloc(snap_len + 1);
	if (!copy)
		abort();
	memcpy(copy, snap, snap_len + 1);
	httpd_publish(listener, copy, snap_len);
	for (int i = 0; i < FUZZ_CLIENTS; i++)
		cl[i] = (struct client){ .fd = -1 };
	while (in.n) {
		uint8_t op = fuzz_u8(&in);
		struct client *c = &cl[(op >> 3) % FUZZ_CLIENTS];

		switch (op & 7) {
		case 1:
			if (c->fd >= 0 && !c->shut) {
				shutdown(c->fd, SHUT_WR);
				c->shut = true;
			}
			break;
		case 2:
			if (c->fd >= 0 && take(c, 0) == TAKE_END)
				client_close(c);
			break;
		case 3:
			client_close(c);
			break;
		case 4:
			usleep(100u * (fuzz_u8(&in) & 7));
			break;
		case 5: {
			char *spec = fuzz_str(&in, 128);

			check_spec(spec);
			free(spec);
			break;
		}
		default: {
			size_t n = fuzz_u16(&in);
			const uint8_t *b = fuzz_bytes(&in, n, &got);

			if (c->fd < 0)
				c->fd = connect_from(host);
			if (c->shut)
				break;
			c->sent = realloc(c->sent, c->nsent + got + 1);
			if (!c->sent)
				abort();
			memcpy(c->sent + c->nsent, b, got);
			c->nsent += got;
			/* The listener may have closed it already: what is not sent is not sent. */
			send_all(c->fd, b, got);
			break;
		}
		}
	}
	/* The scrape first: once it is answered, the listener has had the clients' bytes. */
	scrape(snap, snap_len);
	for (int i = 0; i < FUZZ_CLIENTS; i++)
		finish(&cl[i], snap, snap_len);
	free(snap);
	return 0;
}
