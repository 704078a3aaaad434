// SPDX-License-Identifier: MIT
/*
 * The table of losses (pipeline/loss.h) and what is made from it: every counter, given a value
 * of its own, is found with that value in the text summary's line the table names, in the
 * JSON summary's object under its key, in its Prometheus family under its label, and with its
 * meaning for the HTML page; the keys and labels are unique.
 */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "lib/jsonw.h"
#include "pipeline/loss.h"
#include "pipeline/pipeline_impl.h"
#include "sinks/prom.h"
#include "sinks/summary.h"

/* Counter i's value in the report: distinct, and no prefix of another's digits. */
#define VALUE(i) (700001 + 1000 * (uint64_t)(i))

static void report(struct loss_report *l)
{
	memset(l, 0, sizeof(*l));
	for (size_t i = 0; i < loss_ncounters; i++)
		*(uint64_t *)((char *)l + loss_counters[i].off) = VALUE(i);
	l->device_times = true;
	l->tls_conns = UINT64_MAX / 2; /* more than the counters: no series below 0 */
	l->frame_max_kib = 64;
	l->budget_max_mib = 16;
}

static char *capture_summary(const struct loss_report *l)
{
	struct summary s;
	char *text = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);

	summary_init(&s);
	summary_print(&s, l, "total", f);
	fclose(f);
	return text;
}

/* The line of text that starts with prefix (after the indent). */
static const char *line_of(const char *text, const char *prefix)
{
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, prefix, strlen(prefix)))
			return p;
	return NULL;
}

static bool in_line(const char *line, const char *want)
{
	const char *end = line ? strchr(line, '\n') : NULL;
	const char *at = line ? strstr(line, want) : NULL;

	return at && (!end || at < end);
}

TEST(test_table_unique)
{
	for (size_t i = 0; i < loss_ncounters; i++) {
		const struct loss_counter *a = &loss_counters[i];

		ASSERT_TRUE(a->meaning && *a->meaning, a->field);
		ASSERT_EQ(a->phrase == NULL, a->text == LOSS_T_INSIDE || a->text == LOSS_T_CONNS,
			  a->field);
		ASSERT_EQ(a->label == NULL, a->prom == LOSS_P_OWN, a->field);
		for (size_t j = i + 1; j < loss_ncounters; j++) {
			const struct loss_counter *b = &loss_counters[j];

			ASSERT_FALSE(a->json == b->json && !strcmp(a->key, b->key), b->key);
			ASSERT_FALSE(a->prom == b->prom && a->label && b->label &&
					 !strcmp(a->label, b->label),
				     b->field);
		}
	}
}

TEST(test_text_lines)
{
	struct loss_report l;
	char *text, want[64];

	report(&l);
	text = capture_summary(&l);
	for (size_t i = 0; i < loss_ncounters; i++) {
		const struct loss_counter *c = &loss_counters[i];
		const char *line = NULL;

		snprintf(want, sizeof(want), "%llu", (unsigned long long)VALUE(i));
		switch (c->text) {
		case LOSS_T_LOST:
			line = line_of(text, "  lost: " /* the first lost line */);
			break;
		case LOSS_T_DROPPED:
			line = line_of(text, "  dropped: ");
			break;
		case LOSS_T_DEVICE:
			line = line_of(text, "  lost (device times): ");
			break;
		case LOSS_T_ALONE:
			snprintf(want, sizeof(want), "  lost: %llu ", (unsigned long long)VALUE(i));
			line = line_of(text, want);
			break;
		case LOSS_T_INSIDE:
			/* lost_bytes: inside the records phrase of the lost line */
			line = line_of(text, "  lost: ");
			snprintf(want, sizeof(want), "(%llu bytes)", (unsigned long long)VALUE(i));
			break;
		case LOSS_T_CONNS:
			continue; /* the connections and tls lines: test_summary's */
		}
		ASSERT_TRUE(in_line(line, want), c->field);
	}
	ASSERT_TRUE(in_line(line_of(text, "  dropped: "), "frames over 64 KiB"), "the frame limit");
	ASSERT_TRUE(in_line(line_of(text, "  dropped: "), "over the 16 MiB memory cap"), "the cap");
	free(text);
}

TEST(test_json_and_prometheus)
{
	struct pipeline_opts po = { .err = stderr };
	struct pipeline_status st;
	struct loss_report l;
	struct pipeline pl;
	struct summary s;
	struct jsonw w;
	struct prom *p;
	struct sink sk;
	char *json = NULL, *prom = NULL, want[160];
	size_t n = 0, pn = 0;
	FILE *f;

	report(&l);
	summary_init(&s);
	f = open_memstream(&json, &n);
	jsonw_begin(&w, f);
	summary_json(&w, &s, &l, false);
	jsonw_end(&w);
	fclose(f);
	if (!ASSERT_OK(pipeline_init(&pl, &po), "pipeline"))
		return;
	p = prom_new(NULL, NULL);
	sk = prom_sink(p);
	pipeline_status(&pl, &st);
	st.loss = l;
	sk.finish(sk.ctx, &st);
	ASSERT_OK(prom_render(p, &prom, &pn), "render");
	for (size_t i = 0; i < loss_ncounters; i++) {
		const struct loss_counter *c = &loss_counters[i];
		const char *obj =
		    strstr(json, c->json == LOSS_J_LOST ? "\"lost\":{" : "\"dropped\":{");
		static const char *const families[] = { "tokenscope_dropped_bytes_total{where",
							"tokenscope_dropped_total{what",
							"tokenscope_device_times_lost_total{what" };

		snprintf(want, sizeof(want), "\"%s\":%llu", c->key, (unsigned long long)VALUE(i));
		ASSERT_TRUE(obj && strstr(obj, want) && strstr(obj, want) < strchr(obj, '}'),
			    c->key);
		if (c->prom == LOSS_P_OWN)
			continue;
		snprintf(want, sizeof(want), "%s=\"%s\"} %llu\n", families[c->prom], c->label,
			 (unsigned long long)VALUE(i));
		ASSERT_TRUE(prom && strstr(prom, want), want);
	}
	free(json);
	free(prom);
	prom_free(p);
	pipeline_free(&pl);
}

int main(void)
{
	return check_run_all();
}
