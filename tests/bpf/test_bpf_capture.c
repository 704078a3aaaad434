// SPDX-License-Identifier: MIT
/*
 * Attach tests: the real BPF programs on the real syscall tracepoints, driven by real socket
 * syscalls of this process (and of children it forks). Asserts the exact bytes, offsets, counts
 * and drop counters that reach the ring buffer. Needs root.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/types.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "check.h"
#include "events.h"
#include "loader/kernel.h"
#include "tokenscope.skel.h"

#define MAX_RECS 4096

struct rec {
	size_t len;
	uint8_t *p;
};

struct fixture {
	struct tokenscope_bpf *skel;
	struct ring_buffer *rb;
	struct rec recs[MAX_RECS];
	int nrecs;
	int srv, cli; /* a connected loopback TCP pair: srv is the accepted side */
};

static int collect(void *ctx, void *data, size_t len)
{
	struct fixture *f = ctx;

	if (f->nrecs < MAX_RECS) {
		f->recs[f->nrecs].p = malloc(len);
		memcpy(f->recs[f->nrecs].p, data, len);
		f->recs[f->nrecs].len = len;
		f->nrecs++;
	}
	return 0;
}

static void fixture_drain(struct fixture *f)
{
	ring_buffer__consume(f->rb);
}

static void fixture_clear(struct fixture *f)
{
	fixture_drain(f);
	for (int i = 0; i < f->nrecs; i++)
		free(f->recs[i].p);
	f->nrecs = 0;
}

static void tcp_pair(int *srv, int *cli)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int one = 1;
	int l = socket(AF_INET, SOCK_STREAM, 0);

	bind(l, (struct sockaddr *)&a, sizeof(a));
	listen(l, 4);
	getsockname(l, (struct sockaddr *)&a, &alen);
	*cli = socket(AF_INET, SOCK_STREAM, 0);
	connect(*cli, (struct sockaddr *)&a, sizeof(a));
	setsockopt(*cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*srv = accept(l, NULL, NULL);
	close(l);
}

/* Loads with the given capture limit (0: default) and ring size (0: default), traces self. */
static bool fixture_open(struct fixture *f, uint32_t capture, uint32_t ring_bytes)
{
	uint32_t me = getpid();

	memset(f, 0, sizeof(*f));
	f->skel = kernel_skel_open();
	if (!ASSERT_OK_PTR(f->skel, "open"))
		return false;
	if (capture)
		f->skel->rodata->capture_bytes = capture;
	if (ring_bytes)
		bpf_map__set_max_entries(f->skel->maps.events, ring_bytes);
	if (!ASSERT_OK(tokenscope_bpf__load(f->skel), "load"))
		return false;
	if (!ASSERT_OK(tokenscope_bpf__attach(f->skel), "attach"))
		return false;
	f->rb = ring_buffer__new(bpf_map__fd(f->skel->maps.events), collect, f, NULL);
	if (!ASSERT_OK_PTR(f->rb, "ring_buffer__new"))
		return false;
	/* The pair is made before tracing starts, so the accept is not seen: first I/O is. */
	tcp_pair(&f->srv, &f->cli);
	return ASSERT_OK(kernel_set_traced(f->skel, me, true), "trace self");
}

static void fixture_close(struct fixture *f)
{
	fixture_clear(f);
	ring_buffer__free(f->rb);
	tokenscope_bpf__destroy(f->skel);
	if (f->srv > 0)
		close(f->srv);
	if (f->cli > 0)
		close(f->cli);
}

static uint64_t stat_sum(struct fixture *f, uint32_t which)
{
	int n = libbpf_num_possible_cpus();
	uint64_t vals[n], sum = 0;

	if (bpf_map_lookup_elem(bpf_map__fd(f->skel->maps.stats), &which, vals))
		return ~0ull;
	for (int i = 0; i < n; i++)
		sum += vals[i];
	return sum;
}

/* The data records of fd in direction dir, in order. */
static int data_recs(struct fixture *f, int fd, int dir, const struct ts_data_event **out, int max)
{
	int n = 0;

	fixture_drain(f);
	for (int i = 0; i < f->nrecs && n < max; i++) {
		const struct ts_data_event *e = (const void *)f->recs[i].p;

		if (e->hdr.type == TS_EV_DATA && e->fd == fd && e->dir == dir)
			out[n++] = e;
	}
	return n;
}

