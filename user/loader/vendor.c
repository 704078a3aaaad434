// SPDX-License-Identifier: MIT
#include <stdio.h>

#include "loader/vendor.h"
#include "loader/cuda.h"
#include "loader/nvml.h"

/* A vendor is a row here and its own files: its hooks' tables, its sampler, its device-time
 * library (docs/architecture.md, "Adding things"). */
static const struct vendor rows[] = {
	{
	    .name = "CUDA",
	    .check_name = "cuda",
	    .libs = cuda_libs,
	    .nlibs = CUDA_NLIBS,
	    .sampler = &nvml_sampler,
	    .devtime = { .what = "CUPTI",
			 .check_name = "cupti",
			 .file_prefix = "libtokenscope_cupti",
			 .file_name = "libtokenscope_cupti.so",
			 .path_env = "TOKENSCOPE_CUPTI_LIB",
			 .inject_env = "CUDA_INJECTION64_PATH" },
	},
};

_Static_assert(sizeof(rows) / sizeof(rows[0]) <= VENDORS_MAX, "VENDORS_MAX holds every row");

size_t vendor_count(void)
{
	return sizeof(rows) / sizeof(rows[0]);
}

const struct vendor *vendor_row(size_t i)
{
	return i < vendor_count() ? &rows[i] : NULL;
}

int vendor_of(const struct libhooks *l)
{
	for (size_t i = 0; i < vendor_count(); i++)
		for (size_t k = 0; k < rows[i].nlibs; k++)
			if (l == &rows[i].libs[k])
				return (int)i;
	return -1;
}

void vendor_names(char *out, size_t n)
{
	size_t at = 0;

	if (n)
		out[0] = 0;
	for (size_t i = 0; i < vendor_count() && at < n; i++)
		at += (size_t)snprintf(out + at, n - at, "%s%s", i ? " or " : "", rows[i].name);
}
