// SPDX-License-Identifier: MIT
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/dl.h"
#include "sinks/httpd.h"

/*
 * libmicrohttpd, opened at the first httpd_start: a tracer without --listen does not map it and
 * the GnuTLS it brings (about 2 MiB of RSS, mostly their relocations). The static build links it
 * in (the Makefile names MHD_start_daemon, so that the archive's functions come in): the
 * references below are weak, null in the dynamic build.
 */
#pragma weak MHD_get_connection_info
#pragma weak MHD_run_wait
#pragma weak MHD_create_response_from_buffer
#pragma weak MHD_add_response_header
#pragma weak MHD_queue_response
#pragma weak MHD_destroy_response
#pragma weak MHD_start_daemon
#pragma weak MHD_stop_daemon

#define MHD_SONAME "libmicrohttpd.so.12"

static struct {
	__typeof__(MHD_get_connection_info) *get_connection_info;
	__typeof__(MHD_run_wait) *run_wait;
	__typeof__(MHD_create_response_from_buffer) *create_response_from_buffer;
	__typeof__(MHD_add_response_header) *add_response_header;
	__typeof__(MHD_queue_response) *queue_response;
	__typeof__(MHD_destroy_response) *destroy_response;
	__typeof__(MHD_start_daemon) *start_daemon;
	__typeof__(MHD_stop_daemon) *stop_daemon;
} mhd;

/* 0 when mhd is filled in; else -ENOENT, with why in err. */
static int mhd_open(FILE *err)
{
	const struct dl_fn fns[] = {
		DL_FN(mhd.get_connection_info, MHD_get_connection_info),
		DL_FN(mhd.run_wait, MHD_run_wait),
		DL_FN(mhd.create_response_from_buffer, MHD_create_response_from_buffer),
		DL_FN(mhd.add_response_header, MHD_add_response_header),
		DL_FN(mhd.queue_response, MHD_queue_response),
		DL_FN(mhd.destroy_response, MHD_destroy_response),
		DL_FN(mhd.start_daemon, MHD_start_daemon),
		DL_FN(mhd.stop_daemon, MHD_stop_daemon),
	};
	char why[256];

	/* dl_bind fills every slot or none. */
	if (mhd.start_daemon)
		return 0;
	if (dl_bind(MHD_SONAME, fns, sizeof(fns) / sizeof(fns[0]), why, sizeof(why))) {
		fprintf(err,
			"tokenscope: the metrics listener needs %s (%s): apt-get install "
			"libmicrohttpd12\n",
			MHD_SONAME, why);
		return -ENOENT;
	}
	return 0;
}

#define METRICS_PATH "/metrics"
#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define LISTEN_BACKLOG 16
/* The server's loop waits for the network at most this long between looks at the deadlines;
 * it is also how long stopping may take. */
#define HTTPD_TICK_MS 100

/* A connection, known from its accept to its close; touched only on the server's thread. */
struct httpd_conn {
	struct MHD_Connection *c; /* NULL: a free slot */
	int fd;
	double since;  /* when it began to wait for a request head, or its response began */
	bool replying; /* a request was handed to on_request and is not completed */
	bool dropped;  /* shut down by us; MHD closes it on its next turn */
};

struct httpd {
	struct MHD_Daemon *daemon;
	pthread_t thread;
	atomic_bool stop;
	pthread_mutex_t lock; /* guards buf and len */
	char *buf;
	size_t len;
	char address[INET6_ADDRSTRLEN + 16];
	struct httpd_conn conns[HTTPD_MAX_CONNS]; /* MHD admits no more than this many */
};

/* MHD has no call to close a connection: shutting its socket down makes MHD's next turn see
 * the end and close it itself, and the descriptor stays MHD's until then. */
static void conn_drop(struct httpd_conn *k)
{
	shutdown(k->fd, SHUT_RDWR);
	k->dropped = true;
}

/* Drops the connections past their deadline. */
static void conns_sweep(struct httpd *h)
{
	double now = mono_s();

	for (int i = 0; i < HTTPD_MAX_CONNS; i++) {
		struct httpd_conn *k = &h->conns[i];

		if (k->c && !k->dropped &&
		    now - k->since > (k->replying ? HTTPD_REPLY_DEADLINE_S : HTTPD_HEAD_DEADLINE_S))
			conn_drop(k);
	}
}

/* Every slot taken (the new one, fresh, included): the connection that has waited longest for
 * its request head makes room, or, when all are replying, the oldest; so the next client is
 * admitted at once instead of waiting for a deadline. */
