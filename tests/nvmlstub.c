/* SPDX-License-Identifier: MIT */
/*
 * nvmlstub: a stand-in for NVML (libnvidia-ml.so.1) on machines without an NVIDIA driver. It
 * exports the functions user/loader/nvml.c looks up, with NVML's signatures and struct layouts, and
 * answers them from the environment, so tests know the exact values tokenscope must show.
 *
 *   make .output/standin/libnvidia-ml.so.1       (every function)
 *   make .output/standin/nvml-old/libnvidia-ml.so.1
 *        (built with -DNVMLSTUB_OLD: no nvmlDeviceGetClockInfo, no nvmlDeviceGetMemoryInfo_v2
 *         and no nvmlDeviceGetComputeRunningProcesses_v3, as a library too old for them)
 *
 * TS_NVML_STUB, read at every first nvmlInit_v2 (so a test may change it between inits), is a
 * list of items separated by ';'. An item is either an option or a device:
 *
 *   fail=CODE      nvmlInit_v2 returns CODE (9 is NVML_ERROR_DRIVER_NOT_LOADED)
 *   init_ms=MS     nvmlInit_v2 takes MS milliseconds first (a driver slow to initialise)
 *   KEY=VALUE,KEY=VALUE,...    a device; devices are numbered 0, 1, ... in order
 *
 * A device's keys (each query whose key is left out returns NVML_ERROR_NOT_SUPPORTED):
 *
 *   name=TEXT, uuid=TEXT   TEXT runs to the next ',' or ';' and may hold any other byte
 *   util=PERCENT           nvmlDeviceGetUtilizationRates: gpu = PERCENT, memory = 0
 *   mem=USED/TOTAL         nvmlDeviceGetMemoryInfo_v2, bytes (free = TOTAL - USED - reserved)
 *   reserved=BYTES         memory the driver reserves (0): nvmlDeviceGetMemoryInfo, the
 *                          first version, counts it as used (USED + BYTES), as drivers do
 *   sm=MHZ                 nvmlDeviceGetClockInfo(NVML_CLOCK_SM)
 *   power=MW               nvmlDeviceGetPowerUsage, milliwatts
 *   procs=PID:BYTES/PID:BYTES/...   nvmlDeviceGetComputeRunningProcesses_v3 (up to 64 listed;
 *                          BYTES "na" is NVML_VALUE_NOT_AVAILABLE); "procs=" is none running
 *   extra=N                N more processes after those: pid 2000000+k, (k+1) MiB, k from 0
 *
 * Any value may instead be "na" (the query returns NVML_ERROR_NOT_SUPPORTED) or "!CODE" (it
 * returns CODE). Example: two devices, the second with no power reading:
 *
 *   TS_NVML_STUB='name=Stub GPU,uuid=GPU-0000,util=45,mem=1073741824/8589934592,sm=1980,
 *                 power=350125,procs=4242:536870912;name=Stub GPU,uuid=GPU-0001,power=na'
 *
 * (on one line). The NVML header is not included (it is what is missing here).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NVML_API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_CLOCK_SM 1

typedef struct {
	unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

#define STUB_MAX_DEVICES 32
#define STUB_MAX_PROCS 64
#define STUB_TEXT 256
/* NVML_VALUE_NOT_AVAILABLE in an unsigned long long field */
#define STUB_NA ((unsigned long long)-1)

/* One query's answer: the code it returns, and its value when that is NVML_SUCCESS. */
struct answer {
	nvmlReturn_t rc;
	unsigned long long v, v2;
};

struct nvmlDevice_st {
	char name[STUB_TEXT], uuid[STUB_TEXT];
	nvmlReturn_t name_rc, uuid_rc;
	struct answer util, mem, sm, power, procs;
	unsigned int npids;
	unsigned int pids[STUB_MAX_PROCS];
	unsigned long long bytes[STUB_MAX_PROCS];
	unsigned int extra;
	unsigned long long reserved;
};

static struct nvmlDevice_st devs[STUB_MAX_DEVICES];
static unsigned int ndevs;
static int refs;

/* "na", "!CODE" or a number (ends at end, which is not read). */
static struct answer parse_answer(const char *s, const char *end)
{
	struct answer a = { .rc = NVML_SUCCESS };

