#!/usr/bin/python3
"""A loopback OTLP/HTTP receiver for the tests: stores every JSON body POSTed to it.

    receiver.py --dir DIR --port-file FILE [--port N] [--tls CERT KEY]

Listens on 127.0.0.1 (port 0: any free one, written to FILE once listening), over TLS with
--tls. A POST to /NAME/... (or, as a proxy sees it, to http://HOST/NAME/...) is answered by
NAME:
  flaky   503 with Retry-After: 0 to its first two requests, then as ok
  busy    429 with Retry-After: 1 to its first request, then as ok
  reject  400 (a collector refusing the data; nothing stored)
  other   200 '{}' after checking the body is JSON with resourceSpans (else 400)
Accepted bodies are written to DIR/NAME/NNNNNN.json, with the request's Content-Type in
NNNNNN.ctype; each appears whole (written aside, then renamed).
"""
import argparse
import http.server
import json
import os
import ssl
import threading
import urllib.parse

lock = threading.Lock()
seen = {}  # NAME -> requests so far
stored = [0]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body are two writes; on a kept-alive connection Nagle's algorithm
    # would hold the body until the client's delayed ACK (40 ms a POST), as a collector
    # written in Go (TCP_NODELAY by default) does not.
    disable_nagle_algorithm = True

    def reply(self, code, body=b"{}", headers=()):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        # A proxy is sent the absolute form of the target.
        path = urllib.parse.urlsplit(self.path).path if "://" in self.path else self.path
        name = path.strip("/").split("/")[0] or "root"
        with lock:
            seen[name] = seen.get(name, 0) + 1
            nth = seen[name]
        if name == "flaky" and nth <= 2:
            return self.reply(503, b'{"message":"try later"}', [("Retry-After", "0")])
        if name == "busy" and nth <= 1:
            return self.reply(429, b'{"message":"slow down"}', [("Retry-After", "1")])
        if name == "reject":
            return self.reply(400, b'{"message":"refused"}')
        try:
            doc = json.loads(body)
            assert isinstance(doc.get("resourceSpans"), list)
        except Exception:
            return self.reply(400, b'{"message":"not OTLP JSON"}')
        with lock:
            stored[0] += 1
            n = stored[0]
        d = os.path.join(self.server.dir, name)
        os.makedirs(d, exist_ok=True)
        base = os.path.join(d, "%06d" % n)
        with open(base + ".ctype.tmp", "w") as f:
            f.write(self.headers.get("Content-Type", ""))
        os.rename(base + ".ctype.tmp", base + ".ctype")
        with open(base + ".tmp", "wb") as f:
            f.write(body)
        os.rename(base + ".tmp", base + ".json")
        self.reply(200)

    def log_message(self, fmt, *args):
        pass


def serve(handler):
    """Parses the command line and serves with handler (this one, or a stricter subclass)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), handler)
    if a.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls[0], a.tls[1])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.daemon_threads = True
    srv.dir = a.dir
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    serve(Handler)
