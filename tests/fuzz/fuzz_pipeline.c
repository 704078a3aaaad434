// SPDX-License-Identifier: MIT
/*
 * The whole user-side pipeline (pipeline_feed and what it drives: connections, HTTP, HTTP/2 and
 * gRPC, SSE, frames, request bodies, GPU steps, processes, the exporters) fed a sequence of
 * kernel records that a small interpreter builds from the input. A few connection ids and pids
 * are shared by every op, so records of one connection come from several processes, forks
 * follow exits, and labels pass from parents to children.
 *
 * Input: u8 flags (FP_* in fuzz_pipeline.h), then ops until the input ends. An op is a byte
 * whose low four bits say what it does and whose high four bits are its variant, then its
 * arguments. "who" is a byte: bits 0-1 the connection (ids 1-4), bit 2 the direction, bits 3-5
 * the process (pids FUZZ_PID0 to FUZZ_PID0 + 7).
 *
 *   OP_OPEN   who                  TS_EV_CONN_OPEN; variant bits 0-1: the address family
 *   OP_DATA   who, u16 len, bytes  one syscall of len bytes, pos and syscall_pos where the
 *                                  kernel would put them; variant bit 0: u8 status follows
 *                                  (bits 0-1: bytes, EOF, reset, or an unknown status; bit 2:
 *                                  TLS plaintext, TS_SYS_TLS_*; bit 3: TS_DATA_TLS instead),
 *                                  bit 1: u16 bytes past the capture limit follow, bit 2: u8
 *                                  position change follows (< 0x80: skip that many bytes, a
 *                                  lost record; else rewind), bit 3: u8 follows, the syscall
 *                                  is sent as records of that many bytes + 1 (last on the end)
 *   OP_CLOSE  who                  TS_EV_CONN_CLOSE with the offsets seen; variant bit 0:
 *                                  u8 rx and u8 tx bytes lost at the end follow
 *   OP_FORK   u8 (child | parent << 3)   TS_EV_PROC_FORK
 *   OP_EXIT   who, u8 status       TS_EV_PROC_EXIT
 *   OP_STEP   who, u16 us, u8 launches, u8 graphs, u8 copies    TS_EV_GPU_STEP; variant
 *                                  bit 0: its start and end swapped (it ends before it starts)
 *   OP_CALL   u8 fn, u8 kind       TS_EV_GPU_CALL
 *   OP_LOST   u8 n                 the kernel's lost-record count grows by n
 *   OP_LABEL  who                  pipeline_label_process (--all); variant bit 0: the
 *                                  container id is the next up to 12 bytes (NUL ends it);
 *                                  bit 1: in a pod named by the next up to 12 bytes
 *   OP_TIME   u32 ns               the clock jumps (variant bit 0: backwards)
 *   OP_TICK                        pipeline_tick; variant bit 0: an interval summary too
 *   OP_RAW    u8 type, u8 len, bytes   a record with that type and size and arbitrary rest
 *                                  (variant bit 0: the header's size is not fixed up)
 *   OP_PROC   who                  pipeline_add_process (variant bit 0: as a root; bit 1:
 *                                  pipeline_forget_process instead)
 *   OP_RUNS   who, u8 n, u16 heartbeat age (us), u8 dropped, then n runs of: u16 age (us),
 *             u16 duration and u16 busy (100 ns), u8 launch lead (us), u8 flags, u8 kernels,
 *             u8 graphs, u8 copies, u16 delay (100 ns), u8 launched
 *                                  TS_EV_DEV_RUNS from the CUPTI library; variant bit 0: u8
 *                                  abi follows, bit 1: u8 n sent as is (past the maximum),
 *                                  bit 2: every run ends before it starts
 *   other                          as OP_DATA
 *
 * What it looks for: sanitizer reports, leaks, records after which the feed does not return
 * (libFuzzer's -timeout), and any output that breaks what fuzz_outputs.h checks: every output
 * is on (fuzz_pipeline.h), so a string from the traffic that reaches a terminal raw, a JSON line
 * or OTLP batch that is not strict UTF-8 JSON, or an exposition line Prometheus cannot parse is
 * a finding; and any that breaks what fuzz_meaning.h checks against the clock of the records
 * fed: a negative or impossible duration, a time outside the run, an OTLP span that is its own
 * ancestor.
 */
#include <sys/socket.h>

#include "fuzz_pipeline.h"

#define FUZZ_CONNS 4
#define FUZZ_PIDS 8
#define FUZZ_PID0 100
#define FUZZ_T0 1000000000ull
/* Kernel time between two ops: every record is later than the one before. */
#define FUZZ_OP_NS 1000
#define FUZZ_CONTAINER_BYTES 12