static void conns_make_room(struct httpd *h, const struct httpd_conn *fresh)
{
	struct httpd_conn *victim = NULL;

	for (int i = 0; i < HTTPD_MAX_CONNS; i++) {
		struct httpd_conn *k = &h->conns[i];

		if (!k->c)
			return;
		if (k->dropped)
			return; /* room is being made already */
		if (k == fresh)
			continue;
		if (!victim || (victim->replying && !k->replying) ||
		    (victim->replying == k->replying && k->since < victim->since))
			victim = k;
	}
	if (victim)
		conn_drop(victim);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct httpd *h = cls;
	struct httpd_conn *k = *socket_context;

	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (k)
			memset(k, 0, sizeof(*k));
		return;
	}
	for (int i = 0; i < HTTPD_MAX_CONNS && !k; i++)
		if (!h->conns[i].c)
			k = &h->conns[i];
	if (!k)
		return; /* not tracked: MHD's limit still holds it, and its idle timeout */
	const union MHD_ConnectionInfo *ci =
	    mhd.get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

	*k = (struct httpd_conn){ .c = c, .fd = ci ? ci->connect_fd : -1, .since = mono_s() };
	if (k->fd < 0) {
		k->c = NULL;
		return;
	}
	*socket_context = k;
	conns_make_room(h, k);
}

static struct httpd_conn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
	    mhd.get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct httpd_conn *k = conn_of(c);

	(void)cls, (void)req_cls, (void)toe;
	if (k) {
		k->replying = false;
		k->since = mono_s(); /* keep-alive: the next head has its own deadline */
	}
}

static void *serve(void *arg)
{
	struct httpd *h = arg;
	const struct timespec tick = { 0, HTTPD_TICK_MS * 1000000L };

	while (!atomic_load(&h->stop)) {
		if (mhd.run_wait(h->daemon, HTTPD_TICK_MS) == MHD_NO)
			nanosleep(&tick, NULL); /* no busy loop on an error that persists */
		conns_sweep(h);
	}
	return NULL;
}

static int parse_port(const char *s, in_port_t *port)
{
	char *end;
	unsigned long v;

	if (!*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > 65535)
		return -EINVAL;
	*port = htons(v);
	return 0;
}

int httpd_parse_listen(const char *spec, struct sockaddr_storage *addr, socklen_t *addrlen)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *port = strrchr(spec, ':');
	size_t hlen;

	memset(addr, 0, sizeof(*addr));
	if (!port) { /* PORT */
		port = spec;
		hlen = 0;
	} else {
		hlen = port - spec;
		port++;
	}
	if (hlen >= sizeof(host))
		return -EINVAL;
	memcpy(host, spec, hlen);
	host[hlen] = 0;
	if (spec[0] == '[') {
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)addr;

		if (hlen < 2 || host[hlen - 1] != ']')
			return -EINVAL;
		host[hlen - 1] = 0;
		if (inet_pton(AF_INET6, host + 1, &a6->sin6_addr) != 1)
			return -EINVAL;
		a6->sin6_family = AF_INET6;
		*addrlen = sizeof(*a6);
		return parse_port(port, &a6->sin6_port);
	} else {
		struct sockaddr_in *a4 = (struct sockaddr_in *)addr;

		/* Only the loopback address unless another one is named. */
		if (inet_pton(AF_INET, hlen ? host : HTTPD_DEFAULT_ADDR, &a4->sin_addr) != 1)
			return -EINVAL;
		a4->sin_family = AF_INET;
		*addrlen = sizeof(*a4);
		return parse_port(port, &a4->sin_port);
	}
}

static void format_address(const struct sockaddr_storage *ss, char *out, size_t size)
{
	char host[INET6_ADDRSTRLEN];

	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;

		inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof(host));
		snprintf(out, size, "[%s]:%u", host, ntohs(a6->sin6_port));
	} else {
		const struct sockaddr_in *a4 = (const struct sockaddr_in *)ss;

		inet_ntop(AF_INET, &a4->sin_addr, host, sizeof(host));
		snprintf(out, size, "%s:%u", host, ntohs(a4->sin_port));
	}
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned int status, const char *type,
			     const char *body, size_t len, const char *allow)
{
	struct MHD_Response *resp =
	    mhd.create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	if (!resp)
		return MHD_NO;
	mhd.add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (allow)
		mhd.add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	ret = mhd.queue_response(c, status, resp);
	mhd.destroy_response(resp);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **req_cls)
{
	static const char not_found[] = "not found: the metrics are at " METRICS_PATH "\n";
	static const char not_allowed[] = "method not allowed\n";
	struct httpd *h = cls;
	struct httpd_conn *k = conn_of(c);
	enum MHD_Result ret;

	(void)version, (void)upload_data, (void)upload_data_size, (void)req_cls;
	if (k && !k->replying) {
		k->replying = true;
		k->since = mono_s();
	}
	if (strcmp(url, METRICS_PATH))
		return reply(c, MHD_HTTP_NOT_FOUND, "text/plain", not_found, sizeof(not_found) - 1,
			     NULL);
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", not_allowed,
			     sizeof(not_allowed) - 1, "GET, HEAD");
	/* Copied under the lock: the pipeline may swap the snapshot right after. */
	pthread_mutex_lock(&h->lock);
	ret = reply(c, MHD_HTTP_OK, METRICS_TYPE, h->buf ? h->buf : "", h->len, NULL);
	pthread_mutex_unlock(&h->lock);
	return ret;
}

