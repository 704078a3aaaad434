// SPDX-License-Identifier: MIT
/*
 * CUPTI records: cupti/records.c reading the CUDA toolkit's activity record structs into
 * cupti/runs.c's runs, as the injection library does with each buffer CUPTI completes. Every
 * field of every record comes from the input: times, ids, copyKind, all arbitrary.
 *
 * Input: a sequence of operations, each a byte op (op % CF_OPS says which) and what it reads:
 *   CF_RUNTIME, CF_DRIVER     a CUpti_ActivityAPI's bytes (its kind set by op)
 *   CF_KERNEL                 a CUpti_ActivityKernel10's bytes; kind CONCURRENT_KERNEL, or
 *                             KERNEL when op has bit 0x80
 *   CF_GRAPH                  a CUpti_ActivityGraphTrace2's bytes
 *   CF_MEMCPY                 a CUpti_ActivityMemcpy6's bytes
 *   CF_UNKNOWN                u32 kind (moved off the kinds read), then a CUpti_Activity's
 *                             bytes; with bit 0x80 a CUpti_ActivityOverhead3's bytes instead
 *                             (kind OVERHEAD, its overheadData a block of the harness's when
 *                             bit 0x40 is set, else NULL: CUPTI's own to free)
 *   CF_SINGLE                 single mode flipped, without a flush
 *   CF_FLUSH                  runs_flush, as at the end of a buffer
 *   CF_OFFSET                 i64: the clock offset of the records after it
 * Each record lives in a buffer of exactly its struct's size, so a read past it is caught.
 * Struct bytes cut short by the end of the input read as zeros. Built with -DFUZZ_SHOW, it
 * prints each run and the final counters.
 *
 * Properties, at each batch: 1 to TS_RUNS_PER_PROBE runs; the runs emitted so far are those
 * stats.runs counts; each run has start <= end, busy <= end - start, at least one operation,
 * dtoh <= memcpys, launched <= its operations, delay_max <= delay (0 without a launch),
 * TS_RUN_F_LAUNCH only with a launched operation and first_launch_ns only with the flag,
 * TS_RUN_F_SINGLE only on a run of one operation, no unknown flag. After a final runs_flush:
 * every operation fed is in exactly one emitted run (their sum is stats.ops, and the
 * operations fed), the launched ones are stats.ops - stats.no_launch, stats.records counts
 * every record fed and stats.unknown the unknown ones.
 */
#include "fuzz.h"
#include "records.h"

