// SPDX-License-Identifier: MIT
/*
 * Passive discovery in the kernel: the real programs with discover_traffic on, and untraced
 * child processes making real write syscalls. A child whose writes to a stream socket start
 * like a streamed completion frame must appear in map traffic_seen with the right kind, count
 * and name; one writing other bytes, or the same bytes to a pipe, a file or a datagram socket,
 * must not; neither must a traced process, the tracer itself, or anyone with the flag off.
 * Needs root.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/types.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "check.h"
#include "events.h"
#include "loader/kernel.h"
#include "tokenscope.skel.h"
#include "traffic.h"

#define CHILD_NAME "tsdisc-child"
#define FRAME "a6\r\ndata: {\"id\":\"chatcmpl-1\",\"choices\":[]}\n\n\r\n"
#define NDJSON "7c\r\n{\"model\":\"llama3.2\",\"done\":false}\n\r\n"

static struct tokenscope_bpf *skel;

static bool load(bool on)
{
	skel = kernel_skel_open();
	if (!ASSERT_OK_PTR(skel, "open"))
		return false;
	skel->rodata->discover_traffic = on;
	skel->rodata->self_tgid = getpid();
	if (!ASSERT_OK(tokenscope_bpf__load(skel), "load") ||
	    !ASSERT_OK(tokenscope_bpf__attach(skel), "attach")) {
		tokenscope_bpf__destroy(skel);
		skel = NULL;
		return false;
	}
	return true;
}

static void unload(void)
{
	tokenscope_bpf__destroy(skel);
	skel = NULL;
}

static void tcp_pair(int *srv, int *cli, int type)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int l;

	if (type == SOCK_DGRAM) {
		*srv = socket(AF_INET, SOCK_DGRAM, 0);
		*cli = socket(AF_INET, SOCK_DGRAM, 0);
		bind(*cli, (struct sockaddr *)&a, sizeof(a));
		getsockname(*cli, (struct sockaddr *)&a, &alen);
		connect(*srv, (struct sockaddr *)&a, sizeof(a));
		return;
	}
	l = socket(AF_INET, SOCK_STREAM, 0);
	bind(l, (struct sockaddr *)&a, sizeof(a));
	listen(l, 4);
	getsockname(l, (struct sockaddr *)&a, &alen);
	*cli = socket(AF_INET, SOCK_STREAM, 0);
	connect(*cli, (struct sockaddr *)&a, sizeof(a));
	*srv = accept(l, NULL, NULL);
	close(l);
}

/* What a child does with fd; returns nothing, exits. */
typedef void (*child_fn)(int fd);

/*
 * Runs fn(fd) in a child process named CHILD_NAME, traced first when `traced`, and returns the
 * child's entry in traffic_seen: 0, or -ENOENT when it has none.
 */
static int run_child(child_fn fn, int fd, bool traced, struct ts_traffic_seen *out)
{
	int go[2];
	pid_t child;
	__u32 pid;
	char c = 0;

	if (pipe(go))
		return -errno;
	child = fork();
	if (child == 0) {
		close(go[1]);
		prctl(PR_SET_NAME, CHILD_NAME);
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		fn(fd);
		_exit(0);
	}
	close(go[0]);
	pid = child;
	if (traced)
		kernel_set_traced(skel, pid, true);
	/* The child's writes start only now: the name and the traced entry are in place. */
	if (write(go[1], &c, 1) != 1)
		return -EIO;
	close(go[1]);
	waitpid(child, NULL, 0);
	if (traced)
		kernel_set_traced(skel, pid, false);
	if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.traffic_seen), &pid, out))
		return -ENOENT;
	return 0;
}

static int child_fd = -1;

static void write_str(int fd, const char *s)
{
	char buf[256];
	size_t n = strlen(s);

	memcpy(buf, s, n);
	if (write(fd, buf, n) < 0)
		_exit(1);
}

static void write_frames(int fd)
{
	for (int i = 0; i < 3; i++)
		write_str(fd, FRAME);
}

/*
 * A writev or sendmsg of the given pieces, copied to the stack first: a server writes bytes it
 * has just produced, and the kernel side reads them at sys_enter without faulting pages in (a
 * child's untouched copy of the parent's read-only data may not be mapped yet).
 */
static void write_pieces(int fd, bool msg, const char *const *pieces, int n)
{
	char mem[4][64];
	struct iovec v[4];
	struct msghdr m = { .msg_iov = v, .msg_iovlen = n };

	for (int i = 0; i < n; i++) {
		v[i].iov_len = strlen(pieces[i]);
		memcpy(mem[i], pieces[i], v[i].iov_len);
		v[i].iov_base = mem[i];
	}
	if ((msg ? sendmsg(fd, &m, 0) : writev(fd, v, n)) < 0)
		_exit(1);
}

/* Node's http: [size, CRLF, frame, CRLF] in one writev. */
static void writev_node(int fd)
{
	static const char *const p[] = { "1b", "\r\n", "data: {\"id\":\"chatcmpl-1\"}\n\n",
					 "\r\n" };

	write_pieces(fd, false, p, 4);
}

static void sendmsg_node(int fd)
{
	static const char *const p[] = { "1a", "\r\n", "data:{\"token\":{\"id\":1}}\n\n", "\r\n" };

	write_pieces(fd, true, p, 4);
}

/* The chunk-size line cut over two pieces: still within the pieces looked at. */
static void writev_split_size(int fd)
{
	static const char *const p[] = { "a", "6\r\n", "data: {\"id\":1}\n\n\r\n" };

	write_pieces(fd, false, p, 3);
}

