#!/usr/bin/python3
"""The loopback OTLP/HTTP receiver of tests/otlp/receiver.py, stricter, and counting refusals.

    strict_receiver.py --dir DIR --port-file FILE

receiver.py answers 400 to a body that json.loads refuses: invalid UTF-8 (0xff, an overlong
0xc0 0xaf) and raw control characters in strings. json.loads decodes bytes with
"surrogatepass", though, so UTF-8-encoded surrogates (0xed 0xa0 0x80) pass, and so do lone
surrogate escapes ("\\ud800"), which protobuf's JSON mapping (what a collector parses OTLP/JSON
with) refuses as invalid UTF-8. Here every body must also:
  - decode as strict UTF-8 (no surrogates encoded in it),
  - have no string, key or value, holding a lone surrogate after its escapes are read,
  - come with Content-Type application/json.
Anything else is refused with 400 before receiver.py sees it, and kept in DIR/rejected/ with
the reason. GET /stats answers the counts as JSON:
  {"requests": N, "accepted": N, "rejected": N, "spans": N, "reasons": {...}}
"""
import importlib.util
import io
import json
import os
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "receiver", os.path.join(HERE, "..", "otlp", "receiver.py"))
receiver = importlib.util.module_from_spec(spec)
spec.loader.exec_module(receiver)

lock = threading.Lock()
counts = {"requests": 0, "accepted": 0, "rejected": 0, "spans": 0, "reasons": {}}
REASON_MAX = 200  # characters of a refusal's reason kept in /stats


def lone_surrogate(v):
    """The first string in v (keys included) that is not valid Unicode, or None."""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                return x
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return None


def strict_problem(body, ctype):
    """Why a body is refused here, or None."""
    if ctype.split(";")[0].strip().lower() != "application/json":
        return "Content-Type %r" % ctype
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        return "not UTF-8: %s" % e
    try:
        doc = json.loads(text)
    except ValueError as e:
        return "not JSON: %s" % e
    s = lone_surrogate(doc)
    if s is not None:
        return "lone surrogate in string %r" % s[:60]
    return None


def span_count(body):
    try:
        doc = json.loads(body)
        return sum(len(ss.get("spans", [])) for rs in doc.get("resourceSpans", [])
                   for ss in rs.get("scopeSpans", []))
    except Exception:
        return 0


class StrictHandler(receiver.Handler):
    def reply(self, code, body=b"{}", headers=()):
        if self.command == "POST":
            with lock:
                if code < 300:
                    counts["accepted"] += 1
                else:
                    counts["rejected"] += 1
        super().reply(code, body, headers)

    def do_GET(self):
        if self.path != "/stats":
            return self.reply(404, b'{"message":"not here"}')
        with lock:
            body = json.dumps(counts).encode()
        self.reply(200, body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        with lock:
            counts["requests"] += 1
            nth = counts["requests"]
        why = strict_problem(body, self.headers.get("Content-Type", ""))
        if why is None:
            try:
                json.loads(body)  # what receiver.py will do; its refusal is counted too
            except ValueError as e:
                why = "receiver.py refuses it: %s" % e
        if why is not None:
            d = os.path.join(self.server.dir, "rejected")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "%06d.bin" % nth), "wb") as f:
                f.write(body)
            with open(os.path.join(d, "%06d.why" % nth), "w") as f:
                f.write(why + "\n")
            with lock:
                key = why[:REASON_MAX]
                counts["reasons"][key] = counts["reasons"].get(key, 0) + 1
            return self.reply(400, b'{"message":"refused: not strict UTF-8 JSON"}')
        n = span_count(body)
        with lock:
            counts["spans"] += n
        # receiver.py reads the body itself; the connection's stream comes back for keep-alive
        conn_rfile, self.rfile = self.rfile, io.BytesIO(body)
        try:
            super().do_POST()
        finally:
            self.rfile = conn_rfile


if __name__ == "__main__":
    receiver.serve(StrictHandler)