enum {
	CF_RUNTIME,
	CF_DRIVER,
	CF_KERNEL,
	CF_GRAPH,
	CF_MEMCPY,
	CF_UNKNOWN,
	CF_SINGLE,
	CF_FLUSH,
	CF_OFFSET,
	CF_OPS
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the emit callback saw, and what the harness fed. */
struct seen {
	uint64_t runs, ops, launched, batches;
	uint64_t fed_records, fed_ops, fed_unknown, fed_overhead;
};

FUZZ_CHECKER static void check_run(const struct ts_dev_run *d, uint32_t i)
{
	uint64_t ops = (uint64_t)d->kernels + d->graphs + d->memcpys;

	FUZZ_CHECK(d->start_ns <= d->end_ns, "run %u: start %llu after end %llu", i,
		   (unsigned long long)d->start_ns, (unsigned long long)d->end_ns);
	FUZZ_CHECK(d->busy_ns <= d->end_ns - d->start_ns, "run %u: busy %llu over its %llu ns", i,
		   (unsigned long long)d->busy_ns, (unsigned long long)(d->end_ns - d->start_ns));
	FUZZ_CHECK(ops >= 1, "run %u: no operation", i);
	FUZZ_CHECK(d->dtoh <= d->memcpys, "run %u: %u dtoh of %u copies", i, d->dtoh, d->memcpys);
	FUZZ_CHECK(d->launched <= ops, "run %u: %u launched of %llu ops", i, d->launched,
		   (unsigned long long)ops);
	FUZZ_CHECK(d->delay_max_ns <= d->delay_ns, "run %u: delay max %llu over the sum %llu", i,
		   (unsigned long long)d->delay_max_ns, (unsigned long long)d->delay_ns);
	FUZZ_CHECK(d->launched || !d->delay_ns, "run %u: a delay without a launch", i);
	FUZZ_CHECK(!(d->flags & TS_RUN_F_LAUNCH) || d->launched,
		   "run %u: TS_RUN_F_LAUNCH, none launched", i);
	FUZZ_CHECK((d->flags & TS_RUN_F_LAUNCH) || !d->first_launch_ns,
		   "run %u: first_launch_ns without TS_RUN_F_LAUNCH", i);
	FUZZ_CHECK(!(d->flags & TS_RUN_F_SINGLE) || ops == 1, "run %u: single with %llu ops", i,
		   (unsigned long long)ops);
	FUZZ_CHECK(!(d->flags & ~(uint32_t)(TS_RUN_F_LAUNCH | TS_RUN_F_SINGLE)),
		   "run %u: flags 0x%x", i, d->flags);
}

FUZZ_CHECKER static void emit(void *ctx, const struct ts_dev_run *runs, uint32_t n,
			      const struct ts_devtime_stats *stats)
{
	struct seen *s = ctx;

	FUZZ_CHECK(n >= 1 && n <= TS_RUNS_PER_PROBE, "a batch of %u runs", n);
	for (uint32_t i = 0; i < n; i++) {
#ifdef FUZZ_SHOW
		fprintf(
		    fuzz_devnull(),
		    "run dev %u stream %u %llu..%llu busy %llu k %u g %u m %u dtoh %u launched %u "
		    "first %llu delay %llu max %llu flags %u\n",
		    runs[i].device, runs[i].stream, (unsigned long long)runs[i].start_ns,
		    (unsigned long long)runs[i].end_ns, (unsigned long long)runs[i].busy_ns,
		    runs[i].kernels, runs[i].graphs, runs[i].memcpys, runs[i].dtoh,
		    runs[i].launched, (unsigned long long)runs[i].first_launch_ns,
		    (unsigned long long)runs[i].delay_ns, (unsigned long long)runs[i].delay_max_ns,
		    runs[i].flags);
#endif
		check_run(&runs[i], i);
		s->ops += (uint64_t)runs[i].kernels + runs[i].graphs + runs[i].memcpys;
		s->launched += runs[i].launched;
	}
	s->runs += n;
	s->batches++;
	FUZZ_CHECK(s->runs == stats->runs, "%llu runs emitted, stats.runs %llu",
		   (unsigned long long)s->runs, (unsigned long long)stats->runs);
}

FUZZ_CHECKER static void check_end(const struct runs *r, const struct seen *s)
{
	const struct ts_devtime_stats *st = &r->stats;

	FUZZ_CHECK(r->nbatch == 0, "%u runs left in the batch after the flush", r->nbatch);
	for (int i = 0; i < RUNS_OPEN; i++)
		FUZZ_CHECK(!r->open_used[i], "run %d left open after the flush", i);
	FUZZ_CHECK(s->runs == st->runs, "%llu runs emitted, stats.runs %llu",
		   (unsigned long long)s->runs, (unsigned long long)st->runs);
	FUZZ_CHECK(s->ops == st->ops, "%llu ops in the runs, stats.ops %llu",
		   (unsigned long long)s->ops, (unsigned long long)st->ops);
	FUZZ_CHECK(s->fed_ops == st->ops, "%llu ops fed, stats.ops %llu",
		   (unsigned long long)s->fed_ops, (unsigned long long)st->ops);
	FUZZ_CHECK(st->no_launch <= st->ops && s->launched == st->ops - st->no_launch,
		   "%llu launched in the runs, stats.ops %llu, no_launch %llu",
		   (unsigned long long)s->launched, (unsigned long long)st->ops,
		   (unsigned long long)st->no_launch);
	FUZZ_CHECK(s->fed_records == st->records, "%llu records fed, stats.records %llu",
		   (unsigned long long)s->fed_records, (unsigned long long)st->records);
	FUZZ_CHECK(s->fed_unknown == st->unknown, "%llu unknown records fed, stats.unknown %llu",
		   (unsigned long long)s->fed_unknown, (unsigned long long)st->unknown);
	FUZZ_CHECK(s->fed_overhead == st->overhead_records,
		   "%llu overhead records fed, stats.overhead_records %llu",
		   (unsigned long long)s->fed_overhead, (unsigned long long)st->overhead_records);
}

static bool known_kind(uint32_t kind)
{
	return kind == CUPTI_ACTIVITY_KIND_RUNTIME || kind == CUPTI_ACTIVITY_KIND_DRIVER ||
	       kind == CUPTI_ACTIVITY_KIND_KERNEL ||
	       kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
	       kind == CUPTI_ACTIVITY_KIND_GRAPH_TRACE || kind == CUPTI_ACTIVITY_KIND_MEMCPY ||
	       kind == CUPTI_ACTIVITY_KIND_OVERHEAD;
}

/* One record of size bytes from the input, its kind then set, read in its own buffer. */
static void feed(struct runs *r, struct fuzz_in *in, size_t size, uint32_t kind, int64_t offset)
{
	CUpti_Activity *rec = calloc(1, size);
	const uint8_t *p;
	size_t got;

	if (!rec)
		abort();
	p = fuzz_bytes(in, size, &got);
	memcpy(rec, p, got);
	rec->kind = (CUpti_ActivityKind)kind;
	records_read(r, rec, offset);
	free(rec);
}

/* An overhead record, whose overheadData is a pointer CUPTI hands the reader to free: a block
 * of the harness's, or NULL, never the input's bytes. */
static void feed_overhead(struct runs *r, struct fuzz_in *in, bool data, int64_t offset)
{
	CUpti_ActivityOverhead3 *o = calloc(1, sizeof(*o));
	const uint8_t *p;
	size_t got;

	if (!o)
		abort();
	p = fuzz_bytes(in, sizeof(*o), &got);
	memcpy(o, p, got);
	o->kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
	o->overheadData = data ? malloc(16) : NULL;
	records_read(r, (CUpti_Activity *)o, offset);
	free(o->overheadData); /* NULL: the reader took it */
	free(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	struct runs *r = malloc(sizeof(*r));
	struct seen s = { 0 };
	int64_t offset = 0;

	if (!r)
		abort();
	runs_init(r, emit, &s);
	while (in.n) {
		uint8_t op = fuzz_u8(&in);
		uint32_t kind;

		switch (op % CF_OPS) {
		case CF_RUNTIME:
		case CF_DRIVER:
			feed(r, &in, sizeof(CUpti_ActivityAPI),
			     op % CF_OPS == CF_RUNTIME ? CUPTI_ACTIVITY_KIND_RUNTIME
						       : CUPTI_ACTIVITY_KIND_DRIVER,
			     offset);
			break;
		case CF_KERNEL:
			feed(r, &in, sizeof(CUpti_ActivityKernel10),
			     op & 0x80 ? CUPTI_ACTIVITY_KIND_KERNEL
				       : CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
			     offset);
			s.fed_ops++;
			break;
		case CF_GRAPH:
			feed(r, &in, sizeof(CUpti_ActivityGraphTrace2),
			     CUPTI_ACTIVITY_KIND_GRAPH_TRACE, offset);
			s.fed_ops++;
			break;
		case CF_MEMCPY:
			feed(r, &in, sizeof(CUpti_ActivityMemcpy6), CUPTI_ACTIVITY_KIND_MEMCPY,
			     offset);
			s.fed_ops++;
			break;
		case CF_UNKNOWN:
			if (op & 0x80) {
				feed_overhead(r, &in, op & 0x40, offset);
				s.fed_overhead++;
				break;
			}
			kind = fuzz_u32(&in);
			if (known_kind(kind))
				kind = CUPTI_ACTIVITY_KIND_MARKER;
			feed(r, &in, sizeof(CUpti_Activity), kind, offset);
			s.fed_unknown++;
			break;
		case CF_SINGLE:
			r->single = !r->single;
			continue;
		case CF_FLUSH:
			runs_flush(r);
			continue;
		case CF_OFFSET:
			offset = (int64_t)fuzz_u64(&in);
			continue;
		}
		s.fed_records++;
	}
	runs_flush(r);
#ifdef FUZZ_SHOW
	fprintf(fuzz_devnull(),
		"stats records %llu ops %llu runs %llu bad_time %llu unknown %llu no_launch %llu\n",
		(unsigned long long)r->stats.records, (unsigned long long)r->stats.ops,
		(unsigned long long)r->stats.runs, (unsigned long long)r->stats.bad_time,
		(unsigned long long)r->stats.unknown, (unsigned long long)r->stats.no_launch);
#endif
	check_end(r, &s);
	free(r);
	return 0;
}
