// SPDX-License-Identifier: MIT
/*
 * The whole user-side pipeline driven by event records built here exactly as the kernel side
 * lays them out: connection reassembly, gaps, keep-alive, fd reuse, aborts, process exit, and
 * the JSON each request produces.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "fixture.h"
#include "sinks/output.h"
#include "pipeline/batch.h"
#include "pipeline/pipeline_impl.h"
#include "sinks/summary.h"
#include "sinks/prom.h"
#include "pipeline/sse.h"

#define MAX_LINES 64

struct harness {
	struct pipeline pl;
	struct lines sink_lines; /* the request lines' sink */
	struct summaries sums;	 /* the summaries' sink, on ferr as with --json */
	char *out, *err;
	size_t out_len, err_len;
	FILE *fout, *ferr;
	uint64_t pos[64][2]; /* per conn id, per direction */
	uint64_t rx_queued;  /* queued_ns of the next read records (the kernel's socket arrival) */
	bool tls;	     /* data records are TLS plaintext (TS_SYS_TLS_READ/WRITE) */
	uint32_t pid;	     /* of the data records; 0: 100 */
	cJSON *lines[MAX_LINES];
	int nlines;
};

static void h_open(struct harness *h)
{
	struct pipeline_opts o = { 0 };
	struct sink ls;

	memset(h, 0, sizeof(*h));
	h->fout = open_memstream(&h->out, &h->out_len);
	h->ferr = open_memstream(&h->err, &h->err_len);
	o.err = h->ferr;
	pipeline_init(&h->pl, &o);
	lines_init(&h->sink_lines,
		   &(struct lines_opts){ .out = h->fout, .json = true, .tokens = true });
	ls = lines_sink(&h->sink_lines);
	pipeline_add_sink(&h->pl, &ls);
	summaries_init(&h->sums, h->ferr);
	ls = summaries_sink(&h->sums);
	pipeline_add_sink(&h->pl, &ls);
	pipeline_add_process(&h->pl, 100, true);
}

/* Parses the JSON lines written so far. */
static int h_lines(struct harness *h)
{
	char *save, *line;

	fflush(h->fout);
	for (int i = 0; i < h->nlines; i++)
		cJSON_Delete(h->lines[i]);
	h->nlines = 0;
	if (!h->out)
		return 0;
	char *copy = strdup(h->out);

	for (line = strtok_r(copy, "\n", &save); line && h->nlines < MAX_LINES;
	     line = strtok_r(NULL, "\n", &save))
		h->lines[h->nlines++] = cJSON_Parse(line);
	free(copy);
	return h->nlines;
}

/* The total summary as of now, as the end of a run prints it. */
static void h_print_total(struct harness *h)
{
	struct pipeline_status st;

	pipeline_status(&h->pl, &st);
	summaries_print_total(&h->sums, &st);
}

static void h_close(struct harness *h)
{
	pipeline_free(&h->pl);
	for (int i = 0; i < h->nlines; i++)
		cJSON_Delete(h->lines[i]);
	fclose(h->fout);
	fclose(h->ferr);
	free(h->out);
	free(h->err);
}

static void conn_event(struct harness *h, uint32_t type, uint64_t id, int fd, uint64_t ts)
{
	struct ts_conn_event e = { 0 };

	e.hdr.type = type;
	e.hdr.size = sizeof(e);
	e.hdr.pid = 100;
	e.conn_id = id;
	e.ts_ns = ts;
	e.fd = fd;
	e.family = 2;
	e.local_addr[0] = 127, e.local_addr[3] = 1;
	e.peer_addr[0] = 127, e.peer_addr[3] = 1;
	e.local_port = 8000;
	e.peer_port = 40000 + id;
	e.rx_bytes = h->pos[id][TS_DIR_IN];
	e.tx_bytes = h->pos[id][TS_DIR_OUT];
	pipeline_feed(&h->pl, &e, sizeof(e));
}

/*
 * One syscall of `len` bytes at time ts, of which the first `captured` are in the record (the
 * rest is a capture-limit gap, as the kernel reports it).
 */
static void data_event_cap(struct harness *h, uint64_t id, int dir, const void *p, size_t len,
			   size_t captured, uint64_t ts)
{
	size_t sz = sizeof(struct ts_data_event) + captured;
	struct ts_data_event *e = calloc(1, sz);

	e->hdr.type = TS_EV_DATA;
	e->hdr.size = sz;
	e->hdr.pid = h->pid ? h->pid : 100;
	e->conn_id = id;
	e->enter_ns = ts;
	e->exit_ns = ts + 10;
	e->pos = e->syscall_pos = h->pos[id][dir];
	e->syscall_bytes = len;
	e->data_bytes = captured;
	e->fd = 5;
	e->dir = dir;
	e->syscall = dir ? TS_SYS_WRITE : TS_SYS_READ;
	if (h->tls)
		e->syscall = dir ? TS_SYS_TLS_WRITE : TS_SYS_TLS_READ;
	e->queued_ns = dir == TS_DIR_IN ? h->rx_queued : 0;
	e->last = 1;
	memcpy(e->data, p, captured);
	h->pos[id][dir] += len;
	pipeline_feed(&h->pl, e, sz);
	free(e);
}

static void data_event(struct harness *h, uint64_t id, int dir, const char *s, uint64_t ts)
{
	data_event_cap(h, id, dir, s, strlen(s), strlen(s), ts);
}

static const char *REQ_BODY =
    "{\"model\":\"m1\",\"stream\":true,\"max_tokens\":3,\"messages\":[{\"role\":\"user\","
    "\"content\":\"say \\\"model\\\": \\\"fake\\\" three times\"}],"
    "\"stream_options\":{\"include_usage\":true}}";

static void send_request(struct harness *h, uint64_t id, uint64_t ts)
{
	char req[1024];

	snprintf(req, sizeof(req),
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
		 "application/json\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(REQ_BODY), REQ_BODY);
	data_event(h, id, TS_DIR_IN, req, ts);
}

/* One chunk of any size, in one write. */
static void chunk_big(struct harness *h, uint64_t id, const char *frame, uint64_t ts)
{
	size_t n = strlen(frame);
	char *buf = malloc(n + 32);
	int head = snprintf(buf, 32, "%zx\r\n", n);

	memcpy(buf + head, frame, n);
	memcpy(buf + head + n, "\r\n", 3);
	data_event_cap(h, id, TS_DIR_OUT, buf, head + n + 2, head + n + 2, ts);
	free(buf);
}

static void chunk_dir(struct harness *h, uint64_t id, int dir, const char *frame, uint64_t ts)
{
	char buf[1024];

	snprintf(buf, sizeof(buf), "%zx\r\n%s\r\n", strlen(frame), frame);
	data_event(h, id, dir, buf, ts);
}

static void chunk(struct harness *h, uint64_t id, const char *frame, uint64_t ts)
{
	chunk_dir(h, id, TS_DIR_OUT, frame, ts);
}

#define HEAD_SSE                                                                \
	"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n" \
	"transfer-encoding: chunked\r\n\r\n"
#define ROLE "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
#define TOK "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n"
#define USAGE                                                                           \
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3," \
	"\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n"
#define DONE "data: [DONE]\n\n"

/* A full streamed exchange on connection id: request at t0, tokens at t0+1ms, +2ms, +3ms. */
static void full_stream(struct harness *h, uint64_t id, uint64_t t0)
{
	send_request(h, id, t0);
	data_event(h, id, TS_DIR_OUT, HEAD_SSE, t0 + 100000);
	chunk(h, id, ROLE, t0 + 200000);
	chunk(h, id, TOK, t0 + 1000000);
	chunk(h, id, TOK, t0 + 2000000);
	chunk(h, id, TOK, t0 + 3000000);
	chunk(h, id, USAGE, t0 + 3100000);
	chunk(h, id, DONE, t0 + 3200000);
	data_event(h, id, TS_DIR_OUT, "0\r\n\r\n", t0 + 3300000);
}

static double num(cJSON *o, const char *k)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsNumber(v) ? v->valuedouble : -12345;
}

static const char *str(cJSON *o, const char *k)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsString(v) ? v->valuestring : "(not a string)";
}

static bool is_null(cJSON *o, const char *k)
{
	return cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, k));
}

TEST(test_stream_request)
{
	struct harness h;
	cJSON *r, *tok;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	full_stream(&h, 1, 1000000);
	if (!ASSERT_EQ(h_lines(&h), 1, "one request") || !ASSERT_OK_PTR(h.lines[0], "valid JSON"))
		goto out;
	r = h.lines[0];
	ASSERT_STREQ(str(r, "conn"), "127.0.0.1:8000<-127.0.0.1:40001#1", "conn label");
	ASSERT_STREQ(str(r, "outcome"), "ok", "outcome");
	ASSERT_STREQ(str(r, "format"), "openai-chat", "format");
	ASSERT_STREQ(str(r, "model"), "m1", "model, not the prompt's fake one");
	ASSERT_STREQ(str(r, "method"), "POST", "method");
	ASSERT_STREQ(str(r, "path"), "/v1/chat/completions", "path");
	ASSERT_EQ(num(r, "status"), 200, "status");
	/* arrival = exit of the read (t0 + 10); first token = enter of its write. */
	ASSERT_EQ(num(r, "arrival_ns"), 1000010, "arrival");
	ASSERT_EQ(num(r, "first_token_ns"), 2000000, "first token");
	ASSERT_EQ(num(r, "end_ns"), 4300000, "end at the terminator");
	ASSERT_NEAR(num(r, "ttft_ms"), 0.99999, 0.0006, "ttft");
	ASSERT_EQ(num(r, "tokens"), 3, "tokens");
	ASSERT_STREQ(str(r, "tokens_from"), "usage", "tokens from usage");
	ASSERT_EQ(num(r, "frames"), 3, "content frames: the role frame is not one");
	ASSERT_EQ(num(r, "prompt_tokens"), 7, "prompt tokens");
	ASSERT_EQ(num(r, "cached_tokens"), 2, "cached tokens");
	ASSERT_EQ(num(r, "prompt_bytes"), strlen(REQ_BODY), "prompt bytes");
	ASSERT_NEAR(num(r, "tpot_ms"), 1.0, 1e-9, "tpot");
	ASSERT_NEAR(num(cJSON_GetObjectItem(r, "itl_ms"), "max"), 1.0, 1e-9, "itl max");
	tok = cJSON_GetObjectItem(r, "token_ns");
	ASSERT_EQ(cJSON_GetArraySize(tok), 3, "token_ns");
	ASSERT_EQ(cJSON_GetArrayItem(tok, 2)->valuedouble, 4000000, "third token");
	ASSERT_TRUE(strstr(h.out, "fake") == NULL && strstr(h.out, "three") == NULL,
		    "no prompt text in the output");
out:
	h_close(&h);
}

/* A workload of a container: its full id, whose first 12 digits are the short id. */
static const struct workload in_container = {
	.container_id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
};
/* ... in a Kubernetes pod. */
static const struct workload in_pod = {
	.container_id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	.pod_uid = "12345678-aaaa-bbbb-cccc-0123456789ab",
	.k8s_namespace = "ml",
	.k8s_pod = "vllm-0",
	.k8s_container = "engine",
};

/* A process's pod labels its requests from their start: a sink keys what it keeps open (in
 * flight) by it as it keys what finishes, and the JSON line carries it. */
TEST(test_container_label_from_start)
{
	static const char *const in_flight = "tokenscope_streams_in_flight{model=\"m1\",role="
					     "\"server\",namespace=\"ml\",pod=\"vllm-0\","
					     "container=\"0123456789ab\"} ";
	cJSON *k8s;
	struct prom *p = prom_new(NULL, NULL);
	char *t = NULL, *at;
	struct harness h;
	struct sink s;
	size_t len;

	h_open(&h);
	if (!ASSERT_OK_PTR(p, "prom_new"))
		goto out;
	ASSERT_OK(pipeline_label_process(&h.pl, 100, &in_pod), "label");
	s = prom_sink(p);
	ASSERT_OK(pipeline_add_sink(&h.pl, &s), "sink");
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	send_request(&h, 1, 1000000);
	if (!ASSERT_OK(prom_render(p, &t, &len), "render"))
		goto out;
	at = strstr(t, in_flight);
	ASSERT_TRUE(at && !strncmp(at + strlen(in_flight), "1\n", 2), "in flight, labelled");
	free(t);
	t = NULL;
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 1100000);
	chunk(&h, 1, TOK, 2000000);
	chunk(&h, 1, DONE, 3000000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 3100000);
	if (!ASSERT_OK(prom_render(p, &t, &len), "render"))
		goto out;
	at = strstr(t, in_flight);
	ASSERT_TRUE(at && !strncmp(at + strlen(in_flight), "0\n", 2), "ended on the same series");
	ASSERT_FALSE(strstr(t, "{model=\"m1\",role=\"server\"}"),
		     "no series without the container");
	ASSERT_TRUE(strstr(t, "tokenscope_requests_total{model=\"m1\",role=\"server\","
			      "namespace=\"ml\",pod=\"vllm-0\",container=\"0123456789ab\","
			      "outcome=\"ok\"} 1\n"),
		    "finished, labelled");
	if (!ASSERT_EQ(h_lines(&h), 1, "one request"))
		goto out;
	ASSERT_STREQ(str(h.lines[0], "container"), "0123456789ab", "JSON container");
	k8s = cJSON_GetObjectItem(h.lines[0], "k8s");
	ASSERT_STREQ(str(k8s, "namespace"), "ml", "k8s.namespace");
	ASSERT_STREQ(str(k8s, "pod"), "vllm-0", "k8s.pod");
	ASSERT_STREQ(str(k8s, "pod_uid"), "12345678-aaaa-bbbb-cccc-0123456789ab", "k8s.pod_uid");
	ASSERT_STREQ(str(k8s, "container"), "engine", "k8s.container");
	ASSERT_STREQ(str(k8s, "container_id"), in_pod.container_id, "k8s.container_id");
