// SPDX-License-Identifier: MIT
#include <math.h>
#include <string.h>
#include <linux/types.h>

#include "events.h"
#include "lib/escape.h"
#include "lib/hist.h"
#include "lib/jsonw.h"
#include "sinks/output.h"

static void ms_or_null(struct jsonw *w, const char *key, int64_t ns)
{
	if (ns < 0)
		jsonw_null(w, key);
	else
		jsonw_num(w, key, ns / 1e6, 3);
}

/* --label: {"NAME":"value" or null, ...}; absent when no label was asked for. */
static void json_labels(struct jsonw *w, const struct req_labels *l)
{
	if (!l->spec)
		return;
	jsonw_obj_begin(w, "labels");
	for (uint32_t i = 0; i < l->spec->n; i++)
		jsonw_str(w, l->spec->l[i].name, l->set[i] ? l->v[i] : NULL);
	jsonw_obj_end(w);
}

/* The request's objectives and verdicts (slo.h): {"ttft":{"limit_ms","from","result"},...,
 * "result"}; only when it had an objective. */
static void json_slo(struct jsonw *w, const struct slo_verdict *v)
{
	if (!v->any)
		return;
	jsonw_obj_begin(w, "slo");
	for (int k = 0; k < SLO_METRICS; k++) {
		if (!v->limit_ns[k])
			continue;
		jsonw_obj_begin(w, slo_metric_names[k]);
		jsonw_num(w, "limit_ms", v->limit_ns[k] / 1e6, 3);
		jsonw_str(w, "from", v->from[k] == SLO_FROM_HEADER ? "header" : "flag");
		jsonw_str(w, "result", slo_result_name(v->result[k]));
		jsonw_obj_end(w);
	}
	jsonw_str(w, "result", slo_result_name(v->overall));
	jsonw_obj_end(w);
}

/* A request its client left (request_abandoned): when, and what the server did after
 * (docs/output.md, "Abandoned requests"); only for those. */
static void json_abandoned(struct jsonw *w, const struct request *r,
			   const struct request_metrics *m, const struct gpu_attribution *ga)
{
	if (!request_abandoned(r))
		return;
	jsonw_obj_begin(w, "abandoned");
	ms_or_null(w, "client_gone_ms", m->client_gone_ns);
	ms_or_null(w, "went_on_ms", m->went_on_ns);
	jsonw_u64(w, "frames_after", r->gone_frames);
	jsonw_u64(w, "bytes_after", r->gone_bytes);
	jsonw_u64(w, "failed_writes", r->gone_failed_writes);
	if (ga && ga->has_steps)
		jsonw_u64(w, "gpu_steps_after", ga->steps_after_gone);
	else
		jsonw_null(w, "gpu_steps_after");
	jsonw_obj_end(w);
}

static void i64_or_null(struct jsonw *w, const char *key, int64_t v)
{
	if (v < 0)
		jsonw_null(w, key);
	else
		jsonw_i64(w, key, v);
}

/* The connection's ends by the roles they play: the client is the peer of a served request and
 * the traced process itself for one it made. Null for a Unix socket. */
static void json_ends(struct jsonw *w, const struct request *r)
{
	const struct request_ends *e = &r->ends;
	const char *caddr = r->client ? e->local_addr : e->peer_addr;
	const char *saddr = r->client ? e->peer_addr : e->local_addr;

	jsonw_str(w, "client_address", e->inet ? caddr : NULL);
	if (e->inet)
		jsonw_u64(w, "client_port", r->client ? e->local_port : e->peer_port);
	else
		jsonw_null(w, "client_port");
	jsonw_str(w, "server_address", e->inet ? saddr : NULL);
	if (e->inet)
		jsonw_u64(w, "server_port", r->client ? e->peer_port : e->local_port);
	else
		jsonw_null(w, "server_port");
}

/* The request's trace context, where its head had one (docs/otlp.md, "Trace context"). */
static void json_trace(struct jsonw *w, const struct request *r)
{
	const struct trace_ctx *t = &r->trace;
	char hex[2 * TRACECTX_TRACE_ID_LEN + 1];

	if (t->tp.valid) {
		tracectx_hex(hex, t->tp.trace_id, sizeof(t->tp.trace_id));
		jsonw_str(w, "trace_id", hex);
		tracectx_hex(hex, t->tp.parent_id, sizeof(t->tp.parent_id));
		jsonw_str(w, "parent_span_id", hex);
		jsonw_u64(w, "trace_flags", t->tp.flags);
		if (t->state[0])
			jsonw_str(w, "tracestate", t->state);
		if (request_trace_forwarded(r))
			jsonw_bool(w, "trace_forwarded", true);
	} else if (t->malformed) {
		jsonw_bool(w, "trace_malformed", true);
	}
	if (t->request_id[0])
		jsonw_str(w, "request_id", t->request_id);
}

