// SPDX-License-Identifier: MIT
/*
 * writeloop: the cost of one streamed frame's write, isolated for benchmarks.
 *
 * A child process (forked at start, before any tracer attaches, so it is never followed) sends
 * one streaming HTTP request over loopback TCP and drains the response. The parent reads the
 * request, waits for a line on stdin (the benchmark attaches a tracer meanwhile), then writes
 * the response head and N SSE frames as HTTP chunks, one syscall each, like uvicorn does, and
 * prints the CPU and wall time per write it spent; it exits after a second line (or EOF).
 * --plain writes the same chunks with `text: ` where a frame has `data: `: bytes that are no
 * streamed completion, the cost of passive discovery (--all) on an ordinary writer.
 * --tls PEM (a certificate and its key in one file) speaks TLS over the connection: each frame
 * is one SSL_write, whose write syscall OpenSSL makes inside the call (a socket BIO), the cost
 * of a traced TLS write.
 *
 * --pieces P (a multiple of 4, at most IOV_MAX) writes P / 4 frames per syscall, one writev of
 * P iovecs in Node's shape, as Node sends frames queued while its socket was busy: N frames are
 * then N / (P / 4) writes, and the times printed are per write. The cost of a piece.
 * --gap-us U sleeps U microseconds after each write: a pace a tracer's reader keeps up with
 * when each write carries many frames (its ring buffer would fill and records be lost).
 * --rate R paces the writes at R per second by the clock, spinning (no sleep is that fine): a
 * burst an engine can make; a writer that cannot keep up writes as fast as it can (the wall
 * time per write printed says the rate it made).
 *
 * usage: writeloop [-n FRAMES] [-s FRAME_BYTES] [--writev] [--pieces P] [--gap-us U] [--rate R]
 *                  [--unix] [--plain] [--tls PEM]
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

static const char REQUEST[] = "POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n"
			      "Content-Type: application/json\r\nContent-Length: 34\r\n\r\n"
			      "{\"model\":\"bench\",\"stream\":true}  ";
static const char HEAD[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
			   "Transfer-Encoding: chunked\r\n\r\n";

static double now(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* A TLS session on the connected socket fd, server side with pem's certificate and key. */
static SSL *tls_open(int fd, const char *pem, bool server)
{
	SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	SSL *ssl = ctx ? SSL_new(ctx) : NULL;

	if (!ssl || !SSL_set_fd(ssl, fd) ||
	    (server && (SSL_use_certificate_chain_file(ssl, pem) != 1 ||
			SSL_use_PrivateKey_file(ssl, pem, SSL_FILETYPE_PEM) != 1)) ||
	    (server ? SSL_accept(ssl) : SSL_connect(ssl)) != 1) {
		ERR_print_errors_fp(stderr);
		die(server ? "TLS accept" : "TLS connect");
	}
	return ssl;
}

static void reader(int fd, const char *pem)
{
	SSL *ssl = pem ? tls_open(fd, pem, false) : NULL;
	char buf[65536];
	size_t n;

	if (ssl) {
		if (SSL_write_ex(ssl, REQUEST, sizeof(REQUEST) - 1, &n) != 1)
			die("child TLS write");
		while (SSL_read_ex(ssl, buf, sizeof(buf), &n) == 1)
			;
		_exit(0);
	}
	if (write(fd, REQUEST, sizeof(REQUEST) - 1) != (ssize_t)(sizeof(REQUEST) - 1))
		die("child write");
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	_exit(0);
}