out:
	free(t);
	prom_free(p);
	h_close(&h);
}

TEST(test_keepalive_and_fd_reuse)
{
	struct harness h;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	full_stream(&h, 1, 1000000);
	full_stream(&h, 1, 9000000);
	conn_event(&h, TS_EV_CONN_CLOSE, 1, 5, 20000000);
	/* Same fd number, new connection id from the kernel. */
	conn_event(&h, TS_EV_CONN_OPEN, 2, 5, 21000000);
	full_stream(&h, 2, 22000000);
	if (!ASSERT_EQ(h_lines(&h), 3, "three requests"))
		goto out;
	ASSERT_EQ(num(h.lines[0], "seq"), 0, "first on conn 1");
	ASSERT_EQ(num(h.lines[1], "seq"), 1, "second on conn 1 (keep-alive)");
	ASSERT_EQ(num(h.lines[2], "seq"), 0, "first on conn 2");
	ASSERT_STREQ(str(h.lines[2], "conn"), "127.0.0.1:8000<-127.0.0.1:40002#2", "new conn");
	for (int i = 0; i < 3; i++)
		ASSERT_STREQ(str(h.lines[i], "outcome"), "ok", "outcome");
	ASSERT_NEAR(num(h.lines[1], "ttft_ms"), 0.99999, 0.0006, "second ttft");
out:
	h_close(&h);
}

TEST(test_lost_record_mid_stream)
{
	struct harness h;
	char frame[256];

	h_open(&h);
	send_request(&h, 1, 1000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 2000);
	chunk(&h, 1, TOK, 3000);
	/* One token frame's record never arrives: only its offsets move. */
	snprintf(frame, sizeof(frame), "%zx\r\n%s\r\n", strlen(TOK), TOK);
	h.pos[1][TS_DIR_OUT] += strlen(frame);
	chunk(&h, 1, TOK, 5000);
	chunk(&h, 1, DONE, 6000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 7000);
	if (!ASSERT_EQ(h_lines(&h), 1, "one request"))
		goto out;
	ASSERT_STREQ(str(h.lines[0], "outcome"), "lost", "outcome says lost");
	ASSERT_EQ(num(h.lines[0], "lost_bytes"), strlen(frame), "exact lost bytes");
	ASSERT_TRUE(h.pl.conns.stats.gap_bytes == strlen(frame), "gap counted");
out:
	h_close(&h);
}

TEST(test_uncaptured_request_body)
{
	struct harness h;
	char req[1024];
	size_t head;

	h_open(&h);
	head = snprintf(req, sizeof(req),
			"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %zu\r\n\r\n%s",
			strlen(REQ_BODY), REQ_BODY);
	/* The capture limit cut the read 20 bytes into the body. */
	data_event_cap(&h, 1, TS_DIR_IN, req, head, head - strlen(REQ_BODY) + 20, 1000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 2000);
	chunk(&h, 1, TOK, 3000);
	chunk(&h, 1, DONE, 4000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 5000);
	if (!ASSERT_EQ(h_lines(&h), 1, "one request"))
		goto out;
	ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "a cut request body is not a lost response");
	ASSERT_EQ(num(h.lines[0], "prompt_bytes"), strlen(REQ_BODY), "prompt bytes");
	ASSERT_STREQ(str(h.lines[0], "model"), "m1", "model read from the captured part");
	ASSERT_EQ(num(h.lines[0], "arrival_ns"), 1010, "arrival");
out:
	h_close(&h);
}

TEST(test_close_mid_stream_aborts)
{
	struct harness h;

	h_open(&h);
	send_request(&h, 1, 1000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 2000);
	chunk(&h, 1, TOK, 3000);
	conn_event(&h, TS_EV_CONN_CLOSE, 1, 5, 9000);
	/* A request read on another connection, then the process exits. */
	send_request(&h, 2, 10000);
	{
		struct ts_proc_event e = { .hdr = { TS_EV_PROC_EXIT, sizeof(e), 100, 100 } };

		e.ts_ns = 12000;
		e.exit_code = 9;
		memcpy(e.comm, "server", 6);
		pipeline_feed(&h.pl, &e, sizeof(e));
	}
	if (!ASSERT_EQ(h_lines(&h), 2, "two requests"))
		goto out;
	ASSERT_STREQ(str(h.lines[0], "outcome"), "aborted", "closed mid-stream");
	ASSERT_EQ(num(h.lines[0], "end_ns"), 9000, "ends at the close");
	ASSERT_EQ(num(h.lines[0], "tokens"), 1, "tokens so far");
	ASSERT_STREQ(str(h.lines[1], "outcome"), "aborted", "server exited");
	ASSERT_TRUE(is_null(h.lines[1], "first_token_ns"), "no token");
	ASSERT_EQ(num(h.lines[1], "status"), 0, "no response");
	ASSERT_TRUE(pipeline_all_exited(&h.pl), "the only process is gone");
	fflush(h.ferr);
	ASSERT_TRUE(h.err && strstr(h.err, "process 100 (server) was killed by signal 9"),
		    "exit reported");
out:
	h_close(&h);
}

TEST(test_errors_and_non_streaming)
{
	struct harness h;
	const char *body = "{\"id\":\"x\",\"object\":\"chat.completion\",\"choices\":[{\"message\":"
			   "{\"content\":\"abc\"}}],\"usage\":{\"prompt_tokens\":4,"
			   "\"completion_tokens\":9}}";
	const char *err = "{\"error\":{\"message\":\"boom\"}}";
	char resp[512];

	h_open(&h);
	send_request(&h, 1, 1000);
	snprintf(
	    resp, sizeof(resp),
	    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
	    strlen(body), body);
	data_event(&h, 1, TS_DIR_OUT, resp, 5000);
	send_request(&h, 1, 6000);
	snprintf(resp, sizeof(resp),
		 "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
		 "Content-Length: %zu\r\n\r\n%s",
		 strlen(err), err);
	data_event(&h, 1, TS_DIR_OUT, resp, 7000);
	send_request(&h, 1, 8000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 9000);
	chunk(&h, 1, TOK, 9500);
	chunk(&h, 1, "data: {\"error\":{\"message\":\"injected\",\"code\":500}}\n\n", 10000);
	chunk(&h, 1, DONE, 10500);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 11000);
	if (!ASSERT_EQ(h_lines(&h), 3, "three requests"))
		goto out;
	ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "non-streaming ok");
	ASSERT_EQ(num(h.lines[0], "tokens"), 9, "tokens from usage");
	ASSERT_STREQ(str(h.lines[0], "tokens_from"), "usage", "from usage");
	ASSERT_TRUE(is_null(h.lines[0], "ttft_ms"), "no TTFT without a stream");
	ASSERT_NEAR(num(h.lines[0], "e2e_ms"), 0.00399, 0.0006, "e2e");
	ASSERT_STREQ(str(h.lines[1], "outcome"), "http_error", "500");
	ASSERT_EQ(num(h.lines[1], "status"), 500, "status");
	ASSERT_STREQ(str(h.lines[2], "outcome"), "stream_error", "error frame");
out:
	h_close(&h);
}

TEST(test_ignores_other_protocols)
{
	struct harness h;

	h_open(&h);
	/* Binary garbage read first: not an HTTP server connection. */
	data_event(&h, 1, TS_DIR_IN, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 1000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 2000);
	/* The traced process sends a request: it is the client here (its stream not ended). */
	data_event(&h, 2, TS_DIR_OUT, "POST /v1/completions HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
		   3000);
	data_event(&h, 2, TS_DIR_IN, HEAD_SSE, 4000);
	ASSERT_EQ(h_lines(&h), 0, "no requests");
	ASSERT_EQ(h.pl.conns.stats.ignored_conns, 1, "the garbage ignored");
	ASSERT_EQ(h.pl.conns.stats.client_conns, 1, "the other a client's");
	ASSERT_EQ(h.pl.conns.stats.http_conns, 0, "no HTTP server connection");
	ASSERT_EQ(conn_inflight(&h.pl.conns), 0, "a client's stream is not in flight");
	h_close(&h);
}

TEST(test_joined_mid_connection)
{
	struct harness h;

	h_open(&h);
	/* Attached in the middle of a response: the first record starts at offset 5000. */
	h.pos[1][TS_DIR_OUT] = 5000;
	h.pos[1][TS_DIR_IN] = 300;
	chunk(&h, 1, TOK, 1000);
	chunk(&h, 1, DONE, 2000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 3000);
	full_stream(&h, 1, 10000);
	if (!ASSERT_EQ(h_lines(&h), 2, "the joined response, then the request seen whole"))
		goto out;
	ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(h.lines[0], "joined")), "joined");
	ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "joined: ended");
	ASSERT_TRUE(!cJSON_GetObjectItem(h.lines[1], "joined"), "the next is whole");
	ASSERT_STREQ(str(h.lines[1], "outcome"), "ok", "outcome");
	ASSERT_EQ(h.pl.conns.stats.gap_bytes, 0, "joining is not a loss");
out:
	h_close(&h);
}

/*
 * Tracing began in the middle of a response (attach, or --all finding the server by its
 * traffic): the kernel numbers a connection from where it first saw it, so the first record is
 * a write at offset 0 that is no response head. A write that starts a stream frame makes it a
 * server's response joined mid-stream: reported from there (joined, its request, arrival and
 * TTFT unknown, its tokens those seen, or usage's), and counted for its server. The next request
 * on the same keep-alive connection is reported whole.
 */
TEST(test_joined_mid_response_at_offset_zero)
{
	struct pipeline_status st;
	struct harness h;

	h_open(&h);
	chunk(&h, 1, TOK, 1000);
	chunk(&h, 1, TOK, 2000);
	chunk(&h, 1, DONE, 3000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 4000);
	if (!ASSERT_EQ(h_lines(&h), 1, "the response in flight is reported"))
		goto out;
	ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(h.lines[0], "joined")), "joined");
	ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "its end was seen");
	ASSERT_EQ(num(h.lines[0], "tokens"), 2, "the tokens seen");
	ASSERT_STREQ(str(h.lines[0], "tokens_from"), "frames", "counted from frames");
	ASSERT_EQ(num(h.lines[0], "end_ns"), 4000, "its end");
	ASSERT_EQ(num(h.lines[0], "first_token_ns"), 1000, "the first token seen");
	ASSERT_TRUE(is_null(h.lines[0], "arrival_ns") && is_null(h.lines[0], "ttft_ms") &&
			is_null(h.lines[0], "e2e_ms") && is_null(h.lines[0], "tpot_ms") &&
			is_null(h.lines[0], "method") && is_null(h.lines[0], "path") &&
			is_null(h.lines[0], "ttft_first_byte_ms"),
		    "what needs its start is null");
	ASSERT_EQ(num(cJSON_GetObjectItem(h.lines[0], "itl_ms"), "max"), 0, "ITL of 1 us");
	ASSERT_EQ(num(h.lines[0], "seq"), 0, "the connection's first");
	full_stream(&h, 1, 10000);
	if (!ASSERT_EQ(h_lines(&h), 2, "the next request is"))
		goto out;
	ASSERT_TRUE(!cJSON_GetObjectItem(h.lines[1], "joined"), "seen whole");
	ASSERT_STREQ(str(h.lines[1], "outcome"), "ok", "outcome");
	ASSERT_EQ(num(h.lines[1], "tokens"), 3, "tokens");
	ASSERT_EQ(num(h.lines[1], "frames"), 3, "content frames");
	ASSERT_EQ(num(h.lines[1], "seq"), 1, "the connection's second");
	ASSERT_EQ(h.pl.conns.stats.http_conns, 1, "an HTTP server connection");
	ASSERT_EQ(h.pl.conns.stats.ignored_conns, 0, "not ignored");
	ASSERT_EQ(h.pl.conns.stats.gap_bytes, 0, "joining is not a loss");
	ASSERT_EQ(h.pl.conns.stats.joined_reported, 1, "one reported from mid-stream");
	pipeline_status(&h.pl, &st);
	if (ASSERT_EQ(st.joined.n, 1, "one server"))
		ASSERT_TRUE(st.joined.s[0].pid == 100 && st.joined.s[0].in_flight == 1 &&
				st.joined.s[0].reported == 1,
			    "pid 100: 1 in flight, reported");
out:
	h_close(&h);
}

/*
 * A joined stream whose usage came (vLLM's and OpenAI's last frame with include_usage): its
 * tokens are usage's, all of them; tokens per chunk is unknown (the frames before were not
 * seen). A write delimited by no chunk-size line is taken for a body that ends at the close;
 * a request line on the connection says it ended before (it was chunked after all, its
 * terminator a write of its own): the response is finished there, complete as its [DONE] says,
 * and the next one followed from its head.
 */
