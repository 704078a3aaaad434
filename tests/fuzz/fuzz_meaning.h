/* SPDX-License-Identifier: MIT */
/*
 * What outputs must mean, beyond being well formed (fuzz_outputs.h), whatever the traffic or the
 * recording held: checked by fuzz_pipeline and fuzz_record against the run's own clock, the
 * earliest and the latest kernel time any record fed to the pipeline held (its span). No figure
 * can be a negative duration or one longer than the whole run, and no time can lie outside it.
 *
 *   JSON lines (requests, steps, the {"summary"} line)
 *       a duration is a number from 0 to the span: a key that ends in _ms, or _s but not _per_s,
 *       and p50, p90, p99, max, min and mean inside an object whose key does; a time (a key that
 *       ends in _ns, and each element of such an array) lies within the clock, but for an amount
 *       of device time in ns (busy, delay: sums over operations that may overlap), which is
 *       only never negative
 *   terminal text (request lines, summaries, diagnosis)
 *       no negative number, and no figure in milliseconds longer than the span
 *   the Prometheus exposition
 *       no negative sample; a _seconds histogram's sum at most its count times the span
 *   OTLP batches
 *       trace ids of 32 lower-case hex digits and span ids of 16, none all zeros; no span its
 *       own parent; start <= end, the two no further apart than the span; every event within
 *       its span; gen_ai.preempted no later than the gen_ai.resumed that follows it; no negative
 *       time attribute (a key ending in _ns, or GenAI's times in seconds); and over the run, no
 *       span its own ancestor (ids seen twice count as one span with every parent they were
 *       given, so no chain through them may close either)
 *
 * A figure printed with fewer digits than it has may round up: FUZZ_MS_SLACK allows for that.
 */
#ifndef TS_FUZZ_MEANING_H
#define TS_FUZZ_MEANING_H

#include <ctype.h>
#include <inttypes.h>
#include <math.h>

#include "events.h"
#include "fuzz_outputs.h"

/* The largest rounding of a printed figure: 3 decimals of a millisecond (and of a second). */
#define FUZZ_MS_SLACK 0.001

struct fuzz_clock {
	uint64_t lo, hi; /* lo > hi: no time seen */
};

static inline void fuzz_clock_init(struct fuzz_clock *c)
{
	c->lo = UINT64_MAX;
	c->hi = 0;
}

/* A kernel time; 0 is "none" in every record, never a time. */
static inline void fuzz_clock_add(struct fuzz_clock *c, uint64_t t)
{
	if (!t)
		return;
	if (t < c->lo)
		c->lo = t;
	if (t > c->hi)
		c->hi = t;
}

static inline double fuzz_clock_span_ms(const struct fuzz_clock *c)
{
	return c->lo > c->hi ? 0 : (double)(c->hi - c->lo) / 1e6;
}

/* Every time a record holds, by its type; a record too short for its type holds none. */
static inline void fuzz_clock_record(struct fuzz_clock *c, const void *rec, size_t len)
{
	struct ts_event_hdr h;

	if (len < sizeof(h))
		return;
	memcpy(&h, rec, sizeof(h));
	switch (h.type) {
	case TS_EV_DATA: {
		struct ts_data_event e;

		if (len < sizeof(e))
			return;
		memcpy(&e, rec, sizeof(e));
		fuzz_clock_add(c, e.enter_ns);
		fuzz_clock_add(c, e.exit_ns);
		fuzz_clock_add(c, e.queued_ns);
		return;
	}
	case TS_EV_CONN_OPEN:
	case TS_EV_CONN_CLOSE: {
		struct ts_conn_event e;

		if (len < sizeof(e))
			return;
		memcpy(&e, rec, sizeof(e));
		fuzz_clock_add(c, e.ts_ns);
		return;
	}
	case TS_EV_PROC_FORK:
	case TS_EV_PROC_EXIT:
	case TS_EV_PROC_MAP: {
		struct ts_proc_event e;

		if (len < sizeof(e))
			return;
		memcpy(&e, rec, sizeof(e));
		fuzz_clock_add(c, e.ts_ns);
		return;
	}
	case TS_EV_GPU_STEP: {
		struct ts_gpu_step_event e;

		if (len < sizeof(e))
			return;
		memcpy(&e, rec, sizeof(e));
		fuzz_clock_add(c, e.start_ns);
		fuzz_clock_add(c, e.wait_start_ns);
		fuzz_clock_add(c, e.end_ns);
		return;
	}
	case TS_EV_GPU_CALL: {
		struct ts_gpu_call_event e;

		if (len < sizeof(e))
			return;
		memcpy(&e, rec, sizeof(e));
		fuzz_clock_add(c, e.ts_ns);
		return;
	}
	case TS_EV_DEV_RUNS: {
		/* A version 1 record is shorter: its counters' first 96 bytes, then its runs. */
		size_t stats = len == TS_DEV_RUNS_V1_BYTES ? TS_DEVTIME_STATS_V1_BYTES
							   : sizeof(struct ts_devtime_stats);
		const uint8_t *p = rec;
		struct ts_devtime_stats st = { 0 };
		uint32_t n;

		if (len < 24 + stats)
			return;
		memcpy(&n, p + 20, sizeof(n));
		memcpy(&st, p + 24, stats);
		fuzz_clock_add(c, st.flush_ns);
		fuzz_clock_add(c, st.sample_on_ns);
		fuzz_clock_add(c, st.sample_off_ns);
		for (uint32_t i = 0; i < n && i < TS_RUNS_PER_PROBE; i++) {
			struct ts_dev_run r;

			if (len < 24 + stats + (i + 1) * sizeof(r))
				return;
			memcpy(&r, p + 24 + stats + i * sizeof(r), sizeof(r));
			fuzz_clock_add(c, r.start_ns);
			fuzz_clock_add(c, r.end_ns);
			if (r.flags & TS_RUN_F_LAUNCH)
				fuzz_clock_add(c, r.first_launch_ns);
		}
		return;
	}
	}
}