	if (end - s == 2 && !strncmp(s, "na", 2))
		a.rc = NVML_ERROR_NOT_SUPPORTED;
	else if (s < end && *s == '!')
		a.rc = (nvmlReturn_t)strtol(s + 1, NULL, 10);
	else
		a.v = strtoull(s, NULL, 10);
	return a;
}

static void parse_procs(struct nvmlDevice_st *d, const char *s, const char *end)
{
	while (s < end && d->npids < STUB_MAX_PROCS) {
		const char *item_end = memchr(s, '/', end - s);
		const char *colon;

		if (!item_end)
			item_end = end;
		colon = memchr(s, ':', item_end - s);
		if (colon) {
			d->pids[d->npids] = (unsigned int)strtoul(s, NULL, 10);
			d->bytes[d->npids] =
			    (item_end - colon - 1 == 2 && !strncmp(colon + 1, "na", 2))
				? STUB_NA
				: strtoull(colon + 1, NULL, 10);
			d->npids++;
		}
		s = item_end + 1;
	}
}

static void copy_text(char *out, const char *s, const char *end)
{
	size_t n = (size_t)(end - s) < STUB_TEXT - 1 ? (size_t)(end - s) : STUB_TEXT - 1;

	memcpy(out, s, n);
	out[n] = 0;
}

static void parse_device(struct nvmlDevice_st *d, const char *s, const char *end)
{
	memset(d, 0, sizeof(*d));
	d->name_rc = d->uuid_rc = NVML_ERROR_NOT_SUPPORTED;
	d->util.rc = d->mem.rc = d->sm.rc = d->power.rc = d->procs.rc = NVML_ERROR_NOT_SUPPORTED;
	while (s < end) {
		const char *kv_end = memchr(s, ',', end - s);
		const char *eq, *v;

		if (!kv_end)
			kv_end = end;
		eq = memchr(s, '=', kv_end - s);
		if (eq) {
			size_t klen = eq - s;

			v = eq + 1;
#define KEY(k) (klen == sizeof(k) - 1 && !strncmp(s, k, klen))
			if (KEY("name") || KEY("uuid")) {
				struct answer a = parse_answer(v, kv_end);
				/* text unless it is "na" or "!CODE" */
				nvmlReturn_t rc = v < kv_end && *v == '!'	     ? a.rc
						  : a.rc == NVML_ERROR_NOT_SUPPORTED ? a.rc
										     : NVML_SUCCESS;

				if (KEY("name")) {
					d->name_rc = rc;
					copy_text(d->name, v, kv_end);
				} else {
					d->uuid_rc = rc;
					copy_text(d->uuid, v, kv_end);
				}
			} else if (KEY("util")) {
				d->util = parse_answer(v, kv_end);
			} else if (KEY("mem")) {
				const char *slash = memchr(v, '/', kv_end - v);

				d->mem = parse_answer(v, slash ? slash : kv_end);
				if (slash)
					d->mem.v2 = strtoull(slash + 1, NULL, 10);
			} else if (KEY("reserved")) {
				d->reserved = strtoull(v, NULL, 10);
			} else if (KEY("sm")) {
				d->sm = parse_answer(v, kv_end);
			} else if (KEY("power")) {
				d->power = parse_answer(v, kv_end);
			} else if (KEY("procs")) {
				d->procs = parse_answer(v, kv_end);
				if (d->procs.rc == NVML_SUCCESS)
					parse_procs(d, v, kv_end);
			} else if (KEY("extra")) {
				d->extra = (unsigned int)strtoul(v, NULL, 10);
			}
#undef KEY
		}
		s = kv_end + 1;
	}
}

