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
 * The CUDA headers are not included (they are what is missing): handles are opaque pointers,
 * cudaError_t and the enums are int-sized, as in cuda_runtime_api.h. noinline keeps each
 * function a real entry point a uprobe can attach to; used keeps it from being dropped.
 */
#include <stddef.h>

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

CUDA_STANDIN_API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim,
					      void **args, size_t sharedMem, cudaStream_t stream)
{
	(void)func;
	(void)gridDim;
	(void)blockDim;
	(void)args;
	(void)sharedMem;
	(void)stream;
	return CUDA_ERROR_INSUFFICIENT_DRIVER;
}

CUDA_STANDIN_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
						 void **args)
{
	(void)config;
	(void)func;
	(void)args;
	return CUDA_ERROR_INSUFFICIENT_DRIVER;
}

CUDA_STANDIN_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	(void)graphExec;
	(void)stream;
	return CUDA_ERROR_INSUFFICIENT_DRIVER;
}

CUDA_STANDIN_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
					enum cudaMemcpyKind kind)
{
	(void)dst;
	(void)src;
	(void)count;
	(void)kind;
	return CUDA_ERROR_INSUFFICIENT_DRIVER;
}

CUDA_STANDIN_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
					     enum cudaMemcpyKind kind, cudaStream_t stream)
{
	(void)dst;
	(void)src;
	(void)count;
	(void)kind;
	(void)stream;
	return CUDA_ERROR_INSUFFICIENT_DRIVER;
}

CUDA_STANDIN_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	(void)stream;
	return CUDA_ERROR_INSUFFICIENT_DRIVER;
}

CUDA_STANDIN_API cudaError_t cudaDeviceSynchronize(void)
{
	return CUDA_ERROR_INSUFFICIENT_DRIVER;
}

CUDA_STANDIN_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	(void)event;
	return CUDA_ERROR_INSUFFICIENT_DRIVER;
}
