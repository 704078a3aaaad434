// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/step.h"
#include "lib/jsonw.h"
#include "pipeline/device_sample.h"
#include "pipeline/request.h"
#include "sinks/timeline.h"

/* Process sort order in the viewers: connections above GPU processes. */
#define SORT_CONNECTIONS 0
#define SORT_GPU 1
#define SORT_NVML 2

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		p += k;
		n -= k;
	}
	return 0;
}

/* Buffered bytes (a memstream's size is known only after a flush). */
static size_t tl_pending(struct timeline *t)
{
	long pos = ftell(t->buf);

	return pos > 0 ? (size_t)pos : 0;
}

/* A new in-memory buffer for events. Only the pipeline's thread writes it: no stdio locking
 * on each of the many calls per event. */
static FILE *tl_membuf(struct timeline *t)
{
	FILE *f = open_memstream(&t->mem, &t->mem_len);

	if (f)
		__fsetlocking(f, FSETLOCKING_BYCALLER);
	return f;
}

/* Writes what is buffered in one piece. The buffer is then reused: a new one per request cost
 * page faults and an munmap each time once a request's events passed malloc's mmap threshold.
 * One that a long request grew past TIMELINE_KEEP_BYTES is given back. */
static void tl_flush(struct timeline *t)
{
	int err;

	if (!t->buf || !tl_pending(t))
		return;
	err = fflush(t->buf) ? -ENOMEM : 0;
	if (!err && t->mem_len)
		err = write_all(t->fd, t->mem, t->mem_len);
	if (err && !t->err)
		t->err = err;
	t->events_written = t->events;
	if (t->mem_len <= TIMELINE_KEEP_BYTES) {
		/* An open_memstream's size is its position after a flush (POSIX). */
		rewind(t->buf);
		return;
	}
	fclose(t->buf);
	free(t->mem);
	t->mem = NULL;
	t->mem_len = 0;
	t->buf = tl_membuf(t);
	if (!t->buf && !t->err)
		t->err = -ENOMEM;
}

/* ns relative to the origin, as microseconds with the nanoseconds exact ("-1.005", "1234.567")
 * into out (TIMELINE_US_MAX bytes, no NUL); returns the length. By hand: it is in every event
 * and a timeline has an event per token. */
#define TIMELINE_US_MAX (1 + JSONW_U64_DIGITS + 4)

static size_t fmt_us(char *out, int64_t ns)
{
	uint64_t a = ns < 0 ? -(uint64_t)ns : (uint64_t)ns;
	unsigned frac = a % 1000;
	size_t n = 0;

	if (ns < 0)
		out[n++] = '-';
	n += jsonw_fmt_u64(out + n, a / 1000);
	out[n++] = '.';
	out[n++] = '0' + frac / 100;
	out[n++] = '0' + frac / 10 % 10;
	out[n++] = '0' + frac % 10;
	return n;
}

static void json_us(struct jsonw *w, const char *key, int64_t ns)
{
	char buf[TIMELINE_US_MAX];

	jsonw_key(w, key);
	fwrite(buf, 1, fmt_us(buf, ns), w->f);
}

/* ns from the origin; a distance past INT64_MAX (a damaged recording's times) is held there,
 * never negated out of range. */
static int64_t rel(const struct timeline *t, uint64_t ns)
{
	uint64_t d = ns >= t->origin_ns ? ns - t->origin_ns : t->origin_ns - ns;

	if (d > INT64_MAX)
		d = INT64_MAX;
	return ns >= t->origin_ns ? (int64_t)d : -(int64_t)d;
}

static int64_t span(uint64_t from, uint64_t to)
{
	return to > from ? (int64_t)(to - from) : 0;
}

static void ms_or_null(struct jsonw *w, const char *key, int64_t ns)
{
	if (ns < 0)
		jsonw_null(w, key);
	else
		jsonw_num(w, key, ns / 1e6, 3);
}

/* Opens one event: name, cat, ph, ts, pid, tid; the caller adds the rest and the '}'. */
static void ev_begin(struct timeline *t, struct jsonw *w, const char *name, const char *cat,
		     const char *ph, int64_t ts, uint32_t pid, uint64_t tid)
{
	fputs(t->events++ ? ",\n" : "\n", t->buf);
	jsonw_begin(w, t->buf);
	jsonw_str(w, "name", name);
	if (cat)
		jsonw_str(w, "cat", cat);
	jsonw_str(w, "ph", ph);
	json_us(w, "ts", ts);
	jsonw_u64(w, "pid", pid);
	jsonw_u64(w, "tid", tid);
}

