/* SPDX-License-Identifier: MIT */
/*
 * refserver: a reference OpenAI-compatible streaming server, the target of the demo, the
 * end-to-end tests and the benchmark.
 *
 * One thread runs an epoll loop over non-blocking sockets. Every response step (first content
 * frame, next token, non-streaming reply) is due at an absolute CLOCK_MONOTONIC time kept in a
 * min-heap, and a timerfd is armed at the earliest one: the gaps a tracer measures are the gaps
 * that were scheduled, and nothing ever sleeps in the loop.
 *
 * --pattern chooses how the bytes of a stream are cut into syscalls, reproducing the stacks
 * captured in tests/fixtures/, because the tracer must reassemble frames whatever the cut. Bytes a
 * socket does not take are kept and written on EPOLLOUT, so back-pressure changes the cut but never
 * the bytes.
 *
 * --gpu reproduces vLLM's process layout instead of timing tokens itself: this process stays the
 * API server and a child process (the engine, this binary exec'd again with --engine-fd) runs a
 * continuous-batching step loop that makes real CUDA runtime calls, so the tracer's CUDA uprobes
 * and its process-tree following can be tested without a GPU: the runtime loaded with dlopen
 * returns "no driver" for every call, but every call enters the function.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_MS 1000000ULL
#define NS_PER_US 1000ULL
#define NS_PER_S 1000000000ULL

/* The benchmark opens 1000+ connections at once; a short backlog would turn that into
 * SYN retries, which show up as seconds of fake latency. */
#define LISTEN_BACKLOG 4096
#define EPOLL_BATCH 256
#define READ_CHUNK 65536
/* A request head larger than this is refused with 431, as most servers do at 8-64 KiB. */
#define HEADER_MAX 65536
/* Large enough for prompts used to make prefill time depend on prompt length. */
#define BODY_MAX (64u << 20)
/*
 * asyncio's default transport high-water mark: above it uvicorn stops producing frames until
 * the socket drains. Without it a full-speed stream to a slow reader would grow without bound.
 */
#define OUT_HIGH_WATER 65536
#define DEFAULT_TOKENS 16
#define DEFAULT_MERGE 4
#define DEFAULT_PORT 8000
#define WORKERS_MAX 64
/* A rough bytes-per-token ratio for English text, only used to fill usage.prompt_tokens. */
#define BYTES_PER_PROMPT_TOKEN 4
/* Upper bound on max_tokens so that a typo cannot make one request run for days. */
#define MAX_TOKENS_LIMIT 1000000u
#define HEAP_NONE SIZE_MAX
/* Mixed pattern cycles through these, one request after another. */
#define MIXED_PATTERNS 4

/* --gpu: vLLM's default max_num_seqs is far larger; 8 keeps queueing visible in small tests. */
#define DEFAULT_MAX_BATCH 8
/* Roughly the kernels of one eager forward pass of a small model (a few per layer). */
#define DEFAULT_PREFILL_LAUNCHES 40
/* --engine-shape eager: kernels per layer (norms, projections, attention, MLP) and around the
 * layers (embedding, sampling). */
#define EAGER_PER_LAYER 6
#define EAGER_EXTRA 4
#define DEFAULT_CUDART "/usr/local/cuda/lib64/libcudart.so.13"
/*
 * tests/cudastub.c, for machines without a CUDA toolkit, looked for under .output/ and next to
 * this binary. The Makefile names it like the runtime, which is how the tracer recognises it.
 */
#define STANDIN_MAKE "standin/libcudart.so.13"
#define STANDIN_CC "libcudart-standin.so"
#define STANDIN_BUILD "make .output/" STANDIN_MAKE
/* cudaMemcpyDeviceToHost in enum cudaMemcpyKind */
#define CUDA_MEMCPY_D2H 2
/* A decode step copies one sampled token id (int32) per request back to the host. */
#define D2H_BYTES_PER_REQ 4
/* Loading the runtime takes milliseconds; a stuck dlopen must not hang the test forever. */
#define ENGINE_READY_TIMEOUT_MS 30000
/* comm of the engine process (15 characters at most), as vLLM renames its EngineCore. */
#define ENGINE_COMM "refengine"

enum pattern { PAT_SINGLE, PAT_WRITEV, PAT_MERGED, PAT_SPLIT, PAT_MIXED };
enum wsys { WSYS_WRITE, WSYS_SEND, WSYS_SENDTO, WSYS_SENDMSG, WSYS_WRITEV };
enum rsys { RSYS_READ, RSYS_RECV, RSYS_RECVFROM, RSYS_RECVMSG, RSYS_READV };
enum api { API_CHAT, API_COMPLETIONS };
enum fail { FAIL_NONE, FAIL_HTTP, FAIL_STREAM };

enum phase {
	PH_IDLE,   /* reading the next request */
	PH_QUEUED, /* waiting in the FIFO for a generation slot (--max-streams) */
	PH_GEN,	   /* generating: a timer is due or the stream is paused by back-pressure */
};

struct buf {
	char *p;
	size_t off; /* bytes before off are consumed */
	size_t len;
	size_t cap;
};

struct opts {
	const char *host;
	int port;
	unsigned tokens;
	double prefill_ms;
	double prefill_us_per_byte;
	double token_ms;
	double jitter_ms;
	unsigned max_streams; /* 0: unlimited */
	enum pattern pattern;
	unsigned merge;
	enum wsys wsys;
	enum rsys rsys;
	bool stats;
	bool skip_garbage;
	unsigned workers; /* processes sharing the port; 0 or 1: this one alone */
	uint64_t seed;
	bool gpu;
	double engine_delay_ms;
	double api_delay_ms; /* --api-delay-ms: --gpu, the API process's work before each token */
	bool engine_on_request; /* --engine-on-request: the engine starts with the first request */
	const char *cudart;
	const char *gpu_log;
	unsigned max_batch;
	unsigned prefill_launches;
	/* --engine-shape: how the engine launches a step's work; --layers: the model's layers
	 * (piecewise and eager shapes); --graph-max-batch: decode steps of more requests run
	 * eagerly (graph and piecewise shapes: no graph captured for that size; 0: none) */
	enum eng_shape { SHAPE_GRAPH, SHAPE_PIECEWISE, SHAPE_EAGER } shape;
	unsigned layers, graph_max_batch;
	unsigned preempt_every, preempt_steps; /* --preempt-every, --preempt-steps */
	unsigned prefill_chunks, hold_steps;   /* --prefill-chunks, --hold-steps */
	int engine_fd; /* >= 0: this process is the engine (internal, set by the API process) */
	/* --prefix-cache MODE: a prompt seen before is read from the cache (its per-byte prefill
	 * skipped, all its tokens cached); usage says so as MODE asks. PREFIX_NONE: no cache. */
	enum prefix_mode { PREFIX_NONE, PREFIX_REPORT, PREFIX_HIDE, PREFIX_SGLANG } prefix;
};

struct req {
	enum api api;
	enum pattern pattern;
	enum wsys wsys;
	enum fail fail;
	bool stream;
	bool include_usage;
	bool keep_alive;
	unsigned max_tokens;
	unsigned prompt_tokens;
	unsigned cached_tokens;	  /* --prefix-cache: the prompt's tokens read from the cache */
	enum prefix_mode prefix; /* how usage reports them */
	unsigned sent;		  /* content frames generated so far */
	unsigned fail_at;
	uint64_t prefill_ns;
	uint64_t token_ns;
	uint64_t due;
	uint64_t id;
	long created;
	char *model_json; /* already quoted and escaped */
	struct buf hdrs;  /* writev pattern: headers wait for the first frame, as in Node */
	bool hdrs_pending;
	struct buf batch; /* merged pattern: frames waiting for one write */
	unsigned batched;
	unsigned split_seq;
	/* --gpu: the engine generates; these feed the ground-truth log */
	bool gpu;		/* submitted to the engine, not yet logged */
	bool in_engine;		/* the engine may still report tokens for it */
	unsigned engine_tokens; /* tokens the engine reported */
	unsigned seq;		/* index of the request on its connection */
	uint64_t prompt_bytes;
	uint64_t arrival_ns;
	uint64_t prefill_step;
	uint64_t write_ns; /* taken right before the latest write of this response */
	uint64_t *tok_ns;  /* per content frame: write_ns of the write that carried it */
	unsigned tok_n, tok_cap;
	const char *outcome;
};

/* --gpu: when a read ended and how many bytes the connection had received by then */
struct read_mark {
	uint64_t end;
	uint64_t ns;
};

struct conn {
	int fd;
	enum phase phase;
	bool dead;
	bool watch_out;
	bool close_after_flush;
	bool continue_sent;
	bool active; /* holds a generation slot */
	bool paused; /* back-pressure: timer not armed until the socket drains */
	size_t heap_idx;
	struct buf in;
	struct buf out;
	struct req r;
	struct conn *q_next, *q_prev;
	struct conn *all_next, *all_prev;
	struct conn *dead_next;
	/* --gpu */
	struct conn *map_next; /* request id -> connection, for the engine's token reports */
	unsigned port;	       /* the client's TCP port */
	unsigned nreq;	       /* requests started on this connection */
	uint64_t in_total;     /* bytes received */
	uint64_t in_used;      /* bytes consumed by parsed requests */
	struct read_mark *marks;
	size_t nmarks, marks_cap;
};

struct stats {
	uint64_t frames;
	uint64_t bytes;
	uint64_t streams;
	uint64_t aborted;
};

/*
 * API process <-> engine messages over a SOCK_STREAM socketpair, fixed size so a reader cuts
 * them without framing. The engine sends one token message per request per step, all of a
 * step's in one write.
 */
enum eng_type {
	ENG_READY = 1, /* engine -> API: runtime loaded, serving */
	ENG_ADD,       /* API -> engine: id, max_tokens, arg = prompt bytes */
	ENG_ABORT,     /* API -> engine: id; the client left or the stream failed */
	ENG_TOKEN,     /* engine -> API: id, arg = step that produced it */
};

struct eng_msg {
	uint32_t type;
	uint32_t max_tokens;
	uint64_t id;
	uint64_t arg;
};
_Static_assert(sizeof(struct eng_msg) == 24, "eng_msg is sent as raw bytes");

/* The API process's side of --gpu. */
struct gpu_link {
	int fd;	      /* our end of the socketpair */
	int child_fd; /* the engine's end, until it is spawned */
	int tfd;      /* --engine-delay-ms: fires when the engine is due */
	int log_fd;   /* --gpu-log, shared with the engine, O_APPEND */
	pid_t pid;
	bool watch_out;
	struct buf in, out, line;
	struct conn **map; /* chained hash of requests the engine works on, by id */
	size_t map_cap, map_len;
	int argc; /* our command line, passed on to the engine */
	char **argv;
};

struct server {
	struct opts o;
	int lfd, efd, tfd, sfd;
	struct conn **heap;
	size_t heap_len, heap_cap;
	struct conn **fired;
	size_t fired_cap;
	struct conn *q_head, *q_tail;
	struct conn *all;
	struct conn *dead;
	unsigned active;
	uint64_t armed;
	uint64_t rng;
	uint64_t req_seq;
	struct buf frame, chunk, flat, head;
	struct stats st;
	struct gpu_link gpu;
	pid_t *workers; /* --workers: the ones this process forked */
	unsigned nworkers;
	bool is_worker; /* forked by --workers: says nothing on stdout */
	bool exiting;
	bool failed;
};

static const char CRLF[] = "\r\n";
static const char TERMINATOR[] = "0\r\n\r\n";
static const char DONE_FRAME[] = "data: [DONE]\n\n";
static const char ERROR_FRAME[] =
    "data: {\"error\":{\"message\":\"injected\",\"type\":\"server_error\",\"code\":500}}\n\n";
static const char ERROR_BODY[] = "{\"error\":{\"message\":\"injected\",\"type\":\"server_error\","
				 "\"code\":500}}";

static uint64_t clock_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* A test server has nothing sensible to do without memory; dying loudly beats limping. */
static void *mem_realloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (!p) {
		fprintf(stderr, "refserver: out of memory\n");
		exit(1);
	}
	return p;
}

static void buf_reserve(struct buf *b, size_t extra)
{
	if (b->off && b->off == b->len)
		b->off = b->len = 0;
	if (b->len + extra <= b->cap)
		return;
	/* Reclaim the consumed head before growing. */
	if (b->off) {
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->len + extra <= b->cap)
			return;
	}
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra)
		cap *= 2;
	b->p = mem_realloc(b->p, cap);
	b->cap = cap;
}

static void buf_append(struct buf *b, const void *d, size_t n)
{
	buf_reserve(b, n);
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void buf_appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_appendf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	buf_reserve(b, 128);
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t)n < b->cap - b->len)
			break;
		buf_reserve(b, (size_t)n + 1);
	}
	b->len += (size_t)n;
}

static size_t buf_pending(const struct buf *b)
{
	return b->len - b->off;
}

static void buf_consume(struct buf *b, size_t n)
{
	b->off += n;
	if (b->off == b->len)
		b->off = b->len = 0;
}

static void buf_reset(struct buf *b)
{
	b->off = b->len = 0;
}

