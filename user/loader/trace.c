// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/types.h>

#include "lib/clock.h"
#include "loader/uprobes.h"
#include "loader/tracefs.h"
#include "loader/discover.h"
#include "loader/hold.h"
#include "loader/release.h"
#include "loader/kernel.h"
#include "loader/proc.h"
#include "loader/privs.h"
#include "loader/trace.h"
#include "loader/container.h"
#include "loader/cost.h"
#include "loader/vendor.h"
#include "events.h"
#include "traffic.h"
#include "lib/utf8.h"

/* How often the traced processes' maps are read again for CUDA libraries loaded since: an
 * engine process maps libcudart seconds after it starts. */
#define CUDA_RESCAN_S 1.0
/* How long -p may show no HTTP connection before tokenscope says so, once, and names the
 * processes near it that listen on TCP: long enough for a client's next request, short enough
 * to help a user who gave the wrong pid before they give up. */
#define QUIET_HINT_S 5.0
/* Listening ports named per process in that hint. */
#define QUIET_PORTS_MAX 4
/* How many ancestors of a traced process are looked at for one that listens. */
#define QUIET_ANCESTORS_MAX 8
/* How often --all looks for inference servers started since. */
#define DISCOVER_RESCAN_S 5.0
/* How often --all drains the processes the kernel saw writing streamed completions: a few map
 * lookups, so often enough that little of a found server's traffic goes by untraced. */
#define TRAFFIC_DRAIN_S 0.25
/* How often the tracer measures its own cost (cost.h): a system call per BPF program, so once a
 * second, which /metrics and the live view show. */
#define COST_SAMPLE_S 1.0

struct tracer {
	struct kernel *k;
	/* where the processes being followed now run (their root's workload) */
	const struct workload *label;
	uint32_t root;		    /* and the root they descend from */
	struct container_dirs dirs; /* where containers' bundles are looked for */
	struct pipeline *pl;
	struct uprobes cuda;
	/* each GPU vendor's sampler (vendor.h: NVML for CUDA), when device_samples asked, and
	 * its latest sample */
	void *samplers[VENDORS_MAX];
	struct device_sample *samples;
	struct hold hold;	  /* processes stopped at a library mapping until hooked */
	struct features features; /* what this kernel has (features.h) */
	bool verbose;
	struct discover_set *seen; /* --all: servers found so far, dropped when they exit */
	uint64_t caps;		   /* the effective capabilities, for the messages of a refusal */
	bool cuda_explained;	   /* why no CUDA library could be hooked was said */
	char quiet_hint[512];	   /* its rest, when -p showed no HTTP connection (QUIET_HINT_S) */
	bool quiet_done;	   /* ... once looked at */
	struct cost_meter cost;	   /* what tracing costs (cost.h) */
};

/* A process held at a library mapping: its probes, before it goes on (hold.h). */
static void hook_held(void *ctx, uint32_t pid)
{
	struct tracer *tr = ctx;

	uprobes_mapped(&tr->cuda, pid, 0, NULL, NULL);
}

static bool is_held(void *ctx, uint32_t pid)
{
	struct tracer *tr = ctx;

	return hold_has(&tr->hold, pid);
}

static int on_record(void *ctx, void *data, size_t size)
{
	struct tracer *tr = ctx;
	const struct ts_event_hdr *h = data;

	/* A library mapped: for the loader alone, not the pipeline or a recording. A process
	 * held there is hooked and continued with any other held (a record may be lost: each
	 * drain looks too). */
	if (size == sizeof(struct ts_proc_event) && h->type == TS_EV_PROC_MAP) {
		const struct ts_proc_event *pe = data;

		/* Any held process first, by the hold's path. Another mapping's scan (its libc,
		 * say) may still find a library the process is being stopped at: not a window. */
		hold_release(&tr->hold, hook_held, tr);
		if (pe->exit_code != TS_PROC_MAP_HELD)
			uprobes_mapped(&tr->cuda, h->pid, pe->ts_ns, is_held, tr);
		return 0;
	}

	pipeline_feed(tr->pl, data, size);
	/* A child forked: by the main thread with shared probes, it carries its parent's from
	 * the fork on (tracefs.h), and the next scan gives it its own (a fork-heavy server's
	 * short-lived children cost nothing more); otherwise it is hooked now. */
	if (size == sizeof(struct ts_proc_event) && h->type == TS_EV_PROC_FORK && tr->cuda.k)
		uprobes_fork(&tr->cuda, ((const struct ts_proc_event *)data)->ppid,
			     ((const struct ts_proc_event *)data)->ptid, h->pid);
	return 0;
}

