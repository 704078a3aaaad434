// SPDX-License-Identifier: MIT
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "lib/escape.h"
#include "lib/jsonw.h"
#include "pipeline/step.h"
#include "sinks/summary.h"

void summary_init(struct summary *s)
{
	memset(s, 0, sizeof(*s));
}

void summary_reset_interval(struct summary *s)
{
	uint32_t inflight = s->inflight;

	summary_init(s);
	s->inflight = s->inflight_max = inflight;
}

/* The ok requests' stalls, by cause. */
static void summary_stalls(struct summary *s, const struct request *r,
			   const struct gpu_attribution *ga)
{
	const struct stall_report *st = ga->stalls;

	if (!st || !st->n || r->outcome != OUTCOME_OK)
		return;
	s->stalled++;
	s->stalls += st->n;
	for (int c = 0; c < STALL_CAUSES; c++) {
		s->stall_count[c] += st->count[c];
		s->stall_ns[c] += st->ns[c];
	}
	s->stall_likely += st->likely;
}

void summary_gpu(struct summary *s, const struct request *r, const struct gpu_attribution *ga)
{
	if (ga)
		summary_stalls(s, r, ga);
	if (!ga || !ga->has_steps)
		return;
	if (request_abandoned(r)) {
		s->abandoned_steps_known++;
		s->abandoned_steps += ga->steps_after_gone;
	}
	/* As the latency histograms: over requests that worked. */
	for (uint32_t i = 0; r->outcome == OUTCOME_OK && i < ga->ne2s; i++)
		hist_add(&s->e2s, ga->e2s[i]);
	s->gpu_known++;
	if (!ga->preemptions)
		return;
	if (r->prompt_tokens >= 0)
		s->recomp_prompt += (uint64_t)r->prompt_tokens * ga->preemptions;
	else
		s->recomp_prompt_unknown++;
	s->recomp_generated += ga->recomputed_generated;
	s->recomp_ns += ga->recompute_ns;
	s->preempted++;
	s->preemptions += ga->preemptions;
	hist_add(&s->preempted_time, (uint64_t)ga->preempted_ns);
}

void summary_start(struct summary *s, const struct request *r)
{
	(void)r;
	s->inflight++;
	if (s->inflight > s->inflight_max)
		s->inflight_max = s->inflight;
}

static void summary_ttft_definitions(struct summary *s, const struct request *r,
				     const struct request_metrics *m)
{
	/* The requests of the TTFT line; each definition over those of them that had its event
	 * (a request with no answer text has no first content: its n says how many). */
	if (m->ttft_ns < 0)
		return;
	if (m->ttft_byte_ns >= 0)
		hist_add(&s->ttft_byte, m->ttft_byte_ns);
	if (m->ttft_chunk_ns >= 0)
		hist_add(&s->ttft_chunk, m->ttft_chunk_ns);
	if (m->ttft_text_ns >= 0)
		hist_add(&s->ttft_text, m->ttft_text_ns);
	if (r->first_byte_ns && r->first_chunk_ns && r->first_byte_ns < r->first_chunk_ns)
		s->byte_first++;
	if (r->first_chunk_ns && r->ntokens && r->first_chunk_ns < r->first_token_ns)
		s->chunk_first++;
	if (r->ntokens && (!r->first_text_ns || r->first_token_ns < r->first_text_ns))
		s->output_first++;
}

void summary_done(struct summary *s, const struct request *r, const struct request_metrics *m)
{
	if (s->inflight)
		s->inflight--;
	s->requests++;
	s->by_outcome[r->outcome]++;
	if (r->streamed)
		s->streamed++;
	if (m->tokens > 0)
		s->tokens += m->tokens;
	if (r->arrival_ns && (!s->window_start_ns || r->arrival_ns < s->window_start_ns))
		s->window_start_ns = r->arrival_ns;
	if (r->end_ns > s->window_end_ns)
		s->window_end_ns = r->end_ns;
	slo_tally_add(&s->slo, r->info.model, &m->slo, m->tokens, r->slo_head.bad);
	if (r->labels.spec) {
		s->labels = r->labels.spec;
		for (uint32_t i = 0; i < r->labels.spec->n; i++)
			slo_tally_add(&s->slo_by_label[i], r->labels.set[i] ? r->labels.v[i] : "",
				      &m->slo, m->tokens, false);
	}
	if (m->cache_guess == CACHE_REPORTED && r->prompt_tokens >= 0) {
		s->cache_reported++;
		s->cache_prompt += (uint64_t)r->prompt_tokens;
		s->cache_cached += (uint64_t)r->cached_tokens;
	} else if (m->cache_guess != CACHE_REPORTED) {
		s->cache_guess[m->cache_guess]++;
	}
	if (request_abandoned(r)) {
		s->abandoned++;
		s->abandoned_frames += r->gone_frames;
		s->abandoned_bytes += r->gone_bytes;
		s->abandoned_failed += r->gone_failed_writes;
		if (m->went_on_ns >= 0) {
			hist_add(&s->went_on, (uint64_t)m->went_on_ns);
			s->abandoned_went_on += m->went_on_ns > 0;
		}
	}
	if (m->e2e_ns >= 0) {
		s->busy_ns += m->e2e_ns;
		hist_add(&s->e2e, m->e2e_ns);
	}
	/* Latency percentiles describe requests that worked; failures are counted above. */
	if (r->outcome != OUTCOME_OK)
		return;
	if (m->ttft_ns >= 0)
		hist_add(&s->ttft, m->ttft_ns);
	summary_ttft_definitions(s, r, m);
	if (m->proxy_ttft_ns >= 0)
		hist_add(&s->proxy_ttft, m->proxy_ttft_ns);
	if (m->tpot_ns >= 0)
		hist_add(&s->tpot, m->tpot_ns);
	for (uint32_t i = 1; i < r->ntokens; i++) {
		hist_add(&s->itl, r->token_ns[i] - r->token_ns[i - 1]);
		/* A frame's time is its write's: frames of one write are 0 apart. */
		if (r->token_ns[i] == r->token_ns[i - 1])
			s->itl_same_write++;
	}
}

/* The larger relative difference of two histograms' P50 and P99 (a against b), in percent. */
static double summary_differ(const struct hist *a, const struct hist *b)
{
	double worst = 0;
	static const double qs[] = { 0.50, 0.99 };

	if (!a->count || !b->count)
		return 0;
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		double x = hist_quantile(a, qs[i]), y = hist_quantile(b, qs[i]);
		double d = y > 0 ? 100.0 * (x - y) / y : 0;

		if (fabs(d) > fabs(worst))
			worst = d;
	}
	return worst;
}

static void print_definition(FILE *f, const char *name, const struct hist *h, const char *who)
{
	if (!h->count) {
		fprintf(f, "    %-14s %9s %9s %9s %6s  %s\n", name, "-", "-", "-", "0", who);
		return;
	}
	fprintf(f, "    %-14s %9.2f %9.2f %9.2f %6llu  %s\n", name, hist_quantile(h, 0.50) / 1e6,
		hist_quantile(h, 0.90) / 1e6, hist_quantile(h, 0.99) / 1e6,
		(unsigned long long)h->count, who);
}

