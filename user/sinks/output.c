// SPDX-License-Identifier: MIT
#include <math.h>
#include <string.h>

#include "lib/escape.h"
#include "lib/jsonw.h"
#include "sinks/output.h"

static void ms_or_null(struct jsonw *w, const char *key, int64_t ns)
{
	if (ns < 0)
		jsonw_null(w, key);
	else
		jsonw_num(w, key, ns / 1e6, 3);
}

static void i64_or_null(struct jsonw *w, const char *key, int64_t v)
{
	if (v < 0)
		jsonw_null(w, key);
	else
		jsonw_i64(w, key, v);
}

static const char *request_format(const struct request *r)
{
	if (!r->streamed)
		return r->format == FMT_UNKNOWN ? "none" : frame_format_name(r->format);
	return frame_format_name(r->format);
}

void output_json(FILE *f, const struct request *r, const struct request_metrics *m,
		 const struct gpu_attribution *ga, bool tokens)
{
	struct jsonw w;

	jsonw_begin(&w, f);
	jsonw_u64(&w, "pid", r->pid);
	jsonw_str(&w, "conn", r->conn);
	jsonw_str(&w, "role", r->client ? "client" : "server");
	if (r->container[0])
		jsonw_str(&w, "container", r->container);
	if (r->tls)
		jsonw_bool(&w, "tls", true);
	if (r->h2) {
		jsonw_bool(&w, "h2", true);
		jsonw_u64(&w, "h2_stream", r->stream);
	}
	jsonw_u64(&w, "seq", r->seq);
	jsonw_str(&w, "method", r->method);
	jsonw_str(&w, "path", r->path);
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
	jsonw_u64(&w, "arrival_ns", r->arrival_ns);
	if (m->socket_wait_ns >= 0)
		jsonw_u64(&w, "received_ns", r->received_ns);
	else
		jsonw_null(&w, "received_ns");
	ms_or_null(&w, "socket_wait_ms", m->socket_wait_ns);
	if (r->ntokens)
		jsonw_u64(&w, "first_token_ns", r->first_token_ns);
	else
		jsonw_null(&w, "first_token_ns");
	jsonw_u64(&w, "end_ns", r->end_ns);
	ms_or_null(&w, "ttft_ms", m->ttft_ns);
	/* The same TTFT under each tool's definition (docs/output.md "TTFT definitions"). */
	ms_or_null(&w, "ttft_first_byte_ms", m->ttft_byte_ns);
	ms_or_null(&w, "ttft_first_chunk_ms", m->ttft_chunk_ns);
	ms_or_null(&w, "ttft_first_content_ms", m->ttft_text_ns);
	ms_or_null(&w, "ttft_first_output_ms", m->ttft_ns);
	ms_or_null(&w, "e2e_ms", m->e2e_ns);
	ms_or_null(&w, "tpot_ms", m->tpot_ns);
	if (m->itl_p50_ns < 0) {
		jsonw_null(&w, "itl_ms");
	} else {
		jsonw_obj_begin(&w, "itl_ms");
		ms_or_null(&w, "p50", m->itl_p50_ns);
		ms_or_null(&w, "p99", m->itl_p99_ns);
		ms_or_null(&w, "max", m->itl_max_ns);
		jsonw_obj_end(&w);
	}
	jsonw_i64(&w, "tokens", m->tokens);
	/* A gRPC message is one chunk of output: without the schema, tokens are not known. */
	jsonw_str(&w, "tokens_from",
		  m->tokens_from_usage	  ? "usage"
		  : r->format == FMT_GRPC ? "messages"
					  : "frames");
	jsonw_u64(&w, "frames", r->ntokens);
	jsonw_u64(&w, "all_frames", r->frames);
	if (isnan(m->tokens_per_chunk_mean)) {
		jsonw_null(&w, "tokens_per_chunk");
	} else {
		jsonw_obj_begin(&w, "tokens_per_chunk");
		jsonw_num(&w, "mean", m->tokens_per_chunk_mean, 2);
		i64_or_null(&w, "p50", m->tokens_per_chunk_p50);
		i64_or_null(&w, "max", m->tokens_per_chunk_max);
		jsonw_obj_end(&w);
	}
	jsonw_i64(&w, "prompt_bytes", r->prompt_bytes < 0 ? 0 : r->prompt_bytes);
	i64_or_null(&w, "prompt_tokens", r->prompt_tokens);
	i64_or_null(&w, "cached_tokens", r->cached_tokens);
	i64_or_null(&w, "reasoning_tokens", r->reasoning_tokens);
	i64_or_null(&w, "max_tokens", r->info.max_tokens);
	jsonw_num(&w, "tok_per_s", m->tok_per_s, 2);
	jsonw_u64(&w, "lost_bytes", r->lost_bytes);
	jsonw_u64(&w, "dropped_frames", r->dropped_frames);
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
	ms_or_null(&w, "queue_ms", ga->queue_ns);
	ms_or_null(&w, "prefill_ms", ga->prefill_ns);
	ms_or_null(&w, "decode_ms", ga->decode_ns);
	ms_or_null(&w, "gpu_ms", ga->gpu_ns);
	ms_or_null(&w, "host_ms", ga->host_ns);
	if (ga->source && !strcmp(ga->source, "cupti")) {
		ms_or_null(&w, "prefill_gpu_ms", ga->prefill_gpu_ns);
		ms_or_null(&w, "decode_gpu_ms", ga->decode_gpu_ns);
	} else {
		jsonw_null(&w, "prefill_gpu_ms");
		jsonw_null(&w, "decode_gpu_ms");
	}
	/* The decode steps its tokens came from and the mean batch they had (batch.h). */
	if (ga->has_steps)
		jsonw_u64(&w, "steps", ga->steps);
	else
		jsonw_null(&w, "steps");
	if (ga->batch_steps)
		jsonw_num(&w, "batch_mean", ga->batch_mean, 2);
	else
		jsonw_null(&w, "batch_mean");
	/* Out of the batch and recomputed (batch.h): known where its steps are. */
	if (ga->has_steps) {
		jsonw_u64(&w, "preemptions", ga->preemptions);
		jsonw_num(&w, "preempted_ms", ga->preempted_ns / 1e6, 3);
	} else {
		jsonw_null(&w, "preemptions");
		jsonw_null(&w, "preempted_ms");
	}
	if (ga->source)
		jsonw_str(&w, "attribution", ga->source);
	else
		jsonw_null(&w, "attribution");
	jsonw_str(&w, "attribution_how", ga->how);
	if (tokens) {
		jsonw_arr_begin(&w, "token_ns");
		for (uint32_t i = 0; i < r->ntokens; i++)
			jsonw_u64(&w, NULL, r->token_ns[i]);
		jsonw_arr_end(&w);
	}
	jsonw_end(&w);
	fputc('\n', f);
}