/*
 * The kernel's counters, every drain: the lost-record count decides which open requests may be
 * lost, and the others reach /metrics and recordings as they change (a per-CPU array lookup
 * per counter, a few microseconds each drain).
 */
static void read_kstats(struct tracer *tr)
{
	uint64_t stats[TS_STAT_MAX];

	/* A counter that cannot be read keeps its last value. */
	memcpy(stats, pipeline_kstats_now(tr->pl), sizeof(stats));
	for (unsigned int k = 0; k < TS_STAT_MAX; k++)
		kernel_read_stat(tr->k, k, &stats[k]);
	pipeline_kstats(tr->pl, stats, TS_STAT_MAX);
}

/* Records handed over out of time order (kernel.h): none in a run where every program took less
 * than the settle margin and every CPU's batch could be flushed at each drain. */
static void late_note(const struct kernel *k)
{
	uint64_t max_ns, busy, late = kernel_ring_late(k, &max_ns, &busy);

	if (late)
		fprintf(stderr,
			"tokenscope: %llu record%s reached the pipeline after later ones (by up to "
			"%.3f ms): a stream may show a gap there\n",
			(unsigned long long)late, late == 1 ? "" : "s", (double)max_ns / 1e6);
	if (busy)
		fprintf(
		    stderr,
		    "tokenscope: %llu drain%s found a CPU busy inside its batch at every try: its "
		    "records came a drain later\n",
		    (unsigned long long)busy, busy == 1 ? "" : "s");
}

/* What tracing costs now, for the sinks. */
static void sample_cost(struct tracer *tr)
{
	cost_sample(&tr->cost, tr->k, pipeline_kstats_now(tr->pl)[TS_STAT_SYSCALLS]);
	pipeline_self_cost(tr->pl, &tr->cost.c);
}

/* A process exited: the kernel never saw close() for its sockets (forget them), and --all may
 * find a new server under its pid. */
static void process_gone(void *ctx, uint32_t pid)
{
	struct tracer *tr = ctx;

	/* A later server that gets this pid is a new one. */
	if (tr->seen)
		discover_set_remove(tr->seen, pid);
	uprobes_forget(&tr->cuda, pid);
	kernel_forget_conns(tr->k, pid);
}

/* Whether a library of some GPU vendor was hooked for some process so far. */
static bool gpu_hooked(const struct tracer *tr)
{
	for (size_t i = 0; i < vendor_count(); i++)
		if (uprobes_hooked_files(&tr->cuda, vendor_row(i)->name))
			return true;
	return false;
}

/* Says once why GPU steps are not traced when nothing could be hooked for want of a permission
 * (the scan keeps the first refusal; privs.h puts it in words). Returns true once said. */
static bool cuda_explain(struct tracer *tr)
{
	const struct uprobes_denial *d = &tr->cuda.denied;

	/* A refusal to read the maps (no kind) is said unless a GPU library was hooked. */
	if (tr->cuda_explained || d->what == UPROBES_DENIED_NONE ||
	    (d->kind ? uprobes_hooked_files(&tr->cuda, d->kind) : gpu_hooked(tr)))
		return tr->cuda_explained;
	privs_explain_hook(tr->caps, d);
	tr->cuda_explained = true;
	return true;
}

/* late: the once-a-second scan (uprobes_scan). */
static void cuda_scan_all(struct tracer *tr, bool late)
{
	for (uint32_t i = 0; i < pipeline_nlive(tr->pl); i++)
		uprobes_scan(&tr->cuda, pipeline_live_pid(tr->pl, i), late);
}

static int trace_follow(struct tracer *tr, uint32_t pid, bool root)
{
	/* The pipeline first: when it has no room (-E2BIG), the kernel must not trace pid either.
	 */
	int err = pipeline_add_process(tr->pl, pid, root);

	if (err)
		return err;
	err = kernel_trace_pid(tr->k, pid);
	if (err)
		pipeline_forget_process(tr->pl, pid);
	return err;
}

static void follow_descendant(void *ctx, uint32_t pid)
{
	struct tracer *tr = ctx;

	if (!trace_follow(tr, pid, false)) {
		pipeline_process_found(tr->pl, pid, tr->root);
		pipeline_label_process(tr->pl, pid, tr->label);
		pipeline_process_root(tr->pl, pid, tr->root);
	}
}

/* A root process followed: labelled with where it runs, and its descendants followed with the
 * same label; the number of descendants, or -errno. */
static int follow_tree(struct tracer *tr, uint32_t pid, struct workload *wl)
{
	int n;

	container_workload("/proc", pid, &tr->dirs, wl);
	pipeline_label_process(tr->pl, pid, wl);
	tr->label = wl;
	tr->root = pid;
	n = proc_descendants("/proc", pid, follow_descendant, tr);
	tr->label = NULL;
	tr->root = 0;
	return n;
}