/* One line per definition that differs from the first output by more than
 * SUMMARY_TTFT_DIFFER percent at P50 or P99, with the cause the requests show. */
#define SUMMARY_TTFT_DIFFER 10.0

/* The definitions that differ from the first output (the first byte: from the first chunk),
 * each as a sentence naming the cause, into out; returns how many. */
#define SUMMARY_DIFFERS_MAX 3
#define SUMMARY_DIFFER_LEN 256

static int summary_ttft_differs(const struct summary *s,
				char out[SUMMARY_DIFFERS_MAX][SUMMARY_DIFFER_LEN])
{
	unsigned long long n = s->ttft.count;
	int k = 0;
	double d;

	if (!n)
		return 0;
	d = summary_differ(&s->ttft_chunk, &s->ttft);
	if (fabs(d) > SUMMARY_TTFT_DIFFER)
		snprintf(out[k++], SUMMARY_DIFFER_LEN,
			 "first chunk %+.0f%% against first output: %llu of %llu requests sent a "
			 "chunk with no output first (a role-only chunk, which vllm bench serve "
			 "counts)",
			 d, (unsigned long long)s->chunk_first, n);
	d = summary_differ(&s->ttft_text, &s->ttft);
	if (!s->ttft_text.count)
		snprintf(out[k++], SUMMARY_DIFFER_LEN,
			 "first content: none of %llu requests streamed answer text (reasoning or "
			 "tool calls only), so content-only TTFT has no value",
			 n);
	else if (fabs(d) > SUMMARY_TTFT_DIFFER)
		snprintf(out[k++], SUMMARY_DIFFER_LEN,
			 "first content %+.0f%% against first output: %llu of %llu requests "
			 "streamed reasoning or a tool call before any answer text (or none at "
			 "all), which content-only TTFT counts as waiting",
			 d, (unsigned long long)s->output_first, n);
	d = summary_differ(&s->ttft_byte, s->ttft_chunk.count ? &s->ttft_chunk : &s->ttft);
	if (fabs(d) > SUMMARY_TTFT_DIFFER)
		snprintf(
		    out[k++], SUMMARY_DIFFER_LEN,
		    "first byte %+.0f%% against first %s: %llu of %llu requests sent body "
		    "bytes before their first message (an early flush, a comment or keep-alive "
		    "line)",
		    d, s->ttft_chunk.count ? "chunk" : "output", (unsigned long long)s->byte_first,
		    n);
	return k;
}

static void print_ttft_definitions(FILE *f, const struct summary *s)
{
	char differs[SUMMARY_DIFFERS_MAX][SUMMARY_DIFFER_LEN];
	int n;

	if (!s->ttft.count)
		return;
	fprintf(f, "  %-16s %9s %9s %9s %6s  %s\n", "TTFT definition", "p50 ms", "p90 ms", "p99 ms",
		"n", "as counted by");
	print_definition(f, "first byte", &s->ttft_byte, "response body's first byte");
	print_definition(f, "first chunk", &s->ttft_chunk, "vllm bench serve");
	print_definition(f, "first content", &s->ttft_text, "AIPerf, LLMPerf (answer text)");
	print_definition(f, "first output", &s->ttft, "tokenscope's TTFT");
	n = summary_ttft_differs(s, differs);
	for (int i = 0; i < n; i++)
		fprintf(f, "  TTFT differs: %s\n", differs[i]);
}

/* The same in the JSON summary: each definition's histogram, the causes' counts, the lines. */
static void json_ttft_definitions(struct jsonw *w, const struct summary *s, bool buckets)
{
	char differs[SUMMARY_DIFFERS_MAX][SUMMARY_DIFFER_LEN];
	int n = summary_ttft_differs(s, differs);

	jsonw_obj_begin(w, "ttft_definitions");
	summary_json_hist(w, "first_byte_ms", &s->ttft_byte, buckets);
	summary_json_hist(w, "first_chunk_ms", &s->ttft_chunk, buckets);
	summary_json_hist(w, "first_content_ms", &s->ttft_text, buckets);
	summary_json_hist(w, "first_output_ms", &s->ttft, buckets);
	jsonw_u64(w, "byte_first", s->byte_first);
	jsonw_u64(w, "chunk_first", s->chunk_first);
	jsonw_u64(w, "output_first", s->output_first);
	jsonw_arr_begin(w, "differs");
	for (int i = 0; i < n; i++)
		jsonw_str(w, NULL, differs[i]);
	jsonw_arr_end(w);
	jsonw_obj_end(w);
}

static void print_hist(FILE *f, const char *name, const struct hist *h)
{
	if (!h->count) {
		fprintf(f, "  %-5s %8s\n", name, "-");
		return;
	}
	fprintf(f, "  %-5s p50 %9.2f  p90 %9.2f  p99 %9.2f  max %9.2f ms  (n=%llu)\n", name,
		hist_quantile(h, 0.50) / 1e6, hist_quantile(h, 0.90) / 1e6,
		hist_quantile(h, 0.99) / 1e6, h->max / 1e6, (unsigned long long)h->count);
}

/* The window from the first arrival to the last end, in seconds (0: none yet). */
static double summary_window_s(const struct summary *s)
{
	return s->window_end_ns > s->window_start_ns ? (s->window_end_ns - s->window_start_ns) / 1e9
						     : 0;
}

/* x over y, 0 where y is none: x per second of the window (busy_ns per second is the mean in
 * flight), or a share of a whole (the cost line's CPU and ring). */
static double ratio(double x, double y)
{
	return y > 0 ? x / y : 0.0;
}

/* The device-time lines of a process's summary: what was collected, and what it cost. */
static void gpu_devtime_lines(const struct gpu_proc_report *c, FILE *f)
{
	const struct ts_devtime_stats *st = &c->devtime_stats;
	uint64_t oh = 0;

	/* A library of ABI version 1 collected every step and counted none of this. */
	if (!st->mode)
		return;
	if (st->mode == TS_DEVTIME_MODE_SAMPLED)
		fprintf(f,
			"    device times sampled: eager kernels %.1f s of every %.1f s (%llu "
			"windows); steps: %llu with device times, %llu sampled out\n",
			st->sample_on_ms / 1e3, st->sample_period_ms / 1e3,
			(unsigned long long)st->windows, (unsigned long long)c->steps_device,
			(unsigned long long)c->steps_sampled_out);
	else
		fprintf(f, "    device times of every step: %llu steps with device times\n",
			(unsigned long long)c->steps_device);
	for (int k = 0; k < TS_DEVTIME_OVERHEADS; k++)
		oh += st->overhead_ns[k];
	fprintf(f,
		"    device times cost: %llu buffers read in %.1f ms (%.1f us per buffer, %.0f ns "
		"per record)\n",
		(unsigned long long)st->buffers, st->read_ns / 1e6,
		st->buffers ? st->read_ns / 1e3 / st->buffers : 0.0,
		st->records ? (double)st->read_ns / st->records : 0.0);
	fprintf(f,
		"    CUPTI overhead: %llu records, %.1f ms (buffer flush %.1f, instrumentation "
		"%.1f, resource %.1f, other %.1f)\n",
		(unsigned long long)st->overhead_records, oh / 1e6,
		st->overhead_ns[TS_DEVTIME_OVERHEAD_FLUSH] / 1e6,
		st->overhead_ns[TS_DEVTIME_OVERHEAD_INSTRUMENTATION] / 1e6,
		st->overhead_ns[TS_DEVTIME_OVERHEAD_RESOURCE] / 1e6,
		st->overhead_ns[TS_DEVTIME_OVERHEAD_OTHER] / 1e6);
}

