// SPDX-License-Identifier: MIT
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/clock.h"
#include "lib/dl.h"
#include "loader/nvml.h"
#include "lib/utf8.h"

/*
 * The few pieces of NVML's ABI used here, declared by hand: its header is not installed where
 * tokenscope is built. They follow NVML's public header exactly; none of them has changed
 * since the _v2 entry points appeared (the _v3 process query takes the same struct as _v2).
 */
typedef int nvmlReturn_t; /* an enum: int-sized */
typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_CLOCK_SM 1
/* Its buffers for a device's name and UUID (_V2_BUFFER_SIZE), the longest a sample keeps. */
#define NVML_QUERY_STR DEV_NAME_BYTES
/* usedGpuMemory when the driver cannot tell (NVML_VALUE_NOT_AVAILABLE, -1, as unsigned). */
#define NVML_MEM_NOT_AVAILABLE ((unsigned long long)-1)

typedef struct {
	unsigned int gpu, memory; /* percent */
} nvmlUtilization_t;

typedef struct {
	unsigned long long total, free, used; /* bytes */
} nvmlMemory_t;

/* nvmlDeviceGetMemoryInfo_v2 (drivers from R510): `used` without the memory the driver
 * reserves for itself, which the first version counts as used (about 600 MiB on an H200), as
 * nvidia-smi shows it. version is the struct's size and 2 << 24 (NVML_STRUCT_VERSION). */
typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used; /* bytes */
} nvmlMemory_v2_t;

#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | 2u << 24))

typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory; /* bytes */
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t is NVML's v2 layout");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");

/* Processes asked for per device: NVML fills nothing when they do not fit, so room for many
 * more than are kept. */
#define NVML_QUERY_PROCS 1024

struct nvml_fns {
	nvmlReturn_t (*init)(void);
	nvmlReturn_t (*shutdown)(void);
	nvmlReturn_t (*count)(unsigned int *n);
	nvmlReturn_t (*handle)(unsigned int i, nvmlDevice_t *d);
	nvmlReturn_t (*name)(nvmlDevice_t d, char *buf, unsigned int len);
	nvmlReturn_t (*uuid)(nvmlDevice_t d, char *buf, unsigned int len);
	nvmlReturn_t (*util)(nvmlDevice_t d, nvmlUtilization_t *u);
	nvmlReturn_t (*mem)(nvmlDevice_t d, nvmlMemory_t *m);
	nvmlReturn_t (*mem2)(nvmlDevice_t d, nvmlMemory_v2_t *m);
	nvmlReturn_t (*clock)(nvmlDevice_t d, int type, unsigned int *mhz);
	nvmlReturn_t (*power)(nvmlDevice_t d, unsigned int *mw);
	nvmlReturn_t (*procs)(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *infos);
	const char *(*error)(nvmlReturn_t r);
};

/* The reason kept when NVML cannot be used. */
#define NVML_WHY_MAX 512

struct nvml {
	char *library;
	unsigned int period_ms;
	FILE *err;
	void *lib;
	bool inited;
	struct nvml_fns f;
	/* the thread's own */
	nvmlProcessInfo_t query[NVML_QUERY_PROCS];
	struct device_sample work;
	bool thread_on;
	pthread_t thread;
	bool lock_on; /* lock is made (nvml_start): the thread may be running */
	/* under lock */
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stopping;
	struct device_sample latest;
	/* The message when NVML cannot be used, held until wanted (nvml_opts.quiet) */
	bool quiet, failed, wanted, said;
	char why[NVML_WHY_MAX];
};

static const char *nvml_why(const struct nvml *n, nvmlReturn_t r)
{
	static __thread char buf[32];
	const char *s = n->f.error ? n->f.error(r) : NULL;

	if (s && *s)
		return s;
	snprintf(buf, sizeof(buf), "NVML error %d", r);
	return buf;
}

static void say_no_gpu(struct nvml *n)
{
	fprintf(n->err, "tokenscope: NVML unavailable (%s): no GPU utilisation or memory\n",
		n->why);
	n->said = true;
}