static int count_type(struct fixture *f, uint32_t type)
{
	int n = 0;

	fixture_drain(f);
	for (int i = 0; i < f->nrecs; i++)
		n += ((const struct ts_event_hdr *)f->recs[i].p)->type == type;
	return n;
}

static void drain_socket(int fd, size_t n)
{
	char buf[8192];

	while (n > 0) {
		ssize_t r = read(fd, buf, n < sizeof(buf) ? n : sizeof(buf));

		if (r <= 0)
			break;
		n -= r;
	}
}

TEST(test_write_syscalls)
{
	struct fixture f;
	const struct ts_data_event *e[16];
	const char *a = "f6\r\ndata: {\"x\":1}\n\n\r\n";
	struct iovec iov[4] = { { "9c", 2 }, { "\r\n", 2 }, { "data: {}\n\n", 10 }, { "\r\n", 2 } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 4 };
	int n;

	if (!fixture_open(&f, 0, 0))
		goto out;
	ASSERT_EQ(write(f.srv, a, strlen(a)), (long)strlen(a), "write");
	ASSERT_EQ(writev(f.srv, iov, 4), 16, "writev");
	ASSERT_EQ(sendto(f.srv, "abc", 3, 0, NULL, 0), 3, "sendto");
	ASSERT_EQ(sendmsg(f.srv, &msg, 0), 16, "sendmsg");
	drain_socket(f.cli, strlen(a) + 16 + 3 + 16);

	n = data_recs(&f, f.srv, TS_DIR_OUT, e, 16);
	if (!ASSERT_EQ(n, 4, "one record per write syscall"))
		goto out;
	ASSERT_EQ(e[0]->syscall, TS_SYS_WRITE, "write kind");
	ASSERT_EQ(e[1]->syscall, TS_SYS_WRITEV, "writev kind");
	ASSERT_EQ(e[2]->syscall, TS_SYS_SENDTO, "sendto kind");
	ASSERT_EQ(e[3]->syscall, TS_SYS_SENDMSG, "sendmsg kind");
	ASSERT_EQ(e[0]->data_bytes, strlen(a), "write bytes");
	ASSERT_TRUE(memcmp(e[0]->data, a, strlen(a)) == 0, "write content");
	ASSERT_EQ(e[1]->data_bytes, 16, "writev bytes gathered");
	ASSERT_TRUE(memcmp(e[1]->data, "9c\r\ndata: {}\n\n\r\n", 16) == 0, "writev content");
	ASSERT_TRUE(memcmp(e[3]->data, "9c\r\ndata: {}\n\n\r\n", 16) == 0, "sendmsg content");
	ASSERT_EQ(e[0]->pos, 0, "first offset");
	ASSERT_EQ(e[1]->pos, strlen(a), "offsets are contiguous");
	ASSERT_EQ(e[2]->pos, strlen(a) + 16, "sendto offset");
	ASSERT_EQ(e[3]->pos, strlen(a) + 19, "sendmsg offset");
	for (int i = 0; i < 4; i++) {
		ASSERT_TRUE(e[i]->last, "single-record syscalls are last");
		ASSERT_TRUE(e[i]->enter_ns > 0 && e[i]->exit_ns >= e[i]->enter_ns, "times");
		ASSERT_EQ(e[i]->conn_id, e[0]->conn_id, "one connection");
		ASSERT_EQ(e[i]->hdr.pid, getpid(), "pid");
	}
	ASSERT_TRUE(e[1]->enter_ns >= e[0]->exit_ns, "records in syscall order");
	ASSERT_EQ(count_type(&f, TS_EV_CONN_OPEN), 2, "both ends announced once");
	ASSERT_EQ(stat_sum(&f, TS_STAT_LOST_EVENTS), 0, "nothing lost");
out:
	fixture_close(&f);
}

