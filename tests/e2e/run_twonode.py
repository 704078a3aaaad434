#!/usr/bin/python3
"""One request across two nodes: W3C trace context and connection joins, end to end.

Two network namespaces made here are the two nodes, joined by a veth pair with addresses
assigned here (both removed on exit). Node 1 runs Debian's nginx as a router (proxy_pass to
node 2, HTTP/1.1 upstream, proxy_buffering off; it passes the request headers through, so
`traceparent` goes upstream unchanged); node 2 runs the reference server (tests/refserver.c).
Two tokenscopes, in the root namespace, trace them by pid (`trace -p` of nginx's master
follows its worker) and send spans to ONE OTLP receiver (tests/otlp/receiver.py; the router's
under /router, the worker's under /worker). A client in node 1 sends streamed chat requests:

  with a traceparent (and an x-request-id): each gives one trace of three spans chained, router
    SERVER (no parent: nginx forwarded the traceparent unchanged, docs/otlp.md "Trace
    context") -> router CLIENT (span id = the traceparent's parent-id) -> worker SERVER
    (parent = that id), with equal output tokens and the TTFTs layered: the worker's <= the
    router's client-side <= the router's served; the x-request-id on all three;
  without: no parent anywhere, and the router's CLIENT span and the worker's SERVER span of
    each request name the same connection (client.address/port, server.address/port).

The JSON lines of both tokenscopes are checked too (trace_id, parent_span_id, the addresses).
Prints PASS/FAIL/SKIP lines and "N passed, N failed, N skipped". Needs root (eBPF, netns).
"""
import glob
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENSCOPE = os.path.join(ROOT, ".output", "tokenscope")
REFSERVER = os.path.join(ROOT, ".output", "refserver")
RECEIVER = os.path.join(ROOT, "tests", "otlp", "receiver.py")
PY = "/usr/bin/python3"
NAME = "twonode"
# Addresses of the two nodes on their veth link (a /30 of the TEST-NET-2 block: never routed).
NODE1, NODE2, PREFIX = "198.51.100.1", "198.51.100.2", 30
ROUTER_PORT, WORKER_PORT = 8080, 8000
REQUESTS = 4  # with trace context, and as many without
ATTACH_S, SETTLE_S, EXIT_S = 60, 0.5, 20

