/* SPDX-License-Identifier: MIT */
/*
 * cudastub: a stand-in CUDA runtime for machines without the CUDA toolkit. It exports the
 * runtime functions tokenscope hooks, with the real signatures, and each returns 35
 * (cudaErrorInsufficientDriver), as the real runtime does on a machine with no driver. refserver
 * --gpu loads it when it cannot load libcudart, so the tracer's uprobes have something to attach
 * to and fire on.
 *
 *   make .output/standin/libcudart.so.13   (named like the runtime, so the tracer finds it)
 *
 * With CUDA_INJECTION64_PATH set, it also stands in for the driver and a device (TS_STUB_DEVICE=1:
 * the device alone, for a benchmark's plain runs): the first call
 * loads that injection library and calls its InitializeInjection, as the CUDA driver does;
 * every launch and copy then runs on a modelled device (one queue per stream: an operation
 * starts TS_STUB_LAUNCH_US after its call or when the one before it ends, and lasts
 * TS_STUB_KERNEL_US, TS_STUB_GRAPH_US or TS_STUB_COPY_US; defaults 5, 20, 500, 10), is reported
 * to the stand-in CUPTI (tests/cuptistub.c) when it is loaded, and succeeds; a wait returns
 * when the device work it waits for has ended. Times are exact, so tests know the device
 * times tokenscope must report.
 *
 * The CUDA headers are not included (they are what is missing): handles are opaque pointers,
 * cudaError_t and the enums are int-sized, as in cuda_runtime_api.h. noinline keeps each
 * function a real entry point a uprobe can attach to; used keeps it from being dropped.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <stddef.h>
#include <time.h>

#define CUDA_STANDIN_API __attribute__((noinline, used, visibility("default")))

/* cudaErrorInsufficientDriver: "no driver", what libcudart returns here for every call */
#define CUDA_ERROR_INSUFFICIENT_DRIVER 35

typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;

enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4,
};

typedef struct dim3 {
	unsigned int x, y, z;
} dim3;

/* Only passed by pointer here; its layout does not matter to the stand-in. */
typedef struct cudaLaunchConfig_st cudaLaunchConfig_t;

/* ---- the modelled device (CUDA_INJECTION64_PATH set) ---- */

/* CUPTI's callback ids of the runtime calls (cupti_runtime_cbid.h; fixed by its ABI). */
#define CBID_MEMCPY 31
#define CBID_MEMCPY_ASYNC 41
#define CBID_LAUNCH_KERNEL 211
#define CBID_GRAPH_LAUNCH 311
#define CBID_LAUNCH_KERNEL_EXC 430
/* CUpti_ActivityMemcpyKind */
#define COPY_HTOD 1
#define COPY_DTOH 2
/* tsstub_cupti_op's kinds */
enum { OP_KERNEL, OP_GRAPH, OP_MEMCPY };
#define STREAMS 8

typedef void (*op_fn)(int kind, int driver, uint32_t cbid, uint64_t api_start, uint64_t api_end,
		      uint64_t dev_start, uint64_t dev_end, uint32_t stream, int copy_kind,
		      uint64_t bytes);

static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static int device_on;
static op_fn report_op;
static uint64_t launch_ns, kernel_ns, graph_ns, copy_ns;
static pthread_mutex_t device_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	cudaStream_t handle;
	uint64_t free_at; /* when the stream's last operation ends */
} streams[STREAMS];

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t env_us(const char *name, uint64_t def)
{
	const char *v = getenv(name);

	return (v && *v ? strtoull(v, NULL, 10) : def) * 1000;
}

