// SPDX-License-Identifier: MIT
/* tokenscope top: per-model rows over a sliding window of kernel time, the window sliding, GPU
 * step percentiles, the row cap, plain vs terminal frames, the GPU lines (NVML), and the key
 * reader. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "pipeline/gpu.h"
#include "pipeline/pipeline_impl.h"
#include "pipeline/request.h"
#include "sinks/top.h"
#include "lib/utf8.h"

#define S 1000000000ull
#define MS 1000000ull

/* The objectives feed judges its requests on (none unless a test sets some). */
static struct slo_rules feed_slo;

/* A finished request of model ending at end: TTFT ttft, ntok tokens itl apart. */
static void feed(struct sink *sk, const char *model, uint32_t pid, uint64_t end, uint64_t ttft,
		 uint64_t itl, uint32_t ntok, enum outcome o, const struct gpu_attribution *ga)
{
	struct request *r = request_new(pid, 1, 0, "c");
	struct gpu_attribution none = { -1,	  -1, -1, -1,	-1,
					"no GPU", -1, -1, NULL, .has_steps = false };
	struct request_metrics m;
	uint64_t first = end - (ntok ? (ntok - 1) * itl : 0);

	snprintf(r->info.model, sizeof(r->info.model), "%s", model);
	r->arrival_ns = first - ttft;
	for (uint32_t i = 0; i < ntok; i++)
		request_add_token(r, first + i * itl);
	r->end_ns = end;
	r->status = o == OUTCOME_HTTP_ERROR ? 500 : 200;
	r->outcome = o;
	request_metrics(r, &m);
	slo_judge(&feed_slo, r, &m, &m.slo);
	sk->request(sk->ctx, r, &m, ga ? ga : &none);
	request_free(r);
}

/* A tick of the pipeline's status: kernel time now, in flight 0, the lost records of pl. */
static void tick(struct sink *sk, const struct pipeline *pl, uint64_t now)
{
	struct pipeline_status st = { .now_ns = now };

	st.loss.lost_events = pl->kstats[TS_STAT_LOST_EVENTS];
	sk->tick(sk->ctx, &st);
}

static void step(struct sink *sk, uint64_t end, uint64_t dur, enum step_kind k)
{
	struct gpu_step s = { .pid = 9, .tid = 9, .start_ns = end - dur, .end_ns = end, .kind = k };

	sk->gpu_step(sk->ctx, &s);
}

struct row {
	double rps, ttft50, ttft99, itl50, itl99, toks;
	char ok[8], queue[8], prefill[8], gpu[8], slo[8];
};

/* Parses the row of model in the last frame of out; false when there is none. */
static bool find_row(const char *out, const char *model, struct row *r)
{
	const char *frame = out, *p, *next;
	char name[64], pat[80];

	while ((next = strstr(frame + 1, "tokenscope top")))
		frame = next;
	snprintf(pat, sizeof(pat), " %s ", model);
	p = strstr(frame, pat);
	if (!p)
		return false;
	return sscanf(p, "%63s %lf %lf %lf %lf %lf %lf %7s %7s %7s %7s %7s", name, &r->rps,
		      &r->ttft50, &r->ttft99, &r->itl50, &r->itl99, &r->toks, r->ok, r->queue,
		      r->prefill, r->gpu, r->slo) == 12;
}

static const char *last_frame(const char *out)
{
	const char *frame = out, *next;

	while ((next = strstr(frame + 1, "tokenscope top")))
		frame = next;
	return frame;
}

