// SPDX-License-Identifier: MIT
/* Alert rules: parsing (and refusing with the expected form), sliding-window evaluation on
 * kernel time, firing after `for`, resolving, the likely cause, and --alert-exec. */
#include <errno.h>
#include <math.h>
#include <unistd.h>
#include <stdlib.h>

#include "sinks/alert.h"
#include "check.h"
#include "pipeline/gpu.h"
#include "pipeline/request.h"

#define S 1000000000ull
#define MS 1000000ull

TEST(test_parse)
{
	struct alert_rule r;
	char err[512];

	ASSERT_OK(alert_parse("ttft.p99 > 5s for 3m", &r, err, sizeof(err)), "ttft");
	ASSERT_EQ(r.metric, AM_TTFT, "metric");
	ASSERT_NEAR(r.quantile, 0.99, 1e-12, "quantile");
	ASSERT_NEAR(r.threshold, 5, 1e-12, "threshold");
	ASSERT_EQ(r.for_ns, 180 * S, "for");
	ASSERT_OK(alert_parse("success < 99% for 5m", &r, err, sizeof(err)), "success");
	ASSERT_EQ(r.op, AO_LT, "op");
	ASSERT_NEAR(r.threshold, 99, 1e-12, "percent");
	ASSERT_OK(alert_parse("itl.p999 >= 250ms", &r, err, sizeof(err)), "no for");
	ASSERT_NEAR(r.threshold, 0.25, 1e-12, "ms");
	ASSERT_EQ(r.for_ns, 0, "default for");
	ASSERT_OK(alert_parse("queue.p50 > 800us for 10s", &r, err, sizeof(err)), "queue us");
	ASSERT_OK(alert_parse("slo.attainment < 0.95 for 5m", &r, err, sizeof(err)), "slo");
	ASSERT_EQ(r.metric, AM_SLO, "slo metric");
	ASSERT_NEAR(r.threshold, 0.95, 1e-12, "a share");
	ASSERT_OK(alert_parse("slo.attainment < 95%", &r, err, sizeof(err)), "slo %");
	ASSERT_NEAR(r.threshold, 0.95, 1e-12, "a percentage is a share");

	const char *bad[] = { "", "ttft > 5s", "ttft.p98 > 5s", "ttft.p99 => 5s", "ttft.p99 > 5",
			      "ttft.p99 > 5s during 3m", "ttft.p99 > 5s for 3", "success < 99",
			      "rps.p99 > 3", "gpu.p99 > 1s", "ttft.p99 > -1s",
			      "slo < 0.9", "slo.p99 < 0.9", "slo.attainment < 2", "slo.attainment < 1s",
			      /* beyond what 64-bit nanoseconds hold */
			      "success < 9% for 7e66m", "ttft.p99 > 4e41h" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		if (!ASSERT_EQ(alert_parse(bad[i], &r, err, sizeof(err)), -EINVAL, bad[i]))
			continue;
		ASSERT_TRUE(strstr(err, "expected METRIC OP VALUE") != NULL, "shows the form");
	}
}

/* A finished ok request ending at end with the given TTFT, attributed queue-heavy. */
static void feed(struct sink *sk, uint64_t end, uint64_t ttft)
{
	struct request *r = request_new(1, 1, 0, "c");
	struct request_metrics m;
	struct gpu_attribution ga = { .queue_ns = ttft * 3 / 4,
				      .prefill_ns = ttft / 4,
				      .decode_ns = 10 * MS,
				      .gpu_ns = 8 * MS,
				      .host_ns = 2 * MS,
				      .how = "by time",
				      -1,
				      -1,
				      NULL,
				      .has_steps = false };

	r->arrival_ns = end - ttft - 10 * MS;
	request_add_token(r, end - 10 * MS);
	request_add_token(r, end);
	r->end_ns = end;
	r->outcome = OUTCOME_OK;
	request_metrics(r, &m);
	sk->request(sk->ctx, r, &m, &ga);
	request_free(r);
}