static inline bool fuzz_ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), k = strlen(tail);

	return n >= k && !strcmp(s + n - k, tail);
}

/* A duration in milliseconds that the run can hold, printed to slack_ms. */
FUZZ_CHECKER static inline void fuzz_duration_ok(const char *what, const char *key, double ms,
						 double slack_ms, const struct fuzz_clock *c)
{
	FUZZ_CHECK(!(ms < 0), "%s: %s is a negative duration (%.6f ms)", what, key, ms);
	FUZZ_CHECK(!(ms > fuzz_clock_span_ms(c) + slack_ms),
		   "%s: %s = %.6f ms, longer than the run's whole clock (%.6f ms)", what, key, ms,
		   fuzz_clock_span_ms(c));
}

FUZZ_CHECKER static inline bool fuzz_is_duration_key(const char *k)
{
	return fuzz_ends_with(k, "_ms") ||
	       (fuzz_ends_with(k, "_s") && !fuzz_ends_with(k, "_per_s"));
}

FUZZ_CHECKER static inline bool fuzz_is_stat_key(const char *k)
{
	static const char *const stats[] = { "p50", "p90", "p99", "max", "min", "mean" };

	for (size_t i = 0; i < sizeof(stats) / sizeof(stats[0]); i++)
		if (!strcmp(k, stats[i]))
			return true;
	return false;
}

/* One value of a JSON document and what is under it; key is its own (or its array's) name,
 * parent the name of the object it is in. */
FUZZ_CHECKER static void fuzz_json_meaning(const char *what, const cJSON *j, const char *key,
					   const char *parent, const struct fuzz_clock *c)
{
	if (cJSON_IsNumber(j) && key) {
		double v = j->valuedouble, scale = fuzz_ends_with(key, "_s") ? 1000 : 1;

		/* An objective's limit (--slo, llm-d's headers) and a stall's threshold (--stall-ms,
		 * or at least 50 ms) are settings, not measures. */
		if (!strcmp(key, "limit_ms") || !strcmp(key, "threshold_ms")) {
			FUZZ_CHECK(v > 0, "%s: %s of %g", what, key, v);
		} else if (fuzz_is_duration_key(key)) {
			fuzz_duration_ok(what, key, v * scale, FUZZ_MS_SLACK * scale, c);
		} else if (parent && fuzz_is_stat_key(key) && fuzz_is_duration_key(parent)) {
			scale = fuzz_ends_with(parent, "_s") ? 1000 : 1;
			fuzz_duration_ok(what, parent, v * scale, FUZZ_MS_SLACK * scale, c);
		}
		if (fuzz_ends_with(key, "_ns") && (strstr(key, "busy") || strstr(key, "delay")))
			FUZZ_CHECK(!(v < 0), "%s: %s = %.0f, a negative amount of time", what, key,
				   v);
		else if (fuzz_ends_with(key, "_ns"))
			FUZZ_CHECK(v >= (double)c->lo && v <= (double)c->hi,
				   "%s: %s = %.0f, a time outside the run's clock [%" PRIu64
				   ", %" PRIu64 "]",
				   what, key, v, c->lo, c->hi);
		return;
	}
	for (const cJSON *e = j->child; e; e = e->next) {
		if (cJSON_IsArray(j))
			fuzz_json_meaning(what, e, key, parent, c);
		else
			fuzz_json_meaning(what, e, e->string, key, c);
	}
}