static void buf_free(struct buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* xorshift64*: reproducible with --seed, which makes split offsets and jitter replayable. */
static uint64_t rng_next(struct server *s)
{
	s->rng ^= s->rng >> 12;
	s->rng ^= s->rng << 25;
	s->rng ^= s->rng >> 27;
	return s->rng * 0x2545F4914F6CDD1DULL;
}

static uint64_t ms_to_ns(double ms)
{
	return ms <= 0 ? 0 : (uint64_t)(ms * (double)NS_PER_MS + 0.5);
}

static uint64_t token_delay(struct server *s, const struct req *r)
{
	uint64_t j = ms_to_ns(s->o.jitter_ms);

	return r->token_ns + (j ? rng_next(s) % (j + 1) : 0);
}

/* ---- timer heap: one entry per generating connection, keyed by its next due time ---- */

static void heap_set(struct server *s, size_t i, struct conn *c)
{
	s->heap[i] = c;
	c->heap_idx = i;
}

static void heap_up(struct server *s, size_t i)
{
	struct conn *c = s->heap[i];

	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (s->heap[p]->r.due <= c->r.due)
			break;
		heap_set(s, i, s->heap[p]);
		i = p;
	}
	heap_set(s, i, c);
}

static void heap_down(struct server *s, size_t i)
{
	struct conn *c = s->heap[i];

	for (;;) {
		size_t l = 2 * i + 1, m = i;
		uint64_t best = c->r.due;

		if (l < s->heap_len && s->heap[l]->r.due < best) {
			m = l;
			best = s->heap[l]->r.due;
		}
		if (l + 1 < s->heap_len && s->heap[l + 1]->r.due < best)
			m = l + 1;
		if (m == i)
			break;
		heap_set(s, i, s->heap[m]);
		i = m;
	}
	heap_set(s, i, c);
}

static void heap_push(struct server *s, struct conn *c)
{
	if (c->heap_idx != HEAP_NONE)
		return;
	if (s->heap_len == s->heap_cap) {
		s->heap_cap = s->heap_cap ? s->heap_cap * 2 : 64;
		s->heap = mem_realloc(s->heap, s->heap_cap * sizeof(*s->heap));
	}
	heap_set(s, s->heap_len++, c);
	heap_up(s, c->heap_idx);
}

static void heap_remove(struct server *s, struct conn *c)
{
	size_t i = c->heap_idx;
	struct conn *last;

	if (i == HEAP_NONE)
		return;
	c->heap_idx = HEAP_NONE;
	last = s->heap[--s->heap_len];
	if (i == s->heap_len)
		return;
	heap_set(s, i, last);
	heap_up(s, i);
	heap_down(s, last->heap_idx);
}

static struct conn *heap_pop(struct server *s)
{
	struct conn *c = s->heap[0];

	heap_remove(s, c);
	return c;
}

/* ---- FIFO of requests waiting for a generation slot ---- */

static void queue_push(struct server *s, struct conn *c)
{
	c->q_next = NULL;
	c->q_prev = s->q_tail;
	if (s->q_tail)
		s->q_tail->q_next = c;
	else
		s->q_head = c;
	s->q_tail = c;
}

static void queue_remove(struct server *s, struct conn *c)
{
	if (c->q_prev)
		c->q_prev->q_next = c->q_next;
	else
		s->q_head = c->q_next;
	if (c->q_next)
		c->q_next->q_prev = c->q_prev;
	else
		s->q_tail = c->q_prev;
	c->q_next = c->q_prev = NULL;
}

/* ---- socket I/O with the syscall chosen on the command line ---- */

static ssize_t sock_write(struct server *s, struct conn *c, struct iovec *iov, int cnt)
{
	const void *p = iov[0].iov_base;
	size_t n = iov[0].iov_len;

	switch (c->r.wsys) {
	case WSYS_WRITEV:
		return writev(c->fd, iov, cnt);
	case WSYS_SENDMSG: {
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)cnt };

		return sendmsg(c->fd, &m, MSG_NOSIGNAL);
	}
	default:
		break;
	}
	if (cnt > 1) {
		buf_reset(&s->flat);
		for (int i = 0; i < cnt; i++)
			buf_append(&s->flat, iov[i].iov_base, iov[i].iov_len);
		p = s->flat.p;
		n = s->flat.len;
	}
	switch (c->r.wsys) {
	case WSYS_SEND:
		return send(c->fd, p, n, MSG_NOSIGNAL);
	case WSYS_SENDTO:
		return sendto(c->fd, p, n, MSG_NOSIGNAL, NULL, 0);
	default:
		return write(c->fd, p, n);
	}
}

static ssize_t sock_read(struct server *s, struct conn *c, void *p, size_t n)
{
	struct iovec iov = { .iov_base = p, .iov_len = n };

	switch (s->o.rsys) {
	case RSYS_RECV:
		return recv(c->fd, p, n, 0);
	case RSYS_RECVFROM:
		return recvfrom(c->fd, p, n, 0, NULL, NULL);
	case RSYS_RECVMSG: {
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };

		return recvmsg(c->fd, &m, 0);
	}
	case RSYS_READV:
		return readv(c->fd, &iov, 1);
	default:
		return read(c->fd, p, n);
	}
}

