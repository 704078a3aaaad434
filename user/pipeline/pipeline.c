// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/grow.h"
#include "pipeline/batch.h"
#include "pipeline/device_sample.h"
#include "pipeline/pipeline_impl.h"
#include "lib/utf8.h"

static struct pipeline_proc *live_proc(const struct pipeline *pl, uint32_t pid)
{
	for (uint32_t i = 0; i < pl->nlive; i++)
		if (pl->live[i].pid == pid)
			return &pl->live[i];
	return NULL;
}

/* A request's start to the sinks. */
static void pl_start_out(struct pipeline *pl, struct request *r)
{
	for (int i = 0; i < pl->nsinks; i++)
		if (pl->sinks[i].request_start && (!r->client || pl->sinks[i].clients))
			pl->sinks[i].request_start(pl->sinks[i].ctx, r);
}

/* A request that is not inference, counted under its method and path. */
static void count_other(struct other_requests *o, const struct request *r)
{
	char what[OTHER_REQUEST_WHAT], raw[OTHER_REQUEST_WHAT];
	int n = (int)strcspn(r->path, "?");

	o->total++;
	snprintf(raw, sizeof(raw), "%s %.*s", r->method[0] ? r->method : "?", n, r->path);
	utf8_clean(what, sizeof(what), raw, strlen(raw));
	for (uint32_t i = 0; i < o->ntop; i++) {
		if (strcmp(o->top[i].what, what))
			continue;
		o->top[i].n++;
		/* Kept in order, the most frequent first. */
		for (; i > 0 && o->top[i].n > o->top[i - 1].n; i--) {
			__typeof__(o->top[0]) t = o->top[i];

			o->top[i] = o->top[i - 1];
			o->top[i - 1] = t;
		}
		return;
	}
	if (o->ntop == OTHER_REQUESTS_TOP) {
		o->rest++;
		return;
	}
	snprintf(o->top[o->ntop].what, sizeof(o->top[0].what), "%s", what);
	o->top[o->ntop++].n = 1;
}

/* A finished request to the summaries and the sinks; then freed. */
static void pl_request_out(struct pipeline *pl, struct request *r)
{
	struct request_metrics m;
	struct gpu_attribution ga;

	bool other = !request_is_inference(r);

	if (other && !r->client)
		count_other(&pl->others, r);
	request_metrics(r, &m);
	slo_judge(pl->o.slo, r, &m, &m.slo);
	gpu_attribute(&pl->gpu, r, batch_prefill_step(&pl->gpu, r), &ga);
	batch_attribute(&pl->gpu, r, &ga);
	stall_request_done(&pl->stalls, r);
	stall_attribute(&pl->stalls, &pl->gpu, r, &m, &ga);
	if (!other)
		m.cache_guess = prefix_guess(&pl->prefix, r, &m, &ga);
	for (int i = 0; i < pl->nsinks; i++) {
		const struct sink *sk = &pl->sinks[i];

		if (r->client && !sk->clients)
			continue;
		if (other && !pl->all_requests && !sk->others) {
			if (sk->request_other)
				sk->request_other(sk->ctx, r);
		} else if (sk->request) {
			sk->request(sk->ctx, r, &m, &ga);
		}
	}
	gpu_attribution_free(&ga);
	request_free(r);
}

/* A content frame's write: credited to the GPU step it came from (batch.h). */
static void pl_token(void *ctx, struct request *r)
{
	struct pipeline *pl = ctx;

	batch_token(&pl->gpu, r);
	stall_token(&pl->stalls, &pl->gpu, r);
}

/* The kernel time now, as pipeline_status says it. */
static uint64_t pl_now(const struct pipeline *pl)
{
	return pl->clock_ns > pl->last_ns ? pl->clock_ns : pl->last_ns;
}

/* Whether a held event can go out: a start always; a finished request when the device times
 * of the steps it overlaps are in, and the batches of the steps its tokens came from are
 * final. */
static bool pl_event_ready(const struct pipeline *pl, const struct pl_event *e)
{
	return e->start || (gpu_device_complete(&pl->gpu, e->r->end_ns, pl_now(pl)) &&
			    batch_settled(&pl->gpu, e->r, pl_now(pl)));
}