TEST(test_joined_usage_and_unchunked)
{
	struct harness h;

	h_open(&h);
	data_event(&h, 1, TS_DIR_OUT, TOK, 1000);
	data_event(&h, 1, TS_DIR_OUT, USAGE, 2000);
	data_event(&h, 1, TS_DIR_OUT, DONE, 3000);
	ASSERT_EQ(h_lines(&h), 0, "open until its end");
	full_stream(&h, 1, 10000);
	if (!ASSERT_EQ(h_lines(&h), 2, "the joined one ended by the next request, and it"))
		goto out;
	ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(h.lines[0], "joined")), "joined");
	ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "its [DONE] came");
	ASSERT_EQ(num(h.lines[0], "end_ns"), 3000, "ends at its [DONE]");
	ASSERT_EQ(num(h.lines[0], "tokens"), 3, "usage's count");
	ASSERT_STREQ(str(h.lines[0], "tokens_from"), "usage", "from usage");
	ASSERT_TRUE(is_null(h.lines[0], "tokens_per_chunk"), "per chunk unknown");
	ASSERT_STREQ(str(h.lines[1], "outcome"), "ok", "the next one whole");
	ASSERT_EQ(num(h.lines[1], "tokens"), 3, "its tokens");
	ASSERT_TRUE(!is_null(h.lines[1], "ttft_ms"), "with its TTFT");
out:
	h_close(&h);
}

/*
 * What is counted per server: a joined connection whose bytes are no frame start (a request
 * body being read, a chunk's tail) is in flight and not reported; one on which the traced
 * process turns out a client is no server's; a connection of a process forked by the root
 * counts for the root.
 */
TEST(test_joined_per_server)
{
	struct pipeline_status st;
	struct ts_proc_event f = { .hdr = { TS_EV_PROC_FORK, sizeof(f), 101, 101 }, .ppid = 100 };
	struct harness h;

	h_open(&h);
	pipeline_feed(&h.pl, &f, sizeof(f));
	/* 1: a request body's tail read, then its response: in flight, not reported */
	data_event(&h, 1, TS_DIR_IN, "\"stream\":true}", 1000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 2000);
	/* 2: a pooled upstream's response read, then the process's next request written */
	data_event(&h, 2, TS_DIR_IN, "\r\n", 3000);
	data_event(&h, 2, TS_DIR_OUT,
		   "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		   4000);
	/* 3: a joined stream of the child, 101 */
	h.pid = 101;
	chunk(&h, 3, TOK, 5000);
	data_event(&h, 3, TS_DIR_OUT, "0\r\n\r\n", 6000);
	h.pid = 100;
	pipeline_status(&h.pl, &st);
	if (ASSERT_EQ(st.joined.n, 1, "one server: the root"))
		ASSERT_TRUE(st.joined.s[0].pid == 100 && st.joined.s[0].in_flight == 2 &&
				st.joined.s[0].reported == 1,
			    "1 and 3 in flight, 3 reported; 2 a client's");
	h_print_total(&h);
	fflush(h.ferr);
	ASSERT_TRUE(strstr(h.err, "in flight when tracing began: 2, reported from mid-response: "
				  "1, not reported: 1 (pid 100: 1)\n") != NULL,
		    "the summary's line");
	h_close(&h);
}

/* Past JOINED_SERVERS_MAX servers, the rest share one entry (pid 0), however many come: 20
 * roots (--all's found servers), each with a response joined mid-stream. */
TEST(test_joined_servers_cap)
{
	struct pipeline_status st;
	struct harness h;

	h_open(&h);
	for (uint32_t k = 0; k < 20; k++) {
		pipeline_add_process(&h.pl, 1000 + k, true);
		h.pid = 1000 + k;
		chunk(&h, 20 + k, TOK, 1000 + k);
	}
	pipeline_status(&h.pl, &st);
	if (ASSERT_EQ(st.joined.n, JOINED_SERVERS_MAX + 1, "16 servers and the rest"))
		ASSERT_TRUE(st.joined.s[JOINED_SERVERS_MAX].pid == 0 &&
				st.joined.s[JOINED_SERVERS_MAX].in_flight == 4 &&
				st.joined.s[0].pid == 1000 && st.joined.s[0].in_flight == 1,
			    "4 past the cap together, the first on its own");
	h_close(&h);
}

/*
 * The traced process calls an upstream (a gateway, an SDK): its request goes out, the stream
 * comes in. It is reported with role client, conn local->upstream, times of its own write and
 * reads; the summaries (servers' requests) do not count it.
 */
TEST(test_client_request)
{
	char req[1024];
	struct harness h;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	snprintf(req, sizeof(req),
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: up\r\nContent-Type: "
		 "application/json\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(REQ_BODY), REQ_BODY);
	data_event(&h, 1, TS_DIR_OUT, req, 1000000);
	/* The reads of the response carry the kernel's socket arrival, which is no request's. */
	h.rx_queued = 1050000;
	data_event(&h, 1, TS_DIR_IN, HEAD_SSE, 1100000);
	/* Each frame read at t; the record's exit time is t + 10 (data_event_cap). */
	chunk_dir(&h, 1, TS_DIR_IN, ROLE, 1200000);
	chunk_dir(&h, 1, TS_DIR_IN, TOK, 2000000);
	chunk_dir(&h, 1, TS_DIR_IN, TOK, 3000000);
	chunk_dir(&h, 1, TS_DIR_IN, DONE, 3400000);
	data_event(&h, 1, TS_DIR_IN, "0\r\n\r\n", 3500000);
	/* The pooled connection's next requests: no socket arrival either. */
	for (uint64_t t = 4000000; t <= 5000000; t += 1000000) {
		data_event(&h, 1, TS_DIR_OUT, req, t);
		data_event(&h, 1, TS_DIR_IN, HEAD_SSE, t + 100000);
		chunk_dir(&h, 1, TS_DIR_IN, DONE, t + 400000);
		data_event(&h, 1, TS_DIR_IN, "0\r\n\r\n", t + 500000);
	}
	h.rx_queued = 0;
	if (!ASSERT_EQ(h_lines(&h), 3, "the client's requests"))
		goto out;
	for (int i = 1; i < 3; i++) {
		ASSERT_EQ(num(h.lines[i], "arrival_ns"), 3000000 + 1000000 * i,
			  "sent at its write");
		ASSERT_TRUE(is_null(h.lines[i], "received_ns"), "nor for its next requests");
		ASSERT_TRUE(is_null(h.lines[i], "socket_wait_ms"), "no socket wait for a client");
	}
	ASSERT_STREQ(str(h.lines[0], "role"), "client", "role");
	ASSERT_TRUE(strstr(str(h.lines[0], "conn"), ":8000->127.0.0.1:40001#1") != NULL,
		    "conn local->upstream");
	ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "outcome");
	ASSERT_EQ(num(h.lines[0], "tokens"), 2, "tokens");
	ASSERT_EQ(num(h.lines[0], "arrival_ns"), 1000000, "sent: its write's entry");
	ASSERT_EQ(num(h.lines[0], "first_token_ns"), 2000010, "first token: the read's return");
	ASSERT_EQ(num(h.lines[0], "end_ns"), 3500010, "end: the read of the terminator");
	ASSERT_TRUE(is_null(h.lines[0], "received_ns"), "no socket arrival for a client");
	ASSERT_STREQ(str(h.lines[0], "attribution_how"),
		     "none: a request the traced process made as a client", "no GPU attribution");
	ASSERT_EQ(h.pl.conns.stats.client_conns, 1, "a client connection");
	h_print_total(&h);
	fflush(h.ferr);
	ASSERT_TRUE(strstr(h.err, "--- summary: 0 requests") != NULL,
		    "the summary counts servers'");
	ASSERT_TRUE(strstr(h.err, "; 1 calling an HTTP server (requests with role client)") != NULL,
		    "and says there was a client connection");
	full_stream(&h, 2, 10000000);
	if (ASSERT_EQ(h_lines(&h), 4, "and a server's request"))
		ASSERT_STREQ(str(h.lines[3], "role"), "server", "role server");
out:
	h_close(&h);
}

/* The kernel's word that a connection carries TLS: a record without bytes. */
static void tls_marker(struct harness *h, uint64_t id, uint64_t ts)
{
	struct ts_data_event e = { 0 };

	e.hdr.type = TS_EV_DATA;
	e.hdr.size = sizeof(e);
	e.hdr.pid = 100;
	e.conn_id = id;
	e.enter_ns = e.exit_ns = ts;
	e.fd = 5;
	e.dir = TS_DIR_IN;
	e.syscall = TS_SYS_READ;
	e.status = TS_DATA_TLS;
	pipeline_feed(&h->pl, &e, sizeof(e));
}

/* A TLS connection: the kernel marks it, its plaintext comes from the library's calls, and the
 * request is reported as over TLS, whole. */
TEST(test_tls_plaintext)
{
	struct harness h;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	tls_marker(&h, 1, 600);
	h.tls = true;
	full_stream(&h, 1, 1000);
	if (!ASSERT_EQ(h_lines(&h), 1, "one request"))
		goto out;
	ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "outcome");
	ASSERT_EQ(num(h.lines[0], "tokens"), 3, "tokens");
	ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(h.lines[0], "tls")),
		    "\"tls\":true");
	ASSERT_EQ(h.pl.conns.stats.tls_conns, 1, "one TLS connection");
	conn_event(&h, TS_EV_CONN_CLOSE, 1, 5, 10000000);
	ASSERT_EQ(h.pl.conns.stats.tls_unread, 0, "its plaintext came");
	ASSERT_EQ(h.pl.conns.stats.conns, 1, "one connection");
out:
	h_close(&h);
}

/* A TLS connection whose plaintext never comes (no TLS library hooked): counted, and said in the
 * summary; a plain connection's request has no "tls" field. */
TEST(test_tls_unread)
{
	struct harness h;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	tls_marker(&h, 1, 600);
	conn_event(&h, TS_EV_CONN_CLOSE, 1, 5, 700);
	full_stream(&h, 2, 1000);
	if (!ASSERT_EQ(h_lines(&h), 1, "the plain request only"))
		goto out;
	ASSERT_TRUE(!cJSON_GetObjectItemCaseSensitive(h.lines[0], "tls"), "no tls field");
	ASSERT_EQ(h.pl.conns.stats.tls_conns, 1, "one TLS connection");
	ASSERT_EQ(h.pl.conns.stats.tls_unread, 1, "ended with no plaintext");
	h_print_total(&h);
	fflush(h.ferr);
	ASSERT_TRUE(strstr(h.err, "1 carried TLS, of which 1 ended with no plaintext seen") != NULL,
		    "the summary says so");
	ASSERT_TRUE(strstr(h.err, "  tls: 0 socket writes of TLS records; 0 TLS calls whose "
				  "socket was not found (their plaintext lost)\n") != NULL,
		    "and its tls line");
out:
	h_close(&h);
}

/*
 * Joined in the middle of a TLS record, the kernel could not tell TLS and sent encrypted bytes;
 * the plaintext that follows starts the connection again (one connection still), and its next
 * request is reported whole.
 */
TEST(test_tls_after_ciphertext)
{
	struct harness h;

	h_open(&h);
	data_event(&h, 1, TS_DIR_IN, "\x8a\x11\x02garbage\xff", 1000);
	data_event(&h, 1, TS_DIR_OUT, "\x17\x03\x03\x00\x10more", 2000);
	ASSERT_EQ(h.pl.conns.stats.ignored_conns, 1, "the ciphertext is no HTTP");
	/* The tail of a request whose start was ciphertext, then the next one whole. */
	h.tls = true;
	data_event(&h, 1, TS_DIR_IN, "\"max_tokens\":3}", 3000);
	full_stream(&h, 1, 10000);
	if (!ASSERT_EQ(h_lines(&h), 1, "the next request"))
		goto out;
	ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "outcome");
	ASSERT_EQ(num(h.lines[0], "tokens"), 3, "tokens");
	ASSERT_EQ(h.pl.conns.stats.tls_conns, 1, "one TLS connection");
	ASSERT_EQ(h.pl.conns.stats.conns, 1, "still one connection");
	ASSERT_EQ(h.pl.conns.stats.gap_bytes, 0, "starting again is no loss");
out:
	h_close(&h);
}

/* A server that speaks first in another protocol: ignored once its first read is no request. */
TEST(test_server_speaks_first_ignored)
{
	struct harness h;

	h_open(&h);
	/* A MySQL-style greeting, then the client's binary login packet. */
	data_event(&h, 1, TS_DIR_OUT, "J\x01\x01\x01\x0a-greeting 8.0.36", 1000);
	data_event(&h, 1, TS_DIR_IN, "\x85\xa6\x03\x01login", 2000);
	data_event(&h, 1, TS_DIR_OUT, "\x07\x01\x02\x01ok", 3000);
	send_request(&h, 1, 4000);
	ASSERT_EQ(h_lines(&h), 0, "no requests");
	ASSERT_EQ(h.pl.conns.stats.ignored_conns, 1, "ignored");
	ASSERT_EQ(h.pl.conns.stats.http_conns, 0, "no HTTP server connection");
	h_close(&h);
}

