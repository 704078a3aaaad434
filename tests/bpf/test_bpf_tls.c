// SPDX-License-Identifier: MIT
/*
 * TLS plaintext from OpenSSL's own calls, on the real libssl this test links: this process is a
 * TLS server on a loopback connection to a child (an untraced TLS client), the loader's code
 * finds and hooks libssl through /proc/self/maps, and the test checks the records: the kernel's
 * TLS marker once, no encrypted bytes, the plaintext exactly and in order, at the library
 * call's times, and the TLS write timing counted. Both ways OpenSSL is driven: doing its own
 * socket I/O (a socket BIO, as Python's blocking ssl sockets and nginx), and fed memory BIOs by
 * an event loop that reads and writes the socket itself (asyncio, uvloop, Node).
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "check.h"
#include "events.h"
#include "loader/kernel.h"
#include "loader/uprobes.h"
#include "tokenscope.skel.h"

#define FRAMES 20
#define MAX_BYTES 65536

static const char REQUEST[] = "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";

/* What the ring buffer brought for the server's connection. */
static struct {
	int markers, cipher_records, plain_in_records, plain_out_records;
	bool out_of_order;
	uint8_t in[MAX_BYTES], out[MAX_BYTES];
	size_t nin, nout;
	uint64_t out_enter[FRAMES + 8];
	int nenter;
} got;

static int collect(void *ctx, void *data, size_t len)
{
	const struct ts_data_event *e = data;

	(void)ctx;
	if (e->hdr.type != TS_EV_DATA || len < sizeof(*e) || e->hdr.pid != (uint32_t)getpid())
		return 0;
	if (e->status == TS_DATA_TLS) {
		got.markers++;
		return 0;
	}
	if (e->status != TS_DATA_BYTES)
		return 0;
	if (e->syscall != TS_SYS_TLS_READ && e->syscall != TS_SYS_TLS_WRITE) {
		got.cipher_records++;
		return 0;
	}
	if (e->dir == TS_DIR_IN) {
		got.plain_in_records++;
		got.out_of_order |= e->pos != got.nin;
		if (got.nin + e->data_bytes <= MAX_BYTES) {
			memcpy(got.in + got.nin, e->data, e->data_bytes);
			got.nin += e->data_bytes;
		}
	} else {
		got.plain_out_records++;
		got.out_of_order |= e->pos != got.nout;
		if (got.nout + e->data_bytes <= MAX_BYTES) {
			memcpy(got.out + got.nout, e->data, e->data_bytes);
			got.nout += e->data_bytes;
		}
		if (got.nenter < FRAMES + 8)
			got.out_enter[got.nenter++] = e->enter_ns;
	}
	return 0;
}

static uint64_t mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* A throwaway key and self-signed certificate for the server side. */
static SSL_CTX *server_ctx(void)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *crt = X509_new();

	if (!ctx || !key || !crt)
		return NULL;
	ASN1_INTEGER_set(X509_get_serialNumber(crt), 1);
	X509_gmtime_adj(X509_getm_notBefore(crt), 0);
	X509_gmtime_adj(X509_getm_notAfter(crt), 3600);
	X509_set_pubkey(crt, key);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(crt), "CN", MBSTRING_ASC,
				   (const unsigned char *)"test", -1, -1, 0);
	X509_set_issuer_name(crt, X509_get_subject_name(crt));
	if (!X509_sign(crt, key, EVP_sha256()) || SSL_CTX_use_certificate(ctx, crt) != 1 ||
	    SSL_CTX_use_PrivateKey(ctx, key) != 1)
		return NULL;
	X509_free(crt);
	EVP_PKEY_free(key);
	return ctx;
}

