// SPDX-License-Identifier: MIT
/*
 * Request-body fields; the contract is in reqbody.h.
 *
 * Both paths (lib/json for a whole body, the scanner for a cut one) fill the same candidate
 * slots, first occurrence wins, and reqbody_finish() picks from them, so they cannot disagree
 * on a body both can read. Strings, keys too, are read as C strings, as the scanner reads them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/reqbody.h"
#include "lib/json.h"
#include "lib/utf8.h"

/* Request bodies nest a few levels (messages[].content[].image_url...); deeper is not a
 * request we understand, and the scanner stops there rather than guess. */
#define REQBODY_DEPTH_MAX 64
/* 2^63: the first double that does not fit int64_t (the test also rejects NaN). */
#define REQBODY_COUNT_LIMIT 0x1p63
/* Longest JSON number or literal we read a value from. */
#define REQBODY_SCALAR_MAX 32
/* Keys whose values we want; the nested ones only count under their parent. */
enum reqbody_key {
	RK_NONE,
	RK_MODEL,
	RK_STREAM,
	RK_MAX_TOKENS,
	RK_MAX_COMPLETION_TOKENS,
	RK_MAX_OUTPUT_TOKENS, /* the Responses API's */
	RK_NUM_PREDICT,
	RK_OPTIONS,	   /* Ollama: {"options":{"num_predict":N}} */
	RK_PARAMETERS,	   /* TGI: {"parameters":{"max_new_tokens":N}} */
	RK_STREAM_OPTIONS, /* OpenAI: {"stream_options":{"include_usage":true}} */
	RK_OPTIONS_NUM_PREDICT,
	RK_PARAMETERS_MAX_NEW_TOKENS,
	RK_STREAM_OPTIONS_INCLUDE_USAGE,
	RK_KV_TRANSFER, /* vLLM: {"kv_transfer_params":{...}} */
	RK_KV_DO_REMOTE_PREFILL,
	RK_KV_DO_REMOTE_DECODE,
	RK_KV_REMOTE_ENGINE_ID,
	RK_KV_REMOTE_REQUEST_ID,
	RK_KV_REMOTE_HOST,
	RK_KV_REMOTE_PORT,
	RK_BOOTSTRAP_ROOM, /* SGLang */
	RK_BOOTSTRAP_HOST,
	RK_BOOTSTRAP_PORT,
	RK_COUNT,
};

/* Candidates in the order max_tokens prefers them (reqbody.h). */
enum reqbody_limit {
	RL_MAX_COMPLETION_TOKENS,
	RL_MAX_OUTPUT_TOKENS,
	RL_MAX_TOKENS,
	RL_OPTIONS_NUM_PREDICT,
	RL_NUM_PREDICT,
	RL_MAX_NEW_TOKENS,
	RL_COUNT,
};

struct reqbody_slots {
	bool set[RK_COUNT]; /* a key seen (model, stream, include_usage, the join keys): the first
			       wins */
	bool limit_set[RL_COUNT];
	int64_t limit[RL_COUNT];
};

struct reqbody_name {
	const char *name;
	enum reqbody_key key;
};

static const struct reqbody_name reqbody_top_keys[] = {
	{ "model", RK_MODEL },
	{ "stream", RK_STREAM },
	{ "max_tokens", RK_MAX_TOKENS },
	{ "max_completion_tokens", RK_MAX_COMPLETION_TOKENS },
	{ "max_output_tokens", RK_MAX_OUTPUT_TOKENS },
	{ "num_predict", RK_NUM_PREDICT },
	{ "options", RK_OPTIONS },
	{ "parameters", RK_PARAMETERS },
	{ "stream_options", RK_STREAM_OPTIONS },
	{ "kv_transfer_params", RK_KV_TRANSFER },
	{ "bootstrap_room", RK_BOOTSTRAP_ROOM },
	{ "bootstrap_host", RK_BOOTSTRAP_HOST },
	{ "bootstrap_port", RK_BOOTSTRAP_PORT },
};