/* --all: follows a server found by a rule, with its descendants; false when it cannot. */
static bool discover_attach(struct tracer *tr, struct discover_set *seen,
			    const struct discovered *d)
{
	struct workload wl;

	discover_set_add(seen, d->pid);
	if (trace_follow(tr, d->pid, true))
		return false;
	pipeline_process_found(tr->pl, d->pid, 0);
	follow_tree(tr, d->pid, &wl);
	/* A server found by its traffic is named by its comm. */
	fprintf(stderr, "tokenscope: found %u (%s, rule '%s') ", d->pid,
		d->server ? d->server : d->comm, d->rule);
	if (wl.k8s_pod[0])
		fprintf(stderr, "in pod %s/%s, container %s (%.*s)\n", wl.k8s_namespace, wl.k8s_pod,
			wl.k8s_container[0] ? wl.k8s_container : "?", WORKLOAD_SHORT_LEN,
			wl.container_id);
	else if (wl.container_id[0])
		fprintf(stderr, "in container %.*s%s\n", WORKLOAD_SHORT_LEN, wl.container_id,
			wl.pod_uid[0] ? " of a pod whose runtime state was not found" : "");
	else
		fprintf(stderr, "on the host\n");
	return true;
}

/* --all: follows the inference servers that are not followed yet; returns how many. */
static int discover_follow(struct tracer *tr, struct discover_set *seen)
{
	struct discovered found[PIPELINE_MAX_ROOTS];
	size_t n = 0;
	int added = 0;

	if (discover_scan("/proc", found, PIPELINE_MAX_ROOTS, &n) == -E2BIG)
		fprintf(stderr,
			"tokenscope: more than %d inference servers: following the first %d\n",
			PIPELINE_MAX_ROOTS, PIPELINE_MAX_ROOTS);
	for (size_t i = 0; i < n; i++)
		if (discover_is_new(seen, &found[i]) && discover_attach(tr, seen, &found[i]))
			added++;
	return added;
}

/* What traffic_follow's entries work on. */
struct traffic_ctx {
	struct tracer *tr;
	struct discover_set *seen;
};

/* One process the kernel saw writing streamed completions, neither the tracer nor traced:
 * followed unless its pid now names another process; 1 if followed. */
static int traffic_one(void *ctx, uint32_t pid, const struct ts_traffic_seen *v)
{
	struct traffic_ctx *t = ctx;
	struct tracer *tr = t->tr;
	struct discovered d;
	char comm[sizeof(d.comm)];
	const char *rule = discover_traffic_rule(v->kind);

	if (!rule || discover_describe("/proc", pid, NULL, rule, &d))
		return 0;
	/* Cleaned as d.comm was, to compare like with like. */
	utf8_clean(comm, sizeof(comm), v->comm, strnlen(v->comm, sizeof(v->comm)));
	if (strcmp(d.comm, comm)) {
		if (tr->verbose)
			fprintf(stderr,
				"tokenscope: %s seen from pid %u, which is now %s: skipped\n", rule,
				pid, d.comm);
		return 0;
	}
	if (tr->verbose)
		fprintf(stderr, "tokenscope: %u (%s): %u writes started frames (%s) over %.3f s\n",
			pid, d.comm, v->matches, rule, (v->last_ns - v->first_ns) / 1e9);
	return discover_attach(tr, t->seen, &d);
}

/*
 * --all: follows the processes the kernel saw writing streamed completions to a socket (map
 * traffic_seen), and empties the map. Those already traced (a race with a rescan) and those
 * whose pid now names another process are skipped. Returns how many were followed.
 */
static int traffic_follow(struct tracer *tr, struct discover_set *seen)
{
	struct traffic_ctx t = { .tr = tr, .seen = seen };

	return kernel_traffic_take(tr->k, traffic_one, &t);
}

