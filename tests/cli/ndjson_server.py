#!/usr/bin/env python3
"""A minimal Ollama-style NDJSON streaming server (stdlib only) for the --all traffic tests.

POST /api/chat streams one object per token as Ollama does: `{"model":...,"created_at":...,
"message":{"role":"assistant","content":"tok0 "},"done":false}` (the model first, Go's compact
spacing), then a last object with "done":true and eval_count, in HTTP/1.1 chunks written one
`sendto` each. options.num_predict (else max_tokens) sets the number of tokens and x_token_ms
the gap between them. Keep-alive. Prints `listening on 127.0.0.1:PORT` when ready.

Usage: ndjson_server.py [PORT]   (0 or nothing picks a free port)
"""
import http.server
import json
import socketserver
import sys
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Frames leave when written, as a streaming server's do (no Nagle delay on small writes).
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        pass

    def chunk(self, obj):
        line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path != "/api/chat":
            self.send_error(404)
            return
        model = body.get("model", "m")
        n = (body.get("options") or {}).get("num_predict", body.get("max_tokens", 8))
        gap = body.get("x_token_ms", 5) / 1000
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(n):
            time.sleep(gap)
            self.chunk({"model": model, "created_at": "2024-01-01T00:00:00Z",
                        "message": {"role": "assistant", "content": f"tok{i} "}, "done": False})
        self.chunk({"model": model, "created_at": "2024-01-01T00:00:00Z",
                    "message": {"role": "assistant", "content": ""}, "done_reason": "stop",
                    "done": True, "prompt_eval_count": 4, "eval_count": n})
        self.wfile.write(b"0\r\n\r\n")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def main():
    srv = Server(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Handler)
    print(f"listening on 127.0.0.1:{srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
