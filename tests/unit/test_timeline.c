// SPDX-License-Identifier: MIT
/*
 * The timeline export: requests (attributed or not), tokens and GPU steps (with their device
 * track) through the sink callbacks, then the file parsed back as JSON; a file cut off before
 * timeline_close; and a simulated continuous-batching server driven through the whole pipeline,
 * whose file is kept where TIMELINE_OUT says (docs/timeline.svg was drawn from it by
 * scripts/timeline-svg.py).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "pipeline/pipeline_impl.h"
#include "pipeline/batch.h"
#include "sinks/timeline.h"

#define US 1000ull
#define MS 1000000ull
/* A CLOCK_MONOTONIC origin well after boot, with a sub-microsecond part. */
#define ORIGIN (7000 * 1000 * MS + 123)

struct tfile {
	char path[256];
	struct timeline t;
	struct sink s;
	char *text;
	cJSON *root, *events;
};

static void tf_open(struct tfile *f)
{
	int fd;

	memset(f, 0, sizeof(*f));
	snprintf(f->path, sizeof(f->path), "/tmp/test_timeline.XXXXXX");
	fd = mkstemp(f->path);
	if (fd >= 0)
		close(fd);
	ASSERT_OK(timeline_open(&f->t, f->path), "open");
	f->s = timeline_sink(&f->t);
}

/* Parses the file as it is now, with `suffix` appended (the closing "]}" of a cut file). */
static bool tf_parse(struct tfile *f, const char *suffix)
{
	char *text = check_read_file(f->path);
	size_t n;

	cJSON_Delete(f->root);
	f->root = f->events = NULL;
	free(f->text);
	f->text = NULL;
	if (!ASSERT_OK_PTR(text, "read the file"))
		return false;
	n = strlen(text);
	f->text = realloc(text, n + strlen(suffix) + 1);
	strcpy(f->text + n, suffix);
	f->root = cJSON_Parse(f->text);
	if (!ASSERT_OK_PTR(f->root, "the file is JSON"))
		return false;
	f->events = cJSON_GetObjectItemCaseSensitive(f->root, "traceEvents");
	return ASSERT_TRUE(cJSON_IsArray(f->events), "traceEvents is an array");
}

static bool tf_close_parse(struct tfile *f)
{
	return ASSERT_OK(timeline_close(&f->t), "close") && tf_parse(f, "");
}

static void tf_free(struct tfile *f)
{
	timeline_close(&f->t);
	cJSON_Delete(f->root);
	free(f->text);
	unlink(f->path);
}

static double num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsNumber(v) ? v->valuedouble : -12345;
}

static const char *str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsString(v) ? v->valuestring : "(not a string)";
}

static const cJSON *args(const cJSON *e)
{
	return cJSON_GetObjectItemCaseSensitive(e, "args");
}

/* What every event must have: ph, ts, pid, tid; a complete event, dur >= 0. And a tid is in
 * one process only (Perfetto takes tids as system-wide, as on Linux). */
static bool check_events(const cJSON *events)
{
	const cJSON *e, *o;
	int i = 0;

	cJSON_ArrayForEach(e, events)
	{
		cJSON_ArrayForEach(o, events)
		{
			if (o == e)
				break;
			if (num(o, "tid") == num(e, "tid") &&
			    !ASSERT_EQ(num(o, "pid"), num(e, "pid"), "a tid in one process only"))
				return false;
		}
	}

	cJSON_ArrayForEach(e, events)
	{
		const char *ph = str(e, "ph");
		char label[64];

		snprintf(label, sizeof(label), "event %d has ph, ts, pid, tid, name", i++);
		if (!ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(e, "ph")) &&
				     cJSON_IsNumber(cJSON_GetObjectItem(e, "ts")) &&
				     cJSON_IsNumber(cJSON_GetObjectItem(e, "pid")) &&
				     cJSON_IsNumber(cJSON_GetObjectItem(e, "tid")) &&
				     cJSON_IsString(cJSON_GetObjectItem(e, "name")),
				 label))
			return false;
		if (strcmp(ph, "X") == 0 && !ASSERT_TRUE(num(e, "dur") >= 0, "dur >= 0"))
			return false;
		if (strcmp(ph, "i") == 0 && !ASSERT_STREQ(str(e, "s"), "t", "thread instant"))
			return false;
	}
	return true;
}

static int count(const cJSON *events, const char *ph, const char *name)
{
	const cJSON *e;
	int n = 0;

	cJSON_ArrayForEach(e, events) if ((!ph || strcmp(str(e, "ph"), ph) == 0) &&
					  (!name || strcmp(str(e, "name"), name) == 0)) n++;
	return n;
}

static int count_pid(const cJSON *events, const char *ph, uint32_t pid)
{
	const cJSON *e;
	int n = 0;

	cJSON_ArrayForEach(e, events) n += strcmp(str(e, "ph"), ph) == 0 && num(e, "pid") == pid;
	return n;
}

/* The nth (from 0) event with this ph and name, or NULL. */
static const cJSON *find(const cJSON *events, const char *ph, const char *name, int nth)
{
	const cJSON *e;

	cJSON_ArrayForEach(e, events) if (strcmp(str(e, "ph"), ph) == 0 &&
					  strcmp(str(e, "name"), name) == 0 && !nth--) return e;
	return NULL;
}

/* The complete event with this name and category, or NULL. */
static const cJSON *find_cat(const cJSON *events, const char *name, const char *cat)
{
	const cJSON *e;

	cJSON_ArrayForEach(e, events) if (strcmp(str(e, "ph"), "X") == 0 &&
					  strcmp(str(e, "name"), name) == 0 &&
					  strcmp(str(e, "cat"), cat) == 0) return e;
	return NULL;
}

static struct request *make_request(uint64_t conn_id, uint64_t arrival, uint64_t first,
				    uint64_t gap, uint32_t ntokens, uint64_t end)
{
	char label[64];
	struct request *r;

	snprintf(label, sizeof(label), "127.0.0.1:8000<-127.0.0.1:%llu#%llu",
		 40000 + (unsigned long long)conn_id, (unsigned long long)conn_id);
	r = request_new(100, conn_id, 0, label);
	snprintf(r->method, sizeof(r->method), "POST");
	snprintf(r->path, sizeof(r->path), "/v1/chat/completions");
	snprintf(r->info.model, sizeof(r->info.model), "m1");
	r->status = 200;
	r->streamed = true;
	r->arrival_ns = arrival;
	for (uint32_t i = 0; i < ntokens; i++)
		request_add_token(r, first + i * gap);
	r->end_ns = end;
	return r;
}

static void report(struct tfile *f, struct request *r, const struct gpu_attribution *ga)
{
	struct request_metrics m;

	request_metrics(r, &m);
	f->s.request(f->s.ctx, r, &m, ga);
	request_free(r);
}

