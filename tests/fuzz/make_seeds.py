#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed corpora of tests/fuzz/seeds/<target>/ from the wire fixtures.

Each target's input format is described at the top of its source file; this script lays the
fixtures out in those formats: the requests and responses of tests/fixtures as HTTP feeds (one
feed per write syscall, as the .writes files say), their de-chunked bodies for the SSE parser,
their frames for the classifier, their request bodies for reqbody, and whole connections as
.tsr recordings and as programs of the pipeline interpreter; the HTTP/2 fixtures (both sides of
a connection and their order, from capture_pair.py) as each side for fuzz_h2 from where HTTP/2
begins (an Upgrade: h2c may come first), the DATA of their gRPC streams, frames rewritten with
every optional field, and connections of the pipeline interpreter in either role; fuzz_cupti's
are CUPTI activity records of a prefill, decode steps and interleaved streams, made up here.
The seeds are committed; run this again after a fixture or an input format changes:

    tests/fuzz/make_seeds.py            # rewrites tests/fuzz/seeds/
    tests/fuzz/make_seeds.py fuzz_cupti # rewrites only the seeds of the targets named
"""
import os
import shutil
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
SEEDS = os.path.join(ROOT, "tests", "fuzz", "seeds")

# include/events.h
EV_DATA, EV_CONN_OPEN, EV_CONN_CLOSE, EV_PROC_FORK, EV_PROC_EXIT, EV_GPU_STEP, EV_GPU_CALL = (
    range(1, 8))
DIR_IN, DIR_OUT = 0, 1
SYS_READ, SYS_WRITE, SYS_ACCEPT = 1, 5, 10
AF_INET = 2
# user/record/record.h
RECORD_EV_KSTATS = 0x10000
RECORD_EV_DEVICE_SAMPLE = 0x10001
RECORD_EV_WORKLOAD = 0x10002
RECORD_SAMPLE_TEXT = 296
RECORD_HEADER_BYTES = 400
STATS = 7

# tests/fuzz/fuzz_pipeline.h: FP_*
FP_TOKENS, FP_VERBOSE, FP_GPU, FP_KEEP_RUNNING, FP_BY_PROCESS, FP_TTY, FP_HEAVY, FP_SLOW = (
    1 << i for i in range(8))
# tests/fuzz/fuzz_record.c: RF_*
RF_JSON, RF_TOKENS, RF_GPU, RF_VERBOSE, RF_PROMETHEUS, RF_ALERTS, RF_BY_PROCESS = (
    1 << i for i in range(7))
# tests/fuzz/fuzz_pipeline.c: OP_*
(OP_OPEN, OP_DATA, OP_CLOSE, OP_FORK, OP_EXIT, OP_STEP, OP_CALL, OP_LOST, OP_LABEL, OP_TIME,
 OP_TICK, OP_RAW, OP_PROC) = range(13)
# tests/fuzz/fuzz_h2.c: HF_*
HF_PREFACE, HF_GAPS, HF_GRPC, HF_OWN_TABLE, HF_TABLE_AT = 1, 2, 32, 64, 128
# user/pipeline/h2.h
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
(H2_DATA, H2_HEADERS, H2_PRIORITY, H2_RST_STREAM, H2_SETTINGS, H2_PUSH_PROMISE, H2_PING,
 H2_GOAWAY, H2_WINDOW_UPDATE, H2_CONTINUATION) = range(10)
H2F_END_STREAM, H2F_END_HEADERS, H2F_PADDED, H2F_PRIORITY = 0x1, 0x4, 0x8, 0x20
# tests/fuzz/fuzz_http.h: FLAG_*
H_GAPS, H_NO_BODY, H_CHUNK, H_REINIT = 1, 2, 4, 8
# tests/fuzz/fuzz_cupti.c: CF_*
(CF_RUNTIME, CF_DRIVER, CF_KERNEL, CF_GRAPH, CF_MEMCPY, CF_UNKNOWN, CF_SINGLE, CF_FLUSH,
 CF_OFFSET) = range(9)
CF_LEGACY_KERNEL = 0x80  # 128 % 9 == CF_KERNEL, with bit 0x80: the KERNEL kind
# The CUDA toolkit's CUpti_ActivityKind and CUpti_ActivityMemcpyKind values
KIND_MEMCPY, KIND_KERNEL, KIND_DRIVER, KIND_RUNTIME, KIND_CONCURRENT_KERNEL = 1, 3, 4, 5, 10
KIND_MARKER = 12
KIND_GRAPH_TRACE = 51
MEMCPY_HTOD, MEMCPY_DTOH = 1, 2


def all_fixtures():
    return sorted(f[:-5] for f in os.listdir(FIXTURES) if f.endswith(".resp"))


def two_sided(name):
    return os.path.exists(os.path.join(FIXTURES, name + ".order"))


def fixture_names():
    """The HTTP/1.x fixtures."""
    return [n for n in all_fixtures() if not two_sided(n)]


def h2_fixture_names():
    """The HTTP/2 fixtures (capture_pair.py's): both sides of a connection, each as its writes,
    and their order."""
    return [n for n in all_fixtures() if two_sided(n)]


def read(name):
    with open(os.path.join(FIXTURES, name), "rb") as f:
        return f.read()


def writes(name, side="resp"):
    """The response (or side "req": the request) of fixture name, cut into its write syscalls."""
    resp = read(name + "." + side)
    try:
        sizes = [int(x) for x in read(name + "." + side + ".writes").split()]
    except FileNotFoundError:
        sizes = [len(resp)]
    out, off = [], 0
    for n in sizes:
        out.append(resp[off:off + n])
        off += n
    return out


def split_head(msg):
    end = msg.find(b"\r\n\r\n")
    return (msg, b"") if end < 0 else (msg[:end + 4], msg[end + 4:])


def header(head, name):
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name:
            return v.strip().lower()
    return b""


def dechunk(body):
    out = b""
    while body:
        line, _, body = body.partition(b"\r\n")
        n = int(line.split(b";")[0], 16)
        if n == 0:
            break
        out += body[:n]
        body = body[n + 2:]
    return out


def first_body(name):
    """(content type, decoded body) of the fixture's first response."""
    head, rest = split_head(read(name + ".resp"))
    if b"chunked" in header(head, b"transfer-encoding"):
        body = dechunk(rest)
    else:
        body = rest[:int(header(head, b"content-length") or len(rest))]
    return header(head, b"content-type").split(b";")[0], body


def request_body(name):
    return split_head(read(name + ".req"))[1]


def frames(body, ndjson):
    """(event, data) of each frame of a decoded body, for the classifier."""
    if ndjson:
        return [(b"", line) for line in body.split(b"\n") if line.strip()]
    out = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        event, data = b"", []
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                event = line[6:].strip()
            elif line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
        if data:
            out.append((event, b"\n".join(data)))
    return out


# ---- records (include/events.h), as the kernel lays them out ----

def hdr(type_, size, pid=100):
    return struct.pack("<IIII", type_, size, pid, pid)


def conn_event(type_, conn_id, ts, rx=0, tx=0, pid=100):
    body = struct.pack("<QQiHHHB5x16s16sQQ", conn_id, ts, 5, AF_INET, 8000, 40000 + conn_id,
                       SYS_ACCEPT, bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]), rx, tx)
    return hdr(type_, 16 + len(body), pid) + body