/* Every line of JSON lines. */
FUZZ_CHECKER static inline void fuzz_json_lines_meaning(const char *what, const char *buf,
							size_t len, const struct fuzz_clock *c)
{
	for (const char *l = buf; l < buf + len;) {
		const char *nl = memchr(l, '\n', (size_t)(buf + len - l));
		size_t ll = nl ? (size_t)(nl - l) : (size_t)(buf + len - l);
		cJSON *j = cJSON_ParseWithLength(l, ll);

		if (j)
			fuzz_json_meaning(what, j, NULL, NULL, c);
		cJSON_Delete(j);
		l += ll + 1;
	}
}

/*
 * Terminal text: a number is digits with at most one '.', starting after a character that is no
 * letter, digit, '.' or '_' (a name such as "p99" or "tls13" is no number). A '-' right before
 * one, itself after a space, '(', '=', ':', ',' or the line's start, makes it negative, unless a
 * '%' follows it (a difference between two figures may be either way). One followed by "ms"
 * (with spaces between or none, then no letter) is a duration, rounded to the digits printed.
 * One right after "<=" is an objective as it was given (--slo), a setting: skipped.
 */
FUZZ_CHECKER static inline void fuzz_text_meaning(const char *what, const char *buf, size_t len,
						  const struct fuzz_clock *c)
{
	for (size_t i = 0; i < len; i++) {
		char prev = i ? buf[i - 1] : '\n', before = i > 1 ? buf[i - 2] : '\n';
		size_t j = i;
		double v, digit = 1; /* the last printed digit's unit */

		/* A GPU's line ("  gpu N NAME (UUID): ...") starts with the name and UUID NVML
		 * gave, free text whose digits are no figure: judged from after them. */
		if (prev == '\n' && len - i > 7 && !memcmp(buf + i, "  gpu ", 6) &&
		    isdigit((unsigned char)buf[i + 6])) {
			const char *eol = memchr(buf + i, '\n', len - i);
			size_t end = eol ? (size_t)(eol - buf) : len, k;

			for (k = end; k > i + 2 && memcmp(buf + k - 3, "): ", 3); k--)
				;
			if (k > i + 2) {
				i = k - 1;
				continue;
			}
		}

		if (!isdigit((unsigned char)buf[i]) || isalnum((unsigned char)prev) ||
		    prev == '.' || prev == '_')
			continue;
		/* An objective as given ("ttft<=2s"): a setting, not a measure. */
		if (prev == '=' && i >= 2 && buf[i - 2] == '<') {
			while (i + 1 < len && (isdigit((unsigned char)buf[i + 1]) || buf[i + 1] == '.'))
				i++;
			continue;
		}
		v = strtod(buf + i, NULL);
		while (j < len && (isdigit((unsigned char)buf[j]) || buf[j] == '.')) {
			if (buf[j] == '.')
				digit = 1;
			else if (digit)
				digit /= 10;
			j++;
		}
		if (prev == '-' && (j >= len || buf[j] != '%') &&
		    (before == ' ' || before == '(' || before == '=' || before == ':' ||
		     before == ',' || before == '\n')) {
			fuzz_show_line(buf, len, i);
			FUZZ_FAIL("%s: a negative number at byte %zu", what, i);
		}
		i = j;
		while (j < len && buf[j] == ' ')
			j++;
		if (j + 1 < len && buf[j] == 'm' && buf[j + 1] == 's' &&
		    (j + 2 >= len || !isalpha((unsigned char)buf[j + 2])) &&
		    v > fuzz_clock_span_ms(c) + digit) {
			fuzz_show_line(buf, len, i - 1);
			FUZZ_FAIL("%s: %.6f ms, longer than the run's whole clock (%.6f ms)", what,
				  v, fuzz_clock_span_ms(c));
		}
	}
}

