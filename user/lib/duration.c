// SPDX-License-Identifier: MIT
/* Durations with a unit (duration.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/duration.h"

bool duration_parse(const char *s, double *seconds)
{
	static const struct {
		const char *unit;
		double s;
	} units[] = { { "us", 1e-6 }, { "ms", 1e-3 }, { "s", 1 }, { "m", 60 }, { "h", 3600 } };
	char *end;
	double v = strtod(s, &end);

	if (end == s || v < 0 || !isfinite(v))
		return false;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].unit))
			continue;
		v *= units[i].s;
		if (v > DURATION_MAX_S)
			return false;
		*seconds = v;
		return true;
	}
	return false;
}
