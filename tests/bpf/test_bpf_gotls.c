// SPDX-License-Identifier: MIT
/*
 * Go's crypto/tls plaintext from the probes on a real Go executable (tests/gotlspair.go, built
 * for this build's architecture): both ends of one TLS connection in a child process, which
 * the loader's code hooks through its /proc/PID/maps like any Go server. The records must carry
 * the request the client's Write sent and the server's Read returned, and the response the
 * other way, each on its own connection, with no call left unplaced. On arm64 this is the test
 * of Go's registers (g in x28, arguments from x0) and of the RET probes (tests/arm64/run_vm.sh).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "check.h"
#include "events.h"
#include "loader/kernel.h"
#include "loader/uprobes.h"
#include "tokenscope.skel.h"

#ifndef TS_GOTLSPAIR
#define TS_GOTLSPAIR ".output/gotlspair"
#endif
#define MAX_BYTES 4096

static const char REQUEST[] = "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
static const char RESPONSE[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

/* What the ring buffer brought for the child's plaintext, by direction. */
static struct {
	uint32_t pid;
	int cipher_records;
	uint8_t in[MAX_BYTES], out[MAX_BYTES];
	size_t nin, nout;
} got;

static int collect(void *ctx, void *data, size_t len)
{
	const struct ts_data_event *e = data;

	(void)ctx;
	if (e->hdr.type != TS_EV_DATA || len < sizeof(*e) || e->hdr.pid != got.pid ||
	    e->status != TS_DATA_BYTES)
		return 0;
	if (e->syscall != TS_SYS_TLS_READ && e->syscall != TS_SYS_TLS_WRITE) {
		got.cipher_records++;
		return 0;
	}
	if (e->dir == TS_DIR_IN && got.nin + e->data_bytes <= MAX_BYTES) {
		memcpy(got.in + got.nin, e->data, e->data_bytes);
		got.nin += e->data_bytes;
	} else if (e->dir == TS_DIR_OUT && got.nout + e->data_bytes <= MAX_BYTES) {
		memcpy(got.out + got.nout, e->data, e->data_bytes);
		got.nout += e->data_bytes;
	}
	return 0;
}

static bool has(const uint8_t *b, size_t n, const char *s)
{
	return memmem(b, n, s, strlen(s)) != NULL;
}

/* Reads a line of the child's into line; false at its end. */
static bool read_line(FILE *f, char *line, size_t len)
{
	return fgets(line, (int)len, f) != NULL;
}

TEST(test_go_tls_plaintext)
{
	struct tokenscope_bpf *skel = NULL;
	struct ring_buffer *rb = NULL;
	struct kernel *k = NULL;
	struct uprobes u;
	uint64_t unjoined = 0;
	int to_child[2] = { -1, -1 }, from_child[2] = { -1, -1 }, status = 0, hooked;
	char line[64];
	FILE *out = NULL;
	pid_t child = -1;

	memset(&got, 0, sizeof(got));
	if (access(TS_GOTLSPAIR, X_OK)) {
		ASSERT_TRUE(false, TS_GOTLSPAIR " built (make)");
		return;
	}
	if (!ASSERT_OK(pipe(to_child), "pipe") || !ASSERT_OK(pipe(from_child), "pipe"))
		goto out;
	child = fork();
	if (child == 0) {
		dup2(to_child[0], 0);
		dup2(from_child[1], 1);
		close(to_child[1]);
		close(from_child[0]);
		execl(TS_GOTLSPAIR, "gotlspair", REQUEST, RESPONSE, (char *)NULL);
		_exit(127);
	}
	close(to_child[0]);
	close(from_child[1]);
	out = fdopen(from_child[0], "r");
	if (!ASSERT_TRUE(out && read_line(out, line, sizeof(line)) && !strcmp(line, "ready\n"),
			 "the pair handshook"))
		goto out;

	LIBBPF_QUIET();
	skel = kernel_skel_open();
	if (!ASSERT_OK_PTR(skel, "open") || !ASSERT_OK(tokenscope_bpf__load(skel), "load") ||
	    !ASSERT_OK(tokenscope_bpf__attach(skel), "attach"))
		goto out;
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), collect, NULL, NULL);
	if (!ASSERT_OK_PTR(rb, "ring buffer") || !ASSERT_OK(kernel_borrow(&k, skel), "kernel side"))
		goto out;
	uprobes_init(&u, k, false);
	hooked = uprobes_scan(&u, (uint32_t)child, false);
	ASSERT_TRUE(hooked >= 2, "crypto/tls Read and Write hooked");
	ASSERT_EQ(uprobes_hooked_files(&u, "TLS"), 1, "the Go executable");
	got.pid = (uint32_t)child;
	kernel_set_traced(skel, got.pid, true);

	if (!ASSERT_TRUE(write(to_child[1], "go\n", 3) == 3, "started") ||
	    !ASSERT_TRUE(read_line(out, line, sizeof(line)) && !strcmp(line, "done\n"),
			 "request and response exchanged"))
		goto detach;
	ring_buffer__consume(rb);

	ASSERT_EQ(got.cipher_records, 0, "no encrypted bytes sent");
	ASSERT_TRUE(has(got.out, got.nout, REQUEST), "the client's Write: the request");
	ASSERT_TRUE(has(got.in, got.nin, REQUEST), "the server's Read: the request");
	ASSERT_TRUE(has(got.out, got.nout, RESPONSE), "the server's Write: the response");
	ASSERT_TRUE(has(got.in, got.nin, RESPONSE), "the client's Read: the response");
	ASSERT_EQ(got.nin, sizeof(REQUEST) - 1 + sizeof(RESPONSE) - 1, "nothing else read");
	ASSERT_EQ(got.nout, sizeof(REQUEST) - 1 + sizeof(RESPONSE) - 1, "nothing else written");
	kernel_read_stat(k, TS_STAT_TLS_UNJOINED, &unjoined);
	ASSERT_EQ(unjoined, 0, "every call placed on its connection");
detach:
	uprobes_detach(&u, NULL, NULL);
out:
	if (to_child[1] >= 0)
		close(to_child[1]);
	if (out)
		fclose(out);
	if (child > 0) {
		waitpid(child, &status, 0);
		ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the pair ran whole");
	}
	ring_buffer__free(rb);
	kernel_destroy(k);
	tokenscope_bpf__destroy(skel);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	return check_run_all();
}