static void json_bool_or_null(struct jsonw *w, const char *key, int v)
{
	if (v < 0)
		jsonw_null(w, key);
	else
		jsonw_bool(w, key, v);
}

static void json_str_or_null(struct jsonw *w, const char *key, const char *v)
{
	jsonw_str(w, key, v[0] ? v : NULL);
}

/* Disaggregated serving's join keys from the body (reqbody.h), when it had any. */
static void json_disagg(struct jsonw *w, const struct req_disagg *d)
{
	if (d->kv) {
		jsonw_obj_begin(w, "kv_transfer");
		json_bool_or_null(w, "do_remote_prefill", d->do_remote_prefill);
		json_bool_or_null(w, "do_remote_decode", d->do_remote_decode);
		json_str_or_null(w, "remote_engine_id", d->remote_engine_id);
		json_str_or_null(w, "remote_request_id", d->remote_request_id);
		json_str_or_null(w, "remote_host", d->remote_host);
		i64_or_null(w, "remote_port", d->remote_port);
		jsonw_obj_end(w);
	}
	if (d->room_set || d->bootstrap_host[0] || d->bootstrap_port >= 0) {
		jsonw_obj_begin(w, "bootstrap");
		if (d->room_set)
			jsonw_i64(w, "room", d->bootstrap_room);
		else
			jsonw_null(w, "room");
		json_str_or_null(w, "host", d->bootstrap_host);
		i64_or_null(w, "port", d->bootstrap_port);
		jsonw_obj_end(w);
	}
}

static const char *request_format(const struct request *r)
{
	if (!r->streamed)
		return r->format == FMT_UNKNOWN ? "none" : frame_format_name(r->format);
	return frame_format_name(r->format);
}

/* Where the serving process runs: its container's short id, and in a Kubernetes pod the pod's
 * names (docs/kubernetes.md); nothing on the host. */
static void put_workload(struct jsonw *w, const struct workload *wl)
{
	char id[WORKLOAD_SHORT_LEN + 1];

	if (wl->container_id[0]) {
		snprintf(id, sizeof(id), "%.*s", WORKLOAD_SHORT_LEN, wl->container_id);
		jsonw_str(w, "container", id);
	}
	if (!workload_in_pod(wl))
		return;
	jsonw_obj_begin(w, "k8s");
	jsonw_str(w, "namespace", wl->k8s_namespace[0] ? wl->k8s_namespace : NULL);
	jsonw_str(w, "pod", wl->k8s_pod[0] ? wl->k8s_pod : NULL);
	jsonw_str(w, "pod_uid", wl->pod_uid[0] ? wl->pod_uid : NULL);
	jsonw_str(w, "container", wl->k8s_container[0] ? wl->k8s_container : NULL);
	jsonw_str(w, "container_id", wl->container_id[0] ? wl->container_id : NULL);
	jsonw_obj_end(w);
}

/* A request's slow gaps and their causes (docs/gpu.md "Who stalled me"); null without two
 * tokens. */
