#!/usr/bin/python3
"""A pre-forking OpenAI-style streaming server, for the make stress soak under `trace --all`.

    prefork_server.py [--per-worker 4] [--token-ms 5] [--pid-log FILE] [--wait-signal]
                      [--spawn-per-s 0] [--limit-s 600] [--max-workers 100000]

The master listens on 127.0.0.1 (any free port), prints "listening on 127.0.0.1:PORT"
(flushed), and forks one worker at a time; a worker accepts connections on the shared socket
and serves --per-worker requests (keep-alive, one connection at a time), then exits, and the
master forks the next one, as gunicorn's max_requests does. The master itself never writes to
a client. With --wait-signal it forks the first worker only on SIGUSR1 (so a tracer can find
the master first). Each worker appends its pid to --pid-log, one line, before it accepts.
With --spawn-per-s R the master also forks R children a second that exit at once (a server
running a helper command), so that whatever a tracer keeps per fork shows in its memory.
SIGINT/SIGTERM stop the master, which kills its worker. Bounded: --limit-s of life, at most
--max-workers workers, 1000 requests per connection.

A request is a POST with a Content-Length JSON body; the response is an SSE stream in chunked
encoding, one write per chunk: a role frame, max_tokens (default 4, at most 1000) content
frames --token-ms apart, a finish frame, the usage frame with stream_options.include_usage,
`data: [DONE]` and the terminator.
"""
import argparse
import ctypes
import json
import os
import signal
import socket
import sys
import time

HEAD_MAX = 65536
CONN_REQUESTS_MAX = 1000
PR_SET_PDEATHSIG = 1


def chunk(b):
    return b"%x\r\n" % len(b) + b + b"\r\n"


def frame(obj):
    return chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


def read_request(c, buf):
    while b"\r\n\r\n" not in buf:
        if len(buf) > HEAD_MAX:
            return None
        b = c.recv(65536)
        if not b:
            return None
        buf += b
    head, rest = buf.split(b"\r\n\r\n", 1)
    clen = 0
    for l in head.split(b"\r\n")[1:]:
        k, _, v = l.partition(b":")
        if k.strip().lower() == b"content-length":
            clen = int(v.strip() or b"0")
    while len(rest) < clen:
        b = c.recv(65536)
        if not b:
            return None
        rest += b
    try:
        req = json.loads(rest[:clen] or b"{}")
    except ValueError:
        req = {}
    return (req if isinstance(req, dict) else {}), rest[clen:]


def respond(c, req, token_s):
    n = req.get("max_tokens", 4)
    n = n if isinstance(n, int) and 0 <= n <= 1000 else 4
    model = req.get("model") if isinstance(req.get("model"), str) else "prefork"
    base = {"id": "chatcmpl-%d" % os.getpid(), "object": "chat.completion.chunk", "model": model}
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
              b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
    c.sendall(frame(dict(base, choices=[{"index": 0, "delta": {"role": "assistant",
                                                               "content": ""}}])))
    for i in range(n):
        time.sleep(token_s)
        c.sendall(frame(dict(base, choices=[{"index": 0, "delta": {"content": "t%d " % i}}])))
    c.sendall(frame(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "length"}])))
    if (req.get("stream_options") or {}).get("include_usage"):
        c.sendall(frame(dict(base, choices=[], usage={
            "prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1})))
    c.sendall(chunk(b"data: [DONE]\n\n"))
    c.sendall(b"0\r\n\r\n")


def die_with_parent():
    """A worker must not outlive a master that was killed: PR_SET_PDEATHSIG, SIGKILL."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def worker(lsock, a, deadline):
    die_with_parent()
    lsock.settimeout(max(deadline - time.monotonic(), 0.1))
    if a.pid_log:
        fd = os.open(a.pid_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, b"%d\n" % os.getpid())
        os.close(fd)
    served = 0
    while served < a.per_worker:
        try:
            c, _ = lsock.accept()
        except OSError:  # the master's --limit-s is over
            break
        c.settimeout(max(deadline - time.monotonic(), 0.1))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        try:
            for _ in range(CONN_REQUESTS_MAX):
                r = read_request(c, buf)
                if r is None:
                    break
                req, buf = r
                respond(c, req, a.token_ms / 1000)
                served += 1
                if served >= a.per_worker:
                    break
        except OSError:
            pass
        c.close()
    os._exit(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-worker", type=int, default=4)
    ap.add_argument("--token-ms", type=float, default=5)
    ap.add_argument("--pid-log")
    ap.add_argument("--wait-signal", action="store_true")
    ap.add_argument("--spawn-per-s", type=float, default=0)
    ap.add_argument("--limit-s", type=float, default=600)
    ap.add_argument("--max-workers", type=int, default=100000)
    a = ap.parse_args()
    lsock = socket.create_server(("127.0.0.1", 0), backlog=1024)
    print("listening on 127.0.0.1:%d" % lsock.getsockname()[1], flush=True)
    deadline = time.monotonic() + a.limit_s
    go = [not a.wait_signal]
    child = [0]

    def stop(signum, _frame):
        if child[0]:
            try:
                os.kill(child[0], signal.SIGKILL)
            except OSError:
                pass
        sys.exit(0)

    def start(signum, _frame):
        go[0] = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGUSR1, start)
    while not go[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    workers, spawned = 0, 0
    period = 1 / a.spawn_per_s if a.spawn_per_s > 0 else 0.01
    t0 = time.monotonic()
    while time.monotonic() < deadline and workers < a.max_workers:
        if not child[0]:
            pid = os.fork()
            if pid == 0:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                try:
                    worker(lsock, a, deadline)
                finally:
                    os._exit(1)
            child[0] = pid
            workers += 1
        if a.spawn_per_s > 0 and spawned < (time.monotonic() - t0) * a.spawn_per_s:
            if os.fork() == 0:
                os._exit(0)
            spawned += 1
        else:
            time.sleep(period)
        while True:  # reap: the worker, and the spawned children
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
            if pid == child[0]:
                child[0] = 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
