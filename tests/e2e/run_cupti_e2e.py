#!/usr/bin/python3
"""Device times end to end, without a GPU: the CUPTI injection library (libtokenscope_cupti.so)
loaded into a process through CUDA_INJECTION64_PATH, the stand-in CUPTI (tests/cuptistub.c)
and the stand-in runtime's modelled device (tests/cudastub.c), whose operations last exactly
TS_STUB_KERNEL_US, TS_STUB_GRAPH_US and TS_STUB_COPY_US and start TS_STUB_LAUNCH_US after
their launch when the stream is free. tokenscope must report for every step exactly the
device time those make, from the library's USDT probes through the BPF program and the
pipeline.

Cases:
  cupti-steps      cudaloop traced with --json --gpu-steps: every step "times":"cupti",
                   gpu_busy_ns = launches x kernel + graphs x graph + copies x copy, the
                   launch-to-start delay, device start/end inside the step's host window
  cupti-offset     the same with a CUPTI that refuses the timestamp callback: the library's
                   offset method; busy and delays still exact, the summary names the method
  cupti-no-buffer  every buffer request refused: records dropped, counted on the lost line
                   and on /metrics, steps shown with host times only, nothing crashes
  cupti-kernels    --kernels: one run per operation (device_runs = operations)
  cupti-timeline   --timeline: a slice per step on the process's device track, from device
                   start to device end, with the step's busy time and launch delay
  cupti-run        tokenscope run names the library itself; the command is traced from its
                   first instruction
  cupti-requests   the reference server in its GPU mode: requests get "attribution":"cupti",
                   prefill_gpu_ms equal to the device time of their prefill step
  cupti-sampled    the default mode (--device-times sampled) with a duty cycle of 0.3 s in
                   1 s: prefill steps exact or "sampled-out", decode steps always exact, the
                   summary's counts, CUPTI's overhead records summed, /metrics by times
The others run with --device-times all (every step).
Prints PASS/FAIL/SKIP lines and "N passed, N failed, N skipped".
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, ".output")
TS = os.path.join(OUT, "tokenscope")
RS = os.path.join(OUT, "refserver")
GT = os.path.join(OUT, "gtclient")
LOOP = os.path.join(OUT, "cudaloop")
LIB = os.path.join(OUT, "libtokenscope_cupti.so")
STANDIN = os.path.join(OUT, "standin")
CUDART = os.path.join(STANDIN, "libcudart.so.13")
KERNEL_US, GRAPH_US, COPY_US, LAUNCH_US = 20, 500, 10, 5


class Fail(Exception):
    pass


def device_env(**extra):
    env = dict(os.environ)
    env.update({"CUDA_INJECTION64_PATH": LIB, "LD_LIBRARY_PATH": STANDIN,
                "TS_STUB_KERNEL_US": str(KERNEL_US), "TS_STUB_GRAPH_US": str(GRAPH_US),
                "TS_STUB_COPY_US": str(COPY_US), "TS_STUB_LAUNCH_US": str(LAUNCH_US)})
    env.update(extra)
    return env


def wait_for(path, text, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path) and text in open(path).read():
            return open(path).read()
        time.sleep(0.05)
    raise Fail(f"no {text!r} in {os.path.basename(path)} after {timeout} s: "
               + (open(path).read()[-600:] if os.path.exists(path) else "(no file)"))


def jsonl(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith("{")]


def loop_traced(tmp, name, steps, launches, ts_args=("--device-times", "all"), env_extra=None,
                scrape=None, gap_ms=0):
    """cudaloop with the injection library, tokenscope trace -p on it; returns (steps, stderr).
    scrape: a list that gets the /metrics text (with --listen in ts_args) once the loop is done."""
    env = device_env(**(env_extra or {}))
    loop = subprocess.Popen([LOOP, "--cudart", CUDART, "-n", str(steps), "--launches",
                             str(launches), "--gap-ms", str(gap_ms)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    ts = None
    try:
        if not loop.stdout.readline().startswith("ready"):
            raise Fail("cudaloop did not start")
        out, err = os.path.join(tmp, name + ".out"), os.path.join(tmp, name + ".err")
        ts = subprocess.Popen([TS, "trace", "-p", str(loop.pid), "--json", "--gpu-steps",
                               *ts_args], stdout=open(out, "w"), stderr=open(err, "w"))
        wait_for(err, "device times of pid", 15)
        time.sleep(0.5)  # the library turns collection on within TS_DEVTIME_FLUSH_MS
        loop.stdin.write("go\n")
        loop.stdin.flush()
        loop.stdout.readline()  # the loop's own figures: it is done
        time.sleep(0.5)
        if scrape is not None:
            addr = wait_for(err, "metrics at http://", 5).split("metrics at ")[1].split()[0]
            scrape.append(urllib.request.urlopen(addr, timeout=5).read().decode())
        loop.stdin.write("bye\n")
        loop.stdin.flush()
        if loop.wait(20) != 0:
            raise Fail(f"cudaloop exited {loop.returncode}")
        if ts.wait(20) != 0:
            raise Fail(f"tokenscope exited {ts.returncode}: {open(err).read()[-400:]}")
        return [t["gpu_step"] for t in jsonl(out) if "gpu_step" in t], open(err).read()
    finally:
        for p in (loop, ts):
            if p and p.poll() is None:
                p.kill()
                p.wait()


def expected_busy(s):
    return (s["launches"] * KERNEL_US + s["graph_launches"] * GRAPH_US
            + s["memcpys"] * COPY_US) * 1000


def check_steps(steps, n, launches, single=False):
    bad = []
    if len(steps) != 2 * n:
        bad.append(f"{len(steps)} steps, expected {2 * n}")
    for i, s in enumerate(steps):
        if s["times"] != "cupti":
            bad.append(f"step {i} ({s['kind']}) has no device times")
            continue
        if s["gpu_busy_ns"] != expected_busy(s):
            bad.append(f"step {i} ({s['kind']}): gpu_busy_ns {s['gpu_busy_ns']}, "
                       f"expected {expected_busy(s)}")
        if s["launch_delay_ns"] != LAUNCH_US * 1000:
            bad.append(f"step {i}: launch_delay_ns {s['launch_delay_ns']}")
        if not s["start_ns"] <= s["device_start_ns"] <= s["device_end_ns"] <= s["end_ns"]:
            bad.append(f"step {i}: device {s['device_start_ns']}..{s['device_end_ns']} outside "
                       f"the host window {s['start_ns']}..{s['end_ns']}")
        ops = s["launches"] + s["graph_launches"] + s["memcpys"]
        if single and s["device_runs"] != ops:
            bad.append(f"step {i}: {s['device_runs']} runs for {ops} operations (--kernels)")
        # Back-to-back work makes one run, but a launch the host issues late (the machine
        # busy) leaves the device idle past the merge gap and starts another: exact merging is
        # test_cupti_runs' to check; here each run must hold some of the step's operations.
        if not single and not 1 <= s["device_runs"] <= ops:
            bad.append(f"step {i}: {s['device_runs']} runs for {ops} operations")
    kinds = [s["kind"] for s in steps]
    if kinds != ["prefill"] * n + ["decode"] * n:
        bad.append(f"kinds {kinds}")
    if steps and steps[0].get("launches") != launches:
        bad.append(f"first step launches {steps[0].get('launches')}")
    return bad


def case_steps(tmp):
    steps, err = loop_traced(tmp, "steps", 20, 8)
    bad = check_steps(steps, 20, 8)
    if "clock CLOCK_MONOTONIC from CUPTI" not in err:
        bad.append("the summary does not name the clock method")
    # A step's operations make one run unless the machine kept the device idle past the merge
    # gap between two of them (check_steps allows that): the summary counts what the steps hold.
    m = re.search(r"device \(CUPTI\): (\d+) runs", err)
    held = sum(s.get("device_runs", 0) for s in steps)
    if not m or int(m.group(1)) != held or held < 40:
        bad.append(f"the summary counts {m.group(1) if m else 'no'} runs; the 40 steps hold "
                   f"{held}")
    return bad


def case_offset(tmp):
    steps, err = loop_traced(tmp, "offset", 10, 6, env_extra={"TS_CUPTI_STUB_NO_TSCB": "1"})
    bad = check_steps(steps, 10, 6)
    if "clock offset (error <=" not in err:
        bad.append("the summary does not name the offset method and its error")
    return bad


def case_no_buffer(tmp):
    metrics = []
    steps, err = loop_traced(tmp, "nobuf", 5, 4,
                             ts_args=("--listen", "127.0.0.1:0", "--device-times", "all"),
                             env_extra={"TS_CUPTI_STUB_NO_BUFFER": "1"}, scrape=metrics)
    bad = []
    lost = {l.split('"')[1]: int(l.split()[-1]) for l in metrics[0].splitlines()
            if l.startswith("tokenscope_device_times_lost_total{")}
    if set(lost) != {"cupti_dropped", "buffer_refused", "unplaced_run", "late_step",
                     "other_version"} or lost["cupti_dropped"] == 0:
        bad.append(f"/metrics tokenscope_device_times_lost_total: {lost}")
    if len(steps) != 10 or any(s["times"] != "host-calls" for s in steps):
        bad.append(f"{len(steps)} steps, times {[s['times'] for s in steps]}")
    line = [l for l in err.splitlines() if "lost (device times)" in l]
    if not line or " 0 records dropped by CUPTI" in line[0]:
        bad.append(f"drops not counted: {line}")
    elif f"device times): {lost.get('cupti_dropped')} records dropped by CUPTI" not in line[0]:
        bad.append(f"/metrics says {lost.get('cupti_dropped')} dropped, the summary {line[0]}")
    if shutil.which("promtool"):
        pt = subprocess.run(["promtool", "check", "metrics"], input=metrics[0], text=True,
                            capture_output=True, timeout=30)
        if pt.returncode != 0:
            bad.append(f"promtool check metrics: {(pt.stdout + pt.stderr)[-300:]}")
    return bad


def case_kernels(tmp):
    steps, _ = loop_traced(tmp, "kernels", 5, 4, ts_args=("--kernels",))
    return check_steps(steps, 5, 4, single=True)


def case_timeline(tmp):
    path = os.path.join(tmp, "tl.json")
    steps, _ = loop_traced(tmp, "timeline", 6, 5,
                           ts_args=("--timeline", path, "--device-times", "all"))
    bad = check_steps(steps, 6, 5)
    with open(path) as f:
        tl = json.load(f)
    origin = tl["otherData"]["origin_ns"]
    ev = tl["traceEvents"]
    dev = [e for e in ev if e["ph"] == "X" and e.get("cat") == "device" and e["name"] != "busy"]
    host = [e for e in ev if e["ph"] == "X" and e.get("cat") == "gpu"]
    if len(dev) != len(steps) or len(host) != len(steps):
        bad.append(f"{len(dev)} device and {len(host)} host slices for {len(steps)} steps")
    if any(e["args"]["times"] != "cupti" for e in host):
        bad.append("a host slice without device times")
    tracks = {(e["pid"], e["tid"]) for e in dev}
    named = [e for e in ev if e["ph"] == "M" and e["name"] == "thread_name"
             and e["args"]["name"] == "device (CUPTI)"]
    if len(tracks) != 1 or [(e["pid"], e["tid"]) for e in named] != list(tracks):
        bad.append(f"device tracks {tracks}, named {[(e['pid'], e['tid']) for e in named]}")
    by_start = {round((s["device_start_ns"] - origin) / 1e3, 3): s for s in steps}
    for e in dev:
        s = by_start.get(e["ts"])
        if s is None:
            bad.append(f"device slice at {e['ts']} us is no step's device start")
            continue
        if e["name"] != s["kind"] or e["dur"] != round((s["device_end_ns"] - s["device_start_ns"]) / 1e3, 3):
            bad.append(f"device slice {e['name']} {e['dur']} us for step {s['kind']} "
                       f"{s['device_start_ns']}..{s['device_end_ns']}")
        if e["args"]["gpu_busy_ms"] != round(s["gpu_busy_ns"] / 1e6, 3):
            bad.append(f"gpu_busy_ms {e['args']['gpu_busy_ms']} for {s['gpu_busy_ns']} ns")
        if e["args"]["launch_delay_ms"] != LAUNCH_US / 1e3:
            bad.append(f"launch_delay_ms {e['args']['launch_delay_ms']}")
    return bad


def case_run(tmp):
    out, err = os.path.join(tmp, "run.out"), os.path.join(tmp, "run.err")
    env = device_env()
    del env["CUDA_INJECTION64_PATH"]  # run names it
    env["TOKENSCOPE_CUPTI_LIB"] = LIB
    feed = "sleep 2.5; echo go; sleep 0.8; echo bye"
    p = subprocess.run(["/bin/sh", "-c", f"({feed}) | {TS} run --json --gpu-steps "
                        f"--device-times all -- {LOOP} --cudart {CUDART} -n 5 --launches 4"],
                       stdout=open(out, "w"), stderr=open(err, "w"), env=env, timeout=60)
    if p.returncode != 0:
        return [f"run exited {p.returncode}: {open(err).read()[-400:]}"]
    steps = [t["gpu_step"] for t in jsonl(out) if "gpu_step" in t]
    return check_steps(steps, 5, 4)


def case_requests(tmp):
    log = os.path.join(tmp, "req.gpu.jsonl")
    srv_out, ts_out, ts_err = (os.path.join(tmp, n) for n in ("req.srv", "req.out", "req.err"))
    srv = subprocess.Popen([RS, "--gpu", "--port", "0", "--cudart", CUDART, "--gpu-log", log,
                            "--token-ms", "5", "--prefill-ms", "10"], stdout=open(srv_out, "w"),
                           stderr=subprocess.STDOUT, start_new_session=True, env=device_env())
    ts = None
    try:
        port = int(wait_for(srv_out, "listening on", 10).split("listening on ")[1]
                   .split(":")[1].split()[0])
        subprocess.run([GT, "--port", str(port), "-n", "1", "--max-tokens", "2", "-o",
                        os.devnull], check=True, timeout=30, stderr=subprocess.DEVNULL)
        ts = subprocess.Popen([TS, "trace", "-p", str(srv.pid), "--json", "--gpu-steps",
                               "--device-times", "all"],
                              stdout=open(ts_out, "w"), stderr=open(ts_err, "w"))
        wait_for(ts_err, "device times of pid", 15)
        time.sleep(0.5)
        subprocess.run([GT, "--port", str(port), "-n", "4", "-c", "1", "--max-tokens", "6",
                        "-o", os.devnull], check=True, timeout=60, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        ts.send_signal(signal.SIGINT)
        if ts.wait(20) != 0:
            return [f"tokenscope exited {ts.returncode}"]
    finally:
        for p in (ts, srv):
            if p and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL) if p is srv else p.kill()
                p.wait()
    recs = jsonl(ts_out)
    steps = [r["gpu_step"] for r in recs if "gpu_step" in r]
    reqs = [r for r in recs if "conn" in r]
    bad = []
    if len(reqs) != 4:
        bad.append(f"{len(reqs)} requests, expected 4")
    for s in steps:
        if s["times"] == "cupti" and s["gpu_busy_ns"] != expected_busy(s):
            bad.append(f"step {s['kind']}: busy {s['gpu_busy_ns']} != {expected_busy(s)}")
    prefill_busy = {round(s["gpu_busy_ns"] / 1e6, 3) for s in steps
                    if s["kind"] in ("prefill", "mixed") and s["times"] == "cupti"}
    for r in reqs:
        if r["attribution"] != "cupti":
            bad.append(f"request seq {r['seq']}: attribution {r['attribution']!r} "
                       f"({r['attribution_how']})")
        elif r["prefill_gpu_ms"] not in prefill_busy:
            bad.append(f"request seq {r['seq']}: prefill_gpu_ms {r['prefill_gpu_ms']} is no "
                       f"prefill step's device time {sorted(prefill_busy)}")
        elif r["decode_gpu_ms"] is None or r["gpu_ms"] is None:
            bad.append(f"request seq {r['seq']}: decode_gpu_ms {r['decode_gpu_ms']}, gpu_ms "
                       f"{r['gpu_ms']}")
    return bad


def case_sampled(tmp):
    """The default mode with a short duty cycle: eager kernels collected 0.3 s of every 1 s.
    Prefill steps (eager launches) inside a window have exact device times, the others none
    ("sampled-out"), never a part; decode steps (a graph replay and a copy, collected always)
    have theirs every time; the summary counts both; CUPTI's overhead records (the stand-in
    writes one of 5 us at each flush that hands a buffer over) are summed."""
    metrics = []
    steps, err = loop_traced(tmp, "sampled", 30, 6, ts_args=("--listen", "127.0.0.1:0"),
                             env_extra={"TOKENSCOPE_CUPTI_SAMPLE": "300/1000"}, gap_ms=60,
                             scrape=metrics)
    bad = []
    if len(steps) != 60:
        bad.append(f"{len(steps)} steps, expected 60")
    pre = [s for s in steps if s["kind"] == "prefill"]
    dec = [s for s in steps if s["kind"] == "decode"]
    full = [s for s in pre if s["times"] == "cupti"]
    out = [s for s in pre if s["times"] == "sampled-out"]
    if len(full) + len(out) != len(pre):
        bad.append("prefill steps neither with device times nor sampled out: "
                   f"{sorted({s['times'] for s in pre})}")
    if not full or not out:
        bad.append(f"prefill steps: {len(full)} with device times, {len(out)} sampled out "
                   "(1.8 s of steps and windows of 0.3 s in 1 s: both expected)")
    for s in full + dec:
        if s["times"] != "cupti":
            bad.append(f"a {s['kind']} step has times {s['times']!r}")
        elif s["gpu_busy_ns"] != expected_busy(s):
            bad.append(f"{s['kind']} step: gpu_busy_ns {s['gpu_busy_ns']}, expected "
                       f"{expected_busy(s)} (a part of its work?)")
    for s in out:
        if s["gpu_busy_ns"] is not None or s["device_start_ns"] is not None:
            bad.append("a sampled-out step shows device times")
    m = re.search(r"device times sampled: eager kernels 0\.3 s of every 1\.0 s \((\d+) "
                  r"windows\); steps: (\d+) with device times, (\d+) sampled out", err)
    if not m:
        bad.append("no 'device times sampled' line in the summary")
    elif (int(m.group(2)), int(m.group(3))) != (len(full) + len(dec), len(out)):
        bad.append(f"the summary says {m.group(2)} with device times, {m.group(3)} sampled "
                   f"out; the steps show {len(full) + len(dec)} and {len(out)}")
    m = re.search(r"CUPTI overhead: (\d+) records, ([\d.]+) ms \(buffer flush ([\d.]+)", err)
    if not m or int(m.group(1)) < 1 or abs(float(m.group(3)) - int(m.group(1)) * 0.005) > 0.051:
        bad.append(f"CUPTI overhead line: {m.group(0) if m else 'missing'} (5 us per flush)")
    if not re.search(r"device times cost: [1-9]\d* buffers read in", err):
        bad.append("no 'device times cost' line with buffers read")
    text = metrics[0] if metrics else ""
    got = {t: int(v) for t, v in re.findall(
        r'^tokenscope_gpu_steps_device_times_total\{times="([a-z-]+)"\} (\d+)$', text, re.M)}
    want = {"cupti": len(full) + len(dec), "sampled-out": len(out), "host-calls": 0}
    if got != want:
        bad.append(f"/metrics device_times {got}, the steps say {want}")
    return bad


def main():
    if os.geteuid() != 0:
        print("SKIP cupti: needs root")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    if not os.path.exists(LIB) or not os.path.exists(os.path.join(STANDIN, "libcupti.so.13")):
        print("SKIP cupti: libtokenscope_cupti.so not built (no CUPTI headers)")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    cases = [("cupti-steps", case_steps), ("cupti-offset", case_offset),
             ("cupti-no-buffer", case_no_buffer), ("cupti-kernels", case_kernels),
             ("cupti-timeline", case_timeline),
             ("cupti-run", case_run), ("cupti-requests", case_requests),
             ("cupti-sampled", case_sampled)]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in cases:
            try:
                bad = fn(tmp)
            except (Fail, subprocess.SubprocessError, OSError, ValueError, KeyError) as e:
                bad = [f"{type(e).__name__}: {e}"]
            if bad:
                print(f"FAIL {name}: " + "; ".join(bad[:6]))
                failed += 1
            else:
                print(f"PASS {name}")
                passed += 1
    print(f"{passed} passed, {failed} failed, 0 skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