/* The prefill and mixed steps' time of every GPU process of g. */
static uint64_t prefill_time(const struct gpu_report *g)
{
	uint64_t ns = 0;

	for (uint32_t i = 0; g && i < g->nprocs; i++)
		for (int k = 0; k < STEP_KIND_MAX; k++)
			if ((k == STEP_PREFILL || k == STEP_MIXED) && g->procs[i].dur[k])
				ns += g->procs[i].dur[k]->sum;
	return ns;
}

void summary_print_recompute(const struct summary *s, const struct gpu_report *g, FILE *f)
{
	uint64_t pre = prefill_time(g);

	if (!s->preemptions)
		return;
	fprintf(f, "  recompute tax: %llu preemptions recomputed %llu prompt tokens",
		(unsigned long long)s->preemptions, (unsigned long long)s->recomp_prompt);
	if (s->recomp_prompt_unknown)
		fprintf(f, " (and %llu requests' prompts not reported)",
			(unsigned long long)s->recomp_prompt_unknown);
	fprintf(f, " and %llu generated;\n        %.1f ms of recompute steps",
		(unsigned long long)s->recomp_generated, s->recomp_ns / 1e6);
	if (pre)
		fprintf(f, ", %.1f %% of the prefill and mixed steps' %.1f ms",
			100.0 * s->recomp_ns / pre, pre / 1e6);
	fputc('\n', f);
}

void summary_print_stalls(const struct summary *s, FILE *f)
{
	const char *sep = "";

	if (!s->stalls)
		return;
	fprintf(f, "  stalls: %llu gaps in %llu requests:", (unsigned long long)s->stalls,
		(unsigned long long)s->stalled);
	for (int c = 0; c < STALL_CAUSES; c++) {
		if (!s->stall_count[c])
			continue;
		fprintf(f, "%s %s %llu (%.1f s)", sep, stall_cause_name(c),
			(unsigned long long)s->stall_count[c], s->stall_ns[c] / 1e9);
		sep = ",";
	}
	if (s->stall_likely)
		fprintf(f, "; %llu likely (no GPU steps)", (unsigned long long)s->stall_likely);
	fputc('\n', f);
}

void summary_json_stalls(struct jsonw *w, const struct summary *s)
{
	jsonw_obj_begin(w, "stalls");
	jsonw_u64(w, "gaps", s->stalls);
	jsonw_u64(w, "requests", s->stalled);
	jsonw_u64(w, "likely", s->stall_likely);
	jsonw_obj_begin(w, "by_cause");
	for (int c = 0; c < STALL_CAUSES; c++) {
		if (!s->stall_count[c])
			continue;
		jsonw_obj_begin(w, stall_cause_name(c));
		jsonw_u64(w, "gaps", s->stall_count[c]);
		jsonw_num(w, "ms", s->stall_ns[c] / 1e6, 3);
		jsonw_obj_end(w);
	}
	jsonw_obj_end(w);
	jsonw_obj_end(w);
}

void summary_json_recompute(struct jsonw *w, const struct summary *s, const struct gpu_report *g)
{
	uint64_t pre = prefill_time(g);

	if (!s->preemptions) {
		jsonw_null(w, "recompute");
		return;
	}
	jsonw_obj_begin(w, "recompute");
	jsonw_u64(w, "preemptions", s->preemptions);
	jsonw_u64(w, "prompt_tokens", s->recomp_prompt);
	jsonw_u64(w, "prompt_unknown", s->recomp_prompt_unknown);
	jsonw_u64(w, "generated_tokens", s->recomp_generated);
	jsonw_num(w, "recompute_ms", s->recomp_ns / 1e6, 3);
	if (pre)
		jsonw_num(w, "share_of_prefill", (double)s->recomp_ns / (double)pre, 4);
	else
		jsonw_null(w, "share_of_prefill");
	jsonw_obj_end(w);
}

/* Graph coverage (docs/gpu.md "Graph coverage"): a process's decode steps by mode, with the
 * batch sizes each mode ran at. */
static void summary_print_coverage(const struct gpu_proc_report *p, FILE *f)
{
	uint64_t all = 0;
	const char *sep = "";

	for (int m = 0; m < MODE_MAX; m++)
		all += p->coverage[m].steps;
	if (!all)
		return;
	fprintf(f, "    decode steps by mode:");
	for (int m = 0; m < MODE_MAX; m++) {
		const struct gpu_coverage *c = &p->coverage[m];

		if (!c->steps)
			continue;
		fprintf(f, "%s %s %.1f%% (batch %u-%u)", sep, gpu_mode_name(m),
			100.0 * c->steps / all, c->batch_lo, c->batch_hi);
		sep = ",";
	}
	fputc('\n', f);
}

void summary_print_gpu(const struct gpu_report *g, FILE *f)
{
	for (uint32_t i = 0; i < g->nprocs; i++) {
		const struct gpu_proc_report *p = &g->procs[i];
		uint64_t steps = 0;
		double wall = p->last_ns > p->first_ns ? (p->last_ns - p->first_ns) / 1e9 : 0;

		for (int k = 0; k < STEP_KIND_MAX; k++)
			steps += p->steps[k];
		fprintf(
		    f,
		    "  GPU pid %u: %llu steps (prefill %llu, decode %llu, mixed %llu, other %llu), "
		    "%.1f steps/s, %.1f launches and %.2f graph launches per step, host waiting "
		    "%.1f%% of %.3f s\n",
		    p->pid, (unsigned long long)steps, (unsigned long long)p->steps[STEP_PREFILL],
		    (unsigned long long)p->steps[STEP_DECODE],
		    (unsigned long long)p->steps[STEP_MIXED],
		    (unsigned long long)p->steps[STEP_OTHER], wall > 0 ? steps / wall : 0.0,
		    steps ? (double)p->launches / steps : 0.0,
		    steps ? (double)p->graph_launches / steps : 0.0,
		    wall > 0 ? 100.0 * p->wait_ns / 1e9 / wall : 0.0, wall);
		if (p->device_times) {
			const struct ts_devtime_stats *st = &p->devtime_stats;

			fprintf(f,
				"    device (CUPTI): %llu runs, %.3f s busy (%.1f%% of the wall "
				"time), %llu runs shown late, %llu in no step; clock %s",
				(unsigned long long)p->runs, p->busy_ns / 1e9,
				wall > 0 ? 100.0 * p->busy_ns / 1e9 / wall : 0.0,
				(unsigned long long)p->late, (unsigned long long)p->unplaced,
				st->clock == TS_DEVTIME_CLOCK_CALLBACK
				    ? "CLOCK_MONOTONIC from CUPTI"
				: st->clock == TS_DEVTIME_CLOCK_OFFSET ? "offset"
								       : "unknown");
			if (st->clock == TS_DEVTIME_CLOCK_OFFSET)
				fprintf(f, " (error <= %.1f us)", st->clock_err_ns / 1e3);
			fprintf(f, "; %llu operations without a launch time\n",
				(unsigned long long)st->no_launch);
			gpu_devtime_lines(p, f);
		}
		for (int k = 0; k < STEP_KIND_MAX; k++) {
			const struct hist *h = p->dur[k];

			if (!h || !h->count)
				continue;
			fprintf(f, "    %-7s step p50 %8.2f  p99 %8.2f  max %8.2f ms  (n=%llu)\n",
				gpu_kind_name(k), hist_quantile(h, 0.5) / 1e6,
				hist_quantile(h, 0.99) / 1e6, h->max / 1e6,
				(unsigned long long)h->count);
		}
		summary_print_coverage(p, f);
	}
	if (g->procs_dropped)
		fprintf(f, "  GPU: steps of %llu more processes are not in these statistics\n",
			(unsigned long long)g->procs_dropped);
	if (g->batch_early || g->batch_late)
		fprintf(f,
			"  GPU: %llu steps shown before their batch was complete (%u held at "
			"once), %llu tokens written after their step was shown\n",
			(unsigned long long)g->batch_early, g->held_max,
			(unsigned long long)g->batch_late);
}