static void device_init(void)
{
	const char *inj = getenv("CUDA_INJECTION64_PATH"), *dev = getenv("TS_STUB_DEVICE");
	void *h, *cupti;
	int (*init)(void);

	if ((!inj || !*inj) && !(dev && *dev == '1'))
		return;
	launch_ns = env_us("TS_STUB_LAUNCH_US", 5);
	kernel_ns = env_us("TS_STUB_KERNEL_US", 20);
	graph_ns = env_us("TS_STUB_GRAPH_US", 500);
	copy_ns = env_us("TS_STUB_COPY_US", 10);
	device_on = 1;
	if (!inj || !*inj)
		return;
	h = dlopen(inj, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return;
	*(void **)&init = dlsym(h, "InitializeInjection");
	if (init)
		init();
	/* The stand-in CUPTI, if the injection library loaded it. */
	cupti = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
	if (cupti)
		*(void **)&report_op = dlsym(cupti, "tsstub_cupti_op");
}

static int device(void)
{
	pthread_once(&device_once, device_init);
	return device_on;
}

/* The queue of a stream (ids from 1; the default stream is the first seen). */
static uint32_t stream_id(cudaStream_t s)
{
	for (uint32_t i = 0; i < STREAMS; i++) {
		if (streams[i].handle == s || !streams[i].free_at) {
			streams[i].handle = s;
			return i;
		}
	}
	return 0;
}

/* Queues an operation on the modelled device; api_start is when its call began. */
static void device_op(int kind, uint32_t cbid, uint64_t api_start, cudaStream_t s, int copy_kind,
		      size_t bytes)
{
	uint64_t dur = kind == OP_KERNEL ? kernel_ns : kind == OP_GRAPH ? graph_ns : copy_ns;
	uint64_t start, end;
	uint32_t i;

	pthread_mutex_lock(&device_lock);
	i = stream_id(s);
	start = api_start + launch_ns;
	if (streams[i].free_at > start)
		start = streams[i].free_at;
	end = start + dur;
	streams[i].free_at = end;
	pthread_mutex_unlock(&device_lock);
	if (report_op)
		report_op(kind, 0, cbid, api_start, mono_ns(), start, end, i + 1, copy_kind, bytes);
}

/* Returns when every operation queued on s (or on any stream, all) has ended. */
static void device_wait(cudaStream_t s, int all)
{
	uint64_t until = 0, now;

	pthread_mutex_lock(&device_lock);
	for (uint32_t i = 0; i < STREAMS; i++)
		if ((all || streams[i].handle == s) && streams[i].free_at > until)
			until = streams[i].free_at;
	pthread_mutex_unlock(&device_lock);
	while ((now = mono_ns()) < until) {
		struct timespec d = { 0, (long)(until - now) };

		nanosleep(&d, NULL);
	}
}

/* What a call returns: success on the modelled device, "no driver" without it. */
#define RESULT() (device_on ? 0 : CUDA_ERROR_INSUFFICIENT_DRIVER)

CUDA_STANDIN_API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim,
					      void **args, size_t sharedMem, cudaStream_t stream)
{
	uint64_t t = mono_ns();

	(void)func;
	(void)gridDim;
	(void)blockDim;
	(void)args;
	(void)sharedMem;
	if (device())
		device_op(OP_KERNEL, CBID_LAUNCH_KERNEL, t, stream, 0, 0);
	return RESULT();
}

CUDA_STANDIN_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
						 void **args)
{
	uint64_t t = mono_ns();

	(void)config;
	(void)func;
	(void)args;
	if (device())
		device_op(OP_KERNEL, CBID_LAUNCH_KERNEL_EXC, t, NULL, 0, 0);
	return RESULT();
}

CUDA_STANDIN_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	uint64_t t = mono_ns();

	(void)graphExec;
	if (device())
		device_op(OP_GRAPH, CBID_GRAPH_LAUNCH, t, stream, 0, 0);
	return RESULT();
}

CUDA_STANDIN_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
					enum cudaMemcpyKind kind)
{
	uint64_t t = mono_ns();

	(void)dst;
	(void)src;
	if (device()) {
		device_op(OP_MEMCPY, CBID_MEMCPY, t, NULL,
			  kind == cudaMemcpyDeviceToHost ? COPY_DTOH : COPY_HTOD, count);
		device_wait(NULL, 0);
	}
	return RESULT();
}

CUDA_STANDIN_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
					     enum cudaMemcpyKind kind, cudaStream_t stream)
{
	uint64_t t = mono_ns();

	(void)dst;
	(void)src;
	if (device())
		device_op(OP_MEMCPY, CBID_MEMCPY_ASYNC, t, stream,
			  kind == cudaMemcpyDeviceToHost ? COPY_DTOH : COPY_HTOD, count);
	return RESULT();
}

CUDA_STANDIN_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	if (device())
		device_wait(stream, 0);
	return RESULT();
}

CUDA_STANDIN_API cudaError_t cudaDeviceSynchronize(void)
{
	if (device())
		device_wait(NULL, 1);
	return RESULT();
}

/* Events are not modelled: a wait on one waits for the whole device. */
CUDA_STANDIN_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	(void)event;
	if (device())
		device_wait(NULL, 1);
	return RESULT();
}