TEST(test_read_syscalls)
{
	struct fixture f;
	const struct ts_data_event *e[16];
	char buf[64];
	char b1[5], b2[64];
	struct iovec iov[2] = { { b1, sizeof(b1) }, { b2, sizeof(b2) } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	int n;

	if (!fixture_open(&f, 0, 0))
		goto out;
	/* Untraced writer side is the same process: its writes are records too, on f.cli. */
	write(f.cli, "POST / HTTP/1.1\r\n", 17);
	ASSERT_EQ(read(f.srv, buf, sizeof(buf)), 17, "read");
	write(f.cli, "0123456789", 10);
	ASSERT_EQ(readv(f.srv, iov, 2), 10, "readv");
	write(f.cli, "abc", 3);
	/* Peeks leave the bytes in the socket: no record, and the stream does not move. */
	ASSERT_EQ(recvfrom(f.srv, buf, 1, MSG_PEEK, NULL, NULL), 1, "recvfrom peek");
	ASSERT_EQ(recvfrom(f.srv, buf, sizeof(buf), 0, NULL, NULL), 3, "recvfrom");
	write(f.cli, "xyz", 3);
	ASSERT_EQ(recvmsg(f.srv, &msg, MSG_PEEK), 3, "recvmsg peek");
	ASSERT_EQ(recvmsg(f.srv, &msg, 0), 3, "recvmsg");
	fcntl(f.srv, F_SETFL, O_NONBLOCK);
	ASSERT_EQ(read(f.srv, buf, sizeof(buf)), -1, "EAGAIN read");

	n = data_recs(&f, f.srv, TS_DIR_IN, e, 16);
	if (!ASSERT_EQ(n, 4, "one record per successful read; none for EAGAIN"))
		goto out;
	ASSERT_EQ(e[0]->syscall, TS_SYS_READ, "read kind");
	ASSERT_EQ(e[1]->syscall, TS_SYS_READV, "readv kind");
	ASSERT_EQ(e[2]->syscall, TS_SYS_RECVFROM, "recvfrom kind");
	ASSERT_EQ(e[3]->syscall, TS_SYS_RECVMSG, "recvmsg kind");
	ASSERT_TRUE(memcmp(e[0]->data, "POST / HTTP/1.1\r\n", 17) == 0, "read content");
	ASSERT_EQ(e[1]->data_bytes, 10, "readv returned bytes only");
	ASSERT_TRUE(memcmp(e[1]->data, "0123456789", 10) == 0, "readv scattered content");
	ASSERT_EQ(e[2]->pos, 27, "recvfrom offset after a peek");
	ASSERT_TRUE(memcmp(e[2]->data, "abc", 3) == 0, "recvfrom content");
	ASSERT_EQ(e[3]->pos, 30, "recvmsg offset after a peek");
out:
	fixture_close(&f);
}

TEST(test_large_write_chunks)
{
	struct fixture f;
	const struct ts_data_event *e[16];
	size_t len = 4 * TS_CHUNK_BYTES + 1000;
	uint8_t *big = malloc(len);
	uint64_t pos = 0;
	int n;

	for (size_t i = 0; i < len; i++)
		big[i] = (uint8_t)(i * 7);
	if (!fixture_open(&f, 0, 0))
		goto out;
	ASSERT_EQ(write(f.srv, big, len), (long)len, "write");
	drain_socket(f.cli, len);
	n = data_recs(&f, f.srv, TS_DIR_OUT, e, 16);
	if (!ASSERT_EQ(n, 5, "records of one large write"))
		goto out;
	for (int i = 0; i < n; i++) {
		ASSERT_EQ(e[i]->pos, pos, "contiguous");
		ASSERT_EQ(e[i]->syscall_bytes, len, "syscall total on every record");
		ASSERT_EQ(e[i]->last, i == n - 1, "last flag");
		ASSERT_EQ(e[i]->enter_ns, e[0]->enter_ns, "same syscall time");
		ASSERT_TRUE(memcmp(e[i]->data, big + pos, e[i]->data_bytes) == 0, "content");
		pos += e[i]->data_bytes;
	}
	ASSERT_EQ(pos, len, "every byte captured");
out:
	free(big);
	fixture_close(&f);
}

TEST(test_capture_limit)
{
	struct fixture f;
	const struct ts_data_event *e[4];
	char buf[1000];
	int n;

	memset(buf, 'x', sizeof(buf));
	if (!fixture_open(&f, 100, 0))
		goto out;
	ASSERT_EQ(write(f.srv, buf, sizeof(buf)), 1000, "write");
	drain_socket(f.cli, sizeof(buf));
	n = data_recs(&f, f.srv, TS_DIR_OUT, e, 4);
	if (!ASSERT_EQ(n, 1, "one record"))
		goto out;
	ASSERT_EQ(e[0]->data_bytes, 100, "capped copy");
	ASSERT_EQ(e[0]->syscall_bytes, 1000, "true size kept");
	/* The reading end is traced too and loses the same 900 bytes. */
	ASSERT_EQ(stat_sum(&f, TS_STAT_UNCAPTURED_BYTES), 2 * 900, "uncaptured counted");
out:
	fixture_close(&f);
}

/*
 * npieces iovecs over bytes[], of 0 to 12 bytes each (every 7th empty), so that pieces of
 * different sizes fall on both sides of the 4 KiB chunk boundaries. Returns the bytes covered.
 */
static size_t iov_pieces(struct iovec *iov, int npieces, uint8_t *bytes)
{
	size_t len = 0;

	for (int i = 0; i < npieces; i++) {
		size_t n = i % 7 ? (size_t)(i * 7 % 13) : 0;

		for (size_t k = 0; k < n; k++)
			bytes[len + k] = (uint8_t)(len + k) * 13 + 1;
		iov[i] = (struct iovec){ bytes + len, n };
		len += n;
	}
	return len;
}

/* The records of one syscall: contiguous from pos 0 of the stream, last flag on the last one,
 * and together exactly want[0..len). */
static void assert_one_syscall(const struct ts_data_event **e, int n, const uint8_t *want,
			       size_t len, uint64_t base, const char *what)
{
	uint64_t pos = base;

	ASSERT_EQ(n, (int)((len + TS_CHUNK_BYTES - 1) / TS_CHUNK_BYTES), what);
	for (int i = 0; i < n; i++) {
		ASSERT_EQ(e[i]->pos, pos, "contiguous");
		ASSERT_EQ(e[i]->syscall_bytes, len, "syscall total on every record");
		ASSERT_EQ(e[i]->last, i == n - 1, "last flag");
		ASSERT_TRUE(memcmp(e[i]->data, want + (pos - base), e[i]->data_bytes) == 0,
			    "every piece, in order");
		pos += e[i]->data_bytes;
	}
	ASSERT_EQ(pos - base, len, "every byte captured");
}

TEST(test_iovec_all_pieces)
{
	struct fixture f;
	const struct ts_data_event *e[16];
	static struct iovec iov[TS_IOV_MAX + 1];
	static uint8_t bytes[13 * (TS_IOV_MAX + 1)];
	struct msghdr msg = { .msg_iov = iov };
	size_t len, len2;
	int n;

	if (!fixture_open(&f, 0, 0))
		goto out;
	/* As many pieces as the kernel takes (IOV_MAX): a writev, then a sendmsg of 905. */
	len = iov_pieces(iov, TS_IOV_MAX, bytes);
	ASSERT_TRUE(len > TS_CHUNK_BYTES, "pieces span chunks");
	ASSERT_EQ(writev(f.srv, iov, TS_IOV_MAX), (long)len, "writev of IOV_MAX pieces");
	drain_socket(f.cli, len);
	n = data_recs(&f, f.srv, TS_DIR_OUT, e, 16);
	assert_one_syscall(e, n, bytes, len, 0, "records of a writev of IOV_MAX pieces");
	fixture_clear(&f);

	msg.msg_iovlen = 905;
	len2 = iov_pieces(iov, 905, bytes);
	ASSERT_EQ(sendmsg(f.srv, &msg, 0), (long)len2, "sendmsg of 905 pieces");
	drain_socket(f.cli, len2);
	n = data_recs(&f, f.srv, TS_DIR_OUT, e, 16);
	assert_one_syscall(e, n, bytes, len2, len, "records of a sendmsg of 905 pieces");

	/* One more is refused by the kernel, so no syscall has pieces beyond the walk. */
	fixture_clear(&f);
	iov_pieces(iov, TS_IOV_MAX + 1, bytes);
	errno = 0;
	ASSERT_EQ(writev(f.srv, iov, TS_IOV_MAX + 1), -1, "writev of IOV_MAX + 1 pieces");
	ASSERT_EQ(errno, EINVAL, "refused");
	ASSERT_EQ(data_recs(&f, f.srv, TS_DIR_OUT, e, 16), 0, "no record");
	ASSERT_EQ(stat_sum(&f, TS_STAT_UNCAPTURED_BYTES), 0,
		  "nothing beyond capture in any of them");
	ASSERT_EQ(stat_sum(&f, TS_STAT_COPY_FAILED), 0, "no copy failed");
out:
	fixture_close(&f);
}

TEST(test_iovec_reads)
{
	struct fixture f;
	const struct ts_data_event *e[16];
	static struct iovec iov[TS_IOV_MAX];
	static uint8_t want[3 * TS_IOV_MAX], got[3 * TS_IOV_MAX];
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = TS_IOV_MAX };
	size_t len = sizeof(want) - 100;
	int n;

	for (size_t i = 0; i < sizeof(want); i++)
		want[i] = (uint8_t)(i * 29 + 3);
	for (int i = 0; i < TS_IOV_MAX; i++)
		iov[i] = (struct iovec){ got + 3 * i, 3 };
	if (!fixture_open(&f, 0, 0))
		goto out;
	/* readv and recvmsg scattering into IOV_MAX pieces of 3 bytes: only the bytes returned. */
	ASSERT_EQ(write(f.cli, want, len), (long)len, "write");
	ASSERT_EQ(readv(f.srv, iov, TS_IOV_MAX), (long)len, "readv of IOV_MAX pieces");
	n = data_recs(&f, f.srv, TS_DIR_IN, e, 16);
	assert_one_syscall(e, n, want, len, 0, "records of a readv");
	fixture_clear(&f);
	ASSERT_EQ(write(f.cli, want, len), (long)len, "write");
	ASSERT_EQ(recvmsg(f.srv, &msg, 0), (long)len, "recvmsg of IOV_MAX pieces");
	n = data_recs(&f, f.srv, TS_DIR_IN, e, 16);
	assert_one_syscall(e, n, want, len, len, "records of a recvmsg");
out:
	fixture_close(&f);
}