static int trace_load(struct tracer *tr, const struct trace_opts *o)
{
	struct kernel_config kc = { .capture_bytes = o->capture_bytes,
				    .gpu_calls = o->gpu_calls,
				    .discover_traffic = o->all && !o->no_traffic,
				    .self_tgid = getpid(),
				    .ring_mb = o->ring_mb };
	char off[1024];
	int err;

	/* What this kernel lacks is said once, with what stands in for it (features.h), and
	 * given to the outputs. */
	features_probe(&kc.features);
	tr->features = kc.features;
	features_off_text(&kc.features, off, sizeof(off));
	if (off[0])
		fprintf(stderr, "%s", off);
	{
		struct run_feature rf[RUN_FEATURES_MAX];
		uint32_t n = 0;

		for (size_t i = 0; i < features_count() && n < RUN_FEATURES_MAX; i++)
			rf[n++] = (struct run_feature){ features_row(i)->name,
							features_has(&kc.features, i) };
		pipeline_features(tr->pl, rf, n);
	}

	err = kernel_open(&tr->k, &kc.features);
	if (err) {
		fprintf(stderr, "tokenscope: cannot open the BPF object: %s\n", strerror(-err));
		return err;
	}
	err = kernel_configure(tr->k, &kc);
	if (err) {
		fprintf(stderr, "tokenscope: cannot size the ring buffer: %s\n", strerror(-err));
		return err;
	}
	err = kernel_load(tr->k);
	if (err) {
		if (err == -EPERM || err == -EACCES)
			privs_explain_load(err);
		else
			fprintf(stderr,
				"tokenscope: the kernel refused the BPF programs (%s); run with -v "
				"for the verifier log\n",
				strerror(-err));
		return err;
	}
	/* Before the mmap tracepoints are attached: nothing is held without the watchdog. */
	if (!privs_has(tr->caps, CAP_KILL)) {
		if (o->verbose)
			fprintf(stderr,
				"tokenscope: no CAP_KILL: a process that maps a CUDA or TLS "
				"library after attach is not held until hooked\n");
	} else if ((err = hold_start(&tr->hold, tr->k, o->verbose)) && o->verbose) {
		fprintf(stderr,
			"tokenscope: cannot start the hold watchdog (%s): a process that maps a "
			"CUDA or TLS library after attach is not held until hooked\n",
			strerror(-err));
	}
	err = kernel_attach(tr->k);
	if (err) {
		fprintf(stderr, "tokenscope: cannot attach to the syscall tracepoints: %s\n",
			strerror(-err));
		return err;
	}
	return 0;
}

/* What the run loop's jobs work on. */
struct loop {
	struct tracer *tr;
	const struct trace_opts *o;
	struct discover_set *seen;
	const struct trace_hooks *h; /* the owner's calls: keys */
	double start;		     /* mono_s() when tracing began */
	long intervals;		     /* interval summaries printed */
	uint32_t gpu_told;	     /* a bit per GPU vendor whose library's hooking was noted */
};

/*
 * A periodic job of the run loop: run once due (first `first` seconds after the start, then
 * every `period`: on a fixed rate, or `period` after it last ran; period 0: after every drain
 * of the ring buffer). It returns true to end the trace.
 */
struct loop_job {
	bool (*wanted)(const struct loop *l);
	bool (*run)(struct loop *l, double now);
	double first, period;
	bool fixed_rate;
	double next;
};

static bool want_always(const struct loop *l)
{
	(void)l;
	return true;
}

static bool want_interval(const struct loop *l)
{
	return l->o->interval_s > 0;
}

static bool want_keys(const struct loop *l)
{
	return l->h->key != NULL;
}

static bool want_all(const struct loop *l)
{
	return l->o->all;
}

static bool want_traffic(const struct loop *l)
{
	return l->o->all && !l->o->no_traffic;
}

static bool want_duration(const struct loop *l)
{
	return l->o->duration_s > 0;
}

static bool job_interval(struct loop *l, double now)
{
	(void)now;
	pipeline_interval(l->tr->pl);
	return l->o->count && ++l->intervals >= l->o->count;
}

static bool job_keys(struct loop *l, double now)
{
	(void)now;
	/* The live view's frames are its sink's, on the pipeline's kernel time (which the drain
	 * moves on with the clock while no record comes); its keys are read here. */
	return l->h->key(l->h->ctx);
}

static bool job_discover(struct loop *l, double now)
{
	(void)now;
	discover_follow(l->tr, l->seen);
	return false;
}

static bool job_traffic(struct loop *l, double now)
{
	(void)now;
	traffic_follow(l->tr, l->seen);
	return false;
}

static bool job_cost(struct loop *l, double now)
{
	(void)now;
	sample_cost(l->tr);
	return false;
}

static bool job_cuda(struct loop *l, double now)
{
	(void)now;
	cuda_scan_all(l->tr, true);
	cuda_explain(l->tr);
	return false;
}

/* Whether the traced processes have shown an HTTP connection (served, called, HTTP/2, TLS). */
static bool http_seen(const struct tracer *tr)
{
	return pipeline_http_seen(tr->pl);
}

