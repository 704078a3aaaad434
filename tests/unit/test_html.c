// SPDX-License-Identifier: MIT
/*
 * The HTML report's sink: requests and GPU steps through its callbacks, then the page read
 * back: its data element parsed as JSON, the summary in it equal to summary_json's for the
 * same summary, a model name that tries to end the element written \u003c (the page keeps its
 * own two scripts only), the caps on kept requests and steps counted, and the TTFT/ITL series
 * merging its buckets as a run outgrows them. (tests/html/run_html.sh opens real pages in a
 * browser.)
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "lib/jsonw.h"
#include "pipeline/gpu.h"
#include "sinks/html.h"
#include "sinks/summary.h"

#define MS 1000000ull
#define ORIGIN (9000 * 1000 * MS)
#define DATA_OPEN "<script type=\"application/json\" id=\"ts-data\">"
#define HOSTILE "</script><!--x"

struct page {
	char path[64];
	struct html *h;
	struct sink s;
	struct summary sum;
	char *text;
	cJSON *data;
};

static bool page_open(struct page *p)
{
	int fd;

	memset(p, 0, sizeof(*p));
	snprintf(p->path, sizeof(p->path), "/tmp/test_html.XXXXXX");
	fd = mkstemp(p->path);
	if (fd >= 0)
		close(fd);
	summary_init(&p->sum);
	if (!ASSERT_OK(html_open(&p->h, p->path, ORIGIN), "open"))
		return false;
	html_set_summary(p->h, &p->sum, NULL);
	p->s = html_sink(p->h);
	return true;
}

/* Ends the run at now_ns, closes the page and parses its data element. */
static bool page_finish(struct page *p, uint64_t now_ns)
{
	struct pipeline_status st = { .now_ns = now_ns, .record_ns = now_ns };
	char *start, *end;

	p->s.finish(p->s.ctx, &st);
	if (!ASSERT_OK(html_close(p->h), "close"))
		return false;
	p->h = NULL;
	p->text = check_read_file(p->path);
	if (!ASSERT_OK_PTR(p->text, "read the page"))
		return false;
	start = strstr(p->text, DATA_OPEN);
	if (!ASSERT_OK_PTR(start, "the data element"))
		return false;
	start += strlen(DATA_OPEN);
	end = strstr(start, "</script>");
	if (!ASSERT_OK_PTR(end, "the data element's end"))
		return false;
	*end = 0;
	p->data = cJSON_Parse(start);
	*end = '<';
	return ASSERT_OK_PTR(p->data, "the data is JSON");
}

static void page_free(struct page *p)
{
	html_close(p->h);
	cJSON_Delete(p->data);
	free(p->text);
	unlink(p->path);
}

static struct request *make_request(const char *model, uint64_t arrival, uint32_t ntokens,
				    enum outcome outcome)
{
	struct request *r = request_new(100, 1, 0, "127.0.0.1:8000<-127.0.0.1:40000#1");

	snprintf(r->info.model, sizeof(r->info.model), "%s", model);
	r->status = 200;
	r->streamed = true;
	r->arrival_ns = arrival;
	r->received_ns = arrival - MS / 4;
	for (uint32_t i = 0; i < ntokens; i++)
		request_add_token(r, arrival + 20 * MS + i * 5 * MS);
	r->end_ns = arrival + 20 * MS + ntokens * 5 * MS;
	r->outcome = outcome;
	return r;
}

/* The request to the page and to its summary, as the pipeline gives it to both sinks. */
static void feed(struct page *p, struct request *r, const struct gpu_attribution *ga)
{
	struct request_metrics m;

	request_metrics(r, &m);
	summary_start(&p->sum, r);
	p->s.request_start(p->s.ctx, r);
	summary_done(&p->sum, r, &m);
	p->s.request(p->s.ctx, r, &m, ga);
}

static const struct gpu_attribution NOT_ATTRIBUTED = {
	-1, -1, -1, -1, -1, "none: no GPU steps seen", -1, -1, NULL, .has_steps = false,
};

static const cJSON *get(const cJSON *o, const char *path)
{
	char key[64];

	while (o && *path) {
		size_t n = strcspn(path, ".");

		snprintf(key, sizeof(key), "%.*s", (int)n, path);
		o = cJSON_GetObjectItemCaseSensitive(o, key);
		path += n + (path[n] == '.');
	}
	return o;
}

static int count_of(const char *text, const char *what)
{
	int n = 0;

	for (const char *s = text; (s = strstr(s, what)); s++)
		n++;
	return n;
}