TEST(test_rows_and_window)
{
	struct pipeline pl;
	struct top t;
	struct sink sk;
	struct row r;
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	struct gpu_attribution ga = { .queue_ns = 25 * MS,
				      .prefill_ns = 75 * MS,
				      .decode_ns = 60 * MS,
				      .gpu_ns = 45 * MS,
				      .host_ns = 15 * MS,
				      .how = "by time",
				      -1,
				      -1,
				      NULL,
				      .has_steps = false };

	memset(&pl, 0, sizeof(pl));
	pl.kstats[TS_STAT_LOST_EVENTS] = 7;
	if (!ASSERT_OK_PTR(f, "memstream") || !ASSERT_OK(top_init(&t, f, false, false), "init"))
		return;
	/* The header's time of day: kernel time 0 at the epoch, in UTC. */
	t.wall_offset_ns = 0;
	setenv("TZ", "UTC", 1);
	tzset();
	sk = top_sink(&t);
	char msg[256];

	memset(&feed_slo, 0, sizeof(feed_slo));
	slo_parse(&feed_slo, "model=llama:ttft<=150ms", msg, sizeof(msg));
	slo_parse(&feed_slo, "model=qwen:ttft<=60ms", msg, sizeof(msg));
	/* llama, second 1: three ok (TTFT 100 ms, 4 tokens 20 ms apart) and one HTTP error. */
	for (int i = 0; i < 3; i++)
		feed(&sk, "llama", 100, 1500 * MS + i * MS, 100 * MS, 20 * MS, 4, OUTCOME_OK, &ga);
	feed(&sk, "llama", 100, 1600 * MS, 0, 0, 0, OUTCOME_HTTP_ERROR, NULL);
	/* qwen, second 2: two ok (TTFT 50 ms, 3 tokens 10 ms apart), no attribution. */
	feed(&sk, "qwen", 100, 2500 * MS, 50 * MS, 10 * MS, 3, OUTCOME_OK, NULL);
	feed(&sk, "qwen", 100, 2600 * MS, 50 * MS, 10 * MS, 3, OUTCOME_OK, NULL);
	for (int i = 0; i < 3; i++)
		step(&sk, 2100 * MS + i * 10 * MS, 10 * MS, STEP_DECODE);
	step(&sk, 2200 * MS, 30 * MS, STEP_PREFILL);

	tick(&sk, &pl, 3 * S);
	tick(&sk, &pl, 3 * S + 500 * MS); /* same second: no new frame */
	fflush(f);
	ASSERT_TRUE(strstr(out, "tokenscope top  window 2 s ending 00:00:03") != NULL, "header");
	ASSERT_TRUE(strstr(last_frame(out) + 1, "tokenscope top") == NULL, "one frame");
	if (ASSERT_TRUE(find_row(out, "llama", &r), "llama row")) {
		ASSERT_NEAR(r.rps, 2.0, 1e-9, "llama rps: 4 requests over 2 s");
		ASSERT_NEAR(r.ttft50, 100.0, 1e-9, "llama ttft p50");
		ASSERT_NEAR(r.ttft99, 100.0, 1e-9, "llama ttft p99");
		ASSERT_NEAR(r.itl50, 20.0, 1e-9, "llama itl p50");
		ASSERT_NEAR(r.itl99, 20.0, 1e-9, "llama itl p99");
		ASSERT_NEAR(r.toks, 6.0, 1e-9, "llama tok/s: 12 tokens over 2 s");
		ASSERT_STREQ(r.ok, "75", "llama ok%");
		ASSERT_STREQ(r.queue, "25", "llama queue%");
		ASSERT_STREQ(r.prefill, "75", "llama prefill%");
		ASSERT_STREQ(r.gpu, "75", "llama gpu%");
		ASSERT_STREQ(r.slo, "75", "llama slo%: the HTTP error missed");
	}
	if (ASSERT_TRUE(find_row(out, "qwen", &r), "qwen row")) {
		ASSERT_NEAR(r.rps, 1.0, 1e-9, "qwen rps");
		ASSERT_NEAR(r.ttft50, 50.0, 1e-9, "qwen ttft p50");
		ASSERT_NEAR(r.itl99, 10.0, 1e-9, "qwen itl p99");
		ASSERT_NEAR(r.toks, 3.0, 1e-9, "qwen tok/s");
		ASSERT_STREQ(r.ok, "100", "qwen ok%");
		ASSERT_STREQ(r.queue, "-", "qwen queue% unknown");
		ASSERT_STREQ(r.gpu, "-", "qwen gpu% unknown");
		ASSERT_STREQ(r.slo, "100", "qwen slo%");
	}
	/* Over all kinds the median's bucket also holds 10 ms but not its extreme: its middle. */
	ASSERT_TRUE(strstr(out, "GPU steps 2.0/s, step p50 10.1 ms (decode 10.0, prefill 30.0, "
				"mixed -)") != NULL,
		    "steps");
	ASSERT_TRUE(strstr(out, "6 requests in the window, 6 since start; lost 7 records") != NULL,
		    "footer");

	/* At 12 s the window is seconds 2..11: llama (second 1) is out, qwen (second 2) in. */
	tick(&sk, &pl, 12 * S);
	fflush(f);
	ASSERT_FALSE(find_row(out, "llama", &r), "llama slid out");
	if (ASSERT_TRUE(find_row(out, "qwen", &r), "qwen still in"))
		ASSERT_NEAR(r.rps, 0.2, 1e-9, "qwen rps over 10 s");
	ASSERT_TRUE(strstr(last_frame(out), "window 10 s ending 00:00:12") != NULL, "full window");
	tick(&sk, &pl, 13 * S);
	fflush(f);
	ASSERT_FALSE(find_row(out, "qwen", &r), "qwen slid out");
	ASSERT_TRUE(strstr(last_frame(out), "0 requests in the window, 6 since start") != NULL,
		    "empty window");
	ASSERT_TRUE(strstr(last_frame(out), "GPU steps") == NULL, "steps slid out");

	/* Plain frames: no escape byte, every line starts with the kernel time. */
	ASSERT_TRUE(memchr(out, '\033', len) == NULL, "no escapes");
	ASSERT_TRUE(strncmp(out, "3.000 tokenscope top", 20) == 0, "timestamped");
	for (const char *p = out; (p = strchr(p, '\n')) && p[1]; p++)
		if (p[1] != '\n' && !ASSERT_TRUE(p[1] >= '1' && p[1] <= '9', "line prefix"))
			break;
	memset(&feed_slo, 0, sizeof(feed_slo));
	top_free(&t);
	fclose(f);
	free(out);
}

