// SPDX-License-Identifier: MIT
/* Request labels from heads and bodies; the rules are in labels.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "lib/json.h"
#include "lib/ows.h"
#include "lib/utf8.h"
#include "pipeline/labels.h"

/* Labels tokenscope's own metrics carry: a request label may not take their names. */
static const char *const reserved[] = { "model",     "role",	"pid",	    "namespace", "pod",
					"container", "outcome", "le",	    "slo",	 "result",
					"type",	     "cache",	"kind",	    "rule",	 "times",
					"where",     "program", "reported", "gpu",	 "uuid" };

/* Body keys that hold a prompt, a message or their parts: never a label's path. */
static const char *const prompt_keys[] = { "messages", "prompt",      "input",		"inputs",
					   "content",  "system",      "instructions",	"text",
					   "tools",    "tool_choice", "suffix",		"contents",
					   "parts",    "query",	      "documents",	"images",
					   "image",    "audio",	      "response_format" };

static int label_fail(char *msg, size_t n, const char *text, const char *why)
{
	snprintf(msg, n,
		 "bad --label '%s': %s; expected NAME=header:FIELD or NAME=body:PATH, e.g. "
		 "'tenant=header:X-Tenant-Id', 'user=body:user', 'team=body:metadata.team'",
		 text, why);
	return -EINVAL;
}

static bool name_ok(const char *s, size_t n)
{
	if (!n || n >= REQ_LABEL_NAME_MAX || (s[0] >= '0' && s[0] <= '9') ||
	    (n >= 2 && s[0] == '_' && s[1] == '_'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return true;
}

/* An HTTP field name's characters (RFC 9110 token). */
static bool header_ok(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr("!#$%&'*+-.^_`|~", *s)))
			return false;
	return true;
}

/* A dotted path of non-empty parts, none of them a prompt's. */
static const char *path_problem(const char *p)
{
	char part[REQ_LABEL_KEY_MAX];

	while (*p) {
		size_t n = strcspn(p, ".");

		if (!n)
			return "an empty part in the path";
		memcpy(part, p, n);
		part[n] = '\0';
		for (size_t i = 0; i < sizeof(prompt_keys) / sizeof(prompt_keys[0]); i++)
			if (!strcasecmp(part, prompt_keys[i]))
				return "the path names a prompt or message field, which is never "
				       "taken";
		p += n;
		if (*p == '.' && !*++p)
			return "an empty part in the path";
	}
	return NULL;
}

int req_labels_parse(struct req_label_set *s, const char *text, char *msg, size_t msglen)
{
	const char *eq = strchr(text, '='), *colon, *key;
	struct req_label_spec sp = { 0 };
	const char *why;

	if (!eq || !name_ok(text, (size_t)(eq - text)))
		return label_fail(msg, msglen, text,
				  "NAME is letters, digits and '_', not starting with a digit");
	memcpy(sp.name, text, (size_t)(eq - text));
	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
		if (!strcmp(sp.name, reserved[i]))
			return label_fail(msg, msglen, text,
					  "NAME is one of tokenscope's own labels");
	colon = strchr(eq + 1, ':');
	if (!colon)
		return label_fail(msg, msglen, text, "no source (header: or body:)");
	key = colon + 1;
	if (strlen(key) >= REQ_LABEL_KEY_MAX)
		return label_fail(msg, msglen, text, "the field or path is too long");
	if ((size_t)(colon - eq - 1) == 6 && !strncmp(eq + 1, "header", 6)) {
		sp.src = REQ_LABEL_HEADER;
		if (!header_ok(key))
			return label_fail(msg, msglen, text, "not a header name");
	} else if ((size_t)(colon - eq - 1) == 4 && !strncmp(eq + 1, "body", 4)) {
		sp.src = REQ_LABEL_BODY;
		if (!*key)
			return label_fail(msg, msglen, text, "an empty path");
		if ((why = path_problem(key)))
			return label_fail(msg, msglen, text, why);
	} else {
		return label_fail(msg, msglen, text, "the source is header: or body:");
	}
	snprintf(sp.key, sizeof(sp.key), "%s", key);
	for (uint32_t i = 0; i < s->n; i++)
		if (!strcmp(s->l[i].name, sp.name))
			return label_fail(msg, msglen, text,
					  "a label of that name was given already");
	if (s->n == REQ_LABELS_MAX) {
		snprintf(msg, msglen, "at most %d --label options", REQ_LABELS_MAX);
		return -EINVAL;
	}
	s->l[s->n++] = sp;
	return 0;
}

void req_labels_header(const struct req_label_set *s, struct req_labels *out, const char *name,
		       size_t nlen, const char *val, size_t vlen)
{
	for (uint32_t i = 0; s && i < s->n; i++) {
		const struct req_label_spec *sp = &s->l[i];

		if (sp->src != REQ_LABEL_HEADER || out->set[i] || strlen(sp->key) != nlen ||
		    strncasecmp(sp->key, name, nlen))
			continue;
		ows_trim(&val, &vlen);
		utf8_clean(out->v[i], sizeof(out->v[i]), val, vlen);
		out->set[i] = true;
	}
}

/* The value at a dotted path of root; NULL when a part is missing or not an object. */
static const struct jv *path_get(const struct jv *root, const char *path)
{
	char part[REQ_LABEL_KEY_MAX];
	const struct jv *v = root;

	while (*path && v) {
		size_t n = strcspn(path, ".");

		memcpy(part, path, n);
		part[n] = '\0';
		v = jv_is_object(v) ? jv_get(v, part) : NULL;
		path += n + (path[n] == '.');
	}
	return v;
}

void req_labels_body(const struct req_label_set *s, struct req_labels *out, const uint8_t *body,
		     size_t len)
{
	struct jv_arena a;
	const struct jv *root;
	bool any = false;

	for (uint32_t i = 0; s && i < s->n; i++)
		any |= s->l[i].src == REQ_LABEL_BODY;
	if (!any || !body || !len)
		return;
	jv_arena_init(&a, NULL, 0);
	root = jv_parse(&a, (const char *)body, len);
	for (uint32_t i = 0; root && i < s->n; i++) {
		const struct jv *v;
		char num[32];

		if (s->l[i].src != REQ_LABEL_BODY || out->set[i])
			continue;
		v = path_get(root, s->l[i].key);
		if (jv_is_string(v)) {
			utf8_clean(out->v[i], sizeof(out->v[i]), v->str, strlen(v->str));
		} else if (jv_is_number(v)) {
			if (v->is_integer)
				snprintf(num, sizeof(num), "%lld", v->integer);
			else
				snprintf(num, sizeof(num), "%.17g", v->num);
			snprintf(out->v[i], sizeof(out->v[i]), "%s", num);
		} else if (v && (v->type == JV_TRUE || v->type == JV_FALSE)) {
			snprintf(out->v[i], sizeof(out->v[i]), "%s",
				 v->type == JV_TRUE ? "true" : "false");
		} else {
			continue;
		}
		out->set[i] = true;
	}
	jv_arena_reset(&a);
}