/* A metadata event naming a process or thread ({"name": value}); a process's own metadata goes on
 * its main thread (tid = pid), as a tid shared by two processes would confuse Perfetto. */
static void ev_meta_str(struct timeline *t, const char *what, uint32_t pid, uint64_t tid,
			const char *value)
{
	struct jsonw w;

	ev_begin(t, &w, what, NULL, "M", 0, pid, tid);
	jsonw_obj_begin(&w, "args");
	jsonw_str(&w, "name", value);
	jsonw_obj_end(&w);
	jsonw_end(&w);
}

static void ev_meta_sort(struct timeline *t, uint32_t pid, int sort_index)
{
	struct jsonw w;

	ev_begin(t, &w, "process_sort_index", NULL, "M", 0, pid, pid);
	jsonw_obj_begin(&w, "args");
	jsonw_i64(&w, "sort_index", sort_index);
	jsonw_obj_end(&w);
	jsonw_end(&w);
}

static void ev_complete(struct timeline *t, const char *name, const char *cat, uint32_t pid,
			uint64_t tid, uint64_t from, uint64_t to)
{
	struct jsonw w;

	ev_begin(t, &w, name, cat, "X", rel(t, from), pid, tid);
	json_us(&w, "dur", span(from, to));
	jsonw_end(&w);
}

/* The header, once the origin is known: displayTimeUnit in the first bytes, where Perfetto
 * looks for it, and otherData before traceEvents, as older Perfetto versions stop at a
 * top-level key they do not know (they know otherData). */
static void tl_start(struct timeline *t, uint64_t first_ns)
{
	struct jsonw w;

	if (t->started || !t->buf)
		return;
	t->started = true;
	if (!t->origin_given)
		t->origin_ns = first_ns;
	jsonw_begin(&w, t->buf);
	jsonw_str(&w, "displayTimeUnit", "ms");
	jsonw_obj_begin(&w, "otherData");
	jsonw_str(&w, "producer", "tokenscope");
	jsonw_str(&w, "clock", "CLOCK_MONOTONIC");
	if (first_ns || t->origin_given)
		jsonw_u64(&w, "origin_ns", t->origin_ns);
	else
		jsonw_null(&w, "origin_ns");
	jsonw_str(&w, "origin", t->origin_given ? "start of tracing" : "first event");
	jsonw_obj_end(&w);
	jsonw_key(&w, "traceEvents");
	fputc('[', t->buf);
	ev_meta_str(t, "process_name", TIMELINE_CONN_PID, TIMELINE_CONN_PID, "connections");
	ev_meta_sort(t, TIMELINE_CONN_PID, SORT_CONNECTIONS);
}

/*
 * The lane of r on its connection: the first whose requests all ended by r's arrival, so that
 * the slices of one track never overlap. Requests come in the order they finish; a lane's
 * latest end bounds every request placed in it, so the test is exact.
 */
static unsigned int tl_lane(struct timeline *t, const struct request *r)
{
	typeof(t->lanes[0]) *l = &t->lanes[r->conn_id % TIMELINE_LANE_CONNS];
	unsigned int k = 0;

	if (l->conn_id1 != r->conn_id + 1) {
		memset(l, 0, sizeof(*l));
		l->conn_id1 = r->conn_id + 1;
	}
	while (k < TIMELINE_LANES - 1 && l->end_ns[k] > r->arrival_ns)
		k++;
	if (r->end_ns > l->end_ns[k])
		l->end_ns[k] = r->end_ns;
	return k;
}

/* Names a connection's track (its label) or lane k of it (the label and the lane). */
static void name_track(struct timeline *t, const struct request *r, uint64_t tid, unsigned int k)
{
	uint64_t *slot = &t->named_conns[tid % TIMELINE_NAMED_CONNS];
	char name[sizeof(r->conn) + 16];

	if (*slot == tid + 1)
		return;
	*slot = tid + 1;
	if (k)
		snprintf(name, sizeof(name), "%s [%u]", r->conn, k + 1);
	else
		snprintf(name, sizeof(name), "%s", r->conn);
	ev_meta_str(t, "thread_name", TIMELINE_CONN_PID, tid, name);
}

