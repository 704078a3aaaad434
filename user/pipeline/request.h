/* SPDX-License-Identifier: MIT */
/*
 * One HTTP request/response exchange as the tracer saw it, and the numbers derived from it,
 * exactly as docs/output.md's Definitions define them. Built by the protocol modules (h1conn.c,
 * h2conn.c), handed to the sinks as a value, then freed. What the pipeline keeps with it besides
 * (its proxy pair, the GPU steps it rode) is request_track.h's, out of the sinks' reach.
 */
#ifndef TS_REQUEST_H
#define TS_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/frame_format.h"
#include "pipeline/labels.h"
#include "pipeline/req_info.h"
#include "pipeline/slo.h"
#include "pipeline/trace_ctx.h"
#include "pipeline/workload.h"

struct sse_frame;

/* Long enough for an IPv6 address's text (INET6_ADDRSTRLEN). */
#define REQUEST_ADDR_MAX 46

/* The connection's two ends as values (conn.c's, from the kernel's record): local is the traced
 * process's side, peer the other; the server is local for a served request, the peer for one
 * the process made as a client. inet false: a Unix socket, or ends never seen. */
struct request_ends {
	bool inet;
	char local_addr[REQUEST_ADDR_MAX], peer_addr[REQUEST_ADDR_MAX];
	uint16_t local_port, peer_port;
};

/* The other side of a proxied exchange (proxy.h): a served request's upstream request, or an
 * upstream request's served one, as far as it was seen. */
struct request_peer {
	bool set;
	bool done; /* it finished: its times are final */
	char conn[112];
	uint64_t conn_id;
	uint32_t seq;
	uint64_t arrival_ns, first_token_ns, end_ns; /* first_token_ns 0: none (yet) */
	struct trace_parent tp;			     /* its traceparent, when valid */
};

enum outcome {
	OUTCOME_OK,
	OUTCOME_HTTP_ERROR,   /* status >= 400 */
	OUTCOME_STREAM_ERROR, /* an error frame */
	OUTCOME_ABORTED,      /* closed by either side before the response ended */
	OUTCOME_LOST,	      /* the tracer lost bytes of it */
	OUTCOME_MAX,
};

/* The protocol a request came in. */
enum req_proto {
	PROTO_HTTP1,
	PROTO_HTTP2,
};

struct request {
	uint32_t pid;
	uint64_t conn_id;
	uint32_t seq;		  /* index of the request on its connection */
	char conn[112];		  /* "local<-peer#id" */
	struct request_ends ends; /* the connection's ends, as values */
	struct workload workload; /* where its process runs (pipeline_label_process) */
	bool tls;		  /* came over TLS: its bytes are the TLS library's plaintext */
	enum req_proto proto;	  /* HTTP/1.1, or an HTTP/2 stream (stream is its id) */
	bool h2c_upgrade; /* an HTTP/1.1 request that asked to go on in HTTP/2 (Upgrade: h2c) */
	uint32_t stream;
	/* The traced process made it (a client of an upstream server): its times are the
	 * process's writes of the request and reads of the response, and conn is local->peer. */
	bool client;
	/* Joined mid-response: tracing began while the server was streaming it (attached then, or
	 * found by --all from this very stream). Its request and first tokens were never seen:
	 * method and path are "", arrival_ns is where its response was first seen, and TTFT, E2E
	 * and TPOT are unknown (request_metrics); its tokens are those seen, or usage's count. */
	bool joined;
	char method[16];
	char path[256];
	struct req_info info;	     /* model, stream, max_tokens, join keys from the body */
	struct trace_ctx trace;	     /* traceparent, tracestate, x-request-id of its head */
	struct slo_head slo_head;    /* the objectives its head states (llm-d's headers) */
	struct req_labels labels;    /* its --label values, from its head and body */
	int64_t prompt_bytes;	     /* request body length */
	uint64_t request_uncaptured; /* body bytes not captured (model may be unknown) */

