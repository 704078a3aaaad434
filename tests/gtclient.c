/* SPDX-License-Identifier: MIT */
/*
 * gtclient: the ground-truth client. It streams completions and records, on CLOCK_MONOTONIC
 * (the clock bpf_ktime_get_ns reads), when each request was sent and when each content frame
 * arrived, so the tracer's numbers can be checked against what a client really saw.
 *
 * One thread per connection, blocking sockets, TCP_NODELAY. The HTTP response is parsed here
 * (status, headers, chunked / Content-Length / close-delimited body) and the body is split
 * into SSE frames or NDJSON lines; every frame completed by one recv() gets the timestamp
 * taken right after that recv(), because that is the moment the bytes reached user space.
 *
 * With --h2 the requests go over HTTP/2 (libnghttp2's client session: cleartext with prior
 * knowledge, or TLS with ALPN h2), one stream after another on each connection; a frame's time
 * is still taken right after the recv() (or SSL_read) that brought its last byte, before the
 * bytes are handed to the session. --grpc makes each request a gRPC server-streaming call whose
 * response messages are the frames, its outcome the trailers' grpc-status.
 *
 * Output: one JSON object per request per line (see tests/README-tools.md).
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_MS 1000000ULL
#define NS_PER_S 1000000000ULL
#define RECV_BUF 65536
/* A response head larger than this is treated as a broken server. */
#define HEAD_MAX 65536
/* 1000 threads with the default 8 MiB stacks would reserve 8 GiB of address space. */
#define THREAD_STACK (256 * 1024)
#define DEFAULT_PORT 8000
#define DEFAULT_REQUESTS 10
#define DEFAULT_MAX_TOKENS 16
#define DEFAULT_PROMPT_BYTES 64
#define DEFAULT_TIMEOUT_S 30

enum outcome {
	OUT_OK,
	OUT_HTTP_ERROR,
	OUT_STREAM_ERROR,
	OUT_ABORTED,
	OUT_TIMEOUT,
	OUT_ERROR,
	OUT_N
};

static const char *const outcome_names[OUT_N] = {
	"ok", "http_error", "stream_error", "aborted", "timeout", "error",
};

enum body_kind { BODY_SSE, BODY_NDJSON, BODY_JSON };
enum body_framing {
	FRAMING_NONE,
	FRAMING_CHUNKED,
	FRAMING_LENGTH,
	FRAMING_CLOSE,
	FRAMING_H2, /* DATA frames of an HTTP/2 stream, ended by END_STREAM */
};
enum chunk_state { CS_SIZE, CS_DATA, CS_DATA_END, CS_TRAILER };

/* Room for the --header lines together. */
#define HEADERS_MAX 2048

struct opts {
	const char *host;
	int port;
	const char *path;
	unsigned requests;
	unsigned conns;
	unsigned per_conn;
	const char *model;
	unsigned max_tokens;
	bool usage;
	size_t prompt_bytes;
	double token_ms;   /* < 0: not sent */
	double prefill_ms; /* < 0: not sent */
	unsigned abort_every;
	unsigned abort_after;
	unsigned http_error_every;
	unsigned stream_error_every;
	unsigned no_stream_every;
	bool ndjson;
	const char *out_path;
	double timeout_s;
	bool realtime;		 /* SCHED_FIFO threads: read each frame as soon as it arrives */
	double connect_ahead_ms; /* a new connection waits this long before its first request */
	bool tls;	   /* https: OpenSSL over each connection, the certificate not checked */
	double stagger_ms; /* thread i starts i * stagger_ms after the others */
	bool h2;	   /* HTTP/2 */
	bool grpc;	   /* gRPC server streaming (implies h2) */
	/* --header lines, each ending in CRLF, sent with every HTTP/1.1 request (a gateway's
	 * routing headers); "" when none */
	char headers[HEADERS_MAX];
	/* --slow-every: every M-th request sends x_prefill_ms slow_prefill_ms instead */
	unsigned slow_every;
	double slow_prefill_ms;
	/* --header-every 'M:NAME: VALUE': a header line (CRLF-ended) on every M-th HTTP/1.1
	 * request */
	struct {
		unsigned every;
		char line[256];
	} every_header[8];
	unsigned nevery_headers;
	/* --unique-prompt-every: every M-th request's prompt is its own (the others share one) */
	unsigned unique_every;
	/* --body-every 'M:KEY=VALUE': a top-level string member on every M-th request's body */
	struct {
		unsigned every;
		char key[64], value[128];
	} body_field[4];
	unsigned nbody_fields;
	/* --unique-header NAME: NAME: v<id> on every HTTP/1.1 request, a value each (hostile) */
	const char *unique_header;
};

struct dbuf {
	char *p;
	size_t len, cap;
};

struct u64vec {
	uint64_t *v;
	size_t len, cap;
};

/* Everything parsed from one response and everything printed for it. */
struct resp {
	/* HTTP */
	struct dbuf head;
	bool head_done;
	int status;
	bool conn_close;
	enum body_kind kind;
	enum body_framing framing;
	enum chunk_state cs;
	uint64_t left;	   /* bytes left in this chunk or in the Content-Length body */
	struct dbuf cline; /* chunk-size or trailer line being assembled */
	bool body_done;
	bool bad;
	/* framing inside the body */
	struct dbuf line;
	struct dbuf data;
	bool have_data;
	bool done_seen;
	/* classification */
	bool stream_error;
	bool usage_seen;
	uint64_t usage_tokens;
	unsigned frames;
	uint64_t first_ns;
	struct u64vec token_ns;
	unsigned abort_after; /* 0: never */
	bool abort_now;
	/* HTTP/2 */
	int32_t stream;	 /* the stream of this request */
	uint64_t rx_ts;	 /* the time of the recv() being handed to the session */
	bool closed;	 /* the stream closed */
	bool reset;	 /* ... by RST_STREAM or a connection error */
	int grpc_status; /* -1: no trailers */
	uint8_t gpfx[5]; /* gRPC: the length prefix being read */
	unsigned gpfx_got;
	uint32_t gleft;	  /* bytes of the current message still to come */
	const char *body; /* the request body the data source reads */
	size_t body_len, body_off;
};

struct shared {
	const struct opts *o;
	struct addrinfo *ai;
	char *prompt;
	unsigned next_id;
	unsigned rt_warned;   /* --realtime refused: said once */
	unsigned next_thread; /* start order, for --stagger-ms */
	pthread_mutex_t lock;
	pthread_barrier_t start;
	FILE *out;
	unsigned counts[OUT_N];
	double *ttft_ms; /* per request id, NAN when no content frame */
	SSL_CTX *tls;	 /* --tls */
};

/* One connection: its socket, its TLS session with --tls, its HTTP/2 session with --h2. */
struct link {
	int fd;
	SSL *ssl;
	nghttp2_session *h2;
	bool h2_broken; /* a send failed or the session erred: the connection is done */
};

struct result {
	unsigned id;
	unsigned port;
	unsigned seq;
	bool stream;
	enum outcome outcome;
	uint64_t send_start_ns; /* before the request's first byte was written */
	uint64_t send_ns;
	uint64_t end_ns;
};

static uint64_t clock_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* A measuring tool that runs out of memory cannot produce trustworthy numbers: stop. */
static void *mem_realloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (!p) {
		fprintf(stderr, "gtclient: out of memory\n");
		exit(1);
	}
	return p;
}

static void dbuf_append(struct dbuf *b, const void *d, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap < b->len + n + 1)
			cap *= 2;
		b->p = mem_realloc(b->p, cap);
		b->cap = cap;
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
	/* always NUL-terminated so lines and JSON can be handed to string functions */
	b->p[b->len] = '\0';
}