TEST(test_iovec_capture_limit)
{
	struct fixture f;
	const struct ts_data_event *e[4];
	static struct iovec iov[TS_IOV_MAX];
	int n;

	for (int i = 0; i < TS_IOV_MAX; i++)
		iov[i] = (struct iovec){ "ab", 2 };
	if (!fixture_open(&f, 100, 0))
		goto out;
	ASSERT_EQ(writev(f.srv, iov, TS_IOV_MAX), 2 * TS_IOV_MAX, "writev");
	drain_socket(f.cli, 2 * TS_IOV_MAX);
	n = data_recs(&f, f.srv, TS_DIR_OUT, e, 4);
	if (!ASSERT_EQ(n, 1, "one record"))
		goto out;
	ASSERT_EQ(e[0]->data_bytes, 100, "the pieces within the capture limit");
	ASSERT_TRUE(memcmp(e[0]->data, "abababab", 8) == 0, "in order");
	ASSERT_EQ(e[0]->syscall_bytes, 2 * TS_IOV_MAX, "true size kept");
	/* The reading end is traced too and loses the same bytes. */
	ASSERT_EQ(stat_sum(&f, TS_STAT_UNCAPTURED_BYTES), 2 * (2 * TS_IOV_MAX - 100),
		  "the rest counted");
out:
	fixture_close(&f);
}