static void conn_watch_out(struct server *s, struct conn *c, bool on)
{
	struct epoll_event ev = { .events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c };

	if (c->watch_out == on)
		return;
	c->watch_out = on;
	epoll_ctl(s->efd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void stream_admit(struct server *s, struct conn *c);
static void gpu_request_end(struct server *s, struct conn *c, const char *outcome);

/* Gives the generation slot back and starts the longest-waiting request, if any. */
static void slot_release(struct server *s, struct conn *c)
{
	if (!c->active)
		return;
	c->active = false;
	s->active--;
	while (s->q_head && (!s->o.max_streams || s->active < s->o.max_streams)) {
		struct conn *n = s->q_head;

		queue_remove(s, n);
		stream_admit(s, n);
	}
}

/*
 * Closes now; memory is freed after the current loop iteration because the epoll batch or
 * the fired-timer list may still point at c.
 */
static void conn_kill(struct server *s, struct conn *c)
{
	if (c->dead)
		return;
	c->dead = true;
	/* A client that leaves while its stream is queued or generating aborted it. */
	if (c->phase != PH_IDLE && c->r.stream)
		s->st.aborted++;
	gpu_request_end(s, c, "aborted");
	heap_remove(s, c);
	if (c->phase == PH_QUEUED)
		queue_remove(s, c);
	epoll_ctl(s->efd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	slot_release(s, c);
	c->dead_next = s->dead;
	s->dead = c;
}

static bool write_would_block(int err)
{
	return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

/*
 * Hands iov to the socket in one syscall, or queues it behind bytes still waiting for
 * EPOLLOUT so the order on the wire is kept. Returns false once the connection is gone.
 */
static bool conn_emit(struct server *s, struct conn *c, struct iovec *iov, int cnt)
{
	size_t total = 0, done = 0;

	if (c->dead)
		return false;
	for (int i = 0; i < cnt; i++)
		total += iov[i].iov_len;
	if (s->o.gpu)
		c->r.write_ns = clock_mono_ns();
	if (!buf_pending(&c->out)) {
		ssize_t n = sock_write(s, c, iov, cnt);

		if (n < 0 && !write_would_block(errno)) {
			/* EPIPE/ECONNRESET: the client left mid-stream; end it quietly. */
			conn_kill(s, c);
			return false;
		}
		done = n > 0 ? (size_t)n : 0;
		s->st.bytes += done;
	}
	if (done == total)
		return true;
	for (int i = 0; i < cnt; i++) {
		size_t l = iov[i].iov_len;

		if (done >= l) {
			done -= l;
			continue;
		}
		buf_append(&c->out, (char *)iov[i].iov_base + done, l - done);
		done = 0;
	}
	conn_watch_out(s, c, true);
	return true;
}

static bool conn_emit_one(struct server *s, struct conn *c, const void *p, size_t n)
{
	struct iovec iov = { .iov_base = (void *)p, .iov_len = n };

	return conn_emit(s, c, &iov, 1);
}

static void stream_resume(struct server *s, struct conn *c)
{
	if (c->paused && buf_pending(&c->out) <= OUT_HIGH_WATER) {
		c->paused = false;
		heap_push(s, c);
	}
}

static void conn_flush(struct server *s, struct conn *c)
{
	while (buf_pending(&c->out)) {
		struct iovec iov = { .iov_base = c->out.p + c->out.off,
				     .iov_len = buf_pending(&c->out) };
		ssize_t n = sock_write(s, c, &iov, 1);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			conn_kill(s, c);
			return;
		}
		s->st.bytes += (size_t)n;
		buf_consume(&c->out, (size_t)n);
	}
	if (buf_pending(&c->out)) {
		stream_resume(s, c);
		return;
	}
	conn_watch_out(s, c, false);
	if (c->close_after_flush) {
		conn_kill(s, c);
		return;
	}
	stream_resume(s, c);
}

/* ---- response framing per write pattern ---- */

static void chunk_build(struct buf *b, const char *frame, size_t len)
{
	buf_appendf(b, "%zx\r\n", len);
	buf_append(b, frame, len);
	buf_append(b, CRLF, 2);
}

/*
 * Writes one chunk in 2 or 3 syscalls. The cuts move from frame to frame and land inside the
 * chunk-size line, inside "data: " and inside the JSON, the places where a reassembler that
 * assumes whole frames per write breaks.
 */
static bool emit_split(struct server *s, struct conn *c, const char *p, size_t n, size_t json_at)
{
	unsigned seq = c->r.split_seq++;
	size_t cuts[2], ncuts, hexlen = json_at - 8, at = 0;

	if (n < 16)
		return conn_emit_one(s, c, p, n);
	if (seq & 1) {
		cuts[0] = 1 + rng_next(s) % (hexlen + 1);
		cuts[1] = json_at + 1 + rng_next(s) % (n - json_at - 6);
		ncuts = 2;
	} else {
		switch ((seq / 2) % 3) {
		case 0:
			cuts[0] = 1 + rng_next(s) % (hexlen + 1);
			break;
		case 1:
			cuts[0] = json_at + 1 + rng_next(s) % (n - json_at - 6);
			break;
		default:
			cuts[0] = json_at - 6 + 1 + rng_next(s) % 5;
			break;
		}
		ncuts = 1;
	}
	for (size_t i = 0; i <= ncuts; i++) {
		size_t end = i < ncuts ? cuts[i] : n;

		if (end <= at)
			continue;
		if (!conn_emit_one(s, c, p + at, end - at))
			return false;
		at = end;
	}
	return true;
}

/* Emits one SSE frame ("data: ...\n\n") as an HTTP chunk, cut as the pattern says. */
static bool emit_frame(struct server *s, struct conn *c, const char *frame, size_t len)
{
	struct req *r = &c->r;
	char hex[24];
	int hl;

	s->st.frames++;
	switch (r->pattern) {
	case PAT_WRITEV: {
		struct iovec iov[5];
		int i = 0;

		hl = snprintf(hex, sizeof(hex), "%zx", len);
		if (r->hdrs_pending) {
			iov[i++] = (struct iovec){ r->hdrs.p, r->hdrs.len };
			r->hdrs_pending = false;
		}
		iov[i++] = (struct iovec){ hex, (size_t)hl };
		iov[i++] = (struct iovec){ (void *)CRLF, 2 };
		iov[i++] = (struct iovec){ (void *)frame, len };
		iov[i++] = (struct iovec){ (void *)CRLF, 2 };
		return conn_emit(s, c, iov, i);
	}
	case PAT_MERGED:
		chunk_build(&r->batch, frame, len);
		r->batched++;
		return true;
	case PAT_SPLIT:
		buf_reset(&s->chunk);
		chunk_build(&s->chunk, frame, len);
		/* "data: " starts after the size line; the JSON 6 bytes later. */
		return emit_split(s, c, s->chunk.p, s->chunk.len, s->chunk.len - len - 2 + 6);
	default:
		buf_reset(&s->chunk);
		chunk_build(&s->chunk, frame, len);
		return conn_emit_one(s, c, s->chunk.p, s->chunk.len);
	}
}

/* --gpu: content frames handed to the socket since the last call went out with write_ns. */
static void req_stamp_tokens(struct req *r)
{
	if (r->tok_cap < r->sent) {
		r->tok_cap = r->sent < 16 ? 16 : r->sent * 2;
		r->tok_ns = mem_realloc(r->tok_ns, r->tok_cap * sizeof(*r->tok_ns));
	}
	while (r->tok_n < r->sent)
		r->tok_ns[r->tok_n++] = r->write_ns;
}

static bool batch_flush(struct server *s, struct conn *c)
{
	struct req *r = &c->r;
	bool ok = true;

	if (r->batch.len)
		ok = conn_emit_one(s, c, r->batch.p, r->batch.len);
	if (ok && s->o.gpu)
		req_stamp_tokens(r);
	if (!c->dead) {
		buf_reset(&r->batch);
		r->batched = 0;
	}
	return ok;
}

/* [DONE] then the chunked terminator: together in one writev for Node, apart for h11. */
static bool emit_done(struct server *s, struct conn *c)
{
	struct req *r = &c->r;
	size_t dl = sizeof(DONE_FRAME) - 1, tl = sizeof(TERMINATOR) - 1;

	switch (r->pattern) {
	case PAT_WRITEV: {
		struct iovec iov[6];
		char hex[24];
		int i = 0, hl = snprintf(hex, sizeof(hex), "%zx", dl);

		s->st.frames++;
		if (r->hdrs_pending) {
			iov[i++] = (struct iovec){ r->hdrs.p, r->hdrs.len };
			r->hdrs_pending = false;
		}
		iov[i++] = (struct iovec){ hex, (size_t)hl };
		iov[i++] = (struct iovec){ (void *)CRLF, 2 };
		iov[i++] = (struct iovec){ (void *)DONE_FRAME, dl };
		iov[i++] = (struct iovec){ (void *)CRLF, 2 };
		iov[i++] = (struct iovec){ (void *)TERMINATOR, tl };
		return conn_emit(s, c, iov, i);
	}
	case PAT_MERGED:
		emit_frame(s, c, DONE_FRAME, dl);
		buf_append(&r->batch, TERMINATOR, tl);
		return batch_flush(s, c);
	default:
		if (!emit_frame(s, c, DONE_FRAME, dl))
			return false;
		return conn_emit_one(s, c, TERMINATOR, tl);
	}
}

static void frame_begin(struct buf *b, const struct req *r)
{
	bool chat = r->api == API_CHAT;

	buf_reset(b);
	buf_appendf(
	    b, "data: {\"id\":\"%s-%" PRIu64 "\",\"object\":\"%s\",\"created\":%ld,\"model\":%s,",
	    chat ? "chatcmpl" : "cmpl", r->id, chat ? "chat.completion.chunk" : "text_completion",
	    r->created, r->model_json);
}

static bool emit_role(struct server *s, struct conn *c)
{
	struct buf *b = &s->frame;

	frame_begin(b, &c->r);
	buf_appendf(b,
		    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
		    "\"logprobs\":null,\"finish_reason\":null}]}\n\n");
	return emit_frame(s, c, b->p, b->len);
}

static bool emit_content(struct server *s, struct conn *c)
{
	struct buf *b = &s->frame;
	struct req *r = &c->r;

	frame_begin(b, r);
	if (r->api == API_CHAT)
		buf_appendf(b,
			    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%u \"},"
			    "\"logprobs\":null,\"finish_reason\":null}]}\n\n",
			    r->sent);
	else
		buf_appendf(
		    b,
		    "\"choices\":[{\"index\":0,\"text\":\"tok%u \",\"finish_reason\":null}]}\n\n",
		    r->sent);
	return emit_frame(s, c, b->p, b->len);
}

/* The usage object; its cached tokens as --prefix-cache reports them: always (as vLLM with
 * --enable-prompt-tokens-details), never (its default), or null for none (SGLang's
 * --enable-cache-report). */
static void usage_append(struct buf *b, const struct req *r)
{
	buf_appendf(b, "\"usage\":{\"prompt_tokens\":%u,\"completion_tokens\":%u,\"total_tokens\":%u",
		    r->prompt_tokens, r->max_tokens, r->prompt_tokens + r->max_tokens);
	if (r->prefix == PREFIX_HIDE)
		buf_appendf(b, "}");
	else if (r->prefix == PREFIX_SGLANG && !r->cached_tokens)
		buf_appendf(b, ",\"prompt_tokens_details\":null}");
	else
		buf_appendf(b, ",\"prompt_tokens_details\":{\"cached_tokens\":%u}}",
			    r->cached_tokens);
}

static void response_done(struct server *s, struct conn *c);

static void stream_finish(struct server *s, struct conn *c)
{
	struct buf *b = &s->frame;
	struct req *r = &c->r;

	frame_begin(b, r);
	if (r->api == API_CHAT)
		buf_appendf(b, "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,"
			       "\"finish_reason\":\"length\"}]}\n\n");
	else
		buf_appendf(
		    b,
		    "\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n");
	if (!emit_frame(s, c, b->p, b->len))
		return;
	if (r->include_usage) {
		frame_begin(b, r);
		buf_appendf(b, "\"choices\":[],");
		usage_append(b, r);
		buf_appendf(b, "}\n\n");
		if (!emit_frame(s, c, b->p, b->len))
			return;
	}
	if (emit_done(s, c))
		response_done(s, c);
}

static void stream_fail(struct server *s, struct conn *c)
{
	c->r.outcome = "stream_error";
	if (!emit_frame(s, c, ERROR_FRAME, sizeof(ERROR_FRAME) - 1))
		return;
	if (emit_done(s, c))
		response_done(s, c);
}

/* A complete response with Content-Length: errors and non-streaming completions. */
static void reply_plain(struct server *s, struct conn *c, const char *status, const char *body,
			size_t len)
{
	struct req *r = &c->r;
	struct buf *h = &s->chunk;
	struct iovec iov[2];

	buf_reset(h);
	buf_appendf(
	    h, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s\r\n",
	    status, len, r->keep_alive ? "" : "Connection: close\r\n");
	iov[0] = (struct iovec){ h->p, h->len };
	iov[1] = (struct iovec){ (void *)body, len };
	switch (r->pattern) {
	case PAT_WRITEV:
	case PAT_MERGED:
		if (!conn_emit(s, c, iov, 2))
			return;
		break;
	default:
		if (!conn_emit(s, c, &iov[0], 1) || !conn_emit(s, c, &iov[1], 1))
			return;
	}
	response_done(s, c);
}

static void reply_error(struct server *s, struct conn *c, const char *status, int code,
			const char *msg, bool keep)
{
	char body[256];
	int n = snprintf(body, sizeof(body),
			 "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\","
			 "\"code\":%d}}",
			 msg, code);

	c->r.keep_alive = c->r.keep_alive && keep;
	reply_plain(s, c, status, body, (size_t)n);
}

static void reply_full(struct server *s, struct conn *c)
{
	struct req *r = &c->r;
	struct buf *b = &s->frame;
	bool chat = r->api == API_CHAT;

	buf_reset(b);
	buf_appendf(b, "{\"id\":\"%s-%" PRIu64 "\",\"object\":\"%s\",\"created\":%ld,\"model\":%s,",
		    chat ? "chatcmpl" : "cmpl", r->id, chat ? "chat.completion" : "text_completion",
		    r->created, r->model_json);
	buf_appendf(b, chat ? "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
			      "\"content\":\""
			    : "\"choices\":[{\"index\":0,\"text\":\"");
	for (unsigned i = 0; i < r->max_tokens; i++)
		buf_appendf(b, "tok%u ", i);
	buf_appendf(b, chat ? "\"},\"logprobs\":null,\"finish_reason\":\"length\"}],"
			    : "\",\"logprobs\":null,\"finish_reason\":\"length\"}],");
	usage_append(b, r);
	buf_append(b, "}", 1);
	reply_plain(s, c, "200 OK", b->p, b->len);
}

/* ---- request lifecycle ---- */

static void stream_headers(struct server *s, struct conn *c)
{
	struct req *r = &c->r;
	struct buf *h = &r->hdrs;

	buf_reset(h);
	buf_appendf(
	    h,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
	    "Transfer-Encoding: chunked\r\n%s\r\n",
	    r->keep_alive ? "" : "Connection: close\r\n");
	switch (r->pattern) {
	case PAT_WRITEV:
		r->hdrs_pending = true;
		break;
	case PAT_MERGED:
		buf_append(&r->batch, h->p, h->len);
		break;
	default:
		conn_emit_one(s, c, h->p, h->len);
	}
}

static void gpu_submit(struct server *s, struct conn *c);

static void stream_admit(struct server *s, struct conn *c)
{
	struct req *r = &c->r;
	uint64_t now = clock_mono_ns();

	c->active = true;
	s->active++;
	c->phase = PH_GEN;
	r->due = now + r->prefill_ns;
	if (!r->stream && s->o.gpu) {
		gpu_submit(s, c);
		return;
	}
	if (!r->stream) {
		for (unsigned i = 0; i < r->max_tokens; i++)
			r->due += token_delay(s, r);
		heap_push(s, c);
		return;
	}
	s->st.streams++;
	stream_headers(s, c);
	/* vLLM sends the role frame as soon as the request is scheduled, before prefill ends. */
	if (r->api == API_CHAT && !c->dead) {
		emit_role(s, c);
		if (r->pattern == PAT_MERGED)
			batch_flush(s, c);
	}
	if (c->dead)
		return;
	if (s->o.gpu)
		gpu_submit(s, c);
	else
		heap_push(s, c);
}

/* Runs when c's due time has come: the next frame(s), or the whole non-streaming reply. */
static void stream_tick(struct server *s, struct conn *c, uint64_t now)
{
	struct req *r = &c->r;
	bool first = true;

	if (!r->stream) {
		reply_full(s, c);
		return;
	}
	for (;;) {
		if (r->fail == FAIL_STREAM && r->sent == r->fail_at) {
			stream_fail(s, c);
			return;
		}
		if (r->sent >= r->max_tokens) {
			stream_finish(s, c);
			return;
		}
		/* merged: keep adding frames that are already due, up to --merge per write */
		if (!first &&
		    (r->pattern != PAT_MERGED || r->batched >= s->o.merge || r->due > now))
			break;
		first = false;
		if (!emit_content(s, c))
			return;
		r->sent++;
		r->due += token_delay(s, r);
	}
	if (r->pattern == PAT_MERGED && r->batched >= s->o.merge && !batch_flush(s, c))
		return;
	if (buf_pending(&c->out) > OUT_HIGH_WATER)
		c->paused = true;
	else
		heap_push(s, c);
}

static void req_clear(struct req *r)
{
	free(r->model_json);
	r->model_json = NULL;
	buf_free(&r->hdrs);
	buf_free(&r->batch);
	r->batched = 0;
	r->hdrs_pending = false;
	free(r->tok_ns);
	r->tok_ns = NULL;
	r->tok_n = r->tok_cap = 0;
}

static void conn_process_input(struct server *s, struct conn *c);

static void response_done(struct server *s, struct conn *c)
{
	bool keep = c->r.keep_alive;

	gpu_request_end(s, c, c->r.outcome ? c->r.outcome : "ok");
	heap_remove(s, c);
	c->paused = false;
	c->phase = PH_IDLE;
	req_clear(&c->r);
	slot_release(s, c);
	if (c->dead)
		return;
	if (!keep) {
		c->close_after_flush = true;
		if (!buf_pending(&c->out))
			conn_kill(s, c);
		return;
	}
	conn_process_input(s, c);
}

static size_t json_text_len(const cJSON *v)
{
	size_t n = 0;
	const cJSON *e;

	if (cJSON_IsString(v))
		return strlen(v->valuestring);
	/* content parts ([{"type":"text","text":..}]) and prompt arrays */
	cJSON_ArrayForEach(e, v)
	{
		if (cJSON_IsString(e))
			n += strlen(e->valuestring);
		else
			n += json_text_len(cJSON_GetObjectItemCaseSensitive(e, "text"));
	}
	return n;
}

/* --prefix-cache: whether this prompt (the messages or the prompt, as sent) was seen before;
 * it is remembered now. A table of PREFIX_SLOTS hashes, the oldest overwritten. */
#define PREFIX_SLOTS 4096
static bool prefix_cached(struct server *s, const cJSON *body, enum api api)
{
	static uint64_t seen[PREFIX_SLOTS];
	static unsigned next;
	char *text = cJSON_PrintUnformatted(
	    cJSON_GetObjectItemCaseSensitive(body, api == API_CHAT ? "messages" : "prompt"));
	uint64_t h = 1469598103934665603ull;

	(void)s;
	if (!text)
		return false;
	for (const char *p = text; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	free(text);
	for (unsigned i = 0; i < PREFIX_SLOTS; i++)
		if (seen[i] == h)
			return true;
	seen[next++ % PREFIX_SLOTS] = h;
	return false;
}

/* Fills c->r from the JSON body. Returns a message for a 400 reply, or NULL. */
static const char *req_parse(struct server *s, struct conn *c, const char *body, size_t len)
{
	struct req *r = &c->r;
	cJSON *j = cJSON_ParseWithLength(body, len), *v, *m;
	size_t prompt_bytes = 0;
	const char *err = NULL;

	if (!cJSON_IsObject(j)) {
		err = "body is not a JSON object";
		goto out;
	}
	v = cJSON_GetObjectItemCaseSensitive(j, "model");
	r->model_json = cJSON_IsString(v) ? cJSON_PrintUnformatted(v) : strdup("\"ref\"");
	r->stream = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "stream"));
	v = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
	r->max_tokens = s->o.tokens;
	if (cJSON_IsNumber(v)) {
		if (v->valuedouble < 0 || v->valuedouble > MAX_TOKENS_LIMIT) {
			err = "max_tokens out of range";
			goto out;
		}
		r->max_tokens = (unsigned)v->valuedouble;
	}
	v = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
	r->include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "include_usage"));
	if (r->api == API_CHAT) {
		v = cJSON_GetObjectItemCaseSensitive(j, "messages");
		cJSON_ArrayForEach(m, v)
		{
			prompt_bytes +=
			    json_text_len(cJSON_GetObjectItemCaseSensitive(m, "content"));
		}
	} else {
		prompt_bytes = json_text_len(cJSON_GetObjectItemCaseSensitive(j, "prompt"));
	}
	r->prompt_tokens = (unsigned)(prompt_bytes / BYTES_PER_PROMPT_TOKEN);
	r->prompt_bytes = prompt_bytes;
	r->prefix = s->o.prefix;
	v = cJSON_GetObjectItemCaseSensitive(j, "x_prefill_ms");
	r->prefill_ns = ms_to_ns(cJSON_IsNumber(v) ? v->valuedouble : s->o.prefill_ms);
	if (s->o.prefix && prefix_cached(s, j, r->api))
		r->cached_tokens = r->prompt_tokens;
	else
		r->prefill_ns +=
		    (uint64_t)(s->o.prefill_us_per_byte * (double)prompt_bytes * NS_PER_US);
	if (s->o.prefix)
		printf("cache port=%u hit=%d\n", c->port, r->cached_tokens > 0), fflush(stdout);
	v = cJSON_GetObjectItemCaseSensitive(j, "x_token_ms");
	r->token_ns = ms_to_ns(cJSON_IsNumber(v) ? v->valuedouble : s->o.token_ms);
	v = cJSON_GetObjectItemCaseSensitive(j, "x_fail");
	if (cJSON_IsString(v) && !strcmp(v->valuestring, "http"))
		r->fail = FAIL_HTTP;
	else if (cJSON_IsString(v) && !strcmp(v->valuestring, "stream"))
		r->fail = FAIL_STREAM;
	r->fail_at = r->max_tokens / 2;
out:
	cJSON_Delete(j);
	if (!r->model_json)
		r->model_json = strdup("\"ref\"");
	return err;
}