/* Why NVML cannot be used: said now, or kept until nvml_say_why when quiet. */
static void no_gpu(struct nvml *n, const char *why)
{
	if (n->lock_on)
		pthread_mutex_lock(&n->lock);
	snprintf(n->why, sizeof(n->why), "%s", why);
	n->failed = true;
	if (!n->quiet || n->wanted)
		say_no_gpu(n);
	if (n->lock_on)
		pthread_mutex_unlock(&n->lock);
}

void nvml_say_why(struct nvml *n)
{
	if (!n || !n->lock_on)
		return;
	pthread_mutex_lock(&n->lock);
	n->wanted = true;
	if (n->failed && !n->said)
		say_no_gpu(n);
	pthread_mutex_unlock(&n->lock);
}

/* The library and its functions, then nvmlInit; the message and -1 when any of it fails. */
static int nvml_load(struct nvml *n)
{
	static const struct {
		const char *sym;
		size_t off;
		bool required;
	} syms[] = {
#define SYM(s, field, req) { #s, offsetof(struct nvml_fns, field), req }
		SYM(nvmlInit_v2, init, true),
		SYM(nvmlShutdown, shutdown, true),
		SYM(nvmlDeviceGetCount_v2, count, true),
		SYM(nvmlDeviceGetHandleByIndex_v2, handle, true),
		SYM(nvmlDeviceGetName, name, false),
		SYM(nvmlDeviceGetUUID, uuid, false),
		SYM(nvmlDeviceGetUtilizationRates, util, false),
		SYM(nvmlDeviceGetMemoryInfo, mem, false),
		SYM(nvmlDeviceGetMemoryInfo_v2, mem2, false),
		SYM(nvmlDeviceGetClockInfo, clock, false),
		SYM(nvmlDeviceGetPowerUsage, power, false),
		SYM(nvmlDeviceGetComputeRunningProcesses_v3, procs, false),
		SYM(nvmlErrorString, error, false),
#undef SYM
	};
	char why[512];
	nvmlReturn_t r;

	if (!dl_possible()) {
		no_gpu(n, DL_STATIC_WHY);
		return -1;
	}
	n->lib = dlopen(n->library, RTLD_NOW | RTLD_LOCAL);
	if (!n->lib) {
		const char *e = dlerror();

		/* The usual case said short: no driver's library on this machine. */
		if (e && strstr(e, "cannot open shared object file: No such file or directory"))
			snprintf(why, sizeof(why), "no %.400s", n->library);
		else
			snprintf(why, sizeof(why), "%.500s", e ? e : n->library);
		no_gpu(n, why);
		return -1;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *p = dlsym(n->lib, syms[i].sym);

		/* A function pointer from dlsym, as POSIX allows. */
		memcpy((char *)&n->f + syms[i].off, &p, sizeof(p));
		if (!p && syms[i].required) {
			snprintf(why, sizeof(why), "%s has no %s", n->library, syms[i].sym);
			no_gpu(n, why);
			return -1;
		}
	}
	r = n->f.init();
	if (r != NVML_SUCCESS) {
		snprintf(why, sizeof(why), "nvmlInit: %s", nvml_why(n, r));
		no_gpu(n, why);
		return -1;
	}
	n->inited = true;
	return 0;
}

static void nvml_unload(struct nvml *n)
{
	if (n->inited)
		n->f.shutdown();
	n->inited = false;
	if (n->lib)
		dlclose(n->lib);
	n->lib = NULL;
}

static struct nvml *nvml_new(const struct nvml_opts *o)
{
	struct nvml *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	n->library = strdup(o && o->library ? o->library : NVML_LIBRARY);
	if (!n->library) {
		free(n);
		return NULL;
	}
	n->period_ms = o && o->period_ms ? o->period_ms : DEV_SAMPLE_PERIOD_MS;
	n->err = o && o->err ? o->err : stderr;
	n->quiet = o && o->quiet;
	return n;
}

static void nvml_free(struct nvml *n)
{
	nvml_unload(n);
	free(n->library);
	free(n);
}

struct nvml *nvml_open(const struct nvml_opts *o)
{
	struct nvml *n = nvml_new(o);

	if (!n) {
		fprintf(o && o->err ? o->err : stderr, "tokenscope: NVML: out of memory\n");
		return NULL;
	}
	if (nvml_load(n)) {
		nvml_free(n);
		return NULL;
	}
	return n;
}

