// SPDX-License-Identifier: MIT
/*
 * The bytes of the BPF object built for kernels before 5.12 (bpf/lib/common.bpf.h, TS_LEGACY):
 * its own translation unit, because its skeleton's declarations are those of kernel.c's, under
 * the same name.
 */
#include <stddef.h>

#include "legacy/tokenscope.skel.h"
#include "loader/kernel.h"

const void *kernel_legacy_elf(size_t *size)
{
	return tokenscope_bpf__elf_bytes(size);
}
