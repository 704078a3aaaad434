// SPDX-License-Identifier: MIT
#include <inttypes.h>
#include <string.h>

#include "pipeline/device_sample.h"

void device_sample_keep_procs(struct device_sample *s, bool (*keep)(void *ctx, uint32_t pid),
			      void *ctx)
{
	for (uint32_t i = 0; i < s->ndevices; i++) {
		struct sampled_device *d = &s->devices[i];
		uint32_t k = 0;

		for (uint32_t j = 0; j < d->nprocs; j++)
			if (keep(ctx, d->procs[j].pid))
				d->procs[k++] = d->procs[j];
		d->nprocs = k;
	}
}

static struct device_usage_dev *usage_dev(struct device_usage *u, const struct sampled_device *d)
{
	struct device_usage_dev *ud;

	for (uint32_t i = 0; i < u->ndevices; i++)
		if (u->devices[i].index == d->index)
			return &u->devices[i];
	/* Indexes are below DEV_MAX_DEVICES plus what was dropped; kept devices fit. */
	if (u->ndevices == DEV_MAX_DEVICES)
		return NULL;
	ud = &u->devices[u->ndevices++];
	ud->index = d->index;
	return ud;
}

static void usage_proc(struct device_usage *u, uint32_t gpu, const struct sampled_proc *p)
{
	struct device_usage_proc *up = NULL;

	for (uint32_t i = 0; i < u->nprocs && !up; i++)
		if (u->procs[i].gpu == gpu && u->procs[i].pid == p->pid)
			up = &u->procs[i];
	if (!up && !p->mem_present)
		return;
	if (!up) {
		if (u->nprocs == DEV_MAX_PROCS) {
			u->procs_dropped++;
			return;
		}
		up = &u->procs[u->nprocs++];
		up->gpu = gpu;
		up->pid = p->pid;
	}
	if (p->mem_present && p->mem_bytes > up->mem_max)
		up->mem_max = p->mem_bytes;
}

void device_usage_add(struct device_usage *u, const struct device_sample *s)
{
	u->samples++;
	if (s->devices_dropped > u->devices_dropped)
		u->devices_dropped = s->devices_dropped;
	for (uint32_t i = 0; i < s->ndevices; i++) {
		const struct sampled_device *d = &s->devices[i];
		struct device_usage_dev *ud = usage_dev(u, d);

		if (!ud)
			continue;
		ud->samples++;
		/* The latest name and UUID: they only change if the device does. */
		memcpy(ud->name, d->name, sizeof(ud->name));
		memcpy(ud->uuid, d->uuid, sizeof(ud->uuid));
		if (d->util_present) {
			ud->util_n++;
			ud->util_sum += d->util_pct;
			if (d->util_pct > ud->util_max)
				ud->util_max = d->util_pct;
		}
		if (d->mem_present) {
			ud->mem_n++;
			if (d->mem_used > ud->mem_used_max)
				ud->mem_used_max = d->mem_used;
			ud->mem_total = d->mem_total;
		}
		if (d->clock_present) {
			ud->clock_n++;
			ud->clock_sum_mhz += d->sm_clock_hz / 1000000;
		}
		if (d->power_present) {
			ud->power_n++;
			ud->power_sum_mw += d->power_mw;
			if (d->power_mw > ud->power_max_mw)
				ud->power_max_mw = d->power_mw;
		}
		if (d->procs_dropped > u->listed_dropped)
			u->listed_dropped = d->procs_dropped;
		for (uint32_t j = 0; j < d->nprocs; j++)
			usage_proc(u, d->index, &d->procs[j]);
	}
}

/* GiB from 1 GiB on, MiB below (a small process would read "0.00 GiB"). */
static void put_bytes(FILE *f, uint64_t b)
{
	if (b >= 1ull << 30)
		fprintf(f, "%.2f GiB", b / (double)(1ull << 30));
	else
		fprintf(f, "%.1f MiB", b / (double)(1ull << 20));
}

void sampled_device_print(const struct sampled_device *d, FILE *f)
{
	fprintf(f, "GPU %u %s: util ", d->index, d->name[0] ? d->name : "unnamed");
	if (d->util_present)
		fprintf(f, "%u%%", d->util_pct);
	else
		fputs("n/a", f);
	fputs(", memory ", f);
	if (d->mem_present) {
		put_bytes(f, d->mem_used);
		fputs(" of ", f);
		put_bytes(f, d->mem_total);
	} else
		fputs("n/a", f);
	if (d->clock_present)
		fprintf(f, ", SM %" PRIu64 " MHz", d->sm_clock_hz / 1000000);
	if (d->power_present)
		fprintf(f, ", %.1f W", d->power_mw / 1000.0);
}

void sampled_procs_print(const struct sampled_device *d, unsigned int max_procs, FILE *f)
{
	fprintf(f, "GPU %u memory of", d->index);
	for (uint32_t i = 0; i < d->nprocs && i < max_procs; i++) {
		fprintf(f, "%s pid %u ", i ? "," : "", d->procs[i].pid);
		if (d->procs[i].mem_present)
			put_bytes(f, d->procs[i].mem_bytes);
		else
			fputs("n/a", f);
	}
	if (d->nprocs > max_procs)
		fprintf(f, ", %u more", d->nprocs - max_procs);
}

void device_usage_print(const struct device_usage *u, FILE *f)
{
	if (!u->samples)
		return;
	for (uint32_t i = 0; i < u->ndevices; i++) {
		const struct device_usage_dev *d = &u->devices[i];

		fprintf(f, "  gpu %u %s (%s): %" PRIu64 " samples", d->index,
			d->name[0] ? d->name : "unnamed", d->uuid[0] ? d->uuid : "no uuid",
			d->samples);
		if (d->util_n)
			fprintf(f, ", utilization mean %.1f%% max %u%%",
				(double)d->util_sum / d->util_n, d->util_max);
		else
			fprintf(f, ", utilization n/a");
		if (d->mem_n) {
			fputs(", memory used max ", f);
			put_bytes(f, d->mem_used_max);
			fputs(" of ", f);
			put_bytes(f, d->mem_total);
		} else
			fprintf(f, ", memory n/a");
		if (d->clock_n)
			fprintf(f, ", SM clock mean %.0f MHz",
				(double)d->clock_sum_mhz / d->clock_n);
		else
			fprintf(f, ", SM clock n/a");
		if (d->power_n)
			fprintf(f, ", power mean %.1f W max %.1f W",
				(double)d->power_sum_mw / d->power_n / 1000.0,
				d->power_max_mw / 1000.0);
		else
			fprintf(f, ", power n/a");
		fputc('\n', f);
	}
	for (uint32_t i = 0; i < u->nprocs; i++) {
		fprintf(f, "  gpu %u pid %u: memory max ", u->procs[i].gpu, u->procs[i].pid);
		put_bytes(f, u->procs[i].mem_max);
		fputc('\n', f);
	}
	if (u->devices_dropped || u->listed_dropped || u->procs_dropped)
		fprintf(f,
			"  gpu: not shown: up to %u devices beyond the %d kept, up to %u processes "
			"on a device beyond the %d kept, %" PRIu64
			" traced processes beyond the %d "
			"summed\n",
			u->devices_dropped, DEV_MAX_DEVICES, u->listed_dropped, DEV_MAX_PROCS,
			u->procs_dropped, DEV_MAX_PROCS);
}