static const struct gpu_attribution NOT_ATTRIBUTED = {
	-1, -1, -1, -1, -1, "none: no GPU steps seen", -1, -1, NULL, .has_steps = false,
};

TEST(test_attributed_request)
{
	struct tfile f;
	/* Arrives at +5.000123 ms, queues 2 ms, prefill 30 ms, 4 tokens 10 ms apart from +38. */
	struct request *r =
	    make_request(3, ORIGIN + 5 * MS + 123, ORIGIN + 38 * MS, 10 * MS, 4, ORIGIN + 70 * MS);
	struct gpu_attribution ga = { 2 * MS,	 30 * MS, 32 * MS, 27 * MS, 3 * MS,
				      "by time", -1,	  -1,	   NULL,    .has_steps = false };
	const cJSON *e;

	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin");
	report(&f, r, &ga);
	if (!tf_close_parse(&f) || !check_events(f.events))
		goto out;

	ASSERT_STREQ(str(f.root, "displayTimeUnit"), "ms", "displayTimeUnit");
	e = cJSON_GetObjectItem(f.root, "otherData");
	ASSERT_EQ(num(e, "origin_ns"), ORIGIN, "absolute origin kept");
	ASSERT_STREQ(str(e, "origin"), "start of tracing", "origin given");

	e = find(f.events, "M", "process_name", 0);
	if (ASSERT_OK_PTR(e, "connections process named")) {
		ASSERT_EQ(num(e, "pid"), TIMELINE_CONN_PID, "connections pid");
		ASSERT_STREQ(str(args(e), "name"), "connections", "connections name");
	}
	e = find(f.events, "M", "thread_name", 0);
	if (ASSERT_OK_PTR(e, "connection track named")) {
		ASSERT_EQ(num(e, "tid"), TIMELINE_CONN_TID(3), "tid from the connection number");
		ASSERT_STREQ(str(args(e), "name"), "127.0.0.1:8000<-127.0.0.1:40003#3",
			     "named by the conn label");
	}

	e = find(f.events, "X", "request", 0);
	if (ASSERT_OK_PTR(e, "request slice")) {
		ASSERT_EQ(num(e, "pid"), TIMELINE_CONN_PID, "request on the connections process");
		ASSERT_EQ(num(e, "tid"), TIMELINE_CONN_TID(3), "request on its connection's track");
		ASSERT_NEAR(num(e, "ts"), 5000.123, 1e-6, "ts in us, relative, ns exact");
		ASSERT_NEAR(num(e, "dur"), 64999.877, 1e-6, "dur: arrival to end");
		ASSERT_STREQ(str(args(e), "model"), "m1", "model");
		ASSERT_STREQ(str(args(e), "outcome"), "ok", "outcome");
		ASSERT_EQ(num(args(e), "status"), 200, "status");
		ASSERT_NEAR(num(args(e), "ttft_ms"), 32.999877, 0.0006, "ttft_ms");
		ASSERT_EQ(num(args(e), "tokens"), 4, "tokens");
	}
	ASSERT_TRUE(strstr(f.text, "\"ts\":5000.123,") != NULL, "ts printed exactly");

	e = find(f.events, "X", "queue", 0);
	if (ASSERT_OK_PTR(e, "queue slice")) {
		ASSERT_NEAR(num(e, "ts"), 5000.123, 1e-6, "queue starts at arrival");
		ASSERT_NEAR(num(e, "dur"), 2000, 1e-6, "queue_ns");
	}
	e = find(f.events, "X", "prefill", 0);
	if (ASSERT_OK_PTR(e, "prefill slice")) {
		ASSERT_NEAR(num(e, "ts"), 7000.123, 1e-6, "prefill after the queue");
		ASSERT_NEAR(num(e, "dur"), 30000, 1e-6, "prefill_ns");
	}
	e = find(f.events, "X", "decode", 0);
	if (ASSERT_OK_PTR(e, "decode slice")) {
		ASSERT_NEAR(num(e, "ts"), 38000, 1e-6, "decode from the first token");
		ASSERT_NEAR(num(e, "dur"), 32000, 1e-6, "to the end");
	}
	ASSERT_EQ(count(f.events, "X", "waiting for first token"), 0, "attributed: no waiting");
	ASSERT_EQ(count(f.events, "i", "token"), 4, "an instant per token");
	e = find(f.events, "i", "token", 3);
	if (ASSERT_OK_PTR(e, "last token"))
		ASSERT_NEAR(num(e, "ts"), 68000, 1e-6, "token time");
	ASSERT_EQ(count(f.events, "X", NULL), 4, "request, queue, prefill, decode");
out:
	tf_free(&f);
}

/* HTTP/2 streams of one connection that overlap go to lanes (a track's slices must nest); one
 * that starts after the others ended goes back to the first; a client's request is named
 * apart. */
TEST(test_overlapping_streams_and_clients)
{
	struct tfile f;
	struct request *a =
	    make_request(7, ORIGIN + 1 * MS, ORIGIN + 5 * MS, MS, 2, ORIGIN + 40 * MS);
	struct request *b =
	    make_request(7, ORIGIN + 2 * MS, ORIGIN + 6 * MS, MS, 2, ORIGIN + 20 * MS);
	struct request *c =
	    make_request(7, ORIGIN + 41 * MS, ORIGIN + 45 * MS, MS, 2, ORIGIN + 50 * MS);
	struct request *up =
	    make_request(8, ORIGIN + 3 * MS, ORIGIN + 4 * MS, MS, 1, ORIGIN + 9 * MS);
	const cJSON *e;

	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin");
	a->proto = b->proto = c->proto = PROTO_HTTP2;
	a->stream = 1;
	b->stream = 3;
	c->stream = 5;
	up->client = true;
	/* In the order they finish: b, a (overlaps b), c (after both). */
	report(&f, b, &NOT_ATTRIBUTED);
	report(&f, a, &NOT_ATTRIBUTED);
	report(&f, c, &NOT_ATTRIBUTED);
	report(&f, up, &NOT_ATTRIBUTED);
	if (!tf_close_parse(&f) || !check_events(f.events))
		goto out;
	e = find(f.events, "X", "request", 0);
	if (ASSERT_OK_PTR(e, "stream 3"))
		ASSERT_EQ(num(e, "tid"), TIMELINE_CONN_TID(7),
			  "first lane: the connection's track");
	e = find(f.events, "X", "request", 1);
	if (ASSERT_OK_PTR(e, "stream 1")) {
		ASSERT_EQ(num(e, "tid"), TIMELINE_LANE_TID(7, 1), "overlaps: the second lane");
		ASSERT_EQ(num(args(e), "h2_stream"), 1, "its stream");
	}
	e = find(f.events, "X", "request", 2);
	if (ASSERT_OK_PTR(e, "stream 5"))
		ASSERT_EQ(num(e, "tid"), TIMELINE_CONN_TID(7), "after both: the first lane again");
	e = find(f.events, "X", "upstream request", 0);
	if (ASSERT_OK_PTR(e, "the client's request")) {
		ASSERT_EQ(num(e, "tid"), TIMELINE_CONN_TID(8), "on its connection's track");
		ASSERT_STREQ(str(args(e), "role"), "client", "role");
	}
	ASSERT_EQ(count(f.events, "M", "thread_name"), 3, "two connections and one lane named");
	ASSERT_TRUE(timeline_sink(&f.t).clients, "the sink takes client requests");
out:
	tf_free(&f);
}

