#!/usr/bin/env python3
"""tokenscope's own cost, end to end (docs/output.md, "Its own cost").

The reference server is traced with `tokenscope trace -p PID --self-stats --listen --json --html`
while requests stream. The test reads the kernel's own counters itself, with `bpftool prog show`
(the programs whose pids list names tokenscope), and its CPU time from /proc, and checks:
  (a) --self-stats makes the kernel count the programs' runs for the run (a descriptor holds it,
      which the sysctl kernel.bpf_stats_enabled does not show; the sysctl is as it was after);
  (b) /metrics has tokenscope_self_cpu_seconds_total, tokenscope_bpf_stats_enabled 1, and per
      program tokenscope_bpf_run_seconds_total and tokenscope_bpf_runs_total, each between what
      bpftool read before the scrape (1.5 s before: a sample falls between) and after it; the CPU
      time no more than /proc says the process used; the ring buffer's size and peak; promtool
      passes the page;
  (c) at SIGINT the summary's cost line says the BPF time per traced syscall, the CPU share and
      the ring peak, the same figures as the JSON summary's "cost", whose program counters are at
      least bpftool's last reading and whose counted BPF time is no more than the programs'
      totals; the HTML page carries the same "cost";
  (d) without --self-stats and with bpf_stats off: the line says BPF time was not counted, the
      metrics have tokenscope_bpf_stats_enabled 0 and no program series, the JSON has nulls.
Needs root (BPF). Prints PASS/FAIL/SKIP lines and the totals line; exits 1 if anything failed.
"""
import http.client
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

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from lib import bpf_prog_counters as prog_counters  # noqa: E402
from lib import free_port, ko, ok, sk, totals, wait_for  # noqa: E402

TS = os.environ.get("TOKENSCOPE", os.path.join(ROOT, ".output", "tokenscope"))
RS = os.environ.get("REFSERVER", os.path.join(ROOT, ".output", "refserver"))
STATS = "/proc/sys/kernel/bpf_stats_enabled"
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def finish():
    sys.exit(totals())


def stats_on():
    with open(STATS) as f:
        return f.read().strip() == "1"


def stream(port, n):
    for i in range(n):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", "/v1/chat/completions",
                  body=json.dumps({"model": "cost", "stream": True, "max_tokens": 20,
                                   "messages": [{"role": "user", "content": f"hi {i}"}]}),
                  headers={"Content-Type": "application/json"})
        c.getresponse().read()
        c.close()


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def scrape(mport):
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as r:
        return r.read().decode()