TEST(test_frames_split_at_every_byte)
{
	char resp[2048];
	size_t n;

	n = snprintf(resp, sizeof(resp), "%s%zx\r\n%s\r\n%zx\r\n%s\r\n%zx\r\n%s\r\n0\r\n\r\n",
		     HEAD_SSE, strlen(TOK), TOK, strlen(TOK), TOK, strlen(DONE), DONE);
	for (size_t cut = 1; cut < n; cut++) {
		struct harness h;
		cJSON *tok;

		h_open(&h);
		send_request(&h, 1, 1000);
		data_event_cap(&h, 1, TS_DIR_OUT, resp, cut, cut, 2000);
		data_event_cap(&h, 1, TS_DIR_OUT, resp + cut, n - cut, n - cut, 3000);
		if (!ASSERT_EQ(h_lines(&h), 1, "one request")) {
			printf("  cut at %zu\n", cut);
			h_close(&h);
			return;
		}
		tok = cJSON_GetObjectItem(h.lines[0], "token_ns");
		ASSERT_EQ(cJSON_GetArraySize(tok), 2, "two tokens");
		/* A token's time is the write that completed its frame. */
		char hex[16];
		size_t frame_end = strlen(HEAD_SSE) +
				   snprintf(hex, sizeof(hex), "%zx\r\n", strlen(TOK)) + strlen(TOK);
		ASSERT_EQ(cJSON_GetArrayItem(tok, 0)->valuedouble, cut >= frame_end ? 2000 : 3000,
			  "first token time");
		ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "outcome");
		h_close(&h);
		if (check_cur_failed) {
			printf("  cut at %zu\n", cut);
			return;
		}
	}
}

/* A zero-byte record: the kernel saw a read return 0 (EOF). */
static void eof_event(struct harness *h, uint64_t id, uint64_t ts)
{
	struct ts_data_event e = { .hdr = { TS_EV_DATA, sizeof(e), 100, 100 } };

	e.conn_id = id;
	e.enter_ns = ts;
	e.exit_ns = ts + 10;
	e.pos = e.syscall_pos = h->pos[id][TS_DIR_IN];
	e.dir = TS_DIR_IN;
	e.syscall = TS_SYS_READ;
	e.last = 1;
	e.status = TS_DATA_EOF;
	pipeline_feed(&h->pl, &e, sizeof(e));
}

TEST(test_client_hangup_is_aborted)
{
	struct harness h;

	h_open(&h);
	/* The client leaves after one token; the server still ends the chunked body. */
	send_request(&h, 1, 1000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 2000);
	chunk(&h, 1, TOK, 3000);
	eof_event(&h, 1, 3500);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 4000);
	/* On another connection the client leaves after [DONE], before the terminator. */
	send_request(&h, 2, 5000);
	data_event(&h, 2, TS_DIR_OUT, HEAD_SSE, 6000);
	chunk(&h, 2, TOK, 7000);
	chunk(&h, 2, DONE, 8000);
	eof_event(&h, 2, 8500);
	data_event(&h, 2, TS_DIR_OUT, "0\r\n\r\n", 9000);
	if (!ASSERT_EQ(h_lines(&h), 2, "two requests"))
		goto out;
	ASSERT_STREQ(str(h.lines[0], "outcome"), "aborted", "hung up mid-stream");
	ASSERT_EQ(num(h.lines[0], "tokens"), 1, "tokens before the hang-up");
	ASSERT_STREQ(str(h.lines[1], "outcome"), "ok", "hung up after [DONE]");
out:
	h_close(&h);
}

TEST(test_kernel_losses_at_exit)
{
	struct harness h;

	h_open(&h);
	/* Two streams open when the kernel reports lost records; one ends whole after that. */
	send_request(&h, 1, 1000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 2000);
	chunk(&h, 1, TOK, 3000);
	send_request(&h, 2, 1500);
	data_event(&h, 2, TS_DIR_OUT, HEAD_SSE, 2500);
	pipeline_kernel_lost(&h.pl, 5);
	chunk(&h, 2, TOK, 4000);
	chunk(&h, 2, DONE, 4500);
	data_event(&h, 2, TS_DIR_OUT, "0\r\n\r\n", 5000);
	/* A request that starts after the loss is not suspect. */
	send_request(&h, 3, 6000);
	pipeline_finish(&h.pl);
	if (!ASSERT_EQ(h_lines(&h), 2, "the whole one, and the one whose end never came"))
		goto out;
	ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "ended whole after the loss");
	ASSERT_STREQ(str(h.lines[1], "outcome"), "lost", "its end may be in a lost record");
	ASSERT_EQ(num(h.lines[1], "tokens"), 1, "what was seen");
	ASSERT_EQ(num(h.lines[1], "end_ns"), 3000, "ends at the last record seen");
	ASSERT_EQ(conn_inflight(&h.pl.conns), 1, "the later request stays open, counted");
out:
	h_close(&h);
}

TEST(test_bad_records_are_counted)
{
	struct harness h;
	uint8_t junk[64];
	struct ts_data_event e = { .hdr = { TS_EV_DATA, sizeof(e) + 10, 100, 100 } };

	h_open(&h);
	memset(junk, 0xab, sizeof(junk));
	ASSERT_TRUE(pipeline_feed(&h.pl, junk, sizeof(junk)) < 0, "garbage refused");
	ASSERT_TRUE(pipeline_feed(&h.pl, junk, 3) < 0, "short record refused");
	/* Claims 10 data bytes but carries none. */
	ASSERT_TRUE(pipeline_feed(&h.pl, &e, sizeof(e)) < 0, "size mismatch refused");
	ASSERT_EQ(h.pl.bad_records, 3, "counted");
	h_close(&h);
}

#define PLAIN_REQ "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
#define PLAIN_RESP "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

/*
 * received_ns: the socket arrival the kernel reports for the read that brought a request's
 * first bytes; socket_wait_ms: from there to arrival_ns. Unknown (0) arrivals print null, and a
 * request's later reads never move it.
 */
TEST(test_socket_arrival)
{
	struct harness h;
	char req[1024];
	size_t head;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	/* Read at 1 ms, its bytes in the socket since 0.9 ms. */
	h.rx_queued = 900000;
	full_stream(&h, 1, 1000000);
	/* Head and body in two reads: the head's read counts, the body's (unknown) does not. */
	snprintf(req, sizeof(req),
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(REQ_BODY), REQ_BODY);
	head = strstr(req, "\r\n\r\n") + 4 - req;
	h.rx_queued = 4000000;
	data_event_cap(&h, 1, TS_DIR_IN, req, head, head, 5000000);
	h.rx_queued = 0;
	data_event_cap(&h, 1, TS_DIR_IN, req + head, strlen(req) - head, strlen(req) - head,
		       6000000);
	data_event(&h, 1, TS_DIR_OUT, PLAIN_RESP, 7000000);
	/* Arrival unknown. */
	data_event(&h, 1, TS_DIR_IN, PLAIN_REQ, 8000000);
	data_event(&h, 1, TS_DIR_OUT, PLAIN_RESP, 8500000);
	/* Two pipelined requests in one read: both reached the socket by the same time. */
	h.rx_queued = 8800000;
	data_event(&h, 1, TS_DIR_IN, PLAIN_REQ PLAIN_REQ, 9000000);
	data_event(&h, 1, TS_DIR_OUT, PLAIN_RESP PLAIN_RESP, 9500000);
	/* A time after the read's own is not believed. */
	h.rx_queued = 20000000;
	data_event(&h, 1, TS_DIR_IN, PLAIN_REQ, 10000000);
	data_event(&h, 1, TS_DIR_OUT, PLAIN_RESP, 10500000);
	if (!ASSERT_EQ(h_lines(&h), 6, "six requests"))
		goto out;
	ASSERT_EQ(num(h.lines[0], "received_ns"), 900000, "received");
	ASSERT_NEAR(num(h.lines[0], "socket_wait_ms"), 0.10001, 0.0006, "wait to the read's exit");
	ASSERT_NEAR(num(h.lines[0], "ttft_ms"), 0.99999, 0.0006, "ttft still from the read");
	ASSERT_EQ(num(h.lines[1], "received_ns"), 4000000, "the head's read");
	ASSERT_NEAR(num(h.lines[1], "socket_wait_ms"), 2.00001, 0.0006, "to the body's read");
	ASSERT_TRUE(is_null(h.lines[2], "received_ns") && is_null(h.lines[2], "socket_wait_ms"),
		    "unknown: null");
	ASSERT_EQ(num(h.lines[3], "received_ns"), 8800000, "pipelined, first");
	ASSERT_EQ(num(h.lines[4], "received_ns"), 8800000, "pipelined, second");
	ASSERT_TRUE(is_null(h.lines[5], "received_ns"), "after the read: null");
out:
	h_close(&h);
}

static void proc_exit(struct pipeline *pl, uint32_t pid)
{
	struct ts_proc_event e = { .hdr = { TS_EV_PROC_EXIT, sizeof(e), pid, pid } };

	e.ts_ns = 5000;
	memcpy(e.comm, "server", 6);
	pipeline_feed(pl, &e, sizeof(e));
}

/*
 * Roots: with --all (keep_running) an exited server frees its slot, so a node agent running for
 * days follows new servers past the limit; with -p the roots stay and tell when all are gone.
 */
TEST(test_root_slots)
{
	struct harness h;

	h_open(&h); /* root 100 */
	h.pl.keep_running = true;
	for (uint32_t pid = 1000; h.pl.nroots < PIPELINE_MAX_ROOTS; pid++)
		ASSERT_OK(pipeline_add_process(&h.pl, pid, true), "a root");
	ASSERT_EQ(pipeline_add_process(&h.pl, 5000, true), -E2BIG, "full");
	proc_exit(&h.pl, 1003);
	ASSERT_OK(pipeline_add_process(&h.pl, 5000, true), "an exited root's slot is free");
	ASSERT_EQ(pipeline_add_process(&h.pl, 5001, true), -E2BIG, "one slot only");
	pipeline_forget_process(&h.pl, 5000);
	ASSERT_OK(pipeline_add_process(&h.pl, 5001, true), "a forgotten root's slot is free");
	ASSERT_FALSE(pipeline_all_exited(&h.pl), "--all never ends by itself");
	h_close(&h);

	h_open(&h);
	proc_exit(&h.pl, 100);
	ASSERT_EQ(h.pl.nroots, 1, "-p: the root stays");
	ASSERT_TRUE(pipeline_all_exited(&h.pl), "-p: all gone");
	h_close(&h);
}

static void proc_fork(struct pipeline *pl, uint32_t pid, uint32_t ppid)
{
	struct ts_proc_event e = { .hdr = { TS_EV_PROC_FORK, sizeof(e), pid, pid } };

	e.ts_ns = 4000;
	e.ppid = ppid;
	pipeline_feed(pl, &e, sizeof(e));
}

/*
 * A pre-forking server under --all: children forked while requests are in flight inherit the
 * container (the parent's label is copied before the list grows under it: ASan saw a
 * use-after-free there), and an exited child takes its entry with it, so a server forking for
 * days leaves as many entries as it has processes alive.
 */
TEST(test_fork_labels_bounded)
{
	struct prom *p = prom_new(NULL, NULL);
	struct harness h;
	char *t = NULL;
	size_t cap, len;
	struct sink s;
	cJSON *r;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	h_open(&h); /* root 100 */
	s = prom_sink(p);
	pipeline_add_sink(&h.pl, &s);
	h.pl.keep_running = true;
	ASSERT_OK(pipeline_label_process(&h.pl, 100, &in_container), "label the root");
	ASSERT_EQ(pipeline_label_process(&h.pl, 99, &in_container), -ENOENT, "not traced");
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	send_request(&h, 1, 1000000);
	/* Enough children at once that the list is reallocated several times. */
	for (uint32_t pid = 200; pid < 300; pid++)
		proc_fork(&h.pl, pid, 100);
	ASSERT_EQ(h.pl.nlive, 101, "root and children alive");
	for (uint32_t i = 0; i < h.pl.nlive; i++)
		if (!ASSERT_STREQ(h.pl.live[i].wl.container_id, in_container.container_id,
				  "inherited"))
			break;
	for (uint32_t pid = 200; pid < 300; pid++)
		proc_exit(&h.pl, pid);
	cap = h.pl.live_cap;
	/* Days of forks: a child at a time, each exiting, pids wrapping. */
	for (uint32_t n = 0; n < 100000; n++) {
		uint32_t pid = 1000 + n % 30000;

		proc_fork(&h.pl, pid, 100);
		proc_fork(&h.pl, pid + 40000, pid);
		proc_exit(&h.pl, pid + 40000);
		proc_exit(&h.pl, pid);
	}
	ASSERT_EQ(h.pl.nlive, 1, "only the root is left");
	ASSERT_EQ(h.pl.live_cap, cap, "the list did not grow");
	pipeline_tick(&h.pl);
	if (ASSERT_OK(prom_render(p, &t, &len), "render"))
		ASSERT_TRUE(strstr(t, "\ntokenscope_traced_processes 1\n"), "the gauge says so");
	free(t);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 1100000);
	chunk(&h, 1, TOK, 2000000);
	chunk(&h, 1, DONE, 3000000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 3100000);
	if (ASSERT_EQ(h_lines(&h), 1, "the request in flight") &&
	    ASSERT_OK_PTR(r = h.lines[0], "valid JSON")) {
		ASSERT_STREQ(str(r, "container"), "0123456789ab", "labelled");
		ASSERT_STREQ(str(r, "outcome"), "ok", "ok");
	}
	h_close(&h);
	prom_free(p);
}