/* A counter's phrase: its count, and the member its phrase shows after it. */
static void loss_phrase(FILE *f, const struct loss_report *loss, const struct loss_counter *c)
{
	fprintf(f, c->phrase, (unsigned long long)loss_value(loss, c),
		(unsigned long long)loss_param(loss, c));
}

/* One line of the loss table's counters shown in it (text), in the table's order. */
static void loss_line(FILE *f, const struct loss_report *loss, enum loss_text text,
		      const char *title)
{
	const char *sep = "";

	fprintf(f, "  %s: ", title);
	for (size_t i = 0; i < loss_ncounters; i++) {
		if (loss_counters[i].text != text)
			continue;
		fputs(sep, f);
		loss_phrase(f, loss, &loss_counters[i]);
		sep = ", ";
	}
	fputc('\n', f);
}

void summary_print(const struct summary *s, const struct loss_report *loss, const char *title,
		   FILE *f)
{
	double window_s = summary_window_s(s);

	fprintf(f, "--- %s: %llu requests (%llu streamed)", title, (unsigned long long)s->requests,
		(unsigned long long)s->streamed);
	if (s->requests)
		fprintf(f, ", success %.1f%%",
			100.0 * s->by_outcome[OUTCOME_OK] / (double)s->requests);
	fprintf(f, "\n  outcome");
	for (int o = 0; o < OUTCOME_MAX; o++)
		fprintf(f, " %s=%llu", outcome_name(o), (unsigned long long)s->by_outcome[o]);
	fprintf(f, "\n  in flight: max %u, mean %.2f, now %u\n", s->inflight_max,
		ratio(s->busy_ns / 1e9, window_s), s->inflight);
	print_hist(f, "TTFT", &s->ttft);
	print_hist(f, "ITL", &s->itl);
	if (s->itl_same_write)
		fprintf(f,
			"        %llu of the %llu gaps are 0: frames written together in one "
			"write\n",
			(unsigned long long)s->itl_same_write, (unsigned long long)s->itl.count);
	if (s->preempted)
		fprintf(
		    f,
		    "        preempted: %llu of %llu requests with GPU steps (%llu times), %.1f ms "
		    "out of the batch per preempted request\n",
		    (unsigned long long)s->preempted, (unsigned long long)s->gpu_known,
		    (unsigned long long)s->preemptions,
		    (double)s->preempted_time.sum / (double)s->preempted_time.count / 1e6);
	if (s->e2s.count) {
		print_hist(f, "E2S", &s->e2s);
		fprintf(f, "        engine to socket: a token's step's end to the write that "
			   "carried it\n");
	}
	print_hist(f, "TPOT", &s->tpot);
	print_hist(f, "E2E", &s->e2e);
	print_ttft_definitions(f, s);
	/* Over the requests' own span, not the interval's: a rate while they ran. */
	fprintf(f, "  tokens %llu, %.1f tokens/s over %.3f s (first arrival to last end)\n",
		(unsigned long long)s->tokens, ratio(s->tokens, window_s), window_s);
	/* A traced proxy: how much of its TTFT was its own, the rest its upstream's. */
	if (s->proxy_ttft.count)
		fprintf(
		    f,
		    "  proxy: %llu requests paired with their upstream requests; the proxy's own "
		    "part of their TTFT p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
		    (unsigned long long)s->proxy_ttft.count,
		    hist_quantile(&s->proxy_ttft, 0.50) / 1e6,
		    hist_quantile(&s->proxy_ttft, 0.99) / 1e6, s->proxy_ttft.max / 1e6);
	loss_line(f, loss, LOSS_T_LOST, "lost");
	loss_line(f, loss, LOSS_T_DROPPED, "dropped");
	for (size_t i = 0; i < loss_ncounters; i++) {
		const struct loss_counter *c = &loss_counters[i];

		if (c->text == LOSS_T_ALONE && loss_value(loss, c)) {
			fputs("  lost: ", f);
			loss_phrase(f, loss, c);
			fputc('\n', f);
		}
	}
	if (loss->device_times || loss->device_abi_bad)
		loss_line(f, loss, LOSS_T_DEVICE, "lost (device times)");
	/* Says why a run can show no requests: another protocol on the sockets, HTTP/2 joined
	 * after its start, or TLS from a library that is not hooked. */
	fprintf(f, "  connections: %llu serving HTTP/1.x", (unsigned long long)loss->http_conns);
	if (loss->h2_conns)
		fprintf(f, ", %llu serving HTTP/2", (unsigned long long)loss->h2_conns);
	fprintf(f, ", %llu ignored (another protocol)", (unsigned long long)loss->ignored_conns);
	if (loss->h2_midway)
		fprintf(f,
			", %llu HTTP/2 first seen after their start (header table unknown: not "
			"followed)",
			(unsigned long long)loss->h2_midway);
	if (loss->joined_conns)
		fprintf(f, "; joined mid-stream: %llu, of which %llu waiting for a request",
			(unsigned long long)loss->joined_conns,
			(unsigned long long)loss->waiting_conns);
	if (loss->client_conns)
		fprintf(f, "; %llu calling an HTTP server (requests with role client)",
			(unsigned long long)loss->client_conns);
	if (loss->tls_conns)
		fprintf(f,
			"; %llu carried TLS, of which %llu ended with no plaintext seen (no TLS "
			"library hooked)",
			(unsigned long long)loss->tls_conns, (unsigned long long)loss->tls_unread);
	fputc('\n', f);
	if (!loss->tls_conns && !loss->tls_unjoined && !loss->tls_wire_writes)
		return;
	/* A TLS write's time is its library call's: how far ahead of the socket that is; and the
	 * plaintext that could not be put on a connection. */
	fprintf(f, "  tls: %llu socket writes of TLS records",
		(unsigned long long)loss->tls_wire_writes);
	if (loss->tls_wire_writes)
		fprintf(f, ", on average %.1f us after the TLS write call they carry",
			(double)loss->tls_wire_ns / (double)loss->tls_wire_writes / 1e3);
	fprintf(f, "; %llu TLS calls whose socket was not found (their plaintext lost)\n",
		(unsigned long long)loss->tls_unjoined);
}