/* A sample line's name (up to '{' or ' '), its labels as written, and its value. */
FUZZ_CHECKER static inline bool fuzz_prom_split(const char *l, size_t n, size_t *name_len,
						size_t *labels_end, double *v)
{
	size_t i = 0;

	while (i < n && l[i] != '{' && l[i] != ' ')
		i++;
	*name_len = i;
	if (i < n && l[i] == '{') {
		bool quoted = false;

		for (; i < n && (quoted || l[i] != '}'); i++) {
			if (quoted && l[i] == '\\')
				i++;
			else if (l[i] == '"')
				quoted = !quoted;
		}
		i++;
	}
	*labels_end = i;
	if (i >= n)
		return false;
	*v = strtod(l + i, NULL);
	return true;
}

/* The exposition: no negative sample; each _seconds histogram's sum within count x span. */
FUZZ_CHECKER static inline void fuzz_prom_meaning(const char *buf, size_t len,
						  const struct fuzz_clock *c)
{
	for (const char *l = buf; l < buf + len;) {
		const char *nl = memchr(l, '\n', (size_t)(buf + len - l));
		size_t n = nl ? (size_t)(nl - l) : (size_t)(buf + len - l), name, labels;
		double v;

		if (n && l[0] != '#' && fuzz_prom_split(l, n, &name, &labels, &v)) {
			FUZZ_CHECK(!(v < 0), "prometheus: a negative sample: %.*s", (int)n, l);
			if (name > 12 && !memcmp(l + name - 12, "_seconds_sum", 12)) {
				/* Its _count: the same name and labels, on a line of its own. */
				char want[1024];
				const char *cl;
				double count = -1;
				size_t nc, cn, clab;

				snprintf(want, sizeof(want), "%.*s_count%.*s", (int)(name - 4), l,
					 (int)(labels - name), l + name);
				cl = memmem(buf, len, want, strlen(want));
				if (cl && (cl == buf || cl[-1] == '\n')) {
					nc = (size_t)((const char *)memchr(
							  cl, '\n', (size_t)(buf + len - cl)) -
						      cl);
					if (fuzz_prom_split(cl, nc, &cn, &clab, &count))
						FUZZ_CHECK(
						    v <= count * fuzz_clock_span_ms(c) / 1000 +
							     count * FUZZ_MS_SLACK,
						    "prometheus: %.*s: more than its count (%g) "
						    "times the run's clock (%.6f ms)",
						    (int)n, l, count, fuzz_clock_span_ms(c));
				}
			}
		}
		l += n + 1;
	}
}

/* OTLP's spans of a run, for the ancestry check at its end. */
struct fuzz_otlp_span {
	char trace[33], span[17], parent[17];
};

struct fuzz_otlp_run {
	struct fuzz_otlp_span *v;
	size_t n, cap;
};

FUZZ_CHECKER static inline bool fuzz_hex_id(const char *s, size_t digits)
{
	bool zero = true;

	if (!s || strlen(s) != digits)
		return false;
	for (size_t i = 0; i < digits; i++) {
		if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
			return false;
		zero &= s[i] == '0';
	}
	return !zero;
}

/* A unix time in nanoseconds, as OTLP/JSON writes it: a string of digits. */
FUZZ_CHECKER static inline uint64_t fuzz_otlp_time(const cJSON *o, const char *key)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, key);
	uint64_t v = 0;

	FUZZ_CHECK(cJSON_IsString(t) && t->valuestring[0], "otlp: %s is not a string", key);
	for (const char *p = t->valuestring; *p; p++) {
		FUZZ_CHECK(isdigit((unsigned char)*p), "otlp: %s is not digits", key);
		v = v * 10 + (uint64_t)(*p - '0');
	}
	return v;
}

/* An attribute's number (intValue as a string, or doubleValue); false for other types. */
FUZZ_CHECKER static inline bool fuzz_otlp_attr_number(const cJSON *a, double *v)
{
	const cJSON *val = cJSON_GetObjectItemCaseSensitive(a, "value");
	const cJSON *i = cJSON_GetObjectItemCaseSensitive(val, "intValue");
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(val, "doubleValue");

	if (cJSON_IsString(i)) {
		*v = strtod(i->valuestring, NULL);
		return true;
	}
	if (cJSON_IsNumber(i) || cJSON_IsNumber(d)) {
		*v = cJSON_IsNumber(i) ? i->valuedouble : d->valuedouble;
		return true;
	}
	return false;
}

/* A property of one span: the span is shown when it fails. */
#define FUZZ_SPAN_CHECK(span, cond, ...)                                         \
	do {                                                                     \
		if (!(cond)) {                                                   \
			char *shown = cJSON_PrintUnformatted(span);              \
                                                                                 \
			fprintf(stderr, "span: %.4000s\n", shown ? shown : "?"); \
			FUZZ_CHECK(cond, __VA_ARGS__);                           \
		}                                                                \
	} while (0)

