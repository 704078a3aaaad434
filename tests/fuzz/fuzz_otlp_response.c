// SPDX-License-Identifier: MIT
/*
 * The OpenTelemetry exporter's reading of a collector's answer: otlp_retry_after
 * (user/sinks/otlp_http.c), on the response's header lines, which another process writes. libcurl
 * parses the status line and hands each header line to the transport as received; the
 * transport reads Retry-After from them.
 *
 * Input: a response head; it is cut into lines after each '\n' (as libcurl delivers them) and
 * each line is given in a buffer of exactly its length (no terminator).
 *
 * Property: -2 for a line that is not Retry-After, else -1 or a count of seconds; a count only
 * for a line that starts with "Retry-After:" and has a digit; nothing is read past the line
 * (ASan).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "sinks/otlp_http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t at = 0;

	while (at < size) {
		const uint8_t *nl = memchr(data + at, '\n', size - at);
		size_t n = nl ? (size_t)(nl - (data + at)) + 1 : size - at;
		char *line = malloc(n ? n : 1);
		int v;

		if (!line)
			return 0;
		memcpy(line, data + at, n);
		v = otlp_retry_after(line, n);
		FUZZ_CHECK(v >= -2, "returned %d", v);
		if (v >= 0) {
			bool digit = false;

			FUZZ_CHECK(n >= 12 && !strncasecmp(line, "retry-after:", 12),
				   "seconds %d from a line that is not Retry-After", v);
			for (size_t i = 12; i < n; i++)
				digit |= isdigit((unsigned char)line[i]) != 0;
			FUZZ_CHECK(digit, "seconds %d from a Retry-After without a digit", v);
		}
		free(line);
		at += n;
	}
	return 0;
}
