// SPDX-License-Identifier: MIT
/*
 * libtokenscope_cupti.so: loaded by the CUDA driver into a process started with
 * CUDA_INJECTION64_PATH naming it, which calls InitializeInjection. It gives tokenscope the
 * device's own timing: CUPTI activity records (graph-level records for graph replays,
 * concurrent-kernel records for eager kernels, copies, and the API records of launches for
 * their launch times), made into runs (cupti/runs.h) and handed over through the USDT probe
 * that tokenscope's BPF program attaches to: tokenscope:runs (eager kernels sampled in windows
 * of a duty cycle), tokenscope:all (every step) or tokenscope:kernels (one run per operation).
 *
 * What it costs a server nobody traces: a thread that wakes ten times a second to read three
 * probe semaphores. Activity collection is enabled only while a tracer is attached to a probe
 * (the kernel counts attached uprobes in the semaphores), and disabled again when it leaves.
 *
 * What it must never do: crash or stall the server. CUPTI is opened with dlopen (a process
 * without it runs on, untraced); every CUPTI call's failure turns collection off with one
 * message; the buffers come from a fixed pool, and a request beyond it is refused (CUPTI then
 * drops records, which it counts and tokenscope shows); nothing here blocks a CUDA thread.
 *
 * Environment: TOKENSCOPE_CUPTI_PATH names the CUPTI library when the loader cannot find it;
 * TOKENSCOPE_CUPTI_QUIET=1 silences the messages; TOKENSCOPE_CUPTI_SAMPLE=ON/PERIOD (in
 * milliseconds) sets the sampled mode's duty cycle.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include <cupti.h>

#include "records.h"

#define EXPORT __attribute__((visibility("default")))

/* The pool: POOL_BUFFERS of POOL_BYTES. CUPTI hands a buffer back only once every record in
 * it is complete, so a small buffer reaches the tracer sooner: a decode step writes some 4 KiB
 * of records. (Sizes chosen without a GPU; the GPU check measures the delay.) */
#define POOL_BUFFERS 16
#define POOL_BYTES (128u << 10)
/* How often the semaphores are read and, while a tracer is attached, CUPTI is flushed. */
#define POLL_MS TS_DEVTIME_FLUSH_MS
/* The timestamp offset's refresh period (TS_DEVTIME_CLOCK_OFFSET only). */
#define OFFSET_PERIOD_NS 1000000000ull

/* Incremented by the kernel for each tracer attached to the probe. */
__extension__ unsigned short tokenscope_runs_semaphore __attribute__((used))
__attribute__((section(".probes")));
__extension__ unsigned short tokenscope_all_semaphore __attribute__((used))
__attribute__((section(".probes")));
__extension__ unsigned short tokenscope_kernels_semaphore __attribute__((used))
__attribute__((section(".probes")));

/* The CUPTI functions used, found with dlsym. */
static struct {
	__typeof__(cuptiGetVersion) *get_version;
	__typeof__(cuptiGetResultString) *result_string;
	__typeof__(cuptiActivityRegisterCallbacks) *register_callbacks;
	__typeof__(cuptiActivityRegisterTimestampCallback) *register_timestamp;
	__typeof__(cuptiActivityEnable) *enable;
	__typeof__(cuptiActivityDisable) *disable;
	__typeof__(cuptiActivityEnableRuntimeApi) *enable_runtime_api;
	__typeof__(cuptiActivityEnableDriverApi) *enable_driver_api;
	__typeof__(cuptiActivityFlushAll) *flush_all;
	__typeof__(cuptiActivityFlushPeriod) *flush_period;
	__typeof__(cuptiActivityGetNextRecord) *next_record;
	__typeof__(cuptiActivityGetNumDroppedRecords) *dropped;
	__typeof__(cuptiGetTimestamp) *timestamp;
} cu;

static struct {
	uint8_t *buf[POOL_BUFFERS];
	atomic_uint busy; /* a bit per buffer */
} pool;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* runs, offset, the window */
static struct runs runs;
static int64_t offset_ns;
static uint64_t offset_at_ns;
static atomic_ullong pool_empty;
static bool quiet, failed;
static uint32_t clock_method;
static uint64_t clock_err_ns;
/* What is collected: 0 (nothing) or TS_DEVTIME_MODE_*; whether eager kernels are now (the
 * window), and the sampled mode's duty cycle and the next change of the window. */