static void put_stalls(struct jsonw *w, const struct stall_report *st)
{
	if (!st) {
		jsonw_null(w, "stalls");
		return;
	}
	jsonw_obj_begin(w, "stalls");
	jsonw_num(w, "threshold_ms", st->threshold_ns / 1e6, 3);
	jsonw_u64(w, "count", st->n);
	jsonw_u64(w, "likely", st->likely);
	jsonw_obj_begin(w, "by_cause_ms");
	for (int c = 0; c < STALL_CAUSES; c++)
		if (st->count[c])
			jsonw_num(w, stall_cause_name(c), st->ns[c] / 1e6, 3);
	jsonw_obj_end(w);
	jsonw_arr_begin(w, "list");
	for (uint32_t i = 0; i < st->nkept; i++) {
		const struct stall *v = &st->v[i];

		jsonw_obj_begin(w, NULL);
		jsonw_u64(w, "token", v->token);
		jsonw_u64(w, "from_ns", v->from_ns);
		jsonw_num(w, "gap_ms", v->gap_ns / 1e6, 3);
		jsonw_str(w, "cause", stall_cause_name(v->cause));
		jsonw_num(w, "cause_ms", v->cause_ns / 1e6, 3);
		jsonw_bool(w, "likely", v->likely);
		if (v->cause == STALL_BATCH) {
			jsonw_u64(w, "batch_from", v->batch_from);
			jsonw_u64(w, "batch_to", v->batch_to);
		}
		if (v->cause == STALL_PREFILL) {
			jsonw_arr_begin(w, "by");
			for (uint32_t k = 0; k < v->nby; k++) {
				jsonw_obj_begin(w, NULL);
				jsonw_str(w, "conn", v->by[k].conn);
				jsonw_u64(w, "seq", v->by[k].seq);
				if (v->by[k].prompt_tokens >= 0)
					jsonw_u64(w, "prompt_tokens",
						  (uint64_t)v->by[k].prompt_tokens);
				else
					jsonw_null(w, "prompt_tokens");
				jsonw_u64(w, "prompt_bytes",
					  (uint64_t)(v->by[k].prompt_bytes > 0
							 ? v->by[k].prompt_bytes
							 : 0));
				jsonw_obj_end(w);
			}
			jsonw_arr_end(w);
			jsonw_u64(w, "by_more", v->nby_all - v->nby);
		}
		jsonw_obj_end(w);
	}
	jsonw_arr_end(w);
	jsonw_obj_end(w);
}

/* A request line's times: arrival, socket wait, first token, end, TTFT by each definition, E2E,
 * TPOT, ITL. */
static void json_times(struct jsonw *w, const struct request *r, const struct request_metrics *m)
{
	if (r->joined)
		jsonw_null(w, "arrival_ns");
	else
		jsonw_u64(w, "arrival_ns", r->arrival_ns);
	if (m->socket_wait_ns >= 0)
		jsonw_u64(w, "received_ns", r->received_ns);
	else
		jsonw_null(w, "received_ns");
	ms_or_null(w, "socket_wait_ms", m->socket_wait_ns);
	if (r->ntokens)
		jsonw_u64(w, "first_token_ns", r->first_token_ns);
	else
		jsonw_null(w, "first_token_ns");
	jsonw_u64(w, "end_ns", r->end_ns);
	ms_or_null(w, "ttft_ms", m->ttft_ns);
	/* The same TTFT under each tool's definition (docs/output.md "TTFT definitions"). */
	ms_or_null(w, "ttft_first_byte_ms", m->ttft_byte_ns);
	ms_or_null(w, "ttft_first_chunk_ms", m->ttft_chunk_ns);
	ms_or_null(w, "ttft_first_content_ms", m->ttft_text_ns);
	ms_or_null(w, "ttft_first_output_ms", m->ttft_ns);
	ms_or_null(w, "e2e_ms", m->e2e_ns);
	ms_or_null(w, "tpot_ms", m->tpot_ns);
	if (m->itl_p50_ns < 0) {
		jsonw_null(w, "itl_ms");
	} else {
		jsonw_obj_begin(w, "itl_ms");
		ms_or_null(w, "p50", m->itl_p50_ns);
		ms_or_null(w, "p99", m->itl_p99_ns);
		ms_or_null(w, "max", m->itl_max_ns);
		jsonw_obj_end(w);
	}
}

/* A request line's counts: tokens and where they came from, frames, the prompt's bytes and tokens,
 * the cache. */
static void json_tokens(struct jsonw *w, const struct request *r, const struct request_metrics *m)
{
	jsonw_i64(w, "tokens", m->tokens);
	/* A gRPC message is one chunk of output: without the schema, tokens are not known. */
	jsonw_str(w, "tokens_from",
		  m->tokens_from_usage	  ? "usage"
		  : r->format == FMT_GRPC ? "messages"
					  : "frames");
	jsonw_u64(w, "frames", r->ntokens);
	jsonw_u64(w, "all_frames", r->frames);
	if (isnan(m->tokens_per_chunk_mean)) {
		jsonw_null(w, "tokens_per_chunk");
	} else {
		jsonw_obj_begin(w, "tokens_per_chunk");
		jsonw_num(w, "mean", m->tokens_per_chunk_mean, 2);
		i64_or_null(w, "p50", m->tokens_per_chunk_p50);
		i64_or_null(w, "max", m->tokens_per_chunk_max);
		jsonw_obj_end(w);
	}
	jsonw_i64(w, "prompt_bytes", r->prompt_bytes < 0 ? 0 : r->prompt_bytes);
	i64_or_null(w, "prompt_tokens", r->prompt_tokens);
	i64_or_null(w, "cached_tokens", r->cached_tokens);
	/* Not reported: a guess from its prefill time (prefix.h), never a count. */
	jsonw_str(w, "cache_guess",
		  m->cache_guess == CACHE_REPORTED ? NULL : cache_guess_name(m->cache_guess));
	i64_or_null(w, "reasoning_tokens", r->reasoning_tokens);
	i64_or_null(w, "max_tokens", r->info.max_tokens);
	jsonw_num(w, "tok_per_s", m->tok_per_s, 2);
}