static void vec_push(struct u64vec *v, uint64_t x)
{
	if (v->len == v->cap) {
		v->cap = v->cap ? v->cap * 2 : 64;
		v->v = mem_realloc(v->v, v->cap * sizeof(*v->v));
	}
	v->v[v->len++] = x;
}

static void resp_reset(struct resp *r, unsigned abort_after)
{
	struct resp keep = *r;

	memset(r, 0, sizeof(*r));
	/* keep the allocations, drop the contents */
	r->head = keep.head;
	r->cline = keep.cline;
	r->line = keep.line;
	r->data = keep.data;
	r->token_ns = keep.token_ns;
	r->head.len = r->cline.len = r->line.len = r->data.len = 0;
	r->token_ns.len = 0;
	r->abort_after = abort_after;
	r->grpc_status = -1;
}

static void resp_free(struct resp *r)
{
	free(r->head.p);
	free(r->cline.p);
	free(r->line.p);
	free(r->data.p);
	free(r->token_ns.v);
}

/* ---- frame classification: the exact rules the tracer implements ---- */

static const cJSON *jget(const cJSON *o, const char *k)
{
	return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static bool str_nonempty(const cJSON *v)
{
	return cJSON_IsString(v) && v->valuestring[0];
}

static bool json_has_content(const cJSON *j)
{
	const cJSON *ch;

	cJSON_ArrayForEach(ch, jget(j, "choices"))
	{
		const cJSON *d = jget(ch, "delta"), *tc = jget(d, "tool_calls");

		if (str_nonempty(jget(d, "content")) ||
		    str_nonempty(jget(d, "reasoning_content")) ||
		    str_nonempty(jget(d, "reasoning")) || (cJSON_IsArray(tc) && tc->child) ||
		    str_nonempty(jget(ch, "text")))
			return true;
	}
	/* TGI */
	if (cJSON_IsString(jget(jget(j, "token"), "text")))
		return true;
	/* Ollama /api/generate and /api/chat */
	return str_nonempty(jget(j, "response")) ||
	       str_nonempty(jget(jget(j, "message"), "content"));
}

/* A content frame (an SSE or NDJSON one with output, or a gRPC message) came at ts. */
static void content_frame(struct resp *r, uint64_t ts)
{
	if (!r->frames)
		r->first_ns = ts;
	r->frames++;
	vec_push(&r->token_ns, ts);
	if (r->abort_after && r->frames >= r->abort_after)
		r->abort_now = true;
}

static void frame_classify(struct resp *r, const char *text, size_t len, uint64_t ts)
{
	const cJSON *v, *e;
	cJSON *j;

	if (r->abort_now)
		return;
	if (len == 6 && !memcmp(text, "[DONE]", 6)) {
		r->done_seen = true;
		return;
	}
	j = cJSON_ParseWithLength(text, len);
	if (!j)
		return;
	e = jget(j, "error");
	if (e && !cJSON_IsNull(e))
		r->stream_error = true;
	v = jget(jget(j, "usage"), "completion_tokens");
	if (!cJSON_IsNumber(v))
		v = jget(j, "eval_count");
	if (cJSON_IsNumber(v)) {
		r->usage_seen = true;
		r->usage_tokens = (uint64_t)v->valuedouble;
	}
	/* A whole JSON body (stream:false, errors) has no frames: it arrives all at once. */
	if (r->kind != BODY_JSON && json_has_content(j))
		content_frame(r, ts);
	cJSON_Delete(j);
}

/* One body line (without '\n'). SSE: fields until a blank line; NDJSON: one object. */
static void line_handle(struct resp *r, char *l, size_t n, uint64_t ts)
{
	const char *v;
	size_t vl;

	if (n && l[n - 1] == '\r')
		l[--n] = '\0';
	if (r->kind == BODY_NDJSON) {
		if (n)
			frame_classify(r, l, n, ts);
		return;
	}
	if (!n) {
		if (r->have_data)
			frame_classify(r, r->data.p, r->data.len, ts);
		r->have_data = false;
		r->data.len = 0;
		return;
	}
	/* "event:" names an Anthropic-style event; the data line that follows carries it all. */
	if (n < 5 || strncmp(l, "data:", 5))
		return;
	v = l + 5;
	vl = n - 5;
	if (vl && *v == ' ') {
		v++;
		vl--;
	}
	/* SSE joins the data lines of one event with newlines */
	if (r->have_data)
		dbuf_append(&r->data, "\n", 1);
	dbuf_append(&r->data, v, vl);
	r->have_data = true;
}

static void content_feed(struct resp *r, const char *p, size_t n, uint64_t ts)
{
	if (r->kind == BODY_JSON) {
		dbuf_append(&r->data, p, n);
		return;
	}
	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t k = nl ? (size_t)(nl - p) : n;

		dbuf_append(&r->line, p, k);
		if (!nl)
			return;
		line_handle(r, r->line.p, r->line.len, ts);
		r->line.len = 0;
		p += k + 1;
		n -= k + 1;
	}
}

static void body_end(struct resp *r, uint64_t ts)
{
	r->body_done = true;
	if (r->kind == BODY_JSON && r->data.len)
		frame_classify(r, r->data.p, r->data.len, ts);
	/* Ollama's last line is newline-terminated, but be lenient with a bare last object. */
	else if (r->kind == BODY_NDJSON && r->line.len)
		frame_classify(r, r->line.p, r->line.len, ts);
}

/* Decodes Transfer-Encoding: chunked, passing chunk data on to content_feed. */
static void chunked_feed(struct resp *r, const char *p, size_t n, uint64_t ts)
{
	while (n && !r->body_done && !r->bad) {
		const char *nl;
		size_t k;

		switch (r->cs) {
		case CS_DATA:
			k = n < r->left ? n : (size_t)r->left;
			content_feed(r, p, k, ts);
			p += k;
			n -= k;
			r->left -= k;
			if (!r->left)
				r->cs = CS_DATA_END;
			break;
		case CS_DATA_END:
		case CS_SIZE:
		case CS_TRAILER:
			nl = memchr(p, '\n', n);
			k = nl ? (size_t)(nl - p) + 1 : n;
			dbuf_append(&r->cline, p, k);
			p += k;
			n -= k;
			if (!nl) {
				if (r->cline.len > HEAD_MAX)
					r->bad = true;
				break;
			}
			if (r->cs == CS_DATA_END) {
				r->cs = CS_SIZE;
			} else if (r->cs == CS_SIZE) {
				char *end;

				r->left = strtoull(r->cline.p, &end, 16);
				if (end == r->cline.p)
					r->bad = true;
				r->cs = r->left ? CS_DATA : CS_TRAILER;
			} else if (r->cline.len <= 2) {
				/* the empty line after the last chunk and any trailers */
				body_end(r, ts);
			}
			r->cline.len = 0;
			break;
		}
	}
}

