// SPDX-License-Identifier: MIT
/* OTLP export over a real socket, against tests/otlp/receiver.py (run_live.sh starts it):
 * what arrives (count, structure, Content-Type), the flush interval, retries on 503 and 429
 * (Retry-After), a 4xx refusal, and a collector that refuses connections or never answers:
 * the sink never blocks, close returns within its bound, and every trace is accounted for.
 * Then the transport's reach: https to a receiver with a certificate of its own (verified with
 * it as the CA, and refused without), and a proxy from the environment.
 *
 * Usage: otlp_live PORT BODY_DIR TLS_PORT CERT */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "pipeline/gpu.h"
#include "sinks/otlp.h"
#include "pipeline/request.h"

#define MS 1000000ull
#define T0 5000000000000ull
#define OFFSET 1700000000000000000ll

static int port, tls_port;
static const char *body_dir, *cert;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Request i: a normal one (ttft 100 ms), or with slow its TTFT is 2 s. */
static void feed(struct sink *sk, int i, bool slow)
{
	char conn[64];
	struct request *r;
	struct request_metrics m;
	struct gpu_attribution ga = { 10 * MS,	 40 * MS, 95 * MS, 50 * MS, 20 * MS,
				      "by time", -1,	  -1,	   NULL,    .has_steps = false };
	uint64_t t0 = T0 + (uint64_t)i * 1000 * MS, t = t0 + (slow ? 2000 : 100) * MS;

	snprintf(conn, sizeof(conn), "127.0.0.1:8000<-127.0.0.1:%d#%d", 40000 + i % 20000, i);
	r = request_new(100, i, 0, conn);
	snprintf(r->method, sizeof(r->method), "POST");
	snprintf(r->path, sizeof(r->path), "/v1/chat/completions");
	snprintf(r->info.model, sizeof(r->info.model), "tiny");
	r->status = 200;
	r->outcome = OUTCOME_OK;
	r->streamed = true;
	r->format = FMT_OPENAI_CHAT;
	r->arrival_ns = t0;
	for (int k = 0; k < 10; k++, t += 10 * MS)
		request_add_token(r, t);
	r->end_ns = t;
	request_metrics(r, &m);
	sk->request(sk->ctx, r, &m, &ga);
	request_free(r);
}

static void opts_live(struct otlp_opts *o, char *url, size_t n, const char *name)
{
	snprintf(url, n, "http://127.0.0.1:%d/%s/v1/traces", port, name);
	otlp_opts_default(o);
	o->endpoint = url;
	o->sample_ratio = 1;
	o->slow_ttft_ns = 1000 * MS;
	o->realtime_offset_ns = OFFSET;
	o->hostname = "test-host";
	o->seed = 7;
	o->err = stdout;
	/* Each test counts the bodies and answers of its own batches: no empty export at the
	 * start (run_report.sh checks that one). */
	o->no_probe = true;
}

struct received {
	int bodies, roots, children, token_events, anomalous;
	bool bad_ctype, bad_structure;
};