TEST(test_unattributed_and_failed)
{
	struct tfile f;
	struct request *r =
	    make_request(1, ORIGIN + 1 * MS, ORIGIN + 31 * MS, 10 * MS, 3, ORIGIN + 52 * MS);
	struct request *bad = make_request(2, ORIGIN + 2 * MS, 0, 0, 0, ORIGIN + 3 * MS);
	const cJSON *e;

	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin");
	report(&f, r, &NOT_ATTRIBUTED);
	bad->status = 429;
	bad->streamed = false;
	bad->outcome = OUTCOME_HTTP_ERROR;
	bad->info.model[0] = 0;
	report(&f, bad, &NOT_ATTRIBUTED);
	if (!tf_close_parse(&f) || !check_events(f.events))
		goto out;

	e = find(f.events, "X", "waiting for first token", 0);
	if (ASSERT_OK_PTR(e, "waiting slice")) {
		ASSERT_NEAR(num(e, "ts"), 1000, 1e-6, "from arrival");
		ASSERT_NEAR(num(e, "dur"), 30000, 1e-6, "to the first token");
	}
	e = find(f.events, "X", "streaming", 0);
	if (ASSERT_OK_PTR(e, "streaming slice")) {
		ASSERT_NEAR(num(e, "ts"), 31000, 1e-6, "from the first token");
		ASSERT_NEAR(num(e, "dur"), 21000, 1e-6, "to the end");
	}
	ASSERT_EQ(count(f.events, "X", "queue") + count(f.events, "X", "prefill") +
		      count(f.events, "X", "decode"),
		  0, "no attributed phases");
	ASSERT_EQ(count(f.events, "i", "token"), 3, "tokens of the streamed one only");

	e = find(f.events, "X", "request: http_error", 0);
	if (ASSERT_OK_PTR(e, "a failed request is named by its outcome")) {
		ASSERT_EQ(num(e, "tid"), TIMELINE_CONN_TID(2), "on its own track");
		ASSERT_NEAR(num(e, "dur"), 1000, 1e-6, "its whole time");
		ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(args(e), "model")), "model null");
		ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(args(e), "ttft_ms")), "ttft null");
		ASSERT_EQ(num(args(e), "status"), 429, "status");
		ASSERT_STREQ(str(args(e), "outcome"), "http_error", "outcome");
	}
	ASSERT_EQ(count(f.events, "M", "thread_name"), 2, "two connections named");
out:
	tf_free(&f);
}

/*
 * Arrows from each GPU step to the token writes it produced (batch.h's rides): a flow start on
 * the step's track, inside its slice (1 ns before its end), and a flow end on the request's
 * track at the token's time, written before the token's instant (which it binds to), one pair
 * per token with its own id. A step the history no longer held gets none. The step's slice says
 * its batch.
 */
TEST(test_step_flows)
{
	struct tfile f;
	/* Tokens at +38, +48, +58 ms. */
	struct request *r =
	    make_request(3, ORIGIN + 5 * MS, ORIGIN + 38 * MS, 10 * MS, 3, ORIGIN + 60 * MS);
	struct batch_ride rides[] = {
		{ .pid = 4242,
		  .tid = 4243,
		  .start_ns = ORIGIN + 7 * MS,
		  .end_ns = ORIGIN + 37 * MS,
		  .batch = 2,
		  .known = true,
		  .token = 0,
		  .ntokens = 1 },
		{ .pid = 4242,
		  .tid = 4243,
		  .start_ns = ORIGIN + 38 * MS,
		  .end_ns = ORIGIN + 47 * MS,
		  .batch = 2,
		  .known = true,
		  .token = 1,
		  .ntokens = 1 },
		{ .known = false, .token = 2, .ntokens = 1 },
	};
	struct gpu_attribution ga = {
		.queue_ns = 2 * MS,
		.prefill_ns = 30 * MS,
		.decode_ns = 32 * MS,
		.gpu_ns = 27 * MS,
		.host_ns = 3 * MS,
		.how = "by time",
		.prefill_gpu_ns = -1,
		.decode_gpu_ns = -1,
		.has_steps = true,
		.steps = 2,
		.batch_steps = 1,
		.batch_mean = 2,
		.rides = rides,
		.nrides = 3,
	};
	struct gpu_step s = { .pid = 4242, .tid = 4243, .start_ns = ORIGIN + 7 * MS };
	const cJSON *e, *x;
	char *tok, *fl;

	s.end_ns = s.wait_start_ns = ORIGIN + 37 * MS;
	s.launches = 40;
	s.kind = STEP_PREFILL;
	s.batch = 2;
	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin");
	f.s.gpu_step(f.s.ctx, &s);
	report(&f, r, &ga);
	if (!tf_close_parse(&f) || !check_events(f.events))
		goto out;
	e = find(f.events, "X", "prefill", 0);
	if (ASSERT_OK_PTR(e, "the step"))
		ASSERT_EQ(num(args(e), "batch"), 2, "its batch");
	ASSERT_EQ(count(f.events, "s", "token"), 2, "a flow per token of a kept step");
	ASSERT_EQ(count(f.events, "f", "token"), 2, "and its end");
	for (int i = 0; i < 2; i++) {
		e = find(f.events, "s", "token", i);
		x = find(f.events, "f", "token", i);
		if (!ASSERT_OK_PTR(e, "flow start") || !ASSERT_OK_PTR(x, "flow end"))
			break;
		ASSERT_EQ(num(e, "id"), num(x, "id"), "one id per arrow");
		ASSERT_STREQ(str(e, "cat"), "batch", "category");
		ASSERT_EQ(num(e, "pid"), 4242, "from the step's process");
		ASSERT_EQ(num(e, "tid"), 4243, "and thread");
		ASSERT_NEAR(num(e, "ts"), i ? 46999.999 : 36999.999, 1e-6,
			    "inside the step's slice");
		ASSERT_EQ(num(x, "pid"), TIMELINE_CONN_PID, "to the connection");
		ASSERT_EQ(num(x, "tid"), TIMELINE_CONN_TID(3), "its track");
		ASSERT_NEAR(num(x, "ts"), i ? 48000 : 38000, 1e-6, "at the token");
	}
	e = find(f.events, "s", "token", 1);
	x = find(f.events, "s", "token", 0);
	if (e && x)
		ASSERT_TRUE(num(e, "id") != num(x, "id"), "ids differ");
	tok = strstr(f.text, "\"ph\":\"i\"");
	fl = strstr(f.text, "\"ph\":\"f\"");
	ASSERT_TRUE(tok && fl && fl < tok, "flow ends before the instants they bind to");
out:
	tf_free(&f);
}