/* The child: a TLS client that sends the request and reads until the server closes. */
static void client(int fd)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	char buf[4096];
	size_t n;

	if (!ssl || !SSL_set_fd(ssl, fd) || SSL_connect(ssl) != 1)
		_exit(1);
	/* Wait for the server to say tracing is on: one byte on the plain socket would be seen,
	 * so the signal is a pause instead. */
	usleep(300000);
	if (SSL_write_ex(ssl, REQUEST, sizeof(REQUEST) - 1, &n) != 1)
		_exit(2);
	while (SSL_read_ex(ssl, buf, sizeof(buf), &n) == 1)
		;
	_exit(0);
}

static int tcp_pair(int *srv, int *cli)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &alen))
		return -1;
	*cli = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(*cli, (struct sockaddr *)&a, sizeof(a)))
		return -1;
	*srv = accept(l, NULL, NULL);
	close(l);
	setsockopt(*srv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return *srv < 0 ? -1 : 0;
}

/* Memory BIOs: the loop reads the socket, feeds the TLS object, sends what it wrote. */
struct loop {
	int fd;
	SSL *ssl;
	BIO *rbio, *wbio;
};

static bool loop_flush(struct loop *l)
{
	char buf[16384];
	int n;

	while ((n = BIO_read(l->wbio, buf, sizeof(buf))) > 0)
		if (send(l->fd, buf, n, 0) != n)
			return false;
	return true;
}

/* Reads the socket into the TLS object until it gives plaintext (at most len bytes). */
static ssize_t loop_read(struct loop *l, char *out, size_t len)
{
	char buf[16384];
	size_t n;

	for (;;) {
		ssize_t r;

		if (SSL_read_ex(l->ssl, out, len, &n) == 1)
			return (ssize_t)n;
		if (SSL_get_error(l->ssl, 0) != SSL_ERROR_WANT_READ || !loop_flush(l))
			return -1;
		r = recv(l->fd, buf, sizeof(buf), 0);
		if (r <= 0)
			return -1;
		BIO_write(l->rbio, buf, (int)r);
	}
}

static bool loop_handshake(struct loop *l)
{
	char buf[16384];

	for (;;) {
		ssize_t r;
		int rc = SSL_do_handshake(l->ssl);

		if (!loop_flush(l))
			return false;
		if (rc == 1)
			return true;
		if (SSL_get_error(l->ssl, rc) != SSL_ERROR_WANT_READ)
			return false;
		r = recv(l->fd, buf, sizeof(buf), 0);
		if (r <= 0)
			return false;
		BIO_write(l->rbio, buf, (int)r);
	}
}