TEST(test_tty_and_by_process)
{
	struct pipeline pl;
	struct top t;
	struct sink sk;
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	memset(&pl, 0, sizeof(pl));
	if (!ASSERT_OK_PTR(f, "memstream") || !ASSERT_OK(top_init(&t, f, true, true), "init"))
		return;
	sk = top_sink(&t);
	feed(&sk, "llama", 100, 1500 * MS, 100 * MS, 20 * MS, 4, OUTCOME_OK, NULL);
	feed(&sk, "llama", 200, 1500 * MS, 300 * MS, 20 * MS, 4, OUTCOME_OK, NULL);
	feed(&sk, "", 200, 1500 * MS, 300 * MS, 20 * MS, 4, OUTCOME_OK, NULL);
	tick(&sk, &pl, 2 * S);
	tick(&sk, &pl, 3 * S);
	fflush(f);
	ASSERT_TRUE(strncmp(out, TOP_CLEAR, strlen(TOP_CLEAR)) == 0, "clears first");
	ASSERT_TRUE(strstr(out + 1, TOP_CLEAR "tokenscope top") != NULL, "each frame clears");
	ASSERT_TRUE(strstr(last_frame(out), "llama            100 ") != NULL, "pid 100 row");
	ASSERT_TRUE(strstr(last_frame(out), "llama            200 ") != NULL, "pid 200 row");
	ASSERT_TRUE(strstr(last_frame(out), "(unknown)") != NULL, "unknown model");
	ASSERT_TRUE(strstr(last_frame(out), "q quits") != NULL, "key hint");
	for (const char *p = out; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : "")
		if (!ASSERT_TRUE(strcspn(p, "\n") <= 100, "fits 100 columns"))
			break;
	top_free(&t);
	fclose(f);
	free(out);
}

/* A model name in a script of wide characters, longer than its column: cut at a character, so
 * the frame stays UTF-8 and the next column starts where the header's does. */
