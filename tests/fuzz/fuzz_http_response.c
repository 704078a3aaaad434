// SPDX-License-Identifier: MIT
/* user/pipeline/http.c on the response direction; the input format and the properties are in
 * fuzz_http.h. */
#include "fuzz_http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return http_fuzz_run(HTTP_DIR_RESPONSE, data, size);
}