TEST(test_ring_full_counts_losses)
{
	struct fixture f;
	char buf[2000];
	int writes = 200;
	uint64_t ev, lost;

	memset(buf, 'y', sizeof(buf));
	/* 16 KiB ring and nobody draining it: most of 200 x 2 KB records cannot fit. */
	if (!fixture_open(&f, 0, 16384))
		goto out;
	for (int i = 0; i < writes; i++) {
		write(f.srv, buf, sizeof(buf));
		drain_socket(f.cli, sizeof(buf));
	}
	/* Counters first: draining would make room. */
	lost = stat_sum(&f, TS_STAT_LOST_EVENTS);
	ev = stat_sum(&f, TS_STAT_EVENTS);
	ASSERT_TRUE(lost > 0, "losses counted");
	ASSERT_TRUE(stat_sum(&f, TS_STAT_LOST_BYTES) >= lost * sizeof(buf) / 2, "lost bytes");
	/* Every traced syscall of under a chunk makes one record attempt, plus 2 conn opens. */
	ASSERT_TRUE(stat_sum(&f, TS_STAT_SYSCALLS) >= 2 * (uint64_t)writes, "syscalls counted");
	ASSERT_EQ(ev + lost, stat_sum(&f, TS_STAT_SYSCALLS) + 2, "submitted + lost = attempted");
	fixture_drain(&f);
	ASSERT_EQ(f.nrecs, (long)ev, "what was submitted arrives");
out:
	fixture_close(&f);
}

