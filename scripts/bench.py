#!/usr/bin/python3
"""Overhead benchmarks of tokenscope, measured side by side in one run and printed as ratios.

0. The cost of one traced write: writeloop streams 200,000 SSE frames over loopback TCP, one
   write syscall each, and reports its own CPU time per write, untraced and under each tracer.
   From kernel.bpf_stats: the BPF time per traced write (writer and reader on separate CPUs),
   the filter every other syscall pays, and what passive discovery (--all) adds to each write of
   an untraced process; each for this build, BENCH_BASE and the hooks alone (tokenscope-noop,
   whose syscall programs return at once). What a process nobody traces pays per syscall,
   measured by its own CPU time with bpf_stats off (tests/bench/sysloop.c), and with it on, as
   --self-stats runs (what the kernel's counting of BPF run time adds).
1. The reference server streaming at full speed to 8 concurrent clients: client-measured
   throughput and the server's CPU per written frame, untraced and under tokenscope, a bpftrace
   uprobe script and strace (the alternatives a user has today). Modes are interleaved over
   several rounds and the median is reported, because this machine is shared and noisy.
2. tokenscope's own CPU and peak RSS at about 10,000 frames/s (100 streams at 100 frames/s),
   and with 1,000 concurrent open streams at the same frame rate. Records lost in every traced
   run are printed with each section. With BENCH_BASE, each configuration runs this build and
   the base side by side on the same server, BENCH_ROUNDS rounds, medians.
3. The exporters' cost: tokenscope's CPU at 10,000 frames/s with each exporter alone and with
   all of them, each run beside a tokenscope without exporters attached to the same server at
   the same time, over BENCH_EXPORTER_ROUNDS rounds.
4. The cost of the CUDA probes per GPU step: cudaloop issues prefill-shaped steps (40 kernel
   launches and a stream sync) and decode-shaped steps (a graph launch, a device-to-host copy and
   a sync) on the real CUDA runtime (no GPU needed: the calls fail but are entered), untraced and
   traced.
5. Device times (the CUPTI injection library): the same loop on the stand-in runtime's modelled
   device (20 us kernels, a 500 us graph, 10 us copies) and the stand-in CUPTI, plain (no
   library), with the library injected and no tracer, and injected with tokenscope attached
   (uprobes, USDT probes, device times) at its default (--device-times sampled: eager kernels
   1 s in 10 s) and with --device-times all: steps per second as a ratio to plain, and the
   issuing thread's CPU per step; from the traced runs, the library's own time reading
   records (its summary line) and the BPF time per probe call (bpf_stats of ts_cupti_runs).
   The stand-in writes CUPTI's records itself: real CUPTI's own cost is not in these figures
   (the GPU check measures it, and CUPTI's overhead records name it).
6. The cost of a traced TLS write: writeloop --tls writes 100,000 frames of 287 bytes, one
   SSL_write each (OpenSSL makes the write syscall inside the call), untraced and traced; the
   writer's CPU per write, and from kernel.bpf_stats the BPF time per write of the TLS uprobe
   programs and of the syscall programs. The uprobes' trap and single-step are not in
   bpf_stats: the writer's CPU shows them. The same with Go's crypto/tls (tests/bench/
   gowriteloop.go, built with the Debian Go toolchain when it is there): one (*tls.Conn).Write
   per frame, probed at its entry and at each RET, its socket write inside; the CPU is the
   writer process's (goroutines move between threads).
7. The cost of a piece of a write: writeloop --pieces P sends frames of 66 bytes in Node's
   shape (chunk size, CRLF, frame, CRLF) P / 4 at a time, one writev of P iovecs each, P = 4,
   64 and 1,024 (the kernel's IOV_MAX); the writer's CPU per writev traced minus untraced, and
   what each piece past 4 adds. BENCH_BASE runs beside this build (a build that walked 64
   iovecs copies no more at 1,024).
8. The CUPTI library's record reading per record kind (tests/bench/recordcost.c: its reader
   and run maker on records laid out as CUPTI writes them): an eager kernel with its launch's
   API record, a graph replay with its API record, a copy, an API record alone, an overhead
   record, and a decode step's buffer (four records, made into a run and handed on).
9. Burst loss with default settings: one writer at 200,000 writes/s for 1 s (writeloop --rate)
   and 1,000 streams at 50 tokens/s for 5 s, this build and BENCH_BASE interleaved: the records
   each round lost and the ring buffer's peak (the summary's cost line).

Environment:
  BENCH_SECTIONS          sections to run, e.g. "3" or "0 2"; default all (0 to 9)
  BENCH_ROUNDS            rounds of the interleaved sections (default 3)
  BENCH_EXPORTER_ROUNDS   rounds of section 3 (default 5: its differences are small)
  BENCH_BASE              another tokenscope binary (an older build): sections 0, 1, 2, 3,
                          6, 7 and 9 measure it too, side by side with this build
  OUTPUT                  the build directory (default .output)
"""
import atexit
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from lib import bpf_prog_counters  # noqa: E402

OUT = os.environ.get("OUTPUT", ".output")
TS = os.path.join(OUT, "tokenscope")
RS = os.path.join(OUT, "refserver")
WL = os.path.join(OUT, "writeloop")
CL = os.path.join(OUT, "cudaloop")
PC = os.path.join(OUT, "peekcost")
SL = os.path.join(OUT, "sysloop")
# tokenscope with syscall programs that return at once (Makefile: BENCH_TOOLS): the hooks alone.
NOOP_TS = os.path.join(OUT, "bench", "tokenscope-noop")
CUDART = "/usr/local/cuda/lib64/libcudart.so.13"
GT = os.path.join(OUT, "gtclient")
HZ = os.sysconf("SC_CLK_TCK")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
EXPORTER_ROUNDS = int(os.environ.get("BENCH_EXPORTER_ROUNDS", "5"))
SECTIONS = {int(x) for x in os.environ.get("BENCH_SECTIONS", "0 1 2 3 4 5 6 7 8 9").replace(",", " ").split()}
RECORDCOST = os.path.join(OUT, "bench", "recordcost")
CUPTI_LIB = os.path.join(OUT, "libtokenscope_cupti.so")
STANDIN = os.path.join(OUT, "standin")
BASE_TS = os.environ.get("BENCH_BASE")
# After a steady run's client returns: 50 drain periods of the tracer.
SETTLE_S = 0.5
# Every process started here, killed at exit whatever happened: a tracer left behind (a
# bpftrace uprobe on libc write) would slow every process on the machine.
SPAWNED = []