void summary_print_cache(const struct summary *s, FILE *f)
{
	uint64_t guessed = s->cache_guess[CACHE_LIKELY] + s->cache_guess[CACHE_COLD];

	if (!s->cache_reported && !guessed)
		return;
	fprintf(f, "  prefix cache: ");
	if (s->cache_reported)
		fprintf(f, "hit rate %.1f%% (%llu of %llu prompt tokens cached) over the %llu %s",
			s->cache_prompt ? 100.0 * s->cache_cached / s->cache_prompt : 0.0,
			(unsigned long long)s->cache_cached, (unsigned long long)s->cache_prompt,
			(unsigned long long)s->cache_reported,
			s->cache_reported == 1 ? "request that reports it"
					       : "requests that report it");
	if (s->cache_reported && guessed)
		fprintf(f, ";\n        ");
	if (guessed)
		fprintf(f,
			"not reported: %llu likely cached, %llu cold, %llu unknown (from prefill "
			"time per prompt token)",
			(unsigned long long)s->cache_guess[CACHE_LIKELY],
			(unsigned long long)s->cache_guess[CACHE_COLD],
			(unsigned long long)s->cache_guess[CACHE_UNKNOWN]);
	fputc('\n', f);
}

void summary_json_cache(struct jsonw *w, const struct summary *s)
{
	jsonw_obj_begin(w, "prefix_cache");
	jsonw_u64(w, "reported_requests", s->cache_reported);
	jsonw_u64(w, "prompt_tokens", s->cache_prompt);
	jsonw_u64(w, "cached_tokens", s->cache_cached);
	if (s->cache_prompt)
		jsonw_num(w, "hit_rate", (double)s->cache_cached / (double)s->cache_prompt, 4);
	else
		jsonw_null(w, "hit_rate");
	jsonw_obj_begin(w, "not_reported");
	for (int g = CACHE_LIKELY; g < CACHE_GUESSES; g++)
		jsonw_u64(w, cache_guess_name(g), s->cache_guess[g]);
	jsonw_obj_end(w);
	jsonw_obj_end(w);
}

void summary_print_abandoned(const struct summary *s, FILE *f)
{
	if (!s->abandoned)
		return;
	if (!s->abandoned_went_on && !s->abandoned_frames && !s->abandoned_failed) {
		fprintf(f,
			"  abandoned: %llu requests left by their clients; the server wrote "
			"nothing more for any of them\n",
			(unsigned long long)s->abandoned);
		return;
	}
	fprintf(f,
		"  abandoned: %llu requests left by their clients; the server went on for "
		"%.1f ms on average (p99 %.1f ms),\n",
		(unsigned long long)s->abandoned,
		s->went_on.count ? (double)s->went_on.sum / (double)s->went_on.count / 1e6 : 0.0,
		s->went_on.count ? hist_quantile(&s->went_on, 0.99) / 1e6 : 0.0);
	fprintf(f, "        writing %llu frames nobody read (%llu bytes), %llu more writes failed",
		(unsigned long long)s->abandoned_frames, (unsigned long long)s->abandoned_bytes,
		(unsigned long long)s->abandoned_failed);
	if (s->abandoned_steps_known)
		fprintf(f, "; %llu GPU steps ran for them", (unsigned long long)s->abandoned_steps);
	fputc('\n', f);
}

void summary_json_abandoned(struct jsonw *w, const struct summary *s)
{
	jsonw_obj_begin(w, "abandoned");
	jsonw_u64(w, "requests", s->abandoned);
	jsonw_u64(w, "went_on", s->abandoned_went_on);
	summary_json_hist(w, "went_on_ms", &s->went_on, false);
	jsonw_u64(w, "frames_after", s->abandoned_frames);
	jsonw_u64(w, "bytes_after", s->abandoned_bytes);
	jsonw_u64(w, "failed_writes", s->abandoned_failed);
	if (s->abandoned_steps_known)
		jsonw_u64(w, "gpu_steps_after", s->abandoned_steps);
	else
		jsonw_null(w, "gpu_steps_after");
	jsonw_obj_end(w);
}

/* "71.4% (5 of 7)", or "- (0 of 0)" when none was judged on it. */
static void slo_share(char *out, size_t n, const struct slo_counts *c, int metric)
{
	double a = slo_attainment(c, metric);

	if (isnan(a))
		snprintf(out, n, "- (none judged)");
	else
		snprintf(out, n, "%.1f%% (%llu of %llu)", 100 * a,
			 (unsigned long long)c->n[metric][SLO_MET],
			 (unsigned long long)slo_judged(c, metric));
}

/* Which objectives were set at all (by a flag or a header), over the tally. */
static bool slo_metric_used(const struct slo_counts *c, int metric)
{
	for (int r = SLO_MET; r < SLO_RESULTS; r++)
		if (c->n[metric][r])
			return true;
	return false;
}

/* A line per value of what t is split by (a model, a --label's values). */
static void slo_print_split(const struct slo_tally *t, const char *by, const char *none,
			    double window_s, FILE *f)
{
	char share[64], name[ESCAPE_COL_BYTES(24)];

	fprintf(f, "        by %s:\n", by);
	for (uint32_t i = 0; i < t->nmodels; i++) {
		const struct slo_counts *mc = &t->model[i].c;

		slo_share(share, sizeof(share), mc, SLO_METRICS);
		/* 24 cells, cut at a character (a byte count would cut one in two) */
		fprintf(f, "          %s all %s, goodput %.2f requests/s\n",
			escape_text_col(name, sizeof(name),
					t->model[i].model[0] ? t->model[i].model : none, 24, true),
			share, ratio(mc->good_requests, window_s));
	}
}