static bool header_has_token(const char *v, size_t n, const char *tok)
{
	size_t tl = strlen(tok);

	for (size_t i = 0; i + tl <= n; i++)
		if (!strncasecmp(v + i, tok, tl))
			return true;
	return false;
}

static void req_start(struct server *s, struct conn *c, bool keep_alive)
{
	struct req *r = &c->r;
	uint64_t seq = s->req_seq++;

	req_clear(r);
	memset(r, 0, sizeof(*r));
	r->keep_alive = keep_alive;
	r->id = seq;
	r->seq = c->nreq++;
	r->created = (long)time(NULL);
	r->pattern = s->o.pattern;
	/* mixed: the request counter picks, so one run covers every cut */
	if (r->pattern == PAT_MIXED)
		r->pattern = (enum pattern)(seq % MIXED_PATTERNS);
	r->wsys = r->pattern == PAT_WRITEV ? WSYS_WRITEV : s->o.wsys;
}

static void req_dispatch(struct server *s, struct conn *c, const char *method, const char *path,
			 const char *body, size_t blen)
{
	struct req *r = &c->r;
	const char *err;

	if (!strcmp(path, "/health")) {
		reply_plain(s, c, "200 OK", "{\"status\":\"ok\"}", 15);
		return;
	}
	if (!strcmp(path, "/v1/chat/completions"))
		r->api = API_CHAT;
	else if (!strcmp(path, "/v1/completions"))
		r->api = API_COMPLETIONS;
	else {
		reply_error(s, c, "404 Not Found", 404, "not found", true);
		return;
	}
	if (strcmp(method, "POST")) {
		reply_error(s, c, "405 Method Not Allowed", 405, "use POST", true);
		return;
	}
	err = req_parse(s, c, body, blen);
	if (err) {
		reply_error(s, c, "400 Bad Request", 400, err, true);
		return;
	}
	if (r->fail == FAIL_HTTP) {
		reply_plain(s, c, "500 Internal Server Error", ERROR_BODY, sizeof(ERROR_BODY) - 1);
		return;
	}
	if (s->o.max_streams && s->active >= s->o.max_streams) {
		c->phase = PH_QUEUED;
		queue_push(s, c);
		return;
	}
	stream_admit(s, c);
}

static void conn_consume(struct conn *c, size_t n)
{
	buf_consume(&c->in, n);
	c->in_used += n;
}

/*
 * --gpu: arrival_ns of the request that ends at c->in_used, the time of the read that
 * completed it. Pipelined requests wait in c->in while an earlier one streams, so the times of
 * all reads not yet consumed are kept, not only the latest.
 */
static uint64_t conn_arrival(struct conn *c)
{
	size_t i = 0, drop;
	uint64_t ns = 0;

	while (i < c->nmarks && c->marks[i].end < c->in_used)
		i++;
	if (i < c->nmarks)
		ns = c->marks[i].ns;
	drop = i + (i < c->nmarks && c->marks[i].end == c->in_used);
	memmove(c->marks, c->marks + drop, (c->nmarks - drop) * sizeof(*c->marks));
	c->nmarks -= drop;
	return ns;
}

static void conn_mark_read(struct conn *c, uint64_t ns)
{
	if (c->nmarks == c->marks_cap) {
		c->marks_cap = c->marks_cap ? c->marks_cap * 2 : 4;
		c->marks = mem_realloc(c->marks, c->marks_cap * sizeof(*c->marks));
	}
	c->marks[c->nmarks++] = (struct read_mark){ .end = c->in_total, .ns = ns };
}

/*
 * --skip-garbage: how many leading bytes of p come before the next request line, which starts
 * with one of these. Without one, all but the last GARBAGE_KEEP bytes, which may be the start
 * of one split across reads; *found says whether p + n starts a request line.
 */
#define GARBAGE_KEEP 5
static const char *const request_starts[] = { "POST /", "GET /" };

static size_t garbage_len(const char *p, size_t avail, bool *found)
{
	size_t n = avail > GARBAGE_KEEP ? avail - GARBAGE_KEEP : 0;

	*found = false;
	for (size_t i = 0; i < sizeof(request_starts) / sizeof(request_starts[0]); i++) {
		const char *m = memmem(p, avail, request_starts[i], strlen(request_starts[i]));

		if (m && (size_t)(m - p) <= n) {
			n = (size_t)(m - p);
			*found = true;
		}
	}
	return n;
}

/*
 * Parses one request from c->in if it is complete and dispatches it.
 * Returns true when a request was consumed.
 */
static bool conn_parse(struct server *s, struct conn *c)
{
	char *p = c->in.p + c->in.off, *end, *line, *eol, *method, *path, *sp, *q;
	size_t avail = buf_pending(&c->in), head, clen = 0;
	bool http11, close_tok = false, keep_tok = false, expect = false, chunked = false;
	const char *body;
	uint64_t arrival;

	/* RFC 9112 2.2: ignore empty lines before the request line */
	while (avail >= 2 && p[0] == '\r' && p[1] == '\n') {
		conn_consume(c, 2);
		p += 2;
		avail -= 2;
	}
	if (s->o.skip_garbage) {
		bool found;
		size_t g = garbage_len(p, avail, &found);

		conn_consume(c, g);
		p += g;
		avail -= g;
		if (!found)
			return false; /* wait for a request line */
	}
	end = avail ? memmem(p, avail, "\r\n\r\n", 4) : NULL;
	if (!end) {
		if (avail > HEADER_MAX) {
			req_start(s, c, false);
			reply_error(s, c, "431 Request Header Fields Too Large", 431,
				    "header too large", false);
		}
		return false;
	}
	head = (size_t)(end - p) + 4;
	/* Parse a NUL-terminated copy: the input must stay intact while the body is incomplete. */
	buf_reset(&s->head);
	buf_append(&s->head, p, head - 2);
	s->head.p[head - 2] = '\0';
	method = s->head.p;
	eol = strstr(method, "\r\n");
	*eol = '\0';
	sp = strchr(method, ' ');
	path = sp ? sp + 1 : NULL;
	if (sp)
		*sp = '\0';
	sp = path ? strchr(path, ' ') : NULL;
	if (!sp) {
		req_start(s, c, false);
		reply_error(s, c, "400 Bad Request", 400, "bad request line", false);
		return false;
	}
	*sp = '\0';
	http11 = !strcmp(sp + 1, "HTTP/1.1");
	for (line = eol + 2; *line; line = eol + 2) {
		char *colon, *val;
		size_t vl;

		eol = strstr(line, "\r\n");
		*eol = '\0';
		colon = strchr(line, ':');
		if (!colon)
			continue;
		*colon = '\0';
		val = colon + 1;
		while (*val == ' ' || *val == '\t')
			val++;
		vl = strlen(val);
		if (!strcasecmp(line, "content-length")) {
			clen = strtoull(val, NULL, 10);
		} else if (!strcasecmp(line, "connection")) {
			close_tok |= header_has_token(val, vl, "close");
			keep_tok |= header_has_token(val, vl, "keep-alive");
		} else if (!strcasecmp(line, "expect")) {
			expect = header_has_token(val, vl, "100-continue");
		} else if (!strcasecmp(line, "transfer-encoding")) {
			chunked = header_has_token(val, vl, "chunked");
		}
	}
	if (chunked) {
		req_start(s, c, false);
		reply_error(s, c, "501 Not Implemented", 501, "chunked request bodies", false);
		return false;
	}
	if (clen > BODY_MAX) {
		req_start(s, c, false);
		reply_error(s, c, "413 Content Too Large", 413, "body too large", false);
		return false;
	}
	if (avail < head + clen) {
		if (expect && !c->continue_sent) {
			static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";

			c->continue_sent = true;
			c->r.wsys = s->o.wsys;
			conn_emit_one(s, c, cont, sizeof(cont) - 1);
		}
		return false;
	}
	q = strchr(path, '?');
	if (q)
		*q = '\0';
	/*
	 * Consume before dispatching: a reply sent at once (an error, x_fail) goes on to parse the
	 * next pipelined request. The body bytes stay where they are until the next read.
	 */
	body = p + head;
	conn_consume(c, head + clen);
	arrival = conn_arrival(c);
	c->continue_sent = false;
	req_start(s, c, http11 ? !close_tok : keep_tok && !close_tok);
	c->r.arrival_ns = arrival;
	req_dispatch(s, c, method, path, body, clen);
	return !c->dead;
}

static void conn_process_input(struct server *s, struct conn *c)
{
	while (!c->dead && c->phase == PH_IDLE && !c->close_after_flush && buf_pending(&c->in))
		if (!conn_parse(s, c))
			break;
}

static void conn_read(struct server *s, struct conn *c)
{
	for (;;) {
		ssize_t n;

		buf_reserve(&c->in, READ_CHUNK);
		n = sock_read(s, c, c->in.p + c->in.len, c->in.cap - c->in.len);
		if (n > 0) {
			c->in.len += (size_t)n;
			c->in_total += (uint64_t)n;
			if (s->o.gpu)
				conn_mark_read(c, clock_mono_ns());
			if (buf_pending(&c->in) > HEADER_MAX + BODY_MAX) {
				conn_kill(s, c);
				return;
			}
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		/* EOF or reset: a client gone mid-stream is counted as aborted by conn_kill. */
		conn_kill(s, c);
		return;
	}
	conn_process_input(s, c);
}

static unsigned peer_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getpeername(fd, (struct sockaddr *)&ss, &sl))
		return 0;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void server_accept(struct server *s)
{
	for (;;) {
		int one = 1, fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct epoll_event ev = { .events = EPOLLIN };
		struct conn *c;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				perror("refserver: accept4");
			return;
		}
		/* Real servers set it too; without it Nagle would merge frames on its own. */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->heap_idx = HEAP_NONE;
		if (s->o.gpu || s->o.prefix)
			c->port = peer_port(fd);
		c->all_next = s->all;
		if (s->all)
			s->all->all_prev = c;
		s->all = c;
		ev.data.ptr = c;
		if (epoll_ctl(s->efd, EPOLL_CTL_ADD, fd, &ev)) {
			perror("refserver: epoll_ctl");
			conn_kill(s, c);
		}
	}
}

static void conn_free(struct server *s, struct conn *c)
{
	if (c->all_prev)
		c->all_prev->all_next = c->all_next;
	else
		s->all = c->all_next;
	if (c->all_next)
		c->all_next->all_prev = c->all_prev;
	req_clear(&c->r);
	buf_free(&c->in);
	buf_free(&c->out);
	free(c->marks);
	free(c);
}

static void server_reap(struct server *s)
{
	while (s->dead) {
		struct conn *c = s->dead;

		s->dead = c->dead_next;
		conn_free(s, c);
	}
}

/* ---- --gpu, API process: requests go to the engine, its token reports become frames ---- */

static void gpu_watch_out(struct server *s, bool on)
{
	struct gpu_link *g = &s->gpu;
	struct epoll_event ev = { .events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = &g->fd };

	if (g->watch_out == on)
		return;
	g->watch_out = on;
	epoll_ctl(s->efd, EPOLL_CTL_MOD, g->fd, &ev);
}

static void gpu_flush(struct server *s)
{
	struct gpu_link *g = &s->gpu;

	while (buf_pending(&g->out)) {
		ssize_t n = send(g->fd, g->out.p + g->out.off, buf_pending(&g->out), MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			/* EPIPE: the engine is gone, which the read side reports. */
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				buf_reset(&g->out);
			break;
		}
		buf_consume(&g->out, (size_t)n);
	}
	gpu_watch_out(s, buf_pending(&g->out) > 0);
}

/* Never blocks: what the socket does not take waits for EPOLLOUT, in order. */
static void gpu_send(struct server *s, enum eng_type type, const struct req *r)
{
	/* arg: the prompt's bytes, and above them its prefill time in microseconds (x_prefill_ms,
	 * else --prefill-ms) */
	uint64_t us = r->prefill_ns / 1000 < UINT32_MAX ? r->prefill_ns / 1000 : UINT32_MAX;
	struct eng_msg m = { .type = type,
			     .max_tokens = r->max_tokens,
			     .id = r->id,
			     .arg = (us << 32) | (r->prompt_bytes & UINT32_MAX) };

	buf_append(&s->gpu.out, &m, sizeof(m));
	if (!s->gpu.watch_out)
		gpu_flush(s);
}

static struct conn **gpu_map_find(struct gpu_link *g, uint64_t id)
{
	struct conn **pp;

	if (!g->map_cap)
		return NULL;
	pp = &g->map[id & (g->map_cap - 1)];
	while (*pp && (*pp)->r.id != id)
		pp = &(*pp)->map_next;
	return *pp ? pp : NULL;
}