/* A request line's GPU figures (docs/gpu.md): engine to socket, stalls, queue, prefill and decode,
 * steps and batches, preemptions and their recompute tax, and how they were attributed. */
static void json_gpu(struct jsonw *w, const struct request *r, const struct gpu_attribution *ga)
{
	/* Engine to socket (docs/gpu.md): its tokens' times from their steps' ends to their
	 * writes. */
	if (ga->ne2s) {
		jsonw_obj_begin(w, "engine_to_socket_ms");
		jsonw_num(w, "p50", ga->e2s[quantile_rank(0.50, ga->ne2s) - 1] / 1e6, 3);
		jsonw_num(w, "p99", ga->e2s[quantile_rank(0.99, ga->ne2s) - 1] / 1e6, 3);
		jsonw_num(w, "max", ga->e2s[ga->ne2s - 1] / 1e6, 3);
		jsonw_obj_end(w);
	} else {
		jsonw_null(w, "engine_to_socket_ms");
	}
	put_stalls(w, ga->stalls);
	ms_or_null(w, "queue_ms", ga->queue_ns);
	ms_or_null(w, "prefill_ms", ga->prefill_ns);
	ms_or_null(w, "decode_ms", ga->decode_ns);
	ms_or_null(w, "gpu_ms", ga->gpu_ns);
	ms_or_null(w, "host_ms", ga->host_ns);
	if (ga->source && !strcmp(ga->source, "cupti")) {
		ms_or_null(w, "prefill_gpu_ms", ga->prefill_gpu_ns);
		ms_or_null(w, "decode_gpu_ms", ga->decode_gpu_ns);
	} else {
		jsonw_null(w, "prefill_gpu_ms");
		jsonw_null(w, "decode_gpu_ms");
	}
	/* The decode steps its tokens came from and the mean batch they had (batch.h). */
	if (ga->has_steps)
		jsonw_u64(w, "steps", ga->steps);
	else
		jsonw_null(w, "steps");
	if (ga->batch_steps)
		jsonw_num(w, "batch_mean", ga->batch_mean, 2);
	else
		jsonw_null(w, "batch_mean");
	/* Out of the batch and recomputed (batch.h): known where its steps are. */
	if (ga->has_steps) {
		jsonw_u64(w, "preemptions", ga->preemptions);
		jsonw_num(w, "preempted_ms", ga->preempted_ns / 1e6, 3);
	} else {
		jsonw_null(w, "preemptions");
		jsonw_null(w, "preempted_ms");
	}
	/* The recompute tax of its preemptions (docs/gpu.md): its prompt each time (when usage
	 * said it), the tokens it had generated, the recompute steps' time. */
	if (ga->has_steps && ga->preemptions) {
		jsonw_obj_begin(w, "recomputed");
		if (r->prompt_tokens >= 0)
			jsonw_u64(w, "prompt_tokens", (uint64_t)r->prompt_tokens * ga->preemptions);
		else
			jsonw_null(w, "prompt_tokens");
		jsonw_u64(w, "generated_tokens", ga->recomputed_generated);
		jsonw_num(w, "recompute_ms", ga->recompute_ns / 1e6, 3);
		jsonw_obj_end(w);
	} else {
		jsonw_null(w, "recomputed");
	}
	if (ga->source)
		jsonw_str(w, "attribution", ga->source);
	else
		jsonw_null(w, "attribution");
	jsonw_str(w, "attribution_how", ga->how);
}

