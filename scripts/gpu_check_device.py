#!/usr/bin/env python3
"""The device-time part of the GPU check (scripts/gpu-check.sh): reads what its `tokenscope run`
phase left in OUT and prints, for a person to read:

  - GPU steps by kind with their device times (CUPTI): host duration, device busy time and its
    share of the step, launch-to-start delay, runs and operations per step, and what was lost;
  - each request's prefill and decode against the server's own step log: the host step
    tokenscope matched, the device time CUPTI gave, and the server's clock;
  - NVML through tokenscope's /metrics (one scrape during the load) against `nvidia-smi` read
    once at about the same time: utilisation, memory used and total, SM clock, power, and the
    memory of each process;
  - the overhead: the client's output tokens/s under `tokenscope run` over the same load on the
    same server run plainly.

    gpu_check_device.py OUT ENGINE_PID

Files (all in OUT, written by gpu-check.sh): run.jsonl (tokenscope's JSON lines, with the
server's own stdout lines among them), run.err, run.steps.jsonl (the server's step log),
run.client.jsonl and plain.client.jsonl (gtclient), run.metrics.txt, run.nvsmi.csv and
run.nvsmi-apps.csv. A missing file makes its part say so; nothing here passes or fails.
"""
import collections
import json
import math
import os
import re
import sys


def jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return rows


def text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def pct(v, q):
    """Nearest-rank percentile of a non-empty list."""
    v = sorted(v)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def fmt(x, digits=3):
    return "-" if x is None else f"{x:.{digits}f}"


def med(v):
    v = [x for x in v if x is not None]
    return pct(v, 0.5) if v else None


def section_steps(steps, err):
    print("== device times: GPU steps of the engine")
    dev = [s for s in steps if s.get("times") == "cupti"]
    print(f"steps: {len(steps)}, with device times (CUPTI) {len(dev)}, host calls only "
          f"{len(steps) - len(dev)}")
    for line in err.splitlines():
        if "device times of pid" in line or "device (CUPTI)" in line or \
                "lost (device times)" in line or "tokenscope-cupti" in line:
            print("  " + line.strip())
    if not dev:
        print("  (no step has device times: is the CUPTI library loaded? see run.err)")
        return
    print(f"  {'kind':<8} {'n':>5} {'host ms':>8} {'busy ms':>8} {'busy %':>7} "
          f"{'delay us':>9} {'mean delay us':>13} {'runs':>5} {'kernels':>8} {'graphs':>6} "
          f"{'approx':>6}   (medians per step)")
    by_kind = collections.defaultdict(list)
    for s in dev:
        by_kind[s.get("kind", "?")].append(s)
    for kind in sorted(by_kind):
        ss = by_kind[kind]
        host = [(s["end_ns"] - s["start_ns"]) / 1e6 for s in ss]
        busy = [s["gpu_busy_ns"] / 1e6 for s in ss]
        share = [100 * b / h for b, h in zip(busy, host) if h > 0]
        delay = [s["launch_delay_ns"] / 1e3 for s in ss if s.get("launch_delay_ns") is not None]
        mdelay = [s["mean_launch_delay_ns"] / 1e3 for s in ss
                  if s.get("mean_launch_delay_ns") is not None]
        print(f"  {kind:<8} {len(ss):>5} {fmt(med(host)):>8} {fmt(med(busy)):>8} "
              f"{fmt(med(share), 1):>7} {fmt(med(delay), 1):>9} {fmt(med(mdelay), 1):>13} "
              f"{fmt(med([s['device_runs'] for s in ss]), 0):>5} "
              f"{fmt(med([s['device_kernels'] for s in ss]), 0):>8} "
              f"{fmt(med([s['device_graphs'] for s in ss]), 0):>6} "
              f"{sum(1 for s in ss if s.get('gpu_busy_approx')):>6}")
    outside = [s for s in dev if not s["start_ns"] <= s["device_start_ns"] <= s["device_end_ns"]]
    print(f"  device start before the host step's start: {len(outside)} of {len(dev)} steps")


