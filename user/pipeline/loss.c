// SPDX-License-Identifier: MIT
#include "pipeline/loss.h"

const struct loss_counter loss_counters[] = {
#define LOSS_ENTRY(field, json, key, text, phrase, param, prom, label, meaning) \
	{ #field,                                                               \
	  json,                                                                 \
	  key,                                                                  \
	  text,                                                                 \
	  phrase,                                                               \
	  offsetof(struct loss_report, field),                                  \
	  offsetof(struct loss_report, param),                                  \
	  prom,                                                                 \
	  label,                                                                \
	  meaning },
	LOSS_COUNTERS(LOSS_ENTRY)
#undef LOSS_ENTRY
};

const size_t loss_ncounters = sizeof(loss_counters) / sizeof(loss_counters[0]);

static uint64_t member(const struct loss_report *l, size_t off)
{
	return *(const uint64_t *)((const char *)l + off);
}

uint64_t loss_value(const struct loss_report *l, const struct loss_counter *c)
{
	return member(l, c->off);
}

uint64_t loss_param(const struct loss_report *l, const struct loss_counter *c)
{
	return member(l, c->param_off);
}