TEST(test_wide_model_name)
{
	const char *name = "通义千问-72B-Instruct-量化版本-v2";
	struct top t;
	struct sink sk;
	char *out = NULL;
	const char *row, *head;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (!ASSERT_OK_PTR(f, "memstream") || !ASSERT_OK(top_init(&t, f, false, false), "init"))
		return;
	sk = top_sink(&t);
	feed(&sk, name, 100, 1500 * MS, 100 * MS, 20 * MS, 4, OUTCOME_OK, NULL);
	top_render(&t, 2 * S, f);
	fflush(f);
	for (size_t i = 0; i < len;) {
		size_t n = utf8_len((const unsigned char *)out + i, len - i);

		if (!ASSERT_TRUE(n > 0, "the frame is UTF-8"))
			break;
		i += n;
	}
	head = strstr(out, "MODEL");
	row = strstr(out, "通义千问");
	if (!ASSERT_OK_PTR(head, "header") || !ASSERT_OK_PTR(row, "row"))
		goto out;
	/* 24 cells (28 bytes, where a cut at 24 bytes would split 量): then the RPS column. */
	if (!ASSERT_TRUE(!strncmp(row, "通义千问-72B-Instruct-量    1.0 ",
				  strlen("通义千问-72B-Instruct-量    1.0 ")),
			 "cut after 24 cells, RPS next"))
		printf("  row: %.*s\n", (int)strcspn(row, "\n"), row);
	ASSERT_TRUE(!strncmp(head, "MODEL                       RPS", 31),
		    "header: RPS after 24 cells");
out:
	top_free(&t);
	fclose(f);
	free(out);
}

TEST(test_model_cap)
{
	struct top t;
	struct sink sk;
	char name[16], *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (!ASSERT_OK_PTR(f, "memstream") || !ASSERT_OK(top_init(&t, f, false, false), "init"))
		return;
	sk = top_sink(&t);
	for (int i = 0; i <= TOP_MAX_MODELS; i++) {
		snprintf(name, sizeof(name), "m%d", i);
		feed(&sk, name, 1, 1500 * MS, 10 * MS, 0, 1, OUTCOME_OK, NULL);
	}
	ASSERT_EQ(t.nmodels, TOP_MAX_MODELS, "rows capped");
	ASSERT_EQ(t.models_dropped, 1, "one dropped");
	top_render(&t, 2 * S, f);
	fflush(f);
	ASSERT_TRUE(
	    strstr(out,
		   "32 requests in the window, 33 since start, 1 not shown (over 32 models)") !=
		NULL,
	    "says so");
	/* Once every row has left the window, a new model takes one. */
	feed(&sk, "late", 1, 20 * S, 10 * MS, 0, 1, OUTCOME_OK, NULL);
	ASSERT_EQ(t.models_dropped, 1, "row reused");
	top_render(&t, 21 * S, f);
	fflush(f);
	ASSERT_TRUE(strstr(last_frame(out), " late ") != NULL, "late row");
	top_free(&t);
	fclose(f);
	free(out);
}