	int status;    /* 0 until the response head */
	bool streamed; /* SSE or NDJSON response body */
	enum frame_format format;
	uint64_t arrival_ns, first_token_ns, end_ns;
	/* When the request's first bytes reached the server's socket (the kernel's sk_data_ready):
	 * arrival_ns minus this is the upload plus the wait for the server to read. 0: unknown. */
	uint64_t received_ns;
	uint64_t *token_ns; /* every content frame, in order */
	uint32_t ntokens;
	size_t token_cap;
	/* TTFT as other tools define it (docs/output.md "TTFT definitions"); 0: not seen. The first
	 * response body byte, the first message as `vllm bench serve` counts one (frame.h's
	 * chunk), the first frame with answer text (frame.h's text). */
	uint64_t first_byte_ns, first_chunk_ns, first_text_ns;
	/* Tokens in each content frame, where every frame up to it stated a running
	 * completion_tokens (vLLM's continuous usage stats); chunk_tokens_ok is false once a
	 * content frame came without one. */
	uint32_t *chunk_tokens;
	uint32_t nchunk_tokens;
	size_t chunk_tokens_cap;
	bool chunk_tokens_ok;
	uint32_t frames;					 /* every frame, content or not */
	int64_t prompt_tokens, completion_tokens, cached_tokens; /* -1: not reported */
	int64_t reasoning_tokens; /* of completion_tokens; -1: not reported */
	/* The model came from the stream (a Responses stream's first events), after the request
	 * began: sinks that counted it at its start counted it without a model. */
	bool model_from_stream;
	uint64_t lost_bytes; /* response bytes (or request head bytes) the tracer lost */
	/* stream frames too large to read (SSE_FRAME_MAX, or the memory cap): tokens unknown */
	uint64_t dropped_frames;
	bool error_frame, done_frame, unknown_frames;
	/* The first error frame's reason (frame.h's), "" when it named none. */
	char error_reason[FRAME_REASON_MAX];
	bool peer_gone;	  /* the client hung up before the stream ended */
	uint64_t gone_ns; /* when that was seen (a response whose last write began before it
			   * ended in time: TLS plaintext comes at the call's return, after) */
	/* What the server did after that (docs/output.md, "Abandoned requests"): the response
	 * body bytes and frames of the writes it began later, its writes that failed (EPIPE,
	 * ECONNRESET; on HTTP/2 every open stream's), and its last write attempt (0: none). */
	uint64_t gone_bytes;
	uint32_t gone_frames, gone_failed_writes;
	uint64_t gone_last_write_ns;
	/* The kernel lost records while it was open: if it never ends, some were its own. */
	bool maybe_lost;
	/* gRPC: the trailers' grpc-status, -1 when none came (or not gRPC). Each message is a
	 * frame; without the schema a message is one chunk of output, however many tokens. */
	int grpc_status;
	enum outcome outcome;
	/* The other side of a proxied exchange (proxy.h): its times, as far as they were seen. */
	struct request_peer peer;
};

/* What is known of a request's prefix-cache hits (prefix.h guesses them). */
enum cache_guess {
	CACHE_REPORTED, /* the server said its cached_tokens: no guess */
	CACHE_LIKELY,	/* likely read from the cache */
	CACHE_COLD,	/* as fast as this server's cold requests, no faster */
	CACHE_UNKNOWN,
	CACHE_GUESSES,
};

const char *cache_guess_name(enum cache_guess g); /* "reported", "likely_cached", ... */

/* Derived per-request numbers; *_ns < 0 means "not applicable" (printed as null). */
struct request_metrics {
	int64_t ttft_ns, e2e_ns, tpot_ns;
	int64_t socket_wait_ns; /* received_ns to arrival_ns; -1: the arrival is unknown */
	int64_t itl_p50_ns, itl_p99_ns, itl_max_ns;
	int64_t tokens;
	bool tokens_from_usage;
	/* A served request paired with its upstream request (proxy.h): the upstream's TTFT as the
	 * proxy saw it, and the rest of this request's TTFT, the proxy's own part (forwarding the
	 * request, relaying the first token). -1: not paired, or no first token on either side. */
	int64_t upstream_ttft_ns, proxy_ttft_ns;
	double tok_per_s; /* tokens / E2E; NaN when not applicable */
	/* TTFT to the first response body byte, the first chunk, the first answer text; -1:
	 * none. ttft_ns is the first output (text, reasoning or a tool call). */
	int64_t ttft_byte_ns, ttft_chunk_ns, ttft_text_ns;
	/* Where usage says more tokens than content frames and the end-of-sequence token some
	 * servers count but never stream: tokens per content frame, their mean (NaN otherwise),
	 * and median and maximum where the frames stated running counts (-1 otherwise). */
	double tokens_per_chunk_mean;
	int64_t tokens_per_chunk_p50, tokens_per_chunk_max;
	/* Left by its client before the end (outcome aborted, peer_gone): when, from its arrival,
	 * and how long the server went on (to its last write attempt after that; 0 when it made
	 * none); -1 otherwise. */
	int64_t client_gone_ns, went_on_ns;
	/* Its prefix-cache hit when the server did not report cached_tokens, guessed from its
	 * prefill time (prefix.h); CACHE_REPORTED when it did. request_metrics sets reported or
	 * unknown, the pipeline guesses. */
	enum cache_guess cache_guess;
	/* Its objectives and their verdicts (slo.h): the pipeline's --slo rules and its head's;
	 * slo.any false when it had none (request_metrics leaves it so). */
	struct slo_verdict slo;
};