int main(int argc, char **argv)
{
	long frames = 200000, size = 280, pieces = 4, writes, gap_us = 0;
	double rate = 0;
	bool use_writev = false, use_unix = false, plain = false;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int one = 1, l, srv, cli;
	char *frame, line[16], req[1024];
	const char *pem = NULL;
	SSL *ssl = NULL;
	size_t flen;
	double c0, w0, c1, w1;
	pid_t child;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-n") && i + 1 < argc)
			frames = atol(argv[++i]);
		else if (!strcmp(argv[i], "-s") && i + 1 < argc)
			size = atol(argv[++i]);
		else if (!strcmp(argv[i], "--writev"))
			use_writev = true;
		else if (!strcmp(argv[i], "--pieces") && i + 1 < argc)
			pieces = atol(argv[++i]), use_writev = true;
		else if (!strcmp(argv[i], "--gap-us") && i + 1 < argc)
			gap_us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--rate") && i + 1 < argc)
			rate = atof(argv[++i]);
		else if (!strcmp(argv[i], "--unix"))
			use_unix = true;
		else if (!strcmp(argv[i], "--plain"))
			plain = true;
		else if (!strcmp(argv[i], "--tls") && i + 1 < argc)
			pem = argv[++i];
		else {
			fprintf(stderr,
				"usage: writeloop [-n FRAMES] [-s FRAME_BYTES] [--writev] "
				"[--pieces P] [--gap-us U] [--rate R] [--unix] [--plain] [--tls PEM]\n");
			return 2;
		}
	}
	if (pem && use_writev) {
		fprintf(stderr, "writeloop: --tls writes with SSL_write, not writev\n");
		return 2;
	}
	if (frames <= 0 || size < 16 || size > 60000) {
		fprintf(stderr, "writeloop: bad -n or -s\n");
		return 2;
	}
	if (pieces < 4 || pieces % 4 || pieces > IOV_MAX) {
		fprintf(stderr, "writeloop: --pieces must be a multiple of 4 up to %d\n", IOV_MAX);
		return 2;
	}
	/* Frames per write: a whole number of writes. */
	writes = frames / (pieces / 4);
	if (writes < 1) {
		fprintf(stderr, "writeloop: -n must be at least --pieces / 4\n");
		return 2;
	}
	if (use_unix) {
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			die("socketpair");
		srv = sv[0];
		cli = sv[1];
		l = -1;
	} else {
		l = socket(AF_INET, SOCK_STREAM, 0);
		if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
		    getsockname(l, (struct sockaddr *)&a, &alen))
			die("listen");
		cli = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(cli, (struct sockaddr *)&a, sizeof(a)))
			die("connect");
		srv = accept(l, NULL, NULL);
		if (srv < 0)
			die("accept");
		setsockopt(srv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	child = fork();
	if (child == 0) {
		close(srv);
		reader(cli, pem);
	}
	close(cli);
	if (l >= 0)
		close(l);
	if (pem)
		ssl = tls_open(srv, pem, true);

	/* An SSE frame of `size` bytes (JSON padded with content), wrapped as one chunk. */
	{
		static const char pre[] = "data: {\"choices\":[{\"delta\":{\"content\":\"";
		static const char post[] = "\"}}]}\n\n";
		long pad = size - (long)(sizeof(pre) - 1) - (long)(sizeof(post) - 1);
		int hl;

		if (pad < 1) {
			fprintf(stderr, "writeloop: -s must be at least %zu\n",
				sizeof(pre) + sizeof(post));
			return 2;
		}
		frame = malloc(size + 32);
		hl = sprintf(frame, "%lx\r\n%s", size, pre);
		if (plain)
			memcpy(frame + hl - (sizeof(pre) - 1), "text", 4);
		memset(frame + hl, 'x', pad);
		flen = hl + pad;
		flen += sprintf(frame + flen, "%s\r\n", post);
	}

	printf("ready %d\n", getpid());
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	if (ssl) {
		size_t n;

		if (SSL_read_ex(ssl, req, sizeof(req), &n) != 1)
			die("TLS read request");
		if (SSL_write_ex(ssl, HEAD, sizeof(HEAD) - 1, &n) != 1)
			die("TLS write head");
	} else {
		if (read(srv, req, sizeof(req)) <= 0)
			die("read request");
		if (write(srv, HEAD, sizeof(HEAD) - 1) < 0)
			die("write head");
	}
	c0 = now(CLOCK_THREAD_CPUTIME_ID);
	w0 = now(CLOCK_MONOTONIC);
	for (long i = 0; i < writes; i++) {
		ssize_t r, want = flen;

		/* Spin to this write's time on the pace. */
		while (rate > 0 && now(CLOCK_MONOTONIC) < w0 + (double)i / rate)
			;
		if (use_writev) {
			/* Node's shape: size, CRLF, frame, CRLF, pieces / 4 times. */
			static struct iovec iov[IOV_MAX];
			int hl = strchr(frame, '\r') - frame;

			for (long k = 0; k < pieces; k += 4) {
				iov[k] = (struct iovec){ frame, hl };
				iov[k + 1] = (struct iovec){ "\r\n", 2 };
				iov[k + 2] = (struct iovec){ frame + hl + 2, flen - hl - 4 };
				iov[k + 3] = (struct iovec){ "\r\n", 2 };
			}
			want = flen * (pieces / 4);
			r = writev(srv, iov, pieces);
		} else if (ssl) {
			size_t n = 0;

			r = SSL_write_ex(ssl, frame, flen, &n) == 1 ? (ssize_t)n : -1;
		} else {
			r = write(srv, frame, flen);
		}
		if (r != want)
			die("write frame");
		if (gap_us > 0) {
			struct timespec gap = { gap_us / 1000000, gap_us % 1000000 * 1000 };

			nanosleep(&gap, NULL);
		}
	}
	c1 = now(CLOCK_THREAD_CPUTIME_ID);
	w1 = now(CLOCK_MONOTONIC);
	if (ssl) {
		size_t n;

		if (SSL_write_ex(ssl, "0\r\n\r\n", 5, &n) != 1)
			die("TLS write end");
		SSL_shutdown(ssl);
	} else if (write(srv, "0\r\n\r\n", 5) != 5) {
		die("write end");
	}
	close(srv);
	waitpid(child, NULL, 0);
	printf("frames=%ld writes=%ld bytes_per_write=%zu cpu_ns_per_write=%.1f "
	       "wall_ns_per_write=%.1f\n",
	       writes * (pieces / 4), writes, flen * (pieces / 4), (c1 - c0) * 1e9 / writes,
	       (w1 - w0) * 1e9 / writes);
	fflush(stdout);
	/* Stay until told: a tracer following only us would end when we do. */
	if (!fgets(line, sizeof(line), stdin))
		return 0;
	return 0;
}
