// SPDX-License-Identifier: MIT
#include <linux/types.h>

#include "loader/cuda.h"
#include "events.h"

#define CUDA_CALL(name, kind)                                   \
	{                                                       \
		name, kind, KERNEL_CUDA_CALL, KERNEL_PROBE_NONE \
	}
#define CUDA_WAIT(name)                                                    \
	{                                                                  \
		name, TS_CUDA_SYNC, KERNEL_CUDA_SYNC, KERNEL_CUDA_SYNC_RET \
	}

/* Runtime API (libcudart, or an executable that links it statically). */
static const struct libhooks_fn runtime_fns[] = {
	CUDA_CALL("cudaLaunchKernel", TS_CUDA_LAUNCH),
	CUDA_CALL("cudaLaunchKernel_ptsz", TS_CUDA_LAUNCH),
	CUDA_CALL("cudaLaunchKernelExC", TS_CUDA_LAUNCH),
	CUDA_CALL("cudaLaunchKernelExC_ptsz", TS_CUDA_LAUNCH),
	CUDA_CALL("cudaGraphLaunch", TS_CUDA_GRAPH_LAUNCH),
	CUDA_CALL("cudaGraphLaunch_ptsz", TS_CUDA_GRAPH_LAUNCH),
	CUDA_CALL("cudaMemcpy", TS_CUDA_MEMCPY),
	CUDA_CALL("cudaMemcpy_ptds", TS_CUDA_MEMCPY),
	CUDA_CALL("cudaMemcpyAsync", TS_CUDA_MEMCPY),
	CUDA_CALL("cudaMemcpyAsync_ptsz", TS_CUDA_MEMCPY),
	CUDA_WAIT("cudaStreamSynchronize"),
	CUDA_WAIT("cudaStreamSynchronize_ptsz"),
	CUDA_WAIT("cudaDeviceSynchronize"),
	CUDA_WAIT("cudaEventSynchronize"),
};

/* Driver API (libcuda): Triton and other JITs launch through it directly. */
static const struct libhooks_fn driver_fns[] = {
	CUDA_CALL("cuLaunchKernel", TS_CUDA_LAUNCH),
	CUDA_CALL("cuLaunchKernel_ptsz", TS_CUDA_LAUNCH),
	CUDA_CALL("cuLaunchKernelEx", TS_CUDA_LAUNCH),
	CUDA_CALL("cuLaunchKernelEx_ptsz", TS_CUDA_LAUNCH),
	CUDA_CALL("cuGraphLaunch", TS_CUDA_GRAPH_LAUNCH),
	CUDA_CALL("cuGraphLaunch_ptsz", TS_CUDA_GRAPH_LAUNCH),
	CUDA_CALL("cuMemcpyDtoH_v2", TS_CUDA_MEMCPY_DTOH),
	CUDA_CALL("cuMemcpyDtoH_v2_ptds", TS_CUDA_MEMCPY_DTOH),
	CUDA_CALL("cuMemcpyDtoHAsync_v2", TS_CUDA_MEMCPY_DTOH),
	CUDA_CALL("cuMemcpyDtoHAsync_v2_ptsz", TS_CUDA_MEMCPY_DTOH),
	CUDA_WAIT("cuStreamSynchronize"),
	CUDA_WAIT("cuStreamSynchronize_ptsz"),
	CUDA_WAIT("cuCtxSynchronize"),
	CUDA_WAIT("cuEventSynchronize"),
};

_Static_assert(sizeof(runtime_fns) / sizeof(runtime_fns[0]) <= LIBHOOKS_FNS_MAX,
	       "the runtime's table fits a file's offsets");
_Static_assert(sizeof(driver_fns) / sizeof(driver_fns[0]) <= LIBHOOKS_FNS_MAX,
	       "the driver's table fits a file's offsets");

/* By the start of their file names; the runtime may be linked into an executable, the driver
 * never is. */
const struct libhooks cuda_libs[CUDA_NLIBS] = {
	{ "CUDA", "GPU steps", "libcudart.so", true, LIBHOOKS_FNS(runtime_fns) },
	{ "CUDA", "GPU steps", "libcuda.so", false, LIBHOOKS_FNS(driver_fns) },
};