/* Reads every body the receiver stored for name. */
static void read_received(const char *name, struct received *rc)
{
	char dir[512], path[800];
	struct dirent *de;
	DIR *d;

	memset(rc, 0, sizeof(*rc));
	snprintf(dir, sizeof(dir), "%s/%s", body_dir, name);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		char *buf = NULL, ctype[128] = "";
		long size;
		FILE *f;
		cJSON *j, *spans, *s;

		if (len < 5 || strcmp(de->d_name + len - 5, ".json"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "rb");
		if (!f)
			continue;
		fseek(f, 0, SEEK_END);
		size = ftell(f);
		rewind(f);
		buf = calloc(1, size + 1);
		if (buf && fread(buf, 1, size, f) != (size_t)size)
			buf[0] = 0;
		fclose(f);
		snprintf(path + strlen(path) - 5, 7, ".ctype");
		f = fopen(path, "r");
		if (f) {
			if (!fgets(ctype, sizeof(ctype), f))
				ctype[0] = 0;
			fclose(f);
		}
		rc->bodies++;
		rc->bad_ctype |= strcmp(ctype, "application/json") != 0;
		j = cJSON_Parse(buf ? buf : "");
		free(buf);
		spans = cJSON_GetObjectItem(
		    cJSON_GetArrayItem(
			cJSON_GetObjectItem(
			    cJSON_GetArrayItem(cJSON_GetObjectItem(j, "resourceSpans"), 0),
			    "scopeSpans"),
			0),
		    "spans");
		rc->bad_structure |= !cJSON_IsArray(spans);
		cJSON_ArrayForEach(s, spans)
		{
			cJSON *e, *a;
			cJSON *tid = cJSON_GetObjectItem(s, "traceId");
			cJSON *start = cJSON_GetObjectItem(s, "startTimeUnixNano");

			rc->bad_structure |= !cJSON_IsString(tid) || strlen(tid->valuestring) != 32;
			rc->bad_structure |=
			    !cJSON_IsString(start) ||
			    strtoull(start->valuestring, NULL, 10) < (uint64_t)OFFSET;
			if (cJSON_GetObjectItem(s, "parentSpanId")) {
				rc->children++;
				continue;
			}
			rc->roots++;
			cJSON_ArrayForEach(e, cJSON_GetObjectItem(s, "events"))
			{
				cJSON *nm = cJSON_GetObjectItem(e, "name");

				rc->token_events +=
				    cJSON_IsString(nm) && !strcmp(nm->valuestring, "token");
			}
			cJSON_ArrayForEach(a, cJSON_GetObjectItem(s, "attributes"))
			{
				cJSON *k = cJSON_GetObjectItem(a, "key");

				rc->anomalous += cJSON_IsString(k) &&
						 !strcmp(k->valuestring, "tokenscope.anomaly");
			}
		}
		cJSON_Delete(j);
	}
	closedir(d);
}

/* Every trace offered is exported, sampled out, dropped, failed or unsent. */
static bool accounted(const struct otlp_stats *st, uint64_t offered)
{
	uint64_t sum = st->exported + st->sampled_out + st->dropped + st->failed + st->unsent;

	if (sum != offered)
		printf("  offered %llu, accounted %llu\n", (unsigned long long)offered,
		       (unsigned long long)sum);
	return ASSERT_EQ(sum, offered, "every trace accounted for");
}

TEST(test_export)
{
	struct otlp_opts opts;
	struct otlp_stats st;
	struct received rc;
	struct otlp o;
	struct sink sk;
	char url[128];

	opts_live(&opts, url, sizeof(url), "live");
	opts.batch_max = 8;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	for (int i = 0; i < 25; i++)
		feed(&sk, i, i % 5 == 0);
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	otlp_print_stats(&st, url, stdout);
	ASSERT_EQ(st.exported, 25, "exported");
	ASSERT_EQ(st.anomalous, 5, "anomalous");
	ASSERT_EQ(st.failed_batches + st.dropped + st.unsent, 0, "no loss");
	ASSERT_TRUE(st.batches >= 4, "batches of at most 8");
	accounted(&st, 25);
	read_received("live", &rc);
	ASSERT_EQ(rc.bodies, st.batches, "a body per batch");
	ASSERT_EQ(rc.roots, 25, "request spans received");
	ASSERT_EQ(rc.children, 75, "queue, prefill, decode each");
	ASSERT_EQ(rc.anomalous, 5, "anomalous received");
	ASSERT_EQ(rc.token_events, 50, "10 token events for each anomalous one");
	ASSERT_FALSE(rc.bad_ctype, "Content-Type: application/json");
	ASSERT_FALSE(rc.bad_structure, "ids and times");
}

/* A few spans go out within the flush interval, before close. */
TEST(test_flush_interval)
{
	struct otlp_opts opts;
	struct otlp_stats st;
	struct received rc;
	struct otlp o;
	struct sink sk;
	char url[128];
	double t;

	opts_live(&opts, url, sizeof(url), "interval");
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	for (int i = 0; i < 3; i++)
		feed(&sk, i, false);
	t = now_s();
	do {
		usleep(50000);
		read_received("interval", &rc);
	} while (rc.roots < 3 && now_s() - t < 5);
	printf("  3 spans arrived %.2f s after they were queued (flush every %u ms)\n", now_s() - t,
	       opts.flush_ms);
	ASSERT_EQ(rc.roots, 3, "sent before close");
	ASSERT_TRUE(now_s() - t < 2.5, "within the interval");
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	accounted(&st, 3);
}