void output_json(FILE *f, const struct request *r, const struct request_metrics *m,
		 const struct gpu_attribution *ga, bool tokens)
{
	struct jsonw w;

	jsonw_begin(&w, f);
	jsonw_u64(&w, "pid", r->pid);
	jsonw_str(&w, "conn", r->conn);
	jsonw_str(&w, "role", r->client ? "client" : "server");
	jsonw_str(&w, "kind", request_is_inference(r) ? "inference" : "other");
	if (r->joined)
		jsonw_bool(&w, "joined", true);
	json_ends(&w, r);
	json_trace(&w, r);
	put_workload(&w, &r->workload);
	if (r->tls)
		jsonw_bool(&w, "tls", true);
	if (r->proto == PROTO_HTTP2) {
		jsonw_bool(&w, "h2", true);
		jsonw_u64(&w, "h2_stream", r->stream);
	}
	jsonw_u64(&w, "seq", r->seq);
	jsonw_str(&w, "method", r->joined ? NULL : r->method);
	jsonw_str(&w, "path", r->joined ? NULL : r->path);
	jsonw_str(&w, "model", r->info.model[0] ? r->info.model : NULL);
	jsonw_i64(&w, "status", r->status);
	jsonw_str(&w, "outcome", outcome_name(r->outcome));
	/* A stream error's reason as the stream named it (a code, never a message). */
	jsonw_str(&w, "error_reason",
		  r->outcome == OUTCOME_STREAM_ERROR && r->error_reason[0] ? r->error_reason
									   : NULL);
	jsonw_bool(&w, "stream", r->streamed);
	jsonw_str(&w, "format", request_format(r));
	if (r->format == FMT_GRPC)
		i64_or_null(&w, "grpc_status", r->grpc_status);
	json_times(&w, r, m);
	json_tokens(&w, r, m);
	jsonw_u64(&w, "lost_bytes", r->lost_bytes);
	jsonw_u64(&w, "dropped_frames", r->dropped_frames);
	json_disagg(&w, &r->info.disagg);
	json_labels(&w, &r->labels);
	json_slo(&w, &m->slo);
	json_abandoned(&w, r, m, ga);
	/* A proxy's two sides (proxy.h): a served request's upstream, an upstream's served one. */
	if (r->peer.set) {
		jsonw_obj_begin(&w, r->client ? "downstream" : "upstream");
		jsonw_str(&w, "conn", r->peer.conn);
		jsonw_u64(&w, "seq", r->peer.seq);
		if (!r->client)
			ms_or_null(&w, "ttft_ms", m->upstream_ttft_ns);
		jsonw_obj_end(&w);
		if (!r->client)
			ms_or_null(&w, "proxy_ttft_ms", m->proxy_ttft_ns);
	}
	json_gpu(&w, r, ga);
	if (tokens) {
		jsonw_arr_begin(&w, "token_ns");
		for (uint32_t i = 0; i < r->ntokens; i++)
			jsonw_u64(&w, NULL, r->token_ns[i]);
		jsonw_arr_end(&w);
	}
	jsonw_end(&w);
	fputc('\n', f);
}

/*
 * The text request line's columns, in order. Without GPU steps the line is 99 cells wide (the
 * columns before COL_QUEUE), so it fits a 100-column terminal; the GPU columns add 36 (135).
 * Each width holds the usual values: a wider number is written shorter (text_fit), a longer
 * string is cut (escape_text_col, text_peer), so no value moves the columns after it.
 */
enum text_col {
	COL_PID,
	COL_PEER,
	COL_METHOD,
	COL_OUTCOME,
	COL_HTTP,
	COL_TTFT,
	COL_ITL50,
	COL_ITL99,
	COL_TOK,
	COL_TOKS,
	COL_E2E,
	COL_QUEUE, /* the GPU columns (gpu.h, batch.h), from here on */
	COL_PREFILL,
	COL_DECODE,
	COL_STEPS,
	COL_BATCH,
	COL_N,
};

static const struct {
	const char *name;
	unsigned width;
	bool left; /* text, left-aligned; numbers are right-aligned */
} text_cols[COL_N] = {
	[COL_PID] = { "PID", 7, true },		/* pid_max is at most 4194304 */
	[COL_PEER] = { "PEER#CONN", 22, true }, /* an IPv4 address:port#conn */
	[COL_METHOD] = { "METHOD", 6, true },
	[COL_OUTCOME] = { "OUTCOME", 12, true }, /* stream_error */
	[COL_HTTP] = { "HTTP", 4, false },
	[COL_TTFT] = { "TTFT(ms)", 8, false },
	[COL_ITL50] = { "ITL50", 6, false },
	[COL_ITL99] = { "ITL99", 6, false },
	[COL_TOK] = { "TOK", 5, false },
	[COL_TOKS] = { "TOK/S", 6, false },
	[COL_E2E] = { "E2E(ms)", 7, false },
	[COL_QUEUE] = { "QUEUE", 7, false },
	[COL_PREFILL] = { "PREFILL", 7, false },
	[COL_DECODE] = { "DECODE", 7, false },
	[COL_STEPS] = { "STEPS", 5, false },
	[COL_BATCH] = { "BATCH", 5, false },
};