def data_event(conn_id, direction, pos, data, ts, v1=False, pid=100):
    queued = ts - 100 if direction == DIR_IN else 0
    times = struct.pack("<QQQQ", conn_id, ts, ts + 10, pos) + struct.pack("<Q", pos)
    if not v1:
        times += struct.pack("<Q", queued)
    tail = struct.pack("<IIiBBBB", len(data), len(data), 5, direction,
                       SYS_WRITE if direction else SYS_READ, 1, 0)
    size = 16 + len(times) + len(tail) + len(data)
    return hdr(EV_DATA, size, pid) + times + tail + data


def proc_event(type_, pid, ppid, ts, code=0):
    return hdr(type_, 48, pid) + struct.pack("<QIi16s", ts, ppid, code, b"vllm")


def gpu_step(pid, start, end):
    return hdr(EV_GPU_STEP, 64, pid) + struct.pack("<QQQIIIIII", start, end - 1000, end, 40, 0,
                                                   1, 1, 1, 0)


def kstats(lost):
    stats = [0] * STATS
    stats[1] = lost
    return hdr(RECORD_EV_KSTATS, 24 + 8 * STATS, 0) + struct.pack("<II", STATS, 0) + \
        struct.pack("<%dQ" % STATS, *stats)


def device_sample(seq, util, procs):
    """A GPU sample (record.h: record_sample_event, one record_sample_device, its processes)."""
    dev = struct.pack("<IIIIQQQQII", 0, 0x1f, util, 350125, 1_000_200_000, 1 << 30, 8 << 30,
                      1_980_000_000, len(procs), 0)
    dev += b"Stub H200".ljust(RECORD_SAMPLE_TEXT, b"\0") + b"GPU-0".ljust(RECORD_SAMPLE_TEXT, b"\0")
    dev += b"".join(struct.pack("<IIQ", pid, 1, mem) for pid, mem in procs)
    body = struct.pack("<QII", seq, 1, 0) + dev
    return hdr(RECORD_EV_DEVICE_SAMPLE, 16 + len(body), 0) + body


def workload(pid, cid, uid, ns, pod, container):
    """Where process pid runs (record.h: record_workload_event)."""
    body = struct.pack("<Q", 999_500_000) + cid.ljust(72, b"\0") + uid.ljust(40, b"\0") + \
        ns.ljust(64, b"\0") + pod.ljust(256, b"\0") + container.ljust(64, b"\0")
    return hdr(RECORD_EV_WORKLOAD, 16 + len(body), pid) + body


def connection_records(name, t0=1_000_000_000, conn_id=1, v1=False):
    """One connection of the fixture: open, the request, every write, close."""
    req, recs, ts = read(name + ".req"), [], t0
    recs.append(conn_event(EV_CONN_OPEN, conn_id, ts))
    recs.append(data_event(conn_id, DIR_IN, 0, req, ts + 1000, v1))
    pos, ts = 0, ts + 1_000_000
    for w in writes(name):
        recs.append(data_event(conn_id, DIR_OUT, pos, w, ts, v1))
        pos += len(w)
        ts += 20_000_000
    recs.append(conn_event(EV_CONN_CLOSE, conn_id, ts, len(req), pos))
    return recs


def tsr(records, flags=0, version=2, roots=(100,)):
    h = bytearray(RECORD_HEADER_BYTES)
    h[0:8] = b"TSREC\0\0\0"
    struct.pack_into("<IIQQII", h, 8, version, RECORD_HEADER_BYTES, 1_000_000_000,
                     1_700_000_000_000_000_000, 65536, len(roots))
    h[40:40 + 5] = b"0.1.0"
    h[72:72 + 4] = b"node"
    for i, r in enumerate(roots):
        struct.pack_into("<I", h, 136 + 4 * i, r)
    h[392] = flags
    return bytes(h) + b"".join(struct.pack("<I", len(r)) + r for r in records)


# ---- programs of the pipeline interpreter (tests/fuzz/fuzz_pipeline.c) ----

def who(conn=0, direction=DIR_IN, pid=0):
    return bytes([conn | direction << 2 | pid << 3])


def op_data(conn, direction, data, pid=0):
    return bytes([OP_DATA]) + who(conn, direction, pid) + struct.pack("<H", len(data)) + data


def program(name, conn=0, pid=0, close=True):
    p = bytes([OP_OPEN]) + who(conn, DIR_IN, pid)
    p += op_data(conn, DIR_IN, read(name + ".req"), pid)
    for w in writes(name):
        p += bytes([OP_TIME]) + struct.pack("<I", 20_000_000)
        p += op_data(conn, DIR_OUT, w, pid)
    if close:
        p += bytes([OP_CLOSE]) + who(conn, DIR_IN, pid)
    return p


# ---- HTTP/2 (user/pipeline/h2.c) ----

def h2_frames(data, preface):
    """(type, flags, stream, payload) of each frame of one side of an HTTP/2 connection."""
    out, i = [], len(H2_PREFACE) if preface else 0
    while len(data) - i >= 9:
        n = int.from_bytes(data[i:i + 3], "big")
        stream = int.from_bytes(data[i + 5:i + 9], "big") & 0x7fffffff
        out.append((data[i + 3], data[i + 4], stream, data[i + 9:i + 9 + n]))
        i += 9 + n
    return out