TEST(test_retry_503)
{
	struct otlp_opts opts;
	struct otlp_stats st;
	struct received rc;
	struct otlp o;
	struct sink sk;
	char url[128];

	opts_live(&opts, url, sizeof(url), "flaky");
	opts.backoff_ms = 20;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	for (int i = 0; i < 10; i++)
		feed(&sk, i, false);
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	ASSERT_EQ(st.retries, 2, "two 503s, two retries");
	ASSERT_EQ(st.exported, 10, "then accepted");
	ASSERT_EQ(st.failed_batches, 0, "no failed batch");
	accounted(&st, 10);
	read_received("flaky", &rc);
	ASSERT_EQ(rc.roots, 10, "received once");
}

TEST(test_retry_429)
{
	struct otlp_opts opts;
	struct otlp_stats st;
	struct otlp o;
	struct sink sk;
	char url[128];
	double t;

	opts_live(&opts, url, sizeof(url), "busy");
	opts.backoff_ms = 10;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	feed(&sk, 0, false);
	t = now_s();
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	ASSERT_EQ(st.retries, 1, "429 retried");
	ASSERT_EQ(st.exported, 1, "then accepted");
	ASSERT_TRUE(now_s() - t >= 0.9, "after Retry-After: 1");
	accounted(&st, 1);
}

TEST(test_reject)
{
	struct otlp_opts opts;
	struct otlp_stats st;
	struct otlp o;
	struct sink sk;
	char url[128];

	opts_live(&opts, url, sizeof(url), "reject");
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	for (int i = 0; i < 4; i++)
		feed(&sk, i, true);
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	ASSERT_EQ(st.retries, 0, "a 400 is not retried");
	ASSERT_EQ(st.failed_batches, 1, "failed batch");
	ASSERT_EQ(st.failed, 4, "its traces");
	ASSERT_TRUE(strstr(st.last_error, "HTTP 400") != NULL, "last error says 400");
	accounted(&st, 4);
}

/* Feeds n requests; returns the slowest single sink call in seconds. */
static double feed_many(struct sink *sk, int n)
{
	double worst = 0;

	for (int i = 0; i < n; i++) {
		double t = now_s();

		feed(sk, i, i % 2);
		t = now_s() - t;
		if (t > worst)
			worst = t;
	}
	return worst;
}

/* A port that refuses connections: bound, never listening. */
TEST(test_collector_down)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct otlp_opts opts;
	struct otlp_stats st;
	struct otlp o;
	struct sink sk;
	char url[128];
	double worst, t;

	if (!ASSERT_TRUE(fd >= 0 && !bind(fd, (struct sockaddr *)&sa, len) &&
			     !getsockname(fd, (struct sockaddr *)&sa, &len),
			 "a refusing port"))
		return;
	opts_live(&opts, url, sizeof(url), "unused");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/traces", ntohs(sa.sin_port));
	opts.queue_max = 256;
	opts.batch_max = 64;
	opts.max_attempts = 3;
	opts.backoff_ms = 50;
	opts.close_wait_ms = 1000;
	opts.err = NULL;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		goto out;
	sk = otlp_sink(&o);
	t = now_s();
	worst = feed_many(&sk, 5000);
	printf("  5000 requests fed in %.3f s, slowest sink call %.3f ms\n", now_s() - t,
	       worst * 1e3);
	ASSERT_TRUE(worst < 0.25, "the sink never waits for the network");
	t = now_s();
	otlp_close(&o);
	t = now_s() - t;
	otlp_get_stats(&o, &st);
	otlp_print_stats(&st, url, stdout);
	printf("  close took %.3f s (wait %u ms)\n", t, opts.close_wait_ms);
	ASSERT_TRUE(t < 2.5, "close is bounded");
	ASSERT_EQ(st.exported, 0, "nothing exported");
	ASSERT_TRUE(st.dropped >= 5000 - 256 - 64 * 4, "queue full: dropped");
	ASSERT_TRUE(st.failed_batches >= 1, "failed batches");
	ASSERT_TRUE(st.retries >= 2, "retried before giving up");
	ASSERT_TRUE(strstr(st.last_error, "Connection refused") != NULL, "says why");
	accounted(&st, 5000);
out:
	close(fd);
}

/* A collector that accepts the connection and never answers: the sink goes on while the
 * sender waits, and close cuts the wait short. */
