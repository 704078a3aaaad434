// SPDX-License-Identifier: MIT
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/grow.h"
#include "lib/hist.h"
#include "lib/utf8.h"
#include "pipeline/frame.h"
#include "pipeline/request.h"

static const char *const outcome_names[OUTCOME_MAX] = {
	[OUTCOME_OK] = "ok",
	[OUTCOME_HTTP_ERROR] = "http_error",
	[OUTCOME_STREAM_ERROR] = "stream_error",
	[OUTCOME_ABORTED] = "aborted",
	[OUTCOME_LOST] = "lost",
};

const char *outcome_name(enum outcome o)
{
	return o < OUTCOME_MAX ? outcome_names[o] : "?";
}

bool request_trace_forwarded(const struct request *r)
{
	return !r->client && r->peer.set && tracectx_same(&r->trace.tp, &r->peer.tp);
}

void request_init(struct request *r, uint32_t pid, uint64_t conn_id, uint32_t seq, const char *conn)
{
	r->pid = pid;
	r->conn_id = conn_id;
	r->seq = seq;
	snprintf(r->conn, sizeof(r->conn), "%s", conn);
	reqbody_info_init(&r->info);
	r->prompt_bytes = -1;
	r->prompt_tokens = r->completion_tokens = r->cached_tokens = -1;
	r->reasoning_tokens = -1;
	r->grpc_status = -1;
	r->chunk_tokens_ok = true;
}

void request_release(struct request *r)
{
	free(r->token_ns);
	free(r->chunk_tokens);
	r->token_ns = NULL;
	r->chunk_tokens = NULL;
}

int request_add_token(struct request *r, uint64_t ts)
{
	uint64_t *n = grow(r->token_ns, &r->token_cap, r->ntokens + 1, sizeof(*n), 64);

	if (!n)
		return -ENOMEM;
	r->token_ns = n;
	/* Frames come in stream order: a time before the previous frame's is a clock read out of
	 * order (another CPU, a damaged record), and a gap is never negative. */
	if (r->ntokens && ts < r->token_ns[r->ntokens - 1])
		ts = r->token_ns[r->ntokens - 1];
	if (!r->ntokens)
		r->first_token_ns = ts;
	r->token_ns[r->ntokens++] = ts;
	return 0;
}

void request_add_message(struct request *r, uint64_t ts)
{
	request_add_token(r, ts);
	if (!r->first_chunk_ns)
		r->first_chunk_ns = ts;
	if (!r->first_text_ns)
		r->first_text_ns = ts;
}

/* Something was written for r at ts: after its client left, the server went on to here. */
static void request_wrote_after_gone(struct request *r, uint64_t ts)
{
	if (r->peer_gone && ts >= r->gone_ns && ts > r->gone_last_write_ns)
		r->gone_last_write_ns = ts;
}

void request_body_bytes(struct request *r, size_t n, uint64_t ts)
{
	if (!r->first_byte_ns)
		r->first_byte_ns = ts;
	if (r->peer_gone && ts >= r->gone_ns) {
		r->gone_bytes += n;
		request_wrote_after_gone(r, ts);
	}
}

void request_write_failed(struct request *r, uint64_t ts)
{
	if (!r->peer_gone)
		return;
	r->gone_failed_writes++;
	request_wrote_after_gone(r, ts);
}

bool request_abandoned(const struct request *r)
{
	return r->outcome == OUTCOME_ABORTED && r->peer_gone;
}

/*
 * A content frame's tokens from the running completion_tokens it states (vLLM's continuous
 * usage stats: every frame says the count so far). A frame that states none, a count that went
 * back or one that cannot be a frame's, ends the per-frame counts for the request: its median and
 * maximum are not known.
 */