/* The oldest held event to the sinks (there must be one). */
static void held_out(struct pipeline *pl)
{
	struct pl_event e = pl->held[pl->held_head];

	pl->held_head = (pl->held_head + 1) % PIPELINE_MAX_HELD;
	pl->nheld--;
	if (e.start)
		pl_start_out(pl, e.r);
	else
		pl_request_out(pl, e.r);
}

/*
 * Where GPU processes report device times (CUPTI), a finished request waits for those of the
 * steps it overlaps, which come in up to a flush period later (gpu_device_complete), so that
 * its attribution uses them; and every request waits until the steps its tokens came from can
 * gain no more requests (batch_settled), so that its mean batch is final. Starts and ends
 * leave in the order they happened (a start waits behind an end held before it), so a sink
 * that counts requests in flight counts them as they were.
 */
static void pl_event(struct pipeline *pl, struct request *r, bool start)
{
	struct pl_event e = { r, start };

	if (!pl->nheld && pl_event_ready(pl, &e)) {
		if (start)
			pl_start_out(pl, r);
		else
			pl_request_out(pl, r);
		return;
	}
	if (pl->nheld == PIPELINE_MAX_HELD)
		held_out(pl);
	pl->held[(pl->held_head + pl->nheld++) % PIPELINE_MAX_HELD] = e;
}

static void pl_request_start(void *ctx, struct request *r)
{
	struct pipeline *pl = ctx;

	const struct pipeline_proc *p = live_proc(pl, r->pid);

	/* Labelled at its start: the sinks key what they keep open (in flight) by it. */
	if (p)
		r->workload = p->wl;
	/* Joined mid-response, it has no request to pair with an upstream call. */
	if (!r->joined)
		proxy_start(&pl->proxy, r);
	pl_event(pl, r, true);
}

static void pl_request_done(void *ctx, struct request *r)
{
	struct pipeline *pl = ctx;

	if (!r->joined)
		proxy_done(&pl->proxy, r);
	pl_event(pl, r, false);
}

static void pl_step_out(struct pipeline *pl, const struct gpu_step *s)
{
	for (int i = 0; i < pl->nsinks; i++)
		if (pl->sinks[i].gpu_step)
			pl->sinks[i].gpu_step(pl->sinks[i].ctx, s);
}

/* Lets out the steps and requests whose device times are in (or waited long enough; all:
 * everything, at the end). */
static void pl_release(struct pipeline *pl, bool all)
{
	struct gpu_step s;

	while (gpu_next_ready(&pl->gpu, pl->last_ns, pl_now(pl), all, &s))
		pl_step_out(pl, &s);
	while (pl->nheld && (all || pl_event_ready(pl, &pl->held[pl->held_head])))
		held_out(pl);
}

static void pl_joined(void *ctx, uint32_t pid, int in_flight, int reported);

int pipeline_init(struct pipeline *pl, const struct pipeline_opts *o)
{
	struct conn_sink sink = {
		.request_start = pl_request_start,
		.request_done = pl_request_done,
		.token = pl_token,
		.joined = pl_joined,
		.ctx = pl,
	};

	memset(pl, 0, sizeof(*pl));
	pl->o = *o;
	proxy_init(&pl->proxy);
	stall_init(&pl->stalls, o->stall_ns);
	if (gpu_init(&pl->gpu))
		return -ENOMEM;
	if (conn_table_init(&pl->conns, &sink))
		return -ENOMEM;
	pl->conns.labels = o->labels && o->labels->n ? o->labels : NULL;
	return 0;
}

void pipeline_free(struct pipeline *pl)
{
	/* Held ends own their requests; a held start's request is its connection's. */
	for (; pl->nheld; pl->nheld--, pl->held_head = (pl->held_head + 1) % PIPELINE_MAX_HELD)
		if (!pl->held[pl->held_head].start)
			request_free(pl->held[pl->held_head].r);
	conn_table_free(&pl->conns);
	gpu_free(&pl->gpu);
	stall_free(&pl->stalls);
	free(pl->live);
	free(pl->status_pids);
	pl->live = NULL;
}