/* s in column c, after the space that parts it from the one before: s takes at most the
 * column's width in cells (ASCII, or escape_text_col's cut, padded to the width). */
static void text_put(FILE *f, enum text_col c, const char *s)
{
	if (c != COL_PID)
		fputc(' ', f);
	if (text_cols[c].left)
		fprintf(f, "%-*s", (int)text_cols[c].width, s);
	else
		fprintf(f, "%*s", (int)text_cols[c].width, s);
}

/*
 * v in column c, as short as it must be to fit: with its decimals, else without, else in
 * thousands with the suffix big ('s' for ms: seconds; 'k'), else '*' across the column (no
 * real value gets there: 6 cells of seconds are 27 hours).
 */
static void text_fit(FILE *f, enum text_col c, double v, int decimals, char big)
{
	int w = (int)text_cols[c].width;
	char b[64];

	if (snprintf(b, sizeof(b), "%.*f", decimals, v) > w &&
	    snprintf(b, sizeof(b), "%.0f", v) > w &&
	    (!big || snprintf(b, sizeof(b), "%.0f%c", v / 1000, big) > w))
		snprintf(b, sizeof(b), "%.*s", w, "****************");
	text_put(f, c, b);
}

static void text_ms(FILE *f, enum text_col c, int64_t ns)
{
	if (ns < 0)
		text_put(f, c, "-");
	else
		text_fit(f, c, ns / 1e6, 1, 's');
}

static bool text_ascii(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			return false;
	return true;
}

/*
 * The peer column into dst (ESCAPE_COL_BYTES of its width): a label too long for it (an IPv6
 * address) is cut in the address, marked with an ellipsis, so that the port and connection
 * number, which tell its requests apart, stay whole: "[2001:db8:8…]:54321#12". A label is
 * ASCII (conn.c writes it from inet_ntop); anything else is cut at its end as any string.
 */
static const char *text_peer(char *dst, size_t cap, const char *peer)
{
	const unsigned w = text_cols[COL_PEER].width;
	const char *tail = strrchr(peer, ':');

	if (strlen(peer) <= w || !tail || !text_ascii(peer))
		return escape_text_col(dst, cap, peer, w, true);
	if (tail > peer && tail[-1] == ']')
		tail--;
	/* at least one character of the address before the ellipsis */
	if (strlen(tail) + 2 > w)
		return escape_text_col(dst, cap, peer, w, true);
	snprintf(dst, cap, "%.*s\xe2\x80\xa6%s", (int)(w - 1 - strlen(tail)), peer, tail);
	return dst;
}

void output_text_header(FILE *f, bool gpu)
{
	for (enum text_col c = 0; c < (gpu ? COL_N : COL_QUEUE); c++)
		text_put(f, c, text_cols[c].name);
	fputc('\n', f);
}

void output_text(FILE *f, const struct request *r, const struct request_metrics *m,
		 const struct gpu_attribution *ga, bool gpu)
{
	/* A server's client (its address after "<-"), or "->" and the upstream a client called. */
	const char *peer = r->client ? strstr(r->conn, "->") : strstr(r->conn, "<-");

	char peer_col[ESCAPE_COL_BYTES(22)], method_col[ESCAPE_COL_BYTES(6)];

	if (peer && !r->client)
		peer += 2;
	text_fit(f, COL_PID, r->pid, 0, 0);
	text_put(f, COL_PEER, text_peer(peer_col, sizeof(peer_col), peer ? peer : r->conn));
	text_put(f, COL_METHOD,
		 escape_text_col(method_col, sizeof(method_col), r->joined ? "joined" : r->method,
				 text_cols[COL_METHOD].width, true));
	text_put(f, COL_OUTCOME, outcome_name(r->outcome));
	/* Joined mid-response, its status went by before tracing. */
	if (r->joined)
		text_put(f, COL_HTTP, "-");
	else
		text_fit(f, COL_HTTP, r->status, 0, 0);
	text_ms(f, COL_TTFT, m->ttft_ns);
	/* Frames written together are 0 apart: 0.0w says at least half the gaps were such. */
	if (m->itl_p50_ns == 0)
		text_put(f, COL_ITL50, "0.0w");
	else
		text_ms(f, COL_ITL50, m->itl_p50_ns);
	text_ms(f, COL_ITL99, m->itl_p99_ns);
	text_fit(f, COL_TOK, (double)m->tokens, 0, 'k');
	if (m->tok_per_s == m->tok_per_s)
		text_fit(f, COL_TOKS, m->tok_per_s, 1, 'k');
	else
		text_put(f, COL_TOKS, "-");
	text_ms(f, COL_E2E, m->e2e_ns);
	if (gpu) {
		text_ms(f, COL_QUEUE, ga->queue_ns);
		text_ms(f, COL_PREFILL, ga->prefill_ns);
		text_ms(f, COL_DECODE, ga->decode_ns);
		if (ga->has_steps)
			text_fit(f, COL_STEPS, ga->steps, 0, 'k');
		else
			text_put(f, COL_STEPS, "-");
		if (ga->batch_steps)
			text_fit(f, COL_BATCH, ga->batch_mean, 1, 'k');
		else
			text_put(f, COL_BATCH, "-");
	}
	fputc('\n', f);
}

