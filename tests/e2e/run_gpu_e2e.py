#!/usr/bin/python3
"""GPU steps end to end, without a GPU: the reference server in its GPU mode (an API process and
a separate engine process that calls the real CUDA runtime in prefill and decode step patterns
with known durations, batching requests) is traced by tokenscope, driven by the ground-truth
client, and tokenscope's steps and per-request queue/prefill/decode are checked against what
the server logged it did (--gpu-log, CLOCK_MONOTONIC), within 2 ms.

Cases: batched (4 concurrent clients, steps batching several requests), late-engine (the engine
process starts after tokenscope attached: it must be found and hooked when it maps CUDA),
known-batch (6 concurrent streams of equal length on an engine of --max-batch 4, at once and
25 ms apart: every step's batch, and every request's decode steps and mean batch, must equal
what the server's log says each step carried, exactly).
Prints PASS/FAIL/SKIP lines and "N passed, N failed, N skipped".

  run_gpu_e2e.py [--case NAME] [--attempts N]
"""
import argparse
import atexit
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, ".output")
TS = os.path.join(OUT, "tokenscope")
RS = os.path.join(OUT, "refserver")
GT = os.path.join(OUT, "gtclient")
CUDART_REAL = "/usr/local/cuda/lib64/libcudart.so.13"
CUDART_STANDIN = os.path.join(OUT, "standin", "libcudart.so.13")
TOL_NS = 2_000_000
ATTEMPTS = 3


class Fail(Exception):
    pass


def wait_for(path, text, timeout):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with open(path) as f:
                data = f.read()
            if text in data:
                return data
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise Fail(f"no {text!r} in {os.path.basename(path)} after {timeout} s: "
               + open(path).read()[-600:] if os.path.exists(path) else "")


def jsonl(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith("{")]


def peer_port(conn):
    return int(conn.split("<-")[1].split("#")[0].rsplit(":", 1)[1])


def listen_port(text):
    return int(text.split("listening on ")[1].split(":")[1].split()[0])


def requests_by_port(ts):
    """tokenscope's request lines of ts by their client's port, each port's in arrival order
    (the client's seq on that connection)."""
    by_port = {}
    for t in ts:
        if "conn" in t:
            by_port.setdefault(peer_port(t["conn"]), []).append(t)
    for v in by_port.values():
        v.sort(key=lambda t: t["arrival_ns"])
    return by_port


def held_problems(ts_err):
    """An engine that maps its runtime after attach, from a file no traced process mapped
    before, is held at the mapping until hooked (docs/gpu.md): tokenscope says so, and that no
    call was missed. Where it cannot hold (no CAP_KILL, no tracefs) the case is not this one."""
    text = open(ts_err).read()
    if "held at a library mapping until hooked" not in text:
        return ["the engine was not held at its mapping of the runtime: "
                + " | ".join(l.strip() for l in text.splitlines() if "hook" in l)[:300]]
    if "calls in that time not seen" in text:
        return ["a window was left: " + [l for l in text.splitlines()
                                         if "calls in that time" in l][0]]
    return []