static bool is_root(const struct pipeline *pl, uint32_t pid)
{
	for (uint32_t i = 0; i < pl->nroots; i++)
		if (pl->roots[i] == pid)
			return true;
	return false;
}

int pipeline_add_process(struct pipeline *pl, uint32_t pid, bool root)
{
	struct pipeline_proc *live;

	if (root && !is_root(pl, pid)) {
		if (pl->nroots == PIPELINE_MAX_ROOTS)
			return -E2BIG;
		pl->roots[pl->nroots++] = pid;
	}
	if (live_proc(pl, pid))
		return 0;
	live = grow(pl->live, &pl->live_cap, pl->nlive + 1, sizeof(*live), 16);
	if (!live)
		return -ENOMEM;
	pl->live = live;
	pl->live[pl->nlive++] = (struct pipeline_proc){ .pid = pid, .root = root ? pid : 0 };
	return 0;
}

void pipeline_process_root(struct pipeline *pl, uint32_t pid, uint32_t root)
{
	struct pipeline_proc *p = live_proc(pl, pid);

	if (p)
		p->root = root;
}

/* The server of pid: the root it descends from, else itself. */
static uint32_t server_of(const struct pipeline *pl, uint32_t pid)
{
	const struct pipeline_proc *p = live_proc(pl, pid);

	return p && p->root ? p->root : pid;
}

/* An exchange in flight when tracing began, counted for its server (exchange.h). */
static void pl_joined(void *ctx, uint32_t pid, int in_flight, int reported)
{
	struct pipeline *pl = ctx;
	struct joined_servers *j = &pl->joined;
	uint32_t server = server_of(pl, pid), i;

	for (i = 0; i < j->n && j->s[i].pid != server; i++)
		;
	if (i == j->n) {
		if (j->n < JOINED_SERVERS_MAX) {
			j->s[j->n++] = (struct joined_server){ .pid = server };
		} else {
			/* The servers past the cap share the last entry, pid 0. */
			i = JOINED_SERVERS_MAX;
			if (j->n == JOINED_SERVERS_MAX)
				j->s[j->n++] = (struct joined_server){ .pid = 0 };
		}
	}
	j->s[i].in_flight += (uint64_t)(int64_t)in_flight;
	j->s[i].reported += (uint64_t)(int64_t)reported;
}

static void drop_root(struct pipeline *pl, uint32_t pid)
{
	for (uint32_t i = 0; i < pl->nroots; i++)
		if (pl->roots[i] == pid) {
			pl->roots[i] = pl->roots[--pl->nroots];
			return;
		}
}

/* The process left: its entry goes, the last one taking its place. */
static void drop_live(struct pipeline *pl, uint32_t pid)
{
	struct pipeline_proc *p = live_proc(pl, pid);

	if (p)
		*p = pl->live[--pl->nlive];
}

void pipeline_forget_process(struct pipeline *pl, uint32_t pid)
{
	drop_live(pl, pid);
	drop_root(pl, pid);
}

bool pipeline_all_exited(const struct pipeline *pl)
{
	return !pl->keep_running && pl->nroots && pl->nlive == 0;
}

void pipeline_set_tap(struct pipeline *pl, const struct pipeline_tap *tap)
{
	pl->tap = tap ? *tap : (struct pipeline_tap){ 0 };
}

void pipeline_process_found(struct pipeline *pl, uint32_t pid, uint32_t root)
{
	if (pl->tap.found)
		pl->tap.found(pl->tap.ctx, pid, root);
}

/* A label from the records (a fork's, its parent's): not one the pipeline is fed. */
static int label_process(struct pipeline *pl, uint32_t pid, const struct workload *w)
{
	struct pipeline_proc *p = live_proc(pl, pid);

	if (!p)
		return -ENOENT;
	if (w)
		p->wl = *w;
	else
		memset(&p->wl, 0, sizeof(p->wl));
	return 0;
}

int pipeline_label_process(struct pipeline *pl, uint32_t pid, const struct workload *w)
{
	if (pl->tap.workload)
		pl->tap.workload(pl->tap.ctx, pid, w);
	return label_process(pl, pid, w);
}