TEST(test_gpu_lines)
{
	struct device_sample *s = calloc(1, sizeof(*s));
	struct top t;
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (!ASSERT_OK_PTR(s, "snapshot") || !ASSERT_OK_PTR(f, "memstream") ||
	    !ASSERT_OK(top_init(&t, f, false, false), "init"))
		return;
	top_render(&t, 2 * S, f);
	fflush(f);
	ASSERT_TRUE(strstr(out, "GPU 0") == NULL, "no line before a sample");

	s->seq = 1;
	s->ndevices = 2;
	s->devices[0] = (struct sampled_device){ .index = 0,
						 .mono_ns = 1 * S,
						 .name = "NVIDIA H200",
						 .util_present = true,
						 .util_pct = 87,
						 .mem_present = true,
						 .mem_used = 3ull << 30,
						 .mem_total = 140ull << 30,
						 .clock_present = true,
						 .sm_clock_hz = 1980000000,
						 .power_present = true,
						 .power_mw = 412345,
						 .nprocs = 5 };
	for (uint32_t i = 0; i < 5; i++)
		s->devices[0].procs[i] = (struct sampled_proc){ .pid = 100 + i,
								.mem_present = i != 1,
								.mem_bytes = 512 << 20 };
	s->devices[1] = (struct sampled_device){
		.index = 1, .mono_ns = 1 * S, .util_present = true, .util_pct = 7
	};
	ASSERT_OK(top_set_gpu_sample(&t, s), "sample");
	s->devices[0].util_pct = 1; /* top keeps a copy */
	top_render(&t, 2 * S, f);
	fflush(f);
	ASSERT_TRUE(
	    strstr(last_frame(out),
		   "2.000 GPU 0 NVIDIA H200: util 87%, memory 3.00 GiB of 140.00 GiB, SM 1980 "
		   "MHz, 412.3 W\n2.000   GPU 0 memory of pid 100 512.0 MiB, pid 101 n/a, pid "
		   "102 512.0 MiB, pid 103 512.0 MiB, 1 more\n") != NULL,
	    "GPU 0: every value, four processes and how many more");
	ASSERT_TRUE(strstr(last_frame(out), "2.000 GPU 1 unnamed: util 7%, memory n/a\n") != NULL,
		    "GPU 1: what it gives, n/a for memory, no clock or power");
	ASSERT_TRUE(strstr(last_frame(out), "GPU 1 memory of") == NULL, "GPU 1: no processes");
	top_render(&t, 10 * S, f);
	fflush(f);
	ASSERT_TRUE(
	    strstr(last_frame(out), "GPU 1 unnamed: util 7%, memory n/a (sampled 9 s ago)") != NULL,
	    "a stale sample says its age");
	top_free(&t);
	fclose(f);
	free(out);
	free(s);
}

/* Preempted requests in the window: one line with how many of those whose steps are known;
 * none when nobody was. */
TEST(test_preempted_line)
{
	struct gpu_attribution steps = { -1,	    -1, -1, -1,	  -1,
					 "by time", -1, -1, NULL, .has_steps = true };
	struct gpu_attribution out = steps;
	struct top t;
	struct sink sk;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!ASSERT_OK_PTR(f, "memstream") || !ASSERT_OK(top_init(&t, f, false, false), "init"))
		return;
	sk = top_sink(&t);
	out.preemptions = 2;
	out.preempted_ns = 90 * MS;
	feed(&sk, "llama", 1, 1 * S, 50 * MS, 10 * MS, 10, OUTCOME_OK, &steps);
	feed(&sk, "llama", 1, 1 * S, 50 * MS, 10 * MS, 10, OUTCOME_OK, &steps);
	top_render(&t, 2 * S, f);
	fflush(f);
	ASSERT_TRUE(strstr(last_frame(text), "preempted") == NULL, "none preempted: no line");
	feed(&sk, "llama", 1, 1 * S, 50 * MS, 10 * MS, 10, OUTCOME_OK, &out);
	feed(&sk, "qwen", 1, 1 * S, 50 * MS, 10 * MS, 10, OUTCOME_OK, NULL);
	top_render(&t, 2 * S, f);
	fflush(f);
	ASSERT_TRUE(strstr(last_frame(text),
			   "preempted: 1 of 3 requests with GPU steps (out of "
			   "the batch, recomputed: KV cache likely full)\n") != NULL,
		    "one of the three with steps");
	top_free(&t);
	fclose(f);
	free(text);
}

TEST(test_keys)
{
	struct termios saved;
	int p[2];

	if (!ASSERT_OK(pipe(p), "pipe"))
		return;
	ASSERT_EQ(top_keypress(p[0]), 0, "nothing to read");
	ASSERT_EQ(write(p[1], "x", 1), 1, "write");
	ASSERT_EQ(top_keypress(p[0]), 0, "not q");
	ASSERT_EQ(write(p[1], "aq", 2), 2, "write");
	ASSERT_EQ(top_keypress(p[0]), 1, "q");
	ASSERT_FALSE(fcntl(p[0], F_GETFL) & O_NONBLOCK, "blocking mode restored");
	ASSERT_EQ(top_term_raw(p[0], &saved), -ENOTTY, "a pipe is no terminal");
	close(p[0]);
	close(p[1]);
}

int main(void)
{
	return check_run_all();
}