/* "pid (comm) listens on ports 8000, 8001" into out; false when pid listens on no TCP port. */
static bool quiet_listener(uint32_t pid, char *out, size_t n)
{
	uint16_t ports[QUIET_PORTS_MAX];
	char comm[PROC_COMM_TEXT];
	int np = proc_listen_ports(pid, ports, QUIET_PORTS_MAX);
	size_t len;

	if (np <= 0)
		return false;
	proc_comm(pid, comm, sizeof(comm));
	len = snprintf(out, n, "%u (%s) listens on port%s", pid, comm, np > 1 ? "s" : "");
	for (int i = 0; i < np && len < n; i++)
		len += snprintf(out + len, n - len, "%s%u", i ? ", " : " ", ports[i]);
	return true;
}

/*
 * The rest of the hint for a -p that showed no HTTP connection (after "no HTTP connection seen
 * in N s", N said where it is printed): whether the process listens at all, and if
 * not, the nearest ancestor that does (the API server of an engine process, say); its
 * descendants are traced already.
 */
static void quiet_hint(const struct trace_opts *o, char *out, size_t n)
{
	char what[128], comm[PROC_COMM_TEXT];
	uint32_t pid = o->pids[0], ppid;

	proc_comm(pid, comm, sizeof(comm));
	if (quiet_listener(pid, what, sizeof(what))) {
		snprintf(out, n, "; %s: is a client sending it requests?", what);
		return;
	}
	for (int i = 0; i < QUIET_ANCESTORS_MAX; i++) {
		char name[16];

		snprintf(name, sizeof(name), "%u", pid);
		/* PID 1 is init: never the server to suggest. */
		if (proc_read_stat("/proc", name, &pid, &ppid) || ppid <= 1)
			break;
		pid = ppid;
		if (quiet_listener(pid, what, sizeof(what))) {
			snprintf(out, n,
				 ", and %u (%s) listens on no TCP port: is it the server? Its "
				 "ancestor %s: try -p %u",
				 o->pids[0], comm, what, pid);
			return;
		}
	}
	snprintf(out, n,
		 ", and %u (%s) listens on no TCP port, nor do its parents: is it the server? "
		 "(ss -ltnp names the process listening on the server's port)",
		 o->pids[0], comm);
}

/* -p: says once, QUIET_HINT_S after attach, that no HTTP connection was seen, and where the
 * server may be instead. */
static bool job_quiet(struct loop *l, double now)
{
	/* Once: the job is not due again. */
	l->tr->quiet_done = true;
	if (http_seen(l->tr))
		return false;
	quiet_hint(l->o, l->tr->quiet_hint, sizeof(l->tr->quiet_hint));
	fprintf(stderr, "tokenscope: no HTTP connection seen in %.0f s%s\n", now - l->start,
		l->tr->quiet_hint);
	return false;
}

static bool want_quiet(const struct loop *l)
{
	return l->o->npids && !l->o->all && !l->o->run_name && !l->tr->quiet_done;
}

static bool job_duration(struct loop *l, double now)
{
	return now - l->start >= l->o->duration_s;
}

static bool job_exited(struct loop *l, double now)
{
	(void)now;
	if (!pipeline_all_exited(l->tr->pl))
		return false;
	fprintf(stderr, "tokenscope: every traced process has exited\n");
	return true;
}

/* Each GPU vendor's sampler, for outputs that show their samples: its thread samples while
 * tracing, each drain takes the latest. Without a driver the thread keeps why (said once a traced
 * process maps one of the vendor's libraries) and ends; tracing goes on. 0, or -ENOMEM. */
static int start_samplers(struct tracer *tr, const struct trace_opts *o)
{
	if (!o->device_samples)
		return 0;
	tr->samples = calloc(vendor_count(), sizeof(*tr->samples));
	if (!tr->samples)
		return -ENOMEM;
	for (size_t i = 0; i < vendor_count(); i++) {
		const struct sampler_ops *s = vendor_row(i)->sampler;

		if (s && !(tr->samplers[i] = s->start()))
			return -ENOMEM;
	}
	return 0;
}

/* Stops every sampler started and frees the samples. */
static void stop_samplers(struct tracer *tr)
{
	for (size_t i = 0; i < vendor_count(); i++)
		if (tr->samplers[i])
			vendor_row(i)->sampler->stop(tr->samplers[i]);
	free(tr->samples);
}

/* After a drain, vendor i's: once a traced process mapped one of its libraries, the note for
 * it and why its sampler has no GPU figures (said then: not on every run of a machine without
 * its GPUs); and a new sample, where the pipeline's time is this drain's. */