static void pl_proc_exit(struct pipeline *pl, const struct ts_proc_event *e)
{
	char comm[UTF8_REPLACEMENT_BYTES * sizeof(e->comm) + 1];

	/* A process names itself (prctl): no escape sequence of its reaches the terminal. */
	utf8_clean(comm, sizeof(comm), e->comm, strnlen(e->comm, sizeof(e->comm)));
	conn_close_pid(&pl->conns, e->hdr.pid, e->ts_ns);
	drop_live(pl, e->hdr.pid);
	if (pl->on_exit)
		pl->on_exit(pl->on_exit_ctx, e->hdr.pid);
	if (is_root(pl, e->hdr.pid) || pl->o.verbose) {
		int st = e->exit_code;

		if (st & 0x7f)
			fprintf(pl->o.err, "tokenscope: process %u (%s) was killed by signal %d\n",
				e->hdr.pid, comm, st & 0x7f);
		else
			fprintf(pl->o.err, "tokenscope: process %u (%s) exited with status %d\n",
				e->hdr.pid, comm, (st >> 8) & 0xff);
	}
	/* --all runs for as long as it is left: an exited server's slot goes to the next one. With
	 * -p the roots stay, to tell when all of them are gone. */
	if (pl->keep_running)
		drop_root(pl, e->hdr.pid);
}

/* A record of ABI version 1 as an older recording holds it (events.h): its counters are the
 * first TS_DEVTIME_STATS_V1_BYTES of today's, the rest 0, and its runs follow them. */
static int pl_dev_runs_v1(struct pipeline *pl, const uint8_t *rec)
{
	struct ts_dev_runs_event *e = calloc(1, sizeof(*e));
	size_t head = offsetof(struct ts_dev_runs_event, stats);
	int err;

	if (!e)
		return -ENOMEM;
	memcpy(e, rec, head);
	memcpy(&e->stats, rec + head, TS_DEVTIME_STATS_V1_BYTES);
	memcpy(e->runs, rec + head + TS_DEVTIME_STATS_V1_BYTES, sizeof(e->runs));
	e->hdr.size = sizeof(*e);
	err = pipeline_feed(pl, e, sizeof(*e));
	free(e);
	return err;
}

/* A traced process forked: the child is followed, labelled and rooted as its parent. */
static void pl_proc_fork(struct pipeline *pl, const struct ts_proc_event *e)
{
	const struct pipeline_proc *parent;
	struct workload wl = { 0 };
	uint32_t root = 0;

	/* Copied out before the child's entry is added: that may move the list. */
	parent = live_proc(pl, e->ppid);
	if (parent) {
		wl = parent->wl;
		root = parent->root ? parent->root : parent->pid;
	}
	if (!pipeline_add_process(pl, e->hdr.pid, false)) {
		label_process(pl, e->hdr.pid, &wl);
		pipeline_process_root(pl, e->hdr.pid, root);
	}
	if (pl->o.verbose)
		fprintf(pl->o.err, "tokenscope: following process %u (child of %u)\n", e->hdr.pid,
			e->ppid);
}

/* A record of device runs (a whole one of this ABI's size) to the GPU timeline. */
static void pl_dev_runs(struct pipeline *pl, const struct ts_dev_runs_event *e)
{
	if (gpu_devtime_abi_known(e->abi) && e->stats.flush_ns > pl->last_ns)
		pl->last_ns = e->stats.flush_ns;
	if (!gpu_devtime_abi_known(e->abi) && !pl->gpu.devtime_abi_bad)
		fprintf(pl->o.err,
			"tokenscope: pid %u runs a libtokenscope_cupti.so of ABI version %u; this "
			"tokenscope reads version %u: no device times from it\n",
			e->hdr.pid, e->abi, TS_DEVTIME_ABI);
	gpu_add_runs(&pl->gpu, e);
	pl_release(pl, false);
}

