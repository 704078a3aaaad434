#!/usr/bin/env python3
"""An OpenAI-style SSE server (stdlib only) whose TTFT differs under each tool's definition.

POST /v1/chat/completions with {"x_scenario": ...}:
  reasoning  as a reasoning model behind vLLM with continuous usage stats: an SSE comment
             (body bytes, no message) at +40 ms, the role-only chunk at +80 ms, two reasoning
             chunks at +120 and +140 ms, three answer-text chunks at +180, +200 and +220 ms
             stating 2, 1 and 3 tokens through a running usage.completion_tokens, a usage-only
             chunk, [DONE];
  plain      the role chunk and the first text chunk in one write at +30 ms, a second text
             chunk at +50 ms, no usage, [DONE].
Each frame is one write (one HTTP/1.1 chunk). Every write's CLOCK_MONOTONIC time just before
it, and the time the request was read, go to the log given as argument 2, one JSON line per
request keyed by the client's port. Prints `listening on 127.0.0.1:PORT` when ready.

Usage: ttft_server.py PORT LOG   (PORT 0 picks a free port)
"""
import http.server
import json
import socketserver
import sys
import threading
import time

LOG_LOCK = threading.Lock()


def chunk(obj):
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def delta(d, usage=None):
    obj = {"object": "chat.completion.chunk", "model": "defs",
           "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 3, "completion_tokens": usage, "total_tokens": 3 + usage}
    return chunk(obj)


SCENARIOS = {
    # (ms after the request was read, what, bytes)
    "reasoning": [
        (40, "byte", b": keep-alive\n\n"),
        (80, "chunk", delta({"role": "assistant", "content": ""}, 0)),
        (120, "output", delta({"reasoning_content": "Let"}, 1)),
        (140, "reasoning", delta({"reasoning_content": " me"}, 2)),
        (180, "content", delta({"content": "Hello"}, 4)),
        (200, "text", delta({"content": " there"}, 5)),
        (220, "text", delta({"content": " friend"}, 8)),
        (225, "usage", chunk({"object": "chat.completion.chunk", "model": "defs", "choices": [],
                              "usage": {"prompt_tokens": 3, "completion_tokens": 8,
                                        "total_tokens": 11}})),
        (226, "done", b"data: [DONE]\n\n"),
    ],
    "plain": [
        (30, "all", delta({"role": "assistant", "content": ""}) + delta({"content": "Hi"})),
        (50, "text", delta({"content": "!"})),
        (51, "done", b"data: [DONE]\n\n"),
    ],
}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        pass

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        t_read = time.monotonic_ns()
        steps = SCENARIOS.get(body.get("x_scenario"), SCENARIOS["plain"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        writes = []
        for ms, what, data in steps:
            due = t_read + ms * 1_000_000
            now = time.monotonic_ns()
            if due > now:
                time.sleep((due - now) / 1e9)
            writes.append({"what": what, "ns": time.monotonic_ns()})
            self.write_chunk(data)
        self.wfile.write(b"0\r\n\r\n")
        with LOG_LOCK, open(sys.argv[2], "a") as log:
            log.write(json.dumps({"client_port": self.client_address[1], "read_ns": t_read,
                                  "scenario": body.get("x_scenario"), "writes": writes}) + "\n")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def main():
    srv = Server(("127.0.0.1", int(sys.argv[1])), Handler)
    print(f"listening on 127.0.0.1:{srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