def section_requests(reqs, srv_steps):
    print("\n== requests: tokenscope (host step, device time) against the server's own clock, "
          "in arrival order (ms)")
    prefill = sorted((s for s in srv_steps if s.get("kind") == "prefill"), key=lambda s: s["req"])
    decode = collections.defaultdict(float)
    for s in srv_steps:
        if s.get("kind") == "decode":
            decode[s["req"]] += (s["end_ns"] - s["start_ns"]) / 1e6
    by_arrival = sorted(reqs, key=lambda r: r.get("arrival_ns", 0))
    if len(prefill) != len(by_arrival):
        print(f"  {len(by_arrival)} requests traced, {len(prefill)} prefill steps in the server's "
              f"log: not paired (the log covers the whole run, warm-up included?)")
        prefill = prefill[-len(by_arrival):] if len(prefill) > len(by_arrival) else []
    if not prefill:
        return
    print(f"  {'#':>4} {'attribution':>11} {'prefill ms':>10} {'gpu ms':>8} {'server ms':>9} "
          f"{'decode gpu ms':>13} {'server decode ms':>16} {'gpu ms':>8} {'host ms':>8}")
    ratios_p, ratios_d, attribution = [], [], collections.Counter()
    for i, (r, s) in enumerate(zip(by_arrival, prefill)):
        srv_p = (s["end_ns"] - s["start_ns"]) / 1e6
        srv_d = decode.get(s["req"])
        attribution[r.get("attribution") or "null"] += 1
        pg, dg = r.get("prefill_gpu_ms"), r.get("decode_gpu_ms")
        if pg is not None and srv_p > 0:
            ratios_p.append(pg / srv_p)
        if dg is not None and srv_d:
            ratios_d.append(dg / srv_d)
        print(f"  {i:>4} {str(r.get('attribution')):>11} "
              f"{fmt(r.get('prefill_ms')):>10} {fmt(pg):>8} {fmt(srv_p):>9} {fmt(dg):>13} "
              f"{fmt(srv_d):>16} {fmt(r.get('gpu_ms')):>8} {fmt(r.get('host_ms')):>8}")
    print("  attribution: " + ", ".join(f"{k} {n}" for k, n in attribution.most_common()))
    if ratios_p:
        print(f"  prefill device time / the server's prefill step: median {med(ratios_p):.3f} "
              f"(min {min(ratios_p):.3f}, max {max(ratios_p):.3f}); below 1: the host's part "
              f"of the step (Python, launches) is not device time")
    if ratios_d:
        print(f"  decode device time / the server's decode steps: median {med(ratios_d):.3f} "
              f"(min {min(ratios_d):.3f}, max {max(ratios_d):.3f})")


def section_batches(reqs, srv_steps, steps):
    """Which steps each request rode: tokenscope's inference against the server's own log
    (each of its steps names the one request it advanced: batch 1)."""
    print("\n== batches: each request's decode steps and mean batch, tokenscope against the "
          "server's log")
    per_req = collections.Counter(s["req"] for s in srv_steps if s.get("kind") == "decode")
    prefill = sorted((s for s in srv_steps if s.get("kind") == "prefill"), key=lambda s: s["req"])
    by_arrival = sorted(reqs, key=lambda r: r.get("arrival_ns", 0))
    prefill = prefill[-len(by_arrival):] if by_arrival else []
    same_steps = same_batch = 0
    worst = []
    for r, p in zip(by_arrival, prefill):
        want = per_req.get(p["req"], 0)
        if r.get("steps") == want:
            same_steps += 1
        else:
            worst.append(f"request {p['req']}: steps {r.get('steps')}, server {want}")
        if r.get("batch_mean") == 1.0:
            same_batch += 1
    batches = collections.Counter(s.get("batch") for s in steps if s.get("kind") == "decode")
    print(f"  steps equal the server's decode steps for {same_steps}/{len(prefill)} requests; "
          f"batch_mean 1.0 (the server's) for {same_batch}/{len(prefill)}")
    print("  decode steps by batch: " + ", ".join(f"{k}: {n}" for k, n in sorted(
        batches.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))))
    for w in worst[:5]:
        print("  " + w)
    return same_steps, len(prefill)


def metric_values(metrics, name):
    """{labels-dict-as-tuple: value} for every sample of the family name."""
    out = {}
    for line in metrics.splitlines():
        m = re.match(r"^" + re.escape(name) + r"(\{[^}]*\})? (\S+)$", line)
        if not m:
            continue
        labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1) or "")))
        out[labels] = float(m.group(2))
    return out


def by_gpu(values):
    return {dict(k).get("gpu"): v for k, v in values.items()}


