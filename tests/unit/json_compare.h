/* SPDX-License-Identifier: MIT */
/*
 * Whether a tree of user/lib/json.c is the one cJSON gives for the same text: the same types,
 * keys, strings and numbers in the same order. test_json and the fuzz_json target share it.
 */
#ifndef TS_JSON_COMPARE_H
#define TS_JSON_COMPARE_H

#include <cjson/cJSON.h>
#include <string.h>

#include "lib/json.h"

static inline int json_compare_type(const cJSON *c)
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

/* NULL when the trees are the same, else what differs first. */
static inline const char *json_compare(const struct jv *v, const cJSON *c)
{
	const struct jv *e;
	const cJSON *ce;
	const char *why;

	if ((int)v->type != json_compare_type(c))
		return "type";
	if ((v->key == NULL) != (c->string == NULL) || (v->key && strcmp(v->key, c->string)))
		return "key";
	if (v->type == JV_STRING && strcmp(v->str, c->valuestring))
		return "string";
	if (v->type == JV_NUMBER &&
	    !(v->num == c->valuedouble || (v->num != v->num && c->valuedouble != c->valuedouble)))
		return "number";
	for (e = v->child, ce = c->child; e && ce; e = e->next, ce = ce->next)
		if ((why = json_compare(e, ce)))
			return why;
	return e || ce ? "element count" : NULL;
}

#endif
