// SPDX-License-Identifier: MIT
#include <stdlib.h>

#include "records.h"

/* CUPTI's time plus offset, never below 0 nor wrapped past UINT64_MAX. The magnitude of a
 * negative offset is negated as unsigned: -INT64_MIN is not an int64_t. */
static uint64_t host_ns(uint64_t t, int64_t offset_ns)
{
	if (offset_ns < 0)
		return t < -(uint64_t)offset_ns ? 0 : t + (uint64_t)offset_ns;
	return t > UINT64_MAX - (uint64_t)offset_ns ? UINT64_MAX : t + (uint64_t)offset_ns;
}

void records_read(struct runs *r, const CUpti_Activity *rec, int64_t offset_ns)
{
	struct runs_op op = { 0 };

	r->stats.records++;
	switch (rec->kind) {
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER: {
		const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;

		runs_launch(r, a->correlationId, host_ns(a->start, offset_ns));
		return;
	}
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		/* The fields read here sit where every kernel record version since CUDA 11 has
		 * them. */
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;

		op.kind = RUNS_KERNEL;
		op.start_ns = host_ns(k->start, offset_ns);
		op.end_ns = host_ns(k->end, offset_ns);
		op.device = k->deviceId;
		op.stream = k->streamId;
		op.correlation = k->correlationId;
		break;
	}
	case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: {
		const CUpti_ActivityGraphTrace2 *g = (const CUpti_ActivityGraphTrace2 *)rec;

		op.kind = RUNS_GRAPH;
		op.start_ns = host_ns(g->start, offset_ns);
		op.end_ns = host_ns(g->end, offset_ns);
		op.device = g->deviceId;
		op.stream = g->streamId;
		op.correlation = g->correlationId;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;

		op.kind = RUNS_MEMCPY;
		op.dtoh = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
		op.start_ns = host_ns(m->start, offset_ns);
		op.end_ns = host_ns(m->end, offset_ns);
		op.device = m->deviceId;
		op.stream = m->streamId;
		op.correlation = m->correlationId;
		break;
	}
	case CUPTI_ACTIVITY_KIND_OVERHEAD: {
		/* Version 3 of the record (CUPTI 13, the only one the library enables them with:
		 * inject.c); start and end are where every version has them. Its overheadData, set
		 * for some kinds, is the client's to free. */
		CUpti_ActivityOverhead3 *o = (CUpti_ActivityOverhead3 *)rec;
		int k = o->overheadKind == CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH
			    ? TS_DEVTIME_OVERHEAD_FLUSH
			: o->overheadKind == CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION
			    ? TS_DEVTIME_OVERHEAD_INSTRUMENTATION
			: o->overheadKind == CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE
			    ? TS_DEVTIME_OVERHEAD_RESOURCE
			    : TS_DEVTIME_OVERHEAD_OTHER;

		r->stats.overhead_records++;
		if (o->end > o->start)
			r->stats.overhead_ns[k] += o->end - o->start;
		free(o->overheadData);
		o->overheadData = NULL;
		return;
	}
	default:
		r->stats.unknown++;
		return;
	}
	runs_op(r, &op);
}
