#!/usr/bin/python3
"""A streaming server whose SSE line never ends, for make stress (phase endless-line).

    endless_server.py [--limit-bytes 8388608] [--limit-s 10] [--pace-ms 4]

Listens on 127.0.0.1, any free port, and prints "listening on 127.0.0.1:PORT" (flushed).
A POST to
  /endless-close   a chunked SSE response: a role frame, then `data: {"choices":[{"delta":
                   {"content":"xxxx...` in 64 KiB writes with no newline, until --limit-bytes
                   or --limit-s, then the connection is closed (the line never ends);
  /endless-finish  the same line, then it ends: `"}}]}` and a blank line, `data: [DONE]`, the
                   chunked terminator; the connection stays open. One content frame.
  /endless-raw     the same line in a body with neither Content-Length nor chunked encoding
                   (ended by the close), as HTTP/1.0 servers do.
  anything else    an ordinary OpenAI chat stream of max_tokens (default 5) frames, with the
                   usage frame when stream_options.include_usage, keep-alive; so a client can
                   check that the same process is still traced correctly afterwards.
One chunk per write, --pace-ms apart, so the bytes are not lost for speed in the tracer's ring
buffer but reach its line reassembly. Every loop is bounded by --limit-bytes and --limit-s.
"""
import argparse
import json
import socket
import socketserver
import sys
import time

# Bytes of the line per write: with a chunk's size line and CRLF a write stays within the
# tracer's default --capture-bytes (65536), so nothing is lost to the capture limit and the
# whole line reaches the tracer's frame reassembly.
CHUNK = 65536 - 16
HEAD_MAX = 65536

ARGS = None


def chunk(b):
    return b"%x\r\n" % len(b) + b + b"\r\n"


def frame(obj):
    return chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


class Handler(socketserver.BaseRequestHandler):
    def read_request(self, buf):
        """(path, body dict, rest) or None at EOF."""
        while b"\r\n\r\n" not in buf:
            if len(buf) > HEAD_MAX:
                return None
            b = self.request.recv(65536)
            if not b:
                return None
            buf += b
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        path = parts[1].decode("latin-1") if len(parts) > 1 else "/"
        clen = 0
        for l in lines[1:]:
            k, _, v = l.partition(b":")
            if k.strip().lower() == b"content-length":
                clen = int(v.strip() or b"0")
        while len(rest) < clen:
            b = self.request.recv(65536)
            if not b:
                return None
            rest += b
        body, rest = rest[:clen], rest[clen:]
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            req = {}
        return path, req if isinstance(req, dict) else {}, rest

    def endless(self, path):
        s = self.request
        if path == "/endless-raw":
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      b"Connection: close\r\n\r\n")
            wrap = lambda b: b
        else:
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
            wrap = chunk
        s.sendall(wrap(b'data: {"id":"e","object":"chat.completion.chunk","choices":[{"index":0,'
                       b'"delta":{"role":"assistant","content":""}}]}\n\n'))
        s.sendall(wrap(b'data: {"id":"e","object":"chat.completion.chunk","choices":[{"index":0,'
                       b'"delta":{"content":"'))
        sent, end, pad = 0, time.monotonic() + ARGS.limit_s, b"x" * CHUNK
        while sent < ARGS.limit_bytes and time.monotonic() < end:
            s.sendall(wrap(pad))
            sent += CHUNK
            time.sleep(ARGS.pace_ms / 1000)
        if path != "/endless-finish":
            return False
        s.sendall(chunk(b'"},"finish_reason":null}]}\n\n'))
        s.sendall(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True

    def normal(self, req):
        s = self.request
        n = req.get("max_tokens", 5)
        n = n if isinstance(n, int) and 0 <= n <= 1000 else 5
        usage = bool((req.get("stream_options") or {}).get("include_usage"))
        out = [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
               b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"]
        base = {"id": "n", "object": "chat.completion.chunk", "model": "endless"}
        out.append(frame(dict(base, choices=[{"index": 0, "delta": {"role": "assistant",
                                                                    "content": ""}}])))
        s.sendall(b"".join(out))
        for i in range(n):
            time.sleep(0.002)
            s.sendall(frame(dict(base, choices=[{"index": 0, "delta": {"content": "t%d " % i}}])))
        tail = [frame(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "length"}]))]
        if usage:
            tail.append(frame(dict(base, choices=[], usage={
                "prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1})))
        tail.append(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        s.sendall(b"".join(tail))

    def handle(self):
        buf = b""
        try:
            for _ in range(1000):  # requests per connection, bounded
                r = self.read_request(buf)
                if r is None:
                    return
                path, req, buf = r
                if path.startswith("/endless"):
                    if not self.endless(path):
                        return
                else:
                    self.normal(req)
        except OSError:
            return


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit-bytes", type=int, default=8 << 20)
    ap.add_argument("--limit-s", type=float, default=10)
    ap.add_argument("--pace-ms", type=float, default=4)
    ARGS = ap.parse_args()
    srv = Server(("127.0.0.1", 0), Handler)
    print("listening on 127.0.0.1:%d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