static void name_gpu(struct timeline *t, uint32_t pid)
{
	uint32_t *slot = &t->named_pids[pid % TIMELINE_NAMED_PIDS];
	char name[32];

	if (*slot == pid)
		return;
	*slot = pid;
	snprintf(name, sizeof(name), "GPU pid %u", pid);
	ev_meta_str(t, "process_name", pid, pid, name);
	ev_meta_sort(t, pid, SORT_GPU);
}

static void name_device(struct timeline *t, uint32_t pid)
{
	uint32_t *slot = &t->named_devices[pid % TIMELINE_NAMED_PIDS];

	if (*slot == pid)
		return;
	*slot = pid;
	ev_meta_str(t, "thread_name", pid, TIMELINE_DEVICE_TID(pid), "device (CUPTI)");
}

/* A token instant up to its ts, as ev_begin writes it. */
#define TOKEN_HEAD "{\"name\":\"token\",\"cat\":\"token\",\"ph\":\"i\",\"ts\":"
#define TOKEN_TAIL_MAX 64
#define TOKEN_EVENT_MAX (2 + sizeof(TOKEN_HEAD) + TIMELINE_US_MAX + TOKEN_TAIL_MAX)
/* Token events are put together this many bytes at a time, then written to the buffer. */
#define TOKEN_BLOCK_BYTES 4096

/* A request's token instants, most of a timeline's events: each is put together from TOKEN_HEAD,
 * its time and a tail made once per request, the bytes ev_begin and jsonw would write, and
 * they go to the buffer a block at a time. Through jsonw (a stdio call per field and per
 * character) they were most of the timeline's cost. */
static void tl_tokens(struct timeline *t, const struct request *r, uint32_t pid, uint64_t tid)
{
	char tail[TOKEN_TAIL_MAX], blk[TOKEN_BLOCK_BYTES];
	int tail_len = snprintf(tail, sizeof(tail),
				",\"pid\":%" PRIu32 ",\"tid\":%" PRIu64 ",\"s\":\"t\"}", pid, tid);
	size_t n = 0;

	for (uint32_t i = 0; i < r->ntokens; i++) {
		if (n > sizeof(blk) - TOKEN_EVENT_MAX) {
			fwrite(blk, 1, n, t->buf);
			n = 0;
		}
		if (t->events++)
			blk[n++] = ',';
		blk[n++] = '\n';
		memcpy(blk + n, TOKEN_HEAD, sizeof(TOKEN_HEAD) - 1);
		n += sizeof(TOKEN_HEAD) - 1;
		n += fmt_us(blk + n, rel(t, r->token_ns[i]));
		memcpy(blk + n, tail, tail_len);
		n += tail_len;
	}
	fwrite(blk, 1, n, t->buf);
}

/* A flow event up to its ts: an arrow from a GPU step ("s", bound to the step's slice that
 * encloses it) to a token ("f", bound to the next slice on its track: the token's instant). */
#define FLOW_HEAD(ph) "{\"name\":\"token\",\"cat\":\"batch\",\"ph\":\"" ph "\",\"ts\":"
#define FLOW_EVENT_MAX (2 + sizeof(FLOW_HEAD("s")) + TIMELINE_US_MAX + 32 + 3 * JSONW_U64_DIGITS)
/* The arrow from a step that stalled a request to the token after the stall (no longer than
 * FLOW_HEAD). */
#define STALL_HEAD(ph) "{\"name\":\"stall\",\"cat\":\"stall\",\"ph\":\"" ph "\",\"ts\":"

/* One flow event into out (FLOW_EVENT_MAX bytes); returns its length. */
static size_t fmt_flow(char *out, bool first, const char *head, size_t head_len, int64_t ts,
		       uint64_t pid, uint64_t tid, uint64_t id)
{
	size_t n = 0;

	if (!first)
		out[n++] = ',';
	out[n++] = '\n';
	memcpy(out + n, head, head_len);
	n += head_len;
	n += fmt_us(out + n, ts);
	memcpy(out + n, ",\"pid\":", 7);
	n += 7;
	n += jsonw_fmt_u64(out + n, pid);
	memcpy(out + n, ",\"tid\":", 7);
	n += 7;
	n += jsonw_fmt_u64(out + n, tid);
	memcpy(out + n, ",\"id\":", 6);
	n += 6;
	n += jsonw_fmt_u64(out + n, id);
	out[n++] = '}';
	return n;
}

/*
 * An arrow from each GPU step the request's tokens came from (batch.h) to each of those tokens:
 * a pair of flow events per token, written before the token instants so that a viewer sorting
 * by time meets the "f" before the instant it binds to. The "s" sits 1 ns before the step's end,
 * inside its slice. A step the history no longer held has no arrow.
 */