static void head_parse(struct resp *r, bool want_ndjson)
{
	char *line = r->head.p, *eol, *sp = strchr(r->head.p, ' ');
	bool has_len = false, chunked = false;
	const char *ctype = "";

	r->status = sp ? atoi(sp + 1) : 0;
	if (r->status < 100)
		r->bad = true;
	r->conn_close = !strncmp(r->head.p, "HTTP/1.0", 8);
	/* the head ends with its last header's CRLF; the status line is skipped */
	for (eol = strstr(line, "\r\n"); eol; eol = strstr(line, "\r\n")) {
		char *val;

		*eol = '\0';
		val = line == r->head.p ? NULL : strchr(line, ':');
		if (val) {
			*val++ = '\0';
			while (*val == ' ' || *val == '\t')
				val++;
			if (!strcasecmp(line, "content-length")) {
				has_len = true;
				r->left = strtoull(val, NULL, 10);
			} else if (!strcasecmp(line, "transfer-encoding")) {
				chunked = strcasestr(val, "chunked") != NULL;
			} else if (!strcasecmp(line, "connection")) {
				if (strcasestr(val, "close"))
					r->conn_close = true;
				else if (strcasestr(val, "keep-alive"))
					r->conn_close = false;
			} else if (!strcasecmp(line, "content-type")) {
				ctype = val;
			}
		}
		line = eol + 2;
	}
	if (want_ndjson || strcasestr(ctype, "ndjson"))
		r->kind = BODY_NDJSON;
	else if (strcasestr(ctype, "event-stream"))
		r->kind = BODY_SSE;
	else
		r->kind = BODY_JSON;
	if (r->status == 204 || r->status == 304)
		r->framing = FRAMING_NONE;
	else if (chunked)
		r->framing = FRAMING_CHUNKED;
	else if (has_len)
		r->framing = FRAMING_LENGTH;
	else
		r->framing = FRAMING_CLOSE;
}

static void body_feed(struct resp *r, const char *p, size_t n, uint64_t ts)
{
	switch (r->framing) {
	case FRAMING_CHUNKED:
		chunked_feed(r, p, n, ts);
		break;
	case FRAMING_LENGTH: {
		size_t k = n < r->left ? n : (size_t)r->left;

		content_feed(r, p, k, ts);
		r->left -= k;
		if (!r->left)
			body_end(r, ts);
		break;
	}
	case FRAMING_CLOSE:
		content_feed(r, p, n, ts);
		break;
	default:
		break;
	}
}

/* Feeds the bytes of one recv(); ts was taken right after it returned. */
static void resp_feed(struct resp *r, const char *p, size_t n, uint64_t ts, bool want_ndjson)
{
	while (n && !r->head_done) {
		char *end;
		size_t old = r->head.len, used;

		dbuf_append(&r->head, p, n);
		end = strstr(r->head.p, "\r\n\r\n");
		if (!end) {
			if (r->head.len > HEAD_MAX)
				r->bad = true;
			return;
		}
		used = (size_t)(end + 4 - r->head.p) - old;
		end[2] = '\0';
		head_parse(r, want_ndjson);
		p += used;
		n -= used;
		if (r->status >= 100 && r->status < 200) {
			/* 100 Continue and friends: the real response follows */
			r->head.len = 0;
			continue;
		}
		r->head_done = true;
		if (r->framing == FRAMING_NONE || (r->framing == FRAMING_LENGTH && !r->left))
			body_end(r, ts);
	}
	if (n && !r->body_done)
		body_feed(r, p, n, ts);
}

/* ---- one request ---- */

static char *body_build(const struct shared *sh, unsigned id, bool *stream)
{
	const struct opts *o = sh->o;
	bool prompt_style = strstr(o->path, "/completions") && !strstr(o->path, "chat");
	cJSON *j = cJSON_CreateObject(), *m, *msgs;
	char *s;

	prompt_style |= strstr(o->path, "/api/generate") != NULL;
	*stream = !(o->no_stream_every && (id + 1) % o->no_stream_every == 0);
	cJSON_AddStringToObject(j, "model", o->model);
	cJSON_AddBoolToObject(j, "stream", *stream);
	cJSON_AddNumberToObject(j, "max_tokens", o->max_tokens);
	char *own = NULL;
	const char *prompt = sh->prompt;

	/* Its own prompt, as long as the shared one: a prefix cache has not seen it. */
	if (o->unique_every && (id + 1) % o->unique_every == 0 && (own = strdup(sh->prompt))) {
		char tag[24];
		int n = snprintf(tag, sizeof(tag), "u%u ", id);

		memcpy(own, tag, strlen(own) < (size_t)n ? strlen(own) : (size_t)n);
		prompt = own;
	}
	if (prompt_style) {
		cJSON_AddStringToObject(j, "prompt", prompt);
	} else {
		msgs = cJSON_AddArrayToObject(j, "messages");
		m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "role", "user");
		cJSON_AddStringToObject(m, "content", prompt);
		cJSON_AddItemToArray(msgs, m);
	}
	free(own);
	if (o->usage)
		cJSON_AddBoolToObject(cJSON_AddObjectToObject(j, "stream_options"), "include_usage",
				      true);
	/* Ollama reads its limit from options.num_predict */
	if (o->ndjson)
		cJSON_AddNumberToObject(cJSON_AddObjectToObject(j, "options"), "num_predict",
					o->max_tokens);
	if (o->token_ms >= 0)
		cJSON_AddNumberToObject(j, "x_token_ms", o->token_ms);
	if (o->slow_every && (id + 1) % o->slow_every == 0)
		cJSON_AddNumberToObject(j, "x_prefill_ms", o->slow_prefill_ms);
	else if (o->prefill_ms >= 0)
		cJSON_AddNumberToObject(j, "x_prefill_ms", o->prefill_ms);
	for (unsigned i = 0; i < o->nbody_fields; i++)
		if ((id + 1) % o->body_field[i].every == 0 &&
		    !cJSON_GetObjectItemCaseSensitive(j, o->body_field[i].key))
			cJSON_AddStringToObject(j, o->body_field[i].key, o->body_field[i].value);
	if (o->http_error_every && (id + 1) % o->http_error_every == 0)
		cJSON_AddStringToObject(j, "x_fail", "http");
	else if (o->stream_error_every && (id + 1) % o->stream_error_every == 0)
		cJSON_AddStringToObject(j, "x_fail", "stream");
	s = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (!s) {
		fprintf(stderr, "gtclient: out of memory\n");
		exit(1);
	}
	return s;
}

static void link_close(struct link *l)
{
	if (l->h2) {
		nghttp2_session_del(l->h2);
		l->h2 = NULL;
	}
	l->h2_broken = false;
	if (l->ssl) {
		SSL_free(l->ssl);
		l->ssl = NULL;
	}
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
}

/* The TLS handshake on a connected socket: 0, or -EPROTO (said). */
static int tls_open(const struct shared *sh, struct link *l)
{
	static const unsigned char alpn_h2[] = { 2, 'h', '2' };

	l->ssl = SSL_new(sh->tls);
	if (l->ssl && sh->o->h2)
		SSL_set_alpn_protos(l->ssl, alpn_h2, sizeof(alpn_h2));
	if (!l->ssl || !SSL_set_fd(l->ssl, l->fd) ||
	    !SSL_set_tlsext_host_name(l->ssl, sh->o->host) || SSL_connect(l->ssl) != 1) {
		fprintf(stderr, "gtclient: TLS handshake with %s:%d failed: ", sh->o->host,
			sh->o->port);
		ERR_print_errors_fp(stderr);
		fputc('\n', stderr);
		return -EPROTO;
	}
	return 0;
}

/* Returns a connected socket or -errno. */
static int conn_open(const struct shared *sh, unsigned *port)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int one = 1, err = -ECONNREFUSED;

	for (struct addrinfo *a = sh->ai; a; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);

		if (fd < 0) {
			err = -errno;
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen)) {
			err = -errno;
			close(fd);
			continue;
		}
		/* frames must leave the client's request unbatched, as real SDKs do */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		getsockname(fd, (struct sockaddr *)&ss, &sl);
		*port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
						 : ntohs(((struct sockaddr_in *)&ss)->sin_port);
		/* Some servers start reading a new connection milliseconds after accepting it (Node
		 * here); a pooled connection hides that from the first request, as in production.
		 */
		if (sh->o->connect_ahead_ms > 0) {
			struct timespec ts = {
				.tv_sec = (time_t)(sh->o->connect_ahead_ms / 1000),
				.tv_nsec = (long)(fmod(sh->o->connect_ahead_ms, 1000) * 1e6),
			};

			while (nanosleep(&ts, &ts) && errno == EINTR)
				;
		}
		return fd;
	}
	return err;
}

