#!/usr/bin/python3
"""Helpers for run_report.sh: move a recording's wall-clock anchor, and check the spans
`tokenscope report --otlp` sent against the requests `report --json --tokens` printed.

    tsr_spans.py move IN OUT SHIFT_NS HOST
        copies recording IN to OUT with start_real_ns moved by SHIFT_NS (signed) and the
        hostname set to HOST, as if it had been recorded elsewhere at another time
    tsr_spans.py check TSR JSONL BODY_DIR summary|full
        every request line of JSONL has exactly one SERVER span among the bodies in BODY_DIR,
        found by (pid, conn, seq); its start, end and events are the request's kernel times plus
        the recording's own offset (start_real_ns - start_mono_ns, read from TSR's header),
        exactly; ids are lowercase hex and not zero; host.name is the recording's.
        summary: no token events; full: one token event per content frame, the anomaly named.

Prints what differs and exits 1, or prints a one-line summary and exits 0.
The header layout is the one user/record/record.h documents.
"""
import glob
import json
import re
import struct
import sys

HDR_MONO, HDR_REAL, HDR_HOST, HOST_BYTES = 16, 24, 72, 64


def header(path):
    with open(path, "rb") as f:
        h = f.read(HDR_HOST + HOST_BYTES)
    if h[:8] != b"TSREC\0\0\0":
        sys.exit("%s: not a recording" % path)
    mono, real = struct.unpack_from("<QQ", h, HDR_MONO)
    host = h[HDR_HOST:HDR_HOST + HOST_BYTES].split(b"\0")[0].decode()
    return mono, real, host


def move(src, dst, shift, host):
    with open(src, "rb") as f:
        b = bytearray(f.read())
    mono, real, _ = header(src)
    struct.pack_into("<Q", b, HDR_REAL, real + shift)
    h = host.encode()[:HOST_BYTES]
    b[HDR_HOST:HDR_HOST + HOST_BYTES] = h + b"\0" * (HOST_BYTES - len(h))
    with open(dst, "wb") as f:
        f.write(b)


def attrs(obj):
    out = {}
    for a in obj.get("attributes", []):
        v = a["value"]
        out[a["key"]] = next(iter(v.values())) if v else None
    return out


def check(tsr, jsonl, body_dir, mode):
    mono, real, host = header(tsr)
    off = real - mono
    errs = []
    reqs = {}
    with open(jsonl) as f:
        for line in f:
            r = json.loads(line)
            if "arrival_ns" in r:
                reqs[(r["pid"], r["conn"], r["seq"])] = r
    spans, hosts = [], set()
    for body in sorted(glob.glob(body_dir + "/*.json")):
        with open(body) as f:
            doc = json.load(f)
        for rs in doc["resourceSpans"]:
            hosts.add(attrs(rs["resource"]).get("host.name"))
            for ss in rs["scopeSpans"]:
                spans += ss["spans"]
    roots = [s for s in spans if "parentSpanId" not in s]
    if hosts != {host}:
        errs.append("host.name %s, the recording's is %r" % (sorted(map(str, hosts)), host))
    if len(roots) != len(reqs):
        errs.append("%d request spans for %d requests" % (len(roots), len(reqs)))
    hexre = {32: re.compile("^[0-9a-f]{32}$"), 16: re.compile("^[0-9a-f]{16}$")}
    seen, trace_ids = set(), set()
    tokens = 0
    for s in roots:
        a = attrs(s)
        key = (int(a.get("tokenscope.pid", -1)), a.get("tokenscope.conn"),
               int(a.get("tokenscope.seq", -1)))
        r = reqs.get(key)
        if r is None or key in seen:
            errs.append("span %s: no request, or a second span, for %s" % (s.get("name"), key))
            continue
        seen.add(key)
        for k, n in (("traceId", 32), ("spanId", 16)):
            v = s.get(k, "")
            if not hexre[n].match(v) or not v.strip("0"):
                errs.append("%s: %s %r is not %d lowercase hex digits" % (key, k, v, n))
        trace_ids.add(s.get("traceId"))
        want = {"startTimeUnixNano": r["arrival_ns"] + off, "endTimeUnixNano": r["end_ns"] + off}
        for k, v in want.items():
            if s.get(k) != str(v):
                errs.append("%s: %s %s, want %d (kernel time + recording offset)" %
                            (key, k, s.get(k), v))
        ev = s.get("events", [])
        toks = [e for e in ev if e["name"] == "token"]
        first = [e for e in ev if e["name"] == "first_token"]
        if r["first_token_ns"] is not None and (
                len(first) != 1 or first[0]["timeUnixNano"] != str(r["first_token_ns"] + off)):
            errs.append("%s: first_token event %s, want %d" %
                        (key, first, r["first_token_ns"] + off))
        if mode == "summary":
            if toks or "tokenscope.anomaly" in a:
                errs.append("%s: a summary span with %d token events" % (key, len(toks)))
            continue
        if "slow_ttft" not in (a.get("tokenscope.anomaly") or ""):
            errs.append("%s: tokenscope.anomaly %r" % (key, a.get("tokenscope.anomaly")))
        got = [int(e["timeUnixNano"]) for e in toks]
        want_toks = [t + off for t in r.get("token_ns", [])]
        if not want_toks or got != want_toks:
            errs.append("%s: token events %s, want %s" % (key, got, want_toks))
        tokens += len(got)
    if len(trace_ids) != len(roots):
        errs.append("trace ids are not unique")
    for e in errs[:20]:
        print("  " + e)
    if errs:
        return 1
    print("  %d requests, %d spans, %d token events; offset %d ns, host %s" %
          (len(reqs), len(roots), tokens, off, host))
    return 0


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "move":
        move(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return 0
    if len(sys.argv) == 6 and sys.argv[1] == "check" and sys.argv[5] in ("summary", "full"):
        return check(*sys.argv[2:])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