static const struct reqbody_name reqbody_kv_keys[] = {
	{ "do_remote_prefill", RK_KV_DO_REMOTE_PREFILL },
	{ "do_remote_decode", RK_KV_DO_REMOTE_DECODE },
	{ "remote_engine_id", RK_KV_REMOTE_ENGINE_ID },
	{ "remote_request_id", RK_KV_REMOTE_REQUEST_ID },
	{ "remote_host", RK_KV_REMOTE_HOST },
	{ "remote_port", RK_KV_REMOTE_PORT },
};

/* Whether a top-level key holds a prompt (req_info.prompt). */
static bool reqbody_prompt_key(const char *s, size_t len)
{
	static const char *const keys[] = { "messages", "prompt", "input", "inputs" };

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (strlen(keys[i]) == len && !memcmp(keys[i], s, len))
			return true;
	return false;
}

static enum reqbody_key reqbody_top_key(const char *s, size_t len)
{
	for (size_t i = 0; i < sizeof(reqbody_top_keys) / sizeof(reqbody_top_keys[0]); i++)
		if (strlen(reqbody_top_keys[i].name) == len &&
		    memcmp(reqbody_top_keys[i].name, s, len) == 0)
			return reqbody_top_keys[i].key;
	return RK_NONE;
}

static enum reqbody_key reqbody_nested_key(enum reqbody_key parent, const char *s, size_t len)
{
#define REQBODY_IS(lit) (strlen(lit) == len && memcmp(s, lit, len) == 0)
	if (parent == RK_OPTIONS && REQBODY_IS("num_predict"))
		return RK_OPTIONS_NUM_PREDICT;
	if (parent == RK_PARAMETERS && REQBODY_IS("max_new_tokens"))
		return RK_PARAMETERS_MAX_NEW_TOKENS;
	if (parent == RK_STREAM_OPTIONS && REQBODY_IS("include_usage"))
		return RK_STREAM_OPTIONS_INCLUDE_USAGE;
	for (size_t i = 0;
	     parent == RK_KV_TRANSFER && i < sizeof(reqbody_kv_keys) / sizeof(reqbody_kv_keys[0]);
	     i++)
		if (REQBODY_IS(reqbody_kv_keys[i].name))
			return reqbody_kv_keys[i].key;
#undef REQBODY_IS
	return RK_NONE;
}

static void reqbody_set_limit(struct reqbody_slots *sl, enum reqbody_key key, double v)
{
	static const struct {
		enum reqbody_key key;
		enum reqbody_limit slot;
	} map[] = {
		{ RK_MAX_COMPLETION_TOKENS, RL_MAX_COMPLETION_TOKENS },
		{ RK_MAX_OUTPUT_TOKENS, RL_MAX_OUTPUT_TOKENS },
		{ RK_MAX_TOKENS, RL_MAX_TOKENS },
		{ RK_OPTIONS_NUM_PREDICT, RL_OPTIONS_NUM_PREDICT },
		{ RK_NUM_PREDICT, RL_NUM_PREDICT },
		{ RK_PARAMETERS_MAX_NEW_TOKENS, RL_MAX_NEW_TOKENS },
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		if (map[i].key != key || sl->limit_set[map[i].slot])
			continue;
		sl->limit_set[map[i].slot] = true;
		/* Ollama's num_predict -1 means no limit; anything not a count is unknown. */
		if (v >= 0 && v < REQBODY_COUNT_LIMIT && v == (double)(int64_t)v)
			sl->limit[map[i].slot] = (int64_t)v;
		else
			sl->limit[map[i].slot] = -1;
	}
}

static void reqbody_set_bool(struct reqbody_slots *sl, struct req_info *out, enum reqbody_key key,
			     bool v)
{
	if (key == RK_STREAM && !sl->set[RK_STREAM]) {
		sl->set[RK_STREAM] = true;
		out->stream = v ? 1 : 0;
	} else if (key == RK_STREAM_OPTIONS_INCLUDE_USAGE &&
		   !sl->set[RK_STREAM_OPTIONS_INCLUDE_USAGE]) {
		sl->set[RK_STREAM_OPTIONS_INCLUDE_USAGE] = true;
		out->include_usage = v;
	} else if ((key == RK_KV_DO_REMOTE_PREFILL || key == RK_KV_DO_REMOTE_DECODE) &&
		   !sl->set[key]) {
		sl->set[key] = true;
		*(key == RK_KV_DO_REMOTE_PREFILL ? &out->disagg.do_remote_prefill
						 : &out->disagg.do_remote_decode) = v ? 1 : 0;
	}
}