def spawn(*args, **kw):
    p = subprocess.Popen(*args, **kw)
    SPAWNED.append(p)
    return p


@atexit.register
def kill_spawned():
    for p in SPAWNED:
        if p.poll() is None:
            p.kill()
            p.wait()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def task_cpu_ns(pid):
    """CPU time of every thread of pid, in ns (schedstat): /proc/PID/stat counts clock ticks,
    which at 3 % of a core over 10 s is a resolution of about 3 %."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that just exited
    return total


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(field + r":\s+(\d+) kB", f.read())
    return int(m.group(1)) if m else 0


def wait_for(path, pattern, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with open(path) as f:
                text = f.read()
            if re.search(pattern, text):
                return text
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {pattern!r} in {path}")


class Server:
    def __init__(self, tmp, *args):
        self.log = os.path.join(tmp, "server.log")
        self.p = spawn([RS, "--port", "0", "--stats", *args],
                                  stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        self.port = int(wait_for(self.log, r"listening on \S+:(\d+)").split(":")[-1])

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        self.p.wait(10)
        text = open(self.log).read()
        m = re.search(r"frames_sent=(\d+)", text)
        return int(m.group(1)) if m else 0


class Tracer:
    """tokenscope, bpftrace or strace attached to pid; None for the untraced run."""

    def __init__(self, kind, pid, tmp, extra=(), binary=TS, tag=""):
        if kind == "BENCH_BASE":
            # The other build, traced the same way, as one more mode of a section.
            kind, binary, tag = "tokenscope", BASE_TS, tag + "-base"
        self.kind, self.p = kind, None
        self.err = os.path.join(tmp, f"{kind}{tag}.err")
        if kind == "untraced":
            return
        if kind == "tokenscope":
            cmd, ready = [binary, "trace", "-p", str(pid), "--json", *extra], "attached"
        elif kind == "bpftrace":
            # What a user writes today: uprobes on libc's write paths, filtered by pid,
            # keeping a per-thread timestamp and a byte histogram.
            libc = "/lib/x86_64-linux-gnu/libc.so.6"
            prog = "".join(
                f"uprobe:{libc}:{fn} /pid == {pid}/ {{ @ts[tid] = nsecs; @bytes = hist(arg2); }} "
                for fn in ("write", "writev", "send", "sendto"))
            cmd, ready = ["bpftrace", "-e", prog], "Attaching"
        elif kind == "strace":
            cmd = ["strace", "-f", "-qq", "-e", "trace=write,writev,sendto,sendmsg",
                   "-o", "/dev/null", "-p", str(pid)]
            ready = None
        err = open(self.err, "w")
        # bpftrace says "Attaching N probes" on stdout; the others talk on stderr.
        self.p = spawn(cmd, stdout=err if kind == "bpftrace" else subprocess.DEVNULL,
                                  stderr=err)
        if ready:
            wait_for(self.err, ready, 60)
        else:
            time.sleep(1.0)
        self.cpu0 = cpu_seconds(self.p.pid)
        self.cpu0_ns = task_cpu_ns(self.p.pid)

    def bpf_stats(self):
        """run_time_ns and run_cnt of each BPF program this tracer holds, by name."""
        return bpf_prog_counters(self.p.pid)

    def stop(self):
        if not self.p:
            return {}
        cpu = cpu_seconds(self.p.pid) - self.cpu0
        cpu_ns = task_cpu_ns(self.p.pid) - self.cpu0_ns
        rss = status_kib(self.p.pid, "VmHWM")
        anon = status_kib(self.p.pid, "RssAnon")
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            # Seen once with bpftrace; the figures of the run are already taken.
            print(f"   ({self.kind} did not exit 30 s after SIGINT: killed)", flush=True)
            self.p.kill()
            self.p.wait()
        info = {"cpu_s": cpu, "cpu_ns": cpu_ns, "rss_kib": rss, "anon_kib": anon}
        text = open(self.err).read()
        m = re.search(r"lost: (\d+) records", text)
        if m:
            info["lost_records"] = int(m.group(1))
        m = re.search(r"ring peak (\d+) %", text)
        if m:
            info["ring_peak_pct"] = int(m.group(1))
        return info


def client(port, n, c, tokens, tmp, extra=()):
    out = os.path.join(tmp, "client.json")
    t0 = time.monotonic()
    subprocess.run([GT, "--port", str(port), "-n", str(n), "-c", str(c), "--max-tokens",
                    str(tokens), "--timeout-s", "120", "-o", out, *extra],
                   check=True, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    rows = [json.loads(l) for l in open(out) if l.strip()]
    frames = sum(r["frames"] for r in rows)
    bad = sum(r["outcome"] != "ok" for r in rows)
    return frames, wall, bad


SYSCALL_PROGS = ("ts_sys_enter", "ts_sys_exit")


def writeloop_run(kind, tmp, frames=200000, extra=(), progs=SYSCALL_PROGS, binary=TS, wl_bin=None):
    wl = spawn([wl_bin or WL, "-n", str(frames), *extra], stdin=subprocess.PIPE,
               stdout=subprocess.PIPE, text=True)
    pid = int(wl.stdout.readline().split()[1])
    tr = Tracer(kind, pid, tmp, binary=binary)
    wl.stdin.write("go\n")
    wl.stdin.flush()
    line = wl.stdout.readline()
    stats = tr.bpf_stats() if kind == "tokenscope" else {}
    info = tr.stop()
    wl.communicate("exit\n", timeout=120)
    if stats:
        # Everything the syscall programs ran for, on every CPU and for every process, while
        # this run lasted, per traced write: the machine-wide cost of tracing one write.
        run_ns = sum(stats[n][0] for n in progs if n in stats)
        runs = sum(stats[n][1] for n in progs if n in stats)
        info["bpf_ns_per_write"] = run_ns / frames
        info["bpf_ns_per_call"] = run_ns / max(runs, 1)
        info["bpf_ns_by_prog"] = {n: stats[n][0] / frames for n in progs if n in stats}
    vals = dict(kv.split("=") for kv in line.split())
    # The writer's own times; info's cpu_ns is the tracer's and must not replace them.
    return {**info, "cpu_ns": float(vals["cpu_ns_per_write"]),
            "wall_ns": float(vals["wall_ns_per_write"])}


def cudaloop_run(kind, tmp, steps=2000):
    """cudaloop on the toolkit's runtime: kind untraced, tokenscope (traced), or bystander (not
    traced while tokenscope traces another cudaloop on the same library file); returns the
    issuing thread's CPU microseconds per step (prefill, decode)."""
    other = tr_other = None
    if kind == "bystander":
        other = spawn([CL, "--cudart", CUDART, "-n", "1"], stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, text=True)
        other_pid = int(other.stdout.readline().split()[1])
        tr_other = Tracer("tokenscope", other_pid, tmp, tag="-other")
        wait_for(tr_other.err, "tracing CUDA calls", 20)
    cl = spawn([CL, "--cudart", CUDART, "-n", str(steps)], stdin=subprocess.PIPE,
               stdout=subprocess.PIPE, text=True)
    pid = int(cl.stdout.readline().split()[1])
    tr = Tracer(kind if kind != "bystander" else "untraced", pid, tmp)
    if kind == "tokenscope":
        wait_for(tr.err, "tracing CUDA calls", 20)
    cl.stdin.write("go\n")
    cl.stdin.flush()
    line = cl.stdout.readline()
    tr.stop()
    cl.communicate("exit\n", timeout=120)
    if other:
        tr_other.stop()
        other.communicate("exit\n", timeout=60)
    vals = dict(kv.split("=") for kv in line.split())
    return float(vals["prefill_us_per_step"]), float(vals["decode_us_per_step"])