static int send_all(const struct link *l, const char *p, size_t n)
{
	while (n) {
		ssize_t k;

		if (l->ssl) {
			size_t done;

			if (SSL_write_ex(l->ssl, p, n, &done) != 1)
				return -EIO;
			k = (ssize_t)done;
		} else {
			k = send(l->fd, p, n, MSG_NOSIGNAL);
		}
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Waits until l has bytes to read, or a poll error for the read to report (1), or until the
 * deadline passes (0). */
static int wait_readable(const struct link *l, uint64_t deadline)
{
	for (;;) {
		struct pollfd pfd = { .fd = l->fd, .events = POLLIN };
		uint64_t now = clock_mono_ns();
		int pr;

		if (now >= deadline)
			return 0;
		/* Decrypted bytes the TLS session holds already are readable now. */
		if (l->ssl && SSL_pending(l->ssl) > 0)
			return 1;
		pr = poll(&pfd, 1, (int)((deadline - now + NS_PER_MS - 1) / NS_PER_MS));
		/* An interrupted poll, or its own timeout: the deadline check above decides. */
		if (pr != 0 && !(pr < 0 && errno == EINTR))
			return 1;
	}
}

/* recv(), or SSL_read_ex() with --tls: bytes, 0 at the end, < 0 on an error (errno). */
static ssize_t recv_some(const struct link *l, char *buf, size_t n)
{
	size_t got;
	int err;

	if (!l->ssl)
		return recv(l->fd, buf, n, 0);
	if (SSL_read_ex(l->ssl, buf, n, &got) == 1)
		return (ssize_t)got;
	err = SSL_get_error(l->ssl, 0);
	if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && !errno))
		return 0;
	errno = EIO;
	return -1;
}

/* ---- HTTP/2 (--h2, --grpc) ---- */

/* The session's user data: the connection, and the response of the stream in progress. */
struct h2ctx {
	struct link *l;
	struct resp *r;
	bool want_ndjson;
	bool grpc;
};

static ssize_t h2_send_cb(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *ud)
{
	struct h2ctx *c = ud;

	(void)s;
	(void)flags;
	if (send_all(c->l, (const char *)data, len) < 0) {
		c->l->h2_broken = true;
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	return (ssize_t)len;
}

static int h2_header_cb(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
			size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
	struct h2ctx *c = ud;
	struct resp *r = c->r;

	(void)s;
	(void)flags;
	if (f->hd.type != NGHTTP2_HEADERS || f->hd.stream_id != r->stream)
		return 0;
	if (nlen == 7 && !memcmp(name, ":status", 7)) {
		r->status = atoi((const char *)value);
	} else if (nlen == 12 && !memcmp(name, "content-type", 12)) {
		if (c->want_ndjson || memmem(value, vlen, "ndjson", 6))
			r->kind = BODY_NDJSON;
		else if (memmem(value, vlen, "event-stream", 12))
			r->kind = BODY_SSE;
		else
			r->kind = BODY_JSON;
	} else if (nlen == 11 && !memcmp(name, "grpc-status", 11)) {
		r->grpc_status = atoi((const char *)value);
	}
	return 0;
}

static int h2_frame_cb(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	struct h2ctx *c = ud;
	struct resp *r = c->r;

	(void)s;
	if (f->hd.type == NGHTTP2_HEADERS && f->hd.stream_id == r->stream &&
	    f->headers.cat == NGHTTP2_HCAT_RESPONSE && r->status >= 200) {
		r->head_done = true;
		r->framing = FRAMING_H2;
	}
	return 0;
}

/* gRPC: each complete length-prefixed message is a content frame. */
static void grpc_feed(struct resp *r, const uint8_t *p, size_t n, uint64_t ts)
{
	while (n && !r->abort_now) {
		if (r->gpfx_got < 5) {
			r->gpfx[r->gpfx_got++] = *p++;
			n--;
			if (r->gpfx_got < 5)
				continue;
			r->gleft = (uint32_t)r->gpfx[1] << 24 | (uint32_t)r->gpfx[2] << 16 |
				   (uint32_t)r->gpfx[3] << 8 | r->gpfx[4];
		} else {
			size_t k = n < r->gleft ? n : r->gleft;

			p += k;
			n -= k;
			r->gleft -= (uint32_t)k;
		}
		if (r->gpfx_got == 5 && !r->gleft) {
			r->gpfx_got = 0;
			content_frame(r, ts);
		}
	}
}

static int h2_data_cb(nghttp2_session *s, uint8_t flags, int32_t stream, const uint8_t *data,
		      size_t len, void *ud)
{
	struct h2ctx *c = ud;
	struct resp *r = c->r;

	(void)s;
	(void)flags;
	if (stream != r->stream || !r->head_done)
		return 0;
	if (c->grpc)
		grpc_feed(r, data, len, r->rx_ts);
	else
		content_feed(r, (const char *)data, len, r->rx_ts);
	return 0;
}

static int h2_close_cb(nghttp2_session *s, int32_t stream, uint32_t code, void *ud)
{
	struct h2ctx *c = ud;
	struct resp *r = c->r;

	(void)s;
	if (stream != r->stream)
		return 0;
	r->closed = true;
	r->reset = code != NGHTTP2_NO_ERROR;
	if (!r->reset && r->head_done)
		body_end(r, r->rx_ts);
	return 0;
}

static ssize_t h2_body_read(nghttp2_session *s, int32_t stream, uint8_t *buf, size_t len,
			    uint32_t *data_flags, nghttp2_data_source *src, void *ud)
{
	struct resp *r = src->ptr;
	size_t k = r->body_len - r->body_off;

	(void)s;
	(void)stream;
	(void)ud;
	if (k > len)
		k = len;
	memcpy(buf, r->body + r->body_off, k);
	r->body_off += k;
	if (r->body_off == r->body_len)
		*data_flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)k;
}

/* The connection's HTTP/2 session: the client preface and SETTINGS go out with the first
 * request. -EPROTO (said) when it cannot be made. */
static int h2_open(const struct shared *sh, struct link *l, struct h2ctx *c)
{
	nghttp2_session_callbacks *cb;
	int err;

	if (l->ssl) {
		const unsigned char *proto;
		unsigned plen;

		SSL_get0_alpn_selected(l->ssl, &proto, &plen);
		if (plen != 2 || memcmp(proto, "h2", 2)) {
			fprintf(stderr, "gtclient: %s:%d did not agree to h2 (ALPN)\n", sh->o->host,
				sh->o->port);
			return -EPROTO;
		}
	}
	if (nghttp2_session_callbacks_new(&cb))
		return -ENOMEM;
	nghttp2_session_callbacks_set_send_callback(cb, h2_send_cb);
	nghttp2_session_callbacks_set_on_header_callback(cb, h2_header_cb);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, h2_frame_cb);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, h2_data_cb);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, h2_close_cb);
	err = nghttp2_session_client_new(&l->h2, cb, c);
	nghttp2_session_callbacks_del(cb);
	if (err) {
		l->h2 = NULL;
		return -ENOMEM;
	}
	nghttp2_submit_settings(l->h2, NGHTTP2_FLAG_NONE, NULL, 0);
	return 0;
}