def samples(text, family):
    """{labels: value} of one family on a /metrics page."""
    out = {}
    for line in text.splitlines():
        m = re.match(rf"^{family}(\{{[^}}]*\}})? (\S+)$", line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


class Traced:
    """The reference server, and tokenscope tracing it with extra arguments."""

    def __init__(self, tmp, tag, args):
        self.tmp, self.tag = tmp, tag
        self.rs_out = open(os.path.join(tmp, f"{tag}.rs.out"), "w+")
        self.rs = subprocess.Popen([RS, "--port", "0", "--token-ms", "1", "--prefill-ms", "2"],
                                   stdout=self.rs_out, stderr=subprocess.STDOUT)
        self.port = None
        wait_for(self._port, 10)
        self.err_path = os.path.join(tmp, f"{tag}.err")
        self.out_path = os.path.join(tmp, f"{tag}.jsonl")
        self.ts = subprocess.Popen([TS, "trace", "-p", str(self.rs.pid), "--json"] + args,
                                   stdout=open(self.out_path, "w"),
                                   stderr=open(self.err_path, "w"))
        self.attached = wait_for(lambda: "attached" in self.err(), 20)

    def _port(self):
        self.rs_out.seek(0)
        m = re.search(r"listening on .*:(\d+)", self.rs_out.read())
        if m:
            self.port = int(m.group(1))
        return self.port is not None

    def err(self):
        with open(self.err_path) as f:
            return f.read()

    def stop(self):
        self.ts.send_signal(signal.SIGINT)
        try:
            self.ts.wait(20)
        except subprocess.TimeoutExpired:
            self.ts.kill()
        self.rs.kill()
        self.rs.wait()
        with open(self.out_path) as f:
            lines = [json.loads(x) for x in f if x.startswith("{")]
        return next((x["summary"] for x in lines if "summary" in x), None)


def cost_line(err):
    return next((x.strip() for x in err.splitlines() if x.strip().startswith("cost: ")), None)


def check_counted(tmp, was_on):
    mport = free_port()
    html = os.path.join(tmp, "cost.html")
    t = Traced(tmp, "counted", ["--self-stats", "--listen", f"127.0.0.1:{mport}", "--html", html])
    if not t.attached or not t.port:
        ko("self-stats: attach", t.err()[-500:])
        t.stop()
        return
    tspid = t.ts.pid
    cpu0 = cpu_s(tspid)
    stream(t.port, 30)
    before = prog_counters(tspid)
    # The kernel counts while tokenscope holds the descriptor (the sysctl does not show it).
    time.sleep(0.2)
    again = prog_counters(tspid)
    if before and any(again.get(n, (0, 0))[1] > v[1] for n, v in before.items()):
        ok("--self-stats: the kernel counts the programs' runs during the run")
    else:
        ko("--self-stats", f"no program's run count grew: {before} then {again}")
    time.sleep(1.5)
    page = scrape(mport)
    after = prog_counters(tspid)
    cpu1 = cpu_s(tspid)
    if not before:
        ko("bpftool", "no program lists tokenscope's pid")
    run_s = samples(page, "tokenscope_bpf_run_seconds_total")
    runs = samples(page, "tokenscope_bpf_runs_total")
    bad = []
    for labels, v in run_s.items():
        name = re.search(r'program="([^"]*)"', labels).group(1)
        # bpftool names a program from its BTF whole, else as the kernel keeps it (15 bytes)
        kname = name if name in before else name[:15]
        if kname not in before or kname not in after:
            bad.append(f"{name}: not among bpftool's programs {sorted(before)}")
            continue
        lo, hi = before[kname], after[kname]
        n = runs.get(labels)
        if not lo[0] <= round(v * 1e9) <= hi[0]:
            bad.append(f"{name}: run time {v * 1e9:.0f} ns outside bpftool's {lo[0]}..{hi[0]}")
        if n is None or not lo[1] <= n <= hi[1]:
            bad.append(f"{name}: runs {n} outside bpftool's {lo[1]}..{hi[1]}")
    if not run_s:
        ko("metrics: BPF programs", "no tokenscope_bpf_run_seconds_total series")
    elif bad:
        ko("metrics: BPF programs agree with bpftool", "; ".join(bad[:4]))
    else:
        busy = max(run_s, key=run_s.get)
        ok(f"metrics: {len(run_s)} programs' run time and runs lie between bpftool's readings "
           f"before and after the scrape (the busiest {busy}: {run_s[busy] * 1e3:.3f} ms)")
    cpu = samples(page, "tokenscope_self_cpu_seconds_total").get("")
    # At most what /proc says of the whole process, at least what it used between the attach
    # line and the scrape, less a sample's lag (1 s at about 1 % of a CPU) and two clock ticks.
    if cpu is None or not 0 < cpu <= cpu1 + TICK_S or cpu < cpu1 - cpu0 - 2 * TICK_S - 0.05:
        ko("metrics: self CPU", f"{cpu} s; /proc: {cpu0:.2f} s at attach, {cpu1:.2f} s now")
    else:
        ok(f"metrics: tokenscope_self_cpu_seconds_total {cpu:.3f} s, within /proc's "
           f"{cpu1:.2f} s of the whole process, {cpu1 - cpu0:.2f} s since the attach line")
    enabled = samples(page, "tokenscope_bpf_stats_enabled").get("")
    ring = samples(page, "tokenscope_ring_buffer_bytes").get("")
    peak = samples(page, "tokenscope_ring_buffer_peak_ratio").get("")
    if enabled == 1 and ring == 2 * 1024 * 1024 and peak is not None and 0 <= peak <= 1:
        ok(f"metrics: bpf_stats_enabled 1, ring buffer {ring:.0f} bytes, peak {peak}")
    else:
        ko("metrics: stats, ring", f"enabled {enabled}, ring {ring}, peak {peak}")
    pfile = os.path.join(tmp, "metrics.txt")
    with open(pfile, "w") as f:
        f.write(page)
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "metrics"], stdin=open(pfile),
                           capture_output=True, text=True)
        bad_lines = [x for x in (r.stdout + r.stderr).splitlines() if "tokenscope_bpf" in x
                     or "tokenscope_self" in x or "tokenscope_ring" in x]
        if r.returncode == 0 or not bad_lines:
            ok("promtool check metrics: nothing said of the cost families")
        else:
            ko("promtool check metrics", "; ".join(bad_lines[:3]))
    last = prog_counters(tspid)
    summary = t.stop()
    err = t.err()
    line = cost_line(err)
    c = (summary or {}).get("cost")
    if not c:
        ko("JSON summary: cost", f"none in {summary}")
        return
    # The line's figures are the JSON's, each to the line's last digit. The JSON's ratios are
    # themselves rounded (cpu_ratio to 5 decimals), so a figure may sit either side of the
    # line's rounding: within half its last digit, plus the JSON's own rounding. The ring's
    # peak comes from exact byte counts: the same division and rounding as the line's.
    m = re.fullmatch(r"cost: ([\d.]+) µs of BPF per traced syscall, ([\d.]+) % of one CPU in "
                     r"tokenscope, ring peak (\d+) %", line or "")
    figures = c.get("bpf_ns_per_syscall") is not None and m
    if (figures and abs(float(m[1]) - c["bpf_ns_per_syscall"] / 1000) <= 0.005 + 0.00005
            and abs(float(m[2]) - c["cpu_ratio"] * 100) <= 0.05 + 0.0005
            and m[3] == f"{100 * c['ring_peak_bytes'] / c['ring_bytes']:.0f}"):
        ok(f"summary: '{line}', the JSON summary's figures")
    else:
        ko("summary: cost line", f"{line!r} against the JSON's {c.get('bpf_ns_per_syscall')} ns, "
           f"cpu_ratio {c.get('cpu_ratio')}, ring {c.get('ring_peak_bytes')} of "
           f"{c.get('ring_bytes')} bytes")
    progs = {}
    for p in c.get("programs", []):
        progs[p["name"]] = progs[p["name"][:15]] = p
    sys_total = sum(p["run_ns"] for p in c.get("programs", []) if p["syscall"])
    sys_names = [p["name"] for p in c.get("programs", []) if p["syscall"]]
    bad = [f"{n}: {progs[n]['run_ns']} < bpftool's {v[0]}" for n, v in last.items()
           if n in progs and progs[n]["run_ns"] < v[0]]
    counted = c["bpf_ns_per_syscall"] * c["traced_syscalls"]
    sys_before = sum(v[0] for n, v in before.items() if n in sys_names)
    if sorted(sys_names) != ["ts_sys_enter", "ts_sys_exit"]:
        bad.append(f"syscall programs {sys_names}")
    # What was counted is the syscall programs' time from the first sample (at attach) on: at
    # most their totals, and at least what they ran after bpftool's reading 1.5 s into the run.
    slack = 0.05 * c["traced_syscalls"] + 1  # the JSON's ns per syscall has one decimal
    if not sys_total - sys_before - slack <= counted <= sys_total + slack:
        bad.append(f"counted {counted:.0f} ns, totals {sys_total}, before {sys_before}")
    if c["traced_syscalls"] < 60:
        bad.append(f"{c['traced_syscalls']} traced syscalls for 30 streamed requests")
    if bad:
        ko("JSON summary: cost against bpftool", "; ".join(bad[:4]))
    else:
        ok(f"JSON summary: {c['traced_syscalls']} traced syscalls, "
           f"{c['bpf_ns_per_syscall']:.0f} ns each in the syscall programs, no counter below "
           f"bpftool's last reading")
    if stats_on() == was_on:
        ok(f"after the run kernel.bpf_stats_enabled is {int(was_on)}, as before it")
    else:
        ko("--self-stats at exit", f"kernel.bpf_stats_enabled is {int(stats_on())}")
    try:
        text = open(html).read()
        data = json.loads(re.search(r'<script type="application/json" id="ts-data">(.*?)</script>',
                                    text, re.S).group(1))
        if data.get("cost") == c:
            ok("HTML page: the same cost as the JSON summary")
        else:
            ko("HTML page: cost", f"{data.get('cost')}")
    except (OSError, AttributeError, ValueError) as e:
        ko("HTML page", str(e))