def section_nvml(metrics, nvsmi, apps, err):
    print("\n== NVML through tokenscope (/metrics) against nvidia-smi, read once each")
    for line in err.splitlines():
        if "NVML" in line:
            print("  " + line.strip())
    if not metrics:
        print("  (no /metrics scrape)")
        return
    util = by_gpu(metric_values(metrics, "tokenscope_gpu_utilization_ratio"))
    used = by_gpu(metric_values(metrics, "tokenscope_gpu_memory_used_bytes"))
    total = by_gpu(metric_values(metrics, "tokenscope_gpu_memory_total_bytes"))
    clock = by_gpu(metric_values(metrics, "tokenscope_gpu_sm_clock_hertz"))
    power = by_gpu(metric_values(metrics, "tokenscope_gpu_power_watts"))
    procs = metric_values(metrics, "tokenscope_gpu_process_memory_bytes")
    if not util and not used:
        print("  (no tokenscope_gpu_* family on /metrics)")
    print(f"  {'gpu':>3} {'util % t/smi':>13} {'used MiB t/smi':>19} {'total MiB t/smi':>19} "
          f"{'SM MHz t/smi':>13} {'W t/smi':>15}")
    for line in nvsmi.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6 or not f[0].isdigit():
            continue
        g = f[0]

        def num(x):
            try:
                return float(x)
            except ValueError:
                return None

        tu = util.get(g)
        print(f"  {g:>3} {fmt(tu * 100 if tu is not None else None, 0):>6}/{f[1]:<6} "
              f"{fmt(used[g] / 2**20 if g in used else None, 0):>9}/{f[2]:<9} "
              f"{fmt(total[g] / 2**20 if g in total else None, 0):>9}/{f[3]:<9} "
              f"{fmt(clock[g] / 1e6 if g in clock else None, 0):>6}/{f[4]:<6} "
              f"{fmt(power.get(g), 1):>7}/{num(f[5]) if num(f[5]) is not None else f[5]}")
    smi_apps = {}
    for line in apps.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 2 and f[0].isdigit():
            smi_apps[f[0]] = f[1]
    for labels, v in sorted(procs.items()):
        d = dict(labels)
        print(f"  gpu {d.get('gpu')} pid {d.get('pid')}: tokenscope {v / 2**20:.0f} MiB, "
              f"nvidia-smi {smi_apps.get(d.get('pid'), 'not listed')} MiB")
    print("  (utilisation is NVML's over its last sample period, read about a second apart by "
          "the two: close, not equal; memory should agree to the MiB unless it moved)")


def throughput(path):
    cs = jsonl(path)
    toks = [t for c in cs for t in (c.get("token_ns") or [])]
    sends = [c["send_ns"] for c in cs if c.get("send_ns")]
    if not toks or not sends:
        return None, 0, len(cs)
    return len(toks) / ((max(toks) - min(sends)) / 1e9), len(toks), len(cs)


def section_overhead(out):
    print("\n== overhead: the same load on the same server, plain and under tokenscope run")
    plain, pn, pr = throughput(os.path.join(out, "plain.client.jsonl"))
    run, rn, rr = throughput(os.path.join(out, "run.client.jsonl"))
    print(f"  plain: {fmt(plain, 1)} tokens/s ({pn} tokens, {pr} requests); tokenscope run: "
          f"{fmt(run, 1)} tokens/s ({rn} tokens, {rr} requests)")
    if plain and run:
        print(f"  throughput ratio (run / plain): {run / plain:.3f} (one run each: the "
              f"server's own run-to-run spread is in it)")
        return run / plain
    return None


def main():
    out, engine = sys.argv[1], int(sys.argv[2])
    recs = jsonl(os.path.join(out, "run.jsonl"))
    err = text(os.path.join(out, "run.err"))
    steps = [r["gpu_step"] for r in recs if "gpu_step" in r]
    eng = [s for s in steps if s.get("pid") == engine] or steps
    reqs = [r for r in recs if "conn" in r]
    section_steps(eng, err)
    section_requests(reqs, jsonl(os.path.join(out, "run.steps.jsonl")))
    same, n = section_batches(reqs, jsonl(os.path.join(out, "run.steps.jsonl")), eng)
    section_nvml(text(os.path.join(out, "run.metrics.txt")), text(os.path.join(out, "run.nvsmi.csv")),
                 text(os.path.join(out, "run.nvsmi-apps.csv")), err)
    ratio = section_overhead(out)
    dev = sum(1 for s in eng if s.get("times") == "cupti")
    print(f"\ngpu-check device: {dev}/{len(eng)} engine steps with device times, "
          f"{len(reqs)} requests traced under run, "
          f"{sum(1 for r in reqs if r.get('attribution') == 'cupti')} attributed by device "
          f"times, steps per request equal to the server's for {same}/{n}, throughput ratio "
          f"{fmt(ratio)}")


if __name__ == "__main__":
    main()