/* A name or UUID: NUL-terminated whatever NVML wrote, then cleaned (it goes into labels, JSON
 * and the terminal); "" when absent. */
static void query_text(nvmlDevice_t d, nvmlReturn_t (*fn)(nvmlDevice_t, char *, unsigned int),
		       char *out)
{
	char buf[NVML_QUERY_STR + 1];

	out[0] = 0;
	if (!fn)
		return;
	memset(buf, 0, sizeof(buf));
	if (fn(d, buf, NVML_QUERY_STR) != NVML_SUCCESS)
		return;
	buf[NVML_QUERY_STR] = 0;
	utf8_clean(out, DEV_TEXT_MAX, buf, strlen(buf));
}

/* The compute processes; a pid listed twice (one per MIG instance, or per context) is one
 * process, its memory the sum, absent when either part is. */
static void query_procs(struct nvml *n, nvmlDevice_t d, struct sampled_device *dev)
{
	unsigned int count = NVML_QUERY_PROCS;
	nvmlReturn_t r;

	if (!n->f.procs)
		return;
	r = n->f.procs(d, &count, n->query);
	if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
		/* None filled in: all of them are left out, and counted. */
		dev->procs_dropped = count;
		return;
	}
	if (r != NVML_SUCCESS)
		return;
	dev->procs_present = true;
	if (count > NVML_QUERY_PROCS)
		count = NVML_QUERY_PROCS;
	for (unsigned int i = 0; i < count; i++) {
		const nvmlProcessInfo_t *q = &n->query[i];
		bool have = q->usedGpuMemory != NVML_MEM_NOT_AVAILABLE;
		struct sampled_proc *p = NULL;

		for (uint32_t j = 0; j < dev->nprocs; j++)
			if (dev->procs[j].pid == q->pid)
				p = &dev->procs[j];
		if (p) {
			p->mem_present = p->mem_present && have;
			p->mem_bytes = p->mem_present ? p->mem_bytes + q->usedGpuMemory : 0;
			continue;
		}
		if (dev->nprocs == DEV_MAX_PROCS) {
			dev->procs_dropped++;
			continue;
		}
		p = &dev->procs[dev->nprocs++];
		p->pid = q->pid;
		p->mem_present = have;
		p->mem_bytes = have ? q->usedGpuMemory : 0;
	}
}

static void sample_device(struct nvml *n, nvmlDevice_t d, struct sampled_device *dev)
{
	nvmlUtilization_t u;
	nvmlMemory_t m;
	nvmlMemory_v2_t m2;
	unsigned int v;

	dev->mono_ns = mono_ns();
	query_text(d, n->f.name, dev->name);
	query_text(d, n->f.uuid, dev->uuid);
	if (n->f.util && n->f.util(d, &u) == NVML_SUCCESS && u.gpu <= 100) {
		dev->util_present = true;
		dev->util_pct = u.gpu;
	}
	m2.version = NVML_MEMORY_V2;
	if (n->f.mem2 && n->f.mem2(d, &m2) == NVML_SUCCESS) {
		dev->mem_present = true;
		dev->mem_used = m2.used;
		dev->mem_total = m2.total;
	} else if (n->f.mem && n->f.mem(d, &m) == NVML_SUCCESS) {
		dev->mem_present = true;
		dev->mem_used = m.used;
		dev->mem_total = m.total;
	}
	if (n->f.clock && n->f.clock(d, NVML_CLOCK_SM, &v) == NVML_SUCCESS) {
		dev->clock_present = true;
		dev->sm_clock_hz = v * 1000000ull;
	}
	if (n->f.power && n->f.power(d, &v) == NVML_SUCCESS) {
		dev->power_present = true;
		dev->power_mw = v;
	}
	query_procs(n, d, dev);
}

