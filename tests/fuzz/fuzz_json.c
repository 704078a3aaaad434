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

#include "fuzz.h"
#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cjson_type(const cJSON *c)
{
	if (cJSON_IsNull(c))
		return JV_NULL;
	if (cJSON_IsFalse(c))
		return JV_FALSE;
	if (cJSON_IsTrue(c))
		return JV_TRUE;
	if (cJSON_IsNumber(c))
		return JV_NUMBER;
	if (cJSON_IsString(c))
		return JV_STRING;
	if (cJSON_IsArray(c))
		return JV_ARRAY;
	return cJSON_IsObject(c) ? JV_OBJECT : 0;
}

FUZZ_CHECKER static void same_tree(const struct jv *v, const cJSON *c)
{
	const struct jv *e;
	const cJSON *ce;

	FUZZ_CHECK((int)v->type == cjson_type(c), "type %d against cJSON's %d", v->type,
		   cjson_type(c));
	FUZZ_CHECK((v->key == NULL) == (c->string == NULL) && (!v->key || !strcmp(v->key, c->string)),
		   "key \"%s\" against cJSON's \"%s\"", v->key ? v->key : "(none)",
		   c->string ? c->string : "(none)");
	if (v->type == JV_STRING)
		FUZZ_CHECK(!strcmp(v->str, c->valuestring), "string \"%s\" against \"%s\"", v->str,
			   c->valuestring);
	if (v->type == JV_NUMBER)
		FUZZ_CHECK(v->num == c->valuedouble ||
				   (v->num != v->num && c->valuedouble != c->valuedouble),
			   "number %g against %g", v->num, c->valuedouble);
	for (e = v->child, ce = c->child; e && ce; e = e->next, ce = ce->next)
		same_tree(e, ce);
	FUZZ_CHECK(!e && !ce, "%s elements than cJSON", e ? "more" : "fewer");
}

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
	if (v && c)
		same_tree(v, c);
	cJSON_Delete(c);
	jv_arena_reset(&a);
	return 0;
}