FUZZ_CHECKER static void fuzz_otlp_one_span(const cJSON *s, const struct fuzz_clock *c,
					    struct fuzz_otlp_run *run)
{
	const cJSON *trace = cJSON_GetObjectItemCaseSensitive(s, "traceId");
	const cJSON *span = cJSON_GetObjectItemCaseSensitive(s, "spanId");
	const cJSON *parent = cJSON_GetObjectItemCaseSensitive(s, "parentSpanId");
	const char *ps = cJSON_IsString(parent) ? parent->valuestring : "";
	uint64_t start = fuzz_otlp_time(s, "startTimeUnixNano");
	uint64_t end = fuzz_otlp_time(s, "endTimeUnixNano");
	uint64_t preempted[64];
	size_t npre = 0, nres = 0;
	const cJSON *e, *a;

	FUZZ_SPAN_CHECK(s, cJSON_IsString(trace) && fuzz_hex_id(trace->valuestring, 32),
			"otlp: a trace id that is not 32 hex digits, or all zeros");
	FUZZ_SPAN_CHECK(s, cJSON_IsString(span) && fuzz_hex_id(span->valuestring, 16),
			"otlp: a span id that is not 16 hex digits, or all zeros");
	FUZZ_SPAN_CHECK(s, !ps[0] || fuzz_hex_id(ps, 16), "otlp: a parent id %s", ps);
	FUZZ_SPAN_CHECK(s, strcmp(ps, span->valuestring), "otlp: span %s is its own parent",
			span->valuestring);
	FUZZ_SPAN_CHECK(s, start <= end,
			"otlp: span %s ends (%" PRIu64 ") before it starts (%" PRIu64 ")",
			span->valuestring, end, start);
	FUZZ_SPAN_CHECK(s, (double)(end - start) / 1e6 <= fuzz_clock_span_ms(c),
			"otlp: span %s lasts longer than the run's whole clock", span->valuestring);
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(s, "events"))
	{
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
		uint64_t t = fuzz_otlp_time(e, "timeUnixNano");

		FUZZ_SPAN_CHECK(s, t >= start && t <= end, "otlp: event %s of span %s outside it",
				cJSON_IsString(name) ? name->valuestring : "?", span->valuestring);
		if (!cJSON_IsString(name))
			continue;
		if (!strcmp(name->valuestring, "gen_ai.preempted") &&
		    npre < sizeof(preempted) / sizeof(preempted[0]))
			preempted[npre++] = t;
		if (!strcmp(name->valuestring, "gen_ai.resumed")) {
			FUZZ_SPAN_CHECK(s, nres < npre,
					"otlp: span %s resumed without a preemption before",
					span->valuestring);
			FUZZ_SPAN_CHECK(s, preempted[nres] <= t,
					"otlp: span %s resumed before it was preempted",
					span->valuestring);
			nres++;
		}
	}
	cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(s, "attributes"))
	{
		const cJSON *k = cJSON_GetObjectItemCaseSensitive(a, "key");
		double v;

		if (!cJSON_IsString(k) || !fuzz_otlp_attr_number(a, &v))
			continue;
		if (fuzz_ends_with(k->valuestring, "_ns") ||
		    strstr(k->valuestring, "time_to_first_token") ||
		    strstr(k->valuestring, "time_per_output_token")) {
			double ms = fuzz_ends_with(k->valuestring, "_ns") ? v / 1e6 : v * 1e3;

			FUZZ_SPAN_CHECK(
			    s, ms >= 0 && ms <= fuzz_clock_span_ms(c) + 1e-6,
			    "otlp: %s = %g in span %s: a negative duration, or one longer "
			    "than the run",
			    k->valuestring, v, span->valuestring);
		}
	}
	if (run->n == run->cap) {
		run->cap = run->cap ? run->cap * 2 : 64;
		run->v = realloc(run->v, run->cap * sizeof(*run->v));
		if (!run->v)
			abort();
	}
	snprintf(run->v[run->n].trace, sizeof(run->v[0].trace), "%s", trace->valuestring);
	snprintf(run->v[run->n].span, sizeof(run->v[0].span), "%s", span->valuestring);
	snprintf(run->v[run->n].parent, sizeof(run->v[0].parent), "%s", ps);
	run->n++;
}