/* Bytes from traffic that are not printable UTF-8 are replaced before any sink sees them. */
TEST(test_hostile_strings)
{
	static const char body[] = "{\"model\":\"a\\u001b[31mb\\nc\xff\xc3\",\"stream\":true}";
	char req[512];
	struct harness h;
	cJSON *r;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	snprintf(req, sizeof(req),
		 "POST /v1/chat/completions?\x1b]0;x\x07\xfe HTTP/1.1\r\nContent-Type: "
		 "application/json\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(body), body);
	data_event(&h, 1, TS_DIR_IN, req, 1000000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 1100000);
	chunk(&h, 1, TOK, 2000000);
	chunk(&h, 1, DONE, 3000000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 3100000);
	if (ASSERT_EQ(h_lines(&h), 1, "one request") &&
	    ASSERT_OK_PTR(r = h.lines[0], "valid JSON")) {
		ASSERT_STREQ(str(r, "model"),
			     "a\xef\xbf\xbd[31mb\xef\xbf\xbd"
			     "c\xef\xbf\xbd\xef\xbf\xbd",
			     "model: controls and bad bytes replaced");
		ASSERT_STREQ(str(r, "path"),
			     "/v1/chat/completions?\xef\xbf\xbd]0;x\xef\xbf\xbd\xef\xbf\xbd",
			     "path: likewise");
	}
	ASSERT_FALSE(memchr(h.out, 0x1b, h.out_len), "no escape byte in the output");
	h_close(&h);
}

/* An HPACK literal header field without indexing, new name (no Huffman), at p. */
static size_t hpack_literal(uint8_t *p, const char *name, const char *value)
{
	size_t n = strlen(name), v = strlen(value);

	p[0] = 0;
	p[1] = n;
	memcpy(p + 2, name, n);
	p[2 + n] = v;
	memcpy(p + 3 + n, value, v);
	return 3 + n + v;
}

/* An HTTP/2 frame header at p: 24-bit length, type, flags, stream. */
static size_t h2_frame(uint8_t *p, size_t len, uint8_t type, uint8_t flags, uint32_t stream)
{
	p[0] = len >> 16, p[1] = len >> 8, p[2] = len;
	p[3] = type, p[4] = flags;
	p[5] = stream >> 24, p[6] = stream >> 16, p[7] = stream >> 8, p[8] = stream;
	return 9;
}

/*
 * HPACK values are not validated by a lenient HTTP/2 server: a :method with an escape
 * sequence (clear the screen, set the title) reached the text request line raw. It is made
 * printable where it enters the request, and the text line cuts it at a character.
 */
TEST(test_h2_hostile_method)
{
	static const char method[] = "\x1b[2J\x1b]0;pwned\x07POST";
	static const char sse[] = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
	uint8_t req[512], resp[512], block[256];
	size_t n = 0, b = 0, r = 0;
	char *text = NULL;
	size_t text_len = 0;
	FILE *ft = open_memstream(&text, &text_len);
	struct lines tl;
	struct harness h;
	struct sink ls;

	h_open(&h);
	lines_init(&tl, &(struct lines_opts){ .out = ft });
	ls = lines_sink(&tl);
	pipeline_add_sink(&h.pl, &ls);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	memcpy(req, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
	n = 24;
	n += h2_frame(req + n, 0, 4, 0, 0); /* SETTINGS */
	b += hpack_literal(block + b, ":method", method);
	b += hpack_literal(block + b, ":scheme", "http");
	b += hpack_literal(block + b, ":path", "/v1/chat/completions");
	b += hpack_literal(block + b, ":authority", "x");
	n += h2_frame(req + n, b, 1, 0x5, 1); /* HEADERS, END_STREAM | END_HEADERS */
	memcpy(req + n, block, b);
	n += b;
	data_event_cap(&h, 1, TS_DIR_IN, req, n, n, 1000000);
	r += h2_frame(resp + r, 0, 4, 0, 0);
	b = 0;
	b += hpack_literal(block + b, ":status", "200");
	b += hpack_literal(block + b, "content-type", "text/event-stream");
	r += h2_frame(resp + r, b, 1, 0x4, 1);
	memcpy(resp + r, block, b);
	r += b;
	r += h2_frame(resp + r, strlen(sse), 0, 0, 1);
	memcpy(resp + r, sse, strlen(sse));
	r += strlen(sse);
	r += h2_frame(resp + r, 0, 0, 0x1, 1); /* DATA, END_STREAM */
	data_event_cap(&h, 1, TS_DIR_OUT, resp, r, r, 2000000);
	fflush(ft);
	if (ASSERT_EQ(h_lines(&h), 1, "one request"))
		ASSERT_STREQ(str(h.lines[0], "method"), "\xef\xbf\xbd[2J\xef\xbf\xbd]0;pwn",
			     "method: controls replaced, cut at a character (15 bytes)");
	ASSERT_FALSE(text && memchr(text, 0x1b, text_len), "no escape byte in the text line");
	ASSERT_FALSE(text && memchr(text, 0x07, text_len), "no bell in the text line");
	/* The text line's METHOD column: six cells, the third replacement character whole. */
	if (!ASSERT_TRUE(text && strstr(text, " \xef\xbf\xbd[2J\xef\xbf\xbd] ok ") != NULL,
			 "six cells: U+FFFD [ 2 J U+FFFD ], then the outcome"))
		printf("  text: %s\n", text ? text : "");
	h_close(&h);
	fclose(ft);
	free(text);
}

/* NAME.req and NAME.resp of tests/fixtures; false (nothing to free) when either is missing. */
static bool load_pair(const char *name, struct fixture *req, struct fixture *resp)
{
	char path[FIXTURE_PATH_MAX];

	snprintf(path, sizeof(path), "%s.req", name);
	if (fixture_load(req, path))
		return false;
	snprintf(path, sizeof(path), "%s.resp", name);
	if (fixture_load(resp, path)) {
		fixture_free(req);
		return false;
	}
	return true;
}

/*
 * A one-sided fixture (NAME.req, NAME.resp) on connection id: the request at t0, then response
 * write i at t0 + (i + 1) * 10 ms, then the close 10 ms after the last. The traced process is
 * the server, or, client, the process that wrote the request and read the response.
 */
static bool replay_fixture(struct harness *h, const char *name, uint64_t id, uint64_t t0,
			   bool client)
{
	struct fixture req, resp;

	if (!load_pair(name, &req, &resp))
		return false;
	conn_event(h, TS_EV_CONN_OPEN, id, 5, t0 - 1000);
	/* A server's request arrives at its read's exit (t0), a client's is sent at its write's
	 * entry (t0); a client's token times are its reads' exits (10 ns after the write). */
	data_event_cap(h, id, client ? TS_DIR_OUT : TS_DIR_IN, req.buf, req.len, req.len,
		       client ? t0 : t0 - 10);
	for (size_t i = 0; i < resp.nwrites; i++) {
		size_t start = fixture_write_start(&resp, i);

		data_event_cap(h, id, client ? TS_DIR_IN : TS_DIR_OUT, resp.buf + start,
			       resp.writes[i] - start, resp.writes[i] - start,
			       t0 + (i + 1) * 10000000ull);
	}
	conn_event(h, TS_EV_CONN_CLOSE, id, 5, t0 + (resp.nwrites + 1) * 10000000ull);
	fixture_free(&req);
	fixture_free(&resp);
	return true;
}

static bool ms_is(cJSON *l, const char *key, double want)
{
	double got = num(l, key);

	if (want < 0)
		return ASSERT_TRUE(is_null(l, key), key);
	if (fabs(got - want) < 0.0005)
		return true;
	printf("  %s: %.4f, expected %.3f\n", key, got, want);
	return ASSERT_TRUE(false, key);
}

/* The Responses API's streams (tests/fixtures/responses_*, captured from uvicorn), served and
 * called: format, outcome and its reason, every TTFT definition, tokens and usage, exactly. The
 * end is the chunked terminator's write, 10 ms after the last event. */
TEST(test_responses_streams)
{
	static const struct {
		const char *name, *outcome, *reason;
		/* ms after arrival; -1: null */
		double first_byte, first_chunk, first_output, first_content, e2e;
		int tokens, frames, prompt, cached, reasoning;
		const char *tokens_from;
	} want[] = {
		{ "responses_text", "ok", NULL, 20, 40, 60, 60, 120, 5, 4, 14, 8, 0, "usage" },
		/* Reasoning first: the answer's text (first content) comes 60 ms after the first
		 * output, and usage counts the reasoning tokens apart. */
		{ "responses_reasoning", "ok", NULL, 20, 40, 60, 120, 180, 7, 6, 14, 8, 2,
		  "usage" },
		/* A function call's arguments are output, never answer text. */
		{ "responses_tool", "ok", NULL, 20, 40, 50, -1, 90, 3, 2, 14, 8, 0, "usage" },
		{ "responses_failed", "stream_error", "failed:server_error", 20, 40, 60, 60, 90, 2,
		  2, 14, 8, 0, "usage" },
		/* Cut after two deltas: aborted at the close, tokens from the frames. */
		{ "responses_cut", "aborted", NULL, 20, 40, 60, 60, 80, 2, 2, -1, -1, -1,
		  "frames" },
	};

	for (int client = 0; client <= 1; client++) {
		for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
			struct harness h;
			cJSON *l;

			h_open(&h);
			if (!ASSERT_TRUE(replay_fixture(&h, want[i].name, 1, 1000000000ull, client),
					 want[i].name) ||
			    !ASSERT_EQ(h_lines(&h), 1, want[i].name)) {
				h_close(&h);
				continue;
			}
			l = h.lines[0];
			ASSERT_STREQ(str(l, "role"), client ? "client" : "server", "role");
			ASSERT_STREQ(str(l, "format"), "openai-responses", "format");
			ASSERT_STREQ(str(l, "path"), "/v1/responses", "path");
			ASSERT_STREQ(str(l, "model"), "Qwen/Qwen3-0.6B", "model from the body");
			ASSERT_EQ(num(l, "status"), 200, "status");
			ASSERT_STREQ(str(l, "outcome"), want[i].outcome, "outcome");
			if (want[i].reason)
				ASSERT_STREQ(str(l, "error_reason"), want[i].reason, "reason");
			else
				ASSERT_TRUE(is_null(l, "error_reason"), "no reason");
			ms_is(l, "ttft_first_byte_ms", want[i].first_byte);
			ms_is(l, "ttft_first_chunk_ms", want[i].first_chunk);
			ms_is(l, "ttft_first_output_ms", want[i].first_output);
			ms_is(l, "ttft_ms", want[i].first_output);
			ms_is(l, "ttft_first_content_ms", want[i].first_content);
			ms_is(l, "e2e_ms", want[i].e2e);
			ASSERT_EQ(num(l, "tokens"), want[i].tokens, "tokens");
			ASSERT_STREQ(str(l, "tokens_from"), want[i].tokens_from, "tokens from");
			ASSERT_EQ(num(l, "frames"), want[i].frames, "content frames");
			if (want[i].prompt < 0) {
				ASSERT_TRUE(is_null(l, "prompt_tokens"), "no usage");
				ASSERT_TRUE(is_null(l, "reasoning_tokens"), "no usage");
			} else {
				ASSERT_EQ(num(l, "prompt_tokens"), want[i].prompt, "input tokens");
				ASSERT_EQ(num(l, "cached_tokens"), want[i].cached, "cached");
				ASSERT_EQ(num(l, "reasoning_tokens"), want[i].reasoning,
					  "reasoning");
			}
			ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(l, "token_ns")),
				  want[i].frames, "a token time per content frame");
			if (check_cur_failed)
				printf("  in %s (%s)\n", want[i].name,
				       client ? "client" : "server");
			h_close(&h);
		}
	}
}

/* A Responses stream whose request body was not seen (joined midway, or beyond the capture
 * limit) takes its model from response.created. */
TEST(test_responses_model_from_stream)
{
	static const char ev[] =
	    "event: response.created\ndata: {\"type\":\"response.created\","
	    "\"response\":{\"model\":\"m\\u001b[2J\",\"status\":\"in_progress\"}}"
	    "\n\n";
	static const char delta[] = "event: response.output_text.delta\ndata: {\"type\":"
				    "\"response.output_text.delta\",\"delta\":\"hi\"}\n\n";
	static const char done[] =
	    "event: response.completed\ndata: {\"type\":"
	    "\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":"
	    "3,\"output_tokens\":1}}}\n\n";
	char req[256];
	struct harness h;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	snprintf(req, sizeof(req),
		 "POST /v1/responses HTTP/1.1\r\nContent-Type: application/json\r\n"
		 "Content-Length: 2\r\n\r\n{}");
	data_event(&h, 1, TS_DIR_IN, req, 1000000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 1100000);
	chunk(&h, 1, ev, 1200000);
	chunk(&h, 1, delta, 2000000);
	chunk(&h, 1, done, 3000000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 3100000);
	if (ASSERT_EQ(h_lines(&h), 1, "one request")) {
		ASSERT_STREQ(str(h.lines[0], "model"), "m\xef\xbf\xbd[2J",
			     "the created event's, cleaned");
		ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "ok");
		ASSERT_EQ(num(h.lines[0], "tokens"), 1, "usage");
	}
	h_close(&h);
}

