// SPDX-License-Identifier: MIT
/*
 * The CLI's duration parser: duration_parse (user/lib/duration.c), which main.c uses for
 * --slow-ttft and --slow-itl, slo.c for --slo, and alert_parse for thresholds and `for`. (main.c's own
 * parse_double, for -d and --trace-sample, is static there and not reachable from here.)
 *
 * Input: the argument, up to its first NUL.
 *
 * Property: an accepted duration is a finite number of seconds, not negative, that its callers
 * can turn into nanoseconds: main.c stores (int64_t)(s * 1e9) and alert.c (uint64_t)(s * 1e9),
 * and a double beyond the integer's range makes that conversion undefined. Accepting it is the
 * parser's bug, since only it can refuse the argument with a message.
 */
#include <math.h>

#include "lib/duration.h"
#include "fuzz.h"

/* 2^63 ns: the first duration that int64_t nanoseconds cannot hold. */
#define DURATION_FUZZ_MAX_S 9223372036.854775807

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	char *arg = fuzz_str(&in, size);
	double s = -1;

	if (duration_parse(arg, &s)) {
		FUZZ_CHECK(isfinite(s) && s >= 0, "\"%s\" accepted as %g s", arg, s);
		FUZZ_CHECK(s < DURATION_FUZZ_MAX_S,
			   "\"%s\" accepted as %g s, beyond what nanoseconds in 64 bits hold", arg,
			   s);
	} else {
		FUZZ_CHECK(s == -1, "\"%s\" refused, but the result was written", arg);
	}
	free(arg);
	return 0;
}