def pin_apart(pid):
    """writeloop's writer on CPU 0 and its reader on CPU 1. On one CPU the reader, woken by each
    write, preempts the writer at the first preemption point, which can fall between bpf_stats'
    two clock reads around a program, and its whole read is then charged to the program:
    programs that return at once were charged about 1 us per write that way on this VM."""
    if (os.cpu_count() or 1) < 2:
        return
    os.sched_setaffinity(pid, {0})
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        for child in f.read().split():
            os.sched_setaffinity(int(child), {1})


def bpf_cost_run(tmp, frames=100000, binary=TS, extra=(), writes=None, lost=None,
                 tracer_extra=()):
    """BPF run time per write of the syscall programs (bpf_stats), with writeloop traced, minus
    the same with tokenscope tracing an idle process instead; writer and reader on separate
    CPUs (pin_apart). writes: how many writes the frames make (writeloop --pieces); lost, a
    list: the traced run's records lost are appended (a lost record skips the ring's copy)."""
    per = {}
    writes = writes or frames
    for traced in (True, False):
        wl = spawn([WL, "-n", str(frames), *extra], stdin=subprocess.PIPE,
                   stdout=subprocess.PIPE, text=True)
        pid = int(wl.stdout.readline().split()[1])
        pin_apart(pid)
        idle = spawn(["sleep", "600"])
        tr = Tracer("tokenscope", pid if traced else idle.pid, tmp, tracer_extra,
                    binary=binary)
        s0 = tr.bpf_stats()
        wl.stdin.write("go\n")
        wl.stdin.flush()
        wl.stdout.readline()
        s1 = tr.bpf_stats()
        info = tr.stop()
        if traced and lost is not None:
            lost.append(info.get("lost_records"))
        wl.communicate("exit\n", timeout=120)
        idle.kill()
        per[traced] = {n: ((s1[n][0] - s0[n][0]) / writes, s1[n][1] - s0[n][1])
                       for n in ("ts_sys_enter", "ts_sys_exit")}
        if not traced:
            # The socket wake-up hook runs for every socket on the machine; here for the
            # untraced writer's peer, where it stops at a map miss.
            n = "ts_rx_ready"
            wake_ns = (s1[n][0] - s0[n][0]) / max(s1[n][1] - s0[n][1], 1)
    added = {n: per[True][n][0] - per[False][n][0] for n in per[True]}
    # Every syscall on the machine runs both programs; untraced ones stop at the filter.
    runs = per[False]["ts_sys_enter"][1]
    filter_ns = sum(per[False][n][0] for n in per[False]) * writes / max(runs, 1)
    return added, filter_ns, wake_ns


def throughput_run(kind, tmp):
    srv = Server(tmp, "--token-ms", "0")
    tr = Tracer(kind, srv.p.pid, tmp)
    cpu0 = cpu_seconds(srv.p.pid)
    frames, wall, bad = client(srv.port, 8, 8, 20000, tmp)
    srv_cpu = cpu_seconds(srv.p.pid) - cpu0
    info = tr.stop()
    sent = srv.stop()
    return {"fps": frames / wall, "cpu_per_frame_us": srv_cpu / max(sent, 1) * 1e6,
            "frames": frames, "bad": bad, **info}


def steady_run(streams, token_ms, seconds, tmp, extra=(), binary=TS):
    """tokenscope's own cost while `streams` streams each send a frame every token_ms."""
    srv = Server(tmp, "--token-ms", str(token_ms))
    tr = Tracer("tokenscope", srv.p.pid, tmp, extra, binary=binary)
    tokens = int(seconds * 1000 / token_ms)
    frames, wall, bad = client(srv.port, streams, streams, tokens, tmp)
    # Every stream ends at about the same time, and what tokenscope does for a finished request
    # (the exporters' per-request work) happens after its next drain: read its CPU once that is
    # done, not as the client returns.
    time.sleep(SETTLE_S)
    info = tr.stop()
    srv.stop()
    return {"fps": frames / wall, "cpu_pct": 100 * info["cpu_ns"] / 1e9 / wall,
            "rss_mib": info["rss_kib"] / 1024, "anon_mib": info["anon_kib"] / 1024,
            "lost": info.get("lost_records"), "peak": info.get("ring_peak_pct"), "bad": bad}


def have(cmd):
    return subprocess.run(["which", cmd], capture_output=True).returncode == 0