void summary_print_slo(const struct summary *s, const struct slo_rules *rules, FILE *f)
{
	const struct slo_counts *c = &s->slo.all;
	const uint64_t *all = c->n[SLO_METRICS];
	double window_s = summary_window_s(s);
	char share[64];

	if (!all[SLO_MET] && !all[SLO_MISSED] && !all[SLO_UNKNOWN] && !all[SLO_ABORTED]) {
		if (s->slo.head_bad)
			fprintf(f,
				"  SLO   %llu requests sent llm-d objectives that are no number "
				"of ms (ignored)\n",
				(unsigned long long)s->slo.head_bad);
		return;
	}
	slo_share(share, sizeof(share), c, SLO_METRICS);
	fprintf(f, "  SLO   all %s", share);
	for (int k = 0; k < SLO_METRICS; k++) {
		if (!slo_metric_used(c, k))
			continue;
		slo_share(share, sizeof(share), c, k);
		fprintf(f, "   %s %s", slo_metric_names[k], share);
	}
	fprintf(f,
		"\n        apart: %llu aborted by their clients, %llu unknown (a figure not there)",
		(unsigned long long)all[SLO_ABORTED], (unsigned long long)all[SLO_UNKNOWN]);
	if (c->from_header || s->slo.head_bad)
		fprintf(f,
			"\n        llm-d headers: %llu requests set objectives, %llu sent values "
			"that are no number of ms",
			(unsigned long long)c->from_header, (unsigned long long)s->slo.head_bad);
	fprintf(f,
		"\n        goodput %.2f requests/s, %.1f tokens/s (those that met every "
		"objective)\n",
		ratio(c->good_requests, window_s), ratio(c->good_tokens, window_s));
	if (rules && rules->n) {
		size_t col = (size_t)fprintf(f, "        objectives:");

		/* A rule per line once they pass 100 columns. */
		for (uint32_t i = 0; i < rules->n; i++) {
			char text[512];

			slo_rule_text(&rules->rule[i], text, sizeof(text));
			if (i && col + strlen(text) + 2 > 100) {
				fputs(";\n                   ", f);
				col = 19;
			} else if (i) {
				fputc(';', f);
				col++;
			}
			col += (size_t)fprintf(f, " %s", text);
		}
		fputc('\n', f);
	}
	if (s->slo.nmodels >= 2)
		slo_print_split(&s->slo, "model", "(no model)", window_s, f);
	for (uint32_t i = 0; s->labels && i < s->labels->n; i++)
		slo_print_split(&s->slo_by_label[i], s->labels->l[i].name, "(none)", window_s, f);
}

static void slo_counts_json(struct jsonw *w, const struct slo_counts *c, double window_s)
{
	jsonw_obj_begin(w, "attainment");
	for (int k = 0; k <= SLO_METRICS; k++) {
		const char *key = k == SLO_METRICS ? "all" : slo_metric_names[k];
		double a = slo_attainment(c, k);

		if (k < SLO_METRICS && !slo_metric_used(c, k))
			continue;
		if (isnan(a))
			jsonw_null(w, key);
		else
			jsonw_num(w, key, a, 4);
	}
	jsonw_obj_end(w);
	jsonw_obj_begin(w, "counts");
	for (int k = 0; k <= SLO_METRICS; k++) {
		if (k < SLO_METRICS && !slo_metric_used(c, k))
			continue;
		jsonw_obj_begin(w, k == SLO_METRICS ? "all" : slo_metric_names[k]);
		for (int r = SLO_MET; r < SLO_RESULTS; r++)
			jsonw_u64(w, slo_result_name(r), c->n[k][r]);
		jsonw_obj_end(w);
	}
	jsonw_obj_end(w);
	jsonw_obj_begin(w, "goodput");
	jsonw_u64(w, "requests", c->good_requests);
	jsonw_u64(w, "tokens", c->good_tokens);
	jsonw_num(w, "requests_per_s", ratio(c->good_requests, window_s), 3);
	jsonw_num(w, "tokens_per_s", ratio(c->good_tokens, window_s), 1);
	jsonw_obj_end(w);
	jsonw_u64(w, "from_header", c->from_header);
}

void summary_json_slo(struct jsonw *w, const struct summary *s, const struct slo_rules *rules)
{
	double window_s = summary_window_s(s);

	if (!s->slo.all.n[SLO_METRICS][SLO_MET] && !s->slo.all.n[SLO_METRICS][SLO_MISSED] &&
	    !s->slo.all.n[SLO_METRICS][SLO_UNKNOWN] && !s->slo.all.n[SLO_METRICS][SLO_ABORTED] &&
	    !(rules && rules->n)) {
		jsonw_null(w, "slo");
		return;
	}
	jsonw_obj_begin(w, "slo");
	jsonw_arr_begin(w, "objectives");
	for (uint32_t i = 0; rules && i < rules->n; i++) {
		char text[512];

		slo_rule_text(&rules->rule[i], text, sizeof(text));
		jsonw_str(w, NULL, text);
	}
	jsonw_arr_end(w);
	slo_counts_json(w, &s->slo.all, window_s);
	jsonw_u64(w, "header_invalid", s->slo.head_bad);
	jsonw_arr_begin(w, "by_model");
	for (uint32_t i = 0; i < s->slo.nmodels; i++) {
		jsonw_obj_begin(w, NULL);
		jsonw_str(w, "model", s->slo.model[i].model);
		slo_counts_json(w, &s->slo.model[i].c, window_s);
		jsonw_obj_end(w);
	}
	jsonw_arr_end(w);
	/* Per --label: its values (8, then the rest together) as by_model. */
	jsonw_obj_begin(w, "by_label");
	for (uint32_t l = 0; s->labels && l < s->labels->n; l++) {
		const struct slo_tally *t = &s->slo_by_label[l];

		jsonw_arr_begin(w, s->labels->l[l].name);
		for (uint32_t i = 0; i < t->nmodels; i++) {
			jsonw_obj_begin(w, NULL);
			jsonw_str(w, "value", t->model[i].model);
			slo_counts_json(w, &t->model[i].c, window_s);
			jsonw_obj_end(w);
		}
		jsonw_arr_end(w);
	}
	jsonw_obj_end(w);
	jsonw_obj_end(w);
}

/* The connections looked at, by name (the summary's connections line). */
static const struct {
	const char *key;
	size_t off;
} conn_counters[] = {
#define CONN(key, field)                                 \
	{                                                \
		key, offsetof(struct loss_report, field) \
	}
	CONN("http", http_conns),	  CONN("h2", h2_conns),
	CONN("ignored", ignored_conns),	  CONN("h2_midway", h2_midway),
	CONN("local_other", local_other), CONN("client", client_conns),
	CONN("tls", tls_conns),		  CONN("joined", joined_conns),
	CONN("waiting", waiting_conns),	  CONN("joined_reported", joined_reported),
#undef CONN
};

/* The loss table's counters of one JSON object ("lost" or "dropped"). */
static void losses_json(struct jsonw *w, const char *key, const struct loss_report *loss,
			enum loss_json json)
{
	jsonw_obj_begin(w, key);
	for (size_t i = 0; i < loss_ncounters; i++)
		if (loss_counters[i].json == json)
			jsonw_u64(w, loss_counters[i].key, loss_value(loss, &loss_counters[i]));
	jsonw_obj_end(w);
}

void summary_json_hist(struct jsonw *w, const char *key, const struct hist *h, bool buckets)
{
	static const struct {
		const char *key;
		double q;
	} qs[] = { { "p50", 0.50 }, { "p90", 0.90 }, { "p99", 0.99 } };

	jsonw_obj_begin(w, key);
	jsonw_u64(w, "count", h->count);
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		if (h->count)
			jsonw_num(w, qs[i].key, hist_quantile(h, qs[i].q) / 1e6, 3);
		else
			jsonw_null(w, qs[i].key);
	}
	if (h->count)
		jsonw_num(w, "max", h->max / 1e6, 3);
	else
		jsonw_null(w, "max");
	if (buckets) {
		jsonw_arr_begin(w, "buckets");
		for (unsigned int i = 0; i < HIST_BUCKETS; i++) {
			if (!h->buckets[i])
				continue;
			jsonw_arr_begin(w, NULL);
			jsonw_num(w, NULL, hist_bucket_low(i) / 1e6, 6);
			/* The last bucket has no upper bound: its values end at the maximum. */
			jsonw_num(
			    w, NULL,
			    (i + 1 < HIST_BUCKETS ? hist_bucket_low(i + 1) : h->max + 1) / 1e6, 6);
			jsonw_u64(w, NULL, h->buckets[i]);
			jsonw_arr_end(w);
		}
		jsonw_arr_end(w);
	}
	jsonw_obj_end(w);
}