def h2_frame(type_, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([type_, flags]) + \
        stream.to_bytes(4, "big") + payload


def h2_data(frames):
    """{stream: its DATA bytes} (none of the fixtures pads)."""
    out = {}
    for type_, _, stream, payload in frames:
        if type_ == H2_DATA:
            out[stream] = out.get(stream, b"") + payload
    return out


def h2_reframed(frames):
    """The same exchange with every optional field: header blocks padded, with priority and
    cut into CONTINUATIONs, DATA padded (empty frames too, one of them padded), and frames the
    parser skips."""
    out = h2_frame(H2_SETTINGS, 0, 0, struct.pack(">HIHI", 1, 8192, 4, 1 << 20))
    for type_, flags, stream, payload in frames:
        if type_ == H2_HEADERS and flags & H2F_END_HEADERS and not flags & H2F_PADDED:
            half = len(payload) // 2
            out += h2_frame(H2_PRIORITY, 0, stream, struct.pack(">IB", 0, 31))
            out += h2_frame(H2_HEADERS, (flags & H2F_END_STREAM) | H2F_PADDED | H2F_PRIORITY,
                            stream, bytes([2]) + struct.pack(">IB", 0, 15) + payload[:half] +
                            bytes(2))
            out += h2_frame(H2_CONTINUATION, 0, stream, payload[half:half + 1])
            out += h2_frame(H2_CONTINUATION, H2F_END_HEADERS, stream, payload[half + 1:])
        elif type_ == H2_DATA and payload:
            out += h2_frame(H2_DATA, 0, stream, b"")
            out += h2_frame(H2_DATA, flags | H2F_PADDED, stream, bytes([3]) + payload + bytes(3))
        elif type_ == H2_DATA:
            out += h2_frame(H2_DATA, flags | H2F_PADDED, stream, bytes([4]) + bytes(4))
        else:
            out += h2_frame(type_, flags, stream, payload)
        out += h2_frame(0x20, 0xff, stream, b"ext")  # an extension frame: ignored
    out += h2_frame(H2_PUSH_PROMISE, H2F_END_HEADERS, 1, struct.pack(">I", 2))
    out += h2_frame(H2_RST_STREAM, 0, 7, struct.pack(">I", 8))
    out += h2_frame(H2_WINDOW_UPDATE, 0, 0, struct.pack(">I", 65535))
    return out + h2_frame(H2_GOAWAY, 0, 0, struct.pack(">II", 5, 0) + b"bye")


def h2_gap_ctl(data, frames, preface):
    """Control bytes that feed up to two bytes into the first DATA payload of 8 bytes or more,
    lose three bytes there, and feed the rest (fuzz_h2.c: 127 at most per feed with gaps)."""
    off = len(H2_PREFACE) if preface else 0
    for type_, _, _, payload in frames:
        if type_ == H2_DATA and len(payload) >= 8:
            off += 9 + 2
            break
        off += 9 + len(payload)
    else:
        return None
    ctl = bytes([127]) * (off // 127)
    if off % 127:
        ctl += bytes([off % 127])
    ctl += bytes([0x82, 0])
    return ctl if len(ctl) < 32 else None


def h2_side(name, side):
    """One side of an HTTP/2 fixture from where HTTP/2 begins (the client's preface; after an
    Upgrade: h2c, the end of the server's 101), and its writes from there."""
    data = read(name + "." + side)
    if side == "req":
        start = data.index(H2_PREFACE)
    elif data.startswith(b"HTTP/1.1 101"):
        start = data.index(b"\r\n\r\n") + 4
    else:
        start = 0
    out, off = [], 0
    for w in writes(name, side):
        if off + len(w) > start:
            out.append(w[max(0, start - off):])
        off += len(w)
    return data[start:], out


def h2_seeds():
    for name in h2_fixture_names():
        for side, flags in (("req", HF_PREFACE), ("resp", 0)):
            data, ws = h2_side(name, side)
            frames = h2_frames(data, flags & HF_PREFACE)
            base = "%s.%s" % (name, side)
            ctl = bytes(min(len(w), 255) for w in ws[:31])
            put("fuzz_h2", base, bytes([flags, len(ctl)]) + ctl + data)
            put("fuzz_h2", base + "-bytes", bytes([flags, 1, 1]) + data)
            ctl = h2_gap_ctl(data, frames, flags & HF_PREFACE)
            if ctl:
                put("fuzz_h2", base + "-gap", bytes([flags | HF_GAPS, len(ctl)]) + ctl + data)
            # A budget the inflater fits in (64 KiB), and one it does not (4 KiB).
            put("fuzz_h2", base + "-budget", bytes([flags | 4 << 2, 1, 13]) + data)
            put("fuzz_h2", base + "-budget-small", bytes([flags | 2 << 2, 0]) + data)
            # The peer's table bound raised half-way, and this side's SETTINGS applied to itself.
            put("fuzz_h2", base + "-table", bytes([flags | HF_OWN_TABLE | HF_TABLE_AT]) +
                struct.pack("<IH", 65536, len(data) // 2) + bytes([1, 31]) + data)
            put("fuzz_h2", base + "-reframed", bytes([flags, 2, 11, 5]) +
                (H2_PREFACE if flags & HF_PREFACE else b"") + h2_reframed(frames))
            for stream, body in sorted(h2_data(frames).items()):
                if name.startswith("grpc"):
                    put("fuzz_h2", "%s-grpc%d" % (base, stream), bytes([HF_GRPC, 2, 3, 7]) + body)
                    put("fuzz_h2", "%s-grpc%d-gap" % (base, stream),
                        bytes([HF_GRPC | HF_GAPS, 3, 6, 0x81, 0]) + body)


def order(name):
    """(side, write index, microseconds) of each write of an HTTP/2 fixture, in captured order."""
    out = []
    for line in read(name + ".order").decode().splitlines():
        side, idx, us = line.split()
        out.append((side, int(idx), int(us)))
    return out


def program_h2(name, client, conn=0, piece=0):
    """Both sides of an HTTP/2 fixture as the traced process sees them: the server reads the
    requests and writes the responses, a client the other way round; piece > 0: every syscall
    as records of that many bytes."""
    ws = {side: writes(name, side) for side in ("req", "resp")}
    p, t = bytes([OP_OPEN]) + who(conn), 0
    for side, idx, us in order(name):
        if us > t:
            p += bytes([OP_TIME]) + struct.pack("<I", (us - t) * 1000)
            t = us
        d = DIR_IN if (side == "req") != client else DIR_OUT
        w = ws[side][idx]
        if piece:
            p += bytes([OP_DATA | 0x80]) + who(conn, d) + struct.pack("<H", len(w)) + \
                bytes([piece - 1]) + w
        else:
            p += op_data(conn, d, w)
    return p + bytes([OP_CLOSE]) + who(conn)


def pipeline_h2_seeds():
    for i, name in enumerate(h2_fixture_names()):
        flags = [FP_TOKENS, FP_HEAVY | FP_VERBOSE, FP_SLOW | FP_TTY][i % 3]
        put("fuzz_pipeline", name + "-server", bytes([flags]) + program_h2(name, False))
        put("fuzz_pipeline", name + "-client", bytes([flags | FP_TOKENS]) +
            program_h2(name, True))
    # Short reads: every syscall as 7-byte records.
    put("fuzz_pipeline", "grpcio_stream-server-records",
        bytes([FP_TOKENS]) + program_h2("grpcio_stream", False, 2, 7))
    # Streams ended early: the server resets stream 1 after its first message and sends GOAWAY
    # (last stream 1) after stream 3's headers; each frame its own write.
    req, resp = read("grpcio_stream.req"), read("grpcio_stream.resp")
    p = bytes([FP_TOKENS, OP_OPEN]) + who() + op_data(0, DIR_IN, req)
    reset = goaway = False
    for type_, flags, stream, payload in h2_frames(resp, False):
        p += op_data(0, DIR_OUT, h2_frame(type_, flags, stream, payload))
        if type_ == H2_DATA and stream == 1 and not reset:
            p += op_data(0, DIR_OUT, h2_frame(H2_RST_STREAM, 0, 1, struct.pack(">I", 8)))
            reset = True
        if type_ == H2_HEADERS and stream == 3 and not goaway:
            p += op_data(0, DIR_OUT, h2_frame(H2_GOAWAY, 0, 0, struct.pack(">II", 1, 0)))
            goaway = True
    put("fuzz_pipeline", "grpcio_stream-server-resets", p + bytes([OP_CLOSE]) + who())
    # The client gives up on stream 3 (RST_STREAM) before its answer comes.
    p = bytes([FP_SLOW, OP_OPEN]) + who(1)
    p += op_data(1, DIR_IN, read("hypercorn_h2c.req") +
                 h2_frame(H2_RST_STREAM, 0, 3, struct.pack(">I", 8)))
    for w in writes("hypercorn_h2c"):
        p += op_data(1, DIR_OUT, w)
    put("fuzz_pipeline", "hypercorn_h2c-server-client-reset", p + bytes([OP_CLOSE]) + who(1))
    # A lost record: 3 bytes inside the 8 of stream 1's third message never seen (the kernel's
    # offsets jump), so that message is damaged and the stream goes on.
    p = bytes([FP_TOKENS, OP_OPEN]) + who() + op_data(0, DIR_IN, req)
    cut = resp.index(b"\x00\x00\x0d\x00\x00\x00\x00\x00\x01") + 9 + 5 + 2
    p += op_data(0, DIR_OUT, resp[:cut])
    p += bytes([OP_DATA | 0x40]) + who(0, DIR_OUT) + struct.pack("<H", len(resp) - cut - 3) + \
        bytes([3]) + resp[cut + 3:]
    put("fuzz_pipeline", "grpcio_stream-server-lost", p + bytes([OP_CLOSE]) + who())


# ---- CUPTI activity records (tests/fuzz/fuzz_cupti.c), as CUDA 13's structs lay them out ----

def cf_api(kind, correlation, start, end, cbid=211):
    """CUpti_ActivityAPI: 40 bytes."""
    return bytes([CF_RUNTIME if kind == KIND_RUNTIME else CF_DRIVER]) + struct.pack(
        "<IIQQIIII", kind, cbid, start, end, 4242, 4243, correlation, 0)


def cf_kernel(correlation, start, end, stream=7, device=0, legacy=False):
    """CUpti_ActivityKernel10: 216 bytes; start at 16, deviceId at 40, streamId at 48,
    correlationId at 92."""
    rec = bytearray(216)
    struct.pack_into("<I", rec, 0, KIND_KERNEL if legacy else KIND_CONCURRENT_KERNEL)
    struct.pack_into("<QQ", rec, 16, start, end)
    struct.pack_into("<IIIiii", rec, 40, device, 1, stream, 128, 1, 1)
    struct.pack_into("<I", rec, 92, correlation)
    return bytes([CF_LEGACY_KERNEL if legacy else CF_KERNEL]) + bytes(rec)


def cf_graph(correlation, start, end, stream=7, device=0, graph=3):
    """CUpti_ActivityGraphTrace2: 56 bytes."""
    return bytes([CF_GRAPH]) + struct.pack("<IIQQIIIIQQ", KIND_GRAPH_TRACE, correlation, start,
                                           end, device, graph, 1, stream, 0, 0)


def cf_memcpy(copy_kind, correlation, start, end, stream=7, device=0, nbytes=4096):
    """CUpti_ActivityMemcpy6: 96 bytes; copyKind at 4, start at 16, streamId at 40."""
    rec = bytearray(96)
    struct.pack_into("<IBBBB", rec, 0, KIND_MEMCPY, copy_kind, 1, 2, 0)
    struct.pack_into("<QQQIIII", rec, 8, nbytes, start, end, device, 1, stream, correlation)
    return bytes([CF_MEMCPY]) + bytes(rec)


def cf_launch(correlation, t):
    """A launch as CUPTI records it: the runtime call and the driver call inside it."""
    return cf_api(KIND_RUNTIME, correlation, t, t + 4000) + \
        cf_api(KIND_DRIVER, correlation, t + 300, t + 3500, 307)


def cupti_seeds():
    t0 = 1_000_000_000_000
    # An eager prefill: 40 kernels launched every 5 us, queued on the device, 1 to 2 us apart.
    api, ops, dev = b"", b"", t0 + 50_000
    for i in range(40):
        api += cf_launch(100 + i, t0 + 5000 * i)
        dur = 20_000 + 7_000 * (i % 5)
        ops += cf_kernel(100 + i, dev, dev + dur)
        dev += dur + 1000 + 300 * (i % 4)
    put("fuzz_cupti", "prefill-40-kernels", api + ops + bytes([CF_FLUSH]))
    # Decode steps: the input copied up, a graph replay, the sampled tokens copied down; a
    # buffer each.
    steps, t = b"", t0
    for i in range(3):
        c = 1000 + 3 * i
        steps += cf_launch(c, t) + cf_launch(c + 1, t + 10_000) + cf_launch(c + 2, t + 20_000)
        steps += cf_memcpy(MEMCPY_HTOD, c, t + 30_000, t + 32_000, nbytes=64)
        steps += cf_graph(c + 1, t + 33_000, t + 8_033_000)
        steps += cf_memcpy(MEMCPY_DTOH, c + 2, t + 8_035_000, t + 8_036_500, nbytes=8)
        steps += bytes([CF_FLUSH])
        t += 9_000_000
    put("fuzz_cupti", "decode-graph-dtoh", steps)
    # The same through the offset clock: CUPTI's own times, moved to CLOCK_MONOTONIC.
    put("fuzz_cupti", "decode-offset", bytes([CF_OFFSET]) +
        struct.pack("<q", -999_000_000_000) + steps)
    # Compute and copy streams interleaved, a second device, an op whose launch never came.
    mix = cf_launch(1, t0) + cf_launch(2, t0 + 1000) + cf_launch(3, t0 + 2000)
    mix += cf_kernel(1, t0 + 10_000, t0 + 30_000, 7)
    mix += cf_memcpy(MEMCPY_HTOD, 2, t0 + 12_000, t0 + 40_000, 9)
    mix += cf_kernel(3, t0 + 31_000, t0 + 50_000, 7)
    mix += cf_memcpy(MEMCPY_DTOH, 4, t0 + 41_000, t0 + 42_000, 9)
    mix += cf_kernel(5, t0 + 20_000, t0 + 60_000, 7, device=1, legacy=True)
    mix += cf_kernel(6, t0 + 52_000, t0 + 53_000, 7)
    put("fuzz_cupti", "interleaved-streams", mix + bytes([CF_FLUSH]))
    # More streams than runs open at once; gaps at the limit and one past it.
    wide = b"".join(cf_kernel(i, t0 + 100 * i, t0 + 100 * i + 50, stream=i) for i in range(20))
    # The last stream is still open: a gap of 2000 joins it, then one of 2001 splits it.
    wide += cf_kernel(30, t0 + 3950, t0 + 4500, stream=19)
    wide += cf_kernel(31, t0 + 6501, t0 + 7000, stream=19)
    put("fuzz_cupti", "many-streams-gaps", wide)
    # --kernels: single mode; an unknown kind; bad times; a launch table collision.
    odd = bytes([CF_SINGLE]) + cf_launch(7, t0) + cf_kernel(7, t0 + 9000, t0 + 9500)
    odd += cf_kernel(8, t0 + 9600, t0 + 9400) + bytes([CF_SINGLE])
    odd += bytes([CF_UNKNOWN]) + struct.pack("<I", KIND_MARKER) + struct.pack("<II", 0, 0)
    odd += cf_launch(9, t0 + 20_000) + cf_launch(9 + 8192, t0 + 21_000)
    odd += cf_kernel(9, t0 + 30_000, t0 + 31_000) + cf_kernel(9 + 8192, t0 + 15_000, t0 + 16_000)
    put("fuzz_cupti", "single-unknown-bad-times", odd + bytes([CF_FLUSH]))
    # CUPTI's own overhead records (their times zero here; mutations fill them), one with an
    # overheadData block for the reader to free, one without.
    put("fuzz_cupti", "overhead", bytes([CF_UNKNOWN | 0xC0]) + bytes(64) +
        bytes([CF_UNKNOWN | 0x80]) + bytes(64) + bytes([CF_FLUSH]))


# ---- writing ----

ONLY = None  # the targets named on the command line; None: all


def put(target, name, data):
    if ONLY is not None and target not in ONLY:
        return
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def http_seeds():
    for name in fixture_names():
        req = read(name + ".req")
        put("fuzz_http_request", name, bytes([0, 0]) + req)
        put("fuzz_http_request", name + "-bytes", bytes([0, 1, 1]) + req)
        ws = writes(name)
        ctl = bytes(min(len(w), 255) for w in ws[:31])
        put("fuzz_http_response", name, bytes([0, len(ctl)]) + ctl + b"".join(ws))
        put("fuzz_http_response", name + "-gaps",
            bytes([H_GAPS | H_REINIT, 3, 40, 0x83, 0]) + b"".join(ws))
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\n\r\n")
    put("fuzz_http_request", "chunked", bytes([H_CHUNK | 3 << 5, 0]) + head +
        request_body("uvloop_vllm"))
    resp = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
    put("fuzz_http_response", "chunked", bytes([H_CHUNK | 4 << 5, 2, 7, 0]) + resp +
        first_body("uvicorn_h11")[1])
    put("fuzz_http_response", "interim",
        bytes([0, 0]) + b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\nHTTP/1.0 200 OK\r\n\r\nuntil close")
    put("fuzz_http_response", "head", bytes([H_NO_BODY, 0]) +
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
    put("fuzz_http_request", "pipelined", bytes([0, 0]) +
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
        b"\r\nHEAD /h HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")


def sse_seeds():
    for name in fixture_names():
        ctype, body = first_body(name)
        ndjson = ctype != b"text/event-stream"
        put("fuzz_sse", name, bytes([int(ndjson), 0]) + body)
        put("fuzz_sse", name + "-gaps", bytes([int(ndjson) | 2, 4, 50, 0x8a, 13, 0]) + body)
        put("fuzz_sse", name + "-twice", bytes([int(ndjson) | 4]) +
            struct.pack("<H", len(body) // 2) + bytes([1, 9]) + body)
    put("fuzz_sse", "fields", bytes([0, 0]) + b"\xef\xbb\xbf: comment\r\nid: 1\rretry: 5\n"
        b"event: x\ndata\ndata:two\r\n\r\nevent:y\n\ndata: last")


def frame_seeds():
    for name in fixture_names():
        ctype, body = first_body(name)
        for i, (event, data) in enumerate(frames(body, ctype != b"text/event-stream")):
            put("fuzz_frame", "%s-%d" % (name, i), bytes([len(event)]) + event + data)
    for name in fixture_names():
        head, rest = split_head(read(name + ".resp"))
        if b"content-length" in head.lower():
            put("fuzz_frame", name + "-body", bytes([0]) + rest)


def reqbody_seeds():
    for name in fixture_names():
        body = request_body(name)
        put("fuzz_reqbody", name, struct.pack("<H", 0) + body)
        put("fuzz_reqbody", name + "-cut", struct.pack("<H", len(body) // 3) + body)
    put("fuzz_reqbody", "nested", struct.pack("<H", 0) +
        b'{"options":{"num_predict":-1},"parameters":{"max_new_tokens":20},'
        b'"max_completion_tokens":7,"model":"a\\"b\\u00e9","stream":false}')
    # --label's body values: a user, a nested tenant, a number, and a user that is an object.
    put("fuzz_reqbody", "labels", struct.pack("<H", 0) +
        b'{"model":"m","user":"u-1\\u001b","metadata":{"tenant":"acme"},"n":12345678901234567,'
        b'"a":{"b":{"c":{"d":true}}},"messages":[{"role":"user","content":"hi"}]}')
    put("fuzz_reqbody", "labels-odd", struct.pack("<H", 0) +
        b'{"user":{"id":1},"metadata":"acme","n":1.5e300,"a":{"b":[1]}}')
    # Disaggregated serving's join keys, as vLLM's proxy and SGLang's router send them.
    for name, body in (
            ("vllm-prefill", b'{"model":"m","messages":[{"role":"user","content":"hi"}],'
             b'"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true,'
             b'"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,'
             b'"remote_host":null,"remote_port":null}}'),
            ("vllm-decode", b'{"model":"m","stream":true,"kv_transfer_params":'
             b'{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],'
             b'"remote_engine_id":"8c2a1f0e-5b7d","remote_request_id":"cmpl-a1b2-0",'
             b'"remote_host":"10.0.0.5","remote_port":5600,"tp_size":1}}'),
            ("sglang-pd", b'{"text":"hi","stream":true,"bootstrap_host":"10.0.0.7",'
             b'"bootstrap_port":8998,"bootstrap_room":9223372036854775807}')):
        put("fuzz_reqbody", name, struct.pack("<H", 0) + body)
        put("fuzz_reqbody", name + "-cut", struct.pack("<H", len(body) // 3) + body)


def tracectx_seeds():
    tp = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    def field(which, value):
        return bytes([which]) + struct.pack("<H", len(value)) + value
    put("fuzz_tracectx", "w3c", field(0, tp) + field(1, b"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        + field(2, b"7f3c-11"))
    put("fuzz_tracectx", "upper-names", field(3, b" " + tp + b" ") + field(4, b"a=1, ,b@c=x y")
        + field(5, b"r\x1b\n"))
    put("fuzz_tracectx", "future-version", field(0, b"cc" + tp[2:] + b"-more") + field(1, b"a=1"))
    put("fuzz_tracectx", "two-traceparents", field(0, tp) + field(0, tp) + field(1, b"a=1"))
    put("fuzz_tracectx", "zero-ids",
        field(0, b"00-00000000000000000000000000000000-00f067aa0ba902b7-01") + field(6, b"x"))
    put("fuzz_tracectx", "llm-d-slo", field(7, b"500") + field(8, b" 12.5 ") + field(7, b"900")
        + field(9, b"acme") + field(9, b"globex"))
    put("fuzz_tracectx", "llm-d-slo-bad", field(7, b"soon") + field(8, b"-1") + field(8, b"1e999")
        + field(9, b"t\x1b[31m\xff"))
    put("fuzz_tracectx", "long-state", field(0, tp) + b"".join(
        field(1, b"k%02d=%s" % (i, b"v" * (10 + 7 * i))) for i in range(40)))


def record_seeds():
    names = fixture_names()
    for i, name in enumerate(names):
        flags = [0, RF_JSON | RF_TOKENS, RF_PROMETHEUS | RF_ALERTS | RF_GPU][i % 3]
        put("fuzz_record", name + ".tsr", tsr(connection_records(name), flags))
    put("fuzz_record", "v1.tsr", tsr(connection_records(names[0], v1=True), version=1))
    recs = connection_records("uvloop_vllm")
    recs[2:2] = [kstats(0), gpu_step(101, 1_000_500_000, 1_001_000_000), kstats(3)]
    recs[:0] = [proc_event(EV_PROC_FORK, 101, 100, 999_000_000)]
    recs.append(proc_event(EV_PROC_EXIT, 101, 0, 2_000_000_000, 9))
    put("fuzz_record", "procs-gpu.tsr", tsr(recs, RF_PROMETHEUS | RF_GPU | RF_VERBOSE | RF_BY_PROCESS))
    recs = connection_records("uvloop_vllm")
    recs[1:1] = [device_sample(1, 45, [(100, 1 << 29), (7, 1 << 20)])]
    recs.append(device_sample(2, 90, [(100, 1 << 30)]))
    put("fuzz_record", "nvml.tsr", tsr(recs, RF_PROMETHEUS | RF_GPU, version=3))
    recs = connection_records("uvloop_vllm")
    recs[:0] = [workload(100, b"0123456789abcdef" * 4, b"12345678-aaaa-bbbb-cccc-0123456789ab",
                         b"inference", b"vllm-0", b"engine")]
    put("fuzz_record", "workload.tsr", tsr(recs, RF_JSON | RF_PROMETHEUS, version=4))
    put("fuzz_record", "cut.tsr", tsr(connection_records("tgi"))[:-7])


def pipeline_seeds():
    names = fixture_names()
    for i, name in enumerate(names):
        flags = [FP_TOKENS, FP_BY_PROCESS | FP_HEAVY, FP_SLOW | FP_GPU, FP_TTY][i % 4]
        put("fuzz_pipeline", name, bytes([flags]) + program(name))
    # Two connections of two processes interleaved, GPU steps, lost records, a tick.
    a, b = program("uvicorn_h11", 0, 0, False), program("go_ollama", 1, 1, False)
    mixed = bytes([FP_BY_PROCESS | FP_GPU | FP_HEAVY]) + bytes([OP_FORK, 1 | 0 << 3]) + a + b
    mixed += bytes([OP_STEP]) + who(0, 0, 1) + struct.pack("<H", 5000) + bytes([40, 0, 1])
    mixed += bytes([OP_LOST, 1, OP_TICK | 0x10, OP_CLOSE]) + who(0) + bytes([OP_EXIT]) + \
        who(0, 0, 1) + bytes([0])
    put("fuzz_pipeline", "two-processes", mixed)
    # --all: a labelled server whose workers fork, serve and exit.
    tree = bytes([FP_KEEP_RUNNING | FP_BY_PROCESS | FP_VERBOSE, OP_LABEL | 0x10]) + who() + \
        b"4f2a9c0d1e3b\0"
    for child in range(1, 4):
        tree += bytes([OP_FORK, child | (child - 1) << 3])
    tree += program("uvloop_vllm", 2, 3) + bytes([OP_EXIT]) + who(0, 0, 3) + bytes([0])
    put("fuzz_pipeline", "labelled-tree", tree)
    # TLS: the kernel's marker, then the plaintext of the request and its stream as the TLS
    # library's calls give it (status byte: bit 3 the marker, bit 2 TLS plaintext).
    tls = bytes([FP_TOKENS, OP_OPEN]) + who(0)
    tls += bytes([OP_DATA | 0x10]) + who(0) + struct.pack("<H", 0) + bytes([8])
    tls += bytes([OP_DATA | 0x10]) + who(0) + struct.pack("<H", len(read("uvicorn_h11.req")))
    tls += bytes([4]) + read("uvicorn_h11.req")
    for w in writes("uvicorn_h11"):
        tls += bytes([OP_DATA | 0x10]) + who(0, DIR_OUT) + struct.pack("<H", len(w)) + bytes([4])
        tls += w
    put("fuzz_pipeline", "tls", tls + bytes([OP_CLOSE]) + who(0))
    # The client side: the traced process writes the request and reads the stream.
    client = bytes([FP_TOKENS, OP_OPEN]) + who(1)
    client += op_data(1, DIR_OUT, read("uvicorn_h11.req"))
    for w in writes("uvicorn_h11"):
        client += bytes([OP_TIME]) + struct.pack("<I", 20_000_000) + op_data(1, DIR_IN, w)
    put("fuzz_pipeline", "client", client + bytes([OP_CLOSE]) + who(1))
    put("fuzz_pipeline", "raw", bytes([0, OP_RAW, EV_DATA, 8]) + bytes(8) +
        bytes([OP_RAW | 0x10, 0, 20]) + bytes(20) + bytes([OP_CALL, 1, 0, OP_PROC | 0x10, 8]))


def json_seeds():
    put("fuzz_json_string", "ascii", b"model\0Qwen/Qwen2.5-0.5B\0POST\0/v1/chat/completions"
        b"\0k\0svc\0host\0src")
    put("fuzz_json_string", "utf8", "caf\u00e9\0\u20ac\0\U0001f600\0\u00ff\0\u4e2d\0\0".encode())
    put("fuzz_json_string", "escapes", b'"q"\0back\\slash\0\n\r\t\b\f\0\x01\x1f\x7f\0a\0b\0c\0')
    put("fuzz_json_string", "conn", b"127.0.0.1:8000<-127.0.0.1:40000#1\0GET\0/x?key=1\0m\0"
        b"4f2a9c0d1e3b\0s\0h\0[::1]:1<-[::1]:2#3")
    put("fuzz_prom_label", "plain", b"\x01llama-3-8b\0" b"4f2a9c0d1e3b\0qwen\0ttft.p99 > 5s for 3m")
    put("fuzz_prom_label", "escapes", b'\x02a"b\\c\nd\0\0other\0success < 99%')
    put("fuzz_prom_label", "utf8", "\x03mod\u00e8le-\u4e2d\0c\u00e9\0\U0001f600\0rps > 1".encode())


def cli_seeds():
    for d in ["5s", "200ms", "3m", "250us", "1h", "0.5s", "1e3ms", "0s"]:
        put("fuzz_duration", d, d.encode())
    rules = ["ttft.p99 > 5s for 3m", "success < 99% for 5m", "itl.p99 >= 200ms", "rps <= 0.5",
             "e2e.p50 > 2s", "queue.p999 > 100ms for 30s", "prefill.p90 < 1s", "decode.p95 > 3s",
             "tpot.p99 > 50ms for 1h"]
    for i, r in enumerate(rules):
        put("fuzz_alert_rule", "rule%d" % i, r.encode())


def otlp_seeds():
    """Collectors' answers: an OTLP receiver's 200, a refusal, back-pressure with Retry-After."""
    put("fuzz_otlp_response", "ok", b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"Content-Length: 2\r\n\r\n{}")
    put("fuzz_otlp_response", "refused", b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    put("fuzz_otlp_response", "busy", b"HTTP/1.0 429 Too Many Requests\r\nretry-after: 3\r\n\r\n")
    put("fuzz_otlp_response", "unavailable", b"HTTP/1.1 503 Service Unavailable\r\n"
        b"Retry-After: Wed, 21 Oct 2026 07:28:00 GMT\r\n\r\n")


def listener_seeds():
    """tests/fuzz/fuzz_httpd.c: a snapshot, then clients' ops (op | client << 3)."""
    snap = b"# TYPE tokenscope_requests_total counter\ntokenscope_requests_total 3\n"

    def send(client, data):
        return bytes([0 | client << 3]) + struct.pack("<H", len(data)) + data

    head = bytes([len(snap)]) + snap
    put("fuzz_httpd", "scrape", head + send(0, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
    put("fuzz_httpd", "head-and-404", head + send(0, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                                                 b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n"))
    put("fuzz_httpd", "post-body", head + send(1, b"POST /metrics HTTP/1.1\r\nHost: x\r\n"
                                              b"Content-Length: 5\r\n\r\nhello"))
    # A head in pieces with pauses, another client's garbage, a half-close, a read.
    slow = head
    for piece in (b"GET /met", b"rics HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"):
        slow += send(0, piece) + bytes([4, 7])
    slow += send(1, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03") + bytes([1 | 1 << 3])
    slow += bytes([2])
    put("fuzz_httpd", "slow-and-garbage", slow)
    put("fuzz_httpd", "big-head", head + send(2, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 +
                                             b"\r\n\r\n"))
    put("fuzz_httpd", "specs", head + b"".join(bytes([5]) + x + b"\0" for x in (
        b"127.0.0.1:9464", b":9464", b"9464", b"[::1]:0", b"[fe80::1%eth0]:1", b"1.2.3.4:99999")))


def proc_seeds():
    """tests/fuzz/fuzz_proc.c: processes (pid, ppid, flags, comm, cmdline, cgroup), maps."""
    def proc(pid, ppid, comm, cmdline, cgroup, flags=0, stat=None):
        p = bytes([pid, ppid, flags]) + comm + b"\0"
        if flags & 1:
            p += stat + b"\0"
        return p + cmdline.replace(b"\0", b"\x01") + b"\0" + cgroup + b"\0"

    cid = b"4f2a9c0d1e3b" + b"0" * 52
    tree = bytes([4])
    tree += proc(1, 0, b"vllm", b"/usr/bin/python3\0/usr/local/bin/vllm\0serve\0Qwen/Qwen3-8B",
                 b"0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-" + cid + b".scope\n")
    tree += proc(2, 1, b"VLLM::EngineCor", b"python3\0-m\0vllm.entrypoints.openai.api_server",
                 b"0::/system.slice/docker-" + cid + b".scope\n")
    tree += proc(3, 0, b"\x1b]0;x\x07ollama", b"ollama\0serve", b"12:pids:/docker/" + cid + b"\n")
    tree += proc(4, 3, b"server", b"./server\0-m\0model.gguf", b"", 1, b"4 (a) b) S 3 1")
    maps = b"/usr/lib/x86_64-linux-gnu/libcudart.so.13\0" + struct.pack("<QQIBI", 0x7f0000000000,
                                                                    0x7f0000200000, 0x28000, 5,
                                                                    1311)
    maps += b"7f1c2a000000-7f1c2a200000 r-xp 00028000 08:01 1311   /opt/my libs/libcudart.so.13\n"
    maps += b"1000-2000 r-xp 0 00:1f 7 /tmp/\x1b]0;x\x07lib.so (deleted)\n"
    put("fuzz_proc", "vllm-tree", tree + maps)
    put("fuzz_proc", "empty", b"\0")


def alert_exec_seeds():
    env = [b"PATH=/usr/bin", b"TOKENSCOPE_ALERT_STATE=old", b"HOME=/root", b"NOEQUALS"]
    put("fuzz_alert_exec", "firing", bytes([len(env)]) + b"\0".join(
        [b"notify-send \"$TOKENSCOPE_ALERT_RULE\"", b"ttft.p99 > 5s for 3m", b"firing",
         b"7.20 s", b"queueing (queue 90%, prefill 5% of TTFT in the window)"] + env) + b"\0")
    put("fuzz_alert_exec", "resolved", b"\0curl -d @- http://hook\0success < 99%\0resolved\0"
        b"99.50%\0\0")


# tests/fuzz/fuzz_container.c: FC_* and what stands where config.json goes
FC_RAW_CGROUP, FC_SYSTEMD, FC_CRIO, FC_OTHER_NS = 1, 2, 4, 8
BUNDLE_FILE, BUNDLE_LINK, BUNDLE_FIFO, BUNDLE_DIR, BUNDLE_HUGE, BUNDLE_NONE = range(6)
POD_UID = b"12345678-aaaa-bbbb-cccc-0123456789ab"
CONTAINERD_CONFIG = (
    b'{"ociVersion":"1.0.2","process":{"args":["vllm","serve"]},"annotations":{'
    b'"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-name":"vllm-0",'
    b'"io.kubernetes.cri.sandbox-namespace":"inference","io.kubernetes.cri.sandbox-uid":"'
    + POD_UID + b'","io.kubernetes.cri.container-name":"engine"}}')
CRIO_CONFIG = (
    b'{"annotations":{"io.kubernetes.pod.name":"sglang-0","io.kubernetes.pod.namespace":"serving",'
    b'"io.kubernetes.pod.uid":"' + POD_UID + b'","io.kubernetes.container.name":"server"}}')


def container_seeds():
    """tests/fuzz/fuzz_container.c: flags, what config.json is, the cgroup (or UID), the JSON."""
    def put_c(name, flags, kind, cgroup, config):
        put("fuzz_container", name, bytes([flags, kind]) + cgroup + b"\0" + config)

    put_c("containerd", 0, BUNDLE_FILE, POD_UID, CONTAINERD_CONFIG)
    put_c("crio-systemd", FC_SYSTEMD | FC_CRIO, BUNDLE_FILE, POD_UID.replace(b"-", b"_"),
          CRIO_CONFIG)
    put_c("other-namespace", FC_OTHER_NS, BUNDLE_FILE, POD_UID, CONTAINERD_CONFIG)
    for name, kind in (("symlink", BUNDLE_LINK), ("fifo", BUNDLE_FIFO), ("dir", BUNDLE_DIR),
                       ("huge", BUNDLE_HUGE), ("none", BUNDLE_NONE)):
        put_c(name, 0, kind, POD_UID, CONTAINERD_CONFIG)
    put_c("raw-v1", FC_RAW_CGROUP, BUNDLE_FILE,
          b"12:cpu:/kubepods/besteffort/pod" + POD_UID + b"/" + b"0123456789abcdef" * 4 +
          b"\n1:name=systemd:/\n0::/\n", CONTAINERD_CONFIG)
    put_c("no-uid-in-cgroup", FC_RAW_CGROUP, BUNDLE_FILE,
          b"0::/system.slice/cri-containerd-" + b"0123456789abcdef" * 4 + b".scope\n",
          CONTAINERD_CONFIG)


def main():
    global ONLY
    if len(sys.argv) > 1:
        ONLY = set(sys.argv[1:])
        for t in ONLY:
            if not t.startswith("fuzz_") or not os.path.isfile(
                    os.path.join(ROOT, "tests", "fuzz", t + ".c")):
                sys.exit(__doc__)
            if os.path.isdir(os.path.join(SEEDS, t)):
                shutil.rmtree(os.path.join(SEEDS, t))
    elif os.path.isdir(SEEDS):
        shutil.rmtree(SEEDS)
    http_seeds()
    sse_seeds()
    frame_seeds()
    reqbody_seeds()
    tracectx_seeds()
    record_seeds()
    pipeline_seeds()
    pipeline_h2_seeds()
    h2_seeds()
    json_seeds()
    cli_seeds()
    otlp_seeds()
    cupti_seeds()
    listener_seeds()
    proc_seeds()
    container_seeds()
    alert_exec_seeds()
    for t in sorted(ONLY or os.listdir(SEEDS)):
        print("%-20s %3d seeds" % (t, len(os.listdir(os.path.join(SEEDS, t)))))


if __name__ == "__main__":
    main()