#define H2_NV(n, v)                                                                        \
	{                                                                                  \
		(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE \
	}

static void pb_varint(struct dbuf *b, uint64_t x)
{
	do {
		uint8_t c = (uint8_t)((x & 0x7f) | (x >> 7 ? 0x80 : 0));

		dbuf_append(b, &c, 1);
		x >>= 7;
	} while (x);
}

static void pb_bytes(struct dbuf *b, unsigned field, const char *s, size_t n)
{
	pb_varint(b, field << 3 | 2);
	pb_varint(b, n);
	dbuf_append(b, s, n);
}

/*
 * A gRPC request message, length-prefixed: the prompt (field 1), max_tokens (2), x_token_ms (3),
 * x_prefill_ms (4) and x_fail (5) of the HTTP servers' contract (tests/e2e/servers/grpc_app.py).
 */
static char *grpc_body(const struct shared *sh, unsigned id, size_t *len)
{
	const struct opts *o = sh->o;
	struct dbuf b = { 0 };
	uint8_t prefix[5] = { 0 };

	dbuf_append(&b, prefix, sizeof(prefix));
	pb_bytes(&b, 1, sh->prompt, strlen(sh->prompt));
	pb_varint(&b, 2 << 3);
	pb_varint(&b, o->max_tokens);
	if (o->token_ms >= 0) {
		pb_varint(&b, 3 << 3);
		pb_varint(&b, (uint64_t)o->token_ms);
	}
	if (o->prefill_ms >= 0) {
		pb_varint(&b, 4 << 3);
		pb_varint(&b, (uint64_t)o->prefill_ms);
	}
	if (o->http_error_every && (id + 1) % o->http_error_every == 0)
		pb_bytes(&b, 5, "http", 4);
	else if (o->stream_error_every && (id + 1) % o->stream_error_every == 0)
		pb_bytes(&b, 5, "stream", 6);
	*len = b.len;
	b.p[1] = (char)((b.len - 5) >> 24);
	b.p[2] = (char)((b.len - 5) >> 16);
	b.p[3] = (char)((b.len - 5) >> 8);
	b.p[4] = (char)(b.len - 5);
	return b.p;
}

/* request_run over HTTP/2: one stream on l's session. */
static void request_run_h2(struct shared *sh, struct link *l, struct resp *r, struct result *res,
			   char *rbuf)
{
	const struct opts *o = sh->o;
	bool abort_this = o->abort_every && (res->id + 1) % o->abort_every == 0;
	struct h2ctx ctx = { .l = l, .r = r, .want_ndjson = o->ndjson, .grpc = o->grpc };
	char authority[300];
	char *body;
	size_t blen;
	bool timed_out = false, failed = false;
	uint64_t deadline;

	resp_reset(r, abort_this ? o->abort_after : 0);
	if (o->grpc) {
		res->stream = true;
		body = grpc_body(sh, res->id, &blen);
	} else {
		body = body_build(sh, res->id, &res->stream);
		blen = strlen(body);
	}
	if (!l->h2 && h2_open(sh, l, &ctx)) {
		free(body);
		res->send_start_ns = res->send_ns = res->end_ns = clock_mono_ns();
		res->outcome = OUT_ERROR;
		link_close(l);
		return;
	}
	nghttp2_session_set_user_data(l->h2, &ctx);
	snprintf(authority, sizeof(authority), "%s:%d", o->host, o->port);
	{
		nghttp2_nv nv[] = {
			H2_NV(":method", "POST"),
			H2_NV(":scheme", l->ssl ? "https" : "http"),
			H2_NV(":authority", authority),
			H2_NV(":path", o->path),
			H2_NV("content-type", o->grpc ? "application/grpc" : "application/json"),
			o->grpc ? (nghttp2_nv)H2_NV("te", "trailers")
				: (nghttp2_nv)H2_NV("accept", o->ndjson ? "application/x-ndjson"
									: "text/event-stream"),
			H2_NV("user-agent", "gtclient"),
		};
		nghttp2_data_provider dp = { .source.ptr = r, .read_callback = h2_body_read };

		r->body = body;
		r->body_len = blen;
		r->stream =
		    nghttp2_submit_request(l->h2, NULL, nv, sizeof(nv) / sizeof(nv[0]), &dp, NULL);
	}
	res->send_start_ns = clock_mono_ns();
	failed = r->stream < 0 || nghttp2_session_send(l->h2) != 0;
	res->send_ns = clock_mono_ns();
	deadline = res->send_ns + (uint64_t)(o->timeout_s * (double)NS_PER_S);
	while (!failed && !r->closed && !r->abort_now) {
		ssize_t k;

		if (!wait_readable(l, deadline)) {
			timed_out = true;
			break;
		}
		k = recv_some(l, rbuf, RECV_BUF);
		r->rx_ts = clock_mono_ns();
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			failed = true;
			break;
		}
		if (nghttp2_session_mem_recv(l->h2, (const uint8_t *)rbuf, (size_t)k) < 0 ||
		    nghttp2_session_send(l->h2) != 0)
			failed = true;
	}
	res->end_ns = r->closed || r->abort_now ? r->rx_ts : clock_mono_ns();
	r->body = NULL;
	free(body);
	if (r->abort_now) {
		/* An HTTP/2 client gives up on a stream, not on its connection. */
		nghttp2_submit_rst_stream(l->h2, NGHTTP2_FLAG_NONE, r->stream, NGHTTP2_CANCEL);
		if (nghttp2_session_send(l->h2))
			link_close(l);
		res->outcome = OUT_ABORTED;
		return;
	}
	if (timed_out)
		res->outcome = OUT_TIMEOUT;
	else if (r->status >= 400 && r->head_done)
		res->outcome = OUT_HTTP_ERROR;
	else if (r->stream_error || r->grpc_status > 0)
		res->outcome = OUT_STREAM_ERROR;
	else if (failed || r->reset || !r->body_done)
		res->outcome = OUT_ERROR;
	else
		res->outcome = OUT_OK;
	if (timed_out || failed || l->h2_broken)
		link_close(l);
}

/*
 * Sends one request on l and reads its response. Leaves l open only when the connection can
 * carry the next request.
 */
static void request_run(struct shared *sh, struct link *l, struct resp *r, struct result *res,
			char *rbuf)
{
	const struct opts *o = sh->o;
	char *body = body_build(sh, res->id, &res->stream), *req;
	uint64_t deadline, ts;
	bool abort_this = o->abort_every && (res->id + 1) % o->abort_every == 0;
	bool timed_out = false, failed = false;
	int n;

	if (o->h2) {
		free(body);
		request_run_h2(sh, l, r, res, rbuf);
		return;
	}
	resp_reset(r, abort_this ? o->abort_after : 0);
	char every[sizeof(o->every_header)] = "";

	for (unsigned i = 0; i < o->nevery_headers; i++)
		if ((res->id + 1) % o->every_header[i].every == 0)
			strcat(every, o->every_header[i].line);
	char unique[160] = "";

	if (o->unique_header)
		snprintf(unique, sizeof(unique), "%s: v%u\r\n", o->unique_header, res->id);
	n = asprintf(
	    &req,
	    "POST %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: gtclient\r\n%s%s%s"
	    "Content-Type: application/json\r\nAccept: %s\r\nContent-Length: %zu\r\n\r\n%s",
	    o->path, o->host, o->port, o->headers, every, unique,
	    o->ndjson ? "application/x-ndjson" : "text/event-stream", strlen(body), body);
	free(body);
	if (n < 0) {
		fprintf(stderr, "gtclient: out of memory\n");
		exit(1);
	}
	res->send_start_ns = clock_mono_ns();
	failed = send_all(l, req, (size_t)n) < 0;
	free(req);
	res->send_ns = clock_mono_ns();
	deadline = res->send_ns + (uint64_t)(o->timeout_s * (double)NS_PER_S);
	while (!failed) {
		ssize_t k;

		if (!wait_readable(l, deadline)) {
			timed_out = true;
			break;
		}
		k = recv_some(l, rbuf, RECV_BUF);
		ts = clock_mono_ns();
		if (k < 0) {
			if (errno == EINTR)
				continue;
			failed = true;
			break;
		}
		if (k == 0) {
			/* only a close-delimited body may end at EOF */
			if (r->head_done && r->framing == FRAMING_CLOSE) {
				body_end(r, ts);
				r->conn_close = true;
			} else {
				failed = true;
			}
			res->end_ns = ts;
			break;
		}
		resp_feed(r, rbuf, (size_t)k, ts, o->ndjson);
		if (r->abort_now || r->body_done || r->bad) {
			failed = r->bad;
			res->end_ns = ts;
			break;
		}
	}
	if (r->abort_now) {
		link_close(l);
		res->end_ns = clock_mono_ns();
		res->outcome = OUT_ABORTED;
		return;
	}
	if (!res->end_ns)
		res->end_ns = clock_mono_ns();
	if (timed_out)
		res->outcome = OUT_TIMEOUT;
	else if (r->status >= 400 && r->head_done)
		res->outcome = OUT_HTTP_ERROR;
	else if (r->stream_error)
		res->outcome = OUT_STREAM_ERROR;
	else if (failed || !r->body_done)
		res->outcome = OUT_ERROR;
	else
		res->outcome = OUT_OK;
	if (timed_out || failed || !r->body_done || r->conn_close)
		link_close(l);
}