/* A complete body that ends where a value belongs (`[}`) once stopped the body scanner from
 * advancing: the tracer spun and reported nothing more. */
TEST(test_truncated_body_does_not_hang)
{
	static const char *const bodies[] = {
		"{\"model\":\"x\",\"messages\":[}",
		"{\"model\":\"x\",\"stream\":}",
		"{\"a\":]",
		"{\"messages\":[1,}",
		"{\"model\":\"y\",\"n\":[[,]]}",
	};
	struct harness h;
	char req[512];

	alarm(10); /* a hang is a failure, not a stuck test run */
	h_open(&h);
	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		conn_event(&h, TS_EV_CONN_OPEN, i + 1, 5, 500);
		snprintf(req, sizeof(req),
			 "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: "
			 "application/json\r\nContent-Length: %zu\r\n\r\n%s",
			 strlen(bodies[i]), bodies[i]);
		data_event(&h, i + 1, TS_DIR_IN, req, 1000000);
		data_event(&h, i + 1, TS_DIR_OUT, HEAD_SSE, 1100000);
		chunk(&h, i + 1, TOK, 2000000);
		chunk(&h, i + 1, DONE, 3000000);
		data_event(&h, i + 1, TS_DIR_OUT, "0\r\n\r\n", 3100000);
	}
	if (ASSERT_EQ(h_lines(&h), 5, "every request reported")) {
		ASSERT_STREQ(str(h.lines[0], "model"), "x", "what could be read was");
		ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "ok");
	}
	alarm(0);
	h_close(&h);
}

/* What the parsers let go is counted, in the loss report that the summary, the Prometheus
 * counters and the recording's report all take: a frame over the size limit, a request never
 * finished, a response to a request not seen. */
TEST(test_drops_are_counted)
{
	size_t big = SSE_FRAME_MAX + 100, n;
	char *frame = malloc(big + 16);
	struct loss_report loss;
	struct harness h;

	if (!ASSERT_OK_PTR(frame, "malloc"))
		return;
	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	send_request(&h, 1, 1000000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 1100000);
	n = snprintf(frame, 16, "data: ");
	memset(frame + n, 'x', big - n);
	frame[big] = 0;
	strcat(frame, "\n\n");
	chunk_big(&h, 1, frame, 1200000);
	chunk(&h, 1, TOK, 2000000);
	chunk(&h, 1, DONE, 3000000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 3100000);
	/* Half a request, then the connection closes. */
	conn_event(&h, TS_EV_CONN_OPEN, 2, 6, 500);
	data_event(&h, 2, TS_DIR_IN,
		   "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{", 4000000);
	conn_event(&h, TS_EV_CONN_CLOSE, 2, 6, 5000000);
	pipeline_loss(&h.pl, &loss);
	ASSERT_EQ(loss.oversize_frames, 1, "the frame over the limit");
	ASSERT_EQ(loss.partial_requests, 1, "the unfinished request");
	/* The dropped frame may have held tokens: the request is not presented as right. */
	if (ASSERT_EQ(h_lines(&h), 1, "the request") && ASSERT_OK_PTR(h.lines[0], "JSON")) {
		ASSERT_STREQ(str(h.lines[0], "outcome"), "lost", "lost, not ok");
		ASSERT_EQ(num(h.lines[0], "dropped_frames"), 1, "the frame it could not read");
	}
	ASSERT_EQ(h.pl.conns.budget.used, 0, "nothing held between requests");
	h_print_total(&h);
	fflush(h.ferr);
	ASSERT_TRUE(h.err &&
			strstr(h.err, "dropped: 1 unfinished requests, 0 responses to unseen "
				      "requests, 0 requests past the pipelining limit, 1 frames "
				      "over 64 KiB"),
		    "the summary shows them");
	ASSERT_TRUE(!strstr(h.err, "reads of traced bytes"), "no failed read: no line for them");
	/* Failed reads of the process's memory, counted in the kernel, are said when there are. */
	h.pl.kstats[TS_STAT_COPY_FAILED] = 2;
	h_print_total(&h);
	fflush(h.ferr);
	ASSERT_TRUE(strstr(h.err, "  lost: 2 reads of traced bytes from the process's memory "
				  "failed (their bytes are counted beyond capture)\n") != NULL,
		    "the summary shows failed reads");
	h_close(&h);
	free(frame);
}

/* Clients half-way through heads and bodies hold at most the memory cap; past it what cannot be
 * kept is counted, and the requests that come after are reported as before. */
TEST(test_memory_cap)
{
	char body[40000];
	struct loss_report loss;
	struct harness h;
	uint64_t id;

	h_open(&h);
	h.pl.conns.budget.max = 256 * 1024;
	memset(body, 'x', sizeof(body) - 1);
	body[sizeof(body) - 1] = 0;
	memcpy(body, "{\"model\":\"m\",\"p\":\"", 18);
	/* 10 bodies of a 1 MB request, 40 KB each so far: 4 fit under the cap. */
	for (id = 1; id <= 10; id++) {
		conn_event(&h, TS_EV_CONN_OPEN, id, 5, 500);
		data_event(&h, id, TS_DIR_IN,
			   "POST /v1/completions HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n",
			   1000000);
		data_event(&h, id, TS_DIR_IN, body, 1000100);
		ASSERT_TRUE(h.pl.conns.budget.used <= h.pl.conns.budget.max, "within the cap");
	}
	/* Heads half-way (no end of line yet) on more connections. */
	for (; id <= 15; id++) {
		conn_event(&h, TS_EV_CONN_OPEN, id, 5, 500);
		data_event(&h, id, TS_DIR_IN, "POST /v1/completions HTTP/1.1\r\nX-A: ", 1000200);
	}
	ASSERT_TRUE(h.pl.conns.budget.used <= h.pl.conns.budget.max, "within the cap");
	pipeline_loss(&h.pl, &loss);
	ASSERT_TRUE(loss.budget_refused > 0, "refusals counted");
	for (id = 1; id <= 15; id++)
		conn_event(&h, TS_EV_CONN_CLOSE, id, 5, 2000000);
	ASSERT_EQ(h.pl.conns.budget.used, 0, "all given back");
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 3000000);
	full_stream(&h, 1, 4000000);
	if (ASSERT_EQ(h_lines(&h), 1, "the good request") && ASSERT_OK_PTR(h.lines[0], "JSON")) {
		ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "ok");
		ASSERT_EQ(num(h.lines[0], "tokens"), 3, "tokens");
	}
	h_close(&h);
}

/* The connection table grows with the connections (a scan costs what is open, not the largest
 * table), and moving them to new buckets loses none: every one is found again by its id. */
TEST(test_table_grows)
{
	enum { N = 5000 };
	struct ts_conn_event e = { .hdr = { TS_EV_CONN_OPEN, sizeof(e), 100, 100 } };
	struct harness h;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	send_request(&h, 1, 1000000);
	ASSERT_EQ(conn_inflight(&h.pl.conns), 1, "one in flight");
	for (uint64_t id = 1000; id < 1000 + N; id++) {
		e.conn_id = id;
		e.fd = 10 + id % 1000;
		pipeline_feed(&h.pl, &e, sizeof(e));
	}
	ASSERT_EQ(h.pl.conns.count, N + 1, "all open");
	ASSERT_TRUE(h.pl.conns.nbuckets >= N, "the table grew");
	/* The request in flight before the growth finishes after it. */
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 1100000);
	chunk(&h, 1, TOK, 2000000);
	chunk(&h, 1, DONE, 3000000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 3100000);
	ASSERT_EQ(conn_inflight(&h.pl.conns), 0, "none in flight");
	e.hdr.type = TS_EV_CONN_CLOSE;
	for (uint64_t id = 1000; id < 1000 + N; id++) {
		e.conn_id = id;
		pipeline_feed(&h.pl, &e, sizeof(e));
	}
	ASSERT_EQ(h.pl.conns.count, 1, "every one found and closed");
	if (ASSERT_EQ(h_lines(&h), 1, "the request") && ASSERT_OK_PTR(h.lines[0], "JSON"))
		ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "ok");
	h_close(&h);
}

/* ---- HTTP/2 ---- */

/*
 * Replays a two-sided fixture (tests/fixtures: NAME.req, NAME.resp, NAME.order) on connection
 * id at its captured times from t0: the traced process is the server (its reads are the
 * client's writes) or, client, the other way round. bytes_per_record > 0 splits every write
 * into records of that many bytes, as short reads would.
 */
static bool replay_pair(struct harness *h, const char *name, uint64_t id, uint64_t t0, bool client,
			size_t bytes_per_record)
{
	struct fixture req, resp;
	FILE *fp;
	char side[8];
	size_t idx;
	unsigned long long us;
	bool ok = true;

	if (!load_pair(name, &req, &resp))
		return false;
	fp = fixture_open(name, ".order", false);
	while (fp && fscanf(fp, "%7s %zu %llu", side, &idx, &us) == 3) {
		bool is_req = strcmp(side, "req") == 0;
		const struct fixture *f = is_req ? &req : &resp;
		int dir = is_req != client ? TS_DIR_IN : TS_DIR_OUT;
		size_t start, len, step;

		if (idx >= f->nwrites) {
			ok = false;
			break;
		}
		start = fixture_write_start(f, idx);
		len = f->writes[idx] - start;
		step = bytes_per_record ? bytes_per_record : len;
		for (size_t off = 0; off < len; off += step) {
			size_t n = len - off < step ? len - off : step;

			data_event_cap(h, id, dir, f->buf + start + off, n, n,
				       t0 + us * 1000 + off);
		}
	}
	if (fp)
		fclose(fp);
	else
		ok = false;
	fixture_free(&req);
	fixture_free(&resp);
	return ok;
}

static cJSON *line_of_stream(struct harness *h, int stream)
{
	for (int i = 0; i < h->nlines; i++)
		if (num(h->lines[i], "h2_stream") == stream)
			return h->lines[i];
	return NULL;
}

/* hypercorn over h2c, an httpx client: two chat streams and a GET, each a request whose
 * tokens are the SSE content frames of its stream. */
TEST(test_h2_server)
{
	for (size_t split = 0; split <= 7; split += 7) {
		struct harness h;
		cJSON *l;

		h_open(&h);
		conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 1000);
		if (!ASSERT_TRUE(replay_pair(&h, "hypercorn_h2c", 1, 1000000, false, split),
				 "fixture"))
			goto next;
		conn_event(&h, TS_EV_CONN_CLOSE, 1, 5, 900000000);
		if (!ASSERT_EQ(h_lines(&h), 3, "three streams"))
			goto next;
		for (int s = 1; s <= 3; s += 2) {
			l = line_of_stream(&h, s);
			if (!ASSERT_OK_PTR(l, "a chat stream"))
				continue;
			ASSERT_STREQ(str(l, "role"), "server", "role");
			ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(l, "h2")), "h2");
			ASSERT_STREQ(str(l, "method"), "POST", "method");
			ASSERT_STREQ(str(l, "path"), "/v1/chat/completions", "path");
			ASSERT_STREQ(str(l, "model"), "Qwen/Qwen2.5-0.5B", "model from the body");
			ASSERT_STREQ(str(l, "outcome"), "ok", "outcome");
			ASSERT_STREQ(str(l, "format"), "openai-chat", "format");
			ASSERT_EQ(num(l, "frames"), 4, "content frames");
			ASSERT_EQ(num(l, "tokens"), 4, "tokens");
			ASSERT_TRUE(num(l, "ttft_ms") > 0 && num(l, "e2e_ms") > num(l, "ttft_ms"),
				    "times");
		}
		l = line_of_stream(&h, 3);
		if (l)
			ASSERT_STREQ(str(l, "tokens_from"), "usage", "stream 3 asked for usage");
		l = line_of_stream(&h, 5);
		if (ASSERT_OK_PTR(l, "the GET")) {
			ASSERT_STREQ(str(l, "method"), "GET", "method");
			ASSERT_FALSE(cJSON_IsTrue(cJSON_GetObjectItem(l, "stream")),
				     "not streamed");
			ASSERT_STREQ(str(l, "outcome"), "ok", "outcome");
		}
		ASSERT_EQ(h.pl.conns.stats.h2_conns, 1, "an HTTP/2 connection");
		ASSERT_EQ(h.pl.conns.stats.http_conns, 0, "no HTTP/1.x");
		ASSERT_EQ(conn_inflight(&h.pl.conns), 0, "nothing in flight");
		ASSERT_EQ(h.pl.conns.budget.used, 0, "every buffer given back");
	next:
		h_close(&h);
	}
}