def section_writes(tmp, kinds):
    print(f"0. cost per traced write: 200000 frames of 287 bytes, one write() each, {ROUNDS} "
          f"rounds interleaved, medians")
    wl = {k: [] for k in kinds}
    for r in range(ROUNDS):
        for k in kinds:
            wl[k].append(writeloop_run(k, tmp))
    base_cpu = statistics.median(x["cpu_ns"] for x in wl["untraced"])
    base_wall = statistics.median(x["wall_ns"] for x in wl["untraced"])
    print(f"   {'mode':10s} {'CPU ns/write':>12s} {'added us/write':>15s} {'writes/s ratio':>15s}")
    for k in kinds:
        cpu = statistics.median(x["cpu_ns"] for x in wl[k])
        wall = statistics.median(x["wall_ns"] for x in wl[k])
        print(f"   {k:10s} {cpu:12.0f} {(cpu - base_cpu) / 1000:15.2f} {base_wall / wall:15.3f}",
              flush=True)
    print(f"   tokenscope records lost per round: "
          f"{[x.get('lost_records') for x in wl['tokenscope']]}")
    print("   kernel.bpf_stats, ns of BPF program time per write, traced minus tracing another "
          "process (what the traced path adds over the filter every syscall pays; writer and reader "
          "on separate CPUs), and ns per "
          f"syscall of an untraced process; {ROUNDS} rounds interleaved, medians:")
    builds = cost_builds()
    costs = {name: [] for name, _ in builds}
    for _ in range(ROUNDS):
        for name, binary in builds:
            costs[name].append(bpf_cost_run(tmp, binary=binary))
    print(f"   {'build':34s} {'sys_enter':>9s} {'sys_exit':>9s} {'both':>6s} {'filter/syscall':>15s} "
          f"{'socket wake-up':>15s}")
    for name, _ in builds:
        c = costs[name]
        print(f"   {name:34s} {statistics.median(a['ts_sys_enter'] for a, _, _ in c):9.0f} "
              f"{statistics.median(a['ts_sys_exit'] for a, _, _ in c):9.0f} "
              f"{statistics.median(sum(a.values()) for a, _, _ in c):6.0f} "
              f"{statistics.median(f for _, f, _ in c):15.0f} "
              f"{statistics.median(w for _, _, w in c):15.0f}", flush=True)
    if any(name == NOOP_NAME for name, _ in builds):
        print("   (the hooks alone: programs that return at once, charged by bpf_stats at the same "
              "tracepoints; a figure above it by less than the rounds' spread is the hooks', not "
              "the programs' work)")
    section_bystander(tmp, builds)
    # tests/peekcost.c loads the programs itself with discovery on and off and attaches
    # nothing: tokenscope --all would trace whatever else streams on the machine meanwhile.
    print(f"   passive discovery (--all), sys_enter time per write of an untraced writeloop, "
          f"discovery on minus off, {ROUNDS} rounds interleaved, medians:")
    for mode, what in (([], "chunks that are no frames (--plain), every untraced writer"),
                       (["--sse"], "SSE frames, until the process is attached (<= 0.25 s)")):
        out = subprocess.run([PC, "-r", str(ROUNDS), "--writeloop", WL, *mode],
                             capture_output=True, text=True)
        m = re.search(r"added_ns_per_write=([\d.-]+) on_ns_per_run=([\d.]+) "
                      r"off_ns_per_run=([\d.]+)", out.stdout)
        if not m:
            print(f"   peekcost failed: {out.stderr.strip()[-200:]}")
            continue
        print(f"   {float(m.group(1)):6.0f} ns per write of {what}; sys_enter "
              f"{float(m.group(2)):.0f} ns per run with discovery, {float(m.group(3)):.0f} without",
              flush=True)


NOOP_NAME = "hooks alone (tokenscope-noop)"
# This build with kernel.bpf_stats_enabled on (--self-stats): what the kernel's counting adds.
STATS_ON_NAME = "this build, bpf_stats on"


def cost_builds():
    """The tokenscope builds section 0 measures: this one, BENCH_BASE, and the hooks alone."""
    builds = [("this build", TS)]
    if BASE_TS:
        builds.append(("BENCH_BASE", BASE_TS))
    if os.access(NOOP_TS, os.X_OK):
        builds.append((NOOP_NAME, NOOP_TS))
    return builds


def set_bpf_stats(on):
    with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
        f.write("1" if on else "0")


def section_bystander(tmp, builds):
    """What a process nobody traces pays per syscall while tokenscope traces another one:
    sysloop's CPU per syscall with no tracer loaded and with each build tracing an idle
    process, kernel.bpf_stats off (its clock reads would add to the figure)."""
    # The last mode is this build with bpf_stats on, as --self-stats runs: what counting costs.
    modes = [("no tracer", None)] + builds + [(STATS_ON_NAME, TS)]
    print(f"   a process nobody traces, CPU per syscall (sysloop; bpf_stats off), no tracer against "
          f"tokenscope tracing another process, {ROUNDS} rounds interleaved, medians:")
    runs = {(m, k): [] for m, _ in modes for k in ("getppid", "socket")}
    set_bpf_stats(False)
    try:
        for _ in range(ROUNDS):
            for name, binary in modes:
                set_bpf_stats(name == STATS_ON_NAME)
                idle = spawn(["sleep", "600"])
                tr = Tracer("tokenscope", idle.pid, tmp, binary=binary) if binary else None
                for kind, n in (("getppid", 1000000), ("socket", 250000)):
                    out = subprocess.run([SL, "-n", str(n), kind], capture_output=True, text=True,
                                         check=True).stdout
                    runs[(name, kind)].append(float(re.search(r"cpu_ns_per_call=([\d.]+)", out)[1]))
                if tr:
                    tr.stop()
                idle.kill()
    finally:
        set_bpf_stats(True)
    for kind, what in (("getppid", "getppid (not followed)"),
                       ("socket", "1-byte socket write/read (followed to the process test)")):
        base = statistics.median(runs[("no tracer", kind)])
        cells = [f"no tracer {base:.0f} ns"]
        for name, _ in builds + [(STATS_ON_NAME, TS)]:
            v = statistics.median(runs[(name, kind)])
            cells.append(f"{name} {v:.0f} ns ({v - base:+.0f})")
        print(f"   {what}: " + ", ".join(cells), flush=True)