def check_uncounted(tmp):
    mport = free_port()
    t = Traced(tmp, "uncounted", ["--listen", f"127.0.0.1:{mport}"])
    if not t.attached or not t.port:
        ko("no --self-stats: attach", t.err()[-500:])
        t.stop()
        return
    stream(t.port, 5)
    time.sleep(1.2)
    page = scrape(mport)
    summary = t.stop()
    line = cost_line(t.err())
    c = (summary or {}).get("cost") or {}
    if (samples(page, "tokenscope_bpf_stats_enabled").get("") == 0
            and not samples(page, "tokenscope_bpf_run_seconds_total")
            and "tokenscope_self_cpu_seconds_total" in page):
        ok("bpf_stats off: tokenscope_bpf_stats_enabled 0, no program series")
    else:
        ko("bpf_stats off: metrics", "\n".join(x for x in page.splitlines()
                                               if "bpf" in x or "self" in x)[:400])
    if (line and line.startswith("cost: BPF time not counted (--self-stats), ")
            and c.get("bpf_stats") is False and c.get("bpf_ns_per_syscall", 0) is None
            and c.get("bpf_s", 0) is None):
        ok(f"bpf_stats off: '{line}', nulls in the JSON")
    else:
        ko("bpf_stats off: summary", f"{line!r}; {c}")


def main():
    if os.geteuid() != 0:
        sk("cost", "needs root to load BPF programs")
        finish()
    missing = [x for x in (TS, RS) if not os.access(x, os.X_OK)]
    missing += [x for x in ("bpftool",) if not shutil.which(x)]
    if not os.path.exists(STATS):
        missing.append(STATS)
    if missing:
        sk("cost", f"missing: {' '.join(missing)} (make; scripts/deps.sh)")
        finish()
    was_on = stats_on()
    with tempfile.TemporaryDirectory() as tmp:
        check_counted(tmp, was_on)
        if was_on:
            sk("bpf_stats off", "something else has kernel.bpf_stats_enabled on")
        else:
            check_uncounted(tmp)
    finish()


if __name__ == "__main__":
    main()