static void json_ms(FILE *f, uint64_t from, uint64_t to)
{
	fprintf(f, "%.3f", (double)(to - from) / (double)NS_PER_MS);
}

static void result_print(struct shared *sh, const struct result *res, const struct resp *r)
{
	FILE *f = sh->out;
	bool first = r->frames > 0;

	pthread_mutex_lock(&sh->lock);
	fprintf(f,
		"{\"id\":%u,\"port\":%u,\"seq\":%u,\"status\":%d,\"outcome\":\"%s\",\"stream\":%s,"
		"\"send_start_ns\":%" PRIu64 ",\"send_ns\":%" PRIu64 ",",
		res->id, res->port, res->seq, r->status, outcome_names[res->outcome],
		res->stream ? "true" : "false", res->send_start_ns, res->send_ns);
	if (first)
		fprintf(f, "\"first_token_ns\":%" PRIu64 ",", r->first_ns);
	else
		fprintf(f, "\"first_token_ns\":null,");
	fprintf(f, "\"end_ns\":%" PRIu64 ",\"ttft_ms\":", res->end_ns);
	if (first)
		json_ms(f, res->send_ns, r->first_ns);
	else
		fprintf(f, "null");
	fprintf(f, ",\"e2e_ms\":");
	json_ms(f, res->send_ns, res->end_ns);
	fprintf(f, ",\"frames\":%u,\"tokens\":%" PRIu64 ",\"tokens_from\":\"%s\",\"token_ns\":[",
		r->frames, r->usage_seen ? r->usage_tokens : r->frames,
		r->usage_seen ? "usage"
		: sh->o->grpc ? "messages"
			      : "frames");
	for (size_t i = 0; i < r->token_ns.len; i++)
		fprintf(f, "%s%" PRIu64, i ? "," : "", r->token_ns.v[i]);
	fprintf(f, "]}\n");
	fflush(f);
	sh->counts[res->outcome]++;
	sh->ttft_ms[res->id] =
	    first ? (double)(r->first_ns - res->send_ns) / (double)NS_PER_MS : NAN;
	pthread_mutex_unlock(&sh->lock);
}

static void *worker_run(void *arg)
{
	struct shared *sh = arg;
	const struct opts *o = sh->o;
	char *rbuf = mem_realloc(NULL, RECV_BUF);
	struct resp r = { 0 };
	unsigned port = 0, seq = 0;
	struct link l = { .fd = -1 };

	if (o->realtime) {
		struct sched_param sp = { .sched_priority = 10 };
		int err = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);

		if (err && __atomic_fetch_add(&sh->rt_warned, 1, __ATOMIC_RELAXED) == 0)
			fprintf(stderr, "gtclient: --realtime: %s; using normal scheduling\n",
				strerror(err));
	}
	/* Start together: creating 1000 threads takes long enough to skew the first requests. */
	pthread_barrier_wait(&sh->start);
	if (o->stagger_ms > 0) {
		unsigned idx = __atomic_fetch_add(&sh->next_thread, 1, __ATOMIC_RELAXED);
		double ms = idx * o->stagger_ms;
		struct timespec ts = { .tv_sec = (time_t)(ms / 1000),
				       .tv_nsec = (long)(fmod(ms, 1000) * 1e6) };

		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
	for (;;) {
		unsigned id = __atomic_fetch_add(&sh->next_id, 1, __ATOMIC_RELAXED);
		struct result res = { .id = id };

		if (id >= o->requests)
			break;
		if (l.fd >= 0 && seq >= o->per_conn)
			link_close(&l);
		if (l.fd < 0) {
			l.fd = conn_open(sh, &port);
			seq = 0;
			if (l.fd >= 0 && sh->tls && tls_open(sh, &l))
				link_close(&l);
		}
		if (l.fd < 0) {
			resp_reset(&r, 0);
			res.stream = !(o->no_stream_every && (id + 1) % o->no_stream_every == 0);
			res.send_start_ns = res.send_ns = res.end_ns = clock_mono_ns();
			res.outcome = OUT_ERROR;
			res.port = 0;
			result_print(sh, &res, &r);
			continue;
		}
		res.port = port;
		res.seq = seq++;
		request_run(sh, &l, &r, &res, rbuf);
		result_print(sh, &res, &r);
	}
	link_close(&l);
	resp_free(&r);
	free(rbuf);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void summary_print(const struct shared *sh)
{
	unsigned n = 0;
	double *v = mem_realloc(NULL, (sh->o->requests + 1) * sizeof(*v));

	for (unsigned i = 0; i < sh->o->requests; i++)
		if (!isnan(sh->ttft_ms[i]))
			v[n++] = sh->ttft_ms[i];
	qsort(v, n, sizeof(*v), cmp_double);
	fprintf(stderr, "requests=%u", sh->o->requests);
	for (int i = 0; i < OUT_N; i++)
		fprintf(stderr, " %s=%u", outcome_names[i], sh->counts[i]);
	if (n)
		fprintf(stderr, " ttft_p50_ms=%.3f\n", v[(n - 1) / 2]);
	else
		fprintf(stderr, " ttft_p50_ms=none\n");
	free(v);
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: gtclient [OPTIONS]\n"
	    "Ground-truth streaming client: one JSON line per request on CLOCK_MONOTONIC.\n"
	    "\n"
	    "  --host H                server address (127.0.0.1)\n"
	    "  --port P                server port (%d)\n"
	    "  --path P                request path (/v1/chat/completions)\n"
	    "  -n N                    total requests (%d)\n"
	    "  -c C                    concurrent connections, one thread each (1)\n"
	    "  -k K                    requests per connection over keep-alive (1)\n"
	    "  --model M               model name (ref)\n"
	    "  --max-tokens N          max_tokens (%d)\n"
	    "  --usage                 send stream_options.include_usage\n"
	    "  --prompt-bytes B        prompt length in bytes (%d)\n"
	    "  --token-ms MS           send x_token_ms\n"
	    "  --prefill-ms MS         send x_prefill_ms\n"
	    "  --abort-every M         every M-th request (from 1) closes early...\n"
	    "  --abort-after F         ...after F content frames (1)\n"
	    "  --http-error-every M    every M-th request sends x_fail:\"http\"\n"
	    "  --stream-error-every M  every M-th request sends x_fail:\"stream\"\n"
	    "  --no-stream-every M     every M-th request sends stream:false\n"
	    "  --ndjson                expect Ollama-style NDJSON\n"
	    "  -o FILE                 output file (stdout)\n"
	    "  --timeout-s S           per-request timeout (%d)\n"
	    "  --realtime              SCHED_FIFO threads (root): on a busy machine a frame is\n"
	    "                          timestamped when it arrives, not when a CPU frees up\n"
	    "  --connect-ahead-ms MS   open each connection MS before its first request, as a\n"
	    "                          connection pool does (0)\n"
	    "  --stagger-ms MS         start thread i at i * MS instead of all at once (0)\n"
	    "  --tls                   https: TLS on every connection (certificate not checked);\n"
	    "                          a frame's time is taken when SSL_read returns it\n"
	    "  --h2                    HTTP/2: prior knowledge over cleartext, ALPN h2 with "
	    "--tls;\n"
	    "                          -k requests go one after another as streams of a "
	    "connection\n"
	    "  --grpc                  a gRPC server-streaming call to --path (implies --h2): a\n"
	    "                          message is a frame, grpc-status the outcome\n"
	    "  --header 'NAME: VALUE'  add this header to every HTTP/1.1 request (repeatable):\n"
	    "                          a gateway's routing headers\n"
	    "  --header-every 'M:NAME: VALUE'  ...on every M-th request only (up to 8)\n"
	    "  --slow-every M          every M-th request sends x_prefill_ms...\n"
	    "  --slow-prefill-ms MS    ...of MS instead (a request slowed on purpose)\n"
	    "  --unique-prompt-every M every M-th request's prompt is its own; the others\n"
	    "                          share one (a prefix cache's hits)\n"
	    "  --body-every 'M:KEY=VALUE'  a string member KEY on every M-th request's body\n"
	    "                          (up to 4; the first given for a KEY wins)\n"
	    "  --unique-header NAME    NAME: v<id> on every HTTP/1.1 request (a hostile tenant)\n"
	    "\n"
	    "Examples:\n"
	    "  gtclient --port 8000 -n 100 -c 4 -k 5 --usage\n"
	    "  gtclient --port 8000 -n 20 --abort-every 3 --abort-after 2 -o gt.jsonl\n",
	    DEFAULT_PORT, DEFAULT_REQUESTS, DEFAULT_MAX_TOKENS, DEFAULT_PROMPT_BYTES,
	    DEFAULT_TIMEOUT_S);
}