static uint32_t mode;
static bool eager_on;
static uint32_t sample_on_ms = TS_DEVTIME_SAMPLE_ON_MS,
		sample_period_ms = TS_DEVTIME_SAMPLE_PERIOD_MS;
static uint64_t window_next_ns;
static uint64_t sample_on_ns, sample_off_ns, windows;

static void say(const char *fmt, const char *what)
{
	if (!quiet)
		fprintf(stderr, fmt, what);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CUPTI's timestamp callback: CUPTI maps device timestamps onto the host clock it is given. */
static uint64_t CUPTIAPI timestamp_cb(void)
{
	return mono_ns();
}

/* TS_DEVTIME_CLOCK_OFFSET: CLOCK_MONOTONIC minus CUPTI's clock, from the read of CUPTI's clock
 * between two reads of CLOCK_MONOTONIC; the error is at most half the bracket. Called with
 * lock held. */
static void measure_offset(void)
{
	uint64_t best = UINT64_MAX, c, t0, t1;

	for (int i = 0; i < 5; i++) {
		t0 = mono_ns();
		if (cu.timestamp(&c) != CUPTI_SUCCESS)
			return;
		t1 = mono_ns();
		if (t1 - t0 < best) {
			best = t1 - t0;
			offset_ns = (int64_t)(t0 + (t1 - t0) / 2) - (int64_t)c;
		}
	}
	clock_err_ns = best / 2;
	offset_at_ns = t1;
}

static bool semaphore(const unsigned short *s)
{
	return __atomic_load_n(s, __ATOMIC_RELAXED) != 0;
}

/* The counters kept outside runs, into the stats handed over. Called with lock held. */
static void stats_refresh(struct ts_devtime_stats *s)
{
	s->pool_empty = atomic_load(&pool_empty);
	s->clock = clock_method;
	s->clock_err_ns = clock_err_ns;
	s->mode = mode;
	s->sample_on_ms = sample_on_ms;
	s->sample_period_ms = sample_period_ms;
	s->sample_on_ns = sample_on_ns;
	s->sample_off_ns = sample_off_ns;
	s->windows = windows;
}

/* Every probe a tracer is attached to, with n runs (0: a heartbeat): tracers of different
 * modes get the same runs, of the richest mode asked for (stats.mode says which); false
 * when no tracer listens any more. Called with lock held. */
static bool fire(const struct ts_dev_run *r, uint32_t n, struct ts_devtime_stats *s)
{
	bool any = false;

	if (semaphore(&tokenscope_kernels_semaphore)) {
		STAP_PROBE4(tokenscope, kernels, TS_DEVTIME_ABI, r, n, s);
		any = true;
	}
	if (semaphore(&tokenscope_all_semaphore)) {
		STAP_PROBE4(tokenscope, all, TS_DEVTIME_ABI, r, n, s);
		any = true;
	}
	if (semaphore(&tokenscope_runs_semaphore)) {
		STAP_PROBE4(tokenscope, runs, TS_DEVTIME_ABI, r, n, s);
		any = true;
	}
	return any;
}

/* Called by runs with each batch: sent if a tracer listens, counted otherwise. */
static void emit(void *ctx, const struct ts_dev_run *r, uint32_t n,
		 const struct ts_devtime_stats *st)
{
	struct ts_devtime_stats *s = ctx; /* st, writable */

	(void)st;
	stats_refresh(s);
	if (!fire(r, n, s))
		s->runs_unsent += n;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	unsigned busy = atomic_load(&pool.busy);

	*max_records = 0;
	for (;;) {
		int i = __builtin_ffs((int)~busy) - 1;

		if (i < 0 || i >= POOL_BUFFERS) {
			atomic_fetch_add(&pool_empty, 1);
			*buffer = NULL;
			*size = 0;
			return;
		}
		if (atomic_compare_exchange_weak(&pool.busy, &busy, busy | 1u << i)) {
			*buffer = pool.buf[i];
			*size = POOL_BYTES;
			return;
		}
	}
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
				      size_t valid)
{
	CUpti_Activity *rec = NULL;
	size_t dropped = 0;
	uint64_t t0;
	int i;

	(void)size;
	pthread_mutex_lock(&lock);
	t0 = mono_ns();
	if (clock_method == TS_DEVTIME_CLOCK_OFFSET && t0 - offset_at_ns > OFFSET_PERIOD_NS)
		measure_offset();
	while (valid && cu.next_record(buffer, valid, &rec) == CUPTI_SUCCESS)
		records_read(&runs, rec, offset_ns);
	if (cu.dropped(ctx, stream, &dropped) == CUPTI_SUCCESS)
		runs.stats.dropped += dropped;
	runs.stats.buffers++;
	runs_flush(&runs);
	runs.stats.read_ns += mono_ns() - t0; /* the probe calls of the flush included */
	pthread_mutex_unlock(&lock);
	for (i = 0; i < POOL_BUFFERS; i++)
		if (pool.buf[i] == buffer)
			atomic_fetch_and(&pool.busy, ~(1u << i));
}

/* What is collected whenever a tracer is attached: graph replays and copies with the API
 * records of their calls (launch times), and CUPTI's own overhead. */
static const CUpti_CallbackId runtime_always[] = {
	CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
	CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
	CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
};
static const CUpti_CallbackId driver_always[] = {
	CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
	CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};
static const CUpti_ActivityKind kinds_always[] = {
	CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
	CUPTI_ACTIVITY_KIND_MEMCPY,
};
/* CUPTI's overhead records, besides, when CUPTI writes the record version records.c reads
 * (CUPTI 13 and later), and never at the price of the rest: a refusal leaves them off. */
#define OVERHEAD_MIN_VERSION 130000
static bool overhead_on;
static uint32_t cupti_version;
/* And eager kernels with their launch calls: in every step (modes all and kernels), or in the
 * windows of the sampled mode. */
static const CUpti_CallbackId runtime_eager[] = {
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
};
static const CUpti_CallbackId driver_eager[] = {
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
};
static const CUpti_ActivityKind kinds_eager[] = {
	CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static bool check(CUptiResult r, const char *what)
{
	const char *s = "?";

	if (r == CUPTI_SUCCESS)
		return true;
	if (cu.result_string)
		cu.result_string(r, &s);
	if (!quiet)
		fprintf(stderr, "tokenscope-cupti: %s failed (%s): no device times\n", what, s);
	failed = true;
	return false;
}

/* Turns a set of activity kinds and API records on or off; false once a CUPTI call failed
 * (collection stays off). Turning off cannot fail the library. */
static bool set_kinds(const CUpti_ActivityKind *kinds, size_t nk, const CUpti_CallbackId *rt,
		      size_t nrt, const CUpti_CallbackId *drv, size_t ndrv, bool on)
{
	size_t i;

	if (!on) {
		for (i = 0; i < nk; i++)
			cu.disable(kinds[i]);
		for (i = 0; i < nrt; i++)
			cu.enable_runtime_api(rt[i], 0);
		for (i = 0; i < ndrv; i++)
			cu.enable_driver_api(drv[i], 0);
		return true;
	}
	/* The launches' API records first: a kernel recorded has its launch time. */
	for (i = 0; i < nrt; i++)
		if (!check(cu.enable_runtime_api(rt[i], 1), "cuptiActivityEnableRuntimeApi"))
			return false;
	for (i = 0; i < ndrv; i++)
		if (!check(cu.enable_driver_api(drv[i], 1), "cuptiActivityEnableDriverApi"))
			return false;
	for (i = 0; i < nk; i++)
		if (!check(cu.enable(kinds[i]), "cuptiActivityEnable"))
			return false;
	return true;
}

static bool set_eager(bool on)
{
	if (on == eager_on)
		return true;
	if (!on) {
		/* Before collection goes off: a kernel launched before this time is recorded. */
		pthread_mutex_lock(&lock);
		sample_off_ns = mono_ns();
		pthread_mutex_unlock(&lock);
	}
	if (!set_kinds(kinds_eager, N(kinds_eager), runtime_eager, N(runtime_eager), driver_eager,
		       N(driver_eager), on))
		return false;
	eager_on = on;
	if (on) {
		/* After collection is on: a kernel launched after this time is recorded. */
		pthread_mutex_lock(&lock);
		sample_on_ns = mono_ns();
		windows++;
		pthread_mutex_unlock(&lock);
	}
	return true;
}

/* Collection off, every kind the library turns on, and what was collected handed over to a
 * tracer that may still be there: when the last tracer leaves, and after a CUPTI call failed
 * (nothing stays half on). */
static void all_off(void)
{
	set_kinds(kinds_eager, N(kinds_eager), runtime_eager, N(runtime_eager), driver_eager,
		  N(driver_eager), false);
	set_kinds(kinds_always, N(kinds_always), runtime_always, N(runtime_always), driver_always,
		  N(driver_always), false);
	if (overhead_on)
		cu.disable(CUPTI_ACTIVITY_KIND_OVERHEAD);
	overhead_on = eager_on = false;
	cu.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

/* Moves collection to what the attached probes ask for (want: TS_DEVTIME_MODE_* or 0) and, in
 * the sampled mode, opens or closes the window at its time; false once a CUPTI call failed
 * (then everything is off). The poll thread's next heartbeat carries the change. */
static bool set_mode(uint32_t want, uint64_t now)
{
	bool eager = want != 0;

	if (want && !mode) {
		if (!set_kinds(kinds_always, N(kinds_always), runtime_always, N(runtime_always),
			       driver_always, N(driver_always), true))
			goto fail;
		overhead_on = cupti_version >= OVERHEAD_MIN_VERSION &&
			      cu.enable(CUPTI_ACTIVITY_KIND_OVERHEAD) == CUPTI_SUCCESS;
	}
	if (want == TS_DEVTIME_MODE_SAMPLED) {
		eager = eager_on;
		if (mode != TS_DEVTIME_MODE_SAMPLED || now >= window_next_ns) {
			/* A window opens at once when a tracer comes, then every period. */
			eager = mode != TS_DEVTIME_MODE_SAMPLED || !eager_on ||
				sample_on_ms == sample_period_ms;
			window_next_ns = now + (uint64_t)(eager ? sample_on_ms
								: sample_period_ms - sample_on_ms) *
						   1000000ull;
		}
	}
	if (eager != eager_on && !set_eager(eager))
		goto fail;
	if (!want && mode)
		all_off();
	pthread_mutex_lock(&lock);
	if (want != mode) {
		if (want != TS_DEVTIME_MODE_SAMPLED) {
			sample_off_ns = 0;
			if (want && !sample_on_ns)
				sample_on_ns = mono_ns();
		}
		if (!want) {
			sample_on_ns = 0;
			windows = 0;
		}
	}
	mode = want;
	pthread_mutex_unlock(&lock);
	return true;
fail:
	all_off();
	pthread_mutex_lock(&lock);
	mode = 0;
	pthread_mutex_unlock(&lock);
	return false;
}

/* Hands over every completed buffer, then says so: the probe with no runs, and the time the
 * flush began in stats.flush_ns. */
static void heartbeat(void)
{
	uint64_t t = mono_ns();
	size_t dropped = 0;

	cu.flush_all(0);
	pthread_mutex_lock(&lock);
	/* Records dropped for want of a buffer never reach a completion callback: the global
	 * count is read here. */
	if (cu.dropped(NULL, 0, &dropped) == CUPTI_SUCCESS)
		runs.stats.dropped += dropped;
	runs.stats.flush_ns = t;
	stats_refresh(&runs.stats);
	fire(runs.batch, 0, &runs.stats);
	pthread_mutex_unlock(&lock);
}

/* The mode the attached probes ask for: TS_DEVTIME_MODE_*, or 0 when no tracer is attached. */
static uint32_t wanted(void)
{
	if (semaphore(&tokenscope_kernels_semaphore))
		return TS_DEVTIME_MODE_KERNELS;
	if (semaphore(&tokenscope_all_semaphore))
		return TS_DEVTIME_MODE_ALL;
	if (semaphore(&tokenscope_runs_semaphore))
		return TS_DEVTIME_MODE_SAMPLED;
	return 0;
}

static void *poll_thread(void *arg)
{
	const struct timespec period = { 0, POLL_MS * 1000000L };

	(void)arg;
	while (!failed) {
		uint32_t want = wanted();

		if (!set_mode(want, mono_ns()))
			break;
		if (mode && (want == TS_DEVTIME_MODE_KERNELS) != runs.single) {
			pthread_mutex_lock(&lock);
			runs_flush(&runs);
			runs.single = want == TS_DEVTIME_MODE_KERNELS;
			pthread_mutex_unlock(&lock);
		}
		if (mode)
			heartbeat();
		nanosleep(&period, NULL);
	}
	return NULL;
}

/* TOKENSCOPE_CUPTI_SAMPLE=ON/PERIOD in milliseconds: 1 <= ON <= PERIOD <= one hour. */
static void parse_sample(const char *v)
{
	unsigned long on, period;
	char *end;

	if (!v || !*v)
		return;
	on = strtoul(v, &end, 10);
	if (*end == '/') {
		period = strtoul(end + 1, &end, 10);
		if (!*end && on >= 1 && on <= period && period <= 3600000ul) {
			sample_on_ms = (uint32_t)on;
			sample_period_ms = (uint32_t)period;
			return;
		}
	}
	say("tokenscope-cupti: TOKENSCOPE_CUPTI_SAMPLE=%s is not ON/PERIOD in milliseconds "
	    "(1 <= ON <= PERIOD <= 3600000): the default duty cycle\n",
	    v);
}

#define SYM(field, name)                                                                   \
	do {                                                                               \
		*(void **)&cu.field = dlsym(h, name);                                      \
		if (!cu.field) {                                                           \
			say("tokenscope-cupti: CUPTI has no %s: no device times\n", name); \
			return false;                                                      \
		}                                                                          \
	} while (0)

static bool open_cupti(void)
{
	static const char *const names[] = { "libcupti.so.13", "libcupti.so.12", "libcupti.so" };
	const char *path = getenv("TOKENSCOPE_CUPTI_PATH");
	void *h = NULL;

	if (path && *path)
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	for (size_t i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		say("tokenscope-cupti: %s: no device times (set TOKENSCOPE_CUPTI_PATH to "
		    "libcupti.so)\n",
		    dlerror());
		return false;
	}
	SYM(get_version, "cuptiGetVersion");
	SYM(result_string, "cuptiGetResultString");
	SYM(register_callbacks, "cuptiActivityRegisterCallbacks");
	SYM(enable, "cuptiActivityEnable");
	SYM(disable, "cuptiActivityDisable");
	SYM(enable_runtime_api, "cuptiActivityEnableRuntimeApi");
	SYM(enable_driver_api, "cuptiActivityEnableDriverApi");
	SYM(flush_all, "cuptiActivityFlushAll");
	SYM(flush_period, "cuptiActivityFlushPeriod");
	SYM(next_record, "cuptiActivityGetNextRecord");
	SYM(dropped, "cuptiActivityGetNumDroppedRecords");
	SYM(timestamp, "cuptiGetTimestamp");
	/* Optional: without it, the offset method. */
	*(void **)&cu.register_timestamp = dlsym(h, "cuptiActivityRegisterTimestampCallback");
	return true;
}

static void at_exit(void)
{
	/* What the last buffers hold reaches a tracer still attached. */
	if (mode && !failed)
		cu.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

/* Called by the CUDA driver once, while it initialises. Returns 1: a failure here never
 * fails the server's CUDA initialisation. */
EXPORT int InitializeInjection(void)
{
	static atomic_flag once = ATOMIC_FLAG_INIT;
	const char *q = getenv("TOKENSCOPE_CUPTI_QUIET");
	pthread_t th;
	uint32_t version = 0;

	if (atomic_flag_test_and_set(&once))
		return 1;
	quiet = q && *q && *q != '0';
	parse_sample(getenv("TOKENSCOPE_CUPTI_SAMPLE"));
	runs_init(&runs, emit, &runs.stats);
	if (!open_cupti())
		return 1;
	if (!check(cu.get_version(&version), "cuptiGetVersion"))
		return 1;
	cupti_version = version;
	for (int i = 0; i < POOL_BUFFERS; i++) {
		if (posix_memalign((void **)&pool.buf[i], 8, POOL_BYTES)) {
			say("tokenscope-cupti: %s: no device times\n", "no memory for the buffers");
			return 1;
		}
	}
	if (cu.register_timestamp && cu.register_timestamp(timestamp_cb) == CUPTI_SUCCESS) {
		clock_method = TS_DEVTIME_CLOCK_CALLBACK;
	} else {
		clock_method = TS_DEVTIME_CLOCK_OFFSET;
		pthread_mutex_lock(&lock);
		measure_offset();
		pthread_mutex_unlock(&lock);
	}
	if (!check(cu.register_callbacks(buffer_requested, buffer_completed),
		   "cuptiActivityRegisterCallbacks") ||
	    !check(cu.flush_period(TS_DEVTIME_FLUSH_MS), "cuptiActivityFlushPeriod"))
		return 1;
	if (pthread_create(&th, NULL, poll_thread, NULL)) {
		say("tokenscope-cupti: %s: no device times\n", "cannot start its thread");
		return 1;
	}
	pthread_detach(th);
	atexit(at_exit);
	return 1;
}