int pipeline_feed(struct pipeline *pl, const void *rec, size_t len)
{
	const struct ts_event_hdr *h = rec;

	if (pl->tap.record)
		pl->tap.record(pl->tap.ctx, rec, len);

	if (len < sizeof(*h) || h->size != len)
		goto bad;
	switch (h->type) {
	case TS_EV_DATA: {
		const struct ts_data_event *e = rec;

		if (len < sizeof(*e) || len != sizeof(*e) + e->data_bytes || e->dir > TS_DIR_OUT)
			goto bad;
		if (e->exit_ns > pl->last_ns)
			pl->last_ns = e->exit_ns;
		conn_on_data(&pl->conns, e);
		return 0;
	}
	case TS_EV_CONN_OPEN:
	case TS_EV_CONN_CLOSE:
		if (len != sizeof(struct ts_conn_event))
			goto bad;
		if (((const struct ts_conn_event *)rec)->ts_ns > pl->last_ns)
			pl->last_ns = ((const struct ts_conn_event *)rec)->ts_ns;
		if (h->type == TS_EV_CONN_OPEN)
			conn_on_open(&pl->conns, rec);
		else
			conn_on_close(&pl->conns, rec);
		return 0;
	case TS_EV_PROC_FORK:
		if (len != sizeof(struct ts_proc_event))
			goto bad;
		pl_proc_fork(pl, rec);
		return 0;
	case TS_EV_PROC_EXIT:
		if (len != sizeof(struct ts_proc_event))
			goto bad;
		pl_proc_exit(pl, rec);
		return 0;
	case TS_EV_GPU_CALL:
		if (len != sizeof(struct ts_gpu_call_event))
			goto bad;
		pl->gpu.calls++;
		for (int i = 0; i < pl->nsinks; i++)
			if (pl->sinks[i].gpu_call)
				pl->sinks[i].gpu_call(pl->sinks[i].ctx, rec);
		return 0;
	case TS_EV_GPU_STEP: {
		struct gpu_step s;

		if (len != sizeof(struct ts_gpu_step_event) || !gpu_step_times_ok(rec))
			goto bad;
		gpu_add(&pl->gpu, rec, &s);
		if (s.end_ns > pl->last_ns)
			pl->last_ns = s.end_ns;
		if (!s.pending)
			pl_step_out(pl, &s);
		/* Its end closes the batch of its process's previous step. */
		pl_release(pl, false);
		return 0;
	}
	case TS_EV_DEV_RUNS:
		/* A recording made by a tokenscope of ABI version 1 holds smaller records: made
		 * whole (and counted as another version's unless they are version 1's). */
		if (len == TS_DEV_RUNS_V1_BYTES)
			return pl_dev_runs_v1(pl, rec);
		if (len != sizeof(struct ts_dev_runs_event) ||
		    ((const struct ts_dev_runs_event *)rec)->n > TS_RUNS_PER_PROBE)
			goto bad;
		pl_dev_runs(pl, rec);
		return 0;
	}
bad:
	pl->bad_records++;
	return -EINVAL;
}

void pipeline_kernel_lost(struct pipeline *pl, uint64_t lost_events)
{
	if (lost_events > pl->lost_seen)
		conn_mark_open_maybe_lost(&pl->conns);
	pl->lost_seen = lost_events;
	pl->kstats[TS_STAT_LOST_EVENTS] = lost_events;
}

void pipeline_finish(struct pipeline *pl)
{
	conn_finish_maybe_lost(&pl->conns);
	pl_release(pl, true);
	struct pipeline_status st;

	pipeline_status(pl, &st);
	for (int i = 0; i < pl->nsinks; i++)
		if (pl->sinks[i].finish)
			pl->sinks[i].finish(pl->sinks[i].ctx, &st);
}

int pipeline_add_sink(struct pipeline *pl, const struct sink *s)
{
	if (pl->nsinks == PIPELINE_MAX_SINKS)
		return -E2BIG;
	pl->sinks[pl->nsinks++] = *s;
	return 0;
}

