// SPDX-License-Identifier: MIT
/*
 * The OpenTelemetry exporter's reading of a collector's answer: otlp_parse_response
 * (user/otlp.c), on what came back from the collector's socket, which another process writes.
 *
 * Input: the response head as received, up to its first NUL (the exporter's buffer is a
 * NUL-terminated string of what recv returned).
 *
 * Property: 0 with a three-digit status and a Retry-After that is -1 or a count of seconds, or
 * -EPROTO with no status written; the input is never read past its terminator (ASan).
 */
#include <errno.h>

#include "fuzz.h"
#include "otlp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	char *head = fuzz_str(&in, size);
	int status = -7, retry = -7;
	int rc = otlp_parse_response(head, &status, &retry);

	if (rc == 0) {
		FUZZ_CHECK(status >= 100 && status <= 999, "status %d", status);
		FUZZ_CHECK(retry >= -1, "Retry-After %d", retry);
	} else {
		FUZZ_CHECK(rc == -EPROTO, "returned %d", rc);
		FUZZ_CHECK(status == -7, "status written (%d) for a head refused", status);
	}
	free(head);
	return 0;
}
