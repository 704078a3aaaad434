#!/usr/bin/python3
"""The OTLP bodies a report sent, made comparable byte for byte: every span of every body in the
order sent (bodies by the receiver's number, spans in order within each), one JSON object per
line with sorted keys, with the trace and span ids (random in each run) replaced by their order
of first appearance ("t1", "s1", ...). Batch boundaries depend on the sender thread's timing,
so bodies are not kept as such; the resource (host, service) of each span is kept with it.

    otlp_norm.py DIR      # DIR: the receiver's directory of NNNNNN.json bodies
"""
import json
import os
import sys


def main():
    d = sys.argv[1]
    ids = {}

    def norm(kind, v):
        if not v:
            return v
        key = (kind, v)
        if key not in ids:
            ids[key] = f"{kind}{sum(1 for k in ids if k[0] == kind) + 1}"
        return ids[key]

    names = sorted(n for n in os.listdir(d) if n.endswith(".json")) if os.path.isdir(d) else []
    for n in names:
        with open(os.path.join(d, n)) as f:
            body = json.load(f)
        for rs in body.get("resourceSpans", []):
            resource = rs.get("resource", {})
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    sp["traceId"] = norm("t", sp.get("traceId"))
                    sp["spanId"] = norm("s", sp.get("spanId"))
                    if "parentSpanId" in sp:
                        sp["parentSpanId"] = norm("s", sp["parentSpanId"])
                    for link in sp.get("links", []):
                        link["traceId"] = norm("t", link.get("traceId"))
                        link["spanId"] = norm("s", link.get("spanId"))
                    out = {"resource": resource, "scope": ss.get("scope", {}), "span": sp}
                    print(json.dumps(out, sort_keys=True, separators=(",", ":")))
    print(f"{sum(1 for k in ids if k[0] == 't')} traces")


if __name__ == "__main__":
    main()