/* One batch: every span of every resource. */
FUZZ_CHECKER static inline void fuzz_otlp_meaning(const cJSON *batch, const struct fuzz_clock *c,
						  struct fuzz_otlp_run *run)
{
	const cJSON *rs, *ss, *s;

	cJSON_ArrayForEach(rs, cJSON_GetObjectItemCaseSensitive(batch, "resourceSpans"))
	{
		cJSON_ArrayForEach(ss, cJSON_GetObjectItemCaseSensitive(rs, "scopeSpans"))
		{
			cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(ss, "spans"))
			    fuzz_otlp_one_span(s, c, run);
		}
	}
}

static int fuzz_otlp_cmp_ids(const struct fuzz_otlp_span *a, const char *trace, const char *span)
{
	int d = strcmp(a->trace, trace);

	return d ? d : strcmp(a->span, span);
}

static const struct fuzz_otlp_span *fuzz_otlp_sorted;

static int fuzz_otlp_cmp_index(const void *a, const void *b)
{
	const struct fuzz_otlp_span *x = &fuzz_otlp_sorted[*(const size_t *)a];
	const struct fuzz_otlp_span *y = &fuzz_otlp_sorted[*(const size_t *)b];

	return fuzz_otlp_cmp_ids(x, y->trace, y->span);
}

/* The node (a place in order[], the first of its ids) of a span's ids; SIZE_MAX: none. */
static size_t fuzz_otlp_node(const struct fuzz_otlp_run *run, const size_t *order,
			     const char *trace, const char *span)
{
	size_t lo = 0, hi = run->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (fuzz_otlp_cmp_ids(&run->v[order[mid]], trace, span) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < run->n && !fuzz_otlp_cmp_ids(&run->v[order[lo]], trace, span) ? lo : SIZE_MAX;
}

/*
 * The run's spans: no chain of parents comes back to where it began. A span id may be seen more
 * than once (nothing forbids a client to send one header twice): such spans are one node with
 * every parent they were given, and no walk through the graph may close.
 */
FUZZ_CHECKER static inline void fuzz_otlp_run_end(struct fuzz_otlp_run *run)
{
	size_t n = run->n ? run->n : 1;
	size_t *order = malloc(n * sizeof(size_t)), *parent = malloc(n * sizeof(size_t));
	size_t *stack = malloc(n * sizeof(size_t)), *edge = malloc(n * sizeof(size_t));
	uint8_t *mark = calloc(n, 1); /* by node: 0 not seen, 1 on the walk, 2 done */

	if (!order || !parent || !stack || !edge || !mark)
		abort();
	for (size_t i = 0; i < run->n; i++)
		order[i] = i;
	fuzz_otlp_sorted = run->v;
	qsort(order, run->n, sizeof(size_t), fuzz_otlp_cmp_index);
	/* parent[k]: the node of the k-th span in order's parent, SIZE_MAX when none of the run */
	for (size_t k = 0; k < run->n; k++) {
		const struct fuzz_otlp_span *s = &run->v[order[k]];

		parent[k] =
		    s->parent[0] ? fuzz_otlp_node(run, order, s->trace, s->parent) : SIZE_MAX;
	}
	for (size_t root = 0; root < run->n; root++) {
		size_t depth = 0;

		if (mark[root] ||
		    (root && !fuzz_otlp_cmp_ids(&run->v[order[root - 1]], run->v[order[root]].trace,
						run->v[order[root]].span)))
			continue;
		stack[depth] = root;
		edge[depth++] = root;
		mark[root] = 1;
		while (depth) {
			size_t at = stack[depth - 1], k = edge[depth - 1], next = SIZE_MAX;

			/* The spans with at's ids are order[at..], while the ids stay the same. */
			for (; k < run->n &&
			       !fuzz_otlp_cmp_ids(&run->v[order[k]], run->v[order[at]].trace,
						  run->v[order[at]].span);
			     k++) {
				if (parent[k] != SIZE_MAX) {
					next = parent[k];
					k++;
					break;
				}
			}
			edge[depth - 1] = k;
			if (next == SIZE_MAX) {
				mark[at] = 2;
				depth--;
				continue;
			}
			FUZZ_CHECK(mark[next] != 1, "otlp: span %s of trace %s is its own ancestor",
				   run->v[order[next]].span, run->v[order[next]].trace);
			if (mark[next])
				continue;
			mark[next] = 1;
			stack[depth] = next;
			edge[depth++] = next;
		}
	}
	free(order);
	free(parent);
	free(stack);
	free(edge);
	free(mark);
	free(run->v);
	memset(run, 0, sizeof(*run));
}

#endif
