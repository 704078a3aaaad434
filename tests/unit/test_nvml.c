// SPDX-License-Identifier: MIT
/*
 * The NVML sampler against the stand-in library (tests/nvmlstub.c, told what to answer through
 * TS_NVML_STUB): exact values, values absent when the library lacks a function or the device
 * refuses a query, duplicate process entries merged, the caps on devices and processes and
 * their counts, names cleaned; the one message when there is no library, no NVML in it or no
 * driver; the sampler thread (slow init off the caller's thread, periods, a prompt stop); then
 * what the exporters make of a sample: the traced-process filter, the summary lines, the
 * Prometheus families (exact lines, escaping, none without a sample) and the timeline's counter
 * events. Run from the repository root (tests/run.sh does).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "loader/nvml.h"
#include "sinks/prom.h"
#include "sinks/timeline.h"

/* The build's stand-ins: the Makefile names the folder of a cross build's. */
#ifndef TS_STANDIN_DIR
#define TS_STANDIN_DIR ".output/standin"
#endif
#define STANDIN TS_STANDIN_DIR "/libnvidia-ml.so.1"
#define STANDIN_OLD TS_STANDIN_DIR "/nvml-old/libnvidia-ml.so.1"
#define GIB 1073741824ull
#define MIB 1048576ull

/* Two devices: every value on the first (pid 4242 listed twice, 4343 without its memory), and
 * on the second only what a board that supports little gives. */
#define TWO_GPUS                                                                       \
	"name=Stub H200,uuid=GPU-0000-aaaa,util=45,mem=1073741824/8589934592,sm=1980," \
	"power=350125,procs=4242:536870912/4343:na/4242:1048576/77:2097152;"           \
	"name=Stub B,uuid=GPU-1111,util=na,mem=!15,power=na,procs=na"

static char msg[4096];

/* Opens lib with TS_NVML_STUB set to cfg; what it printed is in msg. */
static struct nvml *open_with(const char *lib, const char *cfg)
{
	FILE *err = fmemopen(msg, sizeof(msg), "w");
	struct nvml_opts o = { .library = lib, .err = err };
	struct nvml *n;

