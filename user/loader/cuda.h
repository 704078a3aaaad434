/* SPDX-License-Identifier: MIT */
/*
 * CUDA's hooks: the functions of the CUDA runtime (libcudart.so*, or an executable that links
 * it statically) and of the driver (libcuda.so*) whose calls make GPU steps, as the tables
 * uprobes.c hooks (libhooks.h). Registered as CUDA's row of the GPU vendors (vendor.c). Their
 * arguments are laid out as bpf/lib/cuda.bpf.h's programs read them.
 */
#ifndef TS_CUDA_H
#define TS_CUDA_H

#include "loader/libhooks.h"

/* The runtime's table, then the driver's. */
#define CUDA_NLIBS 2

extern const struct libhooks cuda_libs[CUDA_NLIBS];

#endif
