#!/usr/bin/python3
"""Python's standard http.server, a thread per connection, blocking sockets (run with Debian's
/usr/bin/python3). With --tls-cert, each connection is an ssl.SSLSocket: OpenSSL reads and
writes the socket itself, inside SSL_read_ex and SSL_write_ex (a socket BIO), unlike asyncio's
memory BIOs.

With --tls-late as well, OpenSSL is loaded by the first connection, not at startup: a tracer
attached before it must hook the library when the process maps it (dlopen).

With --hop-cpus, a stream's thread moves to the next CPU before each frame it writes: its
writes are made on every CPU in turn, so a tracer that gathers records per CPU must put them
back in order.

With --on-disconnect stop|ignore, a stream looks for its client's hang-up before each frame
(a read that returns nothing, or fails with ECONNRESET). stop: it writes nothing more and
closes. ignore: it writes every frame left, as an engine that never learns of it, each write
that fails counted and passed over. Either way it prints, for that stream,
`abandoned port=P eof_frame=I frames_ok=N bytes_ok=B failed=F`: the client's port, the frame
the hang-up was seen before, and after it the frames written whole (their SSE bytes, the chunk
framing left out) and the writes that failed.

Usage: threaded_app.py PORT [--tls-cert PEM [--tls-late]] [--hop-cpus]
[--on-disconnect stop|ignore]; PORT 0 picks a free port.
"""
import sys

if "--tls-late" in sys.argv:
    # Nothing at startup may load OpenSSL: asyncio would, through its import of ssl.
    sys.modules["ssl"] = None
    ssl = None
else:
    import ssl

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import select  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402


def run_sync(loop, agen):
    """The async frame generator stepped on this thread's own loop."""
    while True:
        try:
            yield loop.run_until_complete(agen.__anext__())
        except StopAsyncIteration:
            return


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, chunked streams
    # TCP_NODELAY, as every streaming server sets: else a frame waits for the previous one's ACK.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.split("?")[0] != common.CHAT_PATH:
            return self.send_json(404, {"error": {"message": "not found", "code": 404}})
        try:
            req = common.Request(raw)
        except common.BadRequest as e:
            return self.send_json(400, {"error": {"message": str(e), "code": 400}})
        if req.fail == "http":
            return self.send_json(500, common.ERROR_HTTP)
        loop = asyncio.new_event_loop()
        try:
            if not req.stream:
                return self.send_json(200, loop.run_until_complete(req.completion()))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if self.server.on_disconnect:
                return self.stream_watching(loop, req)
            cpus = sorted(os.sched_getaffinity(0)) if self.server.hop_cpus else []
            for i, frame in enumerate(run_sync(loop, req.frames())):
                if cpus:
                    os.sched_setaffinity(0, {cpus[i % len(cpus)]})
                self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, *tls_errors()):
            self.close_connection = True  # the client closed early (an abort)
        finally:
            loop.close()


    def client_gone(self):
        """Whether the client hung up: a read that returns nothing or is reset."""
        sock = self.connection
        if not select.select([sock], [], [], 0)[0]:
            return False
        try:
            return sock.recv(4096) == b""
        except ConnectionResetError:
            return True

    def stream_watching(self, loop, req):
        """--on-disconnect: the stream, its client's hang-up looked for before each frame."""
        gone, eof_frame, ok, nbytes, failed = False, -1, 0, 0, 0
        frames = run_sync(loop, req.frames())
        for i, frame in enumerate(frames):
            if not gone and self.client_gone():
                gone, eof_frame = True, i
                if self.server.on_disconnect == "stop":
                    break
            try:
                self.connection.sendall(b"%x\r\n%s\r\n" % (len(frame), frame))
                if gone:
                    ok, nbytes = ok + 1, nbytes + len(frame)
            except (BrokenPipeError, ConnectionResetError):
                if not gone:
                    gone, eof_frame = True, i
                failed += 1
        if not gone or self.server.on_disconnect == "ignore":
            try:
                self.connection.sendall(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                if not gone:
                    gone, eof_frame = True, -1
                failed += 1
        if gone:
            self.close_connection = True
            print(f"abandoned port={self.client_address[1]} eof_frame={eof_frame} "
                  f"frames_ok={ok} bytes_ok={nbytes} failed={failed}", flush=True)


def tls_errors():
    return (ssl.SSLError,) if ssl else ()


def load_tls(cert):
    """OpenSSL loaded now (the ssl module and its library), and a server context."""
    global ssl
    del sys.modules["ssl"]
    import ssl as module
    ssl = module
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert)
    return ctx


class Server(ThreadingHTTPServer):
    daemon_threads = True
    tls = None
    tls_late = None  # --tls-late: the certificate, until the first connection loads OpenSSL
    hop_cpus = False
    on_disconnect = None

    def get_request(self):
        sock, addr = super().get_request()
        if self.tls_late:
            self.tls, self.tls_late = load_tls(self.tls_late), None
        if self.tls:
            # The handshake on the connection's own thread, not the accepting one.
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def finish_request(self, request, client_address):
        if self.tls:
            try:
                request.do_handshake()
            except (*tls_errors(), OSError):
                return
        super().finish_request(request, client_address)


def main():
    def more(ap):
        ap.add_argument("--tls-late", action="store_true",
                        help="load OpenSSL at the first connection")
        ap.add_argument("--hop-cpus", action="store_true",
                        help="write each frame of a stream on the next CPU")
        ap.add_argument("--on-disconnect", choices=("stop", "ignore"),
                        help="look for the client's hang-up before each frame: stop, or "
                             "write the rest anyway")
    args = common.parse_args(__doc__, more)
    srv = Server(("127.0.0.1", args.port), Handler)
    srv.hop_cpus = args.hop_cpus
    srv.on_disconnect = args.on_disconnect
    if args.tls_cert and args.tls_late:
        srv.tls_late = args.tls_cert
    elif args.tls_cert:
        srv.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        srv.tls.load_cert_chain(args.tls_cert)
    common.announce(srv.server_address[1])
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