	memset(msg, 0, sizeof(msg));
	setenv("TS_NVML_STUB", cfg, 1);
	n = nvml_open(&o);
	fclose(err);
	return n;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct device_sample snap; /* large: not on the stack */

TEST(test_exact_values)
{
	struct nvml *n = open_with(STANDIN, TWO_GPUS);
	const struct sampled_device *a = &snap.devices[0], *b = &snap.devices[1];
	uint64_t before = now_ns();

	if (!ASSERT_OK_PTR(n, "open the stand-in"))
		return;
	ASSERT_STREQ(msg, "", "nothing printed");
	nvml_sample(n, &snap);
	nvml_stop(n);
	if (!ASSERT_EQ(snap.ndevices, 2, "devices"))
		return;
	ASSERT_EQ(snap.devices_dropped, 0, "devices dropped");
	ASSERT_EQ(a->index, 0, "index");
	ASSERT_TRUE(a->mono_ns >= before && a->mono_ns <= now_ns(), "sample time");
	ASSERT_STREQ(a->name, "Stub H200", "name");
	ASSERT_STREQ(a->uuid, "GPU-0000-aaaa", "uuid");
	ASSERT_TRUE(a->util_present, "util");
	ASSERT_EQ(a->util_pct, 45, "util %");
	ASSERT_TRUE(a->mem_present, "mem");
	ASSERT_EQ(a->mem_used, GIB, "used");
	ASSERT_EQ(a->mem_total, 8 * GIB, "total");
	ASSERT_TRUE(a->clock_present, "clock");
	ASSERT_EQ(a->sm_clock_hz, 1980000000ull, "SM clock in Hz");
	ASSERT_TRUE(a->power_present, "power");
	ASSERT_EQ(a->power_mw, 350125, "power mW");
	ASSERT_TRUE(a->procs_present, "procs");
	if (ASSERT_EQ(a->nprocs, 3, "4242 twice is one process")) {
		ASSERT_EQ(a->procs[0].pid, 4242, "pid");
		ASSERT_TRUE(a->procs[0].mem_present, "4242 mem");
		ASSERT_EQ(a->procs[0].mem_bytes, 512 * MIB + MIB, "4242: both entries summed");
		ASSERT_EQ(a->procs[1].pid, 4343, "pid");
		ASSERT_FALSE(a->procs[1].mem_present, "4343: not available stays absent");
		ASSERT_EQ(a->procs[2].pid, 77, "pid");
		ASSERT_EQ(a->procs[2].mem_bytes, 2 * MIB, "77 mem");
	}
	ASSERT_EQ(a->procs_dropped, 0, "procs dropped");

	ASSERT_EQ(b->index, 1, "index");
	ASSERT_STREQ(b->name, "Stub B", "name");
	ASSERT_STREQ(b->uuid, "GPU-1111", "uuid");
	ASSERT_FALSE(b->util_present, "util not supported");
	ASSERT_FALSE(b->mem_present, "mem: an error code");
	ASSERT_FALSE(b->clock_present, "clock: not given");
	ASSERT_FALSE(b->power_present, "power not supported");
	ASSERT_FALSE(b->procs_present, "procs not supported");
	ASSERT_EQ(b->util_pct + b->mem_used + b->mem_total + b->sm_clock_hz + b->power_mw, 0,
		  "absent values are not made up");
}

/* A library without nvmlDeviceGetClockInfo and the _v3 process query. */
TEST(test_old_library)
{
	struct nvml *n = open_with(STANDIN_OLD, "name=Old,uuid=GPU-old,util=7,sm=1500,power=1000,"
						"procs=4242:4096");

	if (!ASSERT_OK_PTR(n, "open the old stand-in"))
		return;
	ASSERT_STREQ(msg, "", "a missing optional function is not an error");
	nvml_sample(n, &snap);
	nvml_stop(n);
	if (!ASSERT_EQ(snap.ndevices, 1, "devices"))
		return;
	ASSERT_TRUE(snap.devices[0].util_present, "util");
	ASSERT_EQ(snap.devices[0].util_pct, 7, "util");
	ASSERT_TRUE(snap.devices[0].power_present, "power");
	ASSERT_EQ(snap.devices[0].power_mw, 1000, "power");
	ASSERT_FALSE(snap.devices[0].clock_present, "no clock function: absent");
	ASSERT_FALSE(snap.devices[0].procs_present, "no process function: absent");
	ASSERT_EQ(snap.devices[0].nprocs, 0, "no processes");
}

/* Memory used as nvidia-smi shows it: without what the driver reserves (the _v2 query), and
 * with it where the library has only the first version. */
TEST(test_memory_reserved)
{
	static const char cfg[] = "name=R,uuid=GPU-r,mem=1073741824/8589934592,reserved=629145600";
	struct device_sample snap;
	struct nvml *n = open_with(STANDIN, cfg);

	if (!ASSERT_OK_PTR(n, "open"))
		return;
	nvml_sample(n, &snap);
	nvml_stop(n);
	if (ASSERT_EQ(snap.ndevices, 1, "devices")) {
		ASSERT_TRUE(snap.devices[0].mem_present, "mem");
		ASSERT_EQ(snap.devices[0].mem_used, GIB, "_v2: used without the reserve");
		ASSERT_EQ(snap.devices[0].mem_total, 8 * GIB, "total");
	}
	n = open_with(STANDIN_OLD, cfg);
	if (!ASSERT_OK_PTR(n, "open the old library"))
		return;
	nvml_sample(n, &snap);
	nvml_stop(n);
	if (ASSERT_EQ(snap.ndevices, 1, "devices"))
		ASSERT_EQ(snap.devices[0].mem_used, GIB + 600 * MIB, "first version: with it");
}

TEST(test_caps)
{
	static char cfg[8192];
	struct nvml *n;
	size_t len = 0;

	/* 20 devices; device 0 with 10 listed and 60 more processes, device 1 with more than the
	 * sampler asks room for. */
	for (int i = 0; i < 20; i++) {
		len +=
		    snprintf(cfg + len, sizeof(cfg) - len, "name=G%d,uuid=GPU-%d,util=%d", i, i, i);
		if (i == 0) {
			len += snprintf(cfg + len, sizeof(cfg) - len, ",procs=");
			for (int p = 0; p < 10; p++)
				len += snprintf(cfg + len, sizeof(cfg) - len, "%s%d:%d",
						p ? "/" : "", 100 + p, p);
			len += snprintf(cfg + len, sizeof(cfg) - len, ",extra=60");
		}
		if (i == 1)
			len += snprintf(cfg + len, sizeof(cfg) - len, ",procs=,extra=1100");
		len += snprintf(cfg + len, sizeof(cfg) - len, ";");
	}
	n = open_with(STANDIN, cfg);
	if (!ASSERT_OK_PTR(n, "open"))
		return;
	nvml_sample(n, &snap);
	nvml_stop(n);
	ASSERT_EQ(snap.ndevices, DEV_MAX_DEVICES, "devices kept");
	ASSERT_EQ(snap.devices_dropped, 20 - DEV_MAX_DEVICES, "devices counted");
	ASSERT_EQ(snap.devices[15].index, 15, "the first 16 kept");
	ASSERT_EQ(snap.devices[15].util_pct, 15, "with their own values");
	ASSERT_EQ(snap.devices[0].nprocs, DEV_MAX_PROCS, "processes kept");
	ASSERT_EQ(snap.devices[0].procs_dropped, 70 - DEV_MAX_PROCS, "processes counted");
	ASSERT_EQ(snap.devices[0].procs[9].pid, 109, "listed first");
	ASSERT_EQ(snap.devices[0].procs[10].pid, 2000000, "then the extra ones");
	ASSERT_EQ(snap.devices[0].procs[63].mem_bytes, 54 * MIB, "the 64th");
	ASSERT_FALSE(snap.devices[1].procs_present, "more than asked room for: absent");
	ASSERT_EQ(snap.devices[1].procs_dropped, 1100, "and all counted");
	ASSERT_TRUE(snap.devices[2].procs_present == false && snap.devices[2].procs_dropped == 0,
		    "no procs key: not supported");
}

/* Names go to labels, JSON and the terminal: control and invalid bytes replaced, the rest
 * (quotes, backslashes) kept for each encoder to escape. */
TEST(test_text_cleaned)
{
	struct nvml *n = open_with(STANDIN, "name=A\"q\\ \x01z\xff,uuid=GPU-\xc3\xa9");

	if (!ASSERT_OK_PTR(n, "open"))
		return;
	nvml_sample(n, &snap);
	nvml_stop(n);
	ASSERT_STREQ(snap.devices[0].name, "A\"q\\ \xef\xbf\xbdz\xef\xbf\xbd", "name cleaned");
	ASSERT_STREQ(snap.devices[0].uuid, "GPU-\xc3\xa9", "UTF-8 kept");
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

TEST(test_no_driver)
{
	const char *head = "tokenscope: NVML unavailable (" TS_STANDIN_DIR "/libcudart.so.13/: ";
	const char *tail = "): no GPU utilisation or memory\n";

	ASSERT_TRUE(open_with(STANDIN, "fail=9") == NULL, "nvmlInit fails");
	ASSERT_STREQ(msg,
		     "tokenscope: NVML unavailable (nvmlInit: Driver Not Loaded): no GPU "
		     "utilisation or memory\n",
		     "the message names NVML's reason");

	ASSERT_TRUE(open_with("/nonexistent/libnvidia-ml.so.1", "") == NULL, "no library");
	ASSERT_STREQ(msg,
		     "tokenscope: NVML unavailable (no /nonexistent/libnvidia-ml.so.1): no GPU "
		     "utilisation or memory\n",
		     "no such file: said short");
	ASSERT_TRUE(open_with(TS_STANDIN_DIR "/libcudart.so.13/", "") == NULL, "not a library");
	ASSERT_TRUE(!strncmp(msg, head, strlen(head)),
		    "any other dlopen failure: dlerror's reason");
	ASSERT_TRUE(strlen(msg) > strlen(tail) && !strcmp(msg + strlen(msg) - strlen(tail), tail),
		    "what it means");
	ASSERT_EQ(count_lines(msg), 1, "one line");

	/* A library that is not NVML. */
	ASSERT_TRUE(open_with(TS_STANDIN_DIR "/libcudart.so.13", "") == NULL, "not NVML");
	ASSERT_STREQ(msg,
		     "tokenscope: NVML unavailable (" TS_STANDIN_DIR "/libcudart.so.13 has no "
		     "nvmlInit_v2): no GPU utilisation or memory\n",
		     "the missing function named");
}

/* The thread: opening off the caller's thread (a driver slow to initialise), one sample per
 * period, and a stop that does not wait for the period to end. */
TEST(test_thread)
{
	FILE *err = fmemopen(msg, sizeof(msg), "w");
	struct nvml_opts o = { .library = STANDIN, .period_ms = 20, .err = err };
	struct device_sample *s = calloc(1, sizeof(*s));
	uint64_t t0, first = 0, seq1 = 0;
	struct nvml *n;

	memset(msg, 0, sizeof(msg));
	setenv("TS_NVML_STUB", "init_ms=300;" TWO_GPUS, 1);
	t0 = now_ns();
	n = nvml_start(&o);
	ASSERT_TRUE(now_ns() - t0 < 200000000ull, "start does not wait for nvmlInit");
	if (!ASSERT_OK_PTR(n, "start"))
		goto out;
	ASSERT_FALSE(nvml_latest(n, s), "no sample before nvmlInit returned");
	for (int i = 0; i < 300 && !first; i++) {
		if (nvml_latest(n, s))
			first = now_ns();
		else
			usleep(10000);
	}
	if (!ASSERT_TRUE(first, "a sample within 3 s"))
		goto stop;
	ASSERT_TRUE(first - t0 >= 300000000ull, "after nvmlInit's 300 ms");
	ASSERT_EQ(s->devices[0].util_pct, 45, "values");
	ASSERT_EQ(s->devices[0].power_mw, 350125, "values");
	seq1 = s->seq;
	ASSERT_FALSE(nvml_latest(n, s), "the same sample is not copied again");
	usleep(200000);
	ASSERT_TRUE(nvml_latest(n, s), "a newer one");
	/* 200 ms at 20 ms a period: about 10 more; scheduling on a busy machine may lose some. */
	ASSERT_TRUE(s->seq > seq1 + 3 && s->seq < seq1 + 14, "one sample per period");
stop:
	t0 = now_ns();
	nvml_stop(n);
	ASSERT_TRUE(now_ns() - t0 < 100000000ull, "stop is prompt");
out:
	fclose(err);
	ASSERT_STREQ(msg, "", "nothing printed");
	free(s);
}

TEST(test_thread_long_period_stop)
{
	struct nvml_opts o = { .library = STANDIN, .period_ms = 10000 };
	struct device_sample *s = calloc(1, sizeof(*s));
	struct nvml *n;
	uint64_t t0;

	setenv("TS_NVML_STUB", TWO_GPUS, 1);
	n = nvml_start(&o);
	if (!ASSERT_OK_PTR(n, "start"))
		goto out;
	for (int i = 0; i < 300 && !nvml_latest(n, s); i++)
		usleep(10000);
	ASSERT_EQ(s->seq, 1, "the first sample at once");
	t0 = now_ns();
	nvml_stop(n);
	ASSERT_TRUE(now_ns() - t0 < 500000000ull, "stop does not wait out a 10 s period");
out:
	free(s);
}

TEST(test_thread_no_driver)
{
	FILE *err = fmemopen(msg, sizeof(msg), "w");
	struct nvml_opts o = { .library = STANDIN, .period_ms = 10, .err = err };
	struct device_sample *s = calloc(1, sizeof(*s));
	struct nvml *n;

	memset(msg, 0, sizeof(msg));
	setenv("TS_NVML_STUB", "fail=9;" TWO_GPUS, 1);
	n = nvml_start(&o);
	if (ASSERT_OK_PTR(n, "start")) {
		usleep(100000);
		ASSERT_FALSE(nvml_latest(n, s), "no sample, ever");
		nvml_stop(n);
	}
	fclose(err);
	ASSERT_STREQ(msg,
		     "tokenscope: NVML unavailable (nvmlInit: Driver Not Loaded): no GPU "
		     "utilisation or memory\n",
		     "one message, from the thread");
	ASSERT_EQ(s->seq, 0, "nothing copied");
	free(s);
}

/* quiet: the reason kept until asked for, then said once; asked for before the thread knows
 * it (a CUDA library hooked at attach), it is said when the thread finds it out. */
/* A quiet NVML thread (o->quiet) on the stand-in set up by stub, its messages into msg (cleared)
 * through a new *err. */
static struct nvml *start_quiet(struct nvml_opts *o, FILE **err, const char *stub)
{
	memset(msg, 0, sizeof(msg));
	*err = fmemopen(msg, sizeof(msg), "w");
	o->err = *err;
	setenv("TS_NVML_STUB", stub, 1);
	return nvml_start(o);
}

TEST(test_thread_quiet_until_asked)
{
	static const char want[] = "tokenscope: NVML unavailable (nvmlInit: Driver Not Loaded): no "
				   "GPU utilisation or memory\n";
	struct nvml_opts o = { .library = STANDIN, .period_ms = 10, .quiet = true };
	struct nvml *n;
	FILE *err;

	n = start_quiet(&o, &err, "fail=9;" TWO_GPUS);
	if (ASSERT_OK_PTR(n, "start")) {
		usleep(100000);
		fflush(err);
		ASSERT_STREQ(msg, "", "nothing said before it is asked for");
		nvml_say_why(n);
		nvml_say_why(n);
		fflush(err);
		ASSERT_STREQ(msg, want, "said once when asked, twice asked");
		nvml_stop(n);
	}
	fclose(err);

	n = start_quiet(&o, &err, "init_ms=100;fail=9;" TWO_GPUS);
	if (ASSERT_OK_PTR(n, "start")) {
		nvml_say_why(n);
		fflush(err);
		ASSERT_STREQ(msg, "", "asked before nvmlInit returned: nothing yet");
		usleep(300000);
		nvml_stop(n);
	}
	fclose(err);
	ASSERT_STREQ(msg, want, "said by the thread once it failed");

	n = start_quiet(&o, &err, TWO_GPUS);
	if (ASSERT_OK_PTR(n, "start")) {
		usleep(100000);
		nvml_say_why(n);
		nvml_stop(n);
	}
	fclose(err);
	ASSERT_STREQ(msg, "", "a working NVML: nothing to say");
}

static bool keep_4242_77(void *ctx, uint32_t pid)
{
	(void)ctx;
	return pid == 4242 || pid == 77;
}

/* The sample of TWO_GPUS with only pids 4242 and 77 traced. */
static bool sample_two(void)
{
	struct nvml *n = open_with(STANDIN, TWO_GPUS);

	if (!ASSERT_OK_PTR(n, "open"))
		return false;
	nvml_sample(n, &snap);
	nvml_stop(n);
	snap.seq = 7;
	device_sample_keep_procs(&snap, keep_4242_77, NULL);
	return true;
}

TEST(test_keep_procs)
{
	if (!sample_two())
		return;
	if (!ASSERT_EQ(snap.devices[0].nprocs, 2, "4343 is not traced"))
		return;
	ASSERT_EQ(snap.devices[0].procs[0].pid, 4242, "order kept");
	ASSERT_EQ(snap.devices[0].procs[1].pid, 77, "order kept");
	ASSERT_EQ(snap.devices[0].procs[1].mem_bytes, 2 * MIB, "values kept");
}

TEST(test_usage_summary)
{
	struct device_usage *u = calloc(1, sizeof(*u));
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	if (!sample_two())
		goto out;
	f = open_memstream(&text, &len);
	device_usage_print(u, f);
	fflush(f);
	ASSERT_EQ(len, 0, "nothing before a sample");
	device_usage_add(u, &snap);
	/* A second sample: busier, more memory, less power. */
	snap.devices[0].util_pct = 90;
	snap.devices[0].mem_used = 3 * GIB;
	snap.devices[0].power_mw = 150125;
	snap.devices[0].sm_clock_hz = 1020000000;
	snap.devices[0].procs[0].mem_bytes = GIB;
	device_usage_add(u, &snap);
	device_usage_print(u, f);
	fclose(f);
	ASSERT_STREQ(
	    text,
	    "  gpu 0 Stub H200 (GPU-0000-aaaa): 2 samples, utilization mean 67.5% max 90%, "
	    "memory used max 3.00 GiB of 8.00 GiB, SM clock mean 1500 MHz, power mean "
	    "250.1 W max 350.1 W\n"
	    "  gpu 1 Stub B (GPU-1111): 2 samples, utilization n/a, memory n/a, SM clock "
	    "n/a, power n/a\n"
	    "  gpu 0 pid 4242: memory max 1.00 GiB\n"
	    "  gpu 0 pid 77: memory max 2.0 MiB\n",
	    "summary lines");
	free(text);
out:
	free(u);
}

/* Whether text has exactly this line. */
static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; (p = strstr(p, line)); p++)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return true;
	return false;
}

