/* SPDX-License-Identifier: MIT */
/*
 * Request labels (docs/output.md, "Tenants and other labels"): --label NAME=header:X-Tenant-Id
 * takes a request head's field, --label NAME=body:user a value of its JSON body by a dotted
 * path (metadata.tenant). Each request carries the values it had; the sinks show them (JSON,
 * OTLP) or split by them (Prometheus, with a cap on the values; the summary's SLO lines).
 *
 * Never a prompt: a body path whose any part names a prompt or a message (messages, prompt,
 * input, inputs, content, system, instructions, text, tools, ...) is refused, and only a
 * string, number or boolean is taken (never an object or an array). Values are cleaned as
 * every string from traffic is (utf8.c) and cut at REQ_LABEL_VALUE_MAX - 1 bytes.
 */
#ifndef TS_LABELS_H
#define TS_LABELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REQ_LABELS_MAX 4
#define REQ_LABEL_NAME_MAX 32
#define REQ_LABEL_KEY_MAX 128
#define REQ_LABEL_VALUE_MAX 64

enum req_label_src {
	REQ_LABEL_HEADER,
	REQ_LABEL_BODY,
};

struct req_label_spec {
	char name[REQ_LABEL_NAME_MAX]; /* [a-zA-Z_][a-zA-Z0-9_]*, not one of tokenscope's own */
	enum req_label_src src;
	char key[REQ_LABEL_KEY_MAX]; /* a header's name, or a dotted path in the body */
};

struct req_label_set {
	struct req_label_spec l[REQ_LABELS_MAX];
	uint32_t n;
};

/* One request's values; set[i] false: it had none for label i. spec: the labels they are of
 * (the pipeline's, for the request's lifetime); NULL: no label was asked for. */
struct req_labels {
	const struct req_label_set *spec;
	bool set[REQ_LABELS_MAX];
	char v[REQ_LABELS_MAX][REQ_LABEL_VALUE_MAX];
};

/* One --label argument ("tenant=header:X-Tenant-Id", "user=body:user") added to s; 0, or
 * -EINVAL with why in msg. */
int req_labels_parse(struct req_label_set *s, const char *text, char *msg, size_t msglen);
/* A head field (name case-insensitive): the values of the header labels that name it (the
 * first of a repeated field kept). */
void req_labels_header(const struct req_label_set *s, struct req_labels *out, const char *name,
		       size_t nlen, const char *val, size_t vlen);
/* A whole JSON body: the values of the body labels. */
void req_labels_body(const struct req_label_set *s, struct req_labels *out, const uint8_t *body,
		     size_t len);

#endif