enum {
	OP_OPEN,
	OP_DATA,
	OP_CLOSE,
	OP_FORK,
	OP_EXIT,
	OP_STEP,
	OP_CALL,
	OP_LOST,
	OP_LABEL,
	OP_TIME,
	OP_TICK,
	OP_RAW,
	OP_PROC,
	OP_RUNS,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct interp {
	struct fuzz_in in;
	struct pipeline *pl;
	struct fuzz_clock *clock; /* every time a record fed held */
	uint64_t now;
	uint64_t pos[FUZZ_CONNS][2]; /* the kernel's stream offsets, per connection and direction */
	uint64_t lost;
};

static uint32_t who_conn(uint8_t who)
{
	return who & 3;
}

static int who_dir(uint8_t who)
{
	return (who >> 2) & 1;
}

static uint32_t who_pid(uint8_t who)
{
	return FUZZ_PID0 + ((who >> 3) & 7);
}

/* Feeds a record from a buffer of exactly its size, so that any read past it is caught. */
static void feed(struct interp *it, const void *rec, size_t len)
{
	void *copy = malloc(len ? len : 1);

	if (!copy)
		abort();
	memcpy(copy, rec, len);
	fuzz_clock_record(it->clock, copy, len);
	pipeline_feed(it->pl, copy, len);
	free(copy);
}

static void op_conn(struct interp *it, uint32_t type, uint8_t variant)
{
	static const uint16_t families[] = { AF_INET, AF_INET6, AF_UNIX, 0xffff };
	uint8_t who = fuzz_u8(&it->in);
	uint32_t c = who_conn(who);
	struct ts_conn_event e = { 0 };

	e.hdr.type = type;
	e.hdr.size = sizeof(e);
	e.hdr.pid = who_pid(who);
	e.hdr.tid = e.hdr.pid;
	e.conn_id = c + 1;
	e.ts_ns = it->now;
	e.fd = (int)c + 3;
	e.family = families[type == TS_EV_CONN_OPEN ? variant & 3 : 0];
	e.local_addr[0] = 127, e.local_addr[3] = 1;
	e.peer_addr[0] = 127, e.peer_addr[3] = 1;
	e.local_port = 8000;
	e.peer_port = 40000 + c;
	e.syscall = TS_SYS_ACCEPT;
	e.rx_bytes = it->pos[c][TS_DIR_IN];
	e.tx_bytes = it->pos[c][TS_DIR_OUT];
	if (type == TS_EV_CONN_CLOSE && (variant & 1)) {
		e.rx_bytes += fuzz_u8(&it->in);
		e.tx_bytes += fuzz_u8(&it->in);
	}
	feed(it, &e, sizeof(e));
	if (type == TS_EV_CONN_CLOSE)
		it->pos[c][0] = it->pos[c][1] = 0; /* the id's next use is a new connection */
}

static void op_data(struct interp *it, uint8_t variant)
{
	uint8_t who = fuzz_u8(&it->in);
	uint32_t c = who_conn(who);
	int dir = who_dir(who);
	size_t len = fuzz_u16(&it->in), piece, off = 0;
	uint8_t sb = variant & 1 ? fuzz_u8(&it->in) : TS_DATA_BYTES;
	uint8_t status = sb & 8 ? TS_DATA_TLS : sb % 4 == 3 ? 0x7f : sb % 4;
	uint64_t uncaptured = variant & 2 ? fuzz_u16(&it->in) : 0;
	uint8_t move = variant & 4 ? fuzz_u8(&it->in) : 0;
	const uint8_t *bytes;
	uint64_t start;

	piece = variant & 8 ? (size_t)fuzz_u8(&it->in) + 1 : TS_CHUNK_BYTES;
	bytes = fuzz_bytes(&it->in, len, &len);
	if (move < 0x80)
		it->pos[c][dir] += move;
	else
		it->pos[c][dir] -=
		    it->pos[c][dir] < (move & 0x7fu) ? it->pos[c][dir] : move & 0x7fu;
	start = it->pos[c][dir];
	do {
		size_t n = len - off < piece ? len - off : piece;
		size_t sz = sizeof(struct ts_data_event) + n;
		struct ts_data_event *e = calloc(1, sz);

		if (!e)
			abort();
		e->hdr.type = TS_EV_DATA;
		e->hdr.size = sz;
		e->hdr.pid = who_pid(who);
		e->hdr.tid = e->hdr.pid;
		e->conn_id = c + 1;
		e->enter_ns = it->now;
		e->exit_ns = it->now + 10;
		e->pos = start + off;
		e->syscall_pos = start;
		e->queued_ns = dir == TS_DIR_IN ? it->now - 100 : 0;
		e->syscall_bytes = len + uncaptured;
		e->data_bytes = n;
		e->fd = (int)c + 3;
		e->dir = dir;
		e->syscall = dir ? TS_SYS_WRITE : TS_SYS_READ;
		if (sb & 4)
			e->syscall = dir ? TS_SYS_TLS_WRITE : TS_SYS_TLS_READ;
		e->status = status;
		e->last = off + n == len;
		memcpy(e->data, bytes + off, n);
		fuzz_clock_record(it->clock, e, sz);
		pipeline_feed(it->pl, e, sz);
		free(e);
		off += n;
	} while (off < len);
	it->pos[c][dir] = start + len + uncaptured;
}

static void op_proc(struct interp *it, uint32_t type, uint32_t pid, uint32_t ppid, int code)
{
	struct ts_proc_event e = { 0 };

	e.hdr.type = type;
	e.hdr.size = sizeof(e);
	e.hdr.pid = pid;
	e.hdr.tid = pid;
	e.ts_ns = it->now;
	e.ppid = ppid;
	e.exit_code = code;
	memcpy(e.comm, "vllm", 4);
	feed(it, &e, sizeof(e));
}

static void op_step(struct interp *it, uint8_t variant)
{
	struct ts_gpu_step_event e = { 0 };
	uint8_t who = fuzz_u8(&it->in);
	uint64_t dur = (uint64_t)fuzz_u16(&it->in) * 1000;

	e.hdr.type = TS_EV_GPU_STEP;
	e.hdr.size = sizeof(e);
	e.hdr.pid = who_pid(who);
	e.hdr.tid = e.hdr.pid;
	e.start_ns = it->now > dur ? it->now - dur : 0;
	e.wait_start_ns = it->now - (it->now - e.start_ns) / 4;
	e.end_ns = it->now;
	if (variant & 1) {
		/* A damaged record: it ends before it starts (and before its wait began). */
		e.end_ns = e.start_ns;
		e.start_ns = it->now;
	}
	e.launches = fuzz_u8(&it->in);
	e.graph_launches = fuzz_u8(&it->in);
	e.memcpys = fuzz_u8(&it->in);
	e.memcpys_dtoh = e.memcpys & 3;
	e.waits = 1;
	feed(it, &e, sizeof(e));
}

static void op_call(struct interp *it)
{
	struct ts_gpu_call_event e = { 0 };

	e.hdr.type = TS_EV_GPU_CALL;
	e.hdr.size = sizeof(e);
	e.hdr.pid = FUZZ_PID0;
	e.ts_ns = it->now;
	e.fn = fuzz_u8(&it->in);
	e.kind = fuzz_u8(&it->in);
	feed(it, &e, sizeof(e));
}

static void op_label(struct interp *it, uint8_t variant)
{
	uint8_t who = fuzz_u8(&it->in);
	struct workload wl = { 0 };

	if (variant & 1) {
		char *s = fuzz_str(&it->in, FUZZ_CONTAINER_BYTES);

		snprintf(wl.container_id, sizeof(wl.container_id), "%s", s);
		free(s);
	} else {
		snprintf(wl.container_id, sizeof(wl.container_id), "c%02x", who);
	}
	if (variant & 2) {
		char *s = fuzz_str(&it->in, FUZZ_CONTAINER_BYTES);

		snprintf(wl.k8s_namespace, sizeof(wl.k8s_namespace), "ns");
		snprintf(wl.k8s_pod, sizeof(wl.k8s_pod), "%s", s);
		free(s);
	}
	pipeline_label_process(it->pl, who_pid(who), &wl);
}

static uint64_t ago(const struct interp *it, uint64_t ns)
{
	return it->now > ns ? it->now - ns : 0;
}

static void op_runs(struct interp *it, uint8_t variant)
{
	struct ts_dev_runs_event *e = calloc(1, sizeof(*e));
	uint8_t who = fuzz_u8(&it->in);
	uint32_t n = fuzz_u8(&it->in) % (TS_RUNS_PER_PROBE + 1);

	if (!e)
		abort();
	e->hdr.type = TS_EV_DEV_RUNS;
	e->hdr.size = sizeof(*e);
	e->hdr.pid = who_pid(who);
	e->hdr.tid = e->hdr.pid;
	e->stats.flush_ns = ago(it, (uint64_t)fuzz_u16(&it->in) * 1000);
	e->stats.dropped = fuzz_u8(&it->in);
	for (uint32_t i = 0; i < n; i++) {
		struct ts_dev_run *r = &e->runs[i];
		uint64_t dur, lead;

		r->start_ns = ago(it, (uint64_t)fuzz_u16(&it->in) * 1000);
		dur = (uint64_t)fuzz_u16(&it->in) * 100;
		r->end_ns = variant & 4 ? ago(it, it->now - r->start_ns + dur) : r->start_ns + dur;
		r->busy_ns = (uint64_t)fuzz_u16(&it->in) * 100;
		lead = (uint64_t)fuzz_u8(&it->in) * 1000;
		r->first_launch_ns = r->start_ns > lead ? r->start_ns - lead : 0;
		r->flags = fuzz_u8(&it->in) & 3;
		r->kernels = fuzz_u8(&it->in);
		r->graphs = fuzz_u8(&it->in);
		r->memcpys = fuzz_u8(&it->in);
		r->delay_ns = (uint64_t)fuzz_u16(&it->in) * 100;
		r->delay_max_ns = r->delay_ns;
		r->launched = fuzz_u8(&it->in);
	}
	e->abi = variant & 1 ? fuzz_u8(&it->in) : TS_DEVTIME_ABI;
	e->n = variant & 2 ? fuzz_u8(&it->in) : n;
	feed(it, e, sizeof(*e));
	free(e);
}

static void op_raw(struct interp *it, uint8_t variant)
{
	uint8_t type = fuzz_u8(&it->in);
	size_t len = fuzz_u8(&it->in), got;
	const uint8_t *p = fuzz_bytes(&it->in, len, &got);
	uint8_t buf[UINT8_MAX + sizeof(struct ts_event_hdr)];
	struct ts_event_hdr h;

	if (variant & 1) {
		feed(it, p, got);
		return;
	}
	/* A header that frames the bytes after it, so each type's own checks are reached. */
	len = got + sizeof(h);
	memset(&h, 0, sizeof(h));
	h.type = type % 9;
	h.size = len;
	h.pid = FUZZ_PID0 + (type >> 5);
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), p, got);
	feed(it, buf, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct interp it = { .in = fuzz_in(data, size), .now = FUZZ_T0 };
	unsigned flags = fuzz_u8(&it.in);
	struct fuzz_pipeline f;

	fuzz_pipeline_open(&f, flags);
	it.pl = &f.pl;
	it.clock = &f.clock;
	/* As `trace -p 100`: the first process is a root. */
	pipeline_add_process(it.pl, FUZZ_PID0, true);
	while (it.in.n) {
		uint8_t op = fuzz_u8(&it.in), variant = op >> 4, who;

		it.now += FUZZ_OP_NS;
		switch (op & 15) {
		case OP_OPEN:
			op_conn(&it, TS_EV_CONN_OPEN, variant);
			break;
		case OP_CLOSE:
			op_conn(&it, TS_EV_CONN_CLOSE, variant);
			break;
		case OP_FORK:
			who = fuzz_u8(&it.in);
			op_proc(&it, TS_EV_PROC_FORK, FUZZ_PID0 + (who & 7),
				FUZZ_PID0 + ((who >> 3) & 7), 0);
			break;
		case OP_EXIT:
			who = fuzz_u8(&it.in);
			op_proc(&it, TS_EV_PROC_EXIT, who_pid(who), 0, fuzz_u8(&it.in));
			break;
		case OP_STEP:
			op_step(&it, variant);
			break;
		case OP_CALL:
			op_call(&it);
			break;
		case OP_LOST:
			it.lost += fuzz_u8(&it.in);
			pipeline_kernel_lost(it.pl, it.lost);
			break;
		case OP_LABEL:
			op_label(&it, variant);
			break;
		case OP_TIME: {
			uint32_t ns = fuzz_u32(&it.in);

			if (variant & 1)
				it.now -= it.now > ns ? ns : it.now;
			else
				it.now += ns;
			break;
		}
		case OP_TICK:
			pipeline_tick(it.pl);
			if (variant & 1)
				pipeline_interval(it.pl);
			break;
		case OP_RAW:
			op_raw(&it, variant);
			break;
		case OP_PROC:
			who = fuzz_u8(&it.in);
			if (variant & 2)
				pipeline_forget_process(it.pl, who_pid(who));
			else
				pipeline_add_process(it.pl, who_pid(who), variant & 1);
			break;
		case OP_RUNS:
			op_runs(&it, variant);
			break;
		default:
			op_data(&it, variant);
			break;
		}
	}
	fuzz_pipeline_close(&f);
	return 0;
}
