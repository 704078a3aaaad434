#!/usr/bin/env python3
"""The GPU check's continuous-batching comparisons (scripts/gpu-check.sh), for a person to read.

    gpu_check_cb.py check OUT ENGINE_LOG LABEL...
        For each LABEL (a load level): OUT/LABEL.client.jsonl (gtclient), OUT/LABEL.tokenscope
        .jsonl (tokenscope --json --tokens --gpu-steps) against ENGINE_LOG (cb_server.py --log):
        requests and tokens against the client; TTFT and token times; the engine's steps matched
        to tokenscope's GPU steps (start and end within 2 ms) and their batches; each request's
        steps, batch_mean, queue/prefill/decode and preemptions against the engine's. Client,
        tokenscope and engine are joined by the client's TCP port (the engine's arrival event
        carries it). Writes OUT/LABEL.check.json with the counts, for tests.
    gpu_check_cb.py cost OUT
        The interleaved cost rounds OUT/cost.R.MODE.client.jsonl: output tokens/s from the
        client per round, and each traced mode's ratio to the untraced rounds (median, min).

Prints; passes or fails nothing, except a missing or unreadable file (exit status 1).
"""
import bisect
import collections
import json
import os
import statistics
import sys

MATCH_NS = 2_000_000  # a tokenscope step matches an engine step within 2 ms at both ends
TIME_TOL_MS = 2.0  # a queue/prefill/decode within this of the engine's counts as agreeing