/* A stall blamed on a prefill step: an arrow from that step to the token after the stall, and
 * the request's args count its stalls; a stall with no step (host time) has no arrow. */
TEST(test_stall_flows)
{
	struct tfile f;
	/* Tokens at +38, +148, +158 ms: a 110 ms gap before the second. */
	struct request *r =
	    make_request(3, ORIGIN + 5 * MS, ORIGIN + 38 * MS, 10 * MS, 3, ORIGIN + 160 * MS);
	struct stall_report st = { .threshold_ns = 50 * MS, .n = 2, .nkept = 2 };
	struct gpu_attribution ga = { .queue_ns = -1,
				      .prefill_ns = -1,
				      .decode_ns = -1,
				      .gpu_ns = -1,
				      .host_ns = -1,
				      .how = "by time",
				      .prefill_gpu_ns = -1,
				      .decode_gpu_ns = -1,
				      .stalls = &st };
	const cJSON *e, *x;

	r->token_ns[1] = ORIGIN + 148 * MS;
	r->token_ns[2] = ORIGIN + 158 * MS;
	st.v[0] = (struct stall){ .token = 1, .from_ns = ORIGIN + 38 * MS, .gap_ns = 110 * MS,
				  .cause = STALL_PREFILL, .step_pid = 4242, .step_tid = 4243,
				  .step_end_ns = ORIGIN + 140 * MS };
	st.v[1] = (struct stall){ .token = 2, .cause = STALL_HOST };
	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin");
	report(&f, r, &ga);
	if (!tf_close_parse(&f) || !check_events(f.events))
		goto out;
	ASSERT_EQ(count(f.events, "s", "stall"), 1, "one arrow: the host stall has no step");
	e = find(f.events, "s", "stall", 0);
	x = find(f.events, "f", "stall", 0);
	if (ASSERT_OK_PTR(e, "from") && ASSERT_OK_PTR(x, "to")) {
		ASSERT_EQ(num(e, "pid"), 4242, "the stalling step's process");
		ASSERT_NEAR(num(e, "ts"), 139999.999, 1e-6, "inside its slice");
		ASSERT_EQ(num(x, "tid"), TIMELINE_CONN_TID(3), "the stalled request's track");
		ASSERT_NEAR(num(x, "ts"), 148000, 1e-6, "at the token after the stall");
		ASSERT_EQ(num(e, "id"), num(x, "id"), "one arrow");
	}
	e = find(f.events, "X", "request", 0);
	if (ASSERT_OK_PTR(e, "the request"))
		ASSERT_EQ(num(args(e), "stalls"), 2, "its stalls");
out:
	tf_free(&f);
}

static void step_to(const struct sink *sk, uint32_t pid, uint64_t start, uint64_t end,
		    uint32_t launches, uint32_t graphs)
{
	struct gpu_step s = { .pid = pid, .tid = pid + 1, .start_ns = start };

	s.wait_start_ns = end - 100 * US;
	s.end_ns = end;
	s.launches = launches;
	s.graph_launches = graphs;
	s.memcpys = graphs;
	s.waits = 1;
	s.kind = gpu_classify(launches, graphs);
	sk->gpu_step(sk->ctx, &s);
}

static void step(struct tfile *f, uint32_t pid, uint64_t start, uint64_t end, uint32_t launches,
		 uint32_t graphs)
{
	step_to(&f->s, pid, start, end, launches, graphs);
}

TEST(test_gpu_steps)
{
	struct tfile f;
	const cJSON *e;

	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin");
	step(&f, 4242, ORIGIN + 1 * MS, ORIGIN + 31 * MS, 40, 0);
	step(&f, 4242, ORIGIN + 31 * MS + 500, ORIGIN + 41 * MS, 2, 1);
	step(&f, 5000, ORIGIN + 31 * MS + 500, ORIGIN + 41 * MS, 2, 1);
	if (!tf_close_parse(&f) || !check_events(f.events))
		goto out;

	ASSERT_EQ(count(f.events, "M", "process_name"), 3, "connections and two GPU processes");
	e = find(f.events, "M", "process_name", 1);
	if (ASSERT_OK_PTR(e, "GPU process named")) {
		ASSERT_EQ(num(e, "pid"), 4242, "its pid");
		ASSERT_STREQ(str(args(e), "name"), "GPU pid 4242", "GPU pid N");
	}
	e = find(f.events, "X", "prefill", 0);
	if (ASSERT_OK_PTR(e, "a step named by its kind")) {
		ASSERT_EQ(num(e, "pid"), 4242, "pid");
		ASSERT_EQ(num(e, "tid"), 4243, "tid of the waiting thread");
		ASSERT_STREQ(str(e, "cat"), "gpu", "category");
		ASSERT_NEAR(num(e, "ts"), 1000, 1e-6, "start");
		ASSERT_NEAR(num(e, "dur"), 30000, 1e-6, "start to the wait's return");
		ASSERT_EQ(num(args(e), "launches"), 40, "launches");
		ASSERT_EQ(num(args(e), "graph_launches"), 0, "graph launches");
	}
	ASSERT_EQ(count(f.events, "X", "decode"), 2, "a decode step per process");
	e = find(f.events, "X", "decode", 0);
	if (ASSERT_OK_PTR(e, "decode step"))
		ASSERT_EQ(num(args(e), "graph_launches"), 1, "graph launches");
out:
	tf_free(&f);
}

/* A step with device times (CUPTI) also has a slice on its process's device track, from the
 * first device start to the last device end, with a "busy" slice per span when there are gaps;
 * a step without any has none, and each host slice says which times it has. */