TEST(test_fd_reuse_new_conn)
{
	struct fixture f;
	const struct ts_data_event *e[4];
	int fd, srv2, cli2, n;
	uint64_t first;

	if (!fixture_open(&f, 0, 0))
		goto out;
	fd = f.srv;
	write(fd, "one", 3);
	drain_socket(f.cli, 3);
	n = data_recs(&f, fd, TS_DIR_OUT, e, 4);
	if (!ASSERT_EQ(n, 1, "first"))
		goto out;
	first = e[0]->conn_id;
	close(f.srv);
	ASSERT_EQ(count_type(&f, TS_EV_CONN_CLOSE), 1, "close seen");
	tcp_pair(&srv2, &cli2);
	/* Put the new connection on the old fd number. */
	dup2(srv2, fd);
	close(srv2);
	fixture_clear(&f);
	write(fd, "two", 3);
	drain_socket(cli2, 3);
	n = data_recs(&f, fd, TS_DIR_OUT, e, 4);
	if (ASSERT_EQ(n, 1, "second")) {
		ASSERT_TRUE(e[0]->conn_id != first, "a new connection id on a reused fd");
		ASSERT_EQ(e[0]->pos, 0, "offsets restart");
	}
	f.srv = fd;
	close(cli2);
out:
	fixture_close(&f);
}

TEST(test_close_reports_offsets)
{
	struct fixture f;
	const struct ts_conn_event *c = NULL;

	if (!fixture_open(&f, 0, 0))
		goto out;
	write(f.srv, "hello", 5);
	drain_socket(f.cli, 5);
	close(f.srv);
	f.srv = -1;
	fixture_drain(&f);
	for (int i = 0; i < f.nrecs; i++) {
		const struct ts_conn_event *x = (const void *)f.recs[i].p;

		if (x->hdr.type == TS_EV_CONN_CLOSE)
			c = x;
	}
	if (ASSERT_OK_PTR(c, "close record")) {
		ASSERT_EQ(c->tx_bytes, 5, "bytes written");
		ASSERT_EQ(c->rx_bytes, 0, "bytes read");
		ASSERT_EQ(c->family, 0, "close records carry no address");
	}
out:
	fixture_close(&f);
}

TEST(test_ignores_pipes_and_untraced)
{
	struct fixture f;
	int p[2];
	pid_t child;
	char buf[8];

	if (!fixture_open(&f, 0, 0))
		goto out;
	pipe(p);
	write(p[1], "pipe", 4);
	read(p[0], buf, 4);
	close(p[0]);
	close(p[1]);
	/* A child forked while untraced... remove ourselves first so the fork is not followed. */
	uint32_t me = getpid();

	kernel_set_traced(f.skel, me, false);
	child = fork();
	if (child == 0) {
		write(f.srv, "child", 5);
		_exit(0);
	}
	waitpid(child, NULL, 0);
	drain_socket(f.cli, 5);
	ASSERT_EQ(count_type(&f, TS_EV_DATA), 0, "no records for pipes or untraced processes");
	ASSERT_EQ(count_type(&f, TS_EV_PROC_FORK), 0, "no fork record");
out:
	fixture_close(&f);
}

/* Whether pid's bit is set in the kernel side's traced-process bitmap. */
static bool traced_bit_set(struct fixture *f, uint32_t pid)
{
	uint32_t w = pid / 64;
	uint64_t bits = 0;

	bpf_map_lookup_elem(bpf_map__fd(f->skel->maps.traced_bits), &w, &bits);
	return bits & (1ull << (pid % 64));
}