NGINX_CONF = """daemon off;
master_process on;
worker_processes 1;
error_log {work}/error.log warn;
pid {work}/nginx.pid;
events {{ worker_connections 512; }}
http {{
    access_log off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    server {{
        listen {node1}:{port};
        location / {{
            proxy_pass http://{node2}:{upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


class Skip(Exception):
    pass


def sh(*argv):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {r.stdout.strip()}")
    return r.stdout


class Nodes:
    """Two namespaces and a veth pair between them; close() removes them."""

    def __init__(self):
        tag = f"{os.getpid() % 100000}"
        self.ns = [f"ts2n-a{tag}", f"ts2n-b{tag}"]
        self.made = []
        veth = [f"ts2a{tag}", f"ts2b{tag}"]
        try:
            for ns in self.ns:
                sh("ip", "netns", "add", ns)
                self.made.append(ns)
            sh("ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
            for ns, dev, addr in zip(self.ns, veth, (NODE1, NODE2)):
                sh("ip", "link", "set", dev, "netns", ns)
                sh("ip", "-n", ns, "addr", "add", f"{addr}/{PREFIX}", "dev", dev)
                sh("ip", "-n", ns, "link", "set", dev, "up")
                sh("ip", "-n", ns, "link", "set", "lo", "up")
        except (RuntimeError, OSError) as e:
            self.close()
            raise Skip(f"cannot make two network namespaces joined by veth: {e}")

    def exec(self, i):
        return ["ip", "netns", "exec", self.ns[i]]

    def close(self):
        # Deleting a namespace deletes the veth end in it, and with it its peer.
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        self.made = []


class Procs:
    def __init__(self):
        self.procs = []

    def start(self, argv, log):
        p = subprocess.Popen(argv, stdout=open(log + ".out", "w"), stderr=open(log + ".err", "w"),
                             start_new_session=True)
        self.procs.append(p)
        return p

    @staticmethod
    def stop(p, sig=signal.SIGTERM, wait_s=5):
        p.send_signal(sig)
        try:
            return p.wait(wait_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            return p.wait()

    def close(self):
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_for(what, cond, p, log, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if p.poll() is not None:
            raise RuntimeError(f"{what} exited {p.returncode}: {read(log + '.err')[-600:]!r}")
        time.sleep(0.05)
    raise RuntimeError(f"{what}: not ready after {timeout} s: {read(log + '.err')[-600:]!r}")


def client(host, port, n, with_context, out):
    """Runs inside node 1: n streamed chat requests, one connection each; what each sent."""
    sent = []
    for i in range(n):
        body = json.dumps({"model": "ref", "stream": True, "max_tokens": 6 + i,
                           "messages": [{"role": "user", "content": "hello"}]})
        headers = {"Content-Type": "application/json"}
        rec = {"max_tokens": 6 + i}
        if with_context:
            rec["trace_id"] = secrets.token_hex(16)
            rec["parent_id"] = secrets.token_hex(8)
            rec["request_id"] = f"req-{secrets.token_hex(4)}-{i}"
            headers["traceparent"] = f"00-{rec['trace_id']}-{rec['parent_id']}-01"
            headers["tracestate"] = "tenant=ts-e2e"
            headers["X-Request-Id"] = rec["request_id"]
        c = http.client.HTTPConnection(host, port, timeout=30)
        c.request("POST", "/v1/chat/completions", body, headers)
        resp = c.getresponse()
        data = resp.read()
        rec["status"] = resp.status
        rec["done"] = b"[DONE]" in data
        c.close()
        sent.append(rec)
    with open(out, "w") as f:
        json.dump(sent, f)


def spans_of(bodies_dir):
    out = []
    for path in sorted(glob.glob(os.path.join(bodies_dir, "*.json"))):
        with open(path) as f:
            body = json.load(f)
        for rs in body.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                out.extend(ss.get("spans", []))
    return out


def attr(span, key):
    for a in span.get("attributes", []):
        if a["key"] == key:
            v = a["value"]
            if "intValue" in v:
                return int(v["intValue"])
            if "doubleValue" in v:
                return v["doubleValue"]
            if "arrayValue" in v:
                return [x.get("stringValue") for x in v["arrayValue"].get("values", [])]
            return next(iter(v.values()))
    return None


def jsonl(path):
    out = []
    for line in read(path).splitlines():
        if line.startswith('{"pid":'):
            out.append(json.loads(line))
    return out


def ends(span):
    return (attr(span, "client.address"), attr(span, "client.port"),
            attr(span, "server.address"), attr(span, "server.port"))


def check(sent_ctx, sent_plain, router, worker, router_lines, worker_lines):
    """Returns the list of what is wrong (empty: pass)."""
    errors = []
    kinds = {2: "SERVER", 3: "CLIENT"}
    for who, spans in (("router", router), ("worker", worker)):
        for s in spans:
            if s.get("kind") not in kinds:
                errors.append(f"{who}: a span of kind {s.get('kind')}: {s.get('name')}")
    r_server = [s for s in router if s.get("kind") == 2]
    r_client = [s for s in router if s.get("kind") == 3]
    n = len(sent_ctx) + len(sent_plain)
    if len(r_server) != n or len(r_client) != n or len(worker) != n:
        errors.append(f"{n} requests gave {len(r_server)} router SERVER, {len(r_client)} router "
                      f"CLIENT and {len(worker)} worker spans")
    everything = router + worker
    for rec in sent_ctx:
        t = rec["trace_id"]
        trace = [s for s in everything if s["traceId"] == t]
        rs = [s for s in trace if s in r_server]
        rc = [s for s in trace if s in r_client]
        ws = [s for s in trace if s in worker]
        if len(trace) != 3 or len(rs) != 1 or len(rc) != 1 or len(ws) != 1:
            errors.append(f"trace {t}: {len(trace)} spans ({len(rs)} router SERVER, "
                          f"{len(rc)} router CLIENT, {len(ws)} worker SERVER), not 3 chained")
            continue
        rs, rc, ws = rs[0], rc[0], ws[0]
        if "parentSpanId" in rs:
            errors.append(f"trace {t}: the router's SERVER span names parent "
                          f"{rs['parentSpanId']} (nginx forwarded the traceparent unchanged: "
                          "it is the root here)")
        if attr(rs, "tokenscope.trace.forwarded_parent") != rec["parent_id"]:
            errors.append(f"trace {t}: router SERVER tokenscope.trace.forwarded_parent "
                          f"{attr(rs, 'tokenscope.trace.forwarded_parent')!r}")
        if rc["spanId"] != rec["parent_id"]:
            errors.append(f"trace {t}: router CLIENT span id {rc['spanId']}, not the "
                          f"traceparent's parent-id {rec['parent_id']}")
        if rc.get("parentSpanId") != rs["spanId"]:
            errors.append(f"trace {t}: router CLIENT parent {rc.get('parentSpanId')}, not the "
                          f"router SERVER span {rs['spanId']}")
        if ws.get("parentSpanId") != rc["spanId"]:
            errors.append(f"trace {t}: worker SERVER parent {ws.get('parentSpanId')}, not the "
                          f"router CLIENT span {rc['spanId']}")
        for who, s in (("router SERVER", rs), ("router CLIENT", rc), ("worker SERVER", ws)):
            if s.get("traceState") != "tenant=ts-e2e":
                errors.append(f"trace {t}: {who} traceState {s.get('traceState')!r}")
            if attr(s, "http.request.header.x-request-id") != [rec["request_id"]]:
                errors.append(f"trace {t}: {who} x-request-id "
                              f"{attr(s, 'http.request.header.x-request-id')!r}")
            if attr(s, "tokenscope.outcome") != "ok":
                errors.append(f"trace {t}: {who} outcome {attr(s, 'tokenscope.outcome')!r}")
        toks = [attr(s, "gen_ai.usage.output_tokens") for s in (ws, rc, rs)]
        if len(set(toks)) != 1 or toks[0] != rec["max_tokens"]:
            errors.append(f"trace {t}: output tokens worker/router client/router server {toks}, "
                          f"asked {rec['max_tokens']}")
        ttft = (attr(ws, "gen_ai.server.time_to_first_token"),
                attr(rc, "tokenscope.client.time_to_first_token"),
                attr(rs, "gen_ai.server.time_to_first_token"))
        if None in ttft or not ttft[0] <= ttft[1] <= ttft[2]:
            errors.append(f"trace {t}: TTFT worker {ttft[0]} <= router client-side {ttft[1]} "
                          f"<= router served {ttft[2]} does not hold")
    ctx_traces = {rec["trace_id"] for rec in sent_ctx}
    plain_rc = [s for s in r_client if s["traceId"] not in ctx_traces]
    plain_ws = [s for s in worker if s["traceId"] not in ctx_traces]
    if len(plain_rc) != len(sent_plain) or len(plain_ws) != len(sent_plain):
        errors.append(f"{len(sent_plain)} requests without trace context gave {len(plain_rc)} "
                      f"router CLIENT and {len(plain_ws)} worker spans")
    for s in plain_ws:
        if "parentSpanId" in s:
            errors.append(f"worker span {s['spanId']} without trace context names parent "
                          f"{s['parentSpanId']}")
    for s in plain_rc:
        e = ends(s)
        if None in e or e[2] != NODE2 or e[3] != WORKER_PORT or e[0] != NODE1:
            errors.append(f"router CLIENT span {s['spanId']}: connection {e}")
        match = [w for w in plain_ws if ends(w) == e]
        if len(match) != 1:
            errors.append(f"router CLIENT span {s['spanId']} connection {e}: {len(match)} worker "
                          "SERVER spans name it")
        elif attr(match[0], "gen_ai.usage.output_tokens") != attr(s, "gen_ai.usage.output_tokens"):
            errors.append(f"connection {e}: output tokens differ between the two sides")
        # The router's CLIENT span is its SERVER span's child, in the SERVER span's own trace.
        parent = [r for r in r_server if r["spanId"] == s.get("parentSpanId")]
        if len(parent) != 1 or parent[0]["traceId"] != s["traceId"]:
            errors.append(f"router CLIENT span {s['spanId']} without trace context: parent "
                          f"{s.get('parentSpanId')} is not a router SERVER span of its trace")
    # The JSON lines say the same.
    for rec in sent_ctx:
        w = [j for j in worker_lines if j.get("trace_id") == rec["trace_id"]]
        r = [j for j in router_lines if j.get("trace_id") == rec["trace_id"]]
        if (len(w) != 1 or w[0].get("parent_span_id") != rec["parent_id"]
                or w[0].get("request_id") != rec["request_id"]):
            errors.append(f"worker JSON lines for trace {rec['trace_id']}: {w}")
        roles = sorted(j.get("role") for j in r)
        if roles != ["client", "server"] or not all(j.get("parent_span_id") == rec["parent_id"]
                                                     for j in r):
            errors.append(f"router JSON lines for trace {rec['trace_id']}: {r}")
        elif [j for j in r if j["role"] == "server"][0].get("trace_forwarded") is not True:
            errors.append(f"router JSON line for trace {rec['trace_id']}: no trace_forwarded")
    for j in worker_lines:
        if j.get("server_address") != NODE2 or j.get("server_port") != WORKER_PORT or \
                j.get("client_address") != NODE1:
            errors.append(f"worker JSON line's addresses: {j.get('client_address')}:"
                          f"{j.get('client_port')} -> {j.get('server_address')}:"
                          f"{j.get('server_port')}")
    return errors


def run(work):
    for path in (TOKENSCOPE, REFSERVER):
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"{path} not built (make)")
    if not shutil.which("nginx"):
        raise Skip("nginx not installed (apt-get install nginx-light)")
    if not shutil.which("ip"):
        raise Skip("ip (iproute2) not installed")
    nodes = Nodes()
    procs = Procs()
    try:
        bodies = os.path.join(work, "bodies")
        receiver = procs.start([PY, RECEIVER, "--dir", bodies, "--port-file",
                                os.path.join(work, "receiver.port")], os.path.join(work, "recv"))
        log = os.path.join(work, "worker")
        worker = procs.start(nodes.exec(1) + [REFSERVER, "--host", NODE2, "--port",
                                              str(WORKER_PORT), "--token-ms", "5",
                                              "--prefill-ms", "20"], log)
        wait_for("refserver", lambda: "listening on" in read(log + ".out") + read(log + ".err"),
                 worker, log, 10)
        ngx = os.path.join(work, "nginx")
        os.makedirs(ngx, exist_ok=True)
        with open(os.path.join(ngx, "nginx.conf"), "w") as f:
            f.write(NGINX_CONF.format(work=ngx, node1=NODE1, port=ROUTER_PORT, node2=NODE2,
                                      upstream=WORKER_PORT))
        log = os.path.join(work, "nginx")
        router = procs.start(nodes.exec(0) + ["nginx", "-c", os.path.join(ngx, "nginx.conf"),
                                              "-p", ngx], log)
        wait_for("nginx", lambda: os.path.exists(os.path.join(ngx, "nginx.pid")), router, log, 10)
        port_file = os.path.join(work, "receiver.port")
        wait_for("receiver", lambda: os.path.exists(port_file) and read(port_file).strip(),
                 receiver, os.path.join(work, "recv"), 10)
        rport = int(read(port_file).strip())
        tss = []
        for name, pid in (("router", router.pid), ("worker", worker.pid)):
            log = os.path.join(work, "ts-" + name)
            ts = procs.start([TOKENSCOPE, "trace", "-p", str(pid), "--json",
                              "--otlp", f"http://127.0.0.1:{rport}/{name}/v1/traces",
                              "--trace-sample", "1"], log)
            tss.append((name, ts, log))
        for name, ts, log in tss:
            wait_for(f"tokenscope ({name})",
                     lambda: "tokenscope: attached" in read(log + ".err"), ts, log, ATTACH_S)
        time.sleep(SETTLE_S)
        sent = {}
        for kind, ctx in (("ctx", True), ("plain", False)):
            out = os.path.join(work, f"client-{kind}.json")
            r = subprocess.run(nodes.exec(0) + [PY, os.path.abspath(__file__), "--client",
                                                NODE1, str(ROUTER_PORT), str(REQUESTS),
                                                "1" if ctx else "0", out],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=120)
            if r.returncode:
                raise RuntimeError(f"client ({kind}): {r.stdout[-600:]!r}")
            with open(out) as f:
                sent[kind] = json.load(f)
            bad = [x for x in sent[kind] if x["status"] != 200 or not x["done"]]
            if bad:
                raise RuntimeError(f"client ({kind}): requests not answered: {bad}")
        time.sleep(SETTLE_S)
        for name, ts, log in tss:
            rc = procs.stop(ts, signal.SIGINT, EXIT_S)
            if rc != 0:
                raise RuntimeError(f"tokenscope ({name}) exited {rc}: "
                                   f"{read(log + '.err')[-600:]!r}")
        r_spans = spans_of(os.path.join(bodies, "router"))
        w_spans = spans_of(os.path.join(bodies, "worker"))
        return check(sent["ctx"], sent["plain"], r_spans, w_spans,
                     jsonl(os.path.join(work, "ts-router.out")),
                     jsonl(os.path.join(work, "ts-worker.out")))
    finally:
        procs.close()
        nodes.close()


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "--client":
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1", sys.argv[6])
        return 0
    keep = os.environ.get("TWONODE_KEEP")
    if os.geteuid() != 0:
        print(f"SKIP {NAME}: needs root (eBPF, network namespaces)")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    work = keep or tempfile.mkdtemp(prefix="tokenscope-twonode.")
    os.makedirs(work, exist_ok=True)
    try:
        errors = run(work)
    except Skip as e:
        print(f"SKIP {NAME}: {e}")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as e:
        errors = [f"{type(e).__name__}: {e}"]
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    if errors:
        print(f"FAIL {NAME}: " + "; ".join(errors[:12]))
        print("0 passed, 1 failed, 0 skipped")
        return 1
    print(f"PASS {NAME}: {REQUESTS} requests with trace context gave {REQUESTS} traces of three "
          f"chained spans across the two nodes; {REQUESTS} without joined by their connections")
    print("1 passed, 0 failed, 0 skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