TEST(test_device_track)
{
	struct tfile f;
	struct gpu_step s = { .pid = 4242,
			      .tid = 4243,
			      .start_ns = ORIGIN + 1 * MS,
			      .wait_start_ns = ORIGIN + 2 * MS,
			      .end_ns = ORIGIN + 10 * MS,
			      .launches = 40,
			      .waits = 1,
			      .kind = STEP_PREFILL };
	const cJSON *e, *host;
	int busy = 0;

	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin");
	s.dev = (struct gpu_device){ .device = true,
				     .runs = 2,
				     .kernels = 40,
				     .start_ns = ORIGIN + 1200 * US,
				     .end_ns = ORIGIN + 9 * MS,
				     .busy_ns = 6 * MS,
				     .launch_ns = ORIGIN + 1100 * US,
				     .delay_ns = 40 * 50 * US,
				     .launched = 40,
				     .nspans = 2,
				     .spans = { { ORIGIN + 1200 * US, ORIGIN + 4200 * US },
						{ ORIGIN + 6 * MS, ORIGIN + 9 * MS } } };
	f.s.gpu_step(f.s.ctx, &s);
	step(&f, 4242, ORIGIN + 11 * MS, ORIGIN + 12 * MS, 0, 1); /* no device times */
	if (!tf_close_parse(&f) || !check_events(f.events))
		goto out;

	host = find_cat(f.events, "prefill", "gpu");
	e = find_cat(f.events, "prefill", "device");
	if (!ASSERT_OK_PTR(host, "host slice") || !ASSERT_OK_PTR(e, "device slice"))
		goto out;
	ASSERT_STREQ(str(args(host), "times"), "cupti", "host slice: device times known");
	ASSERT_EQ(num(e, "pid"), 4242, "in the GPU process");
	ASSERT_EQ(num(e, "tid"), (double)TIMELINE_DEVICE_TID(4242), "on its device track");
	ASSERT_NEAR(num(e, "ts"), 1200, 1e-6, "first device start");
	ASSERT_NEAR(num(e, "dur"), 7800, 1e-6, "to the last device end");
	ASSERT_NEAR(num(args(e), "gpu_busy_ms"), 6.0, 1e-9, "busy");
	ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(args(e), "gpu_busy_approx")), "exact");
	ASSERT_NEAR(num(args(e), "launch_delay_ms"), 0.1, 1e-9, "first launch to device start");
	ASSERT_NEAR(num(args(e), "mean_launch_delay_ms"), 0.05, 1e-9, "mean launch delay");
	ASSERT_EQ(num(args(e), "runs"), 2, "runs");
	ASSERT_EQ(num(args(e), "kernels"), 40, "kernels");
	cJSON_ArrayForEach(e, f.events)
	{
		if (strcmp(str(e, "name"), "busy") || strcmp(str(e, "ph"), "X"))
			continue;
		ASSERT_EQ(num(e, "tid"), (double)TIMELINE_DEVICE_TID(4242), "busy on the track");
		ASSERT_NEAR(num(e, "ts"), busy ? 6000 : 1200, 1e-6, "span start");
		ASSERT_NEAR(num(e, "dur"), 3000, 1e-6, "span length");
		busy++;
	}
	ASSERT_EQ(busy, 2, "a busy slice per span");
	e = find(f.events, "M", "thread_name", 0);
	if (ASSERT_OK_PTR(e, "device track named")) {
		ASSERT_EQ(num(e, "tid"), (double)TIMELINE_DEVICE_TID(4242), "its tid");
		ASSERT_STREQ(str(args(e), "name"), "device (CUPTI)", "its name");
	}
	ASSERT_EQ(count(f.events, "X", "decode"), 1, "no device slice without device times");
	e = find(f.events, "X", "decode", 0);
	if (ASSERT_OK_PTR(e, "decode step"))
		ASSERT_STREQ(str(args(e), "times"), "host-calls", "host times only");
out:
	tf_free(&f);
}

/* Without a given origin, the first event's time is 0; a request reported later that arrived
 * before it comes out negative (why the tracer gives the start of tracing). */
/* Times 2^63 ns or more before the origin (a damaged recording's, found by fuzz_record) are
 * held at the farthest representable time, never negated out of range (UBSan). */
TEST(test_time_far_before_origin)
{
	const uint64_t origin = 1ull << 63;
	struct tfile f;
	const cJSON *e;

	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, origin), "origin");
	step(&f, 4242, 0, 1 * MS, 40, 0);
	if (!tf_close_parse(&f))
		goto out;
	e = find(f.events, "X", "prefill", 0);
	if (ASSERT_OK_PTR(e, "the step is written"))
		ASSERT_NEAR(num(e, "ts"), -(double)INT64_MAX / 1000, 1, "held at -INT64_MAX ns");
out:
	tf_free(&f);
}

TEST(test_origin_first_event)
{
	struct tfile f;
	struct request *r =
	    make_request(1, ORIGIN + 2 * MS, ORIGIN + 40 * MS, MS, 1, ORIGIN + 41 * MS);
	const cJSON *e;

	tf_open(&f);
	step(&f, 7, ORIGIN + 10 * MS, ORIGIN + 40 * MS, 40, 0);
	ASSERT_EQ(timeline_set_origin(&f.t, ORIGIN), -EBUSY, "origin fixed by the first event");
	report(&f, r, &NOT_ATTRIBUTED);
	if (!tf_close_parse(&f) || !check_events(f.events))
		goto out;
	e = cJSON_GetObjectItem(f.root, "otherData");
	ASSERT_EQ(num(e, "origin_ns"), ORIGIN + 10 * MS, "origin: the first step's start");
	ASSERT_STREQ(str(e, "origin"), "first event", "says so");
	ASSERT_NEAR(num(find(f.events, "X", "prefill", 0), "ts"), 0, 1e-9, "first event at 0");
	ASSERT_NEAR(num(find(f.events, "X", "request", 0), "ts"), -8000, 1e-6, "earlier arrival");
out:
	tf_free(&f);
}

/* A tracer killed before timeline_close leaves every flushed event whole: "]}" completes it. */
TEST(test_cut_file)
{
	struct tfile f;
	struct request *r =
	    make_request(1, ORIGIN + 1 * MS, ORIGIN + 2 * MS, MS, 5, ORIGIN + 7 * MS);
	size_t n;

	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin");
	report(&f, r, &NOT_ATTRIBUTED);
	if (!tf_parse(&f, "]}") || !check_events(f.events))
		goto out;
	ASSERT_EQ(count(f.events, "i", "token"), 5, "a finished request is in the file at once");
	n = strlen(f.text);
	ASSERT_TRUE(n > 3 && strcmp(f.text + n - 3, "}]}") == 0, "ends at an event boundary");

	step(&f, 7, ORIGIN + 8 * MS, ORIGIN + 9 * MS, 2, 1);
	if (!tf_parse(&f, "]}"))
		goto out;
	ASSERT_EQ(count(f.events, "X", "decode"), 0, "a GPU step waits for the next tick");
	f.s.tick(f.s.ctx, &(struct pipeline_status){ .now_ns = ORIGIN + 10 * MS });
	if (!tf_parse(&f, "]}") || !check_events(f.events))
		goto out;
	ASSERT_EQ(count(f.events, "X", "decode"), 1, "written at the tick");

	/* Many steps and no tick: written every TIMELINE_FLUSH_BYTES, still whole events. */
	for (int i = 0; i < 2000; i++)
		step(&f, 7, ORIGIN + (10 + i) * MS, ORIGIN + (11 + i) * MS, 2, 1);
	if (!tf_parse(&f, "]}") || !check_events(f.events))
		goto out;
	ASSERT_TRUE(count(f.events, "X", "decode") > 1, "flushed by size");
	ASSERT_TRUE(count(f.events, "X", "decode") < 2001, "not every step yet");
	if (tf_close_parse(&f))
		ASSERT_EQ(count(f.events, "X", "decode"), 2001, "all at close");
out:
	tf_free(&f);
}