TEST(test_collector_silent)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct otlp_opts opts;
	struct otlp_stats st;
	struct otlp o;
	struct sink sk;
	char url[128];
	double t, worst;

	if (!ASSERT_TRUE(fd >= 0 && !bind(fd, (struct sockaddr *)&sa, len) && !listen(fd, 16) &&
			     !getsockname(fd, (struct sockaddr *)&sa, &len),
			 "a silent listener"))
		return;
	opts_live(&opts, url, sizeof(url), "unused");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/traces", ntohs(sa.sin_port));
	opts.timeout_ms = 3000;
	opts.flush_ms = 100;
	opts.close_wait_ms = 500;
	opts.err = NULL;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		goto out;
	sk = otlp_sink(&o);
	feed_many(&sk, 20);
	usleep(300000); /* the sender is inside a POST that will not be answered */
	worst = feed_many(&sk, 2000);
	printf("  while the POST hangs: slowest sink call %.3f ms\n", worst * 1e3);
	ASSERT_TRUE(worst < 0.25, "the sink does not wait for the sender");
	t = now_s();
	otlp_close(&o);
	t = now_s() - t;
	otlp_get_stats(&o, &st);
	otlp_print_stats(&st, url, stdout);
	printf("  close took %.3f s (wait %u ms, POST timeout %u ms)\n", t, opts.close_wait_ms,
	       opts.timeout_ms);
	ASSERT_TRUE(t < 1.5, "close cuts the POST short");
	ASSERT_EQ(st.exported, 0, "nothing exported");
	ASSERT_EQ(st.failed_batches, 1, "the hanging batch failed");
	ASSERT_TRUE(st.unsent > 0, "the rest unsent");
	ASSERT_TRUE(strstr(st.last_error, "timed out") != NULL, "says timed out");
	accounted(&st, 2020);
out:
	close(fd);
}

/* A replay feeds far faster than a small queue drains: without backpressure most spans are
 * dropped; with it every one reaches the collector, none dropped. */
TEST(test_backpressure)
{
	const int n = 600;
	struct otlp_opts opts;
	struct otlp_stats st;
	struct received rc;
	struct otlp o;
	struct sink sk;
	char url[128];
	double t;

	opts_live(&opts, url, sizeof(url), "fast");
	opts.queue_max = 16;
	opts.batch_max = 4;
	opts.err = NULL;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	feed_many(&sk, n);
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	printf("  without backpressure: %llu of %d dropped\n", (unsigned long long)st.dropped, n);
	ASSERT_TRUE(st.dropped > 0, "a fast feed overflows a small queue");
	accounted(&st, n);

	opts_live(&opts, url, sizeof(url), "replay");
	opts.queue_max = 16;
	opts.batch_max = 4;
	opts.backpressure = true;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	t = now_s();
	feed_many(&sk, n);
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	otlp_print_stats(&st, url, stdout);
	printf("  with backpressure: %d requests fed and sent in %.2f s\n", n, now_s() - t);
	ASSERT_EQ(st.exported, n, "every trace exported");
	ASSERT_EQ(st.dropped + st.failed + st.unsent, 0, "none lost");
	accounted(&st, n);
	read_received("replay", &rc);
	ASSERT_EQ(rc.roots, n, "every request span received");
}

/* Backpressure with a collector that refuses connections: the feed waits for the first batch's
 * retries only, then drops as live; close is bounded and every trace is accounted for. */
TEST(test_backpressure_down)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct otlp_opts opts;
	struct otlp_stats st;
	struct otlp o;
	struct sink sk;
	char url[128];
	double t, feed_s;

	if (!ASSERT_TRUE(fd >= 0 && !bind(fd, (struct sockaddr *)&sa, len) &&
			     !getsockname(fd, (struct sockaddr *)&sa, &len),
			 "a refusing port"))
		return;
	opts_live(&opts, url, sizeof(url), "unused");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/traces", ntohs(sa.sin_port));
	opts.queue_max = 64;
	opts.batch_max = 16;
	opts.max_attempts = 3;
	opts.backoff_ms = 100;
	opts.close_wait_ms = 500;
	opts.backpressure = true;
	opts.err = NULL;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		goto out;
	sk = otlp_sink(&o);
	t = now_s();
	feed_many(&sk, 2000);
	feed_s = now_s() - t;
	otlp_close(&o);
	t = now_s() - t;
	otlp_get_stats(&o, &st);
	otlp_print_stats(&st, url, stdout);
	printf("  2000 requests fed in %.3f s (a batch gives up after about 0.3 s), closed after "
	       "%.3f s\n",
	       feed_s, t);
	ASSERT_TRUE(feed_s >= 0.25, "the feed waited for the first batch's retries");
	ASSERT_TRUE(feed_s < 2, "then stopped waiting");
	ASSERT_TRUE(t < 3, "close is bounded");
	ASSERT_EQ(st.exported, 0, "nothing exported");
	ASSERT_TRUE(st.dropped > 0, "dropped once the collector failed");
	ASSERT_TRUE(st.failed >= 16, "the first batch failed");
	accounted(&st, 2000);