void output_step_text(FILE *f, const struct gpu_step *s)
{
	fprintf(
	    f,
	    "GPU pid %u tid %u step %.6f s dur %.3f ms %-7s %-9s launches %u graphs %u memcpy %u "
	    "(dtoh %u) wait %.3f ms batch %u\n",
	    s->pid, s->tid, s->start_ns / 1e9, (s->end_ns - s->start_ns) / 1e6,
	    gpu_kind_name(s->kind), gpu_mode_name(s->mode), s->launches, s->graph_launches,
	    s->memcpys, s->memcpys_dtoh, (s->end_ns - s->wait_start_ns) / 1e6, s->batch);
	if (s->dev.device)
		fprintf(f, "    device %.3f ms busy of %.3f ms, launch to start %.3f ms\n",
			s->dev.busy_ns / 1e6, (s->dev.end_ns - s->dev.start_ns) / 1e6,
			s->dev.launch_ns && s->dev.start_ns >= s->dev.launch_ns
			    ? (s->dev.start_ns - s->dev.launch_ns) / 1e6
			    : 0.0);
	else if (s->sampled_out)
		fprintf(f, "    device times sampled out (eager kernels outside the sampling "
			   "windows)\n");
}

void output_step_json(FILE *f, const struct gpu_step *s)
{
	struct jsonw w;

	jsonw_begin(&w, f);
	jsonw_obj_begin(&w, "gpu_step");
	jsonw_u64(&w, "pid", s->pid);
	jsonw_u64(&w, "tid", s->tid);
	jsonw_str(&w, "kind", gpu_kind_name(s->kind));
	/* the rule that gave the kind, and how the work was launched (docs/gpu.md) */
	jsonw_str(&w, "kind_by", gpu_kind_by(s));
	jsonw_str(&w, "mode", gpu_mode_name(s->mode));
	jsonw_u64(&w, "start_ns", s->start_ns);
	jsonw_u64(&w, "wait_start_ns", s->wait_start_ns);
	jsonw_u64(&w, "end_ns", s->end_ns);
	jsonw_num(&w, "dur_ms", (s->end_ns - s->start_ns) / 1e6, 3);
	jsonw_u64(&w, "launches", s->launches);
	jsonw_u64(&w, "graph_launches", s->graph_launches);
	jsonw_u64(&w, "memcpys", s->memcpys);
	jsonw_u64(&w, "memcpys_dtoh", s->memcpys_dtoh);
	jsonw_u64(&w, "waits", s->waits);
	jsonw_u64(&w, "batch", s->batch);   /* requests whose tokens came from it (batch.h) */
	jsonw_u64(&w, "firsts", s->firsts); /* of them, with their first token */
	/* Device times where the CUPTI library reported all of the step's work, null otherwise
	 * (the figures above are the host's; times says why). */
	jsonw_str(&w, "times", gpu_step_times(s));
	if (s->dev.device) {
		jsonw_u64(&w, "device_start_ns", s->dev.start_ns);
		jsonw_u64(&w, "device_end_ns", s->dev.end_ns);
		jsonw_u64(&w, "gpu_busy_ns", s->dev.busy_ns);
		jsonw_bool(&w, "gpu_busy_approx", s->dev.approx);
		if (s->dev.launch_ns && s->dev.start_ns >= s->dev.launch_ns)
			jsonw_u64(&w, "launch_delay_ns", s->dev.start_ns - s->dev.launch_ns);
		else
			jsonw_null(&w, "launch_delay_ns");
		if (s->dev.launched)
			jsonw_u64(&w, "mean_launch_delay_ns", s->dev.delay_ns / s->dev.launched);
		else
			jsonw_null(&w, "mean_launch_delay_ns");
		jsonw_u64(&w, "device_runs", s->dev.runs);
		jsonw_u64(&w, "device_kernels", s->dev.kernels);
		jsonw_u64(&w, "device_graphs", s->dev.graphs);
		jsonw_u64(&w, "device_memcpys", s->dev.memcpys);
	} else {
		static const char *const none[] = { "device_start_ns", "device_end_ns",
						    "gpu_busy_ns", "launch_delay_ns" };

		for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
			jsonw_null(&w, none[i]);
	}
	jsonw_obj_end(&w);
	jsonw_end(&w);
	fputc('\n', f);
}