void pipeline_status(struct pipeline *pl, struct pipeline_status *st)
{
	uint32_t *pids = grow(pl->status_pids, &pl->status_cap, pl->nlive, sizeof(*pids), 64);

	memset(st, 0, sizeof(*st));
	st->record_ns = pl->last_ns;
	st->now_ns = pl->clock_ns > pl->last_ns ? pl->clock_ns : pl->last_ns;
	st->in_flight = conn_inflight(&pl->conns);
	/* Without memory for the copy, the sinks see no traced process rather than a wrong one. */
	if (pids) {
		pl->status_pids = pids;
		for (uint32_t i = 0; i < pl->nlive; i++)
			pids[i] = pl->live[i].pid;
		st->ntraced = pl->nlive;
		st->traced = pids;
	}
	pipeline_loss(pl, &st->loss);
	gpu_report(&pl->gpu, pl->status_gpu, &st->gpu);
	st->nfeatures = pl->nfeatures;
	st->features = pl->features;
	st->all_requests = pl->all_requests;
	st->others = pl->others;
	st->joined = pl->joined;
	st->cost = pl->cost.seq ? &pl->cost : NULL;
	st->slo = pl->o.slo && pl->o.slo->n ? pl->o.slo : NULL;
}

void pipeline_features(struct pipeline *pl, const struct run_feature *f, uint32_t n)
{
	pl->nfeatures = n < RUN_FEATURES_MAX ? n : RUN_FEATURES_MAX;
	memcpy(pl->features, f, pl->nfeatures * sizeof(*f));
}

void pipeline_self_cost(struct pipeline *pl, const struct self_cost *c)
{
	pl->cost = *c;
}

static bool pl_traced(void *ctx, uint32_t pid)
{
	const struct pipeline *pl = ctx;

	for (uint32_t i = 0; i < pl->nlive; i++)
		if (pl->live[i].pid == pid)
			return true;
	return false;
}

void pipeline_device_sample(struct pipeline *pl, struct device_sample *s)
{
	if (pl->tap.sample)
		pl->tap.sample(pl->tap.ctx, s);
	device_sample_keep_procs(s, pl_traced, pl);
	for (int i = 0; i < pl->nsinks; i++)
		if (pl->sinks[i].device_sample)
			pl->sinks[i].device_sample(pl->sinks[i].ctx, s);
}

void pipeline_clock(struct pipeline *pl, uint64_t now_ns)
{
	if (now_ns > pl->clock_ns)
		pl->clock_ns = now_ns;
}

void pipeline_tick(struct pipeline *pl)
{
	struct pipeline_status st;

	if (pl->tap.drain)
		pl->tap.drain(pl->tap.ctx, pl->clock_ns);
	pl_release(pl, false);
	pipeline_status(pl, &st);
	for (int i = 0; i < pl->nsinks; i++)
		if (pl->sinks[i].tick)
			pl->sinks[i].tick(pl->sinks[i].ctx, &st);
}