const char *outcome_name(enum outcome o);

/*
 * Inference or not (docs/output.md, "Inference and other requests"): a request is inference
 * when its body carries a model or a prompt (req_info.prompt), or its response was a stream
 * or a completion or response object (frames of a known format, or token counts), or it went
 * to an inference API's path (a bad body's 400 there is a failed inference request); health
 * checks, metric scrapes, /v1/models, docs and the rest are other requests.
 */
bool request_is_inference(const struct request *r);
/* Whether the request's path, before any query, ends with suffix. */
bool request_path_ends(const struct request *r, const char *suffix);
/* The GenAI operation ("chat", "text_completion", "embeddings") of the inference API whose path
 * the request went to, by how the path ends; NULL for any other path. */
const char *request_path_operation(const struct request *r);
/* An other request's kind, a bounded set for labels: health, metrics, models, docs, other. */
const char *request_other_kind(const struct request *r);
/* A served request whose paired upstream request (proxy.h) carries the very traceparent it came
 * with (a proxy that forwards the header unchanged, as nginx does): the upstream call's span
 * takes that parent-id as its own id (the upstream server names it as parent), so the served
 * span cannot also name it as its parent. docs/otlp.md, "Trace context". */
bool request_trace_forwarded(const struct request *r);
/* A request with its track (request_track.c): made with every count unknown, freed with what
 * it holds. */
struct request *request_new(uint32_t pid, uint64_t conn_id, uint32_t seq, const char *conn);
void request_free(struct request *r);
/* A request's own fields set as request_new sets them, and its arrays freed: the value's part,
 * for request_track.c. */
void request_init(struct request *r, uint32_t pid, uint64_t conn_id, uint32_t seq,
		  const char *conn);
void request_release(struct request *r);
/* Appends a content frame time; -ENOMEM when the list cannot grow (the frame is still counted). */
int request_add_token(struct request *r, uint64_t ts);
/* A gRPC message: one chunk of output, which is answer text as far as the tracer can tell. */
void request_add_message(struct request *r, uint64_t ts);
/* n response body bytes came in a write that began at ts (the first is TTFT's first byte). */
void request_body_bytes(struct request *r, size_t n, uint64_t ts);
/* A write of the response that began at ts failed: the peer is gone (EPIPE, ECONNRESET). */
void request_write_failed(struct request *r, uint64_t ts);
/* Whether the client left before the response ended (outcome aborted, its hang-up seen). */
bool request_abandoned(const struct request *r);
void request_metrics(const struct request *r, struct request_metrics *m);
/* A stream frame of r's response, classified: counts, content time, end, errors, usage. */
void request_add_frame(struct request *r, const struct sse_frame *f, uint64_t ts);
/* A non-streamed JSON body, classified like one frame: it says `usage` and errors. */
void request_read_body(struct request *r, const uint8_t *body, size_t len);
/* The other side hung up (or reset the stream), seen at ts: unless its last frame came, the
 * exchange was abandoned; the first hang-up is the one kept. */
void request_peer_gone(struct request *r, uint64_t ts);
/* The exchange is over at end_ns: complete (the response ended) or not (abandoned, lost);
 * sets end_ns and outcome. A complete one ends at end_ns: the body's end, not an earlier
 * [DONE]. A stream that sent its last frame is complete even if the terminator never came,
 * and keeps that frame's time as its end. */
void request_close(struct request *r, uint64_t end_ns, bool complete);
/* Sorted copy of the ITL gaps into out (ntokens - 1 values); returns the count. */
uint32_t request_itl_sorted(const struct request *r, uint64_t *out);

#endif