enum {
	OPT_HOST = 256,
	OPT_PORT,
	OPT_PATH,
	OPT_MODEL,
	OPT_MAX_TOKENS,
	OPT_USAGE,
	OPT_PROMPT_BYTES,
	OPT_TOKEN_MS,
	OPT_PREFILL_MS,
	OPT_ABORT_EVERY,
	OPT_ABORT_AFTER,
	OPT_HTTP_ERROR_EVERY,
	OPT_STREAM_ERROR_EVERY,
	OPT_NO_STREAM_EVERY,
	OPT_NDJSON,
	OPT_TIMEOUT,
	OPT_REALTIME,
	OPT_CONNECT_AHEAD,
	OPT_STAGGER,
	OPT_TLS,
	OPT_H2,
	OPT_GRPC,
	OPT_HEADER,
	OPT_HEADER_EVERY,
	OPT_SLOW_EVERY,
	OPT_UNIQUE_EVERY,
	OPT_BODY_EVERY,
	OPT_UNIQUE_HEADER,
	OPT_SLOW_PREFILL,
};

static bool parse_uint(const char *v, unsigned min, unsigned *out)
{
	char *end;
	unsigned long x = strtoul(v, &end, 10);

	*out = (unsigned)x;
	return end != v && !*end && x >= min && x <= UINT32_MAX;
}

static bool parse_double(const char *v, double *out)
{
	char *end;

	*out = strtod(v, &end);
	return end != v && !*end && *out >= 0;
}