static void tl_flows(struct timeline *t, const struct request *r, const struct gpu_attribution *ga,
		     uint64_t tid)
{
	static const char head_s[] = FLOW_HEAD("s"), head_f[] = FLOW_HEAD("f");
	char blk[TOKEN_BLOCK_BYTES];
	size_t n = 0;

	for (uint32_t k = 0; k < ga->nrides; k++) {
		const struct batch_ride *d = &ga->rides[k];
		int64_t from = rel(t, d->end_ns > d->start_ns ? d->end_ns - 1 : d->start_ns);

		for (uint32_t i = d->token; d->known && i < d->token + d->ntokens && i < r->ntokens;
		     i++) {
			if (n > sizeof(blk) - 2 * FLOW_EVENT_MAX) {
				fwrite(blk, 1, n, t->buf);
				n = 0;
			}
			t->flows++;
			n += fmt_flow(blk + n, !t->events++, head_s, sizeof(head_s) - 1, from,
				      d->pid, d->tid, t->flows);
			n += fmt_flow(blk + n, !t->events++, head_f, sizeof(head_f) - 1,
				      rel(t, r->token_ns[i]), TIMELINE_CONN_PID, tid, t->flows);
		}
	}
	fwrite(blk, 1, n, t->buf);
}

/*
 * An arrow from the prefill step that stalled the request (docs/gpu.md "Who stalled me") to the
 * token written after the stall, as the batch's arrows are drawn.
 */
static void tl_stall_flows(struct timeline *t, const struct request *r,
			   const struct stall_report *st, uint64_t tid)
{
	static const char head_s[] = STALL_HEAD("s"), head_f[] = STALL_HEAD("f");
	char blk[STALL_KEEP * 2 * (FLOW_EVENT_MAX + 16)];
	size_t n = 0;

	for (uint32_t i = 0; i < st->nkept; i++) {
		const struct stall *v = &st->v[i];

		if (!v->step_end_ns || v->token >= r->ntokens)
			continue;
		t->flows++;
		n += fmt_flow(blk + n, !t->events++, head_s, sizeof(head_s) - 1,
			      rel(t, v->step_end_ns - 1), v->step_pid, v->step_tid, t->flows);
		n += fmt_flow(blk + n, !t->events++, head_f, sizeof(head_f) - 1,
			      rel(t, r->token_ns[v->token]), TIMELINE_CONN_PID, tid, t->flows);
	}
	fwrite(blk, 1, n, t->buf);
}