def run_under_run(name, tmp, cudart, server_args, client_args, check):
    """tokenscope run starts the server itself; the client goes at once (the engine starts
    with the first request: --engine-on-request)."""
    log = os.path.join(tmp, f"{name}.gpu.jsonl")
    ts_out = os.path.join(tmp, f"{name}.ts.out")
    ts_err = os.path.join(tmp, f"{name}.ts.err")
    ts = subprocess.Popen([TS, "run", "--json", "--tokens", "--gpu-steps", "--", RS, "--gpu",
                           "--port", "0", "--cudart", cudart, "--gpu-log", log, *server_args],
                          stdout=open(ts_out, "w"), stderr=open(ts_err, "w"))
    try:
        port = listen_port(wait_for(ts_out, "listening on", 20))
        gt_out = os.path.join(tmp, f"{name}.client.jsonl")
        subprocess.run([GT, "--port", str(port), "--realtime", *client_args, "-o", gt_out],
                       check=True, timeout=120, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        # The server (and its engine) end; run ends with them.
        subprocess.run(["pkill", "-TERM", "-f", log], check=False)
        ts.wait(20)
        problems, timing = check(jsonl(log), jsonl(ts_out), jsonl(gt_out))
        return problems + held_problems(ts_err), timing
    finally:
        if ts.poll() is None:
            ts.kill()
            ts.wait()
        subprocess.run(["pkill", "-KILL", "-f", log], check=False)


def run_case(name, tmp, cudart, server_args, client_args, late_engine, check=None,
             wait_cuda=True):
    log = os.path.join(tmp, f"{name}.gpu.jsonl")
    procs = []
    try:
        srv_out = os.path.join(tmp, f"{name}.server.out")
        srv = subprocess.Popen([RS, "--gpu", "--port", "0", "--cudart", cudart, "--gpu-log", log,
                                *server_args], stdout=open(srv_out, "w"),
                               stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(srv)
        port = listen_port(wait_for(srv_out, "listening on", 10))
        if not late_engine:
            # Warm the engine up unobserved: its first steps pay for loading CUDA.
            subprocess.run([GT, "--port", str(port), "-n", "2", "--max-tokens", "2", "-o",
                            os.devnull], check=True, timeout=30, stderr=subprocess.DEVNULL)
        ts_out = os.path.join(tmp, f"{name}.ts.out")
        ts_err = os.path.join(tmp, f"{name}.ts.err")
        ts = subprocess.Popen([TS, "trace", "-p", str(srv.pid), "--json", "--tokens",
                               "--gpu-steps"], stdout=open(ts_out, "w"),
                              stderr=open(ts_err, "w"))
        procs.append(ts)
        wait_for(ts_err, "tokenscope: attached", 20)
        # The engine is hooked when tokenscope finds CUDA in its maps (at once, or when a late
        # engine maps it). An engine started by the first request is not waited for: it must
        # be hooked before its first call, with no help.
        if wait_cuda:
            wait_for(ts_err, "tracing CUDA calls", 15)
        gt_out = os.path.join(tmp, f"{name}.client.jsonl")
        subprocess.run([GT, "--port", str(port), "--realtime", *client_args, "-o", gt_out],
                       check=True, timeout=120, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        ts.send_signal(signal.SIGINT)
        if ts.wait(20) != 0:
            raise Fail(f"tokenscope exited {ts.returncode}")
        if check in (compare_coverage, compare_shape):
            problems, timing = check(jsonl(log), jsonl(ts_out), jsonl(gt_out), ts_err)
        else:
            problems, timing = (check or compare)(jsonl(log), jsonl(ts_out), jsonl(gt_out))
        # An engine started after attach is hooked from its fork or its mapping, never by
        # the once-a-second scan.
        late = [l for l in open(ts_err) if "hooked late" in l]
        if late:
            problems.append("hooked late: " + late[0].strip())
        if check is compare_all_steps:
            problems += held_problems(ts_err)
        return problems, timing
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL) if p is procs[0] else p.kill()
                except ProcessLookupError:
                    pass
                p.wait()


def compare_preemptions(truth, ts, client):
    """compare, and each request's preemptions and time out of the batch against the engine's
    log: a preemption that missed two or more decode steps is one (docs/gpu.md "Preemption"); one
    that missed fewer (the batch emptied) is not, and must not be reported."""
    problems, timing = compare(truth, ts, client)
    treqs = {(t["port"], t["seq"]): t for t in truth if "request" in t}
    want = {}
    for p in (t for t in truth if "preemption" in t):
        if p["missed"] >= 2:
            w = want.setdefault(p["preemption"], [0, 0, 0])
            w[0] += 1
            w[1] += p["to_ns"] - p["from_ns"]
            # logged after the recompute, whose own token after_tokens counts: the tokens
            # recomputed are those before it
            w[2] += p["after_tokens"] - 1
    by_port = requests_by_port(ts)
    seen = 0
    for c in client:
        lst = by_port.get(c["port"], [])
        tr = treqs.get((c["port"], c["seq"]))
        if c["seq"] >= len(lst) or not tr:
            continue
        t = lst[c["seq"]]
        n, ns, gen = want.get(tr["request"], [0, 0, 0])
        seen += n
        rec = t.get("recomputed") or {}
        if n and (rec.get("generated_tokens") != gen or
                  rec.get("prompt_tokens") != n * (t.get("prompt_tokens") or 0)):
            problems.append(f"request {c['id']}: recomputed {rec}, the engine's log: {n} "
                            f"times its prompt of {t.get('prompt_tokens')} and {gen} generated")
        elif not n and t.get("recomputed") is not None:
            problems.append(f"request {c['id']}: recomputed {rec} without a preemption")
        if t.get("preemptions") != n:
            problems.append(f"request {c['id']}: preemptions {t.get('preemptions')}, the "
                            f"engine's log {n}")
        elif abs((t.get("preempted_ms") or 0) - ns / 1e6) > 2 * TOL_NS / 1e6 * max(n, 1):
            timing.append(f"request {c['id']}: preempted_ms {t.get('preempted_ms')} vs the "
                          f"engine's {ns / 1e6:.3f}")
    if not seen:
        problems.append("the engine preempted no request for two or more steps: nothing "
                        "was tested")
    INFO["preempt"] = (f"{seen} preemptions, each request's count, time out and recomputed "
                       "tokens exact")
    return problems, timing


def compare_none_preempted(truth, ts, client):
    """An engine that never preempts, with chunked prefill (prefill steps with no token) and
    tokens held back over several steps (late writes): every request reported with the
    client's tokens and its steps known, and not one preemption."""
    problems = []
    treq_ts = [t for t in ts if "conn" in t]
    tsteps = [t["gpu_step"] for t in ts if "gpu_step" in t]
    steps = [t for t in truth if "step" in t]
    if len(treq_ts) != len(client):
        problems.append(f"{len(treq_ts)} requests from tokenscope, {len(client)} from the client")
    if not tsteps or len(tsteps) < len(steps) // 2:
        problems.append(f"{len(tsteps)} tokenscope steps for {len(steps)} of the engine's")
    by_port = requests_by_port(ts)
    for c in client:
        lst = by_port.get(c["port"], [])
        if c["seq"] >= len(lst):
            problems.append(f"client request {c['id']} not reported")
            continue
        t = lst[c["seq"]]
        if t["tokens"] != c["tokens"]:
            problems.append(f"request {c['id']}: {t['tokens']} tokens, client {c['tokens']}")
        if t.get("preemptions") != 0:
            problems.append(f"request {c['id']}: preemptions {t.get('preemptions')} "
                            f"({t.get('preempted_ms')} ms) from an engine that preempts none")
    chunks = sum(1 for i in range(1, len(steps)) if steps[i]["kind"] == "prefill" ==
                 steps[i - 1]["kind"])
    INFO["none"] = f"{len(client)} requests, 0 preemptions; {chunks} prefill steps after " \
                   f"another, tokens of 2 steps written together"
    return problems, []


def compare_all_steps(truth, ts, client):
    """compare, and not a step of the server's missed: its first step is tokenscope's first."""
    problems, timing = compare(truth, ts, client)
    steps = [t for t in truth if "step" in t]
    tsteps = [t["gpu_step"] for t in ts if "gpu_step" in t]
    if steps and tsteps and abs(tsteps[0]["start_ns"] - steps[0]["start_ns"]) > TOL_NS:
        problems.append(f"the server's first step ({steps[0]['kind']}) was not seen: "
                        f"tokenscope's first starts "
                        f"{(tsteps[0]['start_ns'] - steps[0]['start_ns']) / 1e6:.3f} ms later")
    if len(tsteps) != len(steps):
        problems.append(f"{len(tsteps)} tokenscope steps, {len(steps)} server steps in all")
    return problems, timing


def compare(truth, ts, client):
    problems, timing = [], []
    steps = [t for t in truth if "step" in t]
    treqs = {(t["port"], t["seq"]): t for t in truth if "request" in t}
    tsteps = [t["gpu_step"] for t in ts if "gpu_step" in t]
    treq_ts = [t for t in ts if "conn" in t]
    if len(treq_ts) != len(client):
        problems.append(f"{len(treq_ts)} requests from tokenscope, {len(client)} from the client")
    if not tsteps:
        return [f"no GPU steps from tokenscope"], []

    # Steps: every server step inside the traced window has a tokenscope step of the same kind
    # within 2 ms at both ends; and no extra ones.
    lo, hi = tsteps[0]["start_ns"] - TOL_NS, tsteps[-1]["end_ns"] + TOL_NS
    window = [s for s in steps if s["start_ns"] >= lo and s["end_ns"] <= hi]
    unmatched = 0
    for s in window:
        m = [t for t in tsteps if abs(t["start_ns"] - s["start_ns"]) <= TOL_NS
             and abs(t["end_ns"] - s["end_ns"]) <= TOL_NS]
        if not m:
            unmatched += 1
            if unmatched <= 3:
                timing.append(f"server step {s['step']} ({s['kind']}, "
                              f"{(s['end_ns'] - s['start_ns']) / 1e6:.3f} ms) has no tokenscope "
                              f"step within 2 ms")
        elif m[0]["kind"] != s["kind"]:
            problems.append(f"server step {s['step']} is {s['kind']}, tokenscope says "
                            f"{m[0]['kind']}")
        elif m[0]["mode"] != s["mode"]:
            problems.append(f"server step {s['step']} ran {s['mode']}, tokenscope says "
                            f"{m[0]['mode']}")
        elif m[0]["kind_by"] != ("tokens" if s["requests"] else "launches"):
            problems.append(f"server step {s['step']} ({len(s['requests'])} requests): kind "
                            f"by {m[0]['kind_by']}")
        elif m[0]["launches"] != s["launches"] or m[0]["graph_launches"] != s["graph_launches"]:
            problems.append(f"server step {s['step']}: launches {s['launches']}/"
                            f"{s['graph_launches']}, tokenscope {m[0]['launches']}/"
                            f"{m[0]['graph_launches']}")
    if len(tsteps) != len(window):
        problems.append(f"{len(tsteps)} tokenscope steps, {len(window)} server steps in the "
                        f"traced window")

    # Requests: match by client port and order on the connection.
    by_port = requests_by_port(ts)
    step_by_id = {s["step"]: s for s in steps}
    for c in client:
        lst = by_port.get(c["port"], [])
        if c["seq"] >= len(lst):
            problems.append(f"client request {c['id']} (port {c['port']}) not reported")
            continue
        t = lst[c["seq"]]
        tr = treqs.get((c["port"], c["seq"]))
        if not tr:
            problems.append(f"server logged no request for port {c['port']} seq {c['seq']}")
            continue
        # An engine that never preempts: none reported (late writes, batches that change).
        if not any("preemption" in x for x in truth) and t.get("preemptions") != 0:
            problems.append(f"request {c['id']}: preemptions {t.get('preemptions')} from an "
                            f"engine that preempts none")
        ps = step_by_id.get(tr["prefill_step"])
        if not t["attribution_how"].startswith("by time") or t["attribution"] != "host-calls":
            problems.append(f"request {c['id']}: not attributed: {t['attribution']}, "
                            f"{t['attribution_how']}")
            continue
        want = {
            "queue_ms": (ps["start_ns"] - tr["arrival_ns"]) / 1e6,
            "prefill_ms": (ps["end_ns"] - ps["start_ns"]) / 1e6,
            "decode_ms": (tr["end_ns"] - tr["first_token_ns"]) / 1e6,
        }
        for k, v in want.items():
            if t[k] is None or abs(t[k] - v) > TOL_NS / 1e6:
                timing.append(f"request {c['id']}: {k} {t[k]} vs server {v:.3f}")
        if t["gpu_ms"] is None or t["host_ms"] is None or t["gpu_ms"] <= 0:
            problems.append(f"request {c['id']}: no GPU/host split ({t['gpu_ms']}, "
                            f"{t['host_ms']})")
    return problems, timing


API_DELAY_MS = 3


def compare_e2s(truth, ts, client):
    """compare's checks, then e2s_problems'."""
    problems, timing = compare(truth, ts, client)
    more, tm = e2s_problems(truth, ts, client)
    return problems + more, timing + tm


def e2s_problems(truth, ts, client):
    """Engine to socket per request: the k-th token came from the k-th step the engine's log
    lists the request in; its time from that step's end to the write the server logged, p50,
    p99 and max, against tokenscope's engine_to_socket_ms (within 2 ms: the host sees a step
    end when its wait returns). The API process spends API_DELAY_MS before each write, so every
    figure is at least that."""
    problems, timing = [], []
    steps = [t for t in truth if "step" in t]
    treqs = {(t["port"], t["seq"]): t for t in truth if "request" in t}
    by_port = requests_by_port(ts)
    checked = 0
    for c in client:
        tr = treqs.get((c["port"], c["seq"]))
        lst = by_port.get(c["port"], [])
        if not tr or c["seq"] >= len(lst):
            continue
        t = lst[c["seq"]]
        mine = [s for s in steps if tr["request"] in s["requests"]]
        delays = sorted(w - s["end_ns"] for w, s in zip(tr["token_ns"], mine))
        got = t.get("engine_to_socket_ms")
        if not delays or not got:
            problems.append(f"request {c['id']}: engine_to_socket_ms {got}, "
                            f"{len(delays)} tokens in the log")
            continue
        for key, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
            want = delays[max(1, math.ceil(q * len(delays))) - 1] / 1e6
            if abs(got[key] - want) > TOL_NS / 1e6:
                timing.append(f"request {c['id']}: engine_to_socket {key} {got[key]} ms, the "
                              f"server's log {want:.3f} ms")
        if got["p50"] < API_DELAY_MS * 0.9:
            problems.append(f"request {c['id']}: engine_to_socket p50 {got['p50']} ms under the "
                            f"API process's own {API_DELAY_MS} ms")
        checked += 1
    if not checked:
        problems.append("no request's engine to socket time checked")
    return problems, timing


def compare_batches(truth, ts, client):
    """The steps' batches and the requests' steps and mean batch against the server's log,
    exactly; then the timing checks of compare(). A step's batch, and a request's figures, are
    wrong when the API process wrote a token after the next step had ended (docs/gpu.md "Batches"):
    on a loaded machine that is retried, as timing is."""
    problems, timing = compare(truth, ts, client)
    steps = [t for t in truth if "step" in t]
    tsteps = [t["gpu_step"] for t in ts if "gpu_step" in t]
    sizes, matched, work = {}, 0, 0
    for t in tsteps:
        m = [s for s in steps if abs(t["start_ns"] - s["start_ns"]) <= TOL_NS
             and abs(t["end_ns"] - s["end_ns"]) <= TOL_NS]
        if not m:
            continue  # compare() said so
        work += 1
        want = len(m[0]["requests"])
        if t["batch"] == want:
            matched += 1
            if t["kind"] == "decode":
                sizes[want] = sizes.get(want, 0) + 1
        elif len(timing) < 8:
            timing.append(f"server step {m[0]['step']} ({m[0]['kind']}) carried {want} "
                          f"requests, tokenscope says batch {t['batch']}")
    # The server's decode steps of each request (by its id), in the traced window.
    lo = tsteps[0]["start_ns"] - TOL_NS if tsteps else 0
    rode = {}
    for s in steps:
        if s["kind"] == "decode" and s["start_ns"] >= lo:
            for rid in s["requests"]:
                rode.setdefault(rid, []).append(len(s["requests"]))
    treqs = {(t["port"], t["seq"]): t for t in truth if "request" in t}
    by_port = requests_by_port(ts)
    rmatched = 0
    for c in client:
        lst, tr = by_port.get(c["port"], []), treqs.get((c["port"], c["seq"]))
        if c["seq"] >= len(lst) or not tr:
            continue  # compare() said so
        t, b = lst[c["seq"]], rode.get(tr["request"], [])
        want_mean = round(sum(b) / len(b), 2) if b else None
        if t["steps"] == len(b) and t["batch_mean"] == want_mean:
            rmatched += 1
        elif len(timing) < 8:
            timing.append(f"request {c['id']}: steps {t['steps']} batch_mean {t['batch_mean']}, "
                          f"the server's log {len(b)} and {want_mean}")
    if not sizes:
        problems.append("no decode step matched")
    INFO["batch"] = (f"{matched} of {work} steps' batches matched the log (decode steps "
                           f"by batch: {', '.join(f'{k}: {v}' for k, v in sorted(sizes.items()))}); "
                           f"{rmatched} of {len(client)} requests' steps and batch_mean matched")
    return problems, timing


def compare_stalls(truth, ts, client):
    """compare's checks, then stall_problems'."""
    problems, timing = compare(truth, ts, client)
    more, tm = stall_problems(truth, ts, client)
    return problems + more, timing + tm


def stall_problems(truth, ts, client):
    """Who stalled whom: every gap between two of a request's token writes (the server's log) at
    or over its threshold (3 times its median gap, at least 50 ms) must be in tokenscope's
    stalls, at the same token, with the cause `prefill` and the requests named exactly those
    whose first token came from a prefill step that ended inside the gap (the engine's log);
    and no other gap may be."""
    problems, timing = [], []
    steps = [t for t in truth if "step" in t]
    treqs = {(t["port"], t["seq"]): t for t in truth if "request" in t}
    who = {t["request"]: (t["port"], t["seq"]) for t in truth if "request" in t}
    by_port = requests_by_port(ts)
    stalled = named = 0
    for c in client:
        tr = treqs.get((c["port"], c["seq"]))
        lst = by_port.get(c["port"], [])
        if not tr or c["seq"] >= len(lst):
            continue
        t = lst[c["seq"]]
        tok = tr["token_ns"]
        gaps = [b - a for a, b in zip(tok, tok[1:])]
        if not gaps:
            continue
        thr = max(3 * sorted(gaps)[(len(gaps) - 1) // 2], 50_000_000)
        want = []
        for i, gap in enumerate(gaps, 1):
            if gap < thr:
                continue
            a, b = tok[i - 1], tok[i]
            by = sorted(who[rid] for s in steps if s["kind"] in ("prefill", "mixed")
                        and a < s["end_ns"] <= b
                        for rid in s["requests"] if rid in who and rid != tr["request"])
            want.append((i, "prefill", by))
        st = t.get("stalls") or {}
        # The requests named: all of them up to STALL_BY, then counted (by_more).
        got = [(v["token"], v["cause"],
                sorted((peer_port(x["conn"]), x["seq"]) for x in v.get("by", [])))
               for v in st.get("list", [])]
        more = [v.get("by_more", 0) for v in st.get("list", [])]
        if len(got) == len(want):
            got = [(g[0], g[1], w[2] if set(g[2]) <= set(w[2]) and len(g[2]) + m == len(w[2])
                    else g[2]) for g, w, m in zip(got, want, more)]
        if got != want or st.get("count") != len(want):
            problems.append(f"request {c['id']}: stalls {got} (count {st.get('count')}), the "
                            f"logs say {want}")
        stalled += bool(want)
        named += sum(len(w[2]) for w in want)
    if not stalled:
        problems.append("no request was stalled: nothing was tested")
    INFO["stall"] = f"{stalled} requests stalled, {named} stalling requests named exactly"
    return problems, timing


def compare_coverage(truth, ts, client, ts_err):
    """compare_batches, then graph coverage: the summary's decode steps by mode, each mode's
    share and batch range, against the engine's log (its decode steps in the traced window)."""
    problems, timing = compare_batches(truth, ts, client)
    tsteps = [t["gpu_step"] for t in ts if "gpu_step" in t]
    lo = tsteps[0]["start_ns"] - TOL_NS if tsteps else 0
    modes = {}
    for st in (t for t in truth if "step" in t and t["kind"] == "decode" and
               t["start_ns"] >= lo):
        m = modes.setdefault(st["mode"], [0, 1 << 30, 0])
        m[0] += 1
        m[1] = min(m[1], len(st["requests"]))
        m[2] = max(m[2], len(st["requests"]))
    total = sum(m[0] for m in modes.values())
    want = ", ".join(f"{k} {100.0 * v[0] / total:.1f}% (batch {v[1]}-{v[2]})"
                     for k, v in sorted(modes.items(), key=lambda kv: MODES.index(kv[0])))
    line = [l.strip() for l in open(ts_err) if "decode steps by mode:" in l]
    got = line[-1].split(":", 1)[1].strip() if line else None
    if got != want:
        # A batch shown early or a token written late moves a step between batch sizes:
        # retried, as timing is.
        timing.append(f"coverage: tokenscope '{got}', the engine's log '{want}'")
    INFO["coverage"] = f"decode steps by mode: {want}"
    return problems, timing


def compare_shape(truth, ts, client, ts_err):
    """An engine of one launch shape: compare_coverage's checks (kinds, modes, batches, queue,
    prefill, decode, no preemption, coverage), the stalls of a long prefill among decodes
    (stall_problems) and engine to socket behind a slow API process (e2s_problems)."""
    problems, timing = compare_coverage(truth, ts, client, ts_err)
    for part in (stall_problems, e2s_problems):
        more, tm = part(truth, ts, client)
        problems += more
        timing += tm
    return problems, timing


MODES = ["none", "graph", "piecewise", "eager"]
INFO = {}


def static_case(tmp, steps=50):
    """A process with the CUDA runtime linked into its executable: found there and hooked."""
    exe = os.path.join(OUT, "cudaloop-static")
    if not os.path.exists(exe):
        return None
    procs = []
    try:
        cl = subprocess.Popen([exe, "-n", str(steps)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
        procs.append(cl)
        pid = int(cl.stdout.readline().split()[1])
        ts_out, ts_err = os.path.join(tmp, "static.ts.out"), os.path.join(tmp, "static.ts.err")
        ts = subprocess.Popen([TS, "trace", "-p", str(pid), "--json", "--gpu-steps"],
                              stdout=open(ts_out, "w"), stderr=open(ts_err, "w"))
        procs.append(ts)
        err = wait_for(ts_err, "tracing CUDA calls", 20)
        if "cudaloop-static" not in err:
            return [f"hooked something else: {err[-300:]}"]
        cl.stdin.write("go\n")
        cl.stdin.flush()
        cl.stdout.readline()
        time.sleep(0.3)
        ts.send_signal(signal.SIGINT)
        ts.wait(20)
        cl.communicate("exit\n", timeout=20)
        got = [t["gpu_step"] for t in jsonl(ts_out) if "gpu_step" in t]
        pre = [g for g in got if g["kind"] == "prefill" and g["launches"] == 40]
        dec = [g for g in got if g["kind"] == "decode" and g["graph_launches"] == 1
               and g["memcpys_dtoh"] == 1]
        if len(got) != 2 * steps or len(pre) != steps or len(dec) != steps:
            return [f"{len(got)} steps ({len(pre)} prefill, {len(dec)} decode), want "
                    f"{steps} of each"]
        return []
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", help="run this case only (gpu-batched, gpu-late-engine, "
                    "gpu-engine-on-request, gpu-engine-on-request-run, gpu-preempt, "
                    "gpu-chunked-late-writes, "
                    "gpu-known-batch, gpu-known-batch-staggered, gpu-slow-api, "
                    "gpu-piecewise-32, gpu-piecewise-80, gpu-eager, gpu-eager-above-batch, "
                    "gpu-piecewise-preempt, gpu-stall, gpu-static-runtime)")
    ap.add_argument("--attempts", type=int, default=ATTEMPTS)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP gpu: needs root")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    cudart = CUDART_REAL if os.path.exists(CUDART_REAL) else CUDART_STANDIN
    print(f"CUDA runtime: {cudart}")
    cases = [
        ("gpu-batched", ["--token-ms", "10", "--prefill-ms", "30", "--max-batch", "4"],
         ["-n", "12", "-c", "4", "--max-tokens", "8", "--usage", "--stagger-ms", "3"], False,
         None),
        ("gpu-late-engine", ["--token-ms", "10", "--prefill-ms", "20", "--engine-delay-ms",
                             "1500"],
         ["-n", "4", "-c", "2", "--max-tokens", "6", "--usage"], True, None),
        # Six streams of 12 tokens at once on an engine of 4 slots: decode steps of 4, then of
        # the other 2 once the first 4 finished.
        ("gpu-known-batch", ["--token-ms", "15", "--prefill-ms", "20", "--max-batch", "4"],
         ["-n", "6", "-c", "6", "--max-tokens", "12", "--usage"], False, compare_batches),
        # The same streams starting 25 ms apart: batches grow and shrink as they come and go.
        ("gpu-known-batch-staggered",
         ["--token-ms", "15", "--prefill-ms", "20", "--max-batch", "4"],
         ["-n", "6", "-c", "6", "--max-tokens", "12", "--usage", "--stagger-ms", "25"], False,
         compare_batches),
    ]
    # The engine forked and exec'd by the first request, which loads the runtime with dlopen
    # from a copy of its own (a file no ld.so cache lists and no traced process mapped before,
    # as a wheel's): held at the mapping until hooked, so its first call is seen, under trace
    # -p and under run.
    private_dir = tempfile.mkdtemp(prefix="ts-cudart-")
    atexit.register(shutil.rmtree, private_dir, True)
    private = os.path.join(private_dir, os.path.basename(cudart))
    shutil.copyfile(cudart, private)
    on_request = ["--token-ms", "10", "--prefill-ms", "20", "--engine-on-request",
                  "--cudart", private]
    on_request_client = ["-n", "4", "-c", "2", "--max-tokens", "6", "--usage"]
    cases += [
        ("gpu-engine-on-request", on_request, on_request_client, True, compare_all_steps),
        ("gpu-engine-on-request-run", on_request, on_request_client, "run", compare_all_steps),
    ]
    # An engine that preempts: before every 5th decode step its newest running request leaves
    # the batch for 3 steps and is recomputed (refserver --preempt-every).
    cases += [
        ("gpu-preempt", ["--token-ms", "8", "--prefill-ms", "15", "--max-batch", "4",
                         "--preempt-every", "5", "--preempt-steps", "3"],
         ["-n", "8", "-c", "4", "--max-tokens", "24", "--usage"], False, compare_preemptions),
    ]
    # Chunked prefill (3 steps per prefill, the token after the last) and a host that sends
    # the tokens of two steps together: no preemption may be reported.
    cases += [
        ("gpu-chunked-late-writes", ["--token-ms", "8", "--prefill-ms", "24", "--max-batch",
                                     "4", "--prefill-chunks", "3", "--hold-steps", "2"],
         ["-n", "16", "-c", "4", "--max-tokens", "16", "--usage", "--stagger-ms", "13"],
         False, compare_none_preempted),
    ]
    # A slow API process: 3 ms of its own before every token's write (refserver
    # --api-delay-ms): engine to socket per request against the engine's and server's log.
    cases += [
        ("gpu-slow-api", ["--token-ms", "12", "--prefill-ms", "20", "--max-batch", "2",
                          "--api-delay-ms", str(API_DELAY_MS)],
         ["-n", "4", "-c", "2", "--max-tokens", "8", "--usage"], False, compare_e2s),
    ]
    # The launch shapes of real engines (docs/gpu.md "Step kinds"): vLLM-style piecewise
    # graphs for a 32- and an 80-layer model, an eager engine, and one that runs decode steps
    # eagerly above a batch size (no graph captured for it). Kinds come from the tokens, modes
    # from the launches; batches, queue, prefill and decode exact; no preemption; coverage as
    # the log has it. A piecewise engine that preempts: each preemption exact.
    # Each with a long prefill among the decodes (every 4th request's prompt takes 200 ms) and a
    # slow API process (API_DELAY_MS before each write).
    # The API process writes a step's tokens one after another, API_DELAY_MS each: a step
    # lasts longer than all of them, or its last tokens would be late writes.
    shape = ["--token-ms", "16", "--prefill-ms", "20", "--max-batch", "4", "--api-delay-ms",
             str(API_DELAY_MS)]
    slow = ["--slow-every", "4", "--slow-prefill-ms", "200"]
    shape_client = ["-n", "8", "-c", "4", "--max-tokens", "16", "--usage", "--stagger-ms",
                    "30"] + slow
    cases += [
        ("gpu-piecewise-32", shape + ["--engine-shape", "piecewise", "--layers", "32"],
         shape_client, False, compare_shape),
        ("gpu-piecewise-80", shape + ["--engine-shape", "piecewise", "--layers", "80"],
         shape_client, False, compare_shape),
        ("gpu-eager", shape + ["--engine-shape", "eager", "--layers", "32"], shape_client, False,
         compare_shape),
        ("gpu-eager-above-batch", ["--token-ms", "25", "--prefill-ms", "20", "--max-batch", "6",
                                   "--graph-max-batch", "3", "--api-delay-ms",
                                   str(API_DELAY_MS)],
         ["-n", "12", "-c", "6", "--max-tokens", "16", "--usage", "--stagger-ms", "30"] + slow,
         False, compare_shape),
        ("gpu-piecewise-preempt", ["--token-ms", "8", "--prefill-ms", "15", "--max-batch", "4",
                                   "--engine-shape", "piecewise", "--preempt-every", "5",
                                   "--preempt-steps", "3"],
         ["-n", "8", "-c", "4", "--max-tokens", "24", "--usage"], False, compare_preemptions),
    ]
    # A long prefill among decodes (every 4th request's prompt takes 300 ms, x_prefill_ms):
    # the decoding requests' gaps over it are stalls, blamed on it by name.
    cases += [
        ("gpu-stall", ["--token-ms", "10", "--prefill-ms", "15", "--max-batch", "4"],
         ["-n", "8", "-c", "3", "--max-tokens", "30", "--usage", "--stagger-ms", "40",
          "--slow-every", "4", "--slow-prefill-ms", "300"], False, compare_stalls),
    ]
    passed = failed = skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, sargs, cargs, late, check in cases:
            if args.case and args.case != name:
                continue
            notes = []
            for attempt in range(1, args.attempts + 1):
                try:
                    if late == "run":
                        problems, timing = run_under_run(name, tmp, cudart, sargs, cargs,
                                                         check)
                    else:
                        problems, timing = run_case(name, tmp, cudart, sargs, cargs, late,
                                                    check, wait_cuda=check is not
                                                    compare_all_steps)
                except (Fail, subprocess.SubprocessError, OSError, ValueError, KeyError) as e:
                    problems, timing = [f"{type(e).__name__}: {e}"], []
                if not problems and not timing:
                    extra = [f"attempt {attempt}; {'; '.join(notes)}"] if notes else []
                    if check in (compare_batches, compare_coverage, compare_shape):
                        extra.append(INFO["batch"])
                    if check in (compare_coverage, compare_shape):
                        extra.append(INFO["coverage"])
                    if check in (compare_stalls, compare_shape):
                        extra.append(INFO["stall"])
                    if check is compare_preemptions:
                        extra.append(INFO["preempt"])
                    if check is compare_none_preempted:
                        extra.append(INFO["none"])
                    print(f"PASS {name}" + (f" ({'; '.join(extra)})" if extra else ""))
                    passed += 1
                    break
                if problems or attempt == args.attempts:
                    print(f"FAIL {name} (attempt {attempt}): " + "; ".join((problems + timing)[:6]))
                    failed += 1
                    break
                notes.append(f"attempt {attempt}: {timing[0]}")
        if args.case and args.case != "gpu-static-runtime":
            print(f"{passed} passed, {failed} failed, {skipped} skipped")
            return 1 if failed else 0
        try:
            res = static_case(tmp)
        except (Fail, subprocess.SubprocessError, OSError, ValueError, KeyError) as e:
            res = [f"{type(e).__name__}: {e}"]
        if res is None:
            print("SKIP gpu-static-runtime: .output/cudaloop-static not built (the toolkit has "
                  "no libcudart_static.a)")
            skipped = 1
        elif res:
            print("FAIL gpu-static-runtime: " + "; ".join(res))
            failed += 1
        else:
            print("PASS gpu-static-runtime")
            passed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