void summary_json(struct jsonw *w, const struct summary *s, const struct loss_report *loss,
		  bool buckets)
{
	double window_s = summary_window_s(s);

	jsonw_u64(w, "requests", s->requests);
	jsonw_u64(w, "streamed", s->streamed);
	if (s->requests)
		jsonw_num(w, "success", s->by_outcome[OUTCOME_OK] / (double)s->requests, 4);
	else
		jsonw_null(w, "success");
	jsonw_obj_begin(w, "outcome");
	for (int o = 0; o < OUTCOME_MAX; o++)
		jsonw_u64(w, outcome_name(o), s->by_outcome[o]);
	jsonw_obj_end(w);
	jsonw_obj_begin(w, "in_flight");
	jsonw_u64(w, "max", s->inflight_max);
	jsonw_num(w, "mean", ratio(s->busy_ns / 1e9, window_s), 2);
	jsonw_u64(w, "now", s->inflight);
	jsonw_obj_end(w);
	jsonw_u64(w, "tokens", s->tokens);
	jsonw_num(w, "tok_per_s", ratio(s->tokens, window_s), 1);
	jsonw_num(w, "window_s", window_s, 3);
	/* The histograms, as the text summary's lines: over ok requests but E2E, over all. */
	summary_json_hist(w, "ttft_ms", &s->ttft, buckets);
	summary_json_hist(w, "itl_ms", &s->itl, buckets);
	summary_json_hist(w, "tpot_ms", &s->tpot, buckets);
	summary_json_hist(w, "e2e_ms", &s->e2e, buckets);
	if (s->gpu_known) {
		jsonw_obj_begin(w, "preemption");
		jsonw_u64(w, "requests_with_steps", s->gpu_known);
		jsonw_u64(w, "preempted", s->preempted);
		jsonw_u64(w, "preemptions", s->preemptions);
		jsonw_obj_end(w);
		if (s->preempted)
			summary_json_hist(w, "preempted_ms", &s->preempted_time, buckets);
	}
	if (s->proxy_ttft.count)
		summary_json_hist(w, "proxy_ttft_ms", &s->proxy_ttft, buckets);
	if (s->e2s.count)
		summary_json_hist(w, "engine_to_socket_ms", &s->e2s, buckets);
	json_ttft_definitions(w, s, false);
	losses_json(w, "lost", loss, LOSS_J_LOST);
	losses_json(w, "dropped", loss, LOSS_J_DROPPED);
	jsonw_obj_begin(w, "connections");
	for (size_t i = 0; i < sizeof(conn_counters) / sizeof(conn_counters[0]); i++)
		jsonw_u64(w, conn_counters[i].key,
			  *(const uint64_t *)((const char *)loss + conn_counters[i].off));
	jsonw_obj_end(w);
}

void summaries_init(struct summaries *s, FILE *out)
{
	s->out = out;
	s->json_out = NULL;
	summary_init(&s->total);
	summary_init(&s->interval);
}

static void sums_request_start(void *ctx, const struct request *r)
{
	struct summaries *s = ctx;

	summary_start(&s->total, r);
	summary_start(&s->interval, r);
}

/* Not inference: out of the summaries, but it was in flight. */
static void sums_request_other(void *ctx, const struct request *r)
{
	struct summaries *s = ctx;

	(void)r;
	if (s->total.inflight)
		s->total.inflight--;
	if (s->interval.inflight)
		s->interval.inflight--;
}

static void sums_request(void *ctx, const struct request *r, const struct request_metrics *m,
			 const struct gpu_attribution *ga)
{
	struct summaries *s = ctx;

	summary_done(&s->total, r, m);
	summary_done(&s->interval, r, m);
	summary_gpu(&s->total, r, ga);
	summary_gpu(&s->interval, r, ga);
}

static void sums_interval(void *ctx, const struct pipeline_status *st)
{
	struct summaries *s = ctx;

	if (s->out) {
		summary_print(&s->interval, &st->loss, "interval", s->out);
		summary_print_cache(&s->interval, s->out);
		summary_print_abandoned(&s->interval, s->out);
		summary_print_slo(&s->interval, st->slo, s->out);
		fflush(s->out);
	}
	summary_reset_interval(&s->interval);
}

/* The requests the summary left out as no inference (pipeline_status.others): one line. */
static void print_others(FILE *f, const struct other_requests *o)
{
	const char *sep = " (";

	fprintf(f, "  other requests: %llu", (unsigned long long)o->total);
	for (uint32_t i = 0; i < o->ntop; i++, sep = ", ")
		fprintf(f, "%s%s %llu", sep, o->top[i].what, (unsigned long long)o->top[i].n);
	if (o->rest)
		fprintf(f, "%s%llu more", sep, (unsigned long long)o->rest);
	fputs(o->ntop || o->rest ? ")\n" : "\n", f);
}

/* Servers named on the joined line, in the order they were first met; the rest are summed. */
#define JOINED_NAMED 4

/* The exchanges the servers were in when tracing began (pipeline_status.joined): how many were
 * met, how many are reported from where they were joined, and whose the rest were. */
static void print_joined(FILE *f, const struct joined_servers *j)
{
	uint64_t in = 0, rep = 0, rest = 0;
	uint32_t named = 0;
	const char *sep = " (";

	for (uint32_t i = 0; i < j->n; i++) {
		in += j->s[i].in_flight;
		rep += j->s[i].reported;
	}
	if (!in)
		return;
	fprintf(f, "  in flight when tracing began: %llu, reported from mid-response: %llu",
		(unsigned long long)in, (unsigned long long)rep);
	if (in > rep)
		fprintf(f, ", not reported: %llu", (unsigned long long)(in - rep));
	for (uint32_t i = 0; i < j->n && in > rep; i++) {
		uint64_t n = j->s[i].in_flight - j->s[i].reported;

		if (!n)
			continue;
		if (named == JOINED_NAMED || !j->s[i].pid) {
			rest += n;
			continue;
		}
		fprintf(f, "%spid %u: %llu", sep, j->s[i].pid, (unsigned long long)n);
		sep = ", ";
		named++;
	}
	if (rest)
		fprintf(f, "%sother servers: %llu", sep, (unsigned long long)rest);
	fputs(named || rest ? ")\n" : "\n", f);
}

void summary_print_cost(const struct self_cost *c, FILE *f)
{
	fputs("  cost: ", f);
	if (c->bpf_wall_s > 0 && c->bpf_syscalls)
		fprintf(f, "%.2f µs of BPF per traced syscall, ",
			c->bpf_sys_s * 1e6 / (double)c->bpf_syscalls);
	else if (c->bpf_wall_s > 0)
		fprintf(f, "no traced syscall, BPF %.1f %% of one CPU, ",
			ratio(c->bpf_s, c->bpf_wall_s) * 100);
	else
		fputs("BPF time not counted (--self-stats), ", f);
	fprintf(f, "%.1f %% of one CPU in tokenscope, ", ratio(c->cpu_s, c->wall_s) * 100);
	if (c->ring_bytes)
		fprintf(f, "ring peak %.0f %%\n",
			ratio((double)c->ring_peak_bytes, (double)c->ring_bytes) * 100);
	else
		fputs("ring peak unknown\n", f);
}