/* A join key's string (a C string, as read): cleaned into its field, the first one kept. */
static void reqbody_set_str(struct reqbody_slots *sl, struct req_info *out, enum reqbody_key key,
			    const char *v)
{
	struct req_disagg *d = &out->disagg;
	char *dst = NULL;
	size_t cap = 0;

	switch (key) {
	case RK_KV_REMOTE_ENGINE_ID:
		dst = d->remote_engine_id, cap = sizeof(d->remote_engine_id);
		break;
	case RK_KV_REMOTE_REQUEST_ID:
		dst = d->remote_request_id, cap = sizeof(d->remote_request_id);
		break;
	case RK_KV_REMOTE_HOST:
		dst = d->remote_host, cap = sizeof(d->remote_host);
		break;
	case RK_BOOTSTRAP_HOST:
		dst = d->bootstrap_host, cap = sizeof(d->bootstrap_host);
		break;
	default:
		return;
	}
	if (sl->set[key])
		return;
	sl->set[key] = true;
	utf8_clean(dst, cap, v, strlen(v));
}

/* A join key's integer, exact (is_int: the number was written as one and fits): a port 0..65535,
 * a room 0..2^63 - 1; anything else leaves it unknown, but counts as its first occurrence. */
static void reqbody_set_int(struct reqbody_slots *sl, struct req_info *out, enum reqbody_key key,
			    bool is_int, long long v)
{
	struct req_disagg *d = &out->disagg;

	if ((key != RK_KV_REMOTE_PORT && key != RK_BOOTSTRAP_PORT && key != RK_BOOTSTRAP_ROOM) ||
	    sl->set[key])
		return;
	sl->set[key] = true;
	if (!is_int || v < 0)
		return;
	if (key == RK_BOOTSTRAP_ROOM) {
		d->room_set = true;
		d->bootstrap_room = v;
	} else if (v <= UINT16_MAX) {
		*(key == RK_KV_REMOTE_PORT ? &d->remote_port : &d->bootstrap_port) = (int32_t)v;
	}
}

static void reqbody_finish(const struct reqbody_slots *sl, struct req_info *out)
{
	for (int i = 0; i < RL_COUNT; i++) {
		if (sl->limit_set[i]) {
			out->max_tokens = sl->limit[i];
			return;
		}
	}
}

/* ---- complete bodies: lib/json ---- */

static void reqbody_json_member(struct reqbody_slots *sl, struct req_info *out,
				enum reqbody_key key, const struct jv *v)
{
	if (key == RK_MODEL && jv_is_string(v) && !sl->set[RK_MODEL]) {
		sl->set[RK_MODEL] = true;
		utf8_clean(out->model, sizeof(out->model), v->str, strlen(v->str));
	} else if (jv_is_string(v)) {
		reqbody_set_str(sl, out, key, v->str);
	} else if (jv_is_bool(v)) {
		reqbody_set_bool(sl, out, key, jv_is_true(v));
	} else if (jv_is_number(v)) {
		reqbody_set_limit(sl, key, v->num);
		reqbody_set_int(sl, out, key, v->is_integer, v->integer);
	}
}

static int reqbody_json(const uint8_t *buf, size_t len, struct reqbody_slots *sl,
			struct req_info *out)
{
	struct jv_arena a;
	const struct jv *root, *m, *n;

	jv_arena_init(&a, NULL, 0);
	root = jv_parse(&a, (const char *)buf, len);
	if (!root) {
		jv_arena_reset(&a);
		return -1;
	}
	/* Members in the body's order, a key given twice too: the slots keep the first. */
	jv_foreach(m, jv_is_object(root) ? root : NULL)
	{
		enum reqbody_key key = reqbody_top_key(m->key, strlen(m->key));

		out->prompt |= reqbody_prompt_key(m->key, strlen(m->key));
		if (jv_is_object(m) && key != RK_NONE) {
			if (key == RK_KV_TRANSFER)
				out->disagg.kv = true;
			jv_foreach(n, m) reqbody_json_member(
			    sl, out, reqbody_nested_key(key, n->key, strlen(n->key)), n);
		} else {
			reqbody_json_member(sl, out, key, m);
		}
	}
	jv_arena_reset(&a);
	return 0;
}