static void tl_request(void *ctx, const struct request *r, const struct request_metrics *m,
		       const struct gpu_attribution *ga)
{
	struct timeline *t = ctx;
	const uint32_t pid = TIMELINE_CONN_PID;
	bool attributed = ga && ga->queue_ns >= 0 && ga->prefill_ns >= 0;
	/* A request the traced process made to an upstream is named apart on its own track. */
	const char *what = r->client   ? "upstream request"
			   : r->joined ? "request joined mid-response"
				       : "request";
	unsigned int lane;
	uint64_t tid;
	char name[48];
	struct jsonw w;

	if (!t->buf)
		return;
	tl_start(t, r->arrival_ns);
	lane = tl_lane(t, r);
	tid = TIMELINE_LANE_TID(r->conn_id, lane);
	name_track(t, r, tid, lane);
	t->requests++;

	/* The whole request first: with the same ts, the enclosing slice must come first. */
	if (r->outcome == OUTCOME_OK)
		snprintf(name, sizeof(name), "%s", what);
	else
		snprintf(name, sizeof(name), "%s: %s", what, outcome_name(r->outcome));
	ev_begin(t, &w, name, "request", "X", rel(t, r->arrival_ns), pid, tid);
	json_us(&w, "dur", span(r->arrival_ns, r->end_ns));
	jsonw_obj_begin(&w, "args");
	jsonw_str(&w, "model", r->info.model[0] ? r->info.model : NULL);
	jsonw_str(&w, "method", r->method);
	jsonw_str(&w, "path", r->path);
	jsonw_i64(&w, "status", r->status);
	jsonw_str(&w, "outcome", outcome_name(r->outcome));
	if (r->client)
		jsonw_str(&w, "role", "client");
	if (r->proto == PROTO_HTTP2)
		jsonw_u64(&w, "h2_stream", r->stream);
	ms_or_null(&w, "ttft_ms", m->ttft_ns);
	ms_or_null(&w, "e2e_ms", m->e2e_ns);
	jsonw_i64(&w, "tokens", m->tokens);
	jsonw_u64(&w, "seq", r->seq);
	jsonw_str(&w, "attribution", ga ? ga->how : NULL);
	if (ga && ga->has_steps && ga->preemptions)
		jsonw_u64(&w, "preemptions", ga->preemptions);
	if (ga && ga->stalls && ga->stalls->n)
		jsonw_u64(&w, "stalls", ga->stalls->n);
	jsonw_obj_end(&w);
	jsonw_end(&w);

	if (r->ntokens) {
		if (attributed) {
			uint64_t q = r->arrival_ns + ga->queue_ns;

			if (ga->queue_ns > 0)
				ev_complete(t, "queue", "phase", pid, tid, r->arrival_ns, q);
			ev_complete(t, "prefill", "phase", pid, tid, q, q + ga->prefill_ns);
			ev_complete(t, "decode", "phase", pid, tid, r->first_token_ns, r->end_ns);
		} else {
			ev_complete(t, "waiting for first token", "phase", pid, tid, r->arrival_ns,
				    r->first_token_ns);
			ev_complete(t, "streaming", "phase", pid, tid, r->first_token_ns,
				    r->end_ns);
		}
		/* Out of the engine's batch (docs/gpu.md "Preemption"): inside the decode. */
		for (uint32_t i = 0;
		     ga && ga->has_steps && ga->preempt_from && i < ga->npreempt_times; i++)
			ev_complete(t, "preempted (out of the batch)", "phase", pid, tid,
				    ga->preempt_from[i], ga->preempt_to[i]);
	}
	if (ga && ga->rides)
		tl_flows(t, r, ga, tid);
	if (ga && ga->stalls)
		tl_stall_flows(t, r, ga->stalls, tid);
	tl_tokens(t, r, pid, tid);
	/* A request is where a reader of a crashed file would want the file to end. */
	tl_flush(t);
}

/*
 * The step's device work on the process's device track: a slice from the first device start to
 * the last device end, named by the step's kind, and inside it a "busy" slice per disjoint span
 * of device time when there are gaps (GPU_STEP_SPANS at most: past that the closest spans were
 * merged, their gap counted as busy, and gpu_busy_approx says so).
 */
static void tl_device(struct timeline *t, const struct gpu_step *s)
{
	const struct gpu_device *d = &s->dev;
	const uint64_t tid = TIMELINE_DEVICE_TID(s->pid);
	struct jsonw w;

	name_device(t, s->pid);
	ev_begin(t, &w, gpu_kind_name(s->kind), "device", "X", rel(t, d->start_ns), s->pid, tid);
	json_us(&w, "dur", span(d->start_ns, d->end_ns));
	jsonw_obj_begin(&w, "args");
	ms_or_null(&w, "gpu_busy_ms", (int64_t)d->busy_ns);
	jsonw_bool(&w, "gpu_busy_approx", d->approx);
	ms_or_null(&w, "launch_delay_ms",
		   d->launch_ns && d->start_ns >= d->launch_ns ? span(d->launch_ns, d->start_ns)
							       : -1);
	ms_or_null(&w, "mean_launch_delay_ms",
		   d->launched ? (int64_t)(d->delay_ns / d->launched) : -1);
	jsonw_u64(&w, "runs", d->runs);
	jsonw_u64(&w, "kernels", d->kernels);
	jsonw_u64(&w, "graphs", d->graphs);
	jsonw_u64(&w, "memcpys", d->memcpys);
	jsonw_obj_end(&w);
	jsonw_end(&w);
	if (d->nspans < 2)
		return;
	for (uint8_t i = 0; i < d->nspans && i < GPU_STEP_SPANS; i++)
		ev_complete(t, "busy", "device", s->pid, tid, d->spans[i].a, d->spans[i].b);
}