void output_text_header(FILE *f)
{
	fprintf(f, "%-7s %-22s %-6s %-12s %4s %8s %7s %7s %5s %7s %8s %7s %7s %8s %5s %5s\n", "PID",
		"PEER#CONN", "METHOD", "OUTCOME", "HTTP", "TTFT(ms)", "ITL50", "ITL99", "TOK",
		"TOK/S", "E2E(ms)", "QUEUE", "PREFILL", "DECODE", "STEPS", "BATCH");
}

static void text_ms(FILE *f, int width, int64_t ns)
{
	if (ns < 0)
		fprintf(f, " %*s", width, "-");
	else
		fprintf(f, " %*.1f", width, ns / 1e6);
}

void output_text(FILE *f, const struct request *r, const struct request_metrics *m,
		 const struct gpu_attribution *ga)
{
	/* A server's client (its address after "<-"), or "->" and the upstream a client called. */
	const char *peer = r->client ? strstr(r->conn, "->") : strstr(r->conn, "<-");

	char peer_col[ESCAPE_COL_BYTES(22)], method_col[ESCAPE_COL_BYTES(6)];

	if (peer && !r->client)
		peer += 2;
	escape_text_col(peer_col, sizeof(peer_col), peer ? peer : r->conn, 22, true);
	escape_text_col(method_col, sizeof(method_col), r->method, 6, true);
	fprintf(f, "%-7u %s %s %-12s %4d", r->pid, peer_col, method_col, outcome_name(r->outcome),
		r->status);
	text_ms(f, 8, m->ttft_ns);
	/* Frames written together are 0 apart: 0.0w says at least half the gaps were such. */
	if (m->itl_p50_ns == 0)
		fprintf(f, " %7s", "0.0w");
	else
		text_ms(f, 7, m->itl_p50_ns);
	text_ms(f, 7, m->itl_p99_ns);
	fprintf(f, " %5lld", (long long)m->tokens);
	if (m->tok_per_s == m->tok_per_s)
		fprintf(f, " %7.1f", m->tok_per_s);
	else
		fprintf(f, " %7s", "-");
	text_ms(f, 8, m->e2e_ns);
	text_ms(f, 7, ga->queue_ns);
	text_ms(f, 7, ga->prefill_ns);
	text_ms(f, 8, ga->decode_ns);
	if (ga->has_steps)
		fprintf(f, " %5u", ga->steps);
	else
		fprintf(f, " %5s", "-");
	if (ga->batch_steps)
		fprintf(f, " %5.1f", ga->batch_mean);
	else
		fprintf(f, " %5s", "-");
	fputc('\n', f);
}

void output_step_text(FILE *f, const struct gpu_step *s)
{
	fprintf(f,
		"GPU pid %u tid %u step %.6f s dur %.3f ms %-7s launches %u graphs %u memcpy %u "
		"(dtoh %u) wait %.3f ms batch %u\n",
		s->pid, s->tid, s->start_ns / 1e9, (s->end_ns - s->start_ns) / 1e6,
		gpu_kind_name(s->kind), s->launches, s->graph_launches, s->memcpys, s->memcpys_dtoh,
		(s->end_ns - s->wait_start_ns) / 1e6, s->batch);
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
	jsonw_u64(&w, "start_ns", s->start_ns);
	jsonw_u64(&w, "wait_start_ns", s->wait_start_ns);
	jsonw_u64(&w, "end_ns", s->end_ns);
	jsonw_num(&w, "dur_ms", (s->end_ns - s->start_ns) / 1e6, 3);
	jsonw_u64(&w, "launches", s->launches);
	jsonw_u64(&w, "graph_launches", s->graph_launches);
	jsonw_u64(&w, "memcpys", s->memcpys);
	jsonw_u64(&w, "memcpys_dtoh", s->memcpys_dtoh);
	jsonw_u64(&w, "waits", s->waits);
	jsonw_u64(&w, "batch", s->batch); /* requests whose tokens came from it (batch.h) */
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

	if (l->o.json) {
		output_json(l->o.out, r, m, ga, l->o.tokens);
	} else {
		if (!l->header_done)
			output_text_header(l->o.out);
		l->header_done = true;
		output_text(l->o.out, r, m, ga);
	}
	fflush(l->o.out);
}

static void lines_step(void *ctx, const struct gpu_step *s)
{
	struct lines *l = ctx;

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
			      .request = lines_request,
			      .gpu_step = lines_step,
			      .gpu_call = lines_call };
}