static void gpu_map_add(struct gpu_link *g, struct conn *c)
{
	size_t i;

	if (g->map_len >= g->map_cap) {
		size_t cap = g->map_cap ? g->map_cap * 2 : 64;
		struct conn **m = mem_realloc(NULL, cap * sizeof(*m));

		memset(m, 0, cap * sizeof(*m));
		for (i = 0; i < g->map_cap; i++) {
			while (g->map[i]) {
				struct conn *x = g->map[i];

				g->map[i] = x->map_next;
				x->map_next = m[x->r.id & (cap - 1)];
				m[x->r.id & (cap - 1)] = x;
			}
		}
		free(g->map);
		g->map = m;
		g->map_cap = cap;
	}
	i = c->r.id & (g->map_cap - 1);
	c->map_next = g->map[i];
	g->map[i] = c;
	g->map_len++;
}

static int gpu_spawn(struct server *s);

static void gpu_submit(struct server *s, struct conn *c)
{
	struct req *r = &c->r;

	/* --engine-on-request: forked and exec'd now, as an engine started by the first request
	 * is; the request waits in the socket for it to load its runtime. */
	if (s->o.engine_on_request && s->gpu.pid <= 0 && gpu_spawn(s)) {
		s->exiting = true;
		s->failed = true;
	}

	r->gpu = true;
	r->in_engine = true;
	gpu_map_add(&s->gpu, c);
	gpu_send(s, ENG_ADD, r);
}

static void gpu_log_request(struct server *s, struct conn *c, const char *outcome)
{
	struct gpu_link *g = &s->gpu;
	struct req *r = &c->r;
	struct buf *b = &g->line;
	/* an abort has no write that ends it: the time it was noticed */
	uint64_t end = strcmp(outcome, "aborted") ? r->write_ns : clock_mono_ns();

	buf_reset(b);
	buf_appendf(b,
		    "{\"request\":%" PRIu64 ",\"port\":%u,\"seq\":%u,\"arrival_ns\":%" PRIu64
		    ",\"prefill_step\":",
		    r->id, c->port, r->seq, r->arrival_ns);
	if (r->engine_tokens)
		buf_appendf(b, "%" PRIu64, r->prefill_step);
	else
		buf_appendf(b, "null");
	buf_appendf(b, ",\"first_token_ns\":");
	if (r->tok_n)
		buf_appendf(b, "%" PRIu64, r->tok_ns[0]);
	else
		buf_appendf(b, "null");
	buf_appendf(b,
		    ",\"end_ns\":%" PRIu64
		    ",\"outcome\":\"%s\",\"stream\":%s,\"tokens\":%u,\"token_ns\":[",
		    end, outcome, r->stream ? "true" : "false", r->tok_n);
	for (unsigned i = 0; i < r->tok_n; i++)
		buf_appendf(b, "%s%" PRIu64, i ? "," : "", r->tok_ns[i]);
	buf_appendf(b, "]}\n");
	/* One write per line with O_APPEND: the engine's lines never land inside ours. */
	if (write(g->log_fd, b->p, b->len) < 0)
		perror("refserver: --gpu-log");
}

/* The request left the API process: forget it, tell the engine to stop, log it. */
static void gpu_request_end(struct server *s, struct conn *c, const char *outcome)
{
	struct gpu_link *g = &s->gpu;
	struct req *r = &c->r;
	struct conn **pp;

	if (!r->gpu)
		return;
	r->gpu = false;
	pp = gpu_map_find(g, r->id);
	if (pp) {
		*pp = c->map_next;
		g->map_len--;
	}
	c->map_next = NULL;
	if (r->in_engine) {
		r->in_engine = false;
		gpu_send(s, ENG_ABORT, r);
	}
	if (g->log_fd >= 0)
		gpu_log_request(s, c, outcome);
}

/*
 * One token from the engine: one content frame, written now. After the last one the finish,
 * usage and [DONE] frames follow at once (without --gpu they wait one more token delay).
 */
static void gpu_token(struct server *s, struct conn *c, uint64_t step)
{
	struct req *r = &c->r;

	if (!r->engine_tokens++)
		r->prefill_step = step;
	/* A slow API process: its work on the token (detokenising, serialising) before the
	 * write, the event loop held as a busy Python one is. */
	if (s->o.api_delay_ms > 0) {
		uint64_t until = clock_mono_ns() + ms_to_ns(s->o.api_delay_ms);

		while (clock_mono_ns() < until)
			;
	}
	/* the engine produces max_tokens tokens, and one even for max_tokens 0 */
	if (r->engine_tokens >= r->max_tokens)
		r->in_engine = false;
	if (!r->stream) {
		if (!r->in_engine)
			reply_full(s, c);
		return;
	}
	if (r->fail == FAIL_STREAM && r->sent == r->fail_at) {
		stream_fail(s, c);
		return;
	}
	if (r->sent < r->max_tokens) {
		if (!emit_content(s, c))
			return;
		r->sent++;
		if (r->pattern != PAT_MERGED)
			req_stamp_tokens(r);
	}
	if (r->sent >= r->max_tokens)
		stream_finish(s, c);
	else if (r->pattern == PAT_MERGED && r->batched >= s->o.merge)
		batch_flush(s, c);
}

static void server_signal(struct server *s);

static void gpu_lost(struct server *s)
{
	struct gpu_link *g = &s->gpu;

	epoll_ctl(s->efd, EPOLL_CTL_DEL, g->fd, NULL);
	/* Killing the process group stops the engine too; then its exit is no failure. */
	server_signal(s);
	if (s->exiting)
		return;
	fprintf(stderr, "refserver: the engine process (pid %d) exited; stopping\n", (int)g->pid);
	s->exiting = true;
	s->failed = true;
}

static void gpu_read(struct server *s)
{
	struct gpu_link *g = &s->gpu;
	struct eng_msg m;
	struct conn **pp;

	for (;;) {
		ssize_t n;

		buf_reserve(&g->in, READ_CHUNK);
		n = read(g->fd, g->in.p + g->in.len, g->in.cap - g->in.len);
		if (n > 0) {
			g->in.len += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		gpu_lost(s);
		return;
	}
	while (buf_pending(&g->in) >= sizeof(m)) {
		memcpy(&m, g->in.p + g->in.off, sizeof(m));
		buf_consume(&g->in, sizeof(m));
		if (m.type != ENG_TOKEN)
			continue;
		/* a request that ended here (abort, stream error) may still get a token */
		pp = gpu_map_find(g, m.id);
		if (pp && !(*pp)->dead)
			gpu_token(s, *pp, m.arg);
	}
}

/* fork + exec of this binary, as vLLM starts its EngineCore process. */
static int gpu_spawn(struct server *s)
{
	struct gpu_link *g = &s->gpu;
	char **argv = mem_realloc(NULL, ((size_t)g->argc + 3) * sizeof(*argv));
	pid_t parent = getpid(), pid;
	char fdarg[16];

	memcpy(argv, g->argv, (size_t)g->argc * sizeof(*argv));
	snprintf(fdarg, sizeof(fdarg), "%d", g->child_fd);
	argv[g->argc] = "--engine-fd";
	argv[g->argc + 1] = fdarg;
	argv[g->argc + 2] = NULL;
	pid = fork();
	if (pid < 0) {
		perror("refserver: fork");
		free(argv);
		return -errno;
	}
	if (!pid) {
		sigset_t none;

		/* Not even a SIGKILLed API process may leave an engine behind. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(1);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		/* Ctrl-C reaches the whole process group; the API process stops the engine. */
		signal(SIGINT, SIG_IGN);
		fcntl(g->child_fd, F_SETFD, 0);
		execv("/proc/self/exe", argv);
		fprintf(stderr, "refserver: exec /proc/self/exe: %s\n", strerror(errno));
		_exit(127);
	}
	free(argv);
	close(g->child_fd);
	g->child_fd = -1;
	g->pid = pid;
	return 0;
}

/* Without --engine-delay-ms nothing is served before the engine has loaded its runtime. */
static int gpu_wait_ready(struct server *s)
{
	struct gpu_link *g = &s->gpu;
	struct eng_msg m;
	size_t got = 0;

	while (got < sizeof(m)) {
		struct pollfd p = { .fd = g->fd, .events = POLLIN };
		int r = poll(&p, 1, ENGINE_READY_TIMEOUT_MS);
		ssize_t n;

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			fprintf(stderr,
				"refserver: the engine process was not ready within %d ms\n",
				ENGINE_READY_TIMEOUT_MS);
			return -ETIMEDOUT;
		}
		n = read(g->fd, (char *)&m + got, sizeof(m) - got);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			fprintf(stderr,
				"refserver: the engine process exited before it was ready\n");
			return -EPIPE;
		}
		got += (size_t)n;
	}
	if (m.type != ENG_READY) {
		fprintf(stderr, "refserver: unexpected first engine message %u\n", m.type);
		return -EPROTO;
	}
	return 0;
}

static void gpu_timer(struct server *s)
{
	uint64_t ticks;

	if (read(s->gpu.tfd, &ticks, sizeof(ticks)) < 0 || s->gpu.pid > 0)
		return;
	if (gpu_spawn(s)) {
		s->exiting = true;
		s->failed = true;
	}
}

static int epoll_add(int efd, int fd, void *tag);

/* Before listening: the socketpair, the log, the start timer. */
static int gpu_init(struct server *s)
{
	struct gpu_link *g = &s->gpu;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		perror("refserver: socketpair");
		return -errno;
	}
	g->fd = sv[0];
	g->child_fd = sv[1];
	fcntl(g->fd, F_SETFL, O_NONBLOCK);
	if (s->o.gpu_log) {
		/* truncated once here; the engine opens it for appending */
		g->log_fd =
		    open(s->o.gpu_log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
		if (g->log_fd < 0) {
			fprintf(stderr, "refserver: %s: %s\n", s->o.gpu_log, strerror(errno));
			return -errno;
		}
	}
	g->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (g->tfd < 0 || epoll_add(s->efd, g->fd, &g->fd) || epoll_add(s->efd, g->tfd, &g->tfd)) {
		perror("refserver: gpu init");
		return -errno;
	}
	return 0;
}

/* Right after listen(): the engine now, or --engine-delay-ms later from the loop. */
static int gpu_start(struct server *s)
{
	struct itimerspec its = { 0 };
	uint64_t delay = ms_to_ns(s->o.engine_delay_ms);
	int err;

	if (s->o.engine_on_request)
		return 0;
	if (delay) {
		its.it_value.tv_sec = (time_t)(delay / NS_PER_S);
		its.it_value.tv_nsec = (long)(delay % NS_PER_S);
		timerfd_settime(s->gpu.tfd, 0, &its, NULL);
		return 0;
	}
	err = gpu_spawn(s);
	return err ? err : gpu_wait_ready(s);
}

static void gpu_close(struct server *s)
{
	struct gpu_link *g = &s->gpu;

	/* EOF ends the engine after its current step; SIGTERM does not wait for that. */
	if (g->fd >= 0)
		close(g->fd);
	if (g->pid > 0) {
		kill(g->pid, SIGTERM);
		waitpid(g->pid, NULL, 0);
	}
	if (g->child_fd >= 0)
		close(g->child_fd);
	if (g->tfd >= 0)
		close(g->tfd);
	if (g->log_fd >= 0)
		close(g->log_fd);
	buf_free(&g->in);
	buf_free(&g->out);
	buf_free(&g->line);
	free(g->map);
}

/* ---- --gpu, engine process: a continuous-batching step loop over CUDA runtime calls ---- */

struct dim3 {
	unsigned x, y, z;
};

/* cuda_runtime_api.h's signatures; handles are pointers, cudaError_t and enums are int. */
typedef int (*cuda_launch_kernel_fn)(const void *func, struct dim3 grid, struct dim3 block,
				     void **args, size_t shared_mem, void *stream);
typedef int (*cuda_graph_launch_fn)(void *graph_exec, void *stream);
typedef int (*cuda_memcpy_async_fn)(void *dst, const void *src, size_t count, int kind,
				    void *stream);
typedef int (*cuda_stream_sync_fn)(void *stream);
typedef int (*cuda_get_device_count_fn)(int *count);

struct cuda_api {
	void *lib;
	char path[PATH_MAX];
	cuda_launch_kernel_fn launch_kernel;
	cuda_graph_launch_fn graph_launch;
	cuda_memcpy_async_fn memcpy_async;
	cuda_stream_sync_fn stream_sync;
};

struct ereq {
	uint64_t id;
	uint64_t prompt_bytes;
	uint64_t prefill_ns; /* its own prefill time (x_prefill_ms, else --prefill-ms) */
	unsigned max_tokens;
	unsigned tokens;
	/* --preempt-every: out of the batch for out_left more decode steps, from the start of
	 * the first one it missed (out_from_ns; missed so far); recompute: back in the waiting
	 * queue, its next prefill a recompute that gives its next token */
	unsigned out_left, missed;
	uint64_t out_from_ns;
	bool recompute;
};

struct ereq_list {
	struct ereq *v;
	size_t len, cap;
};

struct engine {
	const struct opts *o;
	int fd;
	int log_fd;
	struct cuda_api cu;
	struct ereq_list waiting;   /* FIFO, oldest first */
	struct ereq_list running;   /* in admission order */
	struct ereq_list preempted; /* --preempt-every: waiting out their steps */
	unsigned since_preempt;	    /* decode steps since the last preemption */
	unsigned held;		    /* --hold-steps: steps whose tokens are not sent yet */
	struct buf in, out, line;
	void *host; /* destination of the device-to-host copy */
	size_t host_cap;
	uint64_t step;
	bool eof;
};

