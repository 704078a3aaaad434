"""A server that sends each whole response in one sendmsg of many pieces.

The contract of common.py (POST /v1/chat/completions, max_tokens, stream_options.include_usage,
x_prefill_ms, x_fail), served by a thread per connection on a blocking socket. A streamed
response waits x_prefill_ms, then goes out in a single sendmsg whose buffers are the headers,
each frame as three pieces (its chunk-size line, the frame, the CRLF after it) and the chunked
terminator: 2 + 3 x frames pieces, so a stream of T content frames with usage (role, T contents,
finish, usage, [DONE]) is 3T + 14 pieces (37 tokens: 125, 297 tokens: 905). x_token_ms is not
waited: every frame shares the one write, as under load when a server hands many queued buffers
to one call. Every sendmsg is logged on stdout as `sendmsg PIECES BYTES`, which the e2e test
reads to check that the pieces were as many as it meant.

Usage: sendmsg_app.py PORT (or --port PORT; 0 picks a free port)
"""
import json
import os
import select
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# The kernel refuses a sendmsg of more buffers than this (UIO_MAXIOV): EMSGSIZE.
IOV_MAX = os.sysconf("SC_IOV_MAX")
MAX_HEAD = 64 * 1024

log_lock = threading.Lock()


def log(line):
    with log_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def send_pieces(conn, pieces):
    """Send pieces with one sendmsg; a blocking TCP socket takes all of it in one call."""
    if len(pieces) > IOV_MAX:
        raise ValueError(f"{len(pieces)} pieces, more than IOV_MAX {IOV_MAX}")
    total = sum(len(p) for p in pieces)
    sent = conn.sendmsg(pieces)
    log(f"sendmsg {len(pieces)} {total}")
    if sent != total:
        raise OSError(f"sendmsg sent {sent} of {total} bytes")


def head(status, reason, ctype, length=None):
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {ctype}"]
    lines.append(f"Content-Length: {length}" if length is not None else
                 "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def json_response(status, reason, obj):
    body = json.dumps(obj).encode()
    return [head(status, reason, "application/json", len(body)), body]


def stream_frames(req):
    """The frames of common.Request.frames, without its sleeps."""
    frames = [req.delta({"role": "assistant", "content": ""})]
    for i in range(req.max_tokens):
        if req.fail == "stream" and i == req.max_tokens // 2:
            return frames + [common.sse(common.ERROR_HTTP), common.DONE]
        frames.append(req.delta({"content": common.token_text(i)}))
    frames.append(req.delta({}, "length"))
    if req.include_usage:
        frames.append(req.chunk([], req.usage()))
    return frames + [common.DONE]


def respond(conn, path, raw):
    if path.split("?")[0] != common.CHAT_PATH:
        send_pieces(conn, json_response(404, "Not Found", {"error": {"message": "not found"}}))
        return
    try:
        req = common.Request(raw)
    except common.BadRequest as e:
        send_pieces(conn, json_response(400, "Bad Request", {"error": {"message": str(e)}}))
        return
    if req.fail == "http":
        send_pieces(conn, json_response(500, "Internal Server Error", common.ERROR_HTTP))
        return
    if not req.stream:
        time.sleep(req.prefill_s + req.token_s * max(req.max_tokens - 1, 0))
        body = json.dumps({
            "id": req.id, "object": "chat.completion", "created": req.created,
            "model": req.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(
                common.token_text(i) for i in range(req.max_tokens))},
                "finish_reason": "length"}],
            "usage": req.usage()}).encode()
        send_pieces(conn, [head(200, "OK", "application/json", len(body)), body])
        return
    time.sleep(req.prefill_s)
    pieces = [head(200, "OK", "text/event-stream")]
    for f in stream_frames(req):
        pieces += [b"%x\r\n" % len(f), f, b"\r\n"]
    pieces.append(b"0\r\n\r\n")
    send_pieces(conn, pieces)


def serve(conn):
    """HTTP/1.1 keep-alive: requests with a Content-Length body, one after another."""
    buf = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in buf:
                if len(buf) > MAX_HEAD:
                    return
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            head_bytes, buf = buf.split(b"\r\n\r\n", 1)
            lines = head_bytes.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            while len(buf) < length:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            raw, buf = buf[:length], buf[length:]
            try:
                if method != "POST":
                    send_pieces(conn, json_response(405, "Method Not Allowed",
                                                    {"error": {"message": "POST only"}}))
                else:
                    respond(conn, path, raw)
            except OSError:
                return  # the client went away


def main():
    args = common.parse_args("One sendmsg per response, each frame in its own pieces.")
    lsock = socket.create_server(("127.0.0.1", args.port), backlog=64)
    common.announce(lsock.getsockname()[1])
    # Wait in select, not in accept: an accept already blocked when tokenscope attaches is not
    # seen, and its connection's first request then has no socket arrival time (received_ns).
    while True:
        select.select([lsock], [], [])
        conn, _ = lsock.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
