// SPDX-License-Identifier: MIT
/*
 * user/sinks/output.c: the text request line and its header. Without GPU steps a line fits
 * 100 columns whatever its values; the GPU columns come with the first GPU step and stay.
 */
#include <math.h>
#include <stdlib.h>

#include "cells.h"
#include "check.h"
#include "lib/escape.h"
#include "lib/utf8.h"
#include "sinks/output.h"

/* What the issue asks of a run without GPU steps: a 100-column terminal holds every line. */
#define NO_GPU_MAX_CELLS 100

static const char gpu_cols[] = "QUEUE PREFILL  DECODE STEPS BATCH";

struct text {
	char *buf;
	size_t len;
	FILE *f;
	struct lines l;
	struct sink s;
	char *line[16];
	int n;
};

static void text_open(struct text *t)
{
	memset(t, 0, sizeof(*t));
	t->f = open_memstream(&t->buf, &t->len);
	lines_init(&t->l, &(struct lines_opts){ .out = t->f });
	t->s = lines_sink(&t->l);
}

/* Splits what was written into lines (t->line, NUL-terminated in place). */
static void text_lines(struct text *t)
{
	char *p, *nl;

	fflush(t->f);
	t->n = 0;
	for (p = t->buf; p && *p && t->n < 16; p = nl + 1) {
		nl = strchr(p, '\n');
		if (!nl)
			break;
		*nl = '\0';
		t->line[t->n++] = p;
	}
}

static void text_close(struct text *t)
{
	fclose(t->f);
	free(t->buf);
}

/* A request with the longest values each column can get. */
static struct request *wide_request(const char *conn, const char *method, bool client)
{
	struct request *r = request_new(4194304, 1, 1, conn);

	snprintf(r->method, sizeof(r->method), "%s", method);
	/* Not a column of the text line: a model name of any length changes nothing. */
	memset(r->info.model, 'm', sizeof(r->info.model) - 1);
	r->client = client;
	r->status = 200;
	r->outcome = OUTCOME_STREAM_ERROR;
	return r;
}

static void wide_metrics(struct request_metrics *m, struct gpu_attribution *ga, bool big)
{
	int64_t ns = big ? 987654321000000LL : 1234500000LL; /* 11 days, or 1234.5 ms */

	memset(m, 0, sizeof(*m));
	memset(ga, 0, sizeof(*ga));
	m->ttft_ns = m->e2e_ns = m->itl_p50_ns = m->itl_p99_ns = ns;
	m->tokens = big ? 123456789 : 99999;
	m->tok_per_s = big ? 1e12 : 99999.9;
	ga->queue_ns = ga->prefill_ns = ga->decode_ns = -1;
}

/*
 * No GPU step: the header and every line are 99 cells, also with values far over any
 * column's width, an IPv6 peer (its port and connection number kept), a client's upstream,
 * a method of wide characters, and a model name as long as it can be. No GPU column.
 */
TEST(test_text_no_gpu_fits)
{
	static const char *const conns[] = {
		"[2001:db8:85a3::8a2e:370:7334]:8000<-[2001:db8:85a3:1234:5678:8a2e:370:7335]"
		":54321#12",
		"10.0.0.1:8000<-255.255.255.255:65535#12345678901234",
		"[::1]:40000->[2001:db8:85a3::8a2e:370:7334]:8000#3", /* a client's upstream */
		"unix:fd7#3",
	};
	static const char *const methods[] = { "OPTIONS", "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97",
					       "\x1b[2J" };
	struct request_metrics m;
	struct gpu_attribution ga;
	struct text t;
	int k = 0;

	text_open(&t);
	for (size_t c = 0; c < sizeof(conns) / sizeof(conns[0]); c++)
		for (int big = 0; big < 2; big++) {
			struct request *r =
			    wide_request(conns[c], methods[k++ % 3], strstr(conns[c], "->"));

			wide_metrics(&m, &ga, big);
			t.s.request(t.s.ctx, r, &m, &ga);
			request_free(r);
		}
	text_lines(&t);
	if (!ASSERT_EQ(t.n, 9, "a header and 8 lines")) {
		text_close(&t);
		return;
	}
	for (int i = 0; i < t.n; i++) {
		int w = text_cells(t.line[i], strlen(t.line[i]));

		if (!ASSERT_TRUE(w > 0 && w <= NO_GPU_MAX_CELLS, "at most 100 cells") ||
		    !ASSERT_EQ(w, 99, "every line as wide as the header") ||
		    !ASSERT_FALSE(strstr(t.line[i], "QUEUE"), "no GPU column"))
			printf("  line %d (%d cells): %s\n", i, w, t.line[i]);
	}
	ASSERT_STREQ(
	    t.line[0],
	    "PID     PEER#CONN              METHOD OUTCOME      HTTP TTFT(ms)  ITL50  ITL99 "
	    "  TOK  TOK/S E2E(ms)",
	    "the header");
	/* An IPv6 peer cut in its address: port and connection number whole. */
	ASSERT_TRUE(strstr(t.line[1], " [2001:db8:8\xe2\x80\xa6]:54321#12 "), "IPv6 peer");
	ASSERT_TRUE(strstr(t.line[3], " 255.255.255.255:65535# "), "no room: cut at its end");
	ASSERT_TRUE(strstr(t.line[5], " ->[2001:db8:8\xe2\x80\xa6]:8000#3 "),
		    "a client's upstream");
	ASSERT_TRUE(strstr(t.line[7], " unix:fd7#3             "), "a short label, padded");
	/* The widest values of each column as they are, the ones beyond it made shorter. */
	ASSERT_TRUE(strstr(t.line[1], "4194304 ") == t.line[1], "pid_max");
	ASSERT_TRUE(
	    strstr(t.line[1], " stream_error  200   1234.5 1234.5 1234.5 99999 100000  1234.5"),
	    "values that fit, 99999.9 tokens/s without its decimal");
	ASSERT_TRUE(strstr(t.line[2], "  987654s ****** ****** ***** ****** 987654s"),
		    "too wide: seconds, else stars");
	text_close(&t);
}