TEST(test_fire_and_resolve)
{
	struct alert_set a;
	struct alert_rule r;
	char err[256], *out = NULL, path[] = "/tmp/ts-alert-XXXXXX";
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	struct sink sk;
	int fd = mkstemp(path);
	char cmd[128];

	close(fd);
	snprintf(cmd, sizeof(cmd), "echo \"$TOKENSCOPE_ALERT_STATE $TOKENSCOPE_ALERT_VALUE\" >> %s",
		 path);
	alert_init(&a, f, cmd);
	alert_parse("ttft.p99 > 5s for 3m", &r, err, sizeof(err));
	alert_add(&a, &r);
	sk = alert_sink(&a);
	/* Slow requests every second from t=1000 s: the condition holds from the first tick. */
	for (uint64_t t = 1000; t < 1000 + 179; t++) {
		feed(&sk, t * S + S / 2, 6 * S);
		sk.tick(sk.ctx, &(struct pipeline_status){ .now_ns = t * S + S / 2 + 1 });
	}
	ASSERT_FALSE(a.rules[0].firing, "not before 3 minutes");
	for (uint64_t t = 1179; t < 1182; t++) {
		feed(&sk, t * S + S / 2, 6 * S);
		sk.tick(sk.ctx, &(struct pipeline_status){ .now_ns = t * S + S / 2 + 1 });
	}
	ASSERT_TRUE(a.rules[0].firing, "fires after holding 3 minutes");
	ASSERT_EQ(a.fired, 1, "once");
	ASSERT_NEAR(a.rules[0].value, 6.0, 6.0 * 0.032, "value within the window error");
	/* Fast requests: once the window holds no slow request, it resolves. */
	for (uint64_t t = 1182; t < 1182 + 62; t++) {
		feed(&sk, t * S + S / 2, 1 * S);
		sk.tick(sk.ctx, &(struct pipeline_status){ .now_ns = t * S + S / 2 + 1 });
	}
	ASSERT_FALSE(a.rules[0].firing, "resolved");
	ASSERT_EQ(a.resolved, 1, "resolved once");
	fflush(f);
	/* Every TTFT in the window is 6 s: the percentile is clamped to the exact maximum. */
	ASSERT_TRUE(
	    out &&
		strstr(out, "alert FIRING 'ttft.p99 > 5s for 3m': value 6.00 s over the last 60 s"),
	    "firing line with the value");
	ASSERT_TRUE(out && strstr(out, "likely cause: queueing (queue 75%"),
		    "cause from the attribution");
	ASSERT_TRUE(out && strstr(out, "alert RESOLVED 'ttft.p99 > 5s for 3m'"), "resolved line");
	/* The command ran for both, the resolve only after the firing one had ended. */
	alert_exec_drain(&a, 5000);
	for (int i = 0; i < 250; i++) {
		char buf[256] = "";
		FILE *e = fopen(path, "r");
		size_t n = e ? fread(buf, 1, sizeof(buf) - 1, e) : 0;
		const char *fired, *resolved;

		if (e)
			fclose(e);
		buf[n] = 0;
		fired = strstr(buf, "firing 6.00 s");
		resolved = strstr(buf, "resolved");
		if (resolved) {
			ASSERT_TRUE(fired != NULL, "exec saw the firing value");
			ASSERT_TRUE(fired && fired < resolved, "firing ran before resolved");
			break;
		}
		if (i == 249)
			ASSERT_TRUE(false, "--alert-exec ran for firing and resolving");
		usleep(20000);
	}
	unlink(path);
	alert_free(&a);
	fclose(f);
	free(out);
}

TEST(test_success_rate)
{
	struct alert_set a;
	struct alert_rule r;
	char err[256];
	FILE *f = fopen("/dev/null", "w");
	struct sink sk;

	alert_init(&a, f, NULL);
	alert_parse("success < 99% for 10s", &r, err, sizeof(err));
	alert_add(&a, &r);
	sk = alert_sink(&a);
	for (uint64_t t = 1; t < 30; t++) {
		struct request *q = request_new(1, 1, 0, "c");
		struct request_metrics m;
		struct gpu_attribution ga = { -1,     -1, -1, -1,   -1,
					      "none", -1, -1, NULL, .has_steps = false };

		q->arrival_ns = t * S;
		q->end_ns = t * S + 1;
		q->outcome = t % 10 == 0 ? OUTCOME_HTTP_ERROR : OUTCOME_OK;
		request_metrics(q, &m);
		sk.request(sk.ctx, q, &m, &ga);
		request_free(q);
		sk.tick(sk.ctx, &(struct pipeline_status){ .now_ns = t * S + 2 });
	}
	ASSERT_NEAR(a.rules[0].value, 100.0 * 27 / 29, 0.01, "success over the window");
	ASSERT_TRUE(a.rules[0].firing, "fires");
	alert_free(&a);
	fclose(f);
}