void summary_json_cost(struct jsonw *w, const struct self_cost *c)
{
	if (!c) {
		jsonw_null(w, "cost");
		return;
	}
	jsonw_obj_begin(w, "cost");
	jsonw_num(w, "wall_s", c->wall_s, 3);
	jsonw_num(w, "cpu_s", c->cpu_s, 3);
	jsonw_num(w, "cpu_ratio", ratio(c->cpu_s, c->wall_s), 5);
	jsonw_bool(w, "bpf_stats", c->bpf_stats);
	jsonw_bool(w, "self_stats", c->self_stats);
	/* Counted only with bpf_stats on: null, never a guess, where it was not. */
	if (c->bpf_wall_s > 0) {
		jsonw_num(w, "bpf_counted_s", c->bpf_wall_s, 3);
		jsonw_num(w, "bpf_s", c->bpf_s, 6);
		jsonw_num(w, "bpf_cpu_ratio", ratio(c->bpf_s, c->bpf_wall_s), 5);
		jsonw_u64(w, "traced_syscalls", c->bpf_syscalls);
		if (c->bpf_syscalls)
			jsonw_num(w, "bpf_ns_per_syscall",
				  c->bpf_sys_s * 1e9 / (double)c->bpf_syscalls, 1);
		else
			jsonw_null(w, "bpf_ns_per_syscall");
	} else {
		jsonw_null(w, "bpf_counted_s");
		jsonw_null(w, "bpf_s");
		jsonw_null(w, "bpf_cpu_ratio");
		jsonw_null(w, "traced_syscalls");
		jsonw_null(w, "bpf_ns_per_syscall");
	}
	if (c->ring_bytes) {
		jsonw_u64(w, "ring_bytes", c->ring_bytes);
		jsonw_u64(w, "ring_peak_bytes", c->ring_peak_bytes);
		jsonw_num(w, "ring_peak_ratio",
			  ratio((double)c->ring_peak_bytes, (double)c->ring_bytes), 4);
	} else {
		jsonw_null(w, "ring_bytes");
		jsonw_null(w, "ring_peak_bytes");
		jsonw_null(w, "ring_peak_ratio");
	}
	/* The kernel's own counters per program, since it was loaded. */
	jsonw_arr_begin(w, "programs");
	for (uint32_t i = 0; i < c->nprogs; i++) {
		jsonw_obj_begin(w, NULL);
		jsonw_str(w, "name", c->progs[i].name);
		jsonw_bool(w, "syscall", c->progs[i].syscall);
		jsonw_u64(w, "run_ns", c->progs[i].run_ns);
		jsonw_u64(w, "runs", c->progs[i].runs);
		jsonw_obj_end(w);
	}
	jsonw_arr_end(w);
	jsonw_obj_end(w);
}

void summaries_print_total(const struct summaries *s, const struct pipeline_status *st)
{
	if (!s->out)
		return;
	summary_print(&s->total, &st->loss, "summary", s->out);
	summary_print_cache(&s->total, s->out);
	summary_print_abandoned(&s->total, s->out);
	summary_print_slo(&s->total, st->slo, s->out);
	if (!st->all_requests && st->others.total)
		print_others(s->out, &st->others);
	print_joined(s->out, &st->joined);
	if (st->cost)
		summary_print_cost(st->cost, s->out);
	if (st->gpu.nprocs || st->gpu.procs_dropped || st->gpu.batch_early || st->gpu.batch_late)
		summary_print_gpu(&st->gpu, s->out);
	summary_print_recompute(&s->total, &st->gpu, s->out);
	summary_print_stalls(&s->total, s->out);
	fflush(s->out);
}

void summaries_set_json(struct summaries *s, FILE *f)
{
	s->json_out = f;
}

static void sums_finish(void *ctx, const struct pipeline_status *st)
{
	struct summaries *s = ctx;
	struct jsonw w;

	summaries_print_total(s, st);
	if (!s->json_out)
		return;
	/* After every request line: the sink comes after the lines' (trace.c, report.c). */
	jsonw_begin(&w, s->json_out);
	jsonw_obj_begin(&w, "summary");
	summary_json(&w, &s->total, &st->loss, false);
	summary_json_cache(&w, &s->total);
	summary_json_recompute(&w, &s->total, &st->gpu);
	summary_json_stalls(&w, &s->total);
	summary_json_abandoned(&w, &s->total);
	summary_json_slo(&w, &s->total, st->slo);
	/* The requests above are inference; these were not (none with --requests all). */
	if (!st->all_requests) {
		jsonw_obj_begin(&w, "other_requests");
		jsonw_u64(&w, "total", st->others.total);
		jsonw_arr_begin(&w, "by_request");
		for (uint32_t i = 0; i < st->others.ntop; i++) {
			jsonw_obj_begin(&w, NULL);
			jsonw_str(&w, "request", st->others.top[i].what);
			jsonw_u64(&w, "n", st->others.top[i].n);
			jsonw_obj_end(&w);
		}
		jsonw_arr_end(&w);
		jsonw_u64(&w, "rest", st->others.rest);
		jsonw_obj_end(&w);
	}
	/* The exchanges in flight when tracing began, per server (print_joined). */
	jsonw_arr_begin(&w, "joined_in_flight");
	for (uint32_t i = 0; i < st->joined.n; i++) {
		const struct joined_server *js = &st->joined.s[i];

		jsonw_obj_begin(&w, NULL);
		if (js->pid)
			jsonw_u64(&w, "pid", js->pid);
		else
			jsonw_null(&w, "pid");
		jsonw_u64(&w, "in_flight", js->in_flight);
		jsonw_u64(&w, "reported", js->reported);
		jsonw_u64(&w, "not_reported", js->in_flight - js->reported);
		jsonw_obj_end(&w);
	}
	jsonw_arr_end(&w);
	/* What tracing cost (a replay has no measure: null). */
	summary_json_cost(&w, st->cost);
	/* The kernel features the programs used, as tokenscope check names them; a replay has
	 * none. */
	if (st->nfeatures) {
		jsonw_arr_begin(&w, "kernel_features");
		for (uint32_t i = 0; i < st->nfeatures; i++) {
			jsonw_obj_begin(&w, NULL);
			jsonw_str(&w, "name", st->features[i].name);
			jsonw_str(&w, "state", st->features[i].on ? "on" : "off");
			jsonw_obj_end(&w);
		}
		jsonw_arr_end(&w);
	}
	jsonw_obj_end(&w);
	jsonw_end(&w);
	fputc('\n', s->json_out);
	fflush(s->json_out);
}

struct sink summaries_sink(struct summaries *s)
{
	return (struct sink){
		.name = "summary",
		.ctx = s,
		.request_start = sums_request_start,
		.request_other = sums_request_other,
		.request = sums_request,
		.interval = sums_interval,
		.finish = sums_finish,
	};
}