static struct gpu_step a_step(void)
{
	return (struct gpu_step){ .id = 1, .pid = 7, .start_ns = 1000, .end_ns = 2000 };
}

/*
 * The GPU columns come with the first GPU step (its step line, or a request whose attribution
 * saw steps), from the next request line on: a line says so and the header is written again.
 * They stay for a request without steps after it (a client's).
 */
TEST(test_text_gpu_columns_appear)
{
	struct request_metrics m;
	struct gpu_attribution ga;
	struct gpu_step s = a_step();
	struct request *r = wide_request("127.0.0.1:8000<-127.0.0.1:40000#1", "POST", false);
	struct text t;

	text_open(&t);
	wide_metrics(&m, &ga, false);
	t.s.request(t.s.ctx, r, &m, &ga);
	t.s.gpu_step(t.s.ctx, &s); /* not printed without --gpu-steps, but seen */
	ga.has_steps = true;
	ga.steps = 12;
	ga.batch_steps = 12;
	ga.batch_mean = 3.5;
	ga.queue_ns = 1500000;
	ga.prefill_ns = 30100000;
	ga.decode_ns = 123400000;
	t.s.request(t.s.ctx, r, &m, &ga);
	r->client = true;
	memset(&ga, 0, sizeof(ga));
	ga.queue_ns = ga.prefill_ns = ga.decode_ns = -1;
	t.s.request(t.s.ctx, r, &m, &ga);
	text_lines(&t);
	if (!ASSERT_EQ(t.n, 6, "header, line, note, header, 2 lines")) {
		request_free(r);
		text_close(&t);
		return;
	}
	ASSERT_FALSE(strstr(t.line[0], "QUEUE"), "no GPU column before the step");
	ASSERT_TRUE(text_cells(t.line[1], strlen(t.line[1])) <= NO_GPU_MAX_CELLS, "100 columns");
	ASSERT_STREQ(t.line[2], "--- GPU steps seen: the lines from here have the GPU columns",
		     "a line says so");
	ASSERT_TRUE(strstr(t.line[3], gpu_cols), "the header again, with the GPU columns");
	ASSERT_EQ(text_cells(t.line[3], strlen(t.line[3])), 135, "135 cells with them");
	ASSERT_TRUE(strstr(t.line[4], "     1.5    30.1   123.4    12   3.5"), "GPU values");
	ASSERT_EQ(text_cells(t.line[4], strlen(t.line[4])), 135, "a line as wide as its header");
	ASSERT_TRUE(strstr(t.line[5], "       -       -       -     -     -"),
		    "kept for a request without steps");
	request_free(r);
	text_close(&t);
}

/* Steps seen before the first line (a GPU server's prefill runs before any request ends): the
 * one header has the GPU columns, with no note. */
TEST(test_text_gpu_from_start)
{
	struct request_metrics m;
	struct gpu_attribution ga;
	struct request *r = wide_request("127.0.0.1:8000<-127.0.0.1:40000#1", "POST", false);
	struct text t;

	text_open(&t);
	wide_metrics(&m, &ga, false);
	ga.has_steps = true; /* seen by the pipeline (held for device times), not yet shown */
	t.s.request(t.s.ctx, r, &m, &ga);
	t.s.request(t.s.ctx, r, &m, &ga);
	text_lines(&t);
	if (ASSERT_EQ(t.n, 3, "header and 2 lines"))
		ASSERT_TRUE(strstr(t.line[0], gpu_cols), "GPU header");
	request_free(r);
	text_close(&t);
}

int main(void)
{
	return check_run_all();
}