static char *render(struct prom *p)
{
	char *buf = NULL;
	size_t len;

	ASSERT_OK(prom_render(p, &buf, &len), "render");
	return buf;
}

TEST(test_prom_families)
{
	struct prom *p = prom_new(NULL, NULL);
	char *text;

	if (!ASSERT_OK_PTR(p, "prom_new"))
		return;
	text = render(p);
	ASSERT_TRUE(text && !strstr(text, "tokenscope_gpu_samples") &&
			!strstr(text, "tokenscope_gpu_info") && !strstr(text, "tokenscope_gpu_u") &&
			!strstr(text, "tokenscope_gpu_memory") && !strstr(text, "tokenscope_gpu_p"),
		    "no NVML family before a sample");
	free(text);
	if (!sample_two())
		goto out;
	ASSERT_OK(prom_set_gpu_sample(p, &snap), "set");
	text = render(p);
	if (!ASSERT_OK_PTR(text, "render"))
		goto out;
	static const char *const lines[] = {
		"# TYPE tokenscope_gpu_samples_total counter",
		"tokenscope_gpu_samples_total 7",
		"# TYPE tokenscope_gpu_info gauge",
		"tokenscope_gpu_info{gpu=\"0\",uuid=\"GPU-0000-aaaa\",name=\"Stub H200\"} 1",
		"tokenscope_gpu_info{gpu=\"1\",uuid=\"GPU-1111\",name=\"Stub B\"} 1",
		"# TYPE tokenscope_gpu_utilization_ratio gauge",
		"tokenscope_gpu_utilization_ratio{gpu=\"0\",uuid=\"GPU-0000-aaaa\"} 0.45",
		"tokenscope_gpu_memory_used_bytes{gpu=\"0\",uuid=\"GPU-0000-aaaa\"} 1073741824",
		"tokenscope_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-0000-aaaa\"} 8589934592",
		"tokenscope_gpu_sm_clock_hertz{gpu=\"0\",uuid=\"GPU-0000-aaaa\"} 1980000000",
		"tokenscope_gpu_power_watts{gpu=\"0\",uuid=\"GPU-0000-aaaa\"} 350.125",
		"# TYPE tokenscope_gpu_process_memory_bytes gauge",
		"tokenscope_gpu_process_memory_bytes{gpu=\"0\",uuid=\"GPU-0000-aaaa\",pid=\"4242\"}"
		" "
		"537919488",
		"tokenscope_gpu_process_memory_bytes{gpu=\"0\",uuid=\"GPU-0000-aaaa\",pid=\"77\"} "
		"2097152",
	};
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		if (!ASSERT_TRUE(has_line(text, lines[i]), lines[i]))
			break;
	ASSERT_TRUE(!strstr(text, "gpu=\"1\",uuid=\"GPU-1111\"} "), "device 1 has no values");
	ASSERT_TRUE(!strstr(text, "pid=\"4343\""), "untraced process left out");
	ASSERT_TRUE(!strstr(text, "tokenscope_gpu_unlisted"), "nothing over a cap");
	free(text);

	/* Power on no device: no family at all; one 100 % and one 0 %; labels escaped; a cap. */
	snap.devices[0].power_present = false;
	snap.devices[0].util_pct = 100;
	snap.devices[1].util_present = true;
	snap.devices[1].util_pct = 5;
	snprintf(snap.devices[1].name, sizeof(snap.devices[1].name), "Q\"\\\n");
	snap.devices[1].uuid[0] = 0;
	snap.devices[0].procs_dropped = 3;
	ASSERT_OK(prom_set_gpu_sample(p, &snap), "set");
	text = render(p);
	if (!ASSERT_OK_PTR(text, "render"))
		goto out;
	ASSERT_TRUE(!strstr(text, "tokenscope_gpu_power_watts"), "no power family");
	ASSERT_TRUE(has_line(text, "tokenscope_gpu_utilization_ratio{gpu=\"0\","
				   "uuid=\"GPU-0000-aaaa\"} 1"),
		    "100 %");
	ASSERT_TRUE(has_line(text, "tokenscope_gpu_utilization_ratio{gpu=\"1\"} 0.05"),
		    "5 %, no uuid label when there is none");
	ASSERT_TRUE(has_line(text, "tokenscope_gpu_info{gpu=\"1\",name=\"Q\\\"\\\\\\n\"} 1"),
		    "name escaped");
	ASSERT_TRUE(has_line(text, "tokenscope_gpu_unlisted{what=\"processes\"} 3"), "cap");
	ASSERT_TRUE(has_line(text, "tokenscope_gpu_unlisted{what=\"devices\"} 0"), "cap");
	free(text);
out:
	prom_free(p);
}

