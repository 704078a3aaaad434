/* SPDX-License-Identifier: MIT */
/*
 * Per-request output: a text line (with a header) or one JSON object per line, in the schema
 * documented in README.md. Never prints prompt or completion text.
 */
#ifndef TS_OUTPUT_H
#define TS_OUTPUT_H

#include <stdbool.h>
#include <stdio.h>

#include "request.h"

void output_text_header(FILE *f);
void output_text(FILE *f, const struct request *r, const struct request_metrics *m);
void output_json(FILE *f, const struct request *r, const struct request_metrics *m, bool tokens);

#endif