static void drain_vendor(struct loop *l, size_t i)
{
	struct tracer *tr = l->tr;
	const struct vendor *v = vendor_row(i);

	if ((tr->cuda.gpu_mapped >> i & 1) && !(l->gpu_told >> i & 1)) {
		l->gpu_told |= 1u << i;
		if (l->o->gpu_note[i][0])
			fprintf(stderr, "tokenscope: %s\n", l->o->gpu_note[i]);
		if (tr->samplers[i])
			v->sampler->say_why(tr->samplers[i]);
	}
	if (tr->samplers[i] && v->sampler->latest(tr->samplers[i], &tr->samples[i]))
		pipeline_device_sample(tr->pl, &tr->samples[i]);
}

/* Drains the ring buffer into the pipeline. */
static void loop_drain(struct loop *l)
{
	struct tracer *tr = l->tr;
	/* Every record made up to this clock reading is handed over by the drain, so a step's
	 * batch window never closes ahead of a token write already made. */
	uint64_t now = kernel_ring_consume(tr->k);

	/* A held process whose record was lost waits no longer than a drain. */
	hold_release(&tr->hold, hook_held, tr);
	read_kstats(tr);
	pipeline_clock(tr->pl, now);
	for (size_t i = 0; i < vendor_count(); i++)
		drain_vendor(l, i);
	pipeline_tick(tr->pl);
}

/* Polls the ring buffer and runs the jobs until one ends the trace, a signal asks it to, or the
 * ring buffer cannot be read (its error). */
static int loop_run(struct loop *l, volatile sig_atomic_t *exiting)
{
	struct loop_job jobs[] = {
		{ want_interval, job_interval, l->o->interval_s, l->o->interval_s, true, 0 },
		{ want_keys, job_keys, 0, 0, false, 0 },
		{ want_all, job_discover, 0, DISCOVER_RESCAN_S, false, 0 },
		{ want_traffic, job_traffic, 0, TRAFFIC_DRAIN_S, false, 0 },
		{ want_always, job_cuda, CUDA_RESCAN_S, CUDA_RESCAN_S, false, 0 },
		{ want_always, job_cost, COST_SAMPLE_S, COST_SAMPLE_S, true, 0 },
		{ want_duration, job_duration, 0, 0, false, 0 },
		{ want_quiet, job_quiet, QUIET_HINT_S, 0, false, 0 },
		{ want_always, job_exited, 0, 0, false, 0 },
	};
	const size_t njobs = sizeof(jobs) / sizeof(jobs[0]);

	for (size_t i = 0; i < njobs; i++)
		jobs[i].next = l->start + jobs[i].first;
	while (!*exiting) {
		/* Records are submitted without wake-up: the loop drains every PIPELINE_TICK_MS,
		 * and is woken early only when the kernel sees the buffer filling (wakeup_bytes).
		 */
		int n = kernel_ring_poll(l->tr->k, PIPELINE_TICK_MS);
		double now;

		/* A signal: the loop's condition says whether it ends the trace (run passes
		 * most signals on to its command and goes on). */
		if (n == -EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "tokenscope: reading the ring buffer failed: %s\n",
				strerror(-n));
			return n;
		}
		loop_drain(l);
		now = mono_s();
		for (size_t i = 0; i < njobs; i++) {
			struct loop_job *j = &jobs[i];

			if (!j->wanted(l) || now < j->next)
				continue;
			j->next = j->fixed_rate ? j->next + j->period : now + j->period;
			if (j->run(l, now))
				return 0;
		}
	}
	return 0;
}

/* An earlier tokenscope's probes still being removed (release_wait_earlier): said after half a
 * second, waited for at most ten (thousands of probes take that long). */
#define EARLIER_SAY_S 0.5
#define EARLIER_MAX_S 10.0

void trace_wait_earlier(void)
{
	release_wait_earlier("/proc", EARLIER_MAX_S, EARLIER_SAY_S, stderr);
}

int trace_check(const struct trace_opts *o)
{
	for (int i = 0; i < o->npids; i++) {
		if (proc_check(o->pids[i])) {
			fprintf(stderr, "tokenscope: no process with PID %u\n", o->pids[i]);
			return -ESRCH;
		}
	}
	return 0;
}

static bool leave_asked(void *ctx)
{
	return *(volatile sig_atomic_t *)ctx == TRACE_LEAVE;
}

/*
 * The kernel side let go: true when it is gone, from here; false when a child process took it
 * over (release.h), the kernel side then not to be touched again. Removing a probe event waits
 * for grace periods inside a lock the whole kernel shares (event_mutex: three per traced
 * function, about 0.6 s for the 612 events of 100 processes holding the TLS probes, 0.14 s for
 * the two syscall tracepoints), and closing them from 16 threads at once gained little (0.9 to
 * 0.75 s), so the child removes them while tokenscope exits. A tokenscope started meanwhile
 * waits for the child before it starts (trace_wait_earlier): probes put on a
 * function while the kernel took others off it lost calls on Linux 6.18. Only where no child
 * can be made is everything removed here, said first, and a second Ctrl-C leaves the rest to
 * the kernel (the descriptors close at exit).
 */
