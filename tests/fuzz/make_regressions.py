#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the regression inputs of tests/fuzz/regressions/ that were built by hand rather than
minimized from a campaign's find: each reproduces a defect an outside fuzz run found, as a
program of the pipeline interpreter (tests/fuzz/fuzz_pipeline.c) or a layout of
tests/fuzz/fuzz_container.c, and fails on the code before its fix through the properties of
tests/fuzz/fuzz_meaning.h and fuzz_container.c.

    tests/fuzz/make_regressions.py      # rewrites the inputs named below

  fuzz_pipeline/otlp-proxy-crossed-calls-loop
      one client sends two requests of one trace (parents A and B) through a traced proxy that
      forwards traceparent unchanged but sends its two upstream calls in the other order; paired
      by order alone, the four spans' parents made a loop
  fuzz_pipeline/gpu-step-ends-before-start-preempted
      a step record that ends before it starts, read as a request's recompute after two steps
      it missed: preempted_ms came out negative (wrapped in the summary and Prometheus)
  fuzz_pipeline/lost-request-ends-before-its-token
      a request cut by lost records whose connection's close came with an earlier time than its
      token (found by the first campaign with these properties): E2E shorter than TTFT
  fuzz_container/pod-uid-mixed-from-two-paths, fuzz_container/pod-uid-prefix-left
      a pod UID written before it was checked: a bad one's characters over a good one's, and a
      bad one's prefix left behind and taken as the process's pod