/* Tries path; on failure appends why to errs and returns false. */
static bool cuda_try(struct cuda_api *cu, const char *path, struct buf *errs)
{
	static const char *const names[] = { "cudaLaunchKernel", "cudaGraphLaunch",
					     "cudaMemcpyAsync", "cudaStreamSynchronize" };
	void *fn[4];

	cu->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!cu->lib) {
		buf_appendf(errs, "  %s\n", dlerror());
		return false;
	}
	for (int i = 0; i < 4; i++) {
		fn[i] = dlsym(cu->lib, names[i]);
		if (!fn[i]) {
			buf_appendf(errs, "  %s: no %s\n", path, names[i]);
			dlclose(cu->lib);
			cu->lib = NULL;
			return false;
		}
	}
	cu->launch_kernel = (cuda_launch_kernel_fn)fn[0];
	cu->graph_launch = (cuda_graph_launch_fn)fn[1];
	cu->memcpy_async = (cuda_memcpy_async_fn)fn[2];
	cu->stream_sync = (cuda_stream_sync_fn)fn[3];
	snprintf(cu->path, sizeof(cu->path), "%s", path);
	return true;
}

/* --cudart, then a stand-in under .output/ (from the repository root), then next to us. */
static int cuda_open(struct cuda_api *cu, const char *path)
{
	static const char *const standins[] = { STANDIN_MAKE, STANDIN_CC };
	struct buf errs = { 0 };
	char exe[PATH_MAX], try[PATH_MAX + 32];
	cuda_get_device_count_fn count;
	ssize_t n;
	int devices;

	if (cuda_try(cu, path, &errs))
		goto loaded;
	for (int i = 0; i < 2; i++) {
		snprintf(try, sizeof(try), ".output/%s", standins[i]);
		if (cuda_try(cu, try, &errs))
			goto loaded;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	while (n > 0 && exe[n - 1] != '/')
		n--;
	for (int i = 0; n > 0 && i < 2; i++) {
		snprintf(try, sizeof(try), "%.*s%s", (int)n, exe, standins[i]);
		if (cuda_try(cu, try, &errs))
			goto loaded;
	}
	fprintf(stderr,
		"refserver: engine: cannot load a CUDA runtime:\n%s"
		"Install the CUDA toolkit, give --cudart PATH, or build the stand-in:\n  %s\n",
		errs.p, STANDIN_BUILD);
	buf_free(&errs);
	return -ENOENT;
loaded:
	buf_free(&errs);
	/*
	 * The runtime initialises on its first call (0.5 ms without a driver, far longer with
	 * one); pay that now, with a call the tracer does not hook, not inside the first step.
	 */
	count = (cuda_get_device_count_fn)dlsym(cu->lib, "cudaGetDeviceCount");
	if (count)
		count(&devices);
	return 0;
}

static void ereq_push(struct ereq_list *l, const struct ereq *r)
{
	if (l->len == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 64;
		l->v = mem_realloc(l->v, l->cap * sizeof(*l->v));
	}
	l->v[l->len++] = *r;
}

static void ereq_remove(struct ereq_list *l, size_t i, size_t n)
{
	memmove(l->v + i, l->v + i + n, (l->len - i - n) * sizeof(*l->v));
	l->len -= n;
}

static bool ereq_abort(struct ereq_list *l, uint64_t id)
{
	for (size_t i = 0; i < l->len; i++) {
		if (l->v[i].id == id) {
			ereq_remove(l, i, 1);
			return true;
		}
	}
	return false;
}

/* Takes in what the API process sent; with block, waits for something first. */
static int engine_poll(struct engine *e, bool block)
{
	struct eng_msg m;

	if (block) {
		struct pollfd p = { .fd = e->fd, .events = POLLIN };

		while (poll(&p, 1, -1) < 0)
			if (errno != EINTR)
				return -errno;
	}
	for (;;) {
		ssize_t n;

		buf_reserve(&e->in, READ_CHUNK);
		n = read(e->fd, e->in.p + e->in.len, e->in.cap - e->in.len);
		if (n > 0) {
			e->in.len += (size_t)n;
			continue;
		}
		if (!n) {
			e->eof = true;
			break;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			break;
		return -errno;
	}
	while (buf_pending(&e->in) >= sizeof(m)) {
		memcpy(&m, e->in.p + e->in.off, sizeof(m));
		buf_consume(&e->in, sizeof(m));
		if (m.type == ENG_ADD) {
			struct ereq r = { .id = m.id,
					  .prompt_bytes = m.arg & UINT32_MAX,
					  .prefill_ns = (m.arg >> 32) * 1000,
					  .max_tokens = m.max_tokens };

			ereq_push(&e->waiting, &r);
		} else if (m.type == ENG_ABORT && !ereq_abort(&e->waiting, m.id) &&
			   !ereq_abort(&e->running, m.id)) {
			ereq_abort(&e->preempted, m.id);
		}
	}
	return 0;
}

/* Everything in e->out, blocking: the API process always reads, so this cannot deadlock. */
static void engine_send(struct engine *e)
{
	while (buf_pending(&e->out)) {
		ssize_t n = send(e->fd, e->out.p + e->out.off, buf_pending(&e->out), MSG_NOSIGNAL);

		if (n >= 0) {
			buf_consume(&e->out, (size_t)n);
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			struct pollfd p = { .fd = e->fd, .events = POLLOUT };

			poll(&p, 1, -1);
		} else if (errno != EINTR) {
			e->eof = true;
			buf_reset(&e->out);
		}
	}
}

static void sleep_until(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / NS_PER_S),
			       .tv_nsec = (long)(ns % NS_PER_S) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

struct step_counts {
	unsigned launches, graph_launches, memcpys;
	/* requests whose first token, and whose next token, the step gave */
	unsigned firsts, nexts;
};

/* How the step's work goes to the GPU (--engine-shape, --layers, --graph-max-batch): a
 * prefill of the graph shape is its --prefill-launches eager kernels; a decode one graph;
 * piecewise a graph piece per layer and one more, an eager attention kernel between two;
 * eager, and a decode above --graph-max-batch, kernels per layer. Returns the mode logged. */
static const char *engine_launch(struct engine *e, bool prefill, size_t batch,
				 struct step_counts *n)
{
	const struct opts *o = e->o;
	struct dim3 one = { 1, 1, 1 };
	bool eager = o->shape == SHAPE_EAGER ||
		     (!prefill && o->graph_max_batch && batch > o->graph_max_batch);

	if (eager) {
		unsigned k = o->layers * EAGER_PER_LAYER + EAGER_EXTRA;

		for (; n->launches < k; n->launches++)
			e->cu.launch_kernel(NULL, one, one, NULL, 0, NULL);
		return "eager";
	}
	if (o->shape == SHAPE_PIECEWISE) {
		for (unsigned l = 0; l < o->layers; l++) {
			e->cu.graph_launch(NULL, NULL);
			n->graph_launches++;
			e->cu.launch_kernel(NULL, one, one, NULL, 0, NULL);
			n->launches++;
		}
		e->cu.graph_launch(NULL, NULL);
		n->graph_launches++;
		return "piecewise";
	}
	if (prefill) {
		for (; n->launches < o->prefill_launches; n->launches++)
			e->cu.launch_kernel(NULL, one, one, NULL, 0, NULL);
		return "eager";
	}
	e->cu.graph_launch(NULL, NULL);
	n->graph_launches++;
	return "graph";
}

/* The step's kind by what it gave (tokenscope's rule): prefill with first tokens only, or none
 * (a chunk of a prompt), decode with next tokens only, mixed with both. */
static const char *step_kind(const struct step_counts *n)
{
	return n->firsts && n->nexts ? "mixed" : n->nexts ? "decode" : "prefill";
}

static void engine_log_step(struct engine *e, const char *mode, uint64_t start, uint64_t end,
			    const struct step_counts *n, size_t from)
{
	struct buf *b = &e->line;

	buf_reset(b);
	buf_appendf(b,
		    "{\"step\":%" PRIu64 ",\"kind\":\"%s\",\"mode\":\"%s\",\"start_ns\":%" PRIu64
		    ",\"end_ns\":%" PRIu64
		    ",\"launches\":%u,\"graph_launches\":%u,\"memcpys\":%u,\"requests\":[",
		    e->step, step_kind(n), mode, start, end, n->launches, n->graph_launches,
		    n->memcpys);
	for (size_t i = from; i < e->running.len; i++)
		buf_appendf(b, "%s%" PRIu64, i > from ? "," : "", e->running.v[i].id);
	buf_appendf(b, "]}\n");
	if (write(e->log_fd, b->p, b->len) < 0)
		perror("refserver: engine: --gpu-log");
}

/* --preempt-every: the ground truth of a preemption, once the recompute ended at end_ns. */
static void engine_log_preemption(struct engine *e, const struct ereq *r, uint64_t end_ns)
{
	struct buf *b = &e->line;

	if (e->log_fd < 0)
		return;
	buf_reset(b);
	buf_appendf(b,
		    "{\"preemption\":%" PRIu64 ",\"from_ns\":%" PRIu64 ",\"to_ns\":%" PRIu64
		    ",\"missed\":%u,\"after_tokens\":%u}\n",
		    r->id, r->out_from_ns, end_ns, r->missed, r->tokens);
	if (write(e->log_fd, b->p, b->len) < 0)
		perror("refserver: engine: --gpu-log");
}

/*
 * --preempt-every N: before every Nth decode step with two or more running, the latest
 * admitted running request with a token out (and not finishing) leaves the batch, as vLLM
 * preempts the newest request when its KV cache is full; it sits out --preempt-steps decode
 * steps, then waits at the head of the queue, and its next prefill recomputes it and gives its
 * next token.
 */
static void engine_preempt(struct engine *e)
{
	const struct opts *o = e->o;
	struct ereq_list *run = &e->running;

	if (!o->preempt_every || ++e->since_preempt < o->preempt_every || run->len < 2)
		return;
	for (size_t i = run->len; i-- > 0;) {
		struct ereq r = run->v[i];

		if (!r.tokens || r.tokens + 1 >= r.max_tokens)
			continue;
		r.out_left = o->preempt_steps ? o->preempt_steps : 1;
		r.missed = 0;
		r.out_from_ns = 0;
		ereq_remove(run, i, 1);
		ereq_push(&e->preempted, &r);
		e->since_preempt = 0;
		return;
	}
}

/* After a decode step that started at start: the preempted requests missed it; those whose
 * time is out go to the head of the queue. */
static void engine_out_tick(struct engine *e, uint64_t start, bool all)
{
	for (size_t i = 0; i < e->preempted.len;) {
		struct ereq r = e->preempted.v[i];

		if (start) {
			if (!r.out_from_ns)
				r.out_from_ns = start;
			r.missed++;
			r.out_left--;
		}
		e->preempted.v[i] = r;
		if (r.out_left && !all) {
			i++;
			continue;
		}
		/* to the head of the queue: it was admitted before everything that waits */
		r.recompute = true;
		ereq_push(&e->waiting, &r);
		memmove(e->waiting.v + 1, e->waiting.v,
			(e->waiting.len - 1) * sizeof(*e->waiting.v));
		e->waiting.v[0] = r;
		ereq_remove(&e->preempted, i, 1);
	}
}

/*
 * One step: a prefill of up to --max-batch minus running waiting requests (kernel launches,
 * GPU time growing with the prompt bytes) or a decode of every running request (one graph
 * replay, GPU time, the copy of the sampled tokens). The sleep stands for the GPU time; the
 * host then waits in cudaStreamSynchronize, and the step's tokens go out right after.
 */
static void engine_step(struct engine *e, bool prefill)
{
	const struct opts *o = e->o;
	struct ereq_list *run = &e->running;
	struct step_counts n = { 0 };
	uint64_t gpu_ns, bytes = 0, start, end;
	size_t from = 0, i, k;
	const char *mode;

	if (prefill) {
		k = o->max_batch - run->len;
		if (k > e->waiting.len)
			k = e->waiting.len;
		from = run->len;
		/* the step lasts the longest of its requests' prefill times (x_prefill_ms: a long
		 * prompt among short ones), and --prefill-us-per-byte of their prompts */
		gpu_ns = ms_to_ns(o->prefill_ms);
		for (i = 0; i < k; i++) {
			bytes += e->waiting.v[i].prompt_bytes;
			if (e->waiting.v[i].prefill_ns > gpu_ns)
				gpu_ns = e->waiting.v[i].prefill_ns;
			ereq_push(run, &e->waiting.v[i]);
		}
		ereq_remove(&e->waiting, 0, k);
		gpu_ns += (uint64_t)(o->prefill_us_per_byte * (double)bytes * NS_PER_US);
	} else {
		engine_preempt(e);
		gpu_ns = ms_to_ns(o->token_ms);
		if (e->host_cap < run->len * D2H_BYTES_PER_REQ) {
			e->host_cap = run->len * D2H_BYTES_PER_REQ * 2;
			e->host = mem_realloc(e->host, e->host_cap);
		}
	}
	/* --prefill-chunks: the prompt's first chunks each a prefill step of its own, with no
	 * token, as chunked prefill runs; the last one below gives the tokens. */
	for (unsigned c = 1; prefill && c < o->prefill_chunks; c++) {
		struct step_counts cn = { 0 };

		start = clock_mono_ns();
		mode = engine_launch(e, true, run->len - from, &cn);
		sleep_until(start + gpu_ns / o->prefill_chunks);
		e->cu.stream_sync(NULL);
		end = clock_mono_ns();
		if (e->log_fd >= 0)
			engine_log_step(e, mode, start, end, &cn, from);
		e->step++;
	}
	if (prefill && o->prefill_chunks > 1)
		gpu_ns /= o->prefill_chunks;
	start = clock_mono_ns();
	mode = engine_launch(e, prefill, run->len - from, &n);
	sleep_until(start + gpu_ns);
	if (!prefill) {
		e->cu.memcpy_async(e->host, NULL, run->len * D2H_BYTES_PER_REQ, CUDA_MEMCPY_D2H,
				   NULL);
		n.memcpys++;
	}
	e->cu.stream_sync(NULL);
	end = clock_mono_ns();
	for (i = from; i < run->len; i++) {
		struct eng_msg m = { .type = ENG_TOKEN, .id = run->v[i].id, .arg = e->step };

		if (run->v[i].tokens)
			n.nexts++;
		else
			n.firsts++;
		run->v[i].tokens++;
		buf_append(&e->out, &m, sizeof(m));
	}
	/* --hold-steps K: the tokens of K steps go out together, as a host that falls behind
	 * writes them (late writes: a token after the steps that followed its own). */
	if (++e->held >= (o->hold_steps ? o->hold_steps : 1)) {
		engine_send(e);
		e->held = 0;
	}
	if (e->log_fd >= 0)
		engine_log_step(e, mode, start, end, &n, from);
	for (i = from; prefill && i < run->len; i++) {
		if (!run->v[i].recompute)
			continue;
		engine_log_preemption(e, &run->v[i], end);
		run->v[i].recompute = false;
	}
	if (!prefill)
		engine_out_tick(e, start, false);
	for (i = from; i < run->len;) {
		/* max_tokens 0 still costs the prefill, which yields one token */
		if (run->v[i].tokens >= run->v[i].max_tokens)
			ereq_remove(run, i, 1);
		else
			i++;
	}
	e->step++;
}

static int engine_main(const struct opts *o)
{
	struct engine e = { .o = o, .fd = o->engine_fd, .log_fd = -1 };
	struct eng_msg ready = { .type = ENG_READY };
	int err = 0;

	prctl(PR_SET_NAME, ENGINE_COMM);
	/* The default 50 us of timer slack would lengthen every step's GPU time by as much. */
	prctl(PR_SET_TIMERSLACK, 1UL);
	fcntl(e.fd, F_SETFD, FD_CLOEXEC);
	fcntl(e.fd, F_SETFL, O_NONBLOCK);
	if (cuda_open(&e.cu, o->cudart))
		return 1;
	if (o->gpu_log) {
		e.log_fd = open(o->gpu_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (e.log_fd < 0) {
			fprintf(stderr, "refserver: engine: %s: %s\n", o->gpu_log, strerror(errno));
			return 1;
		}
	}
	fprintf(stderr, "refserver: engine pid %d, CUDA runtime %s\n", (int)getpid(), e.cu.path);
	buf_append(&e.out, &ready, sizeof(ready));
	engine_send(&e);
	while (!e.eof) {
		bool idle;

		/* Nothing left running to sit out: the preempted come back at once. */
		if (!e.running.len && e.preempted.len)
			engine_out_tick(&e, 0, true);
		idle = !e.waiting.len && !e.running.len;
		/* Held tokens go before the engine waits: nothing else would send them. */
		if (idle && buf_pending(&e.out)) {
			engine_send(&e);
			e.held = 0;
		}

		err = engine_poll(&e, idle);
		if (err || e.eof)
			break;
		if (e.waiting.len && e.running.len < o->max_batch)
			engine_step(&e, true);
		else if (e.running.len)
			engine_step(&e, false);
	}
	if (err)
		fprintf(stderr, "refserver: engine: %s\n", strerror(-err));
	if (e.log_fd >= 0)
		close(e.log_fd);
	free(e.waiting.v);
	free(e.running.v);
	free(e.preempted.v);
	free(e.host);
	buf_free(&e.in);
	buf_free(&e.out);
	buf_free(&e.line);
	return err ? 1 : 0;
}

static void timers_run(struct server *s)
{
	uint64_t now = clock_mono_ns();
	size_t n = 0;

	/*
	 * Collect first, run after: a full-speed stream reschedules itself at a time already
	 * past, and must wait for the next loop turn so every other stream gets its frame too.
	 */
	while (s->heap_len && s->heap[0]->r.due <= now) {
		if (n == s->fired_cap) {
			s->fired_cap = s->fired_cap ? s->fired_cap * 2 : 64;
			s->fired = mem_realloc(s->fired, s->fired_cap * sizeof(*s->fired));
		}
		s->fired[n++] = heap_pop(s);
	}
	for (size_t i = 0; i < n; i++)
		if (!s->fired[i]->dead)
			stream_tick(s, s->fired[i], now);
}

/* Returns the epoll timeout: 0 if a timer is already due, else -1 with the timerfd armed. */
static int timer_arm(struct server *s)
{
	struct itimerspec its = { 0 };
	uint64_t due;

	if (!s->heap_len)
		return -1;
	due = s->heap[0]->r.due;
	if (due <= clock_mono_ns())
		return 0;
	if (due != s->armed) {
		its.it_value.tv_sec = (time_t)(due / NS_PER_S);
		its.it_value.tv_nsec = (long)(due % NS_PER_S);
		timerfd_settime(s->tfd, TFD_TIMER_ABSTIME, &its, NULL);
		s->armed = due;
	}
	return -1;
}

static void stats_print(const struct server *s)
{
	fprintf(stderr,
		"frames_sent=%" PRIu64 " bytes_sent=%" PRIu64 " streams=%" PRIu64
		" aborted=%" PRIu64 "\n",
		s->st.frames, s->st.bytes, s->st.streams, s->st.aborted);
}

static void server_signal(struct server *s)
{
	struct signalfd_siginfo si;

	while (read(s->sfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGUSR1)
			stats_print(s);
		else
			s->exiting = true;
	}
}

static int server_run(struct server *s)
{
	struct epoll_event evs[EPOLL_BATCH];

	while (!s->exiting) {
		int n = epoll_wait(s->efd, evs, EPOLL_BATCH, timer_arm(s));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("refserver: epoll_wait");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			struct conn *c = p;
			uint64_t ticks;

			if (p == &s->lfd) {
				server_accept(s);
			} else if (p == &s->tfd) {
				if (read(s->tfd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
					perror("refserver: timerfd");
				s->armed = 0;
			} else if (p == &s->sfd) {
				server_signal(s);
			} else if (p == &s->gpu.fd) {
				if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
					gpu_read(s);
				if (!s->exiting && (evs[i].events & EPOLLOUT))
					gpu_flush(s);
			} else if (p == &s->gpu.tfd) {
				gpu_timer(s);
			} else {
				if (!c->dead && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
					conn_read(s, c);
				if (!c->dead && (evs[i].events & EPOLLOUT))
					conn_flush(s, c);
			}
		}
		timers_run(s);
		server_reap(s);
	}
	return 0;
}

static int epoll_add(int efd, int fd, void *tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = tag };

	return epoll_ctl(efd, EPOLL_CTL_ADD, fd, &ev);
}

static int server_listen(struct server *s)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct addrinfo *ai, *a;
	char port[16];
	int one = 1, err;

	snprintf(port, sizeof(port), "%d", s->o.port);
	err = getaddrinfo(s->o.host, port, &hints, &ai);
	if (err) {
		fprintf(stderr, "refserver: %s: %s\n", s->o.host, gai_strerror(err));
		return -EINVAL;
	}
	s->lfd = -1;
	for (a = ai; a; a = a->ai_next) {
		s->lfd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (s->lfd < 0)
			continue;
		setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (s->o.workers > 1)
			setsockopt(s->lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
		if (!bind(s->lfd, a->ai_addr, a->ai_addrlen) && !listen(s->lfd, LISTEN_BACKLOG))
			break;
		close(s->lfd);
		s->lfd = -1;
	}
	freeaddrinfo(ai);
	if (s->lfd < 0) {
		fprintf(stderr, "refserver: cannot listen on %s:%d: %s\n", s->o.host, s->o.port,
			strerror(errno));
		return -errno;
	}
	return 0;
}

/*
 * --workers N: N-1 more processes, each with its own listening socket on the same port
 * (SO_REUSEPORT: the kernel spreads new connections over them), so that the server as a whole
 * can hold more connections than one process has descriptors (a prefork server, as nginx's
 * workers). Forked before the event loop's descriptors exist, so none is shared. Returns 0 in
 * this process and in every worker.
 */
static int workers_start(struct server *s)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	pid_t parent = getpid();

	if (getsockname(s->lfd, (struct sockaddr *)&ss, &sl))
		return -errno;
	s->workers = mem_realloc(NULL, s->o.workers * sizeof(*s->workers));
	for (unsigned i = 1; i < s->o.workers; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			perror("refserver: fork");
			return -errno;
		}
		if (pid == 0) {
			/* SIGTERM is blocked and read from the signalfd: a clean exit either way */
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			if (getppid() != parent)
				_exit(1);
			free(s->workers);
			s->workers = NULL;
			s->nworkers = 0;
			s->is_worker = true;
			close(s->lfd);
			s->o.port = ss.ss_family == AF_INET6
					? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
					: ntohs(((struct sockaddr_in *)&ss)->sin_port);
			return server_listen(s);
		}
		s->workers[s->nworkers++] = pid;
	}
	return 0;
}

static void workers_stop(struct server *s)
{
	for (unsigned i = 0; i < s->nworkers; i++)
		kill(s->workers[i], SIGTERM);
	for (unsigned i = 0; i < s->nworkers; i++)
		while (waitpid(s->workers[i], NULL, 0) < 0 && errno == EINTR)
			;
	free(s->workers);
	s->workers = NULL;
	s->nworkers = 0;
}

static void server_announce(struct server *s)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char addr[INET6_ADDRSTRLEN];

	getsockname(s->lfd, (struct sockaddr *)&ss, &sl);
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof(addr));
		printf("listening on [%s]:%u\n", addr, ntohs(in6->sin6_port));
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &in->sin_addr, addr, sizeof(addr));
		printf("listening on %s:%u\n", addr, ntohs(in->sin_port));
	}
	fflush(stdout);
}