static void tl_step(void *ctx, const struct gpu_step *s)
{
	struct timeline *t = ctx;
	struct jsonw w;

	if (!t->buf)
		return;
	tl_start(t, s->start_ns);
	name_gpu(t, s->pid);
	t->steps++;
	ev_begin(t, &w, gpu_kind_name(s->kind), "gpu", "X", rel(t, s->start_ns), s->pid, s->tid);
	json_us(&w, "dur", span(s->start_ns, s->end_ns));
	jsonw_obj_begin(&w, "args");
	jsonw_str(&w, "kind_by", gpu_kind_by(s));
	jsonw_str(&w, "mode", gpu_mode_name(s->mode));
	jsonw_u64(&w, "launches", s->launches);
	jsonw_u64(&w, "graph_launches", s->graph_launches);
	jsonw_u64(&w, "memcpys", s->memcpys);
	jsonw_u64(&w, "waits", s->waits);
	ms_or_null(&w, "wait_ms", span(s->wait_start_ns, s->end_ns));
	jsonw_u64(&w, "batch", s->batch);
	jsonw_str(&w, "times", gpu_step_times(s));
	jsonw_obj_end(&w);
	jsonw_end(&w);
	if (s->dev.device)
		tl_device(t, s);
	if (tl_pending(t) >= TIMELINE_FLUSH_BYTES)
		tl_flush(t);
}

static void tl_tick(void *ctx, const struct pipeline_status *st)
{
	struct timeline *t = ctx;

	(void)st;
	/* A tick comes after every drain (100 a second), mostly with nothing new, and even
	 * asking a memstream its position (ftell) showed in profiles. All that is buffered but
	 * the closing "]}" is events, so an unchanged count means nothing to write. */
	if (t->events != t->events_written)
		tl_flush(t);
}

static void tl_finish(void *ctx, const struct pipeline_status *st)
{
	(void)st;
	tl_flush(ctx);
}

/* One counter event: Perfetto names its track "NAME KEY" (chrome://tracing: NAME, series KEY). */
static void ev_counter(struct timeline *t, const char *name, const char *key, uint64_t ns,
		       uint64_t v)
{
	struct jsonw w;

	ev_begin(t, &w, name, NULL, "C", rel(t, ns), TIMELINE_NVML_PID, TIMELINE_NVML_PID);
	jsonw_obj_begin(&w, "args");
	jsonw_u64(&w, key, v);
	jsonw_obj_end(&w);
	jsonw_end(&w);
}

void timeline_gpu_sample(struct timeline *t, const struct device_sample *s)
{
	if (!t->buf || !s->ndevices)
		return;
	tl_start(t, s->devices[0].mono_ns);
	if (!t->nvml_named) {
		t->nvml_named = true;
		ev_meta_str(t, "process_name", TIMELINE_NVML_PID, TIMELINE_NVML_PID, "GPUs (NVML)");
		ev_meta_sort(t, TIMELINE_NVML_PID, SORT_NVML);
	}
	for (uint32_t i = 0; i < s->ndevices; i++) {
		const struct sampled_device *d = &s->devices[i];
		char name[48];

		if (d->util_present) {
			snprintf(name, sizeof(name), "GPU %u utilization", d->index);
			ev_counter(t, name, "percent", d->mono_ns, d->util_pct);
		}
		if (d->mem_present) {
			snprintf(name, sizeof(name), "GPU %u memory used", d->index);
			ev_counter(t, name, "bytes", d->mono_ns, d->mem_used);
		}
	}
}

int timeline_open(struct timeline *t, const char *path)
{
	memset(t, 0, sizeof(*t));
	t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (t->fd < 0)
		return -errno;
	t->buf = tl_membuf(t);
	if (!t->buf) {
		close(t->fd);
		t->fd = -1;
		return -ENOMEM;
	}
	return 0;
}

int timeline_set_origin(struct timeline *t, uint64_t origin_ns)
{
	if (t->started)
		return -EBUSY;
	t->origin_given = true;
	t->origin_ns = origin_ns;
	return 0;
}

static void tl_gpu_sample(void *ctx, const struct device_sample *s)
{
	timeline_gpu_sample(ctx, s);
}

struct sink timeline_sink(struct timeline *t)
{
	return (struct sink){
		.name = "timeline",
		.ctx = t,
		.request = tl_request,
		.gpu_step = tl_step,
		.device_sample = tl_gpu_sample,
		.tick = tl_tick,
		.finish = tl_finish,
		.clients = true, /* "upstream request" slices on their connections' tracks */
	};
}

int timeline_close(struct timeline *t)
{
	if (t->fd < 0)
		return t->err;
	if (t->buf) {
		tl_start(t, 0);
		fputs("\n]}\n", t->buf);
		tl_flush(t);
	}
	if (t->buf)
		fclose(t->buf);
	t->buf = NULL;
	free(t->mem);
	t->mem = NULL;
	if (close(t->fd) && !t->err)
		t->err = -errno;
	t->fd = -1;
	return t->err;
}
