// SPDX-License-Identifier: MIT
/*
 * cuptistub: a stand-in for CUPTI's activity API, so that libtokenscope_cupti.so, its USDT
 * probes, the BPF program on them and the pipeline are tested end to end without a GPU.
 *
 *   make .output/standin/libcupti.so.13   (named like CUPTI, so the injection library's
 *                                           dlopen finds it through LD_LIBRARY_PATH)
 *
 * It implements the calls the injection library makes, with CUPTI's types and record layouts
 * (the toolkit's headers), and one call of its own: the stand-in runtime (tests/cudastub.c),
 * which models a device, reports each operation with tsstub_cupti_op, and this turns it into
 * the records CUPTI would write: an API record for the launch call when that call's API
 * records are enabled, and a kernel, graph-trace or memcpy record when that kind is enabled.
 * Records go into buffers obtained from the client's request callback, which are completed
 * when full, every flush period (a thread), and on cuptiActivityFlushAll.
 *
 * Times: every time handed in is CLOCK_MONOTONIC. With a timestamp callback registered, that is
 * what the records hold (the callback answers CLOCK_MONOTONIC too); without one, as CUPTI
 * does on Linux, the records hold CLOCK_REALTIME times, so the client must convert.
 *
 * With CUPTI_ACTIVITY_KIND_OVERHEAD enabled, each cuptiActivityFlushAll that hands a buffer over
 * writes a buffer-flush overhead record of STUB_FLUSH_OVERHEAD_NS first.
 *
 * Environment: TS_CUPTI_STUB_NO_TSCB=1 refuses the timestamp callback (the client's offset
 * method); TS_CUPTI_STUB_NO_BUFFER=1 makes every buffer request fail as if the client had none
 * to give (records are dropped and counted).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h>

#define API __attribute__((visibility("default")))

/* The length of the overhead record written at each flush that hands a buffer over, while
 * CUPTI_ACTIVITY_KIND_OVERHEAD is enabled (a figure the tests check the sums against). */
#define STUB_FLUSH_OVERHEAD_NS 5000

/* Stand-in operation kinds (tsstub_cupti_op). */
enum { STUB_KERNEL = 0, STUB_GRAPH = 1, STUB_MEMCPY = 2 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUpti_BuffersCallbackRequestFunc req_fn;
static CUpti_BuffersCallbackCompleteFunc done_fn;
static CUpti_TimestampCallbackFunc ts_fn;
static bool kinds[CUPTI_ACTIVITY_KIND_COUNT];
static bool runtime_api[1024], driver_api[1024];
static uint8_t *buf;
static size_t buf_size, buf_used;
static size_t dropped;
static uint32_t next_correlation = 1;
static uint32_t flush_ms;
static bool flusher;

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A CLOCK_MONOTONIC time as the records hold it: without the callback, on CUPTI's own clock,
 * CLOCK_REALTIME, whose distance from CLOCK_MONOTONIC is taken once (as one clock would be). */
static uint64_t rec_time(uint64_t mono)
{
	static uint64_t offset;

	if (ts_fn)
		return mono;
	if (!offset)
		offset = clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC);
	return mono + offset;
}

static size_t record_size(CUpti_ActivityKind k)
{
	switch (k) {
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER:
		return sizeof(CUpti_ActivityAPI);
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		return sizeof(CUpti_ActivityKernel10);
	case CUPTI_ACTIVITY_KIND_GRAPH_TRACE:
		return sizeof(CUpti_ActivityGraphTrace2);
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		return sizeof(CUpti_ActivityMemcpy6);
	case CUPTI_ACTIVITY_KIND_OVERHEAD:
		return sizeof(CUpti_ActivityOverhead3);
	default:
		return 0;
	}
}