static bool detach_all(struct tracer *tr, volatile sig_atomic_t *exiting)
{
	int n = uprobes_count(&tr->cuda), pid;
	bool done;

	pid = release_background(tracefs_cleanup);
	if (pid > 0) {
		if (n > 0)
			fprintf(stderr,
				"tokenscope: %d probe%s removed in the background by "
				"tokenscope-exit (PID %d)\n",
				n, n == 1 ? " is" : "s are", pid);
		return false;
	}
	if (n > 0)
		fprintf(stderr,
			"tokenscope: removing %d probes from the kernel (each waits for it to be "
			"safe); Ctrl-C again to leave them to it\n",
			n);
	if (*exiting != TRACE_LEAVE)
		*exiting = TRACE_REMOVING;
	done = uprobes_detach(&tr->cuda, leave_asked, (void *)exiting);
	if (!done)
		return false; /* left to the kernel: this process exits, and its descriptors go */
	*exiting = TRACE_ENDING;
	return true;
}

/* The line that says what is traced. */
static void say_attached(const struct trace_opts *o, int nprocs)
{
	fprintf(stderr, "tokenscope: attached to %d process%s", nprocs, nprocs == 1 ? "" : "es");
	for (int i = 0; i < o->npids; i++) {
		char comm[PROC_COMM_TEXT];

		if (o->run_name)
			snprintf(comm, sizeof(comm), "%s", o->run_name);
		else
			proc_comm(o->pids[i], comm, sizeof(comm));
		fprintf(stderr, "%s%u %s", i ? ", " : " (", o->pids[i], comm);
	}
	if (o->npids)
		fprintf(stderr, "%s)", nprocs > o->npids ? " and descendants" : "");
	fprintf(stderr, "%s; Ctrl-C to stop\n",
		o->all ? ", watching for inference servers (--all)" : "");
}

/* At the end: what the hooks missed, or held processes for. */
static void say_hooks(const struct tracer *tr)
{
	if (tr->cuda.late_hooks)
		fprintf(stderr,
			"tokenscope: hooked late: %d (process, library) pair%s found by the "
			"once-a-second scan, not when mapped: first calls possibly missed\n",
			tr->cuda.late_hooks, tr->cuda.late_hooks == 1 ? "" : "s");
	if (tr->hold.held)
		fprintf(
		    stderr,
		    "tokenscope: %llu process%s held at a library mapping until hooked, %.3f ms "
		    "at most (%.3f ms on average): no call into it missed\n",
		    (unsigned long long)tr->hold.held, tr->hold.held == 1 ? "" : "es",
		    (double)tr->hold.max_ns / 1e6,
		    (double)tr->hold.total_ns / 1e6 / (double)tr->hold.held);
	if (tr->hold.expired)
		fprintf(stderr,
			"tokenscope: %llu process%s held at a library mapping went on before "
			"tokenscope hooked it (its watchdog lets none wait past a second): calls "
			"in that time not seen\n",
			(unsigned long long)tr->hold.expired, tr->hold.expired == 1 ? "" : "es");
	if (tr->cuda.map_hooks)
		fprintf(
		    stderr,
		    "tokenscope: %d (process, library) pair%s hooked from the mapping's record, "
		    "at most %.3f ms after the mapping: calls in that time not seen\n",
		    tr->cuda.map_hooks, tr->cuda.map_hooks == 1 ? "" : "s",
		    (double)tr->cuda.map_window_max_ns / 1e6);
}

/* The processes named with -p, their descendants, and --all's servers followed; the count,
 * or an error (said). */
static int follow_all(struct tracer *tr, const struct trace_opts *o, struct discover_set *seen)
{
	int err, nprocs = 0;

	/* Attached first, followed second: a fork after a parent is in the map is caught by the
	 * fork tracepoint, and one before it by the /proc walk. */
	for (int i = 0; i < o->npids; i++) {
		struct workload wl;

		err = trace_follow(tr, o->pids[i], true);
		if (err) {
			fprintf(stderr, "tokenscope: cannot follow PID %u: %s\n", o->pids[i],
				strerror(-err));
			return err;
		}
		nprocs++;
		err = follow_tree(tr, o->pids[i], &wl);
		if (err > 0)
			nprocs += err;
	}
	if (o->all)
		nprocs += discover_follow(tr, seen);
	return nprocs;
}