TEST(test_timeline_counters)
{
	char path[] = "/tmp/test_nvml_tl.XXXXXX";
	struct timeline *t = calloc(1, sizeof(*t));
	const uint64_t origin = 5000000000123ull;
	cJSON *root = NULL, *e;
	char buf[65536];
	int fd = mkstemp(path), nutil = 0, nmem = 0, nname = 0;
	ssize_t k;
	FILE *fp;

	if (fd >= 0)
		close(fd);
	if (!sample_two() || !ASSERT_OK(timeline_open(t, path), "open"))
		goto out;
	timeline_set_origin(t, origin);
	snap.devices[0].mono_ns = origin + 1500000; /* 1500 us */
	snap.devices[1].mono_ns = origin + 1500001;
	timeline_gpu_sample(t, &snap);
	snap.devices[0].mono_ns = origin + 1001500000;
	snap.devices[0].util_pct = 0;
	timeline_gpu_sample(t, &snap);
	ASSERT_OK(timeline_close(t), "close");
	fp = fopen(path, "r");
	k = fp ? (ssize_t)fread(buf, 1, sizeof(buf) - 1, fp) : -1;
	if (fp)
		fclose(fp);
	if (!ASSERT_TRUE(k > 0, "read"))
		goto out;
	buf[k] = 0;
	root = cJSON_Parse(buf);
	if (!ASSERT_OK_PTR(root, "JSON"))
		goto out;
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents"))
	{
		const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
		const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring;
		double pid = cJSON_GetObjectItem(e, "pid")->valuedouble;
		double ts = cJSON_GetObjectItem(e, "ts")->valuedouble;
		const cJSON *args = cJSON_GetObjectItem(e, "args");

		if (!strcmp(ph, "M") && pid == TIMELINE_NVML_PID && !strcmp(name, "process_name")) {
			nname++;
			ASSERT_STREQ(cJSON_GetObjectItem(args, "name")->valuestring, "GPUs (NVML)",
				     "counter process named");
		}
		if (strcmp(ph, "C"))
			continue;
		ASSERT_EQ(pid, TIMELINE_NVML_PID, "counter pid");
		if (!strcmp(name, "GPU 0 utilization")) {
			double v = cJSON_GetObjectItem(args, "percent")->valuedouble;

			ASSERT_TRUE((nutil == 0 && ts == 1500 && v == 45) ||
					(nutil == 1 && ts == 1001500 && v == 0),
				    "utilisation counter: time and value");
			nutil++;
		} else if (!strcmp(name, "GPU 0 memory used")) {
			ASSERT_EQ(cJSON_GetObjectItem(args, "bytes")->valuedouble, GIB, "memory");
			nmem++;
		} else {
			ASSERT_STREQ(name, "(no other counter)", "device 1 has neither value");
		}
	}
	ASSERT_EQ(nutil, 2, "a utilisation event per sample");
	ASSERT_EQ(nmem, 2, "a memory event per sample");
	ASSERT_EQ(nname, 1, "the process named once");
	ASSERT_TRUE(strstr(buf, "\"ts\":1500.000,") != NULL, "microseconds, ns exact");
out:
	cJSON_Delete(root);
	free(t);
	unlink(path);
}

int main(void)
{
	return check_run_all();
}