out:
	close(fd);
}

/* https, verified against the receiver's own certificate: everything arrives. */
TEST(test_https)
{
	struct otlp_opts opts;
	struct otlp_stats st;
	struct received rc;
	struct otlp o;
	struct sink sk;
	char url[128];

	opts_live(&opts, url, sizeof(url), "unused");
	snprintf(url, sizeof(url), "https://localhost:%d/tls/v1/traces", tls_port);
	opts.ca_file = cert;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	for (int i = 0; i < 12; i++)
		feed(&sk, i, i % 3 == 0);
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	otlp_print_stats(&st, url, stdout);
	ASSERT_EQ(st.exported, 12, "exported over TLS");
	ASSERT_EQ(st.failed_batches, 0, "no failed batch");
	accounted(&st, 12);
	read_received("tls", &rc);
	ASSERT_EQ(rc.roots, 12, "every request span received");
	ASSERT_EQ(rc.anomalous, 4, "the slow ones in full");
	ASSERT_FALSE(rc.bad_ctype || rc.bad_structure, "OTLP JSON as sent in plain http");
}

/* The same receiver without its CA: the certificate is refused, nothing is sent, and the
 * summary says why; a CA file that is not there is refused at init. */
TEST(test_https_unverified)
{
	struct otlp_opts opts;
	struct otlp_stats st;
	struct received rc;
	struct otlp o;
	struct sink sk;
	char url[128];

	opts_live(&opts, url, sizeof(url), "unused");
	snprintf(url, sizeof(url), "https://localhost:%d/untrusted/v1/traces", tls_port);
	opts.max_attempts = 1;
	opts.err = NULL;
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		return;
	sk = otlp_sink(&o);
	for (int i = 0; i < 3; i++)
		feed(&sk, i, false);
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	otlp_print_stats(&st, url, stdout);
	ASSERT_EQ(st.exported, 0, "nothing exported to an unverified collector");
	ASSERT_EQ(st.failed, 3, "the batch failed");
	ASSERT_TRUE(strstr(st.last_error, "certificate") != NULL, "says the certificate");
	read_received("untrusted", &rc);
	ASSERT_EQ(rc.bodies, 0, "nothing received");
	accounted(&st, 3);

	opts.ca_file = "/nonexistent/ca.pem";
	ASSERT_EQ(otlp_init(&o, &opts), -ENOENT, "a missing CA file");
	ASSERT_TRUE(strstr(o.error, "/nonexistent/ca.pem") != NULL, "names it");
}

/* http_proxy from the environment: the endpoint's host does not resolve, and the proxy (the
 * plain receiver, which takes the absolute form) is where the POST goes. */
TEST(test_proxy)
{
	struct otlp_opts opts;
	struct otlp_stats st;
	struct received rc;
	struct otlp o;
	struct sink sk;
	char url[128], proxy[64];

	opts_live(&opts, url, sizeof(url), "unused");
	snprintf(url, sizeof(url), "http://collector.invalid:4318/proxied/v1/traces");
	snprintf(proxy, sizeof(proxy), "http://127.0.0.1:%d", port);
	setenv("http_proxy", proxy, 1);
	if (!ASSERT_OK(otlp_init(&o, &opts), "init"))
		goto out;
	sk = otlp_sink(&o);
	for (int i = 0; i < 5; i++)
		feed(&sk, i, false);
	otlp_close(&o);
	otlp_get_stats(&o, &st);
	otlp_print_stats(&st, url, stdout);
	ASSERT_EQ(st.exported, 5, "exported through the proxy");
	accounted(&st, 5);
	read_received("proxied", &rc);
	ASSERT_EQ(rc.roots, 5, "the proxy received every span");
out:
	unsetenv("http_proxy");
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s PORT BODY_DIR TLS_PORT CERT\n", argv[0]);
		return 2;
	}
	port = atoi(argv[1]);
	body_dir = argv[2];
	tls_port = atoi(argv[3]);
	cert = argv[4];
	return check_run_all();
}
