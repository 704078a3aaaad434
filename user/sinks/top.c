// SPDX-License-Identifier: MIT
/* Live per-model table over a sliding window of kernel time (see top.h). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/escape.h"
#include "pipeline/request.h"
#include "sinks/top.h"

int top_init(struct top *t, FILE *out, bool tty, bool by_process)
{
	memset(t, 0, sizeof(*t));
	t->out = out;
	t->tty = tty;
	t->by_process = by_process;
	t->wall_offset_ns = clock_offset_now();
	t->scratch = calloc(1, sizeof(*t->scratch));
	if (!t->scratch || window_init(&t->steps, TOP_SLOTS, (1u << STEP_KIND_MAX) - 1) < 0) {
		top_free(t);
		return -ENOMEM;
	}
	return 0;
}

void top_free(struct top *t)
{
	for (uint32_t i = 0; i < t->nmodels; i++)
		window_free(&t->models[i].win);
	window_free(&t->steps);
	free(t->scratch);
	free(t->gpu);
	memset(t, 0, sizeof(*t));
}

/* Requests finished in the window of a frame at second now_s (the TOP_WINDOW_S whole seconds
 * before it): counts into c and the merged histogram of what into h. Before second 1 the range
 * [1, 0] is empty, and window_sum still resets c and h. */
static void sum_window(const struct window *w, uint64_t now_s, struct win_counts *c, uint32_t what,
		       struct whist *h)
{
	uint64_t lo = now_s > TOP_WINDOW_S ? now_s - TOP_WINDOW_S : 0;

	window_sum(w, now_s ? lo : 1, now_s ? now_s - 1 : 0, c, what, h);
}

static void top_seen(struct top *t, uint64_t s)
{
	if (!t->started || s < t->first_s)
		t->first_s = s;
	t->started = true;
}

/* The row for (model, pid), created or reused; NULL when every row is in use. */
static struct top_model *top_model(struct top *t, const char *model, uint32_t pid, uint64_t now_s)
{
	struct top_model *m = NULL;

	for (uint32_t i = 0; i < t->nmodels; i++)
		if (t->models[i].pid == pid && !strcmp(t->models[i].model, model))
			return &t->models[i];
	if (t->nmodels < TOP_MAX_MODELS) {
		m = &t->models[t->nmodels];
		if (window_init(&m->win, TOP_SLOTS, WM_BIT(WM_TTFT) | WM_BIT(WM_ITL)) < 0)
			return NULL;
		t->nmodels++;
	} else {
		/* A row none of whose requests can still be in the window. */
		for (uint32_t i = 0; i < t->nmodels && !m; i++)
			if (t->models[i].last_s + TOP_WINDOW_S < now_s)
				m = &t->models[i];
		if (!m)
			return NULL;
		window_clear(&m->win);
	}
	snprintf(m->model, sizeof(m->model), "%s", model);
	m->pid = pid;
	m->last_s = now_s;
	return m;
}

static void top_on_request(void *ctx, const struct request *r, const struct request_metrics *m,
			   const struct gpu_attribution *ga)
{
	struct top *t = ctx;
	struct top_model *row;
	uint64_t s;

	if (!r->end_ns)
		return;
	t->requests++;
	s = r->end_ns / NS_PER_S;
	top_seen(t, s);
	row = top_model(t, r->info.model, t->by_process ? r->pid : 0, s);
	if (!row) {
		t->models_dropped++;
		return;
	}
	if (s > row->last_s)
		row->last_s = s;
	/* A request older than the second its slot holds now has left the window. */
	window_add_request(&row->win, r, m, ga);
}

static void top_on_gpu_step(void *ctx, const struct gpu_step *st)
{
	struct top *t = ctx;
	uint64_t s = st->end_ns / NS_PER_S;

	top_seen(t, s);
	if (st->kind < STEP_KIND_MAX && st->end_ns >= st->start_ns)
		window_add(&t->steps, s, st->kind, st->end_ns - st->start_ns);
}

