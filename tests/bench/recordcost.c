// SPDX-License-Identifier: MIT
/*
 * recordcost: the CPU cost of the CUPTI injection library's record reading, per record kind
 * and per buffer, for make bench (section 8). It runs the library's own reader
 * (cupti/records.c) and run maker (cupti/runs.c) on records laid out as CUPTI writes them
 * (the toolkit's structs), with an emit callback that only counts: what the library spends
 * between CUPTI handing a buffer over and the probe call (the probe's own cost, a uprobe hit
 * with tokenscope attached, is section 4's and bpf_stats' figure).
 *
 *   recordcost [ROUNDS]     prints one line per figure: "name=ns"
 *
 * Kinds: an eager kernel with its launch's API record (what a prefill writes per kernel), a
 * graph replay with its API record (a decode step), a copy, an API record alone, an overhead
 * record; then a decode step's buffer (a graph replay, a copy and their two API records),
 * flushed: the cost per buffer CUPTI hands over.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h>

#include "records.h"

static unsigned long long emitted;

static void count(void *ctx, const struct ts_dev_run *runs, uint32_t n,
		  const struct ts_devtime_stats *stats)
{
	(void)ctx;
	(void)runs;
	(void)stats;
	emitted += n;
}

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static CUpti_ActivityAPI api(uint32_t corr, uint64_t t)
{
	CUpti_ActivityAPI a;

	memset(&a, 0, sizeof(a));
	a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
	a.start = t;
	a.end = t + 2000;
	a.correlationId = corr;
	return a;
}

static CUpti_ActivityKernel10 kernel(uint32_t corr, uint64_t t)
{
	CUpti_ActivityKernel10 k;

	memset(&k, 0, sizeof(k));
	k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	k.start = t;
	k.end = t + 20000;
	k.streamId = 7;
	k.correlationId = corr;
	return k;
}

static CUpti_ActivityGraphTrace2 graph(uint32_t corr, uint64_t t)
{
	CUpti_ActivityGraphTrace2 g;

	memset(&g, 0, sizeof(g));
	g.kind = CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
	g.start = t;
	g.end = t + 500000;
	g.streamId = 7;
	g.correlationId = corr;
	return g;
}

static CUpti_ActivityMemcpy6 copy(uint32_t corr, uint64_t t)
{
	CUpti_ActivityMemcpy6 m;

	memset(&m, 0, sizeof(m));
	m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
	m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
	m.start = t;
	m.end = t + 10000;
	m.streamId = 7;
	m.correlationId = corr;
	return m;
}

static CUpti_ActivityOverhead3 overhead(uint64_t t)
{
	CUpti_ActivityOverhead3 o;

	memset(&o, 0, sizeof(o));
	o.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
	o.overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
	o.start = t;
	o.end = t + 1000;
	return o;
}

#define READ(r, rec) records_read(r, (const CUpti_Activity *)&(rec), 0)

/* ns per item of kind (0..5) over n items, the runs flushed every 32 items as a buffer of a
 * few KiB would be. */
static double measure(struct runs *r, int kind, long n)
{
	uint64_t t = 1000000000ull;
	double t0 = now_ns();

	for (long i = 0; i < n; i++, t += 1000000) {
		uint32_t c = (uint32_t)i + 1;
		CUpti_ActivityAPI a = api(c, t - 5000);

		switch (kind) {
		case 0: {
			CUpti_ActivityKernel10 k = kernel(c, t);

			READ(r, a);
			READ(r, k);
			break;
		}
		case 1: {
			CUpti_ActivityGraphTrace2 g = graph(c, t);

			READ(r, a);
			READ(r, g);
			break;
		}
		case 2: {
			CUpti_ActivityMemcpy6 m = copy(c, t);

			READ(r, m);
			break;
		}
		case 3:
			READ(r, a);
			break;
		case 4: {
			CUpti_ActivityOverhead3 o = overhead(t);

			READ(r, o);
			break;
		}
		case 5: {
			/* A decode step's buffer: two API records, a graph replay, a copy. */
			CUpti_ActivityGraphTrace2 g = graph(2 * c, t);
			CUpti_ActivityAPI a2 = api(2 * c + 1, t + 500000);
			CUpti_ActivityMemcpy6 m = copy(2 * c + 1, t + 501000);
			CUpti_ActivityAPI a1 = api(2 * c, t - 5000);

			READ(r, a1);
			READ(r, g);
			READ(r, a2);
			READ(r, m);
			runs_flush(r);
			continue;
		}
		}
		if (i % 32 == 31)
			runs_flush(r);
	}
	runs_flush(r);
	return (now_ns() - t0) / n;
}

int main(int argc, char **argv)
{
	static const char *const names[] = {
		"kernel_with_launch_ns", "graph_with_launch_ns", "copy_ns",
		"api_alone_ns",		 "overhead_ns",		 "decode_buffer_ns"
	};
	long rounds = argc > 1 ? atol(argv[1]) : 5, n = 200000;
	struct runs *r = malloc(sizeof(*r));

	if (!r || rounds < 1)
		return 2;
	for (int k = 0; k < 6; k++) {
		double best = 1e18;

		for (long i = 0; i < rounds; i++) {
			double v;

			runs_init(r, count, NULL);
			v = measure(r, k, n);
			if (v < best)
				best = v;
		}
		printf("%s=%.1f\n", names[k], best);
	}
	fprintf(stderr, "recordcost: %llu runs emitted\n", emitted);
	free(r);
	return 0;
}