static void request_chunk_tokens(struct request *r, const struct frame_info *fi)
{
	uint32_t *n;
	/* The earlier frames' running count: this frame's usage is taken after (-1: none). */
	int64_t prev = r->completion_tokens > 0 ? r->completion_tokens : 0;

	if (!r->chunk_tokens_ok)
		return;
	if (fi->completion_tokens < 0 || fi->completion_tokens < prev ||
	    fi->completion_tokens - prev > UINT32_MAX) {
		r->chunk_tokens_ok = false;
		return;
	}
	n = grow(r->chunk_tokens, &r->chunk_tokens_cap, r->nchunk_tokens + 1, sizeof(*n), 64);
	if (!n) {
		r->chunk_tokens_ok = false;
		return;
	}
	r->chunk_tokens = n;
	n[r->nchunk_tokens++] = (uint32_t)(fi->completion_tokens - prev);
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

uint32_t request_itl_sorted(const struct request *r, uint64_t *out)
{
	uint32_t n = 0;

	for (uint32_t i = 1; i < r->ntokens; i++)
		out[n++] = r->token_ns[i] - r->token_ns[i - 1];
	qsort(out, n, sizeof(*out), u64_cmp);
	return n;
}

/* Nearest-rank percentile of a sorted array. */
static uint64_t sorted_quantile(const uint64_t *v, uint32_t n, double q)
{
	return v[quantile_rank(q, n) - 1];
}

/* t - arrival, for a time t of the response; -1 when t or the arrival is unknown. */
static int64_t request_since_arrival(const struct request *r, uint64_t t)
{
	return t && r->arrival_ns && t >= r->arrival_ns ? (int64_t)(t - r->arrival_ns) : -1;
}

static void request_tokens_per_chunk(const struct request *r, struct request_metrics *m)
{
	uint32_t *v;

	m->tokens_per_chunk_mean = NAN;
	m->tokens_per_chunk_p50 = m->tokens_per_chunk_max = -1;
	/* One token more than frames is the end-of-sequence token that servers such as vLLM
	 * count in usage and never stream: frames are still tokens. */
	/* Joined mid-response, usage counts frames that were never seen. */
	if (!m->tokens_from_usage || !r->ntokens || m->tokens <= (int64_t)r->ntokens + 1 ||
	    r->joined)
		return;
	m->tokens_per_chunk_mean = (double)m->tokens / r->ntokens;
	if (!r->chunk_tokens_ok || r->nchunk_tokens != r->ntokens)
		return;
	v = malloc(r->nchunk_tokens * sizeof(*v));
	if (!v)
		return;
	memcpy(v, r->chunk_tokens, r->nchunk_tokens * sizeof(*v));
	qsort(v, r->nchunk_tokens, sizeof(*v), u32_cmp);
	m->tokens_per_chunk_p50 = v[quantile_rank(0.50, r->nchunk_tokens) - 1];
	m->tokens_per_chunk_max = v[r->nchunk_tokens - 1];
	free(v);
}

void request_metrics(const struct request *r, struct request_metrics *m)
{
	memset(&m->slo, 0, sizeof(m->slo));
	m->ttft_ns = r->ntokens ? request_since_arrival(r, r->first_token_ns) : -1;
	m->e2e_ns =
	    r->end_ns >= r->arrival_ns && r->arrival_ns ? (int64_t)(r->end_ns - r->arrival_ns) : -1;
	m->socket_wait_ns = r->received_ns && r->received_ns <= r->arrival_ns
				? (int64_t)(r->arrival_ns - r->received_ns)
				: -1;
	m->tokens_from_usage = r->completion_tokens >= 0;
	m->tokens = m->tokens_from_usage ? r->completion_tokens : r->ntokens;
	m->itl_p50_ns = m->itl_p99_ns = m->itl_max_ns = -1;
	m->tpot_ns = -1;
	if (r->ntokens >= 2) {
		uint64_t *gaps = malloc((r->ntokens - 1) * sizeof(*gaps));

		if (gaps) {
			uint32_t n = request_itl_sorted(r, gaps);

			m->itl_p50_ns = sorted_quantile(gaps, n, 0.50);
			m->itl_p99_ns = sorted_quantile(gaps, n, 0.99);
			m->itl_max_ns = gaps[n - 1];
			free(gaps);
		}
	}
	if (r->ntokens >= 1 && m->tokens >= 2)
		m->tpot_ns =
		    (int64_t)(r->token_ns[r->ntokens - 1] - r->first_token_ns) / (m->tokens - 1);
	m->ttft_byte_ns = request_since_arrival(r, r->first_byte_ns);
	m->ttft_chunk_ns = request_since_arrival(r, r->first_chunk_ns);
	m->ttft_text_ns = request_since_arrival(r, r->first_text_ns);
	/* Joined mid-response: what needs the request's start or its first token is unknown. */
	if (r->joined)
		m->ttft_ns = m->e2e_ns = m->tpot_ns = m->ttft_byte_ns = m->ttft_chunk_ns =
		    m->ttft_text_ns = m->socket_wait_ns = -1;
	m->tok_per_s = m->e2e_ns > 0 && m->tokens > 0 ? m->tokens / (m->e2e_ns / 1e9) : NAN;
	request_tokens_per_chunk(r, m);
	m->cache_guess = r->cached_tokens >= 0 ? CACHE_REPORTED : CACHE_UNKNOWN;
	m->client_gone_ns = m->went_on_ns = -1;
	if (request_abandoned(r) && r->gone_ns >= r->arrival_ns && !r->joined) {
		m->client_gone_ns = (int64_t)(r->gone_ns - r->arrival_ns);
		m->went_on_ns =
		    r->gone_last_write_ns ? (int64_t)(r->gone_last_write_ns - r->gone_ns) : 0;
	}
	m->upstream_ttft_ns = m->proxy_ttft_ns = -1;
	if (!r->client && r->peer.set && r->peer.first_token_ns &&
	    r->peer.first_token_ns >= r->peer.arrival_ns) {
		m->upstream_ttft_ns = (int64_t)(r->peer.first_token_ns - r->peer.arrival_ns);
		/* A first token relayed before it came from upstream: not this pair's. */
		if (m->ttft_ns >= m->upstream_ttft_ns)
			m->proxy_ttft_ns = m->ttft_ns - m->upstream_ttft_ns;
	}
}

/* The token counts a frame states: a later one supersedes an earlier one (frame.h). */
static void request_take_usage(struct request *r, const struct frame_info *fi)
{
	if (fi->prompt_tokens >= 0)
		r->prompt_tokens = fi->prompt_tokens;
	if (fi->completion_tokens >= 0)
		r->completion_tokens = fi->completion_tokens;
	if (fi->cached_tokens >= 0)
		r->cached_tokens = fi->cached_tokens;
	if (fi->reasoning_tokens >= 0)
		r->reasoning_tokens = fi->reasoning_tokens;
}

void request_add_frame(struct request *r, const struct sse_frame *f, uint64_t ts)
{
	struct frame_info fi;

	frame_classify(f, &fi);
	r->frames++;
	if (r->peer_gone && ts >= r->gone_ns)
		r->gone_frames++;
	if (fi.format != FMT_UNKNOWN && r->format == FMT_UNKNOWN)
		r->format = fi.format;
	if (fi.invalid)
		r->unknown_frames = true;
	if (fi.content) {
		request_add_token(r, ts);
		request_chunk_tokens(r, &fi);
	}
	if (fi.chunk && !r->first_chunk_ns)
		r->first_chunk_ns = ts;
	if (fi.text && !r->first_text_ns)
		r->first_text_ns = ts;
	if (fi.error && !r->error_frame)
		snprintf(r->error_reason, sizeof(r->error_reason), "%s", fi.reason);
	if (fi.error)
		r->error_frame = true;
	/* A body whose model was not seen (beyond the capture limit, or joined midway): the
	 * stream may name it. */
	if (fi.model[0] && !r->info.model[0]) {
		utf8_clean(r->info.model, sizeof(r->info.model), fi.model, strlen(fi.model));
		r->model_from_stream = true;
	}
	if (fi.done && !r->done_frame) {
		r->done_frame = true;
		r->end_ns = ts;
	}
	request_take_usage(r, &fi);
}

void request_read_body(struct request *r, const uint8_t *body, size_t len)
{
	struct sse_frame f = { .event = "" };
	struct frame_info fi;

	f.data = (const char *)body;
	f.data_len = len;
	frame_classify(&f, &fi);
	r->format = fi.format;
	request_take_usage(r, &fi);
}

void request_peer_gone(struct request *r, uint64_t ts)
{
	if (r->done_frame || r->peer_gone)
		return;
	r->peer_gone = true;
	r->gone_ns = ts;
}

static enum outcome request_outcome(const struct request *r, bool complete)
{
	if (r->status >= 400)
		return OUTCOME_HTTP_ERROR;
	if (r->lost_bytes || r->dropped_frames || (!complete && r->maybe_lost))
		return OUTCOME_LOST;
	if (r->error_frame)
		return OUTCOME_STREAM_ERROR;
	if (!complete || r->peer_gone)
		return OUTCOME_ABORTED;
	return OUTCOME_OK;
}

/* The latest time the request is known to have lived to: its arrival or a response event. */
static uint64_t request_latest_ns(const struct request *r)
{
	uint64_t t = r->arrival_ns;
	const uint64_t seen[] = { r->ntokens ? r->token_ns[r->ntokens - 1] : 0, r->first_byte_ns,
				  r->first_chunk_ns, r->first_text_ns };

	for (size_t i = 0; i < sizeof(seen) / sizeof(seen[0]); i++)
		if (seen[i] > t)
			t = seen[i];
	return t;
}

void request_close(struct request *r, uint64_t end_ns, bool complete)
{
	if (!complete && r->done_frame)
		complete = true;
	else
		r->end_ns = end_ns;
	if (!r->end_ns)
		r->end_ns = end_ns;
	/* It ended no earlier than what was seen of it: a close or loss whose record's time is
	 * earlier (read on another CPU, or a damaged record) would make E2E shorter than TTFT. */
	if (r->end_ns && r->end_ns < request_latest_ns(r))
		r->end_ns = request_latest_ns(r);
	/* Its last write began before the hang-up was seen: the response had ended. Records of
	 * TLS plaintext are made when the call returns, after its socket write, so the other
	 * side's close can be read (by another thread) before the record of the write it saw. */
	if (complete && r->peer_gone && r->gone_ns && r->end_ns <= r->gone_ns)
		r->peer_gone = false;
	r->outcome = request_outcome(r, complete);
	if (r->streamed && r->ntokens == 0 && r->frames && r->format == FMT_UNKNOWN)
		r->unknown_frames = true;
}

bool request_path_ends(const struct request *r, const char *suffix)
{
	size_t n = strcspn(r->path, "?"), l = strlen(suffix);

	return n >= l && !memcmp(r->path + n - l, suffix, l);
}

/* The paths of the inference APIs (OpenAI's, Anthropic's, TGI's, Ollama's) by how they end, in
 * the order they are tried (/chat/completions before /completions), and the GenAI operation
 * each serves. A request to one that failed before any of it was read (a 400 for a bad body)
 * is a failed inference request; an embeddings request is inference by its body alone. */
static const struct {
	const char *end;
	const char *operation;
	bool inference;
} endpoints[] = {
	{ "/chat/completions", "chat", true },
	{ "/messages", "chat", true },
	{ "/api/chat", "chat", true },
	/* OpenAI's Responses API: openai.api.type tells it from chat completions */
	{ "/responses", "chat", true },
	{ "/completions", "text_completion", true },
	{ "/generate", "text_completion", true },
	{ "/generate_stream", "text_completion", true },
	{ "/embeddings", "embeddings", false },
	{ "/api/embed", "embeddings", false },
};

static int endpoint_of(const struct request *r)
{
	for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++)
		if (request_path_ends(r, endpoints[i].end))
			return (int)i;
	return -1;
}