TEST(test_page_data)
{
	struct gpu_attribution ga = {
		2 * MS,	   10 * MS, 15 * MS, 12 * MS,	   3 * MS,
		"by time", -1,	    -1,	     "host-calls", .has_steps = false
	};
	struct gpu_step step = { 0 };
	struct page p;
	struct request *r;
	char *want = NULL;
	size_t len = 0;
	struct jsonw w;
	struct loss_report loss = { 0 };
	FILE *mem;
	cJSON *wj;
	const cJSON *rows, *models;

	if (!page_open(&p))
		return;
	r = make_request("m1", ORIGIN + 1000 * MS, 4, OUTCOME_OK);
	feed(&p, r, &ga);
	request_free(r);
	r = make_request(HOSTILE, ORIGIN + 1100 * MS, 3, OUTCOME_OK);
	feed(&p, r, &NOT_ATTRIBUTED);
	request_free(r);
	r = make_request("m1", ORIGIN + 1200 * MS, 0, OUTCOME_ABORTED);
	feed(&p, r, &NOT_ATTRIBUTED);
	request_free(r);
	step.pid = 7;
	step.start_ns = ORIGIN + 1005 * MS;
	step.end_ns = ORIGIN + 1015 * MS;
	step.launches = 40;
	step.kind = gpu_classify(step.launches, 0);
	p.s.gpu_step(p.s.ctx, &step);
	if (!page_finish(&p, ORIGIN + 2000 * MS))
		goto out;

	/* The page's summary is summary_json's, with the histograms' buckets, the SLO tally's
	 * (none here: null) and the stalls' (none). */
	mem = open_memstream(&want, &len);
	jsonw_begin(&w, mem);
	summary_json(&w, &p.sum, &loss, true);
	summary_json_cache(&w, &p.sum);
	summary_json_abandoned(&w, &p.sum);
	summary_json_slo(&w, &p.sum, NULL);
	summary_json_stalls(&w, &p.sum);
	jsonw_end(&w);
	fclose(mem);
	wj = cJSON_Parse(want);
	ASSERT_TRUE(cJSON_Compare(wj, get(p.data, "summary"), true),
		    "the summary is summary_json's");
	cJSON_Delete(wj);
	free(want);
	ASSERT_EQ(get(p.data, "summary.requests")->valueint, 3, "3 requests");
	/* Both ok requests' TTFT is 20 ms: one bucket [low, high, count] holding them. */
	ASSERT_EQ(cJSON_GetArraySize(get(p.data, "summary.ttft_ms.buckets")), 1, "one bucket");
	ASSERT_EQ(
	    cJSON_GetArrayItem(cJSON_GetArrayItem(get(p.data, "summary.ttft_ms.buckets"), 0), 2)
		->valueint,
	    2, "2 TTFTs in it");

	/* The requests' table: every request, by column name. */
	rows = get(p.data, "requests.rows");
	ASSERT_EQ(cJSON_GetArraySize(rows), 3, "3 rows");
	ASSERT_EQ(get(p.data, "requests.total")->valueint, 3, "total");
	ASSERT_STREQ(cJSON_GetArrayItem(get(p.data, "requests.columns"), 0)->valuestring, "t_ms",
		     "first column");
	ASSERT_NEAR(cJSON_GetArrayItem(cJSON_GetArrayItem(rows, 0), 0)->valuedouble, 1000, 1e-9,
		    "arrival from the origin, ms");
	ASSERT_STREQ(cJSON_GetArrayItem(cJSON_GetArrayItem(rows, 2), 1)->valuestring, "aborted",
		     "outcome");
	ASSERT_EQ(cJSON_GetArraySize(get(p.data, "steps.rows")), 1, "1 step");
	ASSERT_NEAR(get(p.data, "series.t0_ms")->valuedouble, 1000, 1e-9, "series from the first");
	ASSERT_EQ(get(p.data, "hists.socket_wait_ms.count")->valueint, 3, "socket waits");
	ASSERT_TRUE(cJSON_IsString(get(p.data, "diagnosis")), "a diagnosis of its own");

	/* The hostile model name reads back whole, and is nowhere in the page as written. */
	models = get(p.data, "models");
	ASSERT_EQ(cJSON_GetArraySize(models), 2, "2 models");
	ASSERT_STREQ(cJSON_GetArrayItem(models, 1)->valuestring, HOSTILE, "model read back");
	ASSERT_EQ(count_of(p.text, HOSTILE), 0, "the name as written");
	ASSERT_EQ(count_of(p.text, "\\u003c/script>\\u003c!--x"), 1, "the name escaped");
	ASSERT_EQ(count_of(p.text, "</script>"), 2, "the page's two scripts end, nothing else");
	ASSERT_EQ(count_of(p.text, "<!--"), 1, "the page's own comment only");
out:
	page_free(&p);
}