/* Token instants are written by hand, not through jsonw: their exact bytes, with times before
 * the origin, below a microsecond and far from it. */
TEST(test_token_bytes)
{
	static const char *const want[] = {
		",\n{\"name\":\"token\",\"cat\":\"token\",\"ph\":\"i\",\"ts\":-1.500,"
		"\"pid\":4194304,\"tid\":4194316,\"s\":\"t\"}",
		",\n{\"name\":\"token\",\"cat\":\"token\",\"ph\":\"i\",\"ts\":0.000,"
		"\"pid\":4194304,\"tid\":4194316,\"s\":\"t\"}",
		",\n{\"name\":\"token\",\"cat\":\"token\",\"ph\":\"i\",\"ts\":0.007,"
		"\"pid\":4194304,\"tid\":4194316,\"s\":\"t\"}",
		",\n{\"name\":\"token\",\"cat\":\"token\",\"ph\":\"i\",\"ts\":12.050,"
		"\"pid\":4194304,\"tid\":4194316,\"s\":\"t\"}",
		",\n{\"name\":\"token\",\"cat\":\"token\",\"ph\":\"i\",\"ts\":"
		"86400000000.999,\"pid\":4194304,\"tid\":4194316,\"s\":\"t\"}",
	};
	const uint64_t at[] = { ORIGIN - 1500, ORIGIN, ORIGIN + 7, ORIGIN + 12050,
				ORIGIN + 86400 * 1000 * MS + 999 };
	struct request *r = make_request(12, ORIGIN - 2 * MS, 0, 0, 0, ORIGIN + 86401 * 1000 * MS);
	struct tfile f;
	const char *p;

	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
		request_add_token(r, at[i]);
	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin");
	report(&f, r, &NOT_ATTRIBUTED);
	if (!tf_close_parse(&f) || !check_events(f.events))
		goto out;
	ASSERT_EQ(count(f.events, "i", "token"), 5, "every token");
	/* In order, one after another, and the last one is the last event. */
	p = strstr(f.text, want[0]);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		if (!ASSERT_TRUE(p && strncmp(p, want[i], strlen(want[i])) == 0,
				 "token event bytes")) {
			printf("  expected %s\n", want[i]);
			goto out;
		}
		p += strlen(want[i]);
	}
	ASSERT_STREQ(p, "\n]}\n", "then the end of the file");
out:
	tf_free(&f);
}

/* Occurrences of needle in text (memmem: the sanitizer's strstr measures the rest of the text
 * at every call). */
static int count_text(const char *text, const char *needle)
{
	const char *end = text + strlen(text), *p = text;
	size_t k = strlen(needle);
	int n = 0;

	while ((p = memmem(p, end - p, needle, k))) {
		n++;
		p += k;
	}
	return n;
}

/* The event buffer is reused after each write, and given back after a request larger than
 * TIMELINE_KEEP_BYTES: every event is in the file once either way. */
TEST(test_buffer_reuse)
{
	/* Enough tokens for about twice TIMELINE_KEEP_BYTES (each token event is ~90 bytes). */
	const uint32_t big = 2 * TIMELINE_KEEP_BYTES / 90;
	const uint32_t sizes[] = { 3, 500, big, 2, 40, big, 1 };
	int tokens = 0;
	struct tfile f;

	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t arrival = ORIGIN + i * 100000 * MS;
		char *text;
		size_t n;

		report(&f, make_request(1, arrival, arrival + MS, US, sizes[i], arrival + 99 * MS),
		       &NOT_ATTRIBUTED);
		tokens += sizes[i];
		/* Written whole after each request (parsed once, at the end: it is large). */
		text = check_read_file(f.path);
		if (!ASSERT_OK_PTR(text, "read the file"))
			goto out;
		n = strlen(text);
		ASSERT_EQ(count_text(text, "\"name\":\"token\""), tokens,
			  "the file holds every token so far");
		ASSERT_EQ(count_text(text, "\"name\":\"request\""), i + 1, "and every request");
		ASSERT_TRUE(n && text[n - 1] == '}', "ends at an event boundary");
		free(text);
	}
	if (tf_close_parse(&f))
		ASSERT_EQ(count(f.events, "i", "token"), tokens, "every token once at close");
out:
	tf_free(&f);
}

TEST(test_keepalive_and_escaping)
{
	struct tfile f;
	struct request *a =
	    make_request(9, ORIGIN + 1 * MS, ORIGIN + 2 * MS, MS, 2, ORIGIN + 4 * MS);
	struct request *b =
	    make_request(9, ORIGIN + 5 * MS, ORIGIN + 6 * MS, MS, 2, ORIGIN + 8 * MS);
	const char *model = "od\"d\\model\n\x01";

	tf_open(&f);
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin");
	b->seq = 1;
	snprintf(b->info.model, sizeof(b->info.model), "%s", model);
	report(&f, a, &NOT_ATTRIBUTED);
	report(&f, b, &NOT_ATTRIBUTED);
	if (!tf_close_parse(&f) || !check_events(f.events))
		goto out;
	ASSERT_EQ(count(f.events, "M", "thread_name"), 1, "a connection is named once");
	ASSERT_EQ(count(f.events, "X", "request"), 2, "both requests on it");
	ASSERT_STREQ(str(args(find(f.events, "X", "request", 1)), "model"), model,
		     "model escaped and read back");
out:
	tf_free(&f);
}

TEST(test_empty_and_errors)
{
	struct tfile f;
	struct timeline t;

	tf_open(&f);
	if (tf_close_parse(&f)) {
		ASSERT_EQ(count(f.events, NULL, NULL), 2, "only the connections process metadata");
		ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(
				cJSON_GetObjectItem(f.root, "otherData"), "origin_ns")),
			    "no origin without events");
	}
	tf_free(&f);

	ASSERT_EQ(timeline_open(&t, "/nonexistent-dir/t.json"), -ENOENT, "open error");
	ASSERT_EQ(timeline_close(&t), 0, "close after a failed open");
	if (access("/dev/full", W_OK) == 0 && ASSERT_OK(timeline_open(&t, "/dev/full"), "full")) {
		struct sink s = timeline_sink(&t);

		s.tick(s.ctx, &(struct pipeline_status){ .now_ns = 0 });
		step_to(&s, 7, ORIGIN, ORIGIN + MS, 2, 1);
		ASSERT_EQ(timeline_close(&t), -ENOSPC, "a write error is reported at close");
	}
}