static size_t aligned(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* Hands the current buffer to the client. Called with lock held; drops it around the call, as
 * the client's callback may call back into CUPTI. */
static void complete(void)
{
	uint8_t *b = buf;
	size_t size = buf_size, used = buf_used;

	if (!b)
		return;
	buf = NULL;
	buf_used = buf_size = 0;
	pthread_mutex_unlock(&lock);
	done_fn(NULL, 0, b, size, used);
	pthread_mutex_lock(&lock);
}

/* Room for a record of n bytes, or NULL (dropped). Called with lock held. */
static void *room(size_t n)
{
	size_t max = 0;
	void *r;

	if (buf && buf_used + aligned(n) > buf_size)
		complete();
	if (!buf && req_fn) {
		const char *no = getenv("TS_CUPTI_STUB_NO_BUFFER");

		if (!(no && *no == '1'))
			req_fn(&buf, &buf_size, &max);
		if (!buf || buf_size < aligned(n)) {
			buf = NULL;
			dropped++;
			return NULL;
		}
		buf_used = 0;
	}
	if (!buf) {
		dropped++;
		return NULL;
	}
	r = buf + buf_used;
	memset(r, 0, aligned(n));
	buf_used += aligned(n);
	return r;
}

/* An operation of the stand-in device: called by the stand-in runtime with the launch call's
 * host interval, its callback id (runtime if driver is 0), and the operation's device
 * interval, all CLOCK_MONOTONIC. copy_kind is a CUpti_ActivityMemcpyKind. */
API void tsstub_cupti_op(int kind, int driver, uint32_t cbid, uint64_t api_start, uint64_t api_end,
			 uint64_t dev_start, uint64_t dev_end, uint32_t stream, int copy_kind,
			 uint64_t bytes)
{
	uint32_t corr;

	pthread_mutex_lock(&lock);
	corr = next_correlation++;
	if (cbid < 1024 && (driver ? driver_api[cbid] : runtime_api[cbid])) {
		CUpti_ActivityAPI *a = room(sizeof(*a));

		if (a) {
			a->kind = driver ? CUPTI_ACTIVITY_KIND_DRIVER : CUPTI_ACTIVITY_KIND_RUNTIME;
			a->cbid = cbid;
			a->start = rec_time(api_start);
			a->end = rec_time(api_end);
			a->correlationId = corr;
		}
	}
	if (kind == STUB_KERNEL && kinds[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL]) {
		CUpti_ActivityKernel10 *k = room(sizeof(*k));

		if (k) {
			k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
			k->start = rec_time(dev_start);
			k->end = rec_time(dev_end);
			k->streamId = stream;
			k->correlationId = corr;
		}
	} else if (kind == STUB_GRAPH && kinds[CUPTI_ACTIVITY_KIND_GRAPH_TRACE]) {
		CUpti_ActivityGraphTrace2 *g = room(sizeof(*g));

		if (g) {
			g->kind = CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
			g->start = rec_time(dev_start);
			g->end = rec_time(dev_end);
			g->streamId = stream;
			g->correlationId = corr;
		}
	} else if (kind == STUB_MEMCPY && kinds[CUPTI_ACTIVITY_KIND_MEMCPY]) {
		CUpti_ActivityMemcpy6 *m = room(sizeof(*m));

		if (m) {
			m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
			m->copyKind = (uint8_t)copy_kind;
			m->bytes = bytes;
			m->start = rec_time(dev_start);
			m->end = rec_time(dev_end);
			m->streamId = stream;
			m->correlationId = corr;
		}
	}
	pthread_mutex_unlock(&lock);
}

static void *flush_thread(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec p;

		pthread_mutex_lock(&lock);
		p.tv_sec = flush_ms / 1000;
		p.tv_nsec = (long)(flush_ms % 1000) * 1000000L;
		if (buf_used)
			complete();
		pthread_mutex_unlock(&lock);
		nanosleep(&p, NULL);
	}
	return NULL;
}

API CUptiResult cuptiGetVersion(uint32_t *version)
{
	*version = CUPTI_API_VERSION;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiGetResultString(CUptiResult result, const char **str)
{
	*str = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (stand-in)";
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiGetTimestamp(uint64_t *timestamp)
{
	*timestamp = rec_time(clock_ns(CLOCK_MONOTONIC));
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
					       CUpti_BuffersCallbackCompleteFunc done)
{
	if (!req || !done)
		return CUPTI_ERROR_INVALID_PARAMETER;
	req_fn = req;
	done_fn = done;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn)
{
	const char *no = getenv("TS_CUPTI_STUB_NO_TSCB");

	if (no && *no == '1')
		return CUPTI_ERROR_NOT_SUPPORTED;
	if (!fn)
		return CUPTI_ERROR_INVALID_PARAMETER;
	ts_fn = fn;
	return CUPTI_SUCCESS;
}

static CUptiResult set_kind(CUpti_ActivityKind k, bool on)
{
	if ((unsigned)k >= CUPTI_ACTIVITY_KIND_COUNT)
		return CUPTI_ERROR_INVALID_KIND;
	pthread_mutex_lock(&lock);
	kinds[k] = on;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityEnable(CUpti_ActivityKind k)
{
	return set_kind(k, true);
}

API CUptiResult cuptiActivityDisable(CUpti_ActivityKind k)
{
	return set_kind(k, false);
}

API CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable)
{
	if (cbid >= 1024)
		return CUPTI_ERROR_INVALID_PARAMETER;
	runtime_api[cbid] = enable;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable)
{
	if (cbid >= 1024)
		return CUPTI_ERROR_INVALID_PARAMETER;
	driver_api[cbid] = enable;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
	(void)flag;
	pthread_mutex_lock(&lock);
	if (buf_used && kinds[CUPTI_ACTIVITY_KIND_OVERHEAD]) {
		/* CUPTI's record of its own flush: here always STUB_FLUSH_OVERHEAD_NS long. */
		CUpti_ActivityOverhead3 *o = room(sizeof(*o));

		if (o) {
			o->kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
			o->overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
			o->start = rec_time(clock_ns(CLOCK_MONOTONIC));
			o->end = o->start + STUB_FLUSH_OVERHEAD_NS;
		}
	}
	complete();
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityFlushPeriod(uint32_t ms)
{
	pthread_t th;

	pthread_mutex_lock(&lock);
	flush_ms = ms ? ms : 1000;
	if (!flusher && pthread_create(&th, NULL, flush_thread, NULL) == 0) {
		pthread_detach(th);
		flusher = true;
	}
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record)
{
	uint8_t *next = buffer;

	if (*record) {
		size_t n = record_size((*record)->kind);

		if (!n)
			return CUPTI_ERROR_INVALID_KIND;
		next = (uint8_t *)*record + aligned(n);
	}
	if (next + sizeof(CUpti_Activity) > buffer + valid)
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	*record = (CUpti_Activity *)next;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *n)
{
	(void)ctx;
	(void)stream;
	pthread_mutex_lock(&lock);
	*n = dropped;
	dropped = 0;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}
