// SPDX-License-Identifier: MIT
/*
 * `tokenscope report` on any recording: the file (header fields included) is written to a memfd
 * and replayed by report_run (user/cli/report.c) as the command does, with its outputs in
 * memory and its files in a directory of the target's: the request lines, the summary and the
 * diagnosis, the Prometheus text, the timeline and the HTML report, all of which take the
 * header's clocks and host. record_replay (user/record/record.c) is driven directly too, for
 * its own properties.
 *
 * The report's options come from the header's reserved flags word (offset 392), which the
 * reader does not interpret, so every file is still a plain recording (RF_* below).
 *
 * Properties: every output as fuzz_outputs.h wants it (terminal text, JSON lines, the
 * exposition, the timeline as JSON, the page, the OTLP batches written with --otlp file:) and
 * meaning what fuzz_meaning.h says against the clock of the records the file holds; report_run's
 * return value one record.h lists; record_replay's return value agrees with its stats (whole file:
 * no bad offset and no reason; otherwise a reason), every record handed to the feed is framed (at
 * least a header, and the header's size is its length), the stats count what was fed, and the
 * header's strings are terminated printable text.
 */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli/report.h"
#include "fuzz_meaning.h"
#include "record/record.h"

#define RECORD_FUZZ_FLAGS_AT 392

enum {
	RF_JSON = 1,
	RF_TOKENS = 2,
	RF_GPU = 4,
	RF_VERBOSE = 8,
	RF_PROMETHEUS = 16, /* report --prometheus (without --json: its text is alone on stdout) */
	RF_ALERTS = 32,
	RF_BY_PROCESS = 64,
	RF_SLOW = 128, /* OTLP: every request anomalous (full detail, token events) */
};