/*
 * The whole pipeline on records shaped as the kernel sends them: a simulated server like
 * `refserver --gpu --token-ms 10 --prefill-ms 30 --max-batch 4` (an engine process running
 * prefill steps of 30 ms for the waiting requests that fit the batch, else a 10 ms decode step
 * for every running request; each step's tokens written right after it), seven requests on six
 * connections, one of them abandoned by its client.
 */
#define SIM_SERVER 100
#define SIM_ENGINE 101
#define SIM_MAX_BATCH 4
#define SIM_PREFILL (30 * MS)
#define SIM_TOKEN (10 * MS)
#define SIM_HOST_GAP (150 * US) /* step end to the token write */
#define SIM_MAX_EVENTS 1024

enum sim_kind { SIM_OPEN, SIM_REQUEST, SIM_HEAD, SIM_TOKEN_W, SIM_END, SIM_STEP, SIM_CLOSE };

struct sim_event {
	uint64_t ts;
	int seq;
	enum sim_kind kind;
	uint32_t conn;
	struct ts_gpu_step_event step;
};

struct sim_req {
	uint32_t conn;
	uint64_t arrival;
	uint32_t max_tokens;
	uint32_t abort_after; /* the client hangs up after this many tokens (0: never) */
	uint32_t tokens;
	bool done;
};

struct sim {
	struct sim_event ev[SIM_MAX_EVENTS];
	int n;
	uint64_t pos[16][2];
	struct pipeline pl;
};

static void sim_add(struct sim *s, uint64_t ts, enum sim_kind kind, uint32_t conn)
{
	if (s->n == SIM_MAX_EVENTS)
		return;
	s->ev[s->n] = (struct sim_event){ .ts = ts, .seq = s->n, .kind = kind, .conn = conn };
	s->n++;
}

static int sim_cmp(const void *a, const void *b)
{
	const struct sim_event *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->seq - y->seq;
}

static void sim_step(struct sim *s, uint64_t start, uint64_t end, bool prefill)
{
	struct ts_gpu_step_event *e;

	sim_add(s, end, SIM_STEP, 0);
	e = &s->ev[s->n - 1].step;
	e->hdr = (struct ts_event_hdr){ TS_EV_GPU_STEP, sizeof(*e), SIM_ENGINE, SIM_ENGINE };
	e->start_ns = start;
	e->wait_start_ns = end - 200 * US;
	e->end_ns = end;
	e->launches = prefill ? 40 : 3;
	e->graph_launches = prefill ? 0 : 1;
	e->memcpys = e->memcpys_dtoh = prefill ? 0 : 1;
	e->waits = 1;
}

/* The engine loop, run ahead of time: fills s->ev with every record, in any order. */
static void sim_schedule(struct sim *s, struct sim_req *q, int nq)
{
	int running[SIM_MAX_BATCH], nrun = 0;
	bool waiting[16] = { false };
	uint64_t now = q[0].arrival;

	for (int i = 0; i < nq; i++) {
		if (i == 0 || q[i].conn != q[i - 1].conn)
			sim_add(s, q[i].arrival - MS, SIM_OPEN, q[i].conn);
		sim_add(s, q[i].arrival, SIM_REQUEST, q[i].conn);
	}
	for (;;) {
		int nwait = 0, first_new = nrun;
		bool prefill;
		uint64_t start, end;

		for (int i = 0; i < nq; i++) {
			bool running_i = false;

			for (int k = 0; k < nrun; k++)
				running_i |= running[k] == i;
			waiting[i] = !q[i].done && !running_i && q[i].arrival <= now;
			nwait += waiting[i];
		}
		if (!nwait && !nrun) {
			uint64_t next = UINT64_MAX;

			for (int i = 0; i < nq; i++)
				if (!q[i].done && q[i].arrival > now && q[i].arrival < next)
					next = q[i].arrival;
			if (next == UINT64_MAX)
				break;
			now = next + 80 * US; /* the API server hands it to the engine */
			continue;
		}
		prefill = nwait && nrun < SIM_MAX_BATCH;
		for (int i = 0; prefill && i < nq && nrun < SIM_MAX_BATCH; i++) {
			if (!waiting[i])
				continue;
			running[nrun++] = i;
			/* vLLM sends the head and the role frame once the request is scheduled */
			sim_add(s, now + 50 * US, SIM_HEAD, q[i].conn);
		}
		start = now + 20 * US;
		end = start + (prefill ? SIM_PREFILL : SIM_TOKEN) + 250 * US;
		sim_step(s, start, end, prefill);
		for (int k = prefill ? first_new : 0; k < nrun; k++) {
			struct sim_req *r = &q[running[k]];

			r->tokens++;
			sim_add(s, end + SIM_HOST_GAP + k * 20 * US, SIM_TOKEN_W, r->conn);
			if (r->abort_after && r->tokens == r->abort_after) {
				sim_add(s, end + 3 * MS, SIM_CLOSE, r->conn);
				r->done = true;
			} else if (r->tokens == r->max_tokens) {
				sim_add(s, end + SIM_HOST_GAP + k * 20 * US + 30 * US, SIM_END,
					r->conn);
				r->done = true;
			}
		}
		for (int k = 0; k < nrun;)
			if (q[running[k]].done)
				running[k] = running[--nrun];
			else
				k++;
		now = end + 100 * US;
	}
}

static void sim_data(struct sim *s, uint32_t conn, int dir, const char *p, uint64_t ts)
{
	size_t len = strlen(p), sz = sizeof(struct ts_data_event) + len;
	struct ts_data_event *e = calloc(1, sz);

	e->hdr = (struct ts_event_hdr){ TS_EV_DATA, sz, SIM_SERVER, SIM_SERVER };
	e->conn_id = conn;
	e->enter_ns = ts;
	e->exit_ns = ts + 8 * US;
	e->pos = e->syscall_pos = s->pos[conn][dir];
	e->syscall_bytes = e->data_bytes = len;
	e->fd = 10 + conn;
	e->dir = dir;
	e->syscall = dir ? TS_SYS_WRITE : TS_SYS_READ;
	e->last = 1;
	memcpy(e->data, p, len);
	s->pos[conn][dir] += len;
	pipeline_feed(&s->pl, e, sz);
	free(e);
}

static void sim_chunk(struct sim *s, uint32_t conn, const char *frame, uint64_t ts)
{
	char buf[512];

	snprintf(buf, sizeof(buf), "%zx\r\n%s\r\n", strlen(frame), frame);
	sim_data(s, conn, TS_DIR_OUT, buf, ts);
}