static int server_init(struct server *s)
{
	struct rlimit rl;
	sigset_t set;

	/* 1000+ streams need more descriptors than the usual soft limit of 1024. */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	/* write() to a closed socket must fail with EPIPE, not kill the server. */
	signal(SIGPIPE, SIG_IGN);
	/*
	 * A shell starts background jobs with SIGINT ignored, and an ignored signal is dropped
	 * before it can reach the signalfd: `refserver & kill -INT $!` would never stop.
	 */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGUSR1, SIG_DFL);
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if (s->o.workers > 1 && (server_listen(s) || workers_start(s)))
		return -EINVAL;
	s->sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	s->efd = epoll_create1(EPOLL_CLOEXEC);
	s->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (s->sfd < 0 || s->efd < 0 || s->tfd < 0) {
		perror("refserver: init");
		return -errno;
	}
	if (s->o.gpu && gpu_init(s))
		return -EINVAL;
	if (s->lfd < 0 && server_listen(s))
		return -EINVAL;
	if (epoll_add(s->efd, s->lfd, &s->lfd) || epoll_add(s->efd, s->tfd, &s->tfd) ||
	    epoll_add(s->efd, s->sfd, &s->sfd)) {
		perror("refserver: epoll_ctl");
		return -errno;
	}
	if (s->o.gpu && gpu_start(s))
		return -EINVAL;
	if (!s->is_worker)
		server_announce(s);
	return 0;
}