static const char *call_name(uint32_t fn)
{
	switch (fn) {
	case TS_CUDA_LAUNCH:
		return "launch";
	case TS_CUDA_GRAPH_LAUNCH:
		return "graph_launch";
	case TS_CUDA_MEMCPY:
	case TS_CUDA_MEMCPY_DTOH:
		return "memcpy";
	default:
		return "?";
	}
}

void output_call_text(FILE *f, const struct ts_gpu_call_event *e)
{
	fprintf(f, "CUDA pid %u tid %u %.6f s %s%s\n", e->hdr.pid, e->hdr.tid, e->ts_ns / 1e9,
		call_name(e->fn),
		e->fn == TS_CUDA_MEMCPY_DTOH || (e->fn == TS_CUDA_MEMCPY && e->kind == 2) ? " dtoh"
											  : "");
}

void output_call_json(FILE *f, const struct ts_gpu_call_event *e)
{
	struct jsonw w;

	jsonw_begin(&w, f);
	jsonw_obj_begin(&w, "gpu_call");
	jsonw_u64(&w, "pid", e->hdr.pid);
	jsonw_u64(&w, "tid", e->hdr.tid);
	jsonw_u64(&w, "ts_ns", e->ts_ns);
	jsonw_str(&w, "call", call_name(e->fn));
	jsonw_bool(&w, "dtoh",
		   e->fn == TS_CUDA_MEMCPY_DTOH || (e->fn == TS_CUDA_MEMCPY && e->kind == 2));
	jsonw_obj_end(&w);
	jsonw_end(&w);
	fputc('\n', f);
}

static void lines_request(void *ctx, const struct request *r, const struct request_metrics *m,
			  const struct gpu_attribution *ga)
{
	struct lines *l = ctx;

	/* A health check's or a scrape's line among the requests' would only be in the way. */
	if (!l->o.json && !l->o.all_requests && !request_is_inference(r))
		return;
	if (l->o.json) {
		output_json(l->o.out, r, m, ga, l->o.tokens);
	} else {
		/* GPU steps seen by now (the pipeline's, held ones too: batch_attribute) */
		l->gpu |= ga->has_steps;
		if (l->header_done && l->gpu != l->header_gpu)
			fprintf(l->o.out, "--- GPU steps seen: the lines from here have the GPU "
					  "columns\n");
		if (!l->header_done || l->gpu != l->header_gpu)
			output_text_header(l->o.out, l->gpu);
		l->header_done = true;
		l->header_gpu = l->gpu;
		output_text(l->o.out, r, m, ga, l->gpu);
	}
	fflush(l->o.out);
}

static void lines_step(void *ctx, const struct gpu_step *s)
{
	struct lines *l = ctx;

	l->gpu = true;
	if (!l->o.gpu_steps)
		return;
	if (l->o.json)
		output_step_json(l->o.out, s);
	else
		output_step_text(l->o.out, s);
}

static void lines_call(void *ctx, const struct ts_gpu_call_event *e)
{
	struct lines *l = ctx;

	if (!l->o.gpu_calls)
		return;
	if (l->o.json)
		output_call_json(l->o.out, e);
	else
		output_call_text(l->o.out, e);
}

void lines_init(struct lines *l, const struct lines_opts *o)
{
	memset(l, 0, sizeof(*l));
	l->o = *o;
}

struct sink lines_sink(struct lines *l)
{
	return (struct sink){ .name = "lines",
			      .ctx = l,
			      .clients = true,
			      .others = true, /* JSON keeps every request, with its kind */
			      .request = lines_request,
			      .gpu_step = lines_step,
			      .gpu_call = lines_call };
}