def section_burst(tmp):
    """Records lost at a burst an engine can make, with default settings: one writer at 200,000
    writes/s for 1 s (writeloop --rate), and 1,000 streams at 50 tokens/s for 5 s; this build
    and BENCH_BASE interleaved, each round's loss and ring peak (the summary's cost line)."""
    builds = [("this build", TS)] + ([("BENCH_BASE", BASE_TS)] if BASE_TS else [])
    print(f"9. burst loss, default settings, {ROUNDS} rounds interleaved: records lost per round "
          f"(ring peak)", flush=True)
    res = {(n, w): [] for n, _ in builds for w in ("writer", "streams")}
    for _ in range(ROUNDS):
        for name, binary in builds:
            wl = spawn([WL, "-n", "200000", "--rate", "200000"], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True)
            pid = int(wl.stdout.readline().split()[1])
            tr = Tracer("tokenscope", pid, tmp, binary=binary, tag="-burst")
            wl.stdin.write("go\n")
            wl.stdin.flush()
            line = wl.stdout.readline()
            time.sleep(SETTLE_S)
            info = tr.stop()
            wl.communicate("exit\n", timeout=120)
            wall = float(dict(kv.split("=") for kv in line.split())["wall_ns_per_write"])
            res[(name, "writer")].append(
                f"{info.get('lost_records')} ({info.get('ring_peak_pct')} %, "
                f"{1e9 / wall:,.0f} writes/s)")
            r = steady_run(1000, 20, 5, tmp, binary=binary)
            res[(name, "streams")].append(f"{r['lost']} ({r['peak']} %, {r['fps']:,.0f} frames/s)")
    for name, _ in builds:
        print(f"   {name}: one writer at 200,000 writes/s for 1 s: "
              f"{'; '.join(res[(name, 'writer')])}", flush=True)
        print(f"   {name}: 1,000 streams at 50 tokens/s for 5 s: "
              f"{'; '.join(res[(name, 'streams')])}", flush=True)


def section_throughput(tmp, kinds):
    results = {k: [] for k in kinds}
    print(f"1. full-speed streaming, 8 concurrent streams x 20000 frames, {ROUNDS} rounds "
          f"interleaved, medians")
    for r in range(ROUNDS):
        for k in kinds:
            res = throughput_run(k, tmp)
            results[k].append(res)
            print(f"   round {r + 1} {k:10s} {res['fps']:10.0f} frames/s  "
                  f"server {res['cpu_per_frame_us']:6.2f} us CPU/frame", flush=True)
    base = results["untraced"]
    base_fps = statistics.median(x["fps"] for x in base)
    base_cpu = statistics.median(x["cpu_per_frame_us"] for x in base)
    print(f"   {'mode':10s} {'frames/s':>10s} {'ratio':>6s} {'added us/write':>15s}")
    for k in kinds:
        fps = statistics.median(x["fps"] for x in results[k])
        cpu = statistics.median(x["cpu_per_frame_us"] for x in results[k])
        print(f"   {k:10s} {fps:10.0f} {fps / base_fps:6.3f} {cpu - base_cpu:15.2f}")
    lost = [x.get("lost_records") for x in results["tokenscope"]]
    print(f"   tokenscope records lost per round: {lost}")


def section_own_cost(tmp):
    if BASE_TS:
        return section_own_cost_vs_base(tmp)
    print("2. tokenscope's own cost (CPU % of one core, peak RSS), 10 s each")
    for streams, token_ms in ((100, 10), (1000, 100)):
        res = steady_run(streams, token_ms, 10, tmp)
        print(f"   {streams:5d} streams at {1000 // token_ms:3d} frames/s each: "
              f"{res['fps']:7.0f} frames/s, tokenscope CPU {res['cpu_pct']:5.2f} %, "
              f"peak RSS {res['rss_mib']:5.1f} MiB (of which heap {res['anon_mib']:4.1f} MiB; the "
              f"rest is code, libraries and the ring buffer, which is mapped twice), "
              f"records lost {res['lost']}, "
              f"client errors {res['bad']}", flush=True)


def section_own_cost_vs_base(tmp):
    """This build against BENCH_BASE, both attached to one server at once (which attaches
    first alternates), so that the machine's drift between runs does not enter the ratio."""
    print(f"2. tokenscope's own cost (CPU % of one core, peak RSS), this build and {BASE_TS} "
          f"(BENCH_BASE) attached to the same server at once, 10 s, {ROUNDS} rounds, medians")
    for streams, token_ms in ((100, 10), (1000, 100)):
        cpu = {0: [], 1: []}
        rss = {0: [], 1: []}
        lost = set()
        for r in range(ROUNDS):
            order = [0, 1] if r % 2 == 0 else [1, 0]
            binaries = [TS, BASE_TS]
            got, l, kib = paired_run(tmp, [([], binaries[i]) for i in order], streams, token_ms)
            for k, i in enumerate(order):
                cpu[i].append(got[k])
                rss[i].append(kib[k] / 1024)
            lost.update(l)
        c = [statistics.median(cpu[i]) for i in (0, 1)]
        m = [statistics.median(rss[i]) for i in (0, 1)]
        ratio = sorted(a / b for a, b in zip(cpu[0], cpu[1]))
        print(f"   {streams:5d} streams at {1000 // token_ms:3d} frames/s each: CPU "
              f"{c[0]:5.2f} % (this build) vs {c[1]:5.2f} % (base), ratio {c[0] / c[1]:.3f} "
              f"(rounds {ratio[0]:.3f} to {ratio[-1]:.3f}); peak RSS {m[0]:5.1f} vs "
              f"{m[1]:5.1f} MiB; records lost {sorted(lost, key=str)}", flush=True)


def paired_run(tmp, tracers, streams=100, token_ms=10, seconds=10):
    """Several tokenscope instances attached to one server at once, one per (extra arguments,
    binary): they see the same frames at the same moments on the same machine, so their CPU
    compares without the drift of a shared machine between runs. Returns each one's CPU (all
    its threads) as % of one core over the client's run, the records each lost, and each one's
    peak RSS in KiB."""
    srv = Server(tmp, "--token-ms", str(token_ms))
    trs = [Tracer("tokenscope", srv.p.pid, tmp, extra, binary, tag=i)
           for i, (extra, binary) in enumerate(tracers)]
    frames, wall, bad = client(srv.port, streams, streams, int(seconds * 1000 / token_ms), tmp)
    time.sleep(SETTLE_S)  # as in steady_run: the end of every request is processed
    # Every CPU is read before any tracer is stopped (a stopping one prints its summary).
    cpu = [task_cpu_ns(tr.p.pid) - tr.cpu0_ns for tr in trs]
    infos = [tr.stop() for tr in trs]
    srv.stop()
    if bad:
        print(f"   ({bad} client errors)")
    return ([100 * c / 1e9 / wall for c in cpu], [i.get("lost_records") for i in infos],
            [i["rss_kib"] for i in infos])