/* Past HTML_MAX_REQUESTS and HTML_MAX_STEPS the page keeps none, and counts them. */
TEST(test_caps)
{
	struct gpu_step step = { .pid = 7, .kind = STEP_DECODE };
	struct request *r = make_request("m", ORIGIN + MS, 2, OUTCOME_OK);
	struct request_metrics m;
	struct page p;

	if (!page_open(&p)) {
		request_free(r);
		return;
	}
	request_metrics(r, &m);
	for (int i = 0; i < HTML_MAX_REQUESTS + 5; i++)
		p.s.request(p.s.ctx, r, &m, &NOT_ATTRIBUTED);
	for (int i = 0; i < HTML_MAX_STEPS + 3; i++) {
		step.start_ns = ORIGIN + i * MS;
		step.end_ns = step.start_ns + MS / 2;
		p.s.gpu_step(p.s.ctx, &step);
	}
	request_free(r);
	if (page_finish(&p, ORIGIN + 300 * 1000 * MS)) {
		ASSERT_EQ(get(p.data, "requests.total")->valueint, HTML_MAX_REQUESTS + 5, "seen");
		ASSERT_EQ(get(p.data, "requests.kept")->valueint, HTML_MAX_REQUESTS, "kept");
		ASSERT_EQ(cJSON_GetArraySize(get(p.data, "requests.rows")), HTML_MAX_REQUESTS,
			  "rows");
		ASSERT_EQ(get(p.data, "steps.total")->valueint, HTML_MAX_STEPS + 3, "steps seen");
		ASSERT_EQ(cJSON_GetArraySize(get(p.data, "steps.rows")), HTML_MAX_STEPS,
			  "steps kept");
		ASSERT_EQ(get(p.data, "hists.socket_wait_ms.count")->valueint,
			  HTML_MAX_REQUESTS + 5, "the histograms cover every request");
	}
	page_free(&p);
}

/* A run longer than the buckets: they merge two by two, every value still counted once. */
TEST(test_series_merge)
{
	const int n = 500;
	uint64_t ttft = 0, itl = 0;
	const cJSON *c;
	struct page p;

	if (!page_open(&p))
		return;
	/* A request every 100 ms for 50 s, from 3 s into the run: 10 ms buckets would need 5000. */
	for (int i = 0; i < n; i++) {
		struct request *r =
		    make_request("m", ORIGIN + 3000 * MS + i * 100 * MS, 3, OUTCOME_OK);

		feed(&p, r, &NOT_ATTRIBUTED);
		request_free(r);
	}
	if (page_finish(&p, ORIGIN + 60000 * MS)) {
		double width = get(p.data, "series.bucket_ms")->valuedouble;
		int nb = cJSON_GetArraySize(get(p.data, "series.ttft_ms.count"));

		ASSERT_NEAR(width, 640, 1e-9, "10 ms doubled 6 times");
		ASSERT_TRUE(nb > HTML_SERIES_BUCKETS / 2 && nb <= HTML_SERIES_BUCKETS,
			    "60 to 120 buckets");
		cJSON_ArrayForEach(c, get(p.data, "series.ttft_ms.count")) ttft += c->valueint;
		cJSON_ArrayForEach(c, get(p.data, "series.itl_ms.count")) itl += c->valueint;
		ASSERT_EQ(ttft, n, "every TTFT once");
		ASSERT_EQ(itl, 2 * n, "every gap once");
		ASSERT_NEAR(cJSON_GetArrayItem(get(p.data, "series.ttft_ms.p50"), 0)->valuedouble,
			    20, 20 * 0.032, "a bucket's median (3.2 %)");
	}
	page_free(&p);
}

/* A path that cannot be created fails at once, with errno. */
TEST(test_open_fails)
{
	struct html *h = (struct html *)1;

	ASSERT_EQ(html_open(&h, "/nonexistent-dir/x.html", ORIGIN), -ENOENT, "ENOENT");
	ASSERT_TRUE(h == NULL, "no sink");
}

int main(void)
{
	return check_run_all();
}