/* The frame in the fourth piece: beyond TS_TRAFFIC_PEEK_IOVS. */
static void writev_fourth_piece(int fd)
{
	static const char *const p[] = { "a6", "\r", "\n", "data: {\"id\":1}\n\n\r\n" };

	write_pieces(fd, false, p, 4);
}

static void sendto_ndjson(int fd)
{
	char buf[sizeof(NDJSON)];

	memcpy(buf, NDJSON, sizeof(NDJSON));
	if (sendto(fd, buf, sizeof(NDJSON) - 1, 0, NULL, 0) < 0)
		_exit(1);
}

static void write_other(int fd)
{
	static const char *const w[] = {
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\n\r\n",
		"e\r\ndata: [DONE]\n\n\r\n",
		"hello, world\n",
	};

	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++)
		write_str(fd, w[i]);
}

static void *thread_write(void *arg)
{
	prctl(PR_SET_NAME, "tsdisc-worker");
	write_frames(*(int *)arg);
	return NULL;
}

/* The write comes from a thread with a name of its own: the process's name is recorded. */
static void thread_frames(int fd)
{
	pthread_t t;

	child_fd = fd;
	if (pthread_create(&t, NULL, thread_write, &child_fd))
		_exit(1);
	pthread_join(t, NULL);
}

TEST(test_stream_socket_frames)
{
	struct ts_traffic_seen v;
	int srv, cli;

	if (!load(true))
		return;
	tcp_pair(&srv, &cli, SOCK_STREAM);
	if (ASSERT_EQ(run_child(write_frames, srv, false, &v), 0, "write: found")) {
		ASSERT_EQ(v.kind, TS_TRAFFIC_SSE, "kind");
		ASSERT_EQ(v.matches, 3, "every matching write counted");
		ASSERT_STREQ(v.comm, CHILD_NAME, "name");
		ASSERT_TRUE(v.first_ns && v.last_ns >= v.first_ns, "times");
	}
	if (ASSERT_EQ(run_child(writev_node, srv, false, &v), 0, "writev: found"))
		ASSERT_EQ(v.kind, TS_TRAFFIC_SSE, "writev kind");
	if (ASSERT_EQ(run_child(sendmsg_node, srv, false, &v), 0, "sendmsg: found"))
		ASSERT_EQ(v.kind, TS_TRAFFIC_SSE, "sendmsg kind");
	if (ASSERT_EQ(run_child(writev_split_size, srv, false, &v), 0, "split size line: found"))
		ASSERT_EQ(v.matches, 1, "split size line count");
	ASSERT_EQ(run_child(writev_fourth_piece, srv, false, &v), -ENOENT,
		  "a frame in the fourth piece is not looked at");
	if (ASSERT_EQ(run_child(sendto_ndjson, srv, false, &v), 0, "sendto NDJSON: found"))
		ASSERT_EQ(v.kind, TS_TRAFFIC_NDJSON, "NDJSON kind");
	if (ASSERT_EQ(run_child(thread_frames, srv, false, &v), 0, "thread: found"))
		ASSERT_STREQ(v.comm, CHILD_NAME, "the process's name, not the thread's");
	close(srv);
	close(cli);
	/* AF_UNIX stream sockets are traced like TCP (a server behind a local proxy). */
	int sp[2];

	socketpair(AF_UNIX, SOCK_STREAM, 0, sp);
	ASSERT_EQ(run_child(write_frames, sp[0], false, &v), 0, "unix stream socket: found");
	close(sp[0]);
	close(sp[1]);
	unload();
}

TEST(test_not_frames_or_not_stream_sockets)
{
	struct ts_traffic_seen v;
	char path[] = "/tmp/ts-traffic-XXXXXX";
	int srv, cli, p[2], file;

	if (!load(true))
		return;
	tcp_pair(&srv, &cli, SOCK_STREAM);
	ASSERT_EQ(run_child(write_other, srv, false, &v), -ENOENT, "other bytes on TCP");
	close(srv);
	close(cli);
	if (pipe(p) == 0) {
		ASSERT_EQ(run_child(write_frames, p[1], false, &v), -ENOENT, "pipe");
		close(p[0]);
		close(p[1]);
	}
	file = mkstemp(path);
	if (ASSERT_TRUE(file >= 0, "temp file")) {
		ASSERT_EQ(run_child(write_frames, file, false, &v), -ENOENT, "regular file");
		close(file);
		unlink(path);
	}
	tcp_pair(&srv, &cli, SOCK_DGRAM);
	ASSERT_EQ(run_child(write_frames, srv, false, &v), -ENOENT, "UDP socket");
	close(srv);
	close(cli);
	unload();
}

TEST(test_traced_self_and_off)
{
	struct ts_traffic_seen v;
	__u32 me = getpid();
	int srv, cli;

	if (!load(true))
		return;
	tcp_pair(&srv, &cli, SOCK_STREAM);
	ASSERT_EQ(run_child(write_frames, srv, true, &v), -ENOENT, "a traced process");
	write_frames(srv);
	ASSERT_TRUE(bpf_map_lookup_elem(bpf_map__fd(skel->maps.traffic_seen), &me, &v) != 0,
		    "the tracer itself");
	/* The control: the same child untraced is found. */
	ASSERT_EQ(run_child(write_frames, srv, false, &v), 0, "untraced: found");
	unload();
	if (load(false)) {
		ASSERT_EQ(run_child(write_frames, srv, false, &v), -ENOENT, "discovery off");
		unload();
	}
	close(srv);
	close(cli);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("SKIP bpf traffic tests: need root\n");
		return 0;
	}
	return check_run_all();
}