def section_exporters(tmp):
    print(f"3. exporters: tokenscope's CPU (all its threads, % of one core) at 10,000 frames/s "
          f"(100 streams x 100/s, 10 s) with each exporter alone, with all four, and with none "
          f"(A/A), each run beside a tokenscope without exporters attached to the same server at "
          f"the same time; "
          f"{EXPORTER_ROUNDS} rounds, medians of the differences"
          + (f"; the same with {BASE_TS} (BENCH_BASE)" if BASE_TS else ""))
    recv_dir = os.path.join(tmp, "otlp")
    os.makedirs(recv_dir, exist_ok=True)
    port_file = os.path.join(tmp, "otlp.port")
    spawn(["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "..", "tests", "otlp",
                                            "receiver.py"), "--dir", recv_dir, "--port-file",
           port_file], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(port_file, r"\d", 10)
    otlp_port = open(port_file).read().strip()
    exporters = {
        "--listen": ["--listen", "127.0.0.1:0"],
        "--timeline": ["--timeline", os.path.join(tmp, "timeline.json")],
        "--alert": ["--alert", "ttft.p99 > 5s for 3m"],
        # Every request is faster than that: spans sampled at the default ratio, as in use.
        "--otlp": ["--otlp", f"http://127.0.0.1:{otlp_port}/v1/traces", "--slow-ttft", "1s"],
    }
    exporters["all four"] = [a for args in exporters.values() for a in args]
    # Two tracers without exporters: how far apart the two sides of a pair are anyway.
    exporters = {"none (A/A)": [], **exporters}
    binaries = [("this build", TS)] + ([("BENCH_BASE", BASE_TS)] if BASE_TS else [])
    runs = [(m, b) for b in binaries for m in exporters if m != "none (A/A)" or b == binaries[0]]
    res = {run: [] for run in runs}  # (cpu without, cpu with) per round
    lost = set()
    for r in range(EXPORTER_ROUNDS):
        for mode, (bname, binary) in runs:
            pair = [([], binary), (exporters[mode], binary)]
            # Which one attaches first alternates between rounds.
            if r % 2:
                pair.reverse()
            cpu, l, _ = paired_run(tmp, pair)
            if r % 2:
                cpu.reverse()
            res[(mode, (bname, binary))].append(tuple(cpu))
            lost.update(l)
        print(f"   round {r + 1}: " + ", ".join(
            f"{m}{'' if len(binaries) == 1 else ' (' + b[0] + ')'} "
            f"{res[(m, b)][-1][0]:.2f} -> {res[(m, b)][-1][1]:.2f}" for m, b in runs),
            flush=True)
    for bname, binary in binaries:
        if len(binaries) > 1:
            print(f"   {bname}: {binary}")
        for mode in exporters:
            if (mode, (bname, binary)) not in res:
                continue
            pairs = res[(mode, (bname, binary))]
            off = statistics.median(a for a, _ in pairs)
            on = statistics.median(b for _, b in pairs)
            diff = statistics.median(b - a for a, b in pairs)
            pct = sorted(100 * (b - a) / a for a, b in pairs)
            line = (f"   {mode:11s} {off:5.2f} -> {on:5.2f} % of a core: {diff:+.2f} points, "
                    f"{100 * diff / off:+5.1f} % (rounds {pct[0]:+.1f} to {pct[-1]:+.1f} %)")
            if mode == "all four":
                line += " (goal <= +10 %)"
            print(line)
    print(f"   records lost: {sorted(lost, key=str)}")


def section_cuda(tmp):
    if not os.path.exists(CUDART):
        print(f"4. CUDA probes: skipped, {CUDART} not installed")
        return
    kinds = ("untraced", "tokenscope", "bystander")
    print(f"4. CUDA probes: cost per GPU step on {CUDART}, 2000 steps of each kind, "
          f"{ROUNDS} rounds interleaved, medians (host CPU time of the issuing thread); "
          f"bystander: a process tokenscope does not trace, on the same library file, while it "
          f"traces another")
    runs = {k: [] for k in kinds}
    for _ in range(ROUNDS):
        for k in kinds:
            runs[k].append(cudaloop_run(k, tmp))
    med = {k: (statistics.median(p for p, _ in runs[k]), statistics.median(d for _, d in runs[k]))
           for k in kinds}
    base_p, base_d = med["untraced"]
    # probe hits: a prefill step = 40 launches + sync entry + sync return; a decode step =
    # graph launch + copy + sync entry + sync return.
    for i, (what, hits) in enumerate((("prefill step (40 launches + sync)", 42),
                                      ("decode step (graph + copy + sync)", 4))):
        base = med["untraced"][i]
        per_hit = [(r[i] - base) / hits for r in runs["tokenscope"]]
        print(f"   {what}: {base:7.2f} -> {med['tokenscope'][i]:7.2f} us, "
              f"+{med['tokenscope'][i] - base:.2f} us per step, "
              f"{(med['tokenscope'][i] - base) / hits:.2f} us per probe hit "
              f"(rounds {min(per_hit):.2f} to {max(per_hit):.2f}); bystander "
              f"{med['bystander'][i]:.2f} us ({med['bystander'][i] - base:+.2f})")