def jsonl(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def peer_port(conn):
    try:
        return int(conn.split("<-")[1].split("#")[0].rsplit(":", 1)[1])
    except (AttributeError, IndexError, ValueError):
        return -1


def fmt(x, digits=3):
    return "n/a" if x is None else f"{x:.{digits}f}"


def spread(xs):
    """median and max |x| of a list, as text."""
    if not xs:
        return "n/a"
    return f"median {statistics.median(xs):+.3f}, max |diff| {max(abs(x) for x in xs):.3f}"


class Engine:
    """The engine log: meta, steps, and per request its events."""

    def __init__(self, path):
        lines = jsonl(path)
        self.meta = next((x["meta"] for x in lines if "meta" in x), {})
        self.steps = [x for x in lines if "step" in x]
        self.ev = collections.defaultdict(lambda: collections.defaultdict(list))
        for x in lines:
            if "event" in x:
                self.ev[x["req"]][x["event"]].append(x)
        # A port is used again by later connections (load levels and cost rounds share one
        # server): a request is the one that arrived on the client's port while the client
        # sent and read it.
        self.by_port = collections.defaultdict(list)
        for r, e in self.ev.items():
            if e.get("arrival"):
                self.by_port[e["arrival"][0].get("port")].append((e["arrival"][0]["t_ns"], r))

    def req_for(self, c):
        """The engine's request of client record c, or None."""
        a, b = c.get("send_start_ns") or 0, c.get("end_ns") or 0
        return next((r for t, r in self.by_port.get(c.get("port"), ()) if a <= t <= b), None)

    def t(self, req, event):
        e = self.ev[req].get(event)
        return e[0]["t_ns"] if e else None

    def tokens(self, req):
        e = self.ev[req].get("finished")
        if e and "tokens" in e[0]:
            return e[0]["tokens"]
        return sum(b.get("out") or 0 for s in self.steps for b in s["batch"] if b["req"] == req)

    def truth(self, req):
        """What tokenscope should say of req: steps after its first token that produced one of
        its tokens and their mean batch (requests given a token), and its preemptions after its
        first token with the time out of the batch (eviction to the end of the step that gave
        it its next token)."""
        first = self.t(req, "first_token")
        mine = [s for s in self.steps if any(b["req"] == req and b.get("out") for b in s["batch"])]
        after = [s for s in mine if first is not None and s["end_ns"] > first]
        sizes = [sum(1 for b in s["batch"] if b.get("out")) for s in after]
        pre = [e["t_ns"] for e in self.ev[req].get("preempted", [])
               if first is not None and e["t_ns"] > first]
        out_ms = 0.0
        for t in pre:
            back = next((s["end_ns"] for s in mine if s["start_ns"] >= t), None)
            out_ms += (back - t) / 1e6 if back else 0.0
        return {"steps": len(after), "batch_mean": sum(sizes) / len(sizes) if sizes else None,
                "preemptions": len(pre), "preempted_ms": out_ms,
                "preemptions_all": len(self.ev[req].get("preempted", []))}


def check_level(out, eng, label):
    gt = jsonl(os.path.join(out, f"{label}.client.jsonl"))
    ts_lines = jsonl(os.path.join(out, f"{label}.tokenscope.jsonl"))
    ts_reqs = {peer_port(r.get("conn")): r for r in ts_lines if "conn" in r}
    ts_steps = [r["gpu_step"] for r in ts_lines if "gpu_step" in r]
    res = {"label": label, "requests": len(gt),
           "client_ok": sum(1 for c in gt if c.get("outcome") == "ok")}
    print(f"\n== {label}: {len(gt)} client requests, {res['client_ok']} ok")

    # ---- the engine against the client -------------------------------------------------
    joined = [(c, eng.req_for(c)) for c in gt]
    res["engine_found"] = sum(1 for _, r in joined if r is not None)
    res["engine_tokens_exact"] = sum(1 for c, r in joined
                                     if r is not None and eng.tokens(r) == c.get("tokens"))
    reqs = {r for _, r in joined if r is not None}
    print(f"engine: {res['engine_found']}/{len(gt)} requests in its log (by client port), "
          f"tokens equal the client's for {res['engine_tokens_exact']}/{len(gt)}")

    # ---- tokenscope against the client -------------------------------------------------
    found = [(c, ts_reqs.get(c.get("port")), r) for c, r in joined]
    seen = [(c, t, r) for c, t, r in found if t is not None]
    res["ts_found"] = len(seen)
    res["ts_tokens_exact"] = sum(1 for c, t, _ in seen if t.get("tokens") == c.get("tokens"))
    dttft = [t["ttft_ms"] - c["ttft_ms"] for c, t, _ in seen
             if t.get("ttft_ms") is not None and c.get("ttft_ms") is not None]
    dtok = [(a - b) / 1e6 for c, t, _ in seen
            for a, b in zip(c.get("token_ns") or [], t.get("token_ns") or [])]
    ntok = sum(1 for c, t, _ in seen if len(c.get("token_ns") or []) == len(t.get("token_ns") or []))
    print(f"tokenscope: {len(seen)}/{len(gt)} requests, tokens exact {res['ts_tokens_exact']}/"
          f"{len(seen)}, token times for {ntok}/{len(seen)} (same count)")
    print(f"  ttft tokenscope - client (ms): {spread(dttft)}")
    print(f"  token times client read - tokenscope write (ms): {spread(dtok)}")

    # ---- steps -------------------------------------------------------------------------
    esteps = [s for s in eng.steps if any(b["req"] in reqs for b in s["batch"])]
    epid = eng.meta.get("pid")
    mine = sorted((s for s in ts_steps if s.get("pid") == epid), key=lambda s: s["start_ns"])
    res["engine_steps"], res["gpu_steps"] = len(esteps), len(mine)
    matched = batch_ok = 0
    if not mine:
        why = "fake engine: no CUDA" if eng.meta.get("engine") == "fake" else "none seen"
        print(f"steps: no GPU steps ({why}); the engine ran {len(esteps)} steps for these "
              f"requests, max batch {max((len(s['batch']) for s in esteps), default=0)}")
    else:
        starts = [s["start_ns"] for s in mine]
        used, dstart, dend, bad = set(), [], [], []
        for s in esteps:
            lo = bisect.bisect_left(starts, s["start_ns"] - MATCH_NS)
            hi = bisect.bisect_right(starts, s["start_ns"] + MATCH_NS)
            best = None
            for j in range(lo, hi):
                t = mine[j]
                err = max(abs(t["start_ns"] - s["start_ns"]), abs(t["end_ns"] - s["end_ns"]))
                if j not in used and err <= MATCH_NS and (best is None or err < best[0]):
                    best = (err, j)
            if best is None:
                continue
            used.add(best[1])
            t = mine[best[1]]
            matched += 1
            dstart.append((t["start_ns"] - s["start_ns"]) / 1e6)
            dend.append((t["end_ns"] - s["end_ns"]) / 1e6)
            want = sum(1 for b in s["batch"] if b.get("out") and b["req"] in reqs)
            if t.get("batch") == want:
                batch_ok += 1
            elif len(bad) < 5:
                bad.append(f"engine step {s['step']}: batch {want}, tokenscope {t.get('batch')}")
        print(f"steps: {matched}/{len(esteps)} engine steps matched by a tokenscope step of pid "
              f"{epid} (start and end within 2 ms; {len(mine)} tokenscope steps), batch equal "
              f"for {batch_ok}/{matched}")
        print(f"  start tokenscope - engine (ms): {spread(dstart)}; end: {spread(dend)}")
        for b in bad:
            print("  " + b)
    res["steps_matched"], res["batches_equal"] = matched, batch_ok

    # ---- step kinds from the tokens, modes and graph coverage (docs/gpu.md) -------------
    if mine:
        res.update(check_kinds(eng, esteps, mine, reqs))
    res.update(check_stalls(eng, seen))

    # ---- per request: steps, batch_mean, queue/prefill/decode, preemptions --------------
    agree = collections.Counter()
    known = collections.Counter()
    diffs = collections.defaultdict(list)
    pre_engine = pre_engine_all = 0
    for c, t, r in seen:
        if r is None:
            continue
        tr = eng.truth(r)
        pre_engine += tr["preemptions"]
        pre_engine_all += tr["preemptions_all"]
        arr, sch = eng.t(r, "arrival"), eng.t(r, "scheduled")
        first, fin = eng.t(r, "first_token"), eng.t(r, "finished")
        etimes = {"queue_ms": (sch - arr) / 1e6 if sch and arr else None,
                  "prefill_ms": (first - sch) / 1e6 if first and sch else None,
                  "decode_ms": (fin - first) / 1e6 if fin and first else None}
        for k, v in etimes.items():
            if t.get(k) is not None and v is not None:
                known[k] += 1
                diffs[k].append(t[k] - v)
                agree[k] += abs(t[k] - v) <= TIME_TOL_MS
        if t.get("steps") is not None:
            known["steps"] += 1
            agree["steps"] += t["steps"] == tr["steps"]
        if t.get("batch_mean") is not None and tr["batch_mean"] is not None:
            known["batch_mean"] += 1
            agree["batch_mean"] += abs(t["batch_mean"] - tr["batch_mean"]) < 0.01
        if t.get("preemptions") is not None:
            known["preemptions"] += 1
            agree["preemptions"] += t["preemptions"] == tr["preemptions"]
            if t["preemptions"] and tr["preemptions"]:
                diffs["preempted_ms"].append((t.get("preempted_ms") or 0) - tr["preempted_ms"])
    res["engine_preemptions"], res["engine_preemptions_all"] = pre_engine, pre_engine_all
    res["ts_preemptions_known"] = known["preemptions"]
    res["ts_preemptions_equal"] = agree["preemptions"]
    for k in ("steps", "batch_mean"):
        print(f"{k}: tokenscope's equals the engine's for {agree[k]}/{known[k]} requests"
              + ("" if known[k] else " (tokenscope gave none: no GPU steps)"))
    for k in ("queue_ms", "prefill_ms", "decode_ms"):
        print(f"{k}: within {TIME_TOL_MS} ms of the engine's for {agree[k]}/{known[k]} requests"
              + (f"; tokenscope - engine {spread(diffs[k])}" if diffs[k] else
                 " (tokenscope gave none: no GPU steps)"))
    print(f"preemptions: the engine evicted these requests {pre_engine_all} times, "
          f"{pre_engine} after their first token (what tokenscope counts); tokenscope's "
          f"preemptions equal the engine's for {agree['preemptions']}/{known['preemptions']} "
          "requests" + ("" if known["preemptions"] else
                        " (tokenscope gave none: its rule needs GPU steps)"))
    waits = [(eng.t(r, "scheduled") - eng.t(r, "arrival")) / 1e6 for r in reqs
             if eng.t(r, "scheduled") and eng.t(r, "arrival")]
    if waits:
        print(f"engine queue (arrival to first scheduled): median "
              f"{statistics.median(waits):.3f} ms, max {max(waits):.3f} ms"
              + ("; it evicted nothing: requests waited instead" if not pre_engine_all else ""))
    if diffs["preempted_ms"]:
        print(f"  preempted_ms tokenscope - engine: {spread(diffs['preempted_ms'])}")
    with open(os.path.join(out, f"{label}.check.json"), "w") as f:
        json.dump(res, f)
    steps_txt = (f"{matched}/{len(esteps)} steps matched, batches {batch_ok}/{matched}"
                 if mine else "no GPU steps")
    return (f"gpu-check cb {label}: {res['engine_found']}/{len(gt)} requests in the engine log, "
            f"{len(seen)}/{len(gt)} seen by tokenscope, tokens exact {res['ts_tokens_exact']}/"
            f"{len(seen)}, {steps_txt}, preemptions engine {pre_engine} (after first token), "
            f"tokenscope equal {agree['preemptions']}/{known['preemptions']}")


def engine_kind(eng, s, reqs, first_out):
    """The kind tokenscope's rule gives step s by the engine's log (its traced requests only):
    prefill when only first tokens came out of it, decode when only next ones, mixed when both;
    a step with prompt work and no token is prefill; None when it did nothing for them."""
    firsts = nexts = work = 0
    for b in s["batch"]:
        if b["req"] not in reqs:
            continue
        work += bool(b.get("prefill"))
        if b.get("out"):
            if first_out.get(b["req"]) == s["step"]:
                firsts += 1
            else:
                nexts += 1
    if firsts and nexts:
        return "mixed"
    if firsts:
        return "prefill"
    if nexts:
        return "decode"
    return "prefill" if work else None


def check_kinds(eng, esteps, mine, reqs):
    """Each engine step's kind by its tokens against the matched tokenscope step's, and
    tokenscope's modes and graph coverage of the decode steps (the engine logs no launch
    shape: printed for a person to read)."""
    first_out = {}
    for s in eng.steps:
        for b in s["batch"]:
            if b.get("out") and b["req"] not in first_out:
                first_out[b["req"]] = s["step"]
    starts = [t["start_ns"] for t in mine]
    agree = total = by_tokens = 0
    bad = []
    for s in esteps:
        want = engine_kind(eng, s, reqs, first_out)
        j = bisect.bisect_left(starts, s["start_ns"] - MATCH_NS)
        t = next((mine[k] for k in range(j, len(mine))
                  if abs(mine[k]["start_ns"] - s["start_ns"]) <= MATCH_NS
                  and abs(mine[k]["end_ns"] - s["end_ns"]) <= MATCH_NS), None)
        if want is None or t is None:
            continue
        total += 1
        by_tokens += t.get("kind_by") == "tokens"
        if t.get("kind") == want:
            agree += 1
        elif len(bad) < 5:
            bad.append(f"engine step {s['step']}: {want} by its tokens, tokenscope "
                       f"{t.get('kind')} by {t.get('kind_by')} ({t.get('mode')})")
    modes = collections.Counter((t.get("kind"), t.get("mode")) for t in mine)
    cov = collections.defaultdict(list)
    for t in mine:
        if t.get("kind") == "decode":
            cov[t.get("mode")].append(t.get("batch") or 0)
    ndec = sum(len(v) for v in cov.values())
    print(f"kinds: tokenscope's equals the engine's (by the tokens each step gave) for "
          f"{agree}/{total} matched steps; {by_tokens} of them classified by tokens")
    for b in bad:
        print("  " + b)
    print("  steps by kind and mode: " + ", ".join(f"{k}/{m} {n}" for (k, m), n in
                                                    sorted(modes.items(), key=str)))
    if ndec:
        print("  decode steps by mode: " + ", ".join(
            f"{m} {100.0 * len(v) / ndec:.1f}% (batch {min(v)}-{max(v)})"
            for m, v in sorted(cov.items(), key=str)))
    return {"kinds_checked": total, "kinds_equal": agree, "kinds_by_tokens": by_tokens,
            "decode_modes": {m: len(v) for m, v in cov.items()}}


def check_stalls(eng, seen):
    """Tokenscope's stalls against the engine's log: a stall blamed on a prefill must have
    an engine step that computed prompt tokens of another request end inside the gap; the
    requests it names must be among those."""
    n = confirmed = named = named_ok = 0
    causes = collections.Counter()
    port_of = {r: e["arrival"][0].get("port") for r, e in eng.ev.items() if e.get("arrival")}
    for c, t, r in seen:
        st = t.get("stalls") or {}
        toks = t.get("token_ns") or []
        for v in st.get("list", []):
            n += 1
            causes[v["cause"] + (" (likely)" if v.get("likely") else "")] += 1
            if v["cause"] != "prefill" or v["token"] >= len(toks) or r is None:
                continue
            a, b = toks[v["token"] - 1], toks[v["token"]]
            others = {x["req"] for s in eng.steps if a < s["end_ns"] <= b
                      for x in s["batch"] if x.get("prefill") and x["req"] != r}
            confirmed += bool(others)
            ports = {port_of.get(o) for o in others}
            for who in v.get("by", []):
                named += 1
                named_ok += peer_port(who.get("conn")) in ports
    print(f"stalls: {n} listed ({', '.join(f'{k} {v}' for k, v in sorted(causes.items())) or 'none'}); "
          f"of those blamed on a prefill, {confirmed} had another request's prompt computed in "
          f"the gap (the engine's log), and {named_ok}/{named} requests named were among them")
    return {"stalls": n, "stalls_prefill_confirmed": confirmed, "stalls_named": named,
            "stalls_named_ok": named_ok}


def throughput(path):
    gt = jsonl(path)
    if not gt:
        return None
    tokens = sum(c.get("tokens") or 0 for c in gt)
    span = max(c["end_ns"] for c in gt) - min(c["send_ns"] for c in gt)
    return tokens / (span / 1e9) if span > 0 else None


def cost(out):
    rounds = collections.defaultdict(dict)
    for name in sorted(os.listdir(out)):
        parts = name.split(".")
        if len(parts) == 5 and parts[0] == "cost" and name.endswith(".client.jsonl"):
            rounds[parts[1]][parts[2]] = throughput(os.path.join(out, name))
    if not rounds:
        print("cost: no rounds")
        return "gpu-check cost: no rounds"
    modes = []
    for r in sorted(rounds):
        print(f"  round {r}: " + ", ".join(f"{m} {fmt(v, 1)} tok/s" for m, v in
                                           sorted(rounds[r].items())))
        modes += [m for m in rounds[r] if m not in modes]
    verdict = []
    for m in modes:
        if m == "none":
            continue
        ratios = [rounds[r][m] / rounds[r]["none"] for r in rounds
                  if rounds[r].get(m) and rounds[r].get("none")]
        if ratios:
            print(f"  {m} / none: median {statistics.median(ratios):.3f}, min {min(ratios):.3f} "
                  f"over {len(ratios)} rounds")
            verdict.append(f"{m}/none median {statistics.median(ratios):.3f} min "
                           f"{min(ratios):.3f}")
    return "gpu-check cost: " + ("; ".join(verdict) or "no traced rounds")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "check":
        out, eng = sys.argv[2], Engine(sys.argv[3])
        m = eng.meta
        print(f"engine: {m.get('engine')} (pid {m.get('pid')}), KV {m.get('kv_blocks')} blocks "
              f"of {m.get('block_size')} tokens, {m.get('max_batch_tokens')} tokens per step"
              + (f", transformers {m['transformers']}, CUDA graphs {m.get('cuda_graph')}"
                 if "transformers" in m else ""))
        if m.get("missing"):
            print(f"hook points missing (not compared): {', '.join(m['missing'])}")
        verdicts = [check_level(out, eng, label) for label in sys.argv[4:]]
        print()
        for v in verdicts:
            print(v)
    elif len(sys.argv) == 3 and sys.argv[1] == "cost":
        print(cost(sys.argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