void nvml_sample(struct nvml *n, struct device_sample *out)
{
	unsigned int count = 0;

	memset(out, 0, sizeof(*out));
	/* A count that fails (the driver went away) is a sample with no device: nothing to show,
	 * rather than the previous values. */
	if (n->f.count(&count) != NVML_SUCCESS)
		return;
	for (unsigned int i = 0; i < count; i++) {
		nvmlDevice_t d;
		struct sampled_device *dev;

		if (out->ndevices == DEV_MAX_DEVICES) {
			out->devices_dropped = count - i;
			break;
		}
		if (n->f.handle(i, &d) != NVML_SUCCESS)
			continue;
		dev = &out->devices[out->ndevices++];
		dev->index = i;
		sample_device(n, d, dev);
	}
}

static void *nvml_thread(void *arg)
{
	struct nvml *n = arg;
	uint64_t next, seq = 0;

	if (nvml_load(n))
		return NULL;
	next = mono_ns();
	pthread_mutex_lock(&n->lock);
	while (!n->stopping) {
		struct timespec ts;
		uint64_t now;

		pthread_mutex_unlock(&n->lock);
		nvml_sample(n, &n->work);
		n->work.seq = ++seq;
		pthread_mutex_lock(&n->lock);
		n->latest = n->work;
		/* On the period's grid; a sample that took longer than a period skips ticks
		 * rather than bunching them. */
		next += n->period_ms * 1000000ull;
		now = mono_ns();
		if (next <= now)
			next = now + n->period_ms * 1000000ull;
		ts.tv_sec = next / 1000000000ull;
		ts.tv_nsec = next % 1000000000ull;
		while (!n->stopping && pthread_cond_timedwait(&n->wake, &n->lock, &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&n->lock);
	return NULL;
}

struct nvml *nvml_start(const struct nvml_opts *o)
{
	FILE *err = o && o->err ? o->err : stderr;
	struct nvml *n = nvml_new(o);
	pthread_condattr_t ca;
	sigset_t all, old;
	int rc;

	if (!n) {
		fprintf(err, "tokenscope: NVML: out of memory\n");
		return NULL;
	}
	pthread_mutex_init(&n->lock, NULL);
	n->lock_on = true;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&n->wake, &ca);
	pthread_condattr_destroy(&ca);
	/* Signals are the main thread's: it is the one that stops the trace on Ctrl-C. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&n->thread, NULL, nvml_thread, n);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		fprintf(err, "tokenscope: NVML: cannot start its thread: %s\n", strerror(rc));
		pthread_cond_destroy(&n->wake);
		pthread_mutex_destroy(&n->lock);
		nvml_free(n);
		return NULL;
	}
	n->thread_on = true;
	return n;
}

bool nvml_latest(struct nvml *n, struct device_sample *out)
{
	bool fresh = false;

	if (!n || !n->thread_on)
		return false;
	pthread_mutex_lock(&n->lock);
	if (n->latest.seq && n->latest.seq != out->seq) {
		*out = n->latest;
		fresh = true;
	}
	pthread_mutex_unlock(&n->lock);
	return fresh;
}

void nvml_stop(struct nvml *n)
{
	if (!n)
		return;
	if (n->thread_on) {
		pthread_mutex_lock(&n->lock);
		n->stopping = true;
		pthread_cond_signal(&n->wake);
		pthread_mutex_unlock(&n->lock);
		pthread_join(n->thread, NULL);
		pthread_cond_destroy(&n->wake);
		pthread_mutex_destroy(&n->lock);
	}
	nvml_free(n);
}

/* The sampler's calls (sampler.h): why NVML cannot be used is said once a traced process maps
 * a CUDA library, not on every run of a machine without a GPU. */
static void *sampler_start(void)
{
	struct nvml_opts no = { .quiet = true };

	return nvml_start(&no);
}

static bool sampler_latest(void *s, struct device_sample *out)
{
	return nvml_latest(s, out);
}

static void sampler_say_why(void *s)
{
	nvml_say_why(s);
}

static void sampler_stop(void *s)
{
	nvml_stop(s);
}

const struct sampler_ops nvml_sampler = {
	.start = sampler_start,
	.latest = sampler_latest,
	.say_why = sampler_say_why,
	.stop = sampler_stop,
	.check_name = "nvml",
	.library = NVML_LIBRARY,
	.check_ok = "GPU utilisation and memory (the driver's " NVML_LIBRARY ")",
	.check_off = "no " NVML_LIBRARY " (no NVIDIA driver here): no GPU utilisation",
};