TEST(test_fork_followed)
{
	struct fixture f;
	const struct ts_data_event *e[4];
	pid_t child;
	int forks = 0, exits = 0;

	if (!fixture_open(&f, 0, 0))
		goto out;
	child = fork();
	if (child == 0) {
		write(f.srv, "from child", 10);
		_exit(3);
	}
	waitpid(child, NULL, 0);
	drain_socket(f.cli, 10);
	fixture_drain(&f);
	for (int i = 0; i < f.nrecs; i++) {
		const struct ts_proc_event *p = (const void *)f.recs[i].p;

		if (p->hdr.type == TS_EV_PROC_FORK && p->hdr.pid == (uint32_t)child &&
		    p->ppid == (uint32_t)getpid())
			forks++;
		if (p->hdr.type == TS_EV_PROC_EXIT && p->hdr.pid == (uint32_t)child) {
			exits++;
			ASSERT_EQ((p->exit_code >> 8) & 0xff, 3, "exit status");
		}
	}
	ASSERT_EQ(forks, 1, "fork record");
	ASSERT_EQ(exits, 1, "exit record");
	/* The child's exit took it out of both forms of the traced set; its parent stays. */
	uint32_t cp = child, me = getpid();
	uint8_t v;

	ASSERT_TRUE(bpf_map_lookup_elem(bpf_map__fd(f.skel->maps.traced), &cp, &v) != 0,
		    "child gone from the map");
	ASSERT_FALSE(traced_bit_set(&f, cp), "child's bit cleared");
	ASSERT_TRUE(traced_bit_set(&f, me), "parent's bit set");
	if (ASSERT_EQ(data_recs(&f, f.srv, TS_DIR_OUT, e, 4), 1, "child's write")) {
		ASSERT_EQ(e[0]->hdr.pid, child, "written by the child");
		ASSERT_TRUE(memcmp(e[0]->data, "from child", 10) == 0, "content");
	}
out:
	fixture_close(&f);
}