static void server_close(struct server *s)
{
	/* Empty the queue first so closing an active stream does not start a queued one. */
	while (s->q_head) {
		struct conn *c = s->q_head;

		queue_remove(s, c);
		c->phase = PH_IDLE;
	}
	while (s->all) {
		if (!s->all->dead)
			conn_kill(s, s->all);
		server_reap(s);
	}
	gpu_close(s);
	close(s->lfd);
	close(s->tfd);
	close(s->sfd);
	close(s->efd);
	free(s->heap);
	free(s->fired);
	buf_free(&s->frame);
	buf_free(&s->chunk);
	buf_free(&s->flat);
	buf_free(&s->head);
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: refserver [OPTIONS]\n"
	    "Reference OpenAI-compatible streaming server (chat and completions).\n"
	    "\n"
	    "  --host H                 address to listen on (127.0.0.1)\n"
	    "  --port P                 port, 0 = any free port (%d)\n"
	    "  --tokens N               default max_tokens (%d)\n"
	    "  --prefill-ms MS          delay before the first content frame (0)\n"
	    "  --prefill-us-per-byte US extra prefill per prompt byte (0)\n"
	    "  --prefix-cache MODE      a prompt seen before skips its per-byte prefill, all its\n"
	    "                           tokens cached; usage reports them: report (always),\n"
	    "                           hide (never), sglang (null for none); prints\n"
	    "                           'cache port=P hit=0|1' per request\n"
	    "  --token-ms MS            delay between content frames, 0 = full speed (0)\n"
	    "  --jitter-ms MS           add uniform 0..MS to each token delay (0)\n"
	    "  --max-streams N          generate at most N at once, queue the rest (unlimited)\n"
	    "  --pattern P              single|writev|merged|split|mixed (single)\n"
	    "  --merge K                merged: frames per write (%d)\n"
	    "  --syscall S              write|send|sendto|sendmsg (write)\n"
	    "  --recv R                 read|recv|recvfrom|recvmsg|readv (read)\n"
	    "  --stats                  print counters to stderr at exit (also on SIGUSR1)\n"
	    "  --skip-garbage           drop bytes before a request line instead of answering\n"
	    "                           400, keeping the connection (noise between requests)\n"
	    "  --workers N              N processes share the port (SO_REUSEPORT) (1)\n"
	    "  --seed N                 seed for jitter and split offsets (1)\n"
	    "  --gpu                    an engine child process generates in batch steps of\n"
	    "                           CUDA runtime calls (prefill-ms, token-ms: GPU time)\n"
	    "  --engine-delay-ms MS     --gpu: start the engine MS after listening (0)\n"
	    "  --api-delay-ms MS        --gpu: the API process spends MS before writing each\n"
	    "                           token the engine sends (a slow detokeniser; 0)\n"
	    "  --engine-on-request      --gpu: start the engine when the first request comes\n"
	    "  --preempt-every N        --gpu: preempt a running request before every Nth decode\n"
	    "                           step (it sits out --preempt-steps steps, 3, then is\n"
	    "                           recomputed by a prefill that gives its next token)\n"
	    "  --preempt-steps K        --gpu: decode steps a preempted request sits out (3)\n"
	    "  --prefill-chunks N       --gpu: a prefill in N steps, the tokens after the last "
	    "(1)\n"
	    "  --hold-steps K           --gpu: the engine sends the tokens of K steps together "
	    "(1)\n"
	    "  --cudart PATH            --gpu: CUDA runtime to dlopen (%s)\n"
	    "  --max-batch B            --gpu: requests per step at most (%d)\n"
	    "  --prefill-launches N     --gpu: cudaLaunchKernel calls per prefill step (%d)\n"
	    "  --engine-shape S         --gpu: graph (a prefill's eager kernels, one graph per\n"
	    "                           decode step), piecewise (every step a graph piece per\n"
	    "                           layer and one more, an eager attention kernel between\n"
	    "                           two), eager (every step %u eager kernels per layer and %u\n"
	    "                           more) (graph)\n"
	    "  --layers N               --gpu: the model's layers, for piecewise and eager (32)\n"
	    "  --graph-max-batch B      --gpu: decode steps of more than B requests run eagerly\n"
	    "                           (no graph captured for that size; 0: none) (0)\n"
	    "  --gpu-log FILE           --gpu: ground truth, steps and requests as JSON lines\n"
	    "\n"
	    "Examples:\n"
	    "  refserver --port 0 --token-ms 20 --prefill-ms 100\n"
	    "  refserver --pattern split --syscall sendto --max-streams 8\n"
	    "  refserver --gpu --token-ms 10 --prefill-ms 30 --gpu-log gpu.jsonl\n",
	    DEFAULT_PORT, DEFAULT_TOKENS, DEFAULT_MERGE, DEFAULT_CUDART, DEFAULT_MAX_BATCH,
	    DEFAULT_PREFILL_LAUNCHES, EAGER_PER_LAYER, EAGER_EXTRA);
}

static int name_index(const char *v, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(v, names[i]))
			return i;
	return -1;
}

static bool parse_num(const char *v, double *out)
{
	char *end;

	*out = strtod(v, &end);
	return end != v && !*end && *out >= 0;
}

enum {
	OPT_HOST = 256,
	OPT_PORT,
	OPT_TOKENS,
	OPT_PREFILL,
	OPT_PREFILL_BYTE,
	OPT_PREFIX_CACHE,
	OPT_TOKEN,
	OPT_JITTER,
	OPT_MAX_STREAMS,
	OPT_PATTERN,
	OPT_MERGE,
	OPT_SYSCALL,
	OPT_RECV,
	OPT_STATS,
	OPT_SKIP_GARBAGE,
	OPT_WORKERS,
	OPT_SEED,
	OPT_GPU,
	OPT_ENGINE_DELAY,
	OPT_API_DELAY,
	OPT_ENGINE_ON_REQUEST,
	OPT_PREEMPT_EVERY,
	OPT_PREEMPT_STEPS,
	OPT_PREFILL_CHUNKS,
	OPT_HOLD_STEPS,
	OPT_CUDART,
	OPT_MAX_BATCH,
	OPT_PREFILL_LAUNCHES,
	OPT_ENGINE_SHAPE,
	OPT_LAYERS,
	OPT_GRAPH_MAX_BATCH,
	OPT_GPU_LOG,
	OPT_ENGINE_FD,
};

static int opts_parse(struct opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "host", required_argument, NULL, OPT_HOST },
		{ "port", required_argument, NULL, OPT_PORT },
		{ "tokens", required_argument, NULL, OPT_TOKENS },
		{ "prefill-ms", required_argument, NULL, OPT_PREFILL },
		{ "prefill-us-per-byte", required_argument, NULL, OPT_PREFILL_BYTE },
		{ "prefix-cache", required_argument, NULL, OPT_PREFIX_CACHE },
		{ "token-ms", required_argument, NULL, OPT_TOKEN },
		{ "jitter-ms", required_argument, NULL, OPT_JITTER },
		{ "max-streams", required_argument, NULL, OPT_MAX_STREAMS },
		{ "pattern", required_argument, NULL, OPT_PATTERN },
		{ "merge", required_argument, NULL, OPT_MERGE },
		{ "syscall", required_argument, NULL, OPT_SYSCALL },
		{ "recv", required_argument, NULL, OPT_RECV },
		{ "stats", no_argument, NULL, OPT_STATS },
		{ "skip-garbage", no_argument, NULL, OPT_SKIP_GARBAGE },
		{ "workers", required_argument, NULL, OPT_WORKERS },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "gpu", no_argument, NULL, OPT_GPU },
		{ "engine-delay-ms", required_argument, NULL, OPT_ENGINE_DELAY },
		{ "api-delay-ms", required_argument, NULL, OPT_API_DELAY },
		{ "engine-on-request", no_argument, NULL, OPT_ENGINE_ON_REQUEST },
		{ "preempt-every", required_argument, NULL, OPT_PREEMPT_EVERY },
		{ "preempt-steps", required_argument, NULL, OPT_PREEMPT_STEPS },
		{ "prefill-chunks", required_argument, NULL, OPT_PREFILL_CHUNKS },
		{ "hold-steps", required_argument, NULL, OPT_HOLD_STEPS },
		{ "engine-shape", required_argument, NULL, OPT_ENGINE_SHAPE },
		{ "layers", required_argument, NULL, OPT_LAYERS },
		{ "graph-max-batch", required_argument, NULL, OPT_GRAPH_MAX_BATCH },
		{ "cudart", required_argument, NULL, OPT_CUDART },
		{ "max-batch", required_argument, NULL, OPT_MAX_BATCH },
		{ "prefill-launches", required_argument, NULL, OPT_PREFILL_LAUNCHES },
		{ "gpu-log", required_argument, NULL, OPT_GPU_LOG },
		/* internal: set by the API process on the engine it starts */
		{ "engine-fd", required_argument, NULL, OPT_ENGINE_FD },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static const char *const patterns[] = { "single", "writev", "merged", "split", "mixed" };
	static const char *const wsyss[] = { "write", "send", "sendto", "sendmsg" };
	static const char *const rsyss[] = { "read", "recv", "recvfrom", "recvmsg", "readv" };
	double d;
	int opt, i;

	*o = (struct opts){ .host = "127.0.0.1",
			    .port = DEFAULT_PORT,
			    .tokens = DEFAULT_TOKENS,
			    .merge = DEFAULT_MERGE,
			    .seed = 1,
			    .cudart = DEFAULT_CUDART,
			    .max_batch = DEFAULT_MAX_BATCH,
			    .prefill_launches = DEFAULT_PREFILL_LAUNCHES,
			    .preempt_steps = 3,
			    .prefill_chunks = 1,
			    .layers = 32,
			    .hold_steps = 1,
			    .engine_fd = -1 };
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		bool ok = true;

		switch (opt) {
		case OPT_HOST:
			o->host = optarg;
			break;
		case OPT_PORT:
			ok = parse_num(optarg, &d) && d <= 65535;
			o->port = (int)d;
			break;
		case OPT_TOKENS:
			ok = parse_num(optarg, &d) && d <= MAX_TOKENS_LIMIT;
			o->tokens = (unsigned)d;
			break;
		case OPT_PREFILL:
			ok = parse_num(optarg, &o->prefill_ms);
			break;
		case OPT_PREFILL_BYTE:
			ok = parse_num(optarg, &o->prefill_us_per_byte);
			break;
		case OPT_PREFIX_CACHE:
			o->prefix = !strcmp(optarg, "report") ? PREFIX_REPORT
				    : !strcmp(optarg, "hide") ? PREFIX_HIDE
				    : !strcmp(optarg, "sglang") ? PREFIX_SGLANG
								 : PREFIX_NONE;
			ok = o->prefix != PREFIX_NONE;
			break;
		case OPT_TOKEN:
			ok = parse_num(optarg, &o->token_ms);
			break;
		case OPT_JITTER:
			ok = parse_num(optarg, &o->jitter_ms);
			break;
		case OPT_MAX_STREAMS:
			ok = parse_num(optarg, &d);
			o->max_streams = (unsigned)d;
			break;
		case OPT_MERGE:
			ok = parse_num(optarg, &d) && d >= 1;
			o->merge = (unsigned)d;
			break;
		case OPT_SEED:
			ok = parse_num(optarg, &d);
			o->seed = (uint64_t)d;
			break;
		case OPT_PATTERN:
			i = name_index(optarg, patterns, 5);
			ok = i >= 0;
			o->pattern = (enum pattern)i;
			break;
		case OPT_SYSCALL:
			i = name_index(optarg, wsyss, 4);
			ok = i >= 0;
			o->wsys = (enum wsys)i;
			break;
		case OPT_RECV:
			i = name_index(optarg, rsyss, 5);
			ok = i >= 0;
			o->rsys = (enum rsys)i;
			break;
		case OPT_STATS:
			o->stats = true;
			break;
		case OPT_SKIP_GARBAGE:
			o->skip_garbage = true;
			break;
		case OPT_WORKERS:
			ok = parse_num(optarg, &d) && d >= 1 && d <= WORKERS_MAX;
			o->workers = (unsigned)d;
			break;
		case OPT_GPU:
			o->gpu = true;
			break;
		case OPT_API_DELAY:
			ok = parse_num(optarg, &o->api_delay_ms);
			break;
		case OPT_ENGINE_DELAY:
			ok = parse_num(optarg, &o->engine_delay_ms);
			break;
		case OPT_ENGINE_ON_REQUEST:
			o->engine_on_request = true;
			break;
		case OPT_PREEMPT_EVERY:
			ok = parse_num(optarg, &d) && d >= 0 && d <= 1e6;
			o->preempt_every = (unsigned)d;
			break;
		case OPT_PREEMPT_STEPS:
			ok = parse_num(optarg, &d) && d >= 1 && d <= 1e6;
			o->preempt_steps = (unsigned)d;
			break;
		case OPT_PREFILL_CHUNKS:
			ok = parse_num(optarg, &d) && d >= 1 && d <= 64;
			o->prefill_chunks = (unsigned)d;
			break;
		case OPT_HOLD_STEPS:
			ok = parse_num(optarg, &d) && d >= 1 && d <= 64;
			o->hold_steps = (unsigned)d;
			break;
		case OPT_ENGINE_SHAPE:
			ok = true;
			if (!strcmp(optarg, "graph"))
				o->shape = SHAPE_GRAPH;
			else if (!strcmp(optarg, "piecewise"))
				o->shape = SHAPE_PIECEWISE;
			else if (!strcmp(optarg, "eager"))
				o->shape = SHAPE_EAGER;
			else
				ok = false;
			break;
		case OPT_LAYERS:
			ok = parse_num(optarg, &d) && d >= 1 && d <= 1024;
			o->layers = (unsigned)d;
			break;
		case OPT_GRAPH_MAX_BATCH:
			ok = parse_num(optarg, &d) && d >= 0 && d <= MAX_TOKENS_LIMIT;
			o->graph_max_batch = (unsigned)d;
			break;
		case OPT_CUDART:
			o->cudart = optarg;
			break;
		case OPT_MAX_BATCH:
			ok = parse_num(optarg, &d) && d >= 1 && d <= MAX_TOKENS_LIMIT;
			o->max_batch = (unsigned)d;
			break;
		case OPT_PREFILL_LAUNCHES:
			ok = parse_num(optarg, &d) && d <= MAX_TOKENS_LIMIT;
			o->prefill_launches = (unsigned)d;
			break;
		case OPT_GPU_LOG:
			o->gpu_log = optarg;
			break;
		case OPT_ENGINE_FD:
			ok = parse_num(optarg, &d) && d <= INT_MAX;
			o->engine_fd = (int)d;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
		if (!ok) {
			fprintf(stderr, "refserver: bad value for --%s: %s\n",
				longopts[opt - OPT_HOST].name, optarg);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return -EINVAL;
	}
	if (o->workers > 1 && o->gpu) {
		fprintf(stderr, "refserver: --workers and --gpu do not go together\n");
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct server s = { .lfd = -1,
			    .efd = -1,
			    .tfd = -1,
			    .sfd = -1,
			    .gpu = { .fd = -1, .child_fd = -1, .tfd = -1, .log_fd = -1 } };
	int err;

	if (opts_parse(&s.o, argc, argv))
		return 2;
	if (s.o.engine_fd >= 0)
		return engine_main(&s.o);
	s.gpu.argc = argc;
	s.gpu.argv = argv;
	/* xorshift has one fixed point, zero */
	s.rng = s.o.seed ? s.o.seed : 1;
	if (server_init(&s)) {
		gpu_close(&s);
		return 1;
	}
	err = server_run(&s);
	workers_stop(&s);
	if (s.o.stats)
		stats_print(&s);
	server_close(&s);
	return err ? err : s.failed;
}