/* Draws a frame if the second of now_ns is past the last frame's. */
static void top_tick(struct top *t, uint64_t now_ns)
{
	uint64_t s = now_ns / NS_PER_S;

	top_seen(t, s);
	if (t->framed && s <= t->last_frame_s)
		return;
	top_render(t, now_ns, t->out);
}

static void top_status(struct top *t, const struct pipeline_status *st)
{
	t->in_flight = st->in_flight;
	t->lost_events = st->loss.lost_events;
}

static void top_on_tick(void *ctx, const struct pipeline_status *st)
{
	top_status(ctx, st);
	top_tick(ctx, st->now_ns);
}

static void top_on_finish(void *ctx, const struct pipeline_status *st)
{
	struct top *t = ctx;

	top_status(t, st);
	/* The last partial second too: a short run still shows what it saw. */
	top_render(t, st->now_ns + NS_PER_S, t->out);
}

/* Without memory for the copy the next frames have no GPU lines. */
static void top_on_gpu_sample(void *ctx, const struct device_sample *s)
{
	top_set_gpu_sample(ctx, s);
}

struct sink top_sink(struct top *t)
{
	return (struct sink){
		.name = "top",
		.ctx = t,
		.request = top_on_request,
		.gpu_step = top_on_gpu_step,
		.device_sample = top_on_gpu_sample,
		.tick = top_on_tick,
		.finish = top_on_finish,
	};
}

/* One frame is built in memory, then written at once, so a terminal never shows half of one. */
struct tframe {
	char *buf;
	size_t len;
	FILE *f;
	bool tty;
	double stamp; /* kernel seconds, the prefix of plain lines */
};