static const char *const fuzz_alert_rules[] = { "ttft.p50 > 1us", "success < 99%",
						"rps >= 0 for 2s", "slo.attainment < 90%" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fed {
	uint64_t n;
	struct fuzz_clock clock; /* the times of every record fed */
};

static int count(void *ctx, const void *rec, size_t len)
{
	struct fed *fed = ctx;
	struct ts_event_hdr h;

	FUZZ_CHECK(len >= sizeof(h), "a record of %zu bytes", len);
	memcpy(&h, rec, sizeof(h));
	FUZZ_CHECK(h.size == len, "a record of %zu bytes whose header says %u", len, h.size);
	fuzz_clock_record(&fed->clock, rec, len);
	fed->n++;
	return 0;
}

static bool known_error(int rc)
{
	return rc == 0 || rc == -EBADMSG || rc == -EPROTO || rc == -ENOEXEC ||
	       rc == -EPROTONOSUPPORT || rc == -ENOMEM;
}

FUZZ_CHECKER static void check_printable(const char *what, const char *s, size_t cap)
{
	FUZZ_CHECK(memchr(s, 0, cap), "%s not terminated", what);
	fuzz_check_text(what, s, strlen(s), NULL);
	FUZZ_CHECK(!strchr(s, '\n'), "%s holds a newline", what);
}

/* record_replay alone: its return value, stats and metadata; the clock of the records it fed. */
static void replay_alone(const char *path, size_t size, struct fuzz_clock *clock)
{
	struct record_replay_stats st;
	struct record_meta meta = { 0 };
	struct fed fed = { 0 };
	int rc;

	fuzz_clock_init(&fed.clock);
	rc = record_replay(path, count, &fed, &meta, &st);
	*clock = fed.clock;
	FUZZ_CHECK(known_error(rc), "record_replay returned %d (%s)", rc, st.reason);
	FUZZ_CHECK(memchr(st.reason, 0, sizeof(st.reason)), "reason not terminated");
	FUZZ_CHECK(st.records == fed.n, "stats say %llu records, %llu were fed",
		   (unsigned long long)st.records, (unsigned long long)fed.n);
	FUZZ_CHECK(st.bytes <= size, "read %llu bytes of a %zu-byte file",
		   (unsigned long long)st.bytes, size);
	if (rc == 0)
		FUZZ_CHECK(st.header_ok && st.bad_offset == -1 && !st.reason[0],
			   "a whole file with a bad offset %lld or a reason \"%s\"",
			   (long long)st.bad_offset, st.reason);
	else
		FUZZ_CHECK(st.reason[0] && st.bad_offset >= 0 && (uint64_t)st.bad_offset <= size,
			   "error %d without a reason or an offset in the file (%lld)", rc,
			   (long long)st.bad_offset);
	if (!st.header_ok)
		FUZZ_CHECK(fed.n == 0, "records fed from a file whose header was refused");
	if (st.header_ok) {
		check_printable("tool version", meta.tool_version, sizeof(meta.tool_version));
		check_printable("host name", meta.hostname, sizeof(meta.hostname));
		FUZZ_CHECK(meta.nroots <= RECORD_MAX_ROOTS, "%u roots", meta.nroots);
		FUZZ_CHECK(meta.start_mono_ns <= RECORD_CLOCK_MAX_NS &&
			       meta.start_real_ns <= RECORD_CLOCK_MAX_NS,
			   "clocks out of range accepted");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned flags = size > RECORD_FUZZ_FLAGS_AT ? data[RECORD_FUZZ_FLAGS_AT] : 0;
	char path[64], tl_path[128], html_path[128], otlp_url[160], *buf;
	struct fuzz_otlp_run otlp_run = { 0 };
	struct fuzz_clock clock;
	FILE *otlp;
	struct report_opts o = { 0 };
	char *out = NULL, *err = NULL;
	size_t out_len = 0, err_len = 0, len;
	int fd = memfd_create("fuzz_record", MFD_CLOEXEC), rc;

	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	replay_alone(path, size, &clock);

	snprintf(tl_path, sizeof(tl_path), "%s/timeline.json", fuzz_tmpdir());
	snprintf(html_path, sizeof(html_path), "%s/page.html", fuzz_tmpdir());
	snprintf(otlp_url, sizeof(otlp_url), "file:%s/otlp.jsonl", fuzz_tmpdir());
	unlink(tl_path);
	unlink(html_path);
	unlink(otlp_url + strlen("file:"));
	o.path = path;
	o.json = flags & RF_JSON;
	o.tokens = flags & RF_TOKENS;
	o.gpu_steps = flags & RF_GPU;
	o.verbose = flags & RF_VERBOSE;
	o.ex.prometheus = (flags & RF_PROMETHEUS) && !o.json;
	o.ex.by_process = flags & RF_BY_PROCESS;
	o.ex.timeline = tl_path;
	o.ex.html = html_path;
	/* Every request a span, written to a file as the sender would POST it (report
	 * --otlp file:PATH --trace-sample 1). */
	o.ex.otlp_url = otlp_url;
	o.ex.trace_sample = 1;
	if (flags & RF_SLOW)
		o.ex.slow_ttft_ns = o.ex.slow_itl_ns = 1;
	if (flags & RF_ALERTS) {
		char msg[256];

		for (size_t i = 0; i < sizeof(fuzz_alert_rules) / sizeof(fuzz_alert_rules[0]); i++)
			o.ex.alerts[o.ex.nalerts++] = fuzz_alert_rules[i];
		/* Objectives and labels: every request judged, split and labelled (the records'
		 * heads and bodies may bring llm-d's headers and the labels' fields). */
		if (slo_parse(&o.ex.slo, "ttft<=5ms,tpot<=1ms,e2e<=50ms", msg, sizeof(msg)) ||
		    slo_parse(&o.ex.slo, "model=r*:ttft<=1ms", msg, sizeof(msg)) ||
		    req_labels_parse(&o.ex.labels, "tenant=header:X-Tenant-Id", msg, sizeof(msg)) ||
		    req_labels_parse(&o.ex.labels, "user=body:user", msg, sizeof(msg)))
			abort();
	}
	o.out = open_memstream(&out, &out_len);
	o.err = open_memstream(&err, &err_len);
	if (!o.out || !o.err)
		abort();
	rc = report_run(&o);
	fclose(o.out);
	fclose(o.err);
	close(fd);

	FUZZ_CHECK(known_error(rc), "report_run returned %d", rc);
	/* The standard error: messages, and the lines and summary when stdout has other work. */
	fuzz_check_text("report's standard error", err, err_len, NULL);
	fuzz_text_meaning("report's standard error", err, err_len, &clock);
	if (o.ex.prometheus) {
		fuzz_check_prom(out, out_len, NULL);
		fuzz_prom_meaning(out, out_len, &clock);
	} else if (o.json) {
		fuzz_check_json_lines("report --json", out, out_len);
		fuzz_json_lines_meaning("report --json", out, out_len, &clock);
	} else {
		fuzz_check_text("report", out, out_len, NULL);
		fuzz_text_meaning("report", out, out_len, &clock);
	}
	free(out);
	free(err);
	/* A header refused: no file is made. Otherwise both are whole. */
	if ((buf = fuzz_read_file(tl_path, &len))) {
		cJSON_Delete(fuzz_check_json("timeline", buf, len));
		free(buf);
	}
	if ((buf = fuzz_read_file(html_path, &len))) {
		fuzz_check_html(buf, len);
		free(buf);
	}
	/* The spans: a batch a line, each one OTLP/JSON document meaning what it must. */
	otlp = fopen(otlp_url + strlen("file:"), "r");
	while (otlp && (buf = NULL, len = 0, getline(&buf, &len, otlp)) > 0) {
		cJSON *j = fuzz_check_json("otlp batch", buf, strlen(buf));

		fuzz_otlp_meaning(j, &clock, &otlp_run);
		cJSON_Delete(j);
		free(buf);
	}
	if (otlp) {
		free(buf);
		fclose(otlp);
	}
	fuzz_otlp_run_end(&otlp_run);
	return 0;
}