/* The GPU libraries of the traced processes hooked, or why none is said. */
static void cuda_setup(struct tracer *tr, const struct trace_opts *o)
{
	char names[128];

	uprobes_init(&tr->cuda, tr->k, o->verbose);
	tr->cuda.held_mappings = tr->hold.watchdog && !kernel_exec_map_err(tr->k);
	tr->cuda.kernels = o->gpu_calls;
	tr->cuda.device = o->device_times;
	cuda_scan_all(tr, false);
	vendor_names(names, sizeof(names));
	if (!gpu_hooked(tr) && !cuda_explain(tr))
		fprintf(stderr,
			"tokenscope: no %s library in the traced processes; GPU steps will be "
			"traced if one is loaded later\n",
			names);
}

/* tracefs for the uprobe events every traced process shares; without it (said with -v), the
 * probes are attached per process. */
static void tracefs_setup(bool verbose)
{
	int err = tracefs_init();

	if (err && verbose)
		fprintf(stderr,
			"tokenscope: tracefs is not usable (%s): CUDA and TLS probes are attached "
			"per process, and a child forked after attach is hooked when its fork is "
			"read, not from its first instruction\n",
			strerror(-err));
}

int trace_run(const struct trace_opts *o, struct pipeline *pl, const struct trace_hooks *h,
	      volatile sig_atomic_t *exiting)
{
	struct tracer tr = { .verbose = o->verbose, .pl = pl, .cost = { .stats_fd = -1 } };
	bool seccomp;
	struct discover_set seen;
	struct loop loop;
	int err, nprocs = 0, ncpus;

	/* Before any thread: tracefs may have to be mounted in a namespace of our own. */
	tracefs_setup(o->verbose);
	err = trace_check(o);
	if (err)
		return err;
	container_dirs_init(&tr.dirs, o->container_state, (size_t)o->ncontainer_state);
	kernel_log_verbose(o->verbose);
	tr.caps = privs_caps(&seccomp);
	ncpus = kernel_ncpus();
	if (ncpus <= 0)
		return ncpus ? ncpus : -EINVAL;
	discover_set_init(&seen);
	pipeline_keep_running(tr.pl, o->all);
	tr.seen = o->all ? &seen : NULL;
	pipeline_on_exit(tr.pl, process_gone, &tr);
	err = trace_load(&tr, o);
	if (err)
		goto out;

	nprocs = follow_all(&tr, o, &seen);
	if (nprocs < 0) {
		err = nprocs;
		goto out;
	}
	err = kernel_ring_open(tr.k, on_record, &tr);
	if (err) {
		fprintf(stderr, "tokenscope: cannot map the ring buffer: %s\n", strerror(-err));
		goto out;
	}

	say_attached(o, nprocs);
	/* The owner's start (the live view's screen), after the attach line it must not hide. */
	if (h->begin && (err = h->begin(h->ctx)))
		goto out;
	cuda_setup(&tr, o);
	err = start_samplers(&tr, o);
	if (err)
		goto out;

	/* run: every program is attached and the child followed; it may exec its command. */
	if (o->attached && (err = o->attached(o->attached_ctx)))
		goto out;

	err = cost_start(&tr.cost, o->self_stats);
	if (err)
		fprintf(
		    stderr,
		    "tokenscope: --self-stats: cannot turn the kernel's BPF statistics on (%s): "
		    "BPF time is not measured\n",
		    strerror(-err));
	err = 0;
	sample_cost(&tr);
	loop = (struct loop){ .tr = &tr, .o = o, .seen = &seen, .h = h, .start = mono_s() };
	err = loop_run(&loop, exiting);
	kernel_ring_finish(tr.k);
	hold_stop(&tr.hold, hook_held, &tr);
	read_kstats(&tr);
	late_note(tr.k);
	say_hooks(&tr);
	sample_cost(&tr);
	/* The owner's finish: the summary's total among them. */
	if (h->finish)
		h->finish(h->ctx);
	/* After the summary, what the hint said if it still holds. */
	if (tr.quiet_hint[0] && !http_seen(&tr))
		fprintf(stderr, "tokenscope: still no HTTP connection seen in %.0f s%s\n",
			mono_s() - loop.start, tr.quiet_hint);
out:
	/* Nothing stays stopped, whatever ended the trace. */
	hold_stop(&tr.hold, NULL, NULL);
	stop_samplers(&tr);
	discover_set_free(&seen);
	kernel_ring_close(tr.k);
	cost_stop(&tr.cost);
	if (detach_all(&tr, exiting)) {
		tracefs_cleanup();
		kernel_destroy(tr.k);
	}
	return err;
}
