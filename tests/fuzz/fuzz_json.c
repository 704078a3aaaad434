// SPDX-License-Identifier: MIT
/*
 * user/lib/json.c against cJSON, which read frames and request bodies before it: the input is
 * the text, parsed by both.
 *
 * Property: both accept it or both refuse it, and when both accept it the trees are the same
 * (types, keys, strings, numbers, order); the arena's memory, from a small buffer and then from
 * malloc, is all given back (the sanitizers see a leak or a use after free otherwise).
 */
#include <cjson/cJSON.h>

#include "../unit/json_compare.h"
#include "fuzz.h"
#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char small[256];
	struct jv_arena a;
	const struct jv *v;
	cJSON *c;

	jv_arena_init(&a, small, sizeof(small));
	v = jv_parse(&a, (const char *)data, size);
	c = cJSON_ParseWithLength((const char *)data, size);
	FUZZ_CHECK((v == NULL) == (c == NULL), "%s accepted it, the other did not",
		   v ? "lib/json" : "cJSON");
	if (v && c) {
		const char *why = json_compare(v, c);

		FUZZ_CHECK(!why, "the trees differ: %s", why ? why : "");
	}
	cJSON_Delete(c);
	jv_arena_reset(&a);
	return 0;
}