/* slo.attainment over the window: a request with objectives that met them or missed one counts,
 * one its client left or whose verdict is unknown does not; the cause names the objective. */
TEST(test_slo_attainment)
{
	struct alert_set a;
	struct alert_rule r;
	char err[256], *said = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&said, &len);
	struct sink sk;

	alert_init(&a, f, NULL);
	alert_parse("slo.attainment < 0.9 for 5s", &r, err, sizeof(err));
	alert_add(&a, &r);
	sk = alert_sink(&a);
	for (uint64_t t = 1; t < 30; t++) {
		struct request *q = request_new(1, 1, 0, "c");
		struct request_metrics m;
		struct gpu_attribution ga = { -1,     -1, -1, -1,   -1,
					      "none", -1, -1, NULL, .has_steps = false };

		q->arrival_ns = t * S;
		q->end_ns = t * S + 1;
		q->outcome = OUTCOME_OK;
		request_metrics(q, &m);
		m.slo.any = true;
		m.slo.limit_ns[SLO_TPOT] = 1;
		m.slo.result[SLO_TPOT] = t % 4 == 0 ? SLO_MISSED : SLO_MET;
		m.slo.overall = t % 4 == 0 ? SLO_MISSED : t % 5 == 0 ? SLO_ABORTED : SLO_MET;
		sk.request(sk.ctx, q, &m, &ga);
		request_free(q);
		sk.tick(sk.ctx, &(struct pipeline_status){ .now_ns = t * S + 2 });
	}
	/* 29 requests: 7 missed (every 4th), 4 left by their client (5, 10, 15, 25), 18 met. */
	ASSERT_NEAR(a.rules[0].value, 18.0 / 25, 1e-9, "attainment over the window");
	ASSERT_TRUE(a.rules[0].firing, "fires");
	alert_free(&a);
	fclose(f);
	ASSERT_TRUE(said && strstr(said, "FIRING") && strstr(said, "tpot missed by"), said);
	free(said);
}

/* The command's environment is built before fork: the variables of this process kept in order,
 * the four set once each (an inherited one of the same name replaced), the command line the
 * user's alone. */
TEST(test_alert_cmd)
{
	char *env[] = { "PATH=/usr/bin", "TOKENSCOPE_ALERT_STATE=stale", "NOEQUALS",
			"TOKENSCOPE_ALERT_RULEX=kept", NULL };
	struct alert_cmd c;
	int i = 0;

	if (!ASSERT_OK(alert_cmd_build(&c, "notify \"$X\"", env, "ttft.p99 > 5s", "firing",
				       "7.20 s", "queueing (queue 90%)"),
		       "build"))
		return;
	ASSERT_STREQ(c.argv[0], "sh", "sh");
	ASSERT_STREQ(c.argv[1], "-c", "-c");
	ASSERT_STREQ(c.argv[2], "notify \"$X\"", "the command as given");
	ASSERT_TRUE(c.argv[3] == NULL, "three arguments");
	ASSERT_STREQ(c.envp[i++], "PATH=/usr/bin", "inherited");
	ASSERT_STREQ(c.envp[i++], "NOEQUALS", "inherited as it is");
	ASSERT_STREQ(c.envp[i++], "TOKENSCOPE_ALERT_RULEX=kept", "another name");
	ASSERT_STREQ(c.envp[i++], "TOKENSCOPE_ALERT_RULE=ttft.p99 > 5s", "rule");
	ASSERT_STREQ(c.envp[i++], "TOKENSCOPE_ALERT_STATE=firing", "state, the stale one gone");
	ASSERT_STREQ(c.envp[i++], "TOKENSCOPE_ALERT_VALUE=7.20 s", "value");
	ASSERT_STREQ(c.envp[i++], "TOKENSCOPE_ALERT_CAUSE=queueing (queue 90%)", "cause");
	ASSERT_TRUE(c.envp[i] == NULL, "nothing more");
	alert_cmd_free(&c);
}

int main(void)
{
	return check_run_all();
}