static int opts_parse(struct opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "host", required_argument, NULL, OPT_HOST },
		{ "port", required_argument, NULL, OPT_PORT },
		{ "path", required_argument, NULL, OPT_PATH },
		{ "model", required_argument, NULL, OPT_MODEL },
		{ "max-tokens", required_argument, NULL, OPT_MAX_TOKENS },
		{ "usage", no_argument, NULL, OPT_USAGE },
		{ "prompt-bytes", required_argument, NULL, OPT_PROMPT_BYTES },
		{ "token-ms", required_argument, NULL, OPT_TOKEN_MS },
		{ "prefill-ms", required_argument, NULL, OPT_PREFILL_MS },
		{ "abort-every", required_argument, NULL, OPT_ABORT_EVERY },
		{ "abort-after", required_argument, NULL, OPT_ABORT_AFTER },
		{ "http-error-every", required_argument, NULL, OPT_HTTP_ERROR_EVERY },
		{ "stream-error-every", required_argument, NULL, OPT_STREAM_ERROR_EVERY },
		{ "no-stream-every", required_argument, NULL, OPT_NO_STREAM_EVERY },
		{ "ndjson", no_argument, NULL, OPT_NDJSON },
		{ "timeout-s", required_argument, NULL, OPT_TIMEOUT },
		{ "realtime", no_argument, NULL, OPT_REALTIME },
		{ "connect-ahead-ms", required_argument, NULL, OPT_CONNECT_AHEAD },
		{ "stagger-ms", required_argument, NULL, OPT_STAGGER },
		{ "tls", no_argument, NULL, OPT_TLS },
		{ "h2", no_argument, NULL, OPT_H2 },
		{ "grpc", no_argument, NULL, OPT_GRPC },
		{ "header", required_argument, NULL, OPT_HEADER },
		{ "header-every", required_argument, NULL, OPT_HEADER_EVERY },
		{ "slow-every", required_argument, NULL, OPT_SLOW_EVERY },
		{ "unique-prompt-every", required_argument, NULL, OPT_UNIQUE_EVERY },
		{ "body-every", required_argument, NULL, OPT_BODY_EVERY },
		{ "unique-header", required_argument, NULL, OPT_UNIQUE_HEADER },
		{ "slow-prefill-ms", required_argument, NULL, OPT_SLOW_PREFILL },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	unsigned u;
	int opt;

	*o = (struct opts){ .host = "127.0.0.1",
			    .port = DEFAULT_PORT,
			    .path = "/v1/chat/completions",
			    .requests = DEFAULT_REQUESTS,
			    .conns = 1,
			    .per_conn = 1,
			    .model = "ref",
			    .max_tokens = DEFAULT_MAX_TOKENS,
			    .prompt_bytes = DEFAULT_PROMPT_BYTES,
			    .token_ms = -1,
			    .prefill_ms = -1,
			    .abort_after = 1,
			    .timeout_s = DEFAULT_TIMEOUT_S };
	while ((opt = getopt_long(argc, argv, "n:c:k:o:h", longopts, NULL)) != -1) {
		bool ok = true;

		switch (opt) {
		case 'n':
			ok = parse_uint(optarg, 0, &o->requests);
			break;
		case 'c':
			ok = parse_uint(optarg, 1, &o->conns);
			break;
		case 'k':
			ok = parse_uint(optarg, 1, &o->per_conn);
			break;
		case 'o':
			o->out_path = optarg;
			break;
		case OPT_HOST:
			o->host = optarg;
			break;
		case OPT_PORT:
			ok = parse_uint(optarg, 1, &u) && u <= 65535;
			o->port = (int)u;
			break;
		case OPT_PATH:
			o->path = optarg;
			break;
		case OPT_MODEL:
			o->model = optarg;
			break;
		case OPT_MAX_TOKENS:
			ok = parse_uint(optarg, 0, &o->max_tokens);
			break;
		case OPT_USAGE:
			o->usage = true;
			break;
		case OPT_PROMPT_BYTES:
			ok = parse_uint(optarg, 0, &u);
			o->prompt_bytes = u;
			break;
		case OPT_TOKEN_MS:
			ok = parse_double(optarg, &o->token_ms);
			break;
		case OPT_PREFILL_MS:
			ok = parse_double(optarg, &o->prefill_ms);
			break;
		case OPT_ABORT_EVERY:
			ok = parse_uint(optarg, 1, &o->abort_every);
			break;
		case OPT_ABORT_AFTER:
			ok = parse_uint(optarg, 1, &o->abort_after);
			break;
		case OPT_HTTP_ERROR_EVERY:
			ok = parse_uint(optarg, 1, &o->http_error_every);
			break;
		case OPT_STREAM_ERROR_EVERY:
			ok = parse_uint(optarg, 1, &o->stream_error_every);
			break;
		case OPT_NO_STREAM_EVERY:
			ok = parse_uint(optarg, 1, &o->no_stream_every);
			break;
		case OPT_NDJSON:
			o->ndjson = true;
			break;
		case OPT_REALTIME:
			o->realtime = true;
			break;
		case OPT_CONNECT_AHEAD:
			ok = parse_double(optarg, &o->connect_ahead_ms);
			break;
		case OPT_STAGGER:
			ok = parse_double(optarg, &o->stagger_ms);
			break;
		case OPT_TLS:
			o->tls = true;
			break;
		case OPT_H2:
			o->h2 = true;
			break;
		case OPT_GRPC:
			o->grpc = o->h2 = true;
			break;
		case OPT_HEADER: {
			size_t have = strlen(o->headers);

			/* "NAME: VALUE" on one line, and room for it */
			ok = strchr(optarg, ':') && !strpbrk(optarg, "\r\n") &&
			     have + strlen(optarg) + 3 <= sizeof(o->headers);
			if (ok)
				snprintf(o->headers + have, sizeof(o->headers) - have, "%s\r\n",
					 optarg);
			break;
		}
		case OPT_HEADER_EVERY: {
			char *colon = strchr(optarg, ':');
			unsigned long m = strtoul(optarg, NULL, 10);

			ok = colon && m && strchr(colon + 1, ':') && !strpbrk(optarg, "\r\n") &&
			     strlen(colon + 1) + 3 <= sizeof(o->every_header[0].line) &&
			     o->nevery_headers < sizeof(o->every_header) / sizeof(o->every_header[0]);
			if (ok) {
				o->every_header[o->nevery_headers].every = (unsigned)m;
				snprintf(o->every_header[o->nevery_headers].line,
					 sizeof(o->every_header[0].line), "%s\r\n", colon + 1);
				o->nevery_headers++;
			}
			break;
		}
		case OPT_SLOW_EVERY:
			ok = parse_uint(optarg, 1, &o->slow_every);
			break;
		case OPT_UNIQUE_EVERY:
			ok = parse_uint(optarg, 1, &o->unique_every);
			break;
		case OPT_BODY_EVERY: {
			char *colon = strchr(optarg, ':'), *eq = colon ? strchr(colon, '=') : NULL;
			unsigned long m = strtoul(optarg, NULL, 10);
			unsigned k = o->nbody_fields;

			ok = colon && eq && m && k < sizeof(o->body_field) / sizeof(o->body_field[0]) &&
			     (size_t)(eq - colon - 1) < sizeof(o->body_field[0].key) &&
			     strlen(eq + 1) < sizeof(o->body_field[0].value);
			if (ok) {
				o->body_field[k].every = (unsigned)m;
				snprintf(o->body_field[k].key, sizeof(o->body_field[k].key), "%.*s",
					 (int)(eq - colon - 1), colon + 1);
				snprintf(o->body_field[k].value, sizeof(o->body_field[k].value), "%s",
					 eq + 1);
				o->nbody_fields++;
			}
			break;
		}
		case OPT_UNIQUE_HEADER:
			o->unique_header = optarg;
			ok = !strpbrk(optarg, ": \r\n") && strlen(optarg) < 100;
			break;
		case OPT_SLOW_PREFILL:
			ok = parse_double(optarg, &o->slow_prefill_ms);
			break;
		case OPT_TIMEOUT:
			ok = parse_double(optarg, &o->timeout_s) && o->timeout_s > 0;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
		if (!ok) {
			fprintf(stderr, "gtclient: bad value for option: %s\n", optarg);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

/* Plain ASCII words: nothing to escape, and a known byte count on the wire. */
static char *prompt_make(size_t n)
{
	static const char words[] = "the quick brown fox jumps over the lazy dog ";
	char *p = mem_realloc(NULL, n + 1);

	for (size_t i = 0; i < n; i++)
		p[i] = words[i % (sizeof(words) - 1)];
	p[n] = '\0';
	return p;
}

int main(int argc, char **argv)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct shared sh = { 0 };
	struct opts o;
	pthread_t *th;
	pthread_attr_t attr;
	struct rlimit rl;
	char port[16];
	unsigned nth, started = 0;
	int err;

	if (opts_parse(&o, argc, argv))
		return 2;
	sh.o = &o;
	/* -c 1000 needs more descriptors than the usual soft limit of 1024 */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	signal(SIGPIPE, SIG_IGN);
	snprintf(port, sizeof(port), "%d", o.port);
	err = getaddrinfo(o.host, port, &hints, &sh.ai);
	if (err) {
		fprintf(stderr, "gtclient: %s: %s\n", o.host, gai_strerror(err));
		return 1;
	}
	sh.out = o.out_path ? fopen(o.out_path, "w") : stdout;
	if (!sh.out) {
		fprintf(stderr, "gtclient: %s: %s\n", o.out_path, strerror(errno));
		return 1;
	}
	if (o.tls) {
		sh.tls = SSL_CTX_new(TLS_client_method());
		if (!sh.tls) {
			fprintf(stderr, "gtclient: --tls: cannot make a TLS context\n");
			return 1;
		}
		/* The test servers' certificates are their own: not checked. */
		SSL_CTX_set_verify(sh.tls, SSL_VERIFY_NONE, NULL);
	}
	sh.prompt = prompt_make(o.prompt_bytes);
	sh.ttft_ms = mem_realloc(NULL, (o.requests + 1) * sizeof(*sh.ttft_ms));
	pthread_mutex_init(&sh.lock, NULL);
	nth = o.conns < o.requests ? o.conns : o.requests;
	th = mem_realloc(NULL, (nth + 1) * sizeof(*th));
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, THREAD_STACK);
	pthread_barrier_init(&sh.start, NULL, nth ? nth : 1);
	for (unsigned i = 0; i < nth; i++) {
		err = pthread_create(&th[started], &attr, worker_run, &sh);
		if (err) {
			/* the others wait at the barrier for a thread that will never come */
			fprintf(stderr, "gtclient: pthread_create: %s (lower -c)\n", strerror(err));
			exit(1);
		}
		started++;
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_attr_destroy(&attr);
	pthread_barrier_destroy(&sh.start);
	summary_print(&sh);
	if (sh.out != stdout)
		fclose(sh.out);
	freeaddrinfo(sh.ai);
	SSL_CTX_free(sh.tls);
	free(sh.prompt);
	free(sh.ttft_ms);
	free(th);
	return 0;
}
