#!/usr/bin/python3
"""A Python application calling an OpenAI-compatible server with httpx (Debian's python3-httpx),
the way an agent or gateway does, and recording what it saw on CLOCK_MONOTONIC in gtclient's
output format (tests/README-tools.md), so the e2e test can check the requests tokenscope reports
for this process as a client (`"role":"client"`).

Each thread holds one httpx.Client (one connection, kept alive for -k requests; HTTP/2 with
--h2: its requests are streams of that connection) and streams the response with iter_raw():
every SSE frame completed by one chunk gets the time taken right after httpx returned it, the
moment the bytes reached the application. An abort closes the response, and its connection,
after --abort-after content frames.

Usage: httpx_client.py --port P [-n N] [-c C] [-k K] [--max-tokens N] [--usage] [--token-ms MS]
  [--prefill-ms MS] [--abort-every M] [--abort-after F] [--http-error-every M]
  [--stream-error-every M] [--no-stream-every M] [--h2] [--tls] [--start-delay-ms MS] -o FILE
"""
import argparse
import json
import sys
import threading
import time

import httpx


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def has_content(obj):
    for ch in obj.get("choices") or []:
        d = ch.get("delta") or {}
        if d.get("content") or d.get("reasoning_content") or d.get("tool_calls") or \
                ch.get("text"):
            return True
    return False


class Stream:
    """SSE frames of one response, each with the time of the chunk that completed it."""

    def __init__(self, abort_after):
        self.buf = b""
        self.frames, self.token_ns = 0, []
        self.usage = None
        self.error = False
        self.abort_after = abort_after

    def feed(self, chunk, ts):
        self.buf += chunk
        while True:
            end = self.buf.find(b"\n\n")
            if end < 0:
                return False
            event, self.buf = self.buf[:end], self.buf[end + 2:]
            data = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n")
                              if line.startswith(b"data:"))
            if not data or data == b"[DONE]":
                continue
            obj = json.loads(data)
            if obj.get("error"):
                self.error = True
            u = (obj.get("usage") or {}).get("completion_tokens")
            if u is not None:
                self.usage = u
            if has_content(obj):
                self.frames += 1
                self.token_ns.append(ts)
                if self.abort_after and self.frames >= self.abort_after:
                    return True


def local_port(client, r):
    """The local port of the connection r came on. httpx names the stream of an HTTP/1.1
    response; over HTTP/2 it does not (httpx 0.23), so the one connection of this client's pool
    is asked."""
    stream = r.extensions.get("network_stream")
    if stream is None:
        conns = client._transport._pool.connections
        stream = conns[0]._connection._network_stream
    return stream.get_extra_info("client_addr")[1]


def body(args, rid):
    b = {"model": "ref", "stream": True, "max_tokens": args.max_tokens,
         "messages": [{"role": "user", "content": "the quick brown fox " * 3}]}
    if args.no_stream_every and (rid + 1) % args.no_stream_every == 0:
        b["stream"] = False
    if args.usage:
        b["stream_options"] = {"include_usage": True}
    if args.token_ms is not None:
        b["x_token_ms"] = args.token_ms
    if args.prefill_ms is not None:
        b["x_prefill_ms"] = args.prefill_ms
    if args.http_error_every and (rid + 1) % args.http_error_every == 0:
        b["x_fail"] = "http"
    elif args.stream_error_every and (rid + 1) % args.stream_error_every == 0:
        b["x_fail"] = "stream"
    return b


def one(args, client, rid, seq, out, lock):
    abort = args.abort_every and (rid + 1) % args.abort_every == 0
    req = body(args, rid)
    s = Stream(args.abort_after if abort else 0)
    rec = {"id": rid, "seq": seq, "stream": req["stream"]}
    rec["send_start_ns"] = mono_ns()
    aborted = False
    with client.stream("POST", "/v1/chat/completions", json=req) as r:
        # The request is on the wire once the response head is here: an upper bound of the
        # write, which is all the check needs (its write lies between the two times).
        rec["send_ns"] = mono_ns()
        rec["port"] = local_port(client, r)
        rec["status"] = r.status_code
        end = rec["send_ns"]
        whole = b""
        for chunk in r.iter_raw():
            ts = mono_ns()
            end = ts
            if req["stream"] and r.status_code < 400:
                if s.feed(chunk, ts):
                    aborted = True
                    break
            else:
                whole += chunk
        if not req["stream"] and r.status_code < 400:
            u = (json.loads(whole).get("usage") or {}).get("completion_tokens")
            s.usage = u
        # The body's end (the chunked terminator, END_STREAM) may come in a read after the
        # last bytes: httpx has read it once iter_raw() is done.
        if not aborted:
            end = mono_ns()
    rec["end_ns"] = end
    if aborted:
        outcome = "aborted"
    elif r.status_code >= 400:
        outcome = "http_error"
    elif s.error:
        outcome = "stream_error"
    else:
        outcome = "ok"
    rec.update(outcome=outcome, frames=s.frames, token_ns=s.token_ns,
               tokens=s.usage if s.usage is not None else s.frames,
               tokens_from="usage" if s.usage is not None else "frames",
               first_token_ns=s.token_ns[0] if s.token_ns else None)
    with lock:
        out.write(json.dumps(rec) + "\n")
        out.flush()
    return aborted


def worker(args, ids, out, lock):
    scheme = "https" if args.tls else "http"
    client, seq = None, 0
    while True:
        with lock:
            rid = next(ids, None)
        if rid is None:
            break
        if client is None or seq >= args.k:
            if client:
                client.close()
            client = httpx.Client(base_url=f"{scheme}://127.0.0.1:{args.port}", verify=False,
                                  http1=not args.h2, http2=args.h2, timeout=30,
                                  limits=httpx.Limits(max_connections=1))
            seq = 0
        aborted = one(args, client, rid, seq, out, lock)
        seq += 1
        # An HTTP/1.1 response closed early takes its connection with it; over HTTP/2 httpx
        # (0.23) sends no RST_STREAM for a stream it stops reading, and the server's frames would
        # go on arriving, read with the connection's next stream: the abort closes the
        # connection, as on HTTP/1.1.
        if aborted:
            client.close()
            client = None
    if client:
        client.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("-c", type=int, default=1)
    ap.add_argument("-k", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--usage", action="store_true")
    ap.add_argument("--token-ms", type=float)
    ap.add_argument("--prefill-ms", type=float)
    ap.add_argument("--abort-every", type=int, default=0)
    ap.add_argument("--abort-after", type=int, default=1)
    ap.add_argument("--http-error-every", type=int, default=0)
    ap.add_argument("--stream-error-every", type=int, default=0)
    ap.add_argument("--no-stream-every", type=int, default=0)
    ap.add_argument("--h2", action="store_true", help="HTTP/2 (prior knowledge, or ALPN)")
    ap.add_argument("--tls", action="store_true", help="https, the certificate not checked")
    ap.add_argument("--start-delay-ms", type=float, default=0,
                    help="wait before the first request (a TLS library mapped at start is "
                    "hooked at the tracer's next scan of the process)")
    ap.add_argument("-o", required=True)
    args = ap.parse_args()
    time.sleep(args.start_delay_ms / 1000)
    ids = iter(range(args.n))
    lock = threading.Lock()
    with open(args.o, "w") as out:
        threads = [threading.Thread(target=worker, args=(args, ids, out, lock))
                   for _ in range(args.c)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