void pipeline_loss(const struct pipeline *pl, struct loss_report *loss)
{
	loss->lost_events = pl->kstats[TS_STAT_LOST_EVENTS];
	loss->lost_bytes = pl->kstats[TS_STAT_LOST_BYTES];
	loss->uncaptured_bytes = pl->kstats[TS_STAT_UNCAPTURED_BYTES];
	loss->gap_bytes = pl->conns.stats.gap_bytes;
	loss->desyncs = pl->conns.stats.desyncs;
	loss->bad_records = pl->bad_records;
	loss->untraced_sockets = pl->kstats[TS_STAT_CONN_TABLE_FULL];
	loss->copy_failed = pl->kstats[TS_STAT_COPY_FAILED];
	loss->http_conns = pl->conns.stats.http_conns;
	loss->ignored_conns = pl->conns.stats.ignored_conns;
	loss->local_other = pl->conns.stats.local_other;
	loss->client_conns = pl->conns.stats.client_conns;
	loss->h2_conns = pl->conns.stats.h2_conns;
	loss->h2_midway = pl->conns.stats.h2_midway;
	loss->joined_conns = pl->conns.stats.joined_conns;
	loss->waiting_conns = pl->conns.stats.waiting_conns;
	loss->joined_reported = pl->conns.stats.joined_reported;
	loss->tls_conns = pl->conns.stats.tls_conns;
	loss->tls_unread = pl->conns.stats.tls_unread;
	loss->tls_wire_writes = pl->kstats[TS_STAT_TLS_WIRE_WRITES];
	loss->tls_unjoined = pl->kstats[TS_STAT_TLS_UNJOINED];
	loss->tls_wire_ns = pl->kstats[TS_STAT_TLS_WIRE_NS];
	loss->partial_requests = pl->conns.stats.partial_requests;
	loss->orphan_responses = pl->conns.stats.orphan_responses;
	loss->pipeline_overflow = pl->conns.stats.pipeline_overflow;
	loss->oversize_frames = pl->conns.stats.oversize_frames;
	loss->damaged_frames = pl->conns.stats.damaged_frames;
	loss->budget_refused = pl->conns.budget.refused;
	loss->budget_max = pl->conns.budget.max;
	loss->budget_max_mib = pl->conns.budget.max >> 20;
	loss->frame_max_kib = SSE_FRAME_MAX / 1024;
	loss->zero = 0;
	loss->device_times = pl->gpu.devtime_procs > 0;
	loss->device_dropped = loss->device_pool_empty = loss->device_unplaced = 0;
	for (uint32_t i = 0; i < pl->gpu.nprocs; i++) {
		const struct gpu_devtime *c = &pl->gpu.procs[i].devtime;

		loss->device_dropped += c->stats.dropped;
		loss->device_pool_empty += c->stats.pool_empty;
		loss->device_unplaced += c->unplaced;
	}
	/* Runs still waiting for a step at the end ran in none. */
	loss->device_unplaced += pl->gpu.norphans;
	loss->device_late = pl->gpu.released_late;
	loss->device_abi_bad = pl->gpu.devtime_abi_bad;
}

void pipeline_interval(struct pipeline *pl)
{
	struct pipeline_status st;

	pipeline_status(pl, &st);
	for (int i = 0; i < pl->nsinks; i++)
		if (pl->sinks[i].interval)
			pl->sinks[i].interval(pl->sinks[i].ctx, &st);
}

struct pipeline *pipeline_new(const struct pipeline_opts *o)
{
	struct pipeline *pl = malloc(sizeof(*pl));

	if (!pl || pipeline_init(pl, o)) {
		fprintf(o->err ? o->err : stderr, "tokenscope: no memory for the pipeline\n");
		free(pl);
		return NULL;
	}
	return pl;
}

void pipeline_destroy(struct pipeline *pl)
{
	if (!pl)
		return;
	pipeline_free(pl);
	free(pl);
}

void pipeline_keep_running(struct pipeline *pl, bool on)
{
	pl->keep_running = on;
}

void pipeline_all_requests(struct pipeline *pl, bool on)
{
	pl->all_requests = on;
}

void pipeline_on_exit(struct pipeline *pl, void (*fn)(void *ctx, uint32_t pid), void *ctx)
{
	pl->on_exit = fn;
	pl->on_exit_ctx = ctx;
}

void pipeline_kstats(struct pipeline *pl, const uint64_t *stats, uint32_t n)
{
	if (pl->tap.kstats)
		pl->tap.kstats(pl->tap.ctx, stats, n);
	for (uint32_t k = 0; k < n && k < TS_STAT_MAX; k++)
		if (k != TS_STAT_LOST_EVENTS)
			pl->kstats[k] = stats[k];
	if (n > TS_STAT_LOST_EVENTS)
		pipeline_kernel_lost(pl, stats[TS_STAT_LOST_EVENTS]);
}

const uint64_t *pipeline_kstats_now(const struct pipeline *pl)
{
	return pl->kstats;
}

uint64_t pipeline_record_ns(const struct pipeline *pl)
{
	return pl->last_ns;
}

uint32_t pipeline_nlive(const struct pipeline *pl)
{
	return pl->nlive;
}

uint32_t pipeline_live_pid(const struct pipeline *pl, uint32_t i)
{
	return i < pl->nlive ? pl->live[i].pid : 0;
}

bool pipeline_http_seen(const struct pipeline *pl)
{
	const struct conn_stats *c = &pl->conns.stats;

	return c->http_conns || c->client_conns || c->h2_conns || c->h2_midway || c->tls_conns;
}