"""
import os
import struct
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_seeds as ms  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fuzz", "regressions")

T0 = 1_000_000_000  # fuzz_pipeline.c: FUZZ_T0
OP_NS = 1000  # FUZZ_OP_NS: every op moves the clock on first
MS = 1_000_000


class Program:
    """Ops of the interpreter, with its clock followed so that ops land at chosen times."""

    def __init__(self, flags):
        self.b = bytearray([flags])
        self.now = T0

    def op(self, code, *args):
        self.now += OP_NS
        self.b += bytes([code]) + b"".join(args)

    def at(self, t):
        """The next op runs at time t (an OP_TIME before it, forwards or backwards)."""
        after = self.now + OP_NS
        want = t - OP_NS
        if want >= after:
            self.op(ms.OP_TIME, struct.pack("<I", want - after))
        else:
            self.now += OP_NS
            self.b += bytes([ms.OP_TIME | 0x10]) + struct.pack("<I", after - want)
        self.now = want

    def open(self, conn, pid=0):
        self.op(ms.OP_OPEN, ms.who(conn, ms.DIR_IN, pid))

    def data(self, conn, direction, data, pid=0):
        self.op(ms.OP_DATA, ms.who(conn, direction, pid), struct.pack("<H", len(data)), data)

    def close(self, conn, pid=0):
        self.op(ms.OP_CLOSE, ms.who(conn, ms.DIR_IN, pid))

    def step(self, pid, dur_us, launches, graphs, backwards=False):
        self.op(ms.OP_STEP | (0x10 if backwards else 0), ms.who(0, 0, pid),
                struct.pack("<H", dur_us), bytes([launches, graphs, 1]))

    def put(self, target, name):
        d = os.path.join(OUT, target)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "wb") as f:
            f.write(bytes(self.b))


BODY = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'
HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n")


def request(traceparent=None):
    h = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
    if traceparent:
        h += b"traceparent: " + traceparent + b"\r\n"
    return h + b"content-length: %d\r\n\r\n" % len(BODY) + BODY


def chunk(frame):
    return b"%x\r\n" % len(frame) + frame + b"\r\n"


def token(text=b"x"):
    return chunk(b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":'
                 b'{"content":"' + text + b'"},"finish_reason":null}]}\n\n')


DONE = chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def crossed_calls():
    tp_a = b"00-4bf92f3577b34da6a3ce929d0e0e4736-aaaaaaaaaaaaaaaa-01"
    tp_b = b"00-4bf92f3577b34da6a3ce929d0e0e4736-bbbbbbbbbbbbbbbb-01"
    p = Program(ms.FP_TOKENS)
    # The proxy (pid 100) serves a and b on connections 0 and 1 ...
    p.open(0)
    p.data(0, ms.DIR_IN, request(tp_a))
    p.open(1)
    p.data(1, ms.DIR_IN, request(tp_b))
    # ... and calls upstream for b first (connection 2), then for a (connection 3).
    p.open(2)
    p.data(2, ms.DIR_OUT, request(tp_b))
    p.open(3)
    p.data(3, ms.DIR_OUT, request(tp_a))
    for conn in (2, 3):
        p.data(conn, ms.DIR_IN, HEAD + token() + DONE)
    for conn in (1, 0):
        p.data(conn, ms.DIR_OUT, HEAD + token() + DONE)
    for conn in range(4):
        p.close(conn)
    p.put("fuzz_pipeline", "otlp-proxy-crossed-calls-loop")


def step_backwards():
    p = Program(ms.FP_GPU)
    p.open(0)
    p.open(1)
    p.at(T0 + 1 * MS)
    p.data(0, ms.DIR_IN, request())
    p.data(1, ms.DIR_IN, request())
    p.data(0, ms.DIR_OUT, HEAD)
    p.data(1, ms.DIR_OUT, HEAD)
    # The prefill of both, 2-10 ms, and both first tokens.
    p.at(T0 + 10 * MS)
    p.step(0, 8000, 40, 0)
    p.at(T0 + 10 * MS + 100_000)
    p.data(0, ms.DIR_OUT, token())
    p.data(1, ms.DIR_OUT, token())
    # Two decode steps (21-30 and 31-40 ms) that ride request 1 alone.
    p.at(T0 + 30 * MS)
    p.step(0, 9000, 2, 1)
    p.at(T0 + 40 * MS)
    p.step(0, 9000, 2, 1)
    # A prefill step record from 41 ms to 20.9 ms: it ends before it starts, before the first
    # of the two it would follow.
    p.at(T0 + 41 * MS)
    p.step(0, 20100, 40, 0, backwards=True)
    # Request 0's next token at 25 ms, read as coming from that step: preempted for -0.1 ms.
    p.at(T0 + 25 * MS)
    p.data(0, ms.DIR_OUT, token() + DONE)
    p.at(T0 + 45 * MS)
    p.data(1, ms.DIR_OUT, token() + DONE)
    p.close(0)
    p.close(1)
    p.put("fuzz_pipeline", "gpu-step-ends-before-start-preempted")


def lost_ends_early():
    p = Program(ms.FP_TOKENS)
    p.open(0)
    p.at(T0 + 1 * MS)
    p.data(0, ms.DIR_IN, request())
    p.data(0, ms.DIR_OUT, HEAD)
    p.at(T0 + 20 * MS)
    p.data(0, ms.DIR_OUT, token())
    # Records lost, then the close, whose record's time is before the token's.
    p.op(ms.OP_LOST, bytes([3]))
    p.at(T0 + 5 * MS)
    p.close(0)
    p.put("fuzz_pipeline", "lost-request-ends-before-its-token")


def pod_uids():
    """Pod UIDs that were written before they were checked: a failed one left its characters in
    the caller's buffer (container.c's uid_at)."""
    def put_c(name, flags, kind, cgroup, config):
        d = os.path.join(OUT, "fuzz_container")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "wb") as f:
            f.write(bytes([flags, kind]) + cgroup + b"\0" + config)

    cid = b"0123456789abcdef" * 4
    bad = ms.POD_UID[:-1] + b"X"
    # pod<good>/pod<bad>: 35 characters of the bad one over the good one's.
    put_c("pod-uid-mixed-from-two-paths", ms.FC_RAW_CGROUP, ms.BUNDLE_NONE,
          b"0::/kubepods/pod" + b"ffffffff-aaaa-bbbb-cccc-0123456789ab" + b"/pod" + bad + b"/" +
          cid + b"\n", b"")
    # A failed one alone: its prefix was left, and container_workload went on with it.
    put_c("pod-uid-prefix-left", ms.FC_RAW_CGROUP, ms.BUNDLE_NONE,
          b"0::/kubepods/besteffort/pod" + bad + b"/" + cid + b"\n", b"")


if __name__ == "__main__":
    crossed_calls()
    step_backwards()
    lost_ends_early()
    pod_uids()