/* The same bytes with the traced process as the client: role client, the same streams. */
TEST(test_h2_client)
{
	struct harness h;
	cJSON *l;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 1000);
	if (!ASSERT_TRUE(replay_pair(&h, "hypercorn_h2c", 1, 1000000, true, 0), "fixture"))
		goto out;
	if (!ASSERT_EQ(h_lines(&h), 3, "three streams"))
		goto out;
	l = line_of_stream(&h, 1);
	if (ASSERT_OK_PTR(l, "stream 1")) {
		ASSERT_STREQ(str(l, "role"), "client", "role");
		ASSERT_TRUE(strstr(str(l, "conn"), "->") != NULL, "conn local->upstream");
		ASSERT_EQ(num(l, "frames"), 4, "content frames");
		ASSERT_STREQ(str(l, "outcome"), "ok", "outcome");
	}
	ASSERT_EQ(h.pl.conns.stats.client_conns, 1, "a client connection");
out:
	h_close(&h);
}

/* grpcio server streaming: each message a frame, trailers' grpc-status the outcome. */
TEST(test_grpc_server_streaming)
{
	static const struct {
		const char *name;
		const char *outcome;
		int messages, status;
	} cases[] = {
		{ "grpcio_stream", "ok", 4, 0 },
		{ "grpcio_abort", "stream_error", 2, 13 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct harness h;
		cJSON *l;

		h_open(&h);
		if (!ASSERT_TRUE(replay_pair(&h, cases[i].name, 1, 1000000, false, 1), "fixture"))
			goto next;
		if (!ASSERT_EQ(h_lines(&h), 2, "two calls"))
			goto next;
		for (int k = 0; k < 2; k++) {
			l = h.lines[k];
			ASSERT_STREQ(str(l, "path"), "/inference.Generator/Generate",
				     "method path");
			ASSERT_STREQ(str(l, "format"), "grpc", "format");
			ASSERT_STREQ(str(l, "tokens_from"), "messages", "a message is a chunk");
			ASSERT_EQ(num(l, "frames"), cases[i].messages, "messages");
			ASSERT_EQ(num(l, "grpc_status"), cases[i].status, "grpc-status");
			ASSERT_STREQ(str(l, "outcome"), cases[i].outcome, "outcome");
			ASSERT_TRUE(num(l, "ttft_ms") > 0, "first message after the call");
		}
	next:
		h_close(&h);
	}
}

/* HTTP/1.1 Upgrade: h2c (curl --http2 to hypercorn): the GET that asked is answered as stream
 * 1 of the HTTP/2 that follows its 101, the next request (a chat stream) is stream 3. */
TEST(test_h2c_upgrade)
{
	struct harness h;
	cJSON *l;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 1000);
	if (!ASSERT_TRUE(replay_pair(&h, "hypercorn_h2c_upgrade", 1, 1000000, false, 0), "fixture"))
		goto out;
	if (!ASSERT_EQ(h_lines(&h), 2, "both requests"))
		goto out;
	l = line_of_stream(&h, 1);
	if (ASSERT_OK_PTR(l, "the upgrade request, as stream 1")) {
		ASSERT_STREQ(str(l, "method"), "GET", "method");
		ASSERT_STREQ(str(l, "path"), "/v1/models", "path");
		ASSERT_EQ(num(l, "status"), 200, "the HTTP/2 response's status, not the 101");
		ASSERT_STREQ(str(l, "outcome"), "ok", "outcome");
	}
	l = line_of_stream(&h, 3);
	if (ASSERT_OK_PTR(l, "the chat stream")) {
		ASSERT_STREQ(str(l, "outcome"), "ok", "outcome");
		ASSERT_EQ(num(l, "frames"), 4, "content frames");
	}
	ASSERT_EQ(h.pl.conns.stats.h2_conns, 1, "counted as HTTP/2");
	ASSERT_EQ(conn_inflight(&h.pl.conns), 0, "nothing in flight");
out:
	h_close(&h);
}

/* Any other upgrade (WebSocket): the request ends answered, and the connection is not read as
 * HTTP any more. */