const char *request_path_operation(const struct request *r)
{
	int i = endpoint_of(r);

	return i < 0 ? NULL : endpoints[i].operation;
}

static bool inference_path(const struct request *r)
{
	int i = endpoint_of(r);

	return i >= 0 && endpoints[i].inference;
}

bool request_is_inference(const struct request *r)
{
	return r->info.model[0] || r->info.prompt || r->streamed || r->format != FMT_UNKNOWN ||
	       r->ntokens || r->completion_tokens >= 0 || r->prompt_tokens >= 0 ||
	       inference_path(r);
}

/* Whether the path (before any query) is one of the names, or ends with "/" and one. */
static bool path_is(const char *path, size_t n, const char *const *names, size_t nnames)
{
	for (size_t i = 0; i < nnames; i++) {
		size_t l = strlen(names[i]);

		if (n >= l && !memcmp(path + n - l, names[i], l) &&
		    (n == l || path[n - l - 1] == '/'))
			return true;
	}
	return false;
}

const char *request_other_kind(const struct request *r)
{
	static const char *const health[] = { "health", "healthz", "ready", "readyz",
					      "live",	"livez",   "ping",  "startup" };
	static const char *const metrics[] = { "metrics" };
	static const char *const models[] = { "models", "tags", "version" };
	static const char *const docs[] = { "docs", "openapi.json", "redoc", "favicon.ico" };
	size_t n = strcspn(r->path, "?");

	while (n > 1 && r->path[n - 1] == '/')
		n--;
#define IS(names) path_is(r->path, n, names, sizeof(names) / sizeof(names[0]))
	if (IS(health))
		return "health";
	if (IS(metrics))
		return "metrics";
	/* /v1/models and /v1/models/NAME; Ollama's /api/tags and /api/version */
	if (IS(models) || strstr(r->path, "/models/"))
		return "models";
	if (IS(docs))
		return "docs";
#undef IS
	return "other";
}

const char *cache_guess_name(enum cache_guess g)
{
	static const char *const names[CACHE_GUESSES] = {
		[CACHE_REPORTED] = "reported",
		[CACHE_LIKELY] = "likely_cached",
		[CACHE_COLD] = "cold",
		[CACHE_UNKNOWN] = "unknown",
	};

	return (unsigned)g < CACHE_GUESSES ? names[g] : "unknown";
}