static void sim_conn(struct sim *s, uint32_t type, uint32_t conn, uint64_t ts)
{
	struct ts_conn_event e = { .hdr = { type, sizeof(e), SIM_SERVER, SIM_SERVER } };

	e.conn_id = conn;
	e.ts_ns = ts;
	e.fd = 10 + conn;
	e.family = 2;
	e.local_addr[0] = 127, e.local_addr[3] = 1;
	e.peer_addr[0] = 127, e.peer_addr[3] = 1;
	e.local_port = 8000;
	e.peer_port = 50730 + conn;
	e.rx_bytes = s->pos[conn][TS_DIR_IN];
	e.tx_bytes = s->pos[conn][TS_DIR_OUT];
	pipeline_feed(&s->pl, &e, sizeof(e));
}

static void sim_feed(struct sim *s, const struct sim_req *q, int nq)
{
	static const char body_fmt[] =
	    "{\"model\":\"llama-3.1-8b\",\"stream\":true,\"max_tokens\":%u,"
	    "\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";

	qsort(s->ev, s->n, sizeof(s->ev[0]), sim_cmp);
	for (int i = 0; i < s->n; i++) {
		const struct sim_event *e = &s->ev[i];
		char body[256], req[512];
		uint32_t max_tokens = 0;

		switch (e->kind) {
		case SIM_OPEN:
			sim_conn(s, TS_EV_CONN_OPEN, e->conn, e->ts);
			break;
		case SIM_REQUEST:
			for (int k = 0; k < nq; k++)
				if (q[k].conn == e->conn && q[k].arrival == e->ts)
					max_tokens = q[k].max_tokens;
			snprintf(body, sizeof(body), body_fmt, max_tokens);
			snprintf(req, sizeof(req),
				 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
				 "application/json\r\nContent-Length: %zu\r\n\r\n%s",
				 strlen(body), body);
			sim_data(s, e->conn, TS_DIR_IN, req, e->ts - 8 * US);
			break;
		case SIM_HEAD:
			sim_data(s, e->conn, TS_DIR_OUT,
				 "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
				 "transfer-encoding: chunked\r\n\r\n",
				 e->ts);
			sim_chunk(s, e->conn,
				  "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\","
				  "\"content\":\"\"}}]}\n\n",
				  e->ts + 10 * US);
			break;
		case SIM_TOKEN_W:
			sim_chunk(s, e->conn,
				  "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
				  e->ts);
			break;
		case SIM_END:
			sim_chunk(s, e->conn, "data: [DONE]\n\n", e->ts);
			sim_data(s, e->conn, TS_DIR_OUT, "0\r\n\r\n", e->ts + 10 * US);
			break;
		case SIM_STEP:
			pipeline_feed(&s->pl, &e->step, sizeof(e->step));
			break;
		case SIM_CLOSE:
			sim_conn(s, TS_EV_CONN_CLOSE, e->conn, e->ts);
			break;
		}
		/* The loader drains the ring buffer every 100 ms or so. */
		if (i + 1 == s->n || s->ev[i + 1].ts / (100 * MS) != e->ts / (100 * MS))
			pipeline_tick(&s->pl);
	}
}

TEST(test_through_pipeline)
{
	struct sim_req q[] = {
		/* conn, arrival, max_tokens, abort_after: sorted by connection, then time */
		{ 1, ORIGIN + 2 * MS, 12, 0, 0, false },   { 1, ORIGIN + 262 * MS, 8, 0, 0, false },
		{ 2, ORIGIN + 9 * MS, 16, 0, 0, false },   { 3, ORIGIN + 16 * MS, 10, 0, 0, false },
		{ 4, ORIGIN + 44 * MS, 14, 0, 0, false },  { 5, ORIGIN + 52 * MS, 6, 0, 0, false },
		{ 6, ORIGIN + 120 * MS, 20, 5, 0, false },
	};
	const int nq = sizeof(q) / sizeof(q[0]);
	struct pipeline_opts o = { 0 };
	const char *out = getenv("TIMELINE_OUT");
	struct sim *s = calloc(1, sizeof(*s));
	struct tfile f;
	struct sink sk;
	int tokens = 0, steps = 0, queued = 0;
	const cJSON *e;

	if (!ASSERT_OK_PTR(s, "alloc"))
		return;
	o.err = fopen("/dev/null", "w");
	tf_open(&f);
	if (out && *out) {
		timeline_close(&f.t);
		unlink(f.path);
		snprintf(f.path, sizeof(f.path), "%s", out);
		ASSERT_OK(timeline_open(&f.t, f.path), "open TIMELINE_OUT");
	}
	ASSERT_OK(timeline_set_origin(&f.t, ORIGIN), "origin: the start of tracing");
	pipeline_init(&s->pl, &o);
	pipeline_add_process(&s->pl, SIM_SERVER, true);
	sk = timeline_sink(&f.t);
	ASSERT_OK(pipeline_add_sink(&s->pl, &sk), "add sink");
	sim_schedule(s, q, nq);
	sim_feed(s, q, nq);
	pipeline_finish(&s->pl);
	if (!tf_close_parse(&f) || !check_events(f.events))
		goto out;

	for (int i = 0; i < s->n; i++) {
		tokens += s->ev[i].kind == SIM_TOKEN_W;
		steps += s->ev[i].kind == SIM_STEP;
	}
	ASSERT_EQ(count(f.events, "X", "request") + count(f.events, "X", "request: aborted"), nq,
		  "every request");
	ASSERT_EQ(count(f.events, "X", "request: aborted"), 1, "the abandoned one");
	ASSERT_EQ(count(f.events, "i", "token"), tokens, "every token");
	ASSERT_EQ(count_pid(f.events, "X", SIM_ENGINE), steps, "every GPU step");
	ASSERT_EQ(count(f.events, "X", "prefill") + count(f.events, "X", "decode"), steps + 2 * nq,
		  "steps, and a prefill and a decode phase per request");
	ASSERT_EQ(count(f.events, "M", "thread_name"), 6, "six connections");
	ASSERT_EQ(count(f.events, "X", "waiting for first token"), 0, "all attributed");
	/* Two requests arrived with the batch full: they queued until others finished. */
	for (int i = 0; (e = find(f.events, "X", "queue", i)); i++)
		queued += num(e, "dur") > SIM_PREFILL / US;
	ASSERT_EQ(queued, 2, "queued behind a full batch");
out:
	pipeline_free(&s->pl);
	fclose(o.err);
	free(s);
	if (out && *out) {
		timeline_close(&f.t);
		cJSON_Delete(f.root);
		free(f.text);
	} else {
		tf_free(&f);
	}
}

int main(void)
{
	return check_run_all();
}