static void line(struct tframe *fr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void line(struct tframe *fr, const char *fmt, ...)
{
	va_list ap;

	if (!fr->tty)
		fprintf(fr->f, "%.3f ", fr->stamp);
	va_start(ap, fmt);
	vfprintf(fr->f, fmt, ap);
	va_end(ap);
	fputc('\n', fr->f);
}

/* A value in ms into out, or "-" when unknown. */
static const char *ms(char *out, size_t n, double ns)
{
	if (ns < 0)
		snprintf(out, n, "-");
	else
		snprintf(out, n, "%.1f", ns / NS_PER_MS);
	return out;
}

static const char *pct(char *out, size_t n, uint64_t part, uint64_t whole)
{
	if (!whole)
		snprintf(out, n, "-");
	else
		snprintf(out, n, "%.0f", 100.0 * part / whole);
	return out;
}

static void render_row(struct top *t, struct tframe *fr, const struct top_model *row,
		       uint64_t now_s, double span_s, int model_w)
{
	struct win_counts sum;
	struct whist *lat = t->scratch;
	char name[ESCAPE_COL_BYTES(TOP_MODEL_COL_MAX)], pid[16] = "", t50[16], t99[16], i50[16],
							i99[16], ok[16], qu[16], pf[16], gp[16],
							slo[16];

	sum_window(&row->win, now_s, &sum, WM_BIT(WM_TTFT), lat);
	if (!sum.requests)
		return;
	ms(t50, sizeof(t50), whist_quantile(lat, 0.5));
	ms(t99, sizeof(t99), whist_quantile(lat, 0.99));
	sum_window(&row->win, now_s, NULL, WM_BIT(WM_ITL), lat);
	ms(i50, sizeof(i50), whist_quantile(lat, 0.5));
	ms(i99, sizeof(i99), whist_quantile(lat, 0.99));
	escape_text_col(name, sizeof(name), row->model[0] ? row->model : "(unknown)", model_w,
			true);
	if (t->by_process)
		snprintf(pid, sizeof(pid), "%u", row->pid);
	line(fr, "%s%s%-*s %6.1f %7s %7s %6s %6s %7.1f %5s %5s %5s %5s %5s", name,
	     t->by_process ? " " : "", t->by_process ? 7 : 0, pid, sum.requests / span_s, t50, t99,
	     i50, i99, sum.tokens / span_s, pct(ok, sizeof(ok), sum.ok, sum.requests),
	     pct(qu, sizeof(qu), sum.queue_ns, sum.ttft_ns),
	     pct(pf, sizeof(pf), sum.prefill_ns, sum.ttft_ns),
	     pct(gp, sizeof(gp), sum.gpu_ns, sum.gpu_ns + sum.host_ns),
	     pct(slo, sizeof(slo), sum.slo_met, sum.slo_met + sum.slo_missed));
}

static void render_steps(struct top *t, struct tframe *fr, uint64_t now_s, double span_s)
{
	struct whist *lat = t->scratch;
	char all[16], dec[16], pre[16], mix[16];
	uint64_t n = 0;

	sum_window(&t->steps, now_s, NULL, (1u << STEP_KIND_MAX) - 1, lat);
	n = lat->n;
	if (!n)
		return;
	ms(all, sizeof(all), whist_quantile(lat, 0.5));
	const enum step_kind kinds[] = { STEP_DECODE, STEP_PREFILL, STEP_MIXED };
	char *outs[] = { dec, pre, mix };
	for (int k = 0; k < 3; k++) {
		sum_window(&t->steps, now_s, NULL, 1u << kinds[k], lat);
		ms(outs[k], 16, whist_quantile(lat, 0.5));
	}
	line(fr, "GPU steps %.1f/s, step p50 %s ms (decode %s, prefill %s, mixed %s)", n / span_s,
	     all, dec, pre, mix);
}

int top_set_gpu_sample(struct top *t, const struct device_sample *s)
{
	if (!t->gpu && !(t->gpu = malloc(sizeof(*t->gpu))))
		return -ENOMEM;
	*t->gpu = *s;
	return 0;
}

/* A line per GPU of the latest sample; one older than a few sampling periods says its age. */
static void render_gpus(struct top *t, struct tframe *fr, uint64_t now_ns)
{
	const struct device_sample *s = t->gpu;

	if (!s)
		return;
	for (uint32_t i = 0; i < s->ndevices; i++) {
		const struct sampled_device *d = &s->devices[i];

		if (!fr->tty)
			fprintf(fr->f, "%.3f ", fr->stamp);
		sampled_device_print(d, fr->f);
		if (now_ns > d->mono_ns + TOP_GPU_STALE_NS)
			fprintf(fr->f, " (sampled %.0f s ago)",
				(double)(now_ns - d->mono_ns) / NS_PER_S);
		fputc('\n', fr->f);
		if (!d->nprocs)
			continue;
		if (!fr->tty)
			fprintf(fr->f, "%.3f ", fr->stamp);
		fputs("  ", fr->f);
		sampled_procs_print(d, TOP_GPU_PROCS, fr->f);
		fputc('\n', fr->f);
	}
	if (s->devices_dropped)
		line(fr, "%u more GPUs not shown (over %d)", s->devices_dropped, DEV_MAX_DEVICES);
}

/* The local time of day of a kernel time, HH:MM:SS; "?" for a time no date fits. */
static const char *time_of_day(const struct top *t, uint64_t mono, char out[16])
{
	struct tm tm;
	int64_t wall;
	time_t sec;

	if (!clock_wall_ns(t->wall_offset_ns, mono, &wall))
		return "?";
	sec = (time_t)(wall / (int64_t)NS_PER_S);
	if (!localtime_r(&sec, &tm) || !strftime(out, 16, "%H:%M:%S", &tm))
		return "?";
	return out;
}

void top_render(struct top *t, uint64_t now_ns, FILE *f)
{
	uint64_t now_s = now_ns / NS_PER_S, span, in_win = 0, steps_known = 0, preempted = 0;
	int model_w = t->by_process ? TOP_MODEL_COL_PID : TOP_MODEL_COL_MAX;
	struct tframe fr = { .tty = t->tty, .stamp = (double)now_ns / NS_PER_S };
	char tod[16];
	double span_s;

	/* Whole seconds in the window, fewer at the start of the run (rates are not diluted). */
	span = t->started && now_s > t->first_s ? now_s - t->first_s : 1;
	if (span > TOP_WINDOW_S)
		span = TOP_WINDOW_S;
	span_s = (double)span;

	fr.f = open_memstream(&fr.buf, &fr.len);
	if (!fr.f)
		return;
	if (t->tty)
		fputs(TOP_CLEAR, fr.f);
	line(&fr, "tokenscope top  window %llu s ending %s  in flight %u (all models)",
	     (unsigned long long)span, time_of_day(t, now_s * NS_PER_S, tod), t->in_flight);
	line(&fr, "%-*s%s%-*s %6s %7s %7s %6s %6s %7s %5s %5s %5s %5s %5s", model_w, "MODEL",
	     t->by_process ? " " : "", t->by_process ? 7 : 0, t->by_process ? "PID" : "", "RPS",
	     "TTFT50", "TTFT99", "ITL50", "ITL99", "TOK/S", "OK%", "QUE%", "PRE%", "GPU%", "SLO%");
	for (uint32_t i = 0; i < t->nmodels; i++) {
		struct win_counts c;

		render_row(t, &fr, &t->models[i], now_s, span_s, model_w);
		sum_window(&t->models[i].win, now_s, &c, 0, NULL);
		in_win += c.requests;
		steps_known += c.steps_known;
		preempted += c.preempted;
	}
	/* docs/gpu.md "Preemption": a share of the window's requests out of the batch and back. */
	if (preempted)
		line(&fr,
		     "preempted: %llu of %llu requests with GPU steps (out of the batch, "
		     "recomputed: KV cache likely full)",
		     (unsigned long long)preempted, (unsigned long long)steps_known);
	render_steps(t, &fr, now_s, span_s);
	render_gpus(t, &fr, now_ns);
	char dropped[64] = "";

	if (t->models_dropped)
		snprintf(dropped, sizeof(dropped), ", %llu not shown (over %d models)",
			 (unsigned long long)t->models_dropped, TOP_MAX_MODELS);
	line(&fr,
	     "%llu requests in the window, %llu since start%s; lost %llu records in the kernel",
	     (unsigned long long)in_win, (unsigned long long)t->requests, dropped,
	     (unsigned long long)t->lost_events);
	if (t->tty)
		line(&fr, "times in ms; q quits");
	else
		fputc('\n', fr.f);
	fclose(fr.f);
	fwrite(fr.buf, 1, fr.len, f);
	fflush(f);
	free(fr.buf);
	t->framed = true;
	t->last_frame_s = now_s;
}

int top_keypress(int fd)
{
	char buf[32];
	int flags = fcntl(fd, F_GETFL);
	ssize_t n;

	if (flags < 0)
		return -errno;
	if (!(flags & O_NONBLOCK) && fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf));
	if (n < 0) {
		int err = errno;

		if (!(flags & O_NONBLOCK))
			fcntl(fd, F_SETFL, flags);
		return err == EAGAIN || err == EINTR ? 0 : -err;
	}
	if (!(flags & O_NONBLOCK))
		fcntl(fd, F_SETFL, flags);
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == 'q' || buf[i] == 'Q')
			return 1;
	return 0;
}

int top_term_raw(int fd, struct termios *saved)
{
	struct termios raw;

	if (tcgetattr(fd, saved) < 0)
		return -errno;
	raw = *saved;
	/* Keys arrive one by one and are not echoed; ISIG stays so Ctrl-C still stops tracing. */
	raw.c_lflag &= ~(ICANON | ECHO);
	raw.c_cc[VMIN] = 0;
	raw.c_cc[VTIME] = 0;
	if (tcsetattr(fd, TCSANOW, &raw) < 0)
		return -errno;
	return 0;
}

void top_term_restore(int fd, const struct termios *saved)
{
	tcsetattr(fd, TCSANOW, saved);
}