/* Parses TS_NVML_STUB; returns the init code it asks for. */
static nvmlReturn_t configure(void)
{
	const char *s = getenv("TS_NVML_STUB");
	nvmlReturn_t rc = NVML_SUCCESS;
	const char *end;

	ndevs = 0;
	if (!s)
		return rc;
	end = s + strlen(s);
	while (s < end) {
		const char *item_end = strchr(s, ';');

		if (!item_end)
			item_end = end;
		if (!strncmp(s, "fail=", 5)) {
			rc = (nvmlReturn_t)strtol(s + 5, NULL, 10);
		} else if (!strncmp(s, "init_ms=", 8)) {
			long ms = strtol(s + 8, NULL, 10);
			struct timespec ts = { ms / 1000, ms % 1000 * 1000000 };

			nanosleep(&ts, NULL);
		} else if (item_end > s && ndevs < STUB_MAX_DEVICES) {
			parse_device(&devs[ndevs++], s, item_end);
		}
		s = item_end + 1;
	}
	return rc;
}

static int valid(nvmlDevice_t d)
{
	return refs > 0 && d >= devs && d < devs + ndevs;
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
	nvmlReturn_t rc;

	if (refs) {
		refs++;
		return NVML_SUCCESS;
	}
	rc = configure();
	if (rc == NVML_SUCCESS)
		refs = 1;
	return rc;
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
	if (!refs)
		return NVML_ERROR_UNINITIALIZED;
	refs--;
	return NVML_SUCCESS;
}

NVML_API const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	default:
		return "Unknown Error";
	}
}

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	if (!refs)
		return NVML_ERROR_UNINITIALIZED;
	*n = ndevs;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	if (!refs)
		return NVML_ERROR_UNINITIALIZED;
	if (i >= ndevs)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = &devs[i];
	return NVML_SUCCESS;
}

static nvmlReturn_t text(const char *s, nvmlReturn_t rc, char *buf, unsigned int len)
{
	if (rc != NVML_SUCCESS)
		return rc;
	if (strlen(s) + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned int len)
{
	return valid(d) ? text(d->name, d->name_rc, buf, len) : NVML_ERROR_INVALID_ARGUMENT;
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int len)
{
	return valid(d) ? text(d->uuid, d->uuid_rc, buf, len) : NVML_ERROR_INVALID_ARGUMENT;
}

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
	if (!valid(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->util.rc == NVML_SUCCESS) {
		u->gpu = (unsigned int)d->util.v;
		u->memory = 0;
	}
	return d->util.rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	if (!valid(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->mem.rc == NVML_SUCCESS) {
		m->used = d->mem.v + d->reserved;
		m->total = d->mem.v2;
		m->free = m->total > m->used ? m->total - m->used : 0;
	}
	return d->mem.rc;
}

#ifndef NVMLSTUB_OLD
typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
	if (!valid(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (m->version != (unsigned int)(sizeof(*m) | 2u << 24))
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (d->mem.rc == NVML_SUCCESS) {
		m->used = d->mem.v;
		m->reserved = d->reserved;
		m->total = d->mem.v2;
		m->free = m->total > m->used + m->reserved ? m->total - m->used - m->reserved : 0;
	}
	return d->mem.rc;
}
#endif

NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw)
{
	if (!valid(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->power.rc == NVML_SUCCESS)
		*mw = (unsigned int)d->power.v;
	return d->power.rc;
}

#ifndef NVMLSTUB_OLD
NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz)
{
	if (!valid(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (type != NVML_CLOCK_SM)
		return NVML_ERROR_NOT_SUPPORTED;
	if (d->sm.rc == NVML_SUCCESS)
		*mhz = (unsigned int)d->sm.v;
	return d->sm.rc;
}

/* As NVML: too small an array (or a count of 0) gets the count needed and nothing filled. */
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n,
							      nvmlProcessInfo_t *infos)
{
	unsigned int total;

	if (!valid(d) || !n)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->procs.rc != NVML_SUCCESS)
		return d->procs.rc;
	total = d->npids + d->extra;
	if (*n < total) {
		*n = total;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	if (total && !infos)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned int i = 0; i < total; i++) {
		nvmlProcessInfo_t *p = &infos[i];

		if (i < d->npids) {
			p->pid = d->pids[i];
			p->usedGpuMemory = d->bytes[i];
		} else {
			p->pid = 2000000 + (i - d->npids);
			p->usedGpuMemory = (i - d->npids + 1) * 1048576ull;
		}
		p->gpuInstanceId = p->computeInstanceId = 0xffffffffu;
	}
	*n = total;
	return NVML_SUCCESS;
}
#endif