TEST(test_peer_gone_records)
{
	struct fixture f;
	const struct ts_data_event *in[4], *out[4];
	char buf[16];
	int nin, nout;

	if (!fixture_open(&f, 0, 0))
		goto out;
	write(f.srv, "x", 1);
	drain_socket(f.cli, 1);
	close(f.cli);
	f.cli = -1;
	ASSERT_EQ(read(f.srv, buf, sizeof(buf)), 0, "EOF");
	/* The first write after the peer's close draws a RST; the next one fails. */
	send(f.srv, "y", 1, MSG_NOSIGNAL);
	usleep(20000);
	ASSERT_TRUE(send(f.srv, "z", 1, MSG_NOSIGNAL) < 0, "write to a reset peer fails");
	nin = data_recs(&f, f.srv, TS_DIR_IN, in, 4);
	nout = data_recs(&f, f.srv, TS_DIR_OUT, out, 4);
	if (ASSERT_EQ(nin, 1, "one read record")) {
		ASSERT_EQ(in[0]->status, TS_DATA_EOF, "EOF status");
		ASSERT_EQ(in[0]->data_bytes, 0, "no bytes");
	}
	if (ASSERT_EQ(nout, 3, "x, y and the failed write")) {
		ASSERT_EQ(out[0]->status, TS_DATA_BYTES, "bytes");
		ASSERT_EQ(out[2]->status, TS_DATA_RESET, "reset status");
		ASSERT_EQ(out[2]->pos, 2, "at the offset reached");
	}
out:
	fixture_close(&f);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* The queued_ns of the latest read record on fd, or ~0 when there is none. */
static uint64_t last_queued(struct fixture *f, int fd, const struct ts_data_event **rec)
{
	const struct ts_data_event *e[64];
	int n = data_recs(f, fd, TS_DIR_IN, e, 64);

	*rec = n ? e[n - 1] : NULL;
	return n ? e[n - 1]->queued_ns : ~0ull;
}

/*
 * queued_ns: when the oldest byte a read returned reached the socket (sk_data_ready), or 0 when
 * the tracer cannot know. Checked against this process's own clock around the writes.
 */
TEST(test_socket_arrival)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_un ua = { .sun_family = AF_UNIX };
	socklen_t alen = sizeof(a);
	const struct ts_data_event *r;
	struct fixture f;
	char buf[64];
	uint64_t t0, t1, q;
	int l = -1, c = -1, s = -1;

	if (!fixture_open(&f, 0, 0))
		goto out;
	if (!f.skel->rodata->has_rx_ready) {
		/* A kernel without the sk_data_ready tracepoint (before 6.3): arrivals unknown,
		 * every read's queued_ns 0, never a made-up time. */
		for (int i = 0; i < 3; i++) {
			write(f.cli, "abc", 3);
			read(f.srv, buf, sizeof(buf));
		}
		ASSERT_EQ(last_queued(&f, f.srv, &r), 0, "no arrival without the tracepoint");
		goto out;
	}
	/* First sight of a socket at a read: its bytes arrived before tracing knew it. */
	write(f.cli, "a", 1);
	ASSERT_EQ(read(f.srv, buf, sizeof(buf)), 1, "first read");
	ASSERT_EQ(last_queued(&f, f.srv, &r), 0, "first sight: arrival unknown");

	/* A drained socket: the next bytes' arrival, 20 ms before the server reads them. */
	t0 = mono_ns();
	write(f.cli, "hello", 5);
	t1 = mono_ns();
	usleep(20000);
	ASSERT_EQ(read(f.srv, buf, sizeof(buf)), 5, "read after a wait");
	q = last_queued(&f, f.srv, &r);
	ASSERT_TRUE(q >= t0 && q <= t1, "arrival between the client's write calls");
	ASSERT_TRUE(r && r->exit_ns - q >= 20000000, "the 20 ms wait is visible");

	/* Bytes left unread by a read: their arrival is not reported for the next read. */
	t0 = mono_ns();
	write(f.cli, "0123456789", 10);
	t1 = mono_ns();
	ASSERT_EQ(read(f.srv, buf, 4), 4, "partial read");
	q = last_queued(&f, f.srv, &r);
	ASSERT_TRUE(q >= t0 && q <= t1, "partial read: arrival known");
	ASSERT_EQ(read(f.srv, buf, sizeof(buf)), 6, "rest");
	ASSERT_EQ(last_queued(&f, f.srv, &r), 0, "bytes left over: arrival unknown");
	write(f.cli, "x", 1);
	ASSERT_EQ(read(f.srv, buf, sizeof(buf)), 1, "after the leftover");
	ASSERT_TRUE(last_queued(&f, f.srv, &r) > 1, "drained again: arrival known");

	/* A connection whose request is in the socket before the traced process accepts it. */
	l = socket(AF_INET, SOCK_STREAM, 0);
	bind(l, (struct sockaddr *)&a, sizeof(a));
	listen(l, 4);
	getsockname(l, (struct sockaddr *)&a, &alen);
	c = socket(AF_INET, SOCK_STREAM, 0);
	connect(c, (struct sockaddr *)&a, sizeof(a));
	usleep(2000);
	t0 = mono_ns();
	write(c, "GET / HTTP/1.1\r\n\r\n", 18);
	t1 = mono_ns();
	usleep(10000);
	s = accept(l, NULL, NULL);
	ASSERT_EQ(read(s, buf, sizeof(buf)), 18, "read after accept");
	q = last_queued(&f, s, &r);
	/* tcp_mstamp has microseconds: the arrival rounds down by up to 1 us. */
	ASSERT_TRUE(q + 1000 >= t0 && q <= t1, "arrival before accept: the packet's time");
	ASSERT_TRUE(r && r->exit_ns - q >= 10000000, "the accept-queue wait is visible");
	close(s);
	close(c);
	close(l);
	s = c = l = -1;

	/* AF_UNIX: bytes waiting at accept have no packet time (unknown); later ones are seen. */
	snprintf(ua.sun_path, sizeof(ua.sun_path), "/tmp/ts-arrival-%d.sock", getpid());
	unlink(ua.sun_path);
	l = socket(AF_UNIX, SOCK_STREAM, 0);
	bind(l, (struct sockaddr *)&ua, sizeof(ua));
	listen(l, 4);
	c = socket(AF_UNIX, SOCK_STREAM, 0);
	connect(c, (struct sockaddr *)&ua, sizeof(ua));
	write(c, "one", 3);
	s = accept(l, NULL, NULL);
	ASSERT_EQ(read(s, buf, sizeof(buf)), 3, "unix read after accept");
	ASSERT_EQ(last_queued(&f, s, &r), 0, "unix, waiting at accept: unknown");
	t0 = mono_ns();
	write(c, "two", 3);
	t1 = mono_ns();
	usleep(5000);
	ASSERT_EQ(read(s, buf, sizeof(buf)), 3, "unix read");
	q = last_queued(&f, s, &r);
	ASSERT_TRUE(q >= t0 && q <= t1, "unix: arrival between the write calls");
	unlink(ua.sun_path);
out:
	if (s >= 0)
		close(s);
	if (c >= 0)
		close(c);
	if (l >= 0)
		close(l);
	fixture_close(&f);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("SKIP bpf attach tests: need root\n");
		return 0;
	}
	return check_run_all();
}