static void tls_server(bool memory_bios)
{
	struct tokenscope_bpf *skel = NULL;
	struct ring_buffer *rb = NULL;
	struct kernel *k = NULL;
	struct uprobes u;
	struct loop l = { .fd = -1 };
	SSL_CTX *ctx = server_ctx();
	uint64_t before[FRAMES], after[FRAMES], wire = 0, unjoined = 0, cipher = 0;
	char frames[FRAMES][64], req[256];
	size_t want = 0;
	uint32_t me = getpid();
	int cli = -1, status = 0, hooked;
	pid_t child = -1;
	ssize_t n;

	memset(&got, 0, sizeof(got));
	if (!ASSERT_OK_PTR(ctx, "server TLS context") || !ASSERT_OK(tcp_pair(&l.fd, &cli), "tcp"))
		goto out;
	child = fork();
	if (child == 0) {
		close(l.fd);
		client(cli);
	}
	close(cli);
	l.ssl = SSL_new(ctx);
	if (memory_bios) {
		l.rbio = BIO_new(BIO_s_mem());
		l.wbio = BIO_new(BIO_s_mem());
		SSL_set_bio(l.ssl, l.rbio, l.wbio);
		SSL_set_accept_state(l.ssl);
		if (!ASSERT_TRUE(loop_handshake(&l), "handshake over memory BIOs"))
			goto out;
	} else if (!ASSERT_TRUE(SSL_set_fd(l.ssl, l.fd) && SSL_accept(l.ssl) == 1, "handshake")) {
		goto out;
	}

	/* Tracing starts after the handshake: the kernel first sees application data. */
	LIBBPF_QUIET();
	skel = kernel_skel_open();
	if (!ASSERT_OK_PTR(skel, "open") || !ASSERT_OK(tokenscope_bpf__load(skel), "load") ||
	    !ASSERT_OK(tokenscope_bpf__attach(skel), "attach"))
		goto out;
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), collect, NULL, NULL);
	if (!ASSERT_OK_PTR(rb, "ring buffer") || !ASSERT_OK(kernel_borrow(&k, skel), "kernel side"))
		goto out;
	uprobes_init(&u, k, false);
	hooked = uprobes_scan(&u, me, false);
	ASSERT_TRUE(hooked >= 3, "libssl's read, write and handshake hooked");
	ASSERT_EQ(uprobes_hooked_files(&u, "TLS"), 1, "one TLS library file");
	kernel_set_traced(skel, me, true);

	n = memory_bios ? loop_read(&l, req, sizeof(req))
			: (SSL_read_ex(l.ssl, req, sizeof(req), (size_t *)&n) == 1 ? n : -1);
	if (!ASSERT_EQ(n, (ssize_t)(sizeof(REQUEST) - 1), "the request read"))
		goto out;
	for (int i = 0; i < FRAMES; i++) {
		size_t done;
		int len = snprintf(frames[i], sizeof(frames[i]), "data: {\"n\":%d}\n\n", i);

		before[i] = mono_now();
		ASSERT_TRUE(SSL_write_ex(l.ssl, frames[i], len, &done) == 1 && done == (size_t)len,
			    "a frame written");
		after[i] = mono_now();
		if (memory_bios)
			loop_flush(&l);
		want += len;
	}
	SSL_shutdown(l.ssl);
	if (memory_bios)
		loop_flush(&l);
	ring_buffer__consume(rb);

	ASSERT_EQ(got.markers, 1, "the kernel's TLS marker, once");
	ASSERT_EQ(got.cipher_records, 0, "no encrypted bytes sent");
	ASSERT_TRUE(got.nin == sizeof(REQUEST) - 1 && !memcmp(got.in, REQUEST, got.nin),
		    "the request's plaintext, exactly");
	ASSERT_EQ(got.plain_out_records, FRAMES, "a plaintext record per SSL_write");
	ASSERT_EQ(got.nout, want, "every frame's bytes");
	ASSERT_FALSE(got.out_of_order, "stream offsets contiguous from 0");
	for (int i = 0, off = 0; i < FRAMES && i < got.nenter; off += strlen(frames[i]), i++) {
		ASSERT_TRUE(!memcmp(got.out + off, frames[i], strlen(frames[i])), "frame bytes");
		ASSERT_TRUE(got.out_enter[i] >= before[i] && got.out_enter[i] <= after[i],
			    "timed within its SSL_write");
	}
	kernel_read_stat(k, TS_STAT_TLS_WIRE_WRITES, &wire);
	kernel_read_stat(k, TS_STAT_TLS_UNJOINED, &unjoined);
	kernel_read_stat(k, TS_STAT_TLS_CIPHER_BYTES, &cipher);
	ASSERT_TRUE(wire >= FRAMES, "each frame's socket write timed");
	ASSERT_EQ(unjoined, 0, "every call placed on its connection");
	ASSERT_TRUE(cipher > want, "encrypted bytes counted");
	uprobes_detach(&u, NULL, NULL);
out:
	if (l.ssl)
		SSL_free(l.ssl);
	if (l.fd >= 0)
		close(l.fd);
	if (child > 0) {
		waitpid(child, &status, 0);
		ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the client ran whole");
	}
	ring_buffer__free(rb);
	kernel_destroy(k);
	tokenscope_bpf__destroy(skel);
	SSL_CTX_free(ctx);
}

TEST(test_tls_socket_bio)
{
	tls_server(false);
}

TEST(test_tls_memory_bios)
{
	tls_server(true);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	return check_run_all();
}