def device_run(mode, tmp, steps=1000, costs=None):
    """cudaloop on the modelled device: mode plain, injected, traced (sampled device times) or
    traced-all; returns per-step CPU and wall microseconds (prefill, decode). costs, a list:
    a traced run appends (library ns per record, BPF ns per probe call)."""
    env = dict(os.environ, LD_LIBRARY_PATH=STANDIN)
    if mode != "plain":
        env["CUDA_INJECTION64_PATH"] = CUPTI_LIB
    else:
        env["TS_STUB_DEVICE"] = "1"  # the modelled device, no library
    cl = spawn([CL, "--cudart", os.path.join(STANDIN, "libcudart.so.13"), "-n", str(steps)],
               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    pid = int(cl.stdout.readline().split()[1])
    tr = None
    if mode.startswith("traced"):
        tr = Tracer("tokenscope", pid, tmp, ("--device-times", "all" if mode == "traced-all"
                                             else "sampled"), tag="-" + mode)
        wait_for(tr.err, "device times of pid", 20)
        time.sleep(0.5)  # collection turns on within the library's poll period
        b0 = tr.bpf_stats().get("ts_cupti_runs", (0, 0))
    cl.stdin.write("go\n")
    cl.stdin.flush()
    line = cl.stdout.readline()
    if tr:
        time.sleep(0.3)  # the last heartbeat
        b1 = tr.bpf_stats().get("ts_cupti_runs", (0, 0))
        tr.stop()
        m = re.search(r"device times cost: \d+ buffers read in [\d.]+ ms \([\d.]+ us per "
                      r"buffer, (\d+) ns per record\)", open(tr.err).read())
        if costs is not None and m:
            calls = b1[1] - b0[1]
            costs.append((int(m.group(1)), (b1[0] - b0[0]) / calls if calls else 0.0))
    cl.communicate("exit\n", timeout=120)
    v = {k: float(x) for k, x in (kv.split("=") for kv in line.split())}
    return (v["prefill_us_per_step"], v["decode_us_per_step"], v["prefill_wall_us_per_step"],
            v["decode_wall_us_per_step"])


def section_device(tmp):
    if not os.path.exists(CUPTI_LIB):
        print(f"5. device times: skipped, {CUPTI_LIB} not built (no CUPTI headers)")
        return
    modes = ("plain", "injected", "traced", "traced-all")
    print(f"5. device times (CUPTI injection library, stand-in CUPTI and modelled device), 1000 "
          f"steps of each kind, {ROUNDS} rounds interleaved, medians; traced: --device-times "
          f"sampled (the default), traced-all: --device-times all")
    runs = {m: [] for m in modes}
    costs = {m: [] for m in modes}
    for _ in range(ROUNDS):
        for m in modes:
            runs[m].append(device_run(m, tmp, costs=costs[m]))
    med = {m: [statistics.median(r[i] for r in runs[m]) for i in range(4)] for m in modes}
    print(f"   {'mode':9s} {'prefill CPU us':>14s} {'decode CPU us':>13s} {'prefill steps/s':>16s} "
          f"{'decode steps/s':>15s} {'ratio':>6s}")
    base = med["plain"]
    for m in modes:
        p_cpu, d_cpu, p_wall, d_wall = med[m]
        ratio = (base[2] + base[3]) / (p_wall + d_wall)
        print(f"   {m:9s} {p_cpu:14.2f} {d_cpu:13.2f} {1e6 / p_wall:16.1f} {1e6 / d_wall:15.1f} "
              f"{ratio:6.3f}")
    print(f"   injected, no tracer: {med['injected'][0] - base[0]:+.2f} us CPU per prefill step, "
          f"{med['injected'][1] - base[1]:+.2f} per decode step")
    for m in ("traced", "traced-all"):
        if costs[m]:
            print(f"   {m}: the library read records at {statistics.median(c[0] for c in costs[m]):.0f} "
                  f"ns each (stand-in CUPTI's records); BPF "
                  f"{statistics.median(c[1] for c in costs[m]):.0f} ns per probe call "
                  f"(ts_cupti_runs, the copy of up to 32 runs)")


def section_records(tmp):
    if not os.path.exists(RECORDCOST):
        print(f"8. CUPTI record reading: skipped, {RECORDCOST} not built (no CUPTI headers)")
        return
    out = subprocess.run([RECORDCOST, str(max(ROUNDS, 3))], capture_output=True, text=True,
                         check=True).stdout
    v = {k: float(x) for k, x in (line.split("=") for line in out.split())}
    print(f"8. CUPTI record reading in the library (tests/bench/recordcost.c), CPU ns, best of "
          f"{max(ROUNDS, 3)} rounds of 200,000:")
    print(f"   eager kernel + its launch record {v['kernel_with_launch_ns']:6.1f}   "
          f"graph replay + its launch record {v['graph_with_launch_ns']:6.1f}")
    print(f"   copy {v['copy_ns']:6.1f}   launch record alone {v['api_alone_ns']:6.1f}   "
          f"overhead record {v['overhead_ns']:6.1f}")
    print(f"   a decode step's buffer (4 records, one run handed on): {v['decode_buffer_ns']:.1f}; "
          f"a prefill of 451 eager kernels: {451 * v['kernel_with_launch_ns'] / 1e3:.1f} us")


def section_tls(tmp):
    pem = os.path.join(tmp, "tls.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        pem, "-out", pem + ".crt", "-days", "2", "-subj", "/CN=bench"],
                       capture_output=True, text=True)
    if r.returncode:
        print(f"6. TLS writes: skipped, openssl req failed: {r.stderr.strip()[-200:]}")
        return
    with open(pem, "a") as f:
        f.write(open(pem + ".crt").read())
    frames = 100000
    progs = ("ts_tls_enter", "ts_tls_return") + SYSCALL_PROGS
    print(f"6. cost per traced TLS write: {frames} frames of 287 bytes, one SSL_write each "
          f"(its write syscall inside), {ROUNDS} rounds interleaved, medians"
          + (f"; traced by {BASE_TS} (BENCH_BASE) too" if BASE_TS else ""))
    modes = [("untraced", "untraced", TS), ("tokenscope", "tokenscope", TS)]
    if BASE_TS:
        modes.append(("BENCH_BASE", "tokenscope", BASE_TS))
    runs = {name: [] for name, _, _ in modes}
    for _ in range(ROUNDS):
        for name, kind, binary in modes:
            runs[name].append(writeloop_run(kind, tmp, frames, ["--tls", pem], progs, binary))
    for name, kind, _ in modes[1:]:
        print_tls_cost(f"{name}: writer's CPU per SSL_write", runs["untraced"], runs[name],
                       progs)
    section_go_tls(tmp, pem, frames)


def print_tls_cost(what, untraced, traced, progs):
    """A traced TLS writer's CPU per write against the untraced one's (medians of the rounds),
    and the BPF time per write of progs."""
    base = statistics.median(x["cpu_ns"] for x in untraced)
    base_wall = statistics.median(x["wall_ns"] for x in untraced)
    cpu = statistics.median(x["cpu_ns"] for x in traced)
    wall = statistics.median(x["wall_ns"] for x in traced)
    print(f"   {what} {cpu:.0f} ns against {base:.0f} ns untraced "
          f"(+{(cpu - base) / 1000:.2f} us; writes/s ratio {base_wall / wall:.3f})")
    print("   BPF time per write (kernel.bpf_stats): " + ", ".join(
        f"{p} {statistics.median(x['bpf_ns_by_prog'].get(p, 0) for x in traced):.0f} ns"
        for p in progs) + f"; records lost {[x.get('lost_records') for x in traced]}")


def section_go_tls(tmp, pem, frames):
    """Section 6's Go half: gowriteloop, Go's crypto/tls, untraced and traced."""
    if not have("go"):
        print("   Go crypto/tls: skipped, no Go toolchain (golang-go)")
        return
    gwl = os.path.join(tmp, "gowriteloop")
    env = dict(os.environ, GOCACHE=os.path.join(tmp, "gocache"),
               GOPATH=os.path.join(tmp, "gopath"), GOFLAGS="", CGO_ENABLED="0")
    r = subprocess.run(["go", "build", "-o", gwl, os.path.join("tests", "bench",
                                                                "gowriteloop.go")],
                       env=env, capture_output=True, text=True)
    if r.returncode:
        print(f"   Go crypto/tls: skipped, go build failed: {r.stderr.strip()[-200:]}")
        return
    progs = ("ts_go_tls_enter", "ts_go_tls_ret") + SYSCALL_PROGS
    runs = {"untraced": [], "tokenscope": []}
    for _ in range(ROUNDS):
        for kind in runs:
            runs[kind].append(writeloop_run(kind, tmp, frames, ["-tls", pem], progs, TS, gwl))
    print_tls_cost("Go crypto/tls: process CPU per (*tls.Conn).Write", runs["untraced"],
                   runs["tokenscope"], progs)


PIECES = (4, 64, 1024)
PIECE_FRAME_BYTES = 60  # 66 with the chunk header: 1,024 pieces are 16.5 KB, within the capture
# Back to back, 1,024-piece writes fill a 2 MiB ring faster than tokenscope's reader parses
# their frames, and a lost record skips the ring's copy (the write would look cheaper). So a
# few writes into an 8 MiB ring (within the sizes that cost the same, How it works), which
# holds all of them: 400 x 16.5 KB. bpf_stats, machine-wide, charged other processes' syscalls
# on this shared VM to so short a run; the writer's own CPU time is not.
PIECE_WRITES = 400
PIECE_RING_MB = 8


def piece_run(tmp, pieces, kind, binary=TS):
    """writeloop --pieces, writer and reader pinned apart, untraced or traced by binary: the
    writer thread's own CPU per writev (the BPF programs run in its context) and records lost."""
    wl = spawn([WL, "-n", str(PIECE_WRITES * pieces // 4), "--pieces", str(pieces), "-s",
                str(PIECE_FRAME_BYTES)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
               text=True)
    pid = int(wl.stdout.readline().split()[1])
    pin_apart(pid)
    tr = Tracer(kind, pid, tmp, ("--ring-buffer-mb", str(PIECE_RING_MB)), binary=binary)
    wl.stdin.write("go\n")
    wl.stdin.flush()
    line = wl.stdout.readline()
    info = tr.stop()
    wl.communicate("exit\n", timeout=120)
    vals = dict(kv.split("=") for kv in line.split())
    return float(vals["cpu_ns_per_write"]), info.get("lost_records")


def section_pieces(tmp):
    builds = [b for b in cost_builds() if b[0] != NOOP_NAME]
    print(f"7. cost per piece: writev of P iovecs (frames of {PIECE_FRAME_BYTES + 6} bytes, 4 "
          f"pieces each), {PIECE_WRITES} writes back to back, an {PIECE_RING_MB} MiB ring; the "
          f"writer's CPU ns per writev traced minus untraced (writer and reader on separate "
          f"CPUs), {ROUNDS} rounds interleaved, medians:")
    cost = {(name, p): [] for name, _ in builds for p in PIECES}
    lost = []
    for _ in range(ROUNDS):
        for p in PIECES:
            untraced, _ = piece_run(tmp, p, "untraced")
            for name, binary in builds:
                traced, n = piece_run(tmp, p, "tokenscope", binary)
                cost[name, p].append(traced - untraced)
                lost.append(n)
    med = {k: statistics.median(v) for k, v in cost.items()}
    print(f"   {'build':12s} " + " ".join(f"{f'{p} pieces':>11s}" for p in PIECES) +
          f" {'per piece past 4':>17s} {'rounds':>18s}")
    for name, _ in builds:
        top = PIECES[-1]
        per_piece = [(b - a) / (top - 4) for a, b in zip(cost[name, 4], cost[name, top])]
        print(f"   {name:12s} " + " ".join(f"{med[name, p]:11.0f}" for p in PIECES) +
              f" {statistics.median(per_piece):17.1f} "
              f"{min(per_piece):8.1f}-{max(per_piece):.1f}", flush=True)
    print(f"   records lost in the traced runs: {lost}")
    if BASE_TS:
        print("   this build / BENCH_BASE: " + ", ".join(
            f"{p} pieces {med['this build', p] / med['BENCH_BASE', p]:.3f}" for p in PIECES) +
            " (the base walked at most 64 iovecs: at 1,024 it copied 64 and counted the rest)")


def main():
    if os.geteuid() != 0:
        sys.exit("bench: run as root (tokenscope and bpftrace load BPF programs)")
    unknown = SECTIONS - {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
    if unknown:
        sys.exit(f"bench: BENCH_SECTIONS: no section {sorted(unknown)} (sections are 0 to 9)")
    if BASE_TS and not os.access(BASE_TS, os.X_OK):
        sys.exit(f"bench: BENCH_BASE: {BASE_TS} is not an executable")
    resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
    # Program run times (bpftool prog show: run_time_ns); restored at exit.
    stats_was = open("/proc/sys/kernel/bpf_stats_enabled").read().strip()
    with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
        f.write("1")
    tmp = subprocess.check_output(["mktemp", "-d"], text=True).strip()
    kinds = ["untraced", "tokenscope"] + [k for k in ("bpftrace", "strace") if have(k)]
    base_kind = ["BENCH_BASE"] if BASE_TS else []
    if 0 in SECTIONS:
        section_writes(tmp, kinds[:2] + base_kind + kinds[2:])
    if 1 in SECTIONS:
        section_throughput(tmp, kinds[:2] + base_kind + kinds[2:])
    if 2 in SECTIONS:
        section_own_cost(tmp)
    if 3 in SECTIONS:
        section_exporters(tmp)
    if 4 in SECTIONS:
        section_cuda(tmp)
    if 5 in SECTIONS:
        section_device(tmp)
    if 6 in SECTIONS:
        section_tls(tmp)
    if 7 in SECTIONS:
        section_pieces(tmp)
    if 8 in SECTIONS:
        section_records(tmp)
    if 9 in SECTIONS:
        section_burst(tmp)
    subprocess.run(["rm", "-rf", tmp])
    with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
        f.write(stats_was)


if __name__ == "__main__":
    main()