/* ---- cut bodies: the scanner ---- */

struct reqbody_scan {
	const char *s;
	size_t len, pos;
};

static void reqbody_skip_ws(struct reqbody_scan *sc)
{
	while (sc->pos < sc->len && (sc->s[sc->pos] == ' ' || sc->s[sc->pos] == '\t' ||
				     sc->s[sc->pos] == '\n' || sc->s[sc->pos] == '\r'))
		sc->pos++;
}

/*
 * Steps over a string whose opening quote is at pos; on success pos is past the closing
 * quote and [*start, *start + *slen) is the raw content. False if the capture ends inside.
 */
static bool reqbody_string(struct reqbody_scan *sc, size_t *start, size_t *slen)
{
	size_t i = sc->pos + 1;

	while (i < sc->len) {
		if (sc->s[i] == '\\') {
			i += 2;
			continue;
		}
		if (sc->s[i] == '"') {
			*start = sc->pos + 1;
			*slen = i - *start;
			sc->pos = i + 1;
			return true;
		}
		i++;
	}
	return false;
}

/* Copies a raw JSON string into a C string, undoing simple escapes; non-ASCII \u is '?'. */
static void reqbody_unescape(const char *s, size_t len, char *dst, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < len && o + 1 < cap; i++) {
		char c = s[i];

		if (c == '\\' && i + 1 < len) {
			c = s[++i];
			switch (c) {
			case 'n':
				c = '\n';
				break;
			case 't':
				c = '\t';
				break;
			case 'r':
				c = '\r';
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'u': {
				char hex[5] = { 0 };
				long cp;

				if (i + 4 >= len) {
					dst[o] = '\0';
					return;
				}
				memcpy(hex, s + i + 1, 4);
				cp = strtol(hex, NULL, 16);
				c = cp > 0 && cp < 0x80 ? (char)cp : '?';
				i += 4;
				break;
			}
			default:
				break; /* \" \\ \/ are the character itself */
			}
		}
		dst[o++] = c;
	}
	dst[o] = '\0';
}

/*
 * A number or literal at pos. False if it runs to the end of the capture (maybe cut), or if
 * there is none: a delimiter where a value belongs (`[}`, `{"a":]`) is not JSON, and taking it
 * as an empty scalar would leave pos where it was.
 */
static bool reqbody_scalar(struct reqbody_scan *sc, char *tok, size_t cap)
{
	size_t start = sc->pos, n;

	while (sc->pos < sc->len && strchr(",}] \t\r\n", sc->s[sc->pos]) == NULL)
		sc->pos++;
	if (sc->pos == sc->len || sc->pos == start)
		return false;
	n = sc->pos - start;
	if (n >= cap)
		n = cap - 1;
	memcpy(tok, sc->s + start, n);
	tok[n] = '\0';
	return true;
}

struct reqbody_level {
	bool object;
	bool want_key;		 /* object: a key (or the end) comes next, not a comma */
	enum reqbody_key parent; /* the top-level key this container is the value of */
};

static void reqbody_scan_value_scalar(struct reqbody_slots *sl, struct req_info *out,
				      enum reqbody_key key, const char *tok)
{
	char *end;
	double v;

	if (strcmp(tok, "true") == 0 || strcmp(tok, "false") == 0) {
		reqbody_set_bool(sl, out, key, tok[0] == 't');
		return;
	}
	v = strtod(tok, &end);
	if (end != tok && *end == '\0') {
		bool is_int = true;
		long long i;

		reqbody_set_limit(sl, key, v);
		for (const char *p = tok + (tok[0] == '-'); *p && is_int; p++)
			is_int = *p >= '0' && *p <= '9';
		errno = 0;
		i = strtoll(tok, &end, 10);
		reqbody_set_int(sl, out, key, is_int && errno == 0 && *end == '\0', i);
	}
}