static int listen_on(const struct sockaddr_storage *addr, socklen_t addrlen)
{
	int one = 1;
	int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	/* A restart must not wait for the last run's connections in TIME_WAIT; a port that a
	 * live process listens on still fails with EADDRINUSE. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)addr, addrlen) || listen(fd, LISTEN_BACKLOG)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

int httpd_start(struct httpd **out, const char *spec, FILE *err)
{
	struct sockaddr_storage addr;
	socklen_t addrlen;
	struct httpd *h;
	sigset_t all, old;
	int fd, ret;

	*out = NULL;
	ret = mhd_open(err);
	if (ret)
		return ret;
	if (httpd_parse_listen(spec, &addr, &addrlen)) {
		fprintf(err, "tokenscope: invalid listen address '%s' (ADDR:PORT, :PORT or PORT)\n",
			spec);
		return -EINVAL;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	format_address(&addr, h->address, sizeof(h->address));
	fd = listen_on(&addr, addrlen);
	if (fd < 0) {
		fprintf(err, "tokenscope: cannot listen on %s: %s%s\n", h->address, strerror(-fd),
			fd == -EACCES ? " (a port below 1024 needs CAP_NET_BIND_SERVICE)" : "");
		free(h);
		return fd;
	}
	addrlen = sizeof(addr);
	if (!getsockname(fd, (struct sockaddr *)&addr, &addrlen))
		format_address(&addr, h->address, sizeof(h->address));
	pthread_mutex_init(&h->lock, NULL);
	/* The server's thread inherits this mask: SIGINT and SIGTERM stay with the tracer. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	errno = 0;
	/* Our own thread runs MHD's loop, so that it can look at the deadlines between turns;
	 * epoll where there is one (select would refuse descriptors past 1024, and a tracer
	 * hooking CUDA holds hundreds). */
	h->daemon =
	    mhd.start_daemon(MHD_USE_AUTO, 0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET,
			     fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)HTTPD_MAX_CONNS,
			     MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)HTTPD_MAX_PER_IP,
			     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)HTTPD_TIMEOUT_S,
			     MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTPD_CONN_MEMORY_BYTES,
			     MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
			     MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
	ret = errno;
	if (h->daemon) {
		ret = pthread_create(&h->thread, NULL, serve, h);
		if (ret) {
			mhd.stop_daemon(h->daemon);
			h->daemon = NULL;
			fd = -1; /* closed with the daemon */
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!h->daemon) {
		ret = ret ? -ret : -EIO;
		fprintf(err, "tokenscope: cannot serve metrics on %s: %s\n", h->address,
			strerror(-ret));
		/* Whether MHD closed the socket it was given differs between versions. */
		if (fd >= 0 && fcntl(fd, F_GETFD) >= 0)
			close(fd);
		pthread_mutex_destroy(&h->lock);
		free(h);
		return ret;
	}
	*out = h;
	return 0;
}

const char *httpd_address(const struct httpd *h)
{
	return h->address;
}

void httpd_publish(void *ctx, char *buf, size_t len)
{
	struct httpd *h = ctx;
	char *old;

	pthread_mutex_lock(&h->lock);
	old = h->buf;
	h->buf = buf;
	h->len = len;
	pthread_mutex_unlock(&h->lock);
	free(old);
}

void httpd_stop(struct httpd *h)
{
	if (!h)
		return;
	atomic_store(&h->stop, true);
	pthread_join(h->thread, NULL); /* within a tick */
	mhd.stop_daemon(h->daemon);    /* closes the connections and the listening socket */
	pthread_mutex_destroy(&h->lock);
	free(h->buf);
	free(h);
}
