/* SPDX-License-Identifier: MIT */
/*
 * Reads CUPTI activity records into runs (cupti/runs.h): API records give launch times,
 * kernel, graph-trace and memcpy records give device work. offset_ns is added to every CUPTI
 * time (0 when CUPTI already reports CLOCK_MONOTONIC through the timestamp callback).
 */
#ifndef TS_CUPTI_RECORDS_H
#define TS_CUPTI_RECORDS_H

#include <cupti_activity.h>

#include "runs.h"

/* Overhead records are CUpti_ActivityOverhead3 (CUPTI 13): their overheadData is freed. */
void records_read(struct runs *r, const CUpti_Activity *rec, int64_t offset_ns);

#endif