static void reqbody_scan(const uint8_t *buf, size_t len, struct reqbody_slots *sl,
			 struct req_info *out)
{
	struct reqbody_scan sc = { (const char *)buf, len, 0 };
	struct reqbody_level lv[REQBODY_DEPTH_MAX];
	int depth = 0;

	reqbody_skip_ws(&sc);
	if (sc.pos >= sc.len || sc.s[sc.pos] != '{')
		return;
	sc.pos++;
	lv[depth++] = (struct reqbody_level){ true, true, RK_NONE };

	/* Every turn consumes at least one byte or returns: a close, a comma, a key (two quotes
	 * at least), an opening bracket, a string, or a scalar of one byte or more. */
	while (depth > 0) {
		struct reqbody_level *cur = &lv[depth - 1];
		enum reqbody_key key = RK_NONE;
		size_t start, slen;
		char c;

		reqbody_skip_ws(&sc);
		if (sc.pos >= sc.len)
			return;
		c = sc.s[sc.pos];
		if (c == (cur->object ? '}' : ']')) {
			sc.pos++;
			depth--;
			if (depth)
				lv[depth - 1].want_key = false;
			continue;
		}
		if (c == ',') {
			sc.pos++;
			cur->want_key = cur->object;
			continue;
		}
		if (cur->object) {
			if (c != '"' || !cur->want_key)
				return; /* not JSON after all */
			if (!reqbody_string(&sc, &start, &slen))
				return;
			reqbody_skip_ws(&sc);
			if (sc.pos >= sc.len || sc.s[sc.pos] != ':')
				return;
			sc.pos++;
			reqbody_skip_ws(&sc);
			if (sc.pos >= sc.len)
				return;
			if (depth == 1) {
				key = reqbody_top_key(sc.s + start, slen);
				out->prompt |= reqbody_prompt_key(sc.s + start, slen);
			} else if (depth == 2)
				key = reqbody_nested_key(cur->parent, sc.s + start, slen);
			cur->want_key = false;
			c = sc.s[sc.pos];
		}

		/* A value, for `key` (RK_NONE inside arrays and unwanted members). */
		if (c == '{' || c == '[') {
			enum reqbody_key parent = depth == 1 ? key : RK_NONE;

			if (depth == REQBODY_DEPTH_MAX)
				return;
			if (c == '{' && parent == RK_KV_TRANSFER)
				out->disagg.kv = true;
			sc.pos++;
			lv[depth++] = (struct reqbody_level){ c == '{', c == '{', parent };
		} else if (c == '"') {
			if (!reqbody_string(&sc, &start, &slen))
				return;
			if (key == RK_MODEL && !sl->set[RK_MODEL]) {
				char raw[REQBODY_MODEL_MAX];

				sl->set[RK_MODEL] = true;
				reqbody_unescape(sc.s + start, slen, raw, sizeof(raw));
				utf8_clean(out->model, sizeof(out->model), raw, strlen(raw));
			} else if (key >= RK_KV_REMOTE_ENGINE_ID && !sl->set[key]) {
				char raw[REQBODY_ID_MAX];

				reqbody_unescape(sc.s + start, slen, raw, sizeof(raw));
				reqbody_set_str(sl, out, key, raw);
			}
		} else {
			char tok[REQBODY_SCALAR_MAX];

			if (!reqbody_scalar(&sc, tok, sizeof(tok)))
				return;
			reqbody_scan_value_scalar(sl, out, key, tok);
		}
	}
}

void reqbody_parse(const uint8_t *buf, size_t captured, size_t total, struct req_info *out)
{
	struct reqbody_slots sl = { 0 };

	reqbody_info_init(out);
	/* Bytes past the body's length are not the body (a pipelined request, say). */
	if (captured > total)
		captured = total;
	if (!buf || !captured)
		return;
	if (captured == total && reqbody_json(buf, captured, &sl, out) == 0) {
		reqbody_finish(&sl, out);
		return;
	}
	reqbody_scan(buf, captured, &sl, out);
	reqbody_finish(&sl, out);
}