TEST(test_websocket_upgrade)
{
	struct harness h;

	h_open(&h);
	data_event(
	    &h, 1, TS_DIR_IN,
	    "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	    1000);
	data_event(&h, 1, TS_DIR_OUT,
		   "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello",
		   2000);
	data_event(&h, 1, TS_DIR_IN,
		   "\x81\x85"
		   "abcdxxxxx",
		   3000);
	if (ASSERT_EQ(h_lines(&h), 1, "the upgrade request")) {
		ASSERT_EQ(num(h.lines[0], "status"), 101, "answered 101");
		ASSERT_STREQ(str(h.lines[0], "outcome"), "ok", "ended there");
	}
	ASSERT_EQ(h.pl.conns.stats.desyncs, 0, "no desync");
	ASSERT_EQ(conn_inflight(&h.pl.conns), 0, "nothing in flight");
	h_close(&h);
}

/* A connection first seen in its middle: frames, no preface. Counted, never guessed. */
TEST(test_h2_joined_midway)
{
	struct harness h;
	struct fixture f;

	h_open(&h);
	if (!ASSERT_OK(fixture_load(&f, "hypercorn_h2c.resp"), "fixture"))
		goto out;
	/* From the server's third write on (a frame boundary past its SETTINGS). */
	h.pos[1][TS_DIR_OUT] = fixture_write_start(&f, 2);
	data_event_cap(&h, 1, TS_DIR_OUT, f.buf + fixture_write_start(&f, 2),
		       f.writes[2] - fixture_write_start(&f, 2),
		       f.writes[2] - fixture_write_start(&f, 2), 1000);
	fixture_free(&f);
	ASSERT_EQ(h_lines(&h), 0, "nothing reported");
	ASSERT_EQ(h.pl.conns.stats.h2_midway, 1, "counted");
	h_print_total(&h);
	fflush(h.ferr);
	ASSERT_TRUE(strstr(h.err, "1 HTTP/2 first seen after their start (header table unknown: "
				  "not followed)") != NULL,
		    "the summary says so");
out:
	h_close(&h);
}

/*
 * A stream the client resets: reported aborted, but only once the server's side is seen past
 * the reset, so that a response write made before the reset and recorded after it (TLS
 * plaintext is recorded at the call's return) still counts; a write that began after the reset
 * does not.
 */
TEST(test_h2_resets)
{
	struct harness h;
	struct fixture req, resp;
	const uint8_t rst[] = { 0, 0, 4, 3, 0, 0, 0, 0, 1, 0, 0, 0, 8 };
	const uint8_t ping[] = { 0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8 };

	h_open(&h);
	if (!ASSERT_OK(fixture_load(&req, "hypercorn_h2c.req"), "fixture"))
		goto out;
	if (!ASSERT_OK(fixture_load(&resp, "hypercorn_h2c.resp"), "fixture")) {
		fixture_free(&req);
		goto out;
	}
	/* The client's preface, settings and first request, then RST_STREAM(1, CANCEL). */
	data_event_cap(&h, 1, TS_DIR_IN, req.buf, req.writes[3], req.writes[3], 1000);
	data_event_cap(&h, 1, TS_DIR_IN, rst, sizeof(rst), sizeof(rst), 2000);
	ASSERT_EQ(h_lines(&h), 0, "not yet: the server's side is not seen up to the reset");
	/* The server's settings, stream 1's headers, its role frame and two tokens, all written
	 * before the reset, recorded after it. */
	data_event_cap(&h, 1, TS_DIR_OUT, resp.buf, resp.writes[5], resp.writes[5], 1500);
	ASSERT_EQ(h_lines(&h), 0, "still written before the reset");
	data_event_cap(&h, 1, TS_DIR_OUT, ping, sizeof(ping), sizeof(ping), 3000);
	fixture_free(&req);
	fixture_free(&resp);
	if (ASSERT_EQ(h_lines(&h), 1, "the reset stream is reported")) {
		ASSERT_STREQ(str(h.lines[0], "outcome"), "aborted", "aborted");
		ASSERT_EQ(num(h.lines[0], "h2_stream"), 1, "stream 1");
		ASSERT_EQ(num(h.lines[0], "frames"), 2, "the tokens written before the reset");
		ASSERT_EQ(num(h.lines[0], "end_ns"), 2010, "ends at the reset (its read's return)");
	}
	ASSERT_EQ(conn_inflight(&h.pl.conns), 0, "nothing in flight");
out:
	h_close(&h);
}

/*
 * A proxy: it reads a request (conn 1), writes its upstream request (conn 2), reads the
 * upstream's tokens and relays them. The two are paired; the served request says its upstream
 * and the proxy's own part of its TTFT; a second served request, read while the first is open,
 * pairs with the second upstream request, not the first.
 */
TEST(test_proxy_pairing)
{
	char req[1024];
	struct harness h;
	cJSON *s = NULL, *u = NULL, *up;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	conn_event(&h, TS_EV_CONN_OPEN, 2, 6, 500);
	conn_event(&h, TS_EV_CONN_OPEN, 3, 7, 500);
	conn_event(&h, TS_EV_CONN_OPEN, 4, 8, 500);
	snprintf(req, sizeof(req),
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: up\r\nContent-Type: "
		 "application/json\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(REQ_BODY), REQ_BODY);
	send_request(&h, 1, 1000000);		     /* read: arrival 1000010 */
	send_request(&h, 3, 1100000);		     /* a second served request, arrival 1100010 */
	data_event(&h, 2, TS_DIR_OUT, req, 1200000); /* its upstream: written at 1200000 */
	data_event(&h, 4, TS_DIR_OUT, req, 1300000);
	data_event(&h, 2, TS_DIR_IN, HEAD_SSE, 5000000);
	chunk_dir(&h, 2, TS_DIR_IN, TOK, 20000000); /* read at 20000010 */
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 20050000);
	chunk(&h, 1, TOK, 20100000); /* relayed at 20100000 */
	chunk_dir(&h, 2, TS_DIR_IN, DONE, 21000000);
	data_event(&h, 2, TS_DIR_IN, "0\r\n\r\n", 21100000);
	chunk(&h, 1, DONE, 21200000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 21300000);
	if (!ASSERT_EQ(h_lines(&h), 2, "both sides"))
		goto out;
	for (int i = 0; i < 2; i++) {
		if (!strcmp(str(h.lines[i], "role"), "server"))
			s = h.lines[i];
		else
			u = h.lines[i];
	}
	if (!ASSERT_OK_PTR(s, "served") || !ASSERT_OK_PTR(u, "upstream"))
		goto out;
	up = cJSON_GetObjectItem(s, "upstream");
	if (ASSERT_OK_PTR(up, "the served request names its upstream")) {
		ASSERT_STREQ(str(up, "conn"), str(u, "conn"), "the upstream's conn");
		ASSERT_NEAR(num(up, "ttft_ms"), (20000010 - 1200000) / 1e6, 0.0006,
			    "upstream TTFT");
	}
	ASSERT_NEAR(num(s, "ttft_ms"), (20100000 - 1000010) / 1e6, 0.0006, "served TTFT");
	ASSERT_NEAR(num(s, "proxy_ttft_ms"), ((20100000 - 1000010) - (20000010 - 1200000)) / 1e6,
		    0.0006, "the proxy's own part (3 decimals)");
	up = cJSON_GetObjectItem(u, "downstream");
	if (ASSERT_OK_PTR(up, "the upstream names the served request"))
		ASSERT_STREQ(str(up, "conn"), str(s, "conn"), "served conn");
	ASSERT_EQ(h.pl.proxy.paired, 2, "both upstream requests paired");
	h_print_total(&h);
	fflush(h.ferr);
	ASSERT_TRUE(strstr(h.err, "  proxy: 1 requests paired with their upstream requests") !=
			NULL,
		    "the summary says the proxy's part");
out:
	h_close(&h);
}

/*
 * A gateway's pooled upstream connection, open before attach with a response streaming on it:
 * the first record is a read of that response's middle (a chunk of SSE text). It waits; the
 * request the gateway writes next makes it a client connection, paired with the request it
 * serves, and its stream is followed whole. Nothing on it is "another protocol".
 */
TEST(test_joined_pooled_upstream)
{
	char req[1024];
	struct harness h;
	cJSON *s = NULL, *u = NULL, *up;

	h_open(&h);
	/* conn 2: the upstream connection, first seen reading the response in flight */
	chunk_dir(&h, 2, TS_DIR_IN, TOK, 100000);
	chunk_dir(&h, 2, TS_DIR_IN, DONE, 200000);
	data_event(&h, 2, TS_DIR_IN, "0\r\n\r\n", 300000);
	ASSERT_EQ(h.pl.conns.stats.ignored_conns, 0, "a response's middle is no other protocol");
	ASSERT_EQ(h.pl.conns.stats.waiting_conns, 1, "waiting for a request");
	/* conn 1: the served side, accepted under tracing */
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500000);
	snprintf(req, sizeof(req),
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: up\r\nContent-Type: "
		 "application/json\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(REQ_BODY), REQ_BODY);
	send_request(&h, 1, 1000000);
	data_event(&h, 2, TS_DIR_OUT, req, 1200000); /* the upstream call, written */
	data_event(&h, 2, TS_DIR_IN, HEAD_SSE, 5000000);
	chunk_dir(&h, 2, TS_DIR_IN, TOK, 20000000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 20050000);
	chunk(&h, 1, TOK, 20100000);
	chunk_dir(&h, 2, TS_DIR_IN, TOK, 21000000);
	chunk(&h, 1, TOK, 21100000);
	chunk_dir(&h, 2, TS_DIR_IN, DONE, 22000000);
	data_event(&h, 2, TS_DIR_IN, "0\r\n\r\n", 22100000);
	chunk(&h, 1, DONE, 22200000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 22300000);
	if (!ASSERT_EQ(h_lines(&h), 2, "both sides, not the response in flight"))
		goto out;
	for (int i = 0; i < 2; i++) {
		if (!strcmp(str(h.lines[i], "role"), "server"))
			s = h.lines[i];
		else
			u = h.lines[i];
	}
	if (!ASSERT_OK_PTR(s, "served") || !ASSERT_OK_PTR(u, "upstream"))
		goto out;
	ASSERT_STREQ(str(u, "role"), "client", "the upstream call has role client");
	ASSERT_STREQ(str(u, "outcome"), "ok", "upstream outcome");
	ASSERT_EQ(num(u, "tokens"), 2, "upstream tokens");
	ASSERT_EQ(num(s, "tokens"), 2, "served tokens");
	ASSERT_EQ(num(u, "arrival_ns"), 1200000, "sent: its write's entry");
	up = cJSON_GetObjectItem(s, "upstream");
	if (ASSERT_OK_PTR(up, "paired"))
		ASSERT_STREQ(str(up, "conn"), str(u, "conn"), "with the pooled connection");
	ASSERT_EQ(h.pl.proxy.paired, 1, "one pair");
	ASSERT_EQ(h.pl.conns.stats.client_conns, 1, "a client connection");
	ASSERT_EQ(h.pl.conns.stats.joined_conns, 1, "joined mid-stream");
	ASSERT_EQ(h.pl.conns.stats.waiting_conns, 0, "no longer waiting");
	ASSERT_EQ(h.pl.conns.stats.orphan_responses, 0, "the skipped response was never parsed");
	h_print_total(&h);
	fflush(h.ferr);
	ASSERT_TRUE(strstr(h.err,
			   "1 serving HTTP/1.x, 0 ignored (another protocol); joined "
			   "mid-stream: 1, of which 0 waiting for a request; 1 calling") != NULL,
		    "the connections line");
out:
	h_close(&h);
}

/*
 * What is counted where: a connection joined mid-stream that carries no request line yet is
 * waiting, not ignored; bytes no HTTP/1.x message holds are another protocol; so is a first
 * read that is no request on a connection accepted under tracing (its start was seen). A
 * server connection joined mid-response (its first record a write) is followed from its next
 * request, and a short write of capitals past a connection's start is no request line.
 */
TEST(test_joined_waiting_and_ignored)
{
	struct ts_conn_event e = { 0 };
	struct harness h;

	h_open(&h);
	/* 1: a response head read, then nothing more: waiting */
	data_event(&h, 1, TS_DIR_IN, HEAD_SSE, 1000);
	/* 2: binary read first: another protocol */
	data_event(&h, 2, TS_DIR_IN, "\x85\xa6\x03\x01login", 2000);
	/* 3: accepted under tracing, its first read text but no request: another protocol */
	e.hdr.type = TS_EV_CONN_OPEN;
	e.hdr.size = sizeof(e);
	e.hdr.pid = 100;
	e.conn_id = 3;
	e.fd = 7;
	e.family = 2;
	e.syscall = TS_SYS_ACCEPT;
	pipeline_feed(&h.pl, &e, sizeof(e));
	data_event(&h, 3, TS_DIR_IN, "+PING\r\n", 3000);
	/* 4: a server joined mid-response (a chunk's tail, no frame start), a short write of
	 * capitals, then its next request */
	data_event(&h, 4, TS_DIR_OUT, "\r\n", 4000);
	data_event(&h, 4, TS_DIR_OUT, "ABC", 4500);
	ASSERT_EQ(h.pl.conns.stats.waiting_conns, 2, "1 and 4 wait");
	full_stream(&h, 4, 10000);
	if (ASSERT_EQ(h_lines(&h), 1, "4's next request"))
		ASSERT_STREQ(str(h.lines[0], "role"), "server", "served");
	ASSERT_EQ(h.pl.conns.stats.ignored_conns, 2, "2 and 3 ignored");
	ASSERT_EQ(h.pl.conns.stats.joined_conns, 2, "1 and 4 joined");
	ASSERT_EQ(h.pl.conns.stats.waiting_conns, 1, "1 still waits");
	ASSERT_EQ(h.pl.conns.stats.client_conns, 0, "no client");
	h_print_total(&h);
	fflush(h.ferr);
	ASSERT_TRUE(strstr(h.err, "1 serving HTTP/1.x, 2 ignored (another protocol); joined "
				  "mid-stream: 2, of which 1 waiting for a request\n") != NULL,
		    "the connections line");
	h_close(&h);
}

/* A GPU step record of pid 200 (an engine process) from start to end. */
static void gpu_step_event(struct harness *h, uint64_t start, uint64_t end, uint32_t launches,
			   uint32_t graphs)
{
	struct ts_gpu_step_event e = { .hdr = { TS_EV_GPU_STEP, sizeof(e), 200, 200 } };

	e.start_ns = start;
	e.wait_start_ns = end - 100000;
	e.end_ns = end;
	e.launches = launches;
	e.graph_launches = graphs;
	e.waits = 1;
	pipeline_feed(&h->pl, &e, sizeof(e));
}

/*
 * Batches through the whole pipeline: two streams batched by an engine's steps. A step's line
 * waits until its batch is final (the next step's end, plus the slack; or GPU_BATCH_WAIT_NS
 * when the engine goes idle), and so does a finished request; the lines then carry the batch
 * of each step and each request's steps and mean batch. Request starts held behind them keep
 * the summary's in-flight count true.
 */
TEST(test_batches)
{
	struct harness h;
	const uint64_t ms = 1000000;
	cJSON *l;

	h_open(&h);
	h.sink_lines.o.gpu_steps = true;
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	conn_event(&h, TS_EV_CONN_OPEN, 2, 6, 500);
	send_request(&h, 1, 1 * ms);
	send_request(&h, 2, 1 * ms + 100000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 1 * ms + 200000);
	data_event(&h, 2, TS_DIR_OUT, HEAD_SSE, 1 * ms + 200000);
	gpu_step_event(&h, 2 * ms, 10 * ms, 40, 0); /* prefill of both */
	chunk(&h, 1, TOK, 10 * ms + 100000);
	chunk(&h, 2, TOK, 10 * ms + 200000);
	gpu_step_event(&h, 11 * ms, 20 * ms, 2, 1);
	chunk(&h, 1, TOK, 20 * ms + 100000);
	chunk(&h, 2, TOK, 20 * ms + 200000);
	gpu_step_event(&h, 21 * ms, 30 * ms, 2, 1);
	/* Request 1 ends before request 2's token of the same step is written. */
	chunk(&h, 1, TOK, 30 * ms + 100000);
	chunk(&h, 1, DONE, 30 * ms + 110000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 30 * ms + 120000);
	chunk(&h, 2, TOK, 30 * ms + 200000);
	chunk(&h, 2, DONE, 30 * ms + 210000);
	data_event(&h, 2, TS_DIR_OUT, "0\r\n\r\n", 30 * ms + 220000);
	/* A third request arrives after both ended, while they are held. */
	conn_event(&h, TS_EV_CONN_OPEN, 3, 7, 31 * ms);
	send_request(&h, 3, 31 * ms);
	/* Only the prefill step's window has closed (with the second decode step's end). */
	if (!ASSERT_EQ(h_lines(&h), 1, "one line so far") ||
	    !ASSERT_OK_PTR(cJSON_GetObjectItem(h.lines[0], "gpu_step"), "a step"))
		goto out;
	ASSERT_EQ(num(cJSON_GetObjectItem(h.lines[0], "gpu_step"), "batch"), 2, "prefilled two");
	/* The engine is idle: the clock closes the last windows. */
	pipeline_clock(&h.pl, 30 * ms + GPU_BATCH_WAIT_NS);
	pipeline_tick(&h.pl);
	if (!ASSERT_EQ(h_lines(&h), 5, "three steps, two requests"))
		goto out;
	for (int i = 1; i < 3; i++) {
		l = cJSON_GetObjectItem(h.lines[i], "gpu_step");
		if (ASSERT_OK_PTR(l, "steps first"))
			ASSERT_EQ(num(l, "batch"), 2, "both requests in each decode step");
	}
	for (int i = 3; i < 5; i++) {
		l = h.lines[i];
		ASSERT_EQ(num(l, "steps"), 2, "two decode steps each");
		ASSERT_NEAR(num(l, "batch_mean"), 2.0, 1e-9, "request 2's last token counted");
	}
	h_print_total(&h);
	fflush(h.ferr);
	ASSERT_TRUE(strstr(h.err, "in flight: max 2,") != NULL, "in flight as it was, not 3");
out:
	h_close(&h);
}

/*
 * A step record that ends before it starts (a damaged record, a crafted recording) is a bad
 * record, never a step: before, a recompute step ending 0.1 ms before the first step it
 * followed gave "preempted_ms":-0.100 (and 2^64 ns, wrapped, in the summary and Prometheus).
 */
TEST(test_step_ending_before_it_starts)
{
	struct harness h;
	const uint64_t ms = 1000000;
	uint64_t bad0;
	cJSON *l;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	conn_event(&h, TS_EV_CONN_OPEN, 2, 6, 500);
	send_request(&h, 1, 1 * ms);
	send_request(&h, 2, 1 * ms + 100000);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 1 * ms + 200000);
	data_event(&h, 2, TS_DIR_OUT, HEAD_SSE, 1 * ms + 200000);
	gpu_step_event(&h, 2 * ms, 10 * ms, 40, 0);
	chunk(&h, 1, TOK, 10 * ms + 100000);
	chunk(&h, 2, TOK, 10 * ms + 200000);
	/* Two decode steps that ride request 2 alone, then a "recompute" of request 1 whose end
	 * (20.9 ms) is before its start (41 ms) and before the first step it would follow. */
	gpu_step_event(&h, 11 * ms, 20 * ms, 2, 1);
	chunk(&h, 2, TOK, 20 * ms + 200000);
	gpu_step_event(&h, 21 * ms, 30 * ms, 2, 1);
	chunk(&h, 2, TOK, 30 * ms + 200000);
	bad0 = h.pl.bad_records;
	{
		struct ts_gpu_step_event e = { .hdr = { TS_EV_GPU_STEP, sizeof(e), 200, 200 } };

		e.start_ns = 41 * ms;
		e.wait_start_ns = 20 * ms + 850000;
		e.end_ns = 20 * ms + 900000;
		e.launches = 40;
		e.waits = 1;
		ASSERT_TRUE(pipeline_feed(&h.pl, &e, sizeof(e)) < 0, "refused");
		/* A wait that began after it ended, and a step with no end at all. */
		e.start_ns = 40 * ms;
		e.wait_start_ns = 49 * ms;
		e.end_ns = 48 * ms;
		ASSERT_TRUE(pipeline_feed(&h.pl, &e, sizeof(e)) < 0, "wait after end refused");
		e.wait_start_ns = e.end_ns = 0;
		ASSERT_TRUE(pipeline_feed(&h.pl, &e, sizeof(e)) < 0, "no end refused");
	}
	ASSERT_EQ(h.pl.bad_records - bad0, 3, "counted as bad records");
	chunk(&h, 1, TOK, 41 * ms);
	chunk(&h, 1, DONE, 41 * ms + 10000);
	data_event(&h, 1, TS_DIR_OUT, "0\r\n\r\n", 41 * ms + 20000);
	pipeline_clock(&h.pl, 41 * ms + GPU_BATCH_WAIT_NS);
	pipeline_tick(&h.pl);
	if (!ASSERT_EQ(h_lines(&h), 1, "request 1's line"))
		goto out;
	l = h.lines[0];
	ASSERT_EQ(num(l, "preemptions"), 0, "no preemption from a bad record");
	ASSERT_EQ(num(l, "preempted_ms"), 0, "no time out of the batch, never a negative one");
out:
	h_close(&h);
}

/*
 * Records whose times go back (read on another CPU, or damaged): a close timed before the last
 * token, and a token timed before the one before it. The request ends no earlier than its last
 * token, and no gap is negative (E2E was shorter than TTFT, a gap wrapped to 2^64).
 */
TEST(test_times_out_of_order)
{
	struct harness h;
	const uint64_t ms = 1000000;

	h_open(&h);
	conn_event(&h, TS_EV_CONN_OPEN, 1, 5, 500);
	send_request(&h, 1, 1 * ms);
	data_event(&h, 1, TS_DIR_OUT, HEAD_SSE, 1 * ms + 200000);
	chunk(&h, 1, TOK, 20 * ms);
	chunk(&h, 1, TOK, 18 * ms);
	conn_event(&h, TS_EV_CONN_CLOSE, 1, 5, 5 * ms);
	if (!ASSERT_EQ(h_lines(&h), 1, "one request"))
		goto out;
	ASSERT_EQ(num(h.lines[0], "end_ns"), 20 * ms, "ends at its last token, not before");
	ASSERT_TRUE(num(h.lines[0], "e2e_ms") >= num(h.lines[0], "ttft_ms"), "E2E >= TTFT");
	ASSERT_EQ(num(cJSON_GetObjectItem(h.lines[0], "itl_ms"), "max"), 0,
		  "the gap back in time is 0, never wrapped");
out:
	h_close(&h);
}

int main(void)
{
	return check_run_all();
}
