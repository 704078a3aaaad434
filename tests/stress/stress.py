#!/usr/bin/python3
"""make stress: hostile clients against traced servers, end to end (driver of run_stress.sh).

One tracer, `tokenscope trace -p REFSERVER -p ENDLESS --json --listen ... --otlp ...
--slow-ttft 1ms`, watches the reference server (started with --skip-garbage) and a server whose
SSE line never ends (endless_server.py), while these phases run one after another:

  p01 idle-20k        20,000 idle connections held open, then reset
  p02 header-1m       a 1 MiB header line, 1 MiB of headers, a 1 MiB request line
  p03 garbage         a TLS ClientHello, random bytes, NULs, response-like bytes between good
                      requests on one keep-alive connection; a connection that starts with TLS
  p04 partial-bodies  200 connections each holding 64 KiB of a 1,000,000-byte body
  p05 cl-20-digits    Content-Length in 20 digits: 42 zero-padded (a good request), 2^64,
                      2^64-1, 10^20-1, ...
  p06 model-names     model names with control characters, quotes, newlines, ANSI escapes,
                      invalid UTF-8 (raw in the body) and the same as \\u escapes
  p07 models-70       70 distinct model names (the metrics keep 64 label sets)
  p08 endless-line    SSE lines of 8 MiB without a newline, chunked, close-delimited, ended
  p09 streams-1000    1,000 concurrent streams
  p10 truncated-body  request bodies cut short with a matching Content-Length
each followed by good streamed requests (gtclient) whose exact token counts must be reported.
/metrics is scraped with curl after every phase and checked with promtool. Then:

  p11 prefork-soak    a second tracer, `trace --all`, for SOAK_S seconds on two pre-forking
                      servers (a worker per few requests): one found by its command line, in a
                      stand-in container, also forking 200 short-lived children a second; one
                      whose workers are found by the frames they write. RSS and label sets
                      sampled over the soak must stay flat.
  p12 prefork-soak-asan  the same for SOAK_ASAN_S seconds under a tracer built with
                      AddressSanitizer and UBSan (TOKENSCOPE_ASAN; run_stress.sh builds it)

Every OTLP body goes to strict_receiver.py (strict UTF-8 JSON) and must be accepted. Prints
PASS/FAIL/SKIP lines and the figures; exits 1 if anything failed. Every wait has a timeout.
Environment: TOKENSCOPE, REFSERVER, GTCLIENT (binaries), SOAK_S (60), STRESS_KEEP=1 (keep the
work directory), STRESS_PHASES (p03,p11: only those), STRESS_PIDFILE (pids of every process
started, for the caller's cleanup).
"""
import atexit
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from strict_receiver import lone_surrogate  # beside this file: one check for both

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from lib import free_port  # noqa: E402
HERE = os.path.join(ROOT, "tests", "stress")
TS = os.path.abspath(os.environ.get("TOKENSCOPE", os.path.join(ROOT, ".output/tokenscope")))
RS = os.path.abspath(os.environ.get("REFSERVER", os.path.join(ROOT, ".output/refserver")))
GT = os.path.abspath(os.environ.get("GTCLIENT", os.path.join(ROOT, ".output/gtclient")))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
SOAK_S = float(os.environ.get("SOAK_S", "60"))
# The same soak under a build with AddressSanitizer and UBSan (run_stress.sh builds it): a
# use-after-free that glibc's malloc hides ends the run with a report.
TS_ASAN = os.environ.get("TOKENSCOPE_ASAN")
SOAK_ASAN_S = float(os.environ.get("SOAK_ASAN_S", "20"))
PIDFILE = os.environ.get("STRESS_PIDFILE")
# For working on one phase: STRESS_PHASES=p03,p11 runs only those (the checks at the main
# tracer's end still run, over what those phases did).
ONLY = [x.strip() for x in os.environ.get("STRESS_PHASES", "").split(",") if x.strip()]

# Limits the checks hold the tracer to.
RSS_LIMIT_KIB = 64 * 1024
# Soak: growth allowed of the RSS floor, from the middle third of the soak to the last third
# (the lowest sample of each). The tracer's heap is bounded by design (histograms per label set,
# capped; a bounded OTLP queue) and its buffers of 128 KiB and more are unmapped at free (main
# sets glibc's mmap threshold): its floor stays within a few KiB, while one sample can be 100-200
# KiB above it, taken while a /metrics body is being rendered. A leak of about 30 bytes per
# fork moves the floor by this much in the 20 s between the two thirds (about 4,400 forks). What is kept per traced process is checked
# exactly by the next limit, and per fork by test_pipeline's test_fork_labels_bounded (100,000
# forks, the list does not grow).
SOAK_RSS_GROWTH_KIB = 128
# ... and the processes the tracer follows at once (tokenscope_traced_processes), whose entries
# carry the container labels: the soak's servers have a few alive at a time, while thousands
# fork and exit.
SOAK_TRACED_MAX = 64
# Short-lived children the named soak server forks per second besides its workers: whatever
# the tracer keeps per fork (one 20-byte label entry was a defect) then adds up to something
# RSS shows (12,000 forks in 60 s).
SPAWN_PER_S = 200
SOAK_MODEL = "stress-soak"
IDLE_CONNS = 20000
# Descriptors a process keeps besides its connections (stdio, listening socket, epoll...).
FD_SPARE = 200
HOLD_S = 120       # a connection holder's life at most
PARTIAL_CONNS = 200
PARTIAL_BYTES = 64 * 1024
PARTIAL_CLEN = 1000000
STREAMS = 1000
MODELS = 70

# Timeouts, seconds.
T_START = 15       # a server's "listening on", the tracer's "attached"
T_REPORT = 10      # a finished request's JSON line
T_CLIENT = 60      # a gtclient run
T_EXIT = 20        # the tracer's exit after SIGINT
T_PHASE_IO = 10    # one hostile request's send and reply

GOOD = ["--max-tokens", "6", "--usage", "--token-ms", "2", "--prefill-ms", "3"]

results = {"PASS": 0, "FAIL": 0, "SKIP": 0}
procs = []  # every process started, for cleanup


def say(*a):
    print(*a, flush=True)


def check(name, ok, detail=""):
    tag = "PASS" if ok else "FAIL"
    results[tag] += 1
    if ok:
        say("PASS %s%s" % (name, ": " + detail if detail else ""))
    else:
        say("FAIL %s: %s" % (name, detail or "failed"))
    return ok


def skip(name, why):
    results["SKIP"] += 1
    say("SKIP %s: %s" % (name, why))


def info(msg):
    say("  " + msg)


def mono_ns():
    return time.monotonic_ns()  # CLOCK_MONOTONIC, the tracer's clock


# ---------------------------------------------------------------- processes

procs_lock = threading.Lock()
exiting = threading.Event()  # set on the way out: no new process is started


def register(p):
    """Keeps p for cleanup, and tells the caller (STRESS_PIDFILE) which of the processes
    started are still running: only those, so that a pid reused since is never signalled."""
    with procs_lock:
        procs[:] = [q for q in procs if q.returncode is None] + [p]
        if PIDFILE:
            with open(PIDFILE + ".tmp", "w") as f:
                f.write("".join("%d\n" % q.pid for q in procs))
            os.rename(PIDFILE + ".tmp", PIDFILE)
    return p


def spawn(argv, out, err=None, **kw):
    f_out = open(out, "wb") if isinstance(out, str) else out
    f_err = open(err, "wb") if isinstance(err, str) else (err if err else subprocess.STDOUT)
    return register(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f_out,
                                     stderr=f_err, start_new_session=True, cwd=ROOT, **kw))


def stop(p, sig=signal.SIGINT, timeout=5):
    """Signal p, wait up to timeout, then SIGKILL its process group. Returns its status."""
    if p.poll() is None:
        try:
            os.kill(p.pid, sig)
        except OSError:
            pass
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass
    return p.returncode


def cleanup():
    exiting.set()
    with procs_lock:
        procs_now = list(procs)
    for p in procs_now:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
    deadline = time.monotonic() + 3
    for p in procs_now:
        try:
            p.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            pass
    for p in procs_now:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass


def wait_for(pred, timeout, step=0.1):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= end:
            return v
        time.sleep(step)


def file_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def wait_listening(path, p, timeout=T_START):
    def port():
        m = re.search(r"listening on [0-9.]+:(\d+)", file_text(path))
        return int(m.group(1)) if m else (None if p.poll() is None else -1)
    v = wait_for(port, timeout)
    return v if v and v > 0 else None


def run(argv, timeout, stdin=subprocess.DEVNULL):
    """Runs argv to its end, at most timeout seconds (then its process group is killed);
    (rc, stdout, stderr), rc None on timeout. Cleaned up at exit like every other process."""
    if exiting.is_set():
        return None, b"", b"exiting"
    p = register(subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, cwd=ROOT, start_new_session=True))
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = p.communicate()
        return None, out, err


# ---------------------------------------------------------------- the tracer

def proc_status(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for l in f:
                k, _, v = l.partition(":")
                if k in ("VmRSS", "VmHWM", "State", "Threads"):
                    out[k] = v.strip()
        with open("/proc/%d/stat" % pid) as f:
            st = f.read().rsplit(")", 1)[1].split()
        out["cpu_ticks"] = int(st[11]) + int(st[12])
    except (OSError, IndexError, ValueError):
        return None
    return out


def kib(v):
    return int(v.split()[0]) if v else 0


class Tracer:
    """A tokenscope process: its JSON lines, stderr, RSS and CPU samples."""

    def __init__(self, name, argv, tmp, env=None):
        self.name = name
        self.out = os.path.join(tmp, name + ".json")
        self.err = os.path.join(tmp, name + ".err")
        self.p = spawn(argv, self.out, self.err, env=env)
        self.samples = []  # (t, rss_kib, hwm_kib, cpu_ticks)
        self.lines = []    # parsed JSON lines (None where a line did not parse), but...
        self.summary = None  # ... the last one, {"summary":{...}}, kept here
        self.bad = []      # (line number, reason, bytes) of lines that are not strict JSON
        self.by_port = {}
        self._off = 0
        self._partial = b""
        self.maxrss_kib = None
        self.status = None
        self._stop = False
        self._lock = threading.Lock()
        self.t0 = time.monotonic()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while not self._stop and self.alive():
            s = proc_status(self.p.pid)
            if s:
                with self._lock:
                    self.samples.append((time.monotonic() - self.t0, kib(s.get("VmRSS")),
                                         kib(s.get("VmHWM")), s["cpu_ticks"]))
            time.sleep(0.5)

    def alive(self):
        """Reaps the tracer itself, with wait4, to keep its ru_maxrss."""
        with self._lock:
            if self.p.returncode is not None:
                return False
            try:
                pid, st, ru = os.wait4(self.p.pid, os.WNOHANG)
            except ChildProcessError:
                return self.p.poll() is None
            if not pid:
                return True
            self.p.returncode = os.waitstatus_to_exitcode(st)
            self.maxrss_kib = ru.ru_maxrss
            return False

    def hwm_kib(self):
        """The peak RSS: ru_maxrss once reaped, else the latest VmHWM; None if unknown."""
        with self._lock:
            if self.maxrss_kib is None and self.p.returncode is not None:
                return None
            return max([s[2] for s in self.samples] + [self.maxrss_kib or 0])

    def cpu_pct(self, window=2.0):
        """The tracer's CPU over the last window seconds, % of one core."""
        s = proc_status(self.p.pid)
        if not s:
            return None
        t1, c1 = time.monotonic(), s["cpu_ticks"]
        time.sleep(window)
        s = proc_status(self.p.pid)
        if not s:
            return None
        hz = os.sysconf("SC_CLK_TCK")
        return 100.0 * (s["cpu_ticks"] - c1) / hz / (time.monotonic() - t1)

    def poll(self):
        """Reads the JSON lines written since the last call."""
        try:
            with open(self.out, "rb") as f:
                f.seek(self._off)
                data = f.read()
        except OSError:
            return
        self._off += len(data)
        data = self._partial + data
        *whole, self._partial = data.split(b"\n")
        for raw in whole:
            n = len(self.lines) + 1
            doc, why = strict_json(raw)
            if why:
                self.bad.append((n, why, raw))
            if isinstance(doc, dict) and "summary" in doc:
                self.summary = doc["summary"]
                continue
            self.lines.append(doc)
            if isinstance(doc, dict):
                port = peer_port(doc.get("conn"))
                self.by_port.setdefault(port, []).append(doc)

    def find(self, port, t0, t1, server=None):
        """The reported requests on client port `port` that arrived within [t0, t1], to the
        server port `server` when given: a client port can be in use towards two servers at
        once (the kernel shares a local port between connections to different peers)."""
        self.poll()
        return [d for d in self.by_port.get(port, [])
                if isinstance(d.get("arrival_ns"), int) and t0 <= d["arrival_ns"] <= t1 and
                (server is None or local_port(d.get("conn")) == server)]

    def stderr(self):
        return file_text(self.err)

    def finish(self, timeout=T_EXIT):
        """SIGINT, wait for the exit (the summary), reap with wait4 for the peak RSS."""
        self._stop = True
        s = proc_status(self.p.pid)
        if s:
            with self._lock:
                self.samples.append((time.monotonic() - self.t0, kib(s.get("VmRSS")),
                                     kib(s.get("VmHWM")), s["cpu_ticks"]))
        if self.alive():
            os.kill(self.p.pid, signal.SIGINT)
        end = time.monotonic() + timeout
        while self.alive() and time.monotonic() < end:
            time.sleep(0.1)
        hung = self.alive()
        if hung:
            stop(self.p, signal.SIGKILL, 1)
        self.poll()
        self.status = self.p.returncode
        return hung


def strict_json(raw):
    """(document, None) or (document or None, why it is not strict UTF-8 JSON)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        try:
            return json.loads(raw.decode("utf-8", "surrogateescape")), "not UTF-8: %s" % e
        except ValueError:
            return None, "not UTF-8: %s" % e
    try:
        doc = json.loads(text)
    except ValueError as e:
        return None, "not JSON: %s" % e
    bad = lone_surrogate(doc)
    if bad is not None:
        return doc, "lone surrogate in %r" % bad[:40]
    return doc, None


def peer_port(conn):
    # "127.0.0.1:39077<-127.0.0.1:48700#1"
    try:
        return int(conn.split("<-", 1)[1].rsplit("#", 1)[0].rsplit(":", 1)[1])
    except (AttributeError, IndexError, ValueError):
        return None


def local_port(conn):
    # "127.0.0.1:39077<-127.0.0.1:48700#1" -> 39077
    try:
        return int(conn.split("<-", 1)[0].rsplit(":", 1)[1])
    except (AttributeError, IndexError, ValueError):
        return None


def crash_line(err):
    """The line that says why a tracer died, from its stderr."""
    for l in err.splitlines():
        if l.startswith("SUMMARY: ") or "runtime error:" in l:
            return l.strip()
    return "stderr ends: " + " | ".join(err.strip().splitlines()[-3:])[-400:]


def sanitizer_report(err, lines=40):
    """The start of an AddressSanitizer/UBSan report in a tracer's stderr, or ""."""
    i = err.find("ERROR: AddressSanitizer")
    if i < 0:
        i = err.find("runtime error:")
    if i < 0:
        return ""
    i = err.rfind("\n", 0, i) + 1
    return "\n".join(err[i:].splitlines()[:lines])


def gdb_stack(pid):
    rc, out, err = run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 30"], 60)
    lines = [l for l in (out + err).decode("utf-8", "replace").splitlines()
             if l.startswith("#") or l.startswith("Thread ")]
    return "\n".join(lines[:80]) or "(gdb gave no stack)"


def segfault_site(pid):
    """Where the kernel log says pid crashed, resolved with addr2line when it can be."""
    rc, out, _ = run(["dmesg"], 10)
    hits = [l for l in out.decode("utf-8", "replace").splitlines() if "[%d]" % pid in l]
    if not hits:
        return "no kernel log line for pid %d" % pid
    line = hits[-1]
    m = re.search(r"ip ([0-9a-f]+) .* in ([^\[]+)\[([0-9a-f]+)\+", line)
    if m and os.path.basename(TS).startswith(m.group(2).strip()):
        off = int(m.group(1), 16) - int(m.group(3), 16)
        rc, out, _ = run(["addr2line", "-f", "-C", "-e", TS, hex(off)], 10)
        return line.strip() + " -> " + " ".join(out.decode().split())
    return line.strip()


# ---------------------------------------------------------------- metrics

class Metrics:
    def __init__(self, port, tmp, tag):
        self.url = "http://127.0.0.1:%d/metrics" % port
        self.tmp = tmp
        self.tag = tag
        self.n = 0
        self.last = None

    def scrape(self, label):
        self.n += 1
        path = os.path.join(self.tmp, "%s-metrics-%02d-%s.txt" % (self.tag, self.n, label))
        rc, _, err = run(["curl", "-s", "--max-time", "5", "-o", path, self.url], 15)
        if rc != 0:
            return None, "curl rc=%s %s" % (rc, err.decode("utf-8", "replace").strip())
        with open(path, "rb") as f:
            body = f.read()
        prc, pout, perr = promtool(path)
        self.last = body
        return body, (None if prc == 0 else "promtool rc=%s: %s" % (
            prc, (pout + perr).decode("utf-8", "replace").strip()[:600]))


def promtool(path):
    with open(path, "rb") as f:
        return run(["promtool", "check", "metrics"], 30, stdin=f)


SERIES = re.compile(rb'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$')


def series(body):
    """[(name, labels text, value)] of a scrape; label text left as bytes."""
    out = []
    for l in (body or b"").split(b"\n"):
        if not l or l.startswith(b"#"):
            continue
        m = SERIES.match(l)
        if m:
            try:
                v = float(m.group(3))
            except ValueError:
                v = None
            out.append((m.group(1).decode("ascii", "replace"), m.group(2) or b"", v))
    return out


def metric_sum(body, name, label_re=None):
    tot = 0.0
    for n, labels, v in series(body):
        if n == name and v is not None and (label_re is None or re.search(label_re, labels)):
            tot += v
    return tot


LOSS_METRIC = re.compile(r"^tokenscope_(dropped|dropped_bytes|events_lost|label_overflow)_total$")


def loss_counters(body):
    """{'name{labels}': value} of every loss counter in a scrape."""
    return {n + labels.decode("utf-8", "replace"): v for n, labels, v in series(body)
            if LOSS_METRIC.match(n) and v is not None}


def loss_delta(before, after):
    """{'name{labels}': increase} of the loss counters that moved between two scrapes."""
    a, b = loss_counters(before), loss_counters(after)
    return {k: v - a.get(k, 0) for k, v in b.items() if v != a.get(k, 0)}


def fmt_delta(d):
    return ", ".join("%s +%d" % (k.replace("tokenscope_", ""), v) for k, v in sorted(d.items())) \
        or "none moved"


def model_labels(body):
    vals = set()
    for n, labels, v in series(body):
        if n == "tokenscope_requests_total":
            m = re.match(rb'\{model="((?:[^"\\]|\\.)*)"', labels)
            if m:
                vals.add(m.group(1))
    return vals


# ---------------------------------------------------------------- clients

def gtclient(port, n, c, k, out, extra=(), timeout=T_CLIENT):
    rc, _, err = run([GT, "--port", str(port), "-n", str(n), "-c", str(c), "-k", str(k),
                      "--timeout-s", "30", "-o", out] + list(extra), timeout)
    recs = []
    try:
        with open(out) as f:
            recs = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        pass
    return rc, recs, err.decode("utf-8", "replace").strip()


def match_report(tr, recs, timeout=T_REPORT, want_ok=True, server=None):
    """Waits for every client request in recs (to the server port `server`, when given) to be
    reported; (mismatches, matched)."""
    def missing():
        return [r for r in recs if r.get("port") and not tr.find(
            r["port"], r.get("send_start_ns", r.get("send_ns", 0)) - 1000000, r["end_ns"],
            server)]
    wait_for(lambda: not missing() or not tr.alive(), timeout, 0.2)
    bad, matched = [], 0
    for r in recs:
        if want_ok and r.get("outcome") != "ok":
            bad.append("client %s:%s outcome %s" % (r.get("port"), r.get("seq"),
                                                    r.get("outcome")))
            continue
        got = tr.find(r["port"], r.get("send_start_ns", r.get("send_ns", 0)) - 1000000,
                      r["end_ns"], server) if r.get("port") else []
        if len(got) != 1:
            bad.append("port %s seq %s: %d lines reported" % (r.get("port"), r.get("seq"),
                                                               len(got)))
            continue
        t = got[0]
        if (t.get("outcome"), t.get("tokens")) != ("ok", r.get("tokens")) or \
                ("frames" in r and t.get("frames") != r.get("frames")):
            bad.append("port %s: tracer %s tokens=%s frames=%s, client tokens=%s frames=%s" % (
                r["port"], t.get("outcome"), t.get("tokens"), t.get("frames"), r.get("tokens"),
                r.get("frames")))
            continue
        matched += 1
    return bad, matched


class Wire:
    """A blocking socket with a read buffer and one deadline."""

    def __init__(self, sock, timeout):
        self.s = sock
        self.buf = b""
        self.deadline = time.monotonic() + timeout

    def fill(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self.s.settimeout(left)
        b = self.s.recv(65536)
        if not b:
            raise EOFError("closed")
        self.buf += b

    def until(self, sep, limit=1 << 20):
        while sep not in self.buf:
            if len(self.buf) > limit:
                raise ValueError("no %r in %d bytes" % (sep, len(self.buf)))
            self.fill()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def take(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def rest(self, limit):
        try:
            while len(self.buf) < limit:
                self.fill()
        except EOFError:
            pass
        out, self.buf = self.buf, b""
        return out


def read_response(w, discard=False):
    """(status, body bytes or byte count) of one HTTP/1.1 response on w."""
    head = w.until(b"\r\n\r\n", 1 << 20)
    status = int(head.split(b" ", 2)[1])
    hdr = {}
    for l in head.split(b"\r\n")[1:]:
        k, _, v = l.partition(b":")
        hdr[k.strip().lower()] = v.strip()
    body, count = [], 0
    if b"chunked" in hdr.get(b"transfer-encoding", b"").lower():
        while True:
            size = int(w.until(b"\r\n", 4096).split(b";")[0], 16)
            if size == 0:
                w.until(b"\r\n", 4096)
                break
            data = w.take(size)
            count += size
            if not discard:
                body.append(data)
            w.take(2)
    elif b"content-length" in hdr:
        data = w.take(int(hdr[b"content-length"]))
        count = len(data)
        body.append(data)
    else:
        while True:
            try:
                w.fill()
            except EOFError:
                break
            count += len(w.buf)
            if not discard:
                body.append(w.buf)
            w.buf = b""
    return status, (count if discard else b"".join(body))


def sse_count(body):
    """(content frames, tokens, tokens_from) of an OpenAI chat/completions SSE body."""
    frames, usage = 0, None
    for ev in body.split(b"\n\n"):
        data = b"\n".join(l[5:].lstrip(b" ") for l in ev.split(b"\n") if l.startswith(b"data:"))
        if not data or data == b"[DONE]":
            continue
        try:
            obj = json.loads(data.decode("utf-8", "surrogateescape"))
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if isinstance(obj.get("usage"), dict):
            usage = obj["usage"].get("completion_tokens")
        for ch in obj.get("choices") or []:
            d = ch.get("delta") or {}
            if d.get("content") or ch.get("text"):
                frames += 1
    return frames, (usage if usage is not None else frames), (
        "usage" if usage is not None else "frames")


def chat_body(model_json=b'"ref"', tokens=5, extra=b""):
    return (b'{"model":' + model_json + b',"messages":[{"role":"user","content":"hello"}],'
            b'"stream":true,"max_tokens":' + str(tokens).encode() +
            b',"stream_options":{"include_usage":true},"x_prefill_ms":3,"x_token_ms":1' +
            extra + b'}')


def post(body, clen=None, path=b"/v1/chat/completions", extra_head=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            b"\r\n" + extra_head + b"Content-Length: " +
            (clen if clen is not None else str(len(body)).encode()) + b"\r\n\r\n" + body)


def connect(port, timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def exchange(sock_or_port, raw, timeout=T_PHASE_IO, discard=False):
    """Sends raw bytes, reads one response. A dict like gtclient's record, plus status."""
    own = not isinstance(sock_or_port, socket.socket)
    s = connect(sock_or_port) if own else sock_or_port
    rec = {"port": s.getsockname()[1], "send_start_ns": mono_ns()}
    try:
        s.settimeout(timeout)
        s.sendall(raw)
        rec["send_ns"] = mono_ns()
        status, body = read_response(Wire(s, timeout), discard)
        rec["status"] = status
        if discard:
            rec["bytes"] = body
            rec["frames"], rec["tokens"] = None, None
        else:
            rec["frames"], rec["tokens"], rec["tokens_from"] = sse_count(body)
        rec["outcome"] = "ok" if status < 400 else "http_error"
    except (OSError, EOFError, ValueError, TimeoutError) as e:
        rec["outcome"] = "error"
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    rec["end_ns"] = mono_ns()
    if own:
        s.close()
    return rec


def reset_close(s):
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    except OSError:
        pass


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def read_line(f, timeout):
    """One line from a pipe, waiting at most timeout seconds."""
    out = []
    t = threading.Thread(target=lambda: out.append(f.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else b""


def hold(port, n):
    """--hold PORT N: opens N idle connections, says "held N", resets them all on a line of
    stdin (or after HOLD_S), says "closed"."""
    socks, err, t0 = [], "", time.monotonic()
    try:
        for _ in range(n):
            if time.monotonic() - t0 > 60:
                err = "60 s limit"
                break
            s = socket.socket()
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
            socks.append(s)
    except OSError as e:
        err = "%s" % e
    sys.stdout.write("held %d %s\n" % (len(socks), err))
    sys.stdout.flush()
    read_line(sys.stdin.buffer, HOLD_S)
    for s in socks:
        reset_close(s)
    sys.stdout.write("closed\n")
    return 0


def fd_count(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return -1


# ---------------------------------------------------------------- the run

class Stress:
    def __init__(self, tmp):
        self.tmp = tmp
        self.gt_n = 0
        self.ts = None

    def path(self, name):
        return os.path.join(self.tmp, name)

    # --- the good requests after each phase
    def good(self, phase, port=None, n=4, c=2, k=2, extra=GOOD, timeout=T_REPORT):
        port = port or self.rs_port
        self.gt_n += 1
        out = self.path("gt-%02d-%s.json" % (self.gt_n, phase))
        if not self.ts.alive():
            return check("%s good requests" % phase, False,
                         "the tracer is gone (status %s)" % self.ts.p.poll())
        rc, recs, err = gtclient(port, n, c, k, out, extra)
        if rc != 0 or len(recs) != n:
            return check("%s good requests" % phase, False,
                         "gtclient rc=%s, %d of %d records: %s" % (rc, len(recs), n, err))
        bad, matched = match_report(self.ts, recs, timeout)
        detail = "%d/%d reported with the client's token counts, outcome ok" % (matched, n)
        if bad:
            cpu = self.ts.cpu_pct(1.0) if self.ts.alive() else None
            detail += "; " + "; ".join(bad[:4]) + (" (+%d)" % (len(bad) - 4) if len(bad) > 4
                                                    else "")
            detail += "; tracer %s, CPU %s%% of a core" % (
                "alive" if self.ts.alive() else "gone (status %s)" % self.ts.p.poll(),
                "%.0f" % cpu if cpu is not None else "?")
        return check("%s good requests" % phase, not bad, detail)

    def metrics(self, phase):
        body, why = self.m.scrape(phase)
        if body is None:
            return check("%s metrics" % phase, False, why)
        self.delta = loss_delta(self.prev, body)
        self.prev = body
        info("%s: loss counters moved: %s" % (phase, fmt_delta(self.delta)))
        try:
            body.decode("utf-8")
            utf8 = None
        except UnicodeDecodeError as e:
            utf8 = str(e)
        lost = metric_sum(body, "tokenscope_events_lost_total")
        over = metric_sum(body, "tokenscope_label_overflow_total")
        detail = "promtool check metrics ok, %d series, events_lost %d, label_overflow %d" % (
            len(series(body)), lost, over)
        if why or utf8:
            return check("%s metrics" % phase, False, (why or "") +
                         (" not UTF-8: " + utf8 if utf8 else ""))
        return check("%s metrics" % phase, True, detail)

    def after(self, phase, unreported=None, **kw):
        """The good requests, the scrape, and when hostile requests the server answered were
        not reported, whether the loss counters say why."""
        self.good(phase, **kw)
        self.metrics(phase)
        if unreported:
            moved = sum(v for k, v in self.delta.items() if not k.startswith(
                "tokenscope_dropped_bytes_total") and "label_overflow" not in k)
            check("%s accounted" % phase, moved >= len(unreported),
                  "%d requests the server answered were not reported (%s); the loss counters "
                  "moved by %d: %s" % (len(unreported), "; ".join(unreported[:4]), moved,
                                       fmt_delta(self.delta)))
        s = proc_status(self.ts.p.pid)
        if s:
            info("%s: tracer VmRSS %.1f MiB, VmHWM %.1f MiB" % (
                phase, kib(s.get("VmRSS")) / 1024, kib(s.get("VmHWM")) / 1024))

    def reported(self, recs):
        """What the tracer reported for hostile requests (by port and time), as text."""
        out = []
        for r in recs:
            got = self.ts.find(r["port"], r["send_start_ns"] - 1000000, r["end_ns"] + 2000000000)
            out.append("%s -> %s" % (r.get("status", r.get("outcome")), ",".join(
                "%s/%s" % (g.get("outcome"), g.get("status")) for g in got) or "not reported"))
        return out

    def unreported(self, recs, what):
        """Descriptions of the requests in recs the server answered and the tracer did not
        report."""
        return ["%s (%s)" % (r.get(what), r.get("status")) for r in recs
                if r.get("status") and not self.ts.find(r["port"], r["send_start_ns"] - 1000000,
                                                        r["end_ns"] + 2000000000)]

    # --- setup
    def setup(self):
        rp = self.path("receiver.port")
        self.rcv = spawn([PY, os.path.join(HERE, "strict_receiver.py"), "--dir",
                          self.path("otlp"), "--port-file", rp], self.path("receiver.log"))
        self.rcv_port = wait_for(lambda: int(file_text(rp)) if file_text(rp) else None, T_START)
        if not self.rcv_port:
            return check("setup", False, "the OTLP receiver did not start")
        # One process cannot hold IDLE_CONNS connections under a hard limit of 20,000 (which
        # root cannot raise without CAP_SYS_RESOURCE): refserver's workers share the port.
        self.parts = max(1, -(-IDLE_CONNS // (self.nofile - FD_SPARE)))
        self.rs = spawn([RS, "--port", "0", "--skip-garbage", "--stats", "--tokens", "6",
                         "--workers", str(self.parts)], self.path("rs.out"))
        self.rs_port = wait_listening(self.path("rs.out"), self.rs)
        self.es = spawn([PY, os.path.join(HERE, "endless_server.py")], self.path("endless.out"))
        self.es_port = wait_listening(self.path("endless.out"), self.es)
        if not self.rs_port or not self.es_port:
            return check("setup", False, "servers did not start: %s %s" % (
                file_text(self.path("rs.out")), file_text(self.path("endless.out"))))
        self.mport = free_port()
        self.ts = Tracer("ts", [TS, "trace", "-p", str(self.rs.pid), "-p", str(self.es.pid),
                                "--json", "--listen", "127.0.0.1:%d" % self.mport, "--otlp",
                                "http://127.0.0.1:%d/v1/traces" % self.rcv_port,
                                "--slow-ttft", "1ms"], self.tmp)
        if not wait_for(lambda: "attached" in self.ts.stderr() or not self.ts.alive(), T_START) \
                or not self.ts.alive():
            return check("setup", False, "tracer did not attach: " + self.ts.stderr()[-500:])
        s0 = proc_status(self.ts.p.pid)
        info("tracer VmRSS %.1f MiB once attached" % (kib(s0.get("VmRSS")) / 1024 if s0 else -1))
        self.m = Metrics(self.mport, self.tmp, "ts")
        self.prev, self.delta = None, {}
        body, why = self.m.scrape("start")
        self.prev = body
        names = sorted(set(n for n, _, _ in series(body) if LOSS_METRIC.match(n)))
        info("loss counters in /metrics: %s" % (", ".join(names) or "none"))
        return check("setup", True, "tracer %d on refserver %d (port %d) and endless server %d "
                     "(port %d); metrics on %d; OTLP receiver on %d" % (
                         self.ts.p.pid, self.rs.pid, self.rs_port, self.es.pid, self.es_port,
                         self.mport, self.rcv_port))

    # --- phases
    def rs_fds(self):
        return sum(max(fd_count(p), 0) for p in [self.rs.pid] + children(self.rs.pid))

    def p01_idle(self):
        ph = "p01 idle-20k"
        per = -(-IDLE_CONNS // self.parts)
        t0 = time.monotonic()
        holders = [register(subprocess.Popen(
            [PY, os.path.abspath(__file__), "--hold", str(self.rs_port),
             str(min(per, IDLE_CONNS - i * per))], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, start_new_session=True)) for i in range(self.parts)]
        held, errs = 0, []
        for h in holders:
            line = read_line(h.stdout, 90).decode("utf-8", "replace").split()
            if line[:1] == ["held"]:
                held += int(line[1])
                if len(line) > 2:
                    errs.append(" ".join(line[2:]))
            else:
                errs.append("holder said %r" % " ".join(line))
        t_conn = time.monotonic() - t0
        wait_for(lambda: self.rs_fds() >= held, 20)
        peak = self.rs_fds()
        s = proc_status(self.ts.p.pid)
        check("%s held" % ph, held == IDLE_CONNS and peak >= IDLE_CONNS and
              self.rs.poll() is None,
              "%d connections opened by %d clients in %.1f s%s; refserver's %d processes have "
              "%d descriptors open; tracer VmRSS %.1f MiB" % (
                  held, self.parts, t_conn, " (" + "; ".join(errs) + ")" if errs else "",
                  1 + len(children(self.rs.pid)), peak,
                  kib(s.get("VmRSS")) / 1024 if s else -1))
        self.good(ph + " (while held)")
        for h in holders:
            try:
                h.stdin.write(b"close\n")
                h.stdin.flush()
            except OSError:
                pass
        for h in holders:
            try:
                h.wait(30)
            except subprocess.TimeoutExpired:
                stop(h, signal.SIGKILL)
        wait_for(lambda: self.rs_fds() < 200, 20)
        info("%s: connections reset; refserver descriptors now %d" % (ph, self.rs_fds()))
        self.after(ph)

    def p02_header(self):
        ph = "p02 header-1m"
        body = chat_body(b'"hdr"', 3)
        big = b"a" * (1 << 20)
        many = b"".join(b"X-H%05d: %s\r\n" % (i, b"b" * 48) for i in range(16384))
        reqs = [
            ("1 MiB header line", post(body, extra_head=b"X-Big: " + big + b"\r\n")),
            ("1 MiB of 16384 headers", post(body, extra_head=many)),
            ("1 MiB request line", b"POST /v1/chat/completions?" + b"q" * (1 << 20) +
             b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body),
        ]
        recs = []
        for what, raw in reqs:
            r = exchange(self.rs_port, raw)
            r["what"] = what
            recs.append(r)
        time.sleep(0.5)
        for r, rep in zip(recs, self.reported(recs)):
            info("%s: %s: server %s%s" % (ph, r["what"], rep,
                                          " (" + r["error"] + ")" if r.get("error") else ""))
        self.after(ph, unreported=self.unreported(recs, "what"))

    def p03_garbage(self):
        ph = "p03 garbage"
        rnd = random.Random(3)
        hello = tls_client_hello(rnd)
        junk = bytes(rnd.getrandbits(8) for _ in range(4096))
        for bad in (b"POST /", b"GET /"):
            junk = junk.replace(bad, b"XXXXXX")
        noise = [("TLS ClientHello", hello), ("4 KiB random bytes", junk),
                 ("1 KiB of NULs", b"\0" * 1024),
                 ("response-like bytes", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
                  b"\r\n\r\n0\r\n\r\n"),
                 ("a bare CRLFCRLF and a header fragment", b"\r\n\r\nHost: x\r\n\r\n"),
                 ("random bytes glued to the request", None)]
        s = connect(self.rs_port)
        recs = [exchange(s, post(chat_body(tokens=4)))]
        for what, raw in noise:
            time.sleep(0.1)
            if raw is None:
                r = exchange(s, junk[:300] + post(chat_body(tokens=4)))
            else:
                s.sendall(raw)
                time.sleep(0.2)
                r = exchange(s, post(chat_body(tokens=4)))
            r["after"] = what
            recs.append(r)
        s.close()
        time.sleep(0.3)

        def verdict(group):
            bad = []
            for r in group:
                got = self.ts.find(r["port"], r["send_start_ns"] - 1000000, r["end_ns"])
                g = got[0] if len(got) == 1 else None
                desc = "the request %s" % ("after " + r["after"] if "after" in r else "before")
                if r.get("status") != 200 or r.get("tokens") != 4:
                    bad.append("%s: client got %s" % (desc, r.get("status", r.get("error"))))
                elif not g or (g.get("outcome"), g.get("tokens")) != ("ok", r.get("tokens")):
                    bad.append("%s: %s" % (desc, "not reported" if not got else
                                           "%s tokens=%s" % (g.get("outcome") if g else
                                                             "%d lines" % len(got),
                                                             g.get("tokens") if g else "-")))
            return bad
        apart, glued = recs[:-1], recs[-1:]
        bad = verdict(apart)
        check("%s same-connection requests" % ph, not bad,
              "%d requests on one keep-alive connection, noise written between them (%s): %s"
              % (len(apart), ", ".join(w for w, r in noise if r is not None),
                 "every one answered and reported exactly" if not bad else "; ".join(bad)))
        # Garbage and a request in one read: where the request starts inside the read is a
        # guess the tracer does not make (a server that answered the garbage would have its
        # reply paired with the request). Reported exactly, or left out and counted below;
        # never reported with wrong numbers.
        bad = [b for b in verdict(glued) if not b.endswith("not reported")]
        check("%s glued to a request" % ph, not bad,
              "300 random bytes and a request in one write, on the same connection: %s" % (
                  "not reported with wrong numbers (%s)" % self.reported(glued)[0]
                  if not bad else "; ".join(bad)))
        # A connection whose first bytes are TLS: the kernel marks it and sends no more of its
        # bytes; with no TLS library in the server, it is counted as TLS with no plaintext.
        s = connect(self.rs_port)
        s.sendall(hello)
        time.sleep(0.2)
        r = exchange(s, post(chat_body(tokens=4)))
        s.close()
        self.tls_first = r
        info("%s: a connection starting with a ClientHello, then a request: client %s, "
             "tracer %s" % (ph, r.get("status"), self.reported([r])[0]))
        self.after(ph, unreported=self.unreported(glued, "after"))

    def p04_partial(self):
        ph = "p04 partial-bodies"
        prefix = (b'{"model":"partial","stream":true,"messages":[{"role":"user","content":"')
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                b"application/json\r\nContent-Length: %d\r\n\r\n" % PARTIAL_CLEN)
        chunk = head + prefix + b"p" * (PARTIAL_BYTES - len(prefix))
        socks, err = [], None
        before = proc_status(self.ts.p.pid)
        try:
            for _ in range(PARTIAL_CONNS):
                s = connect(self.rs_port)
                s.sendall(chunk)
                socks.append(s)
        except OSError as e:
            err = str(e)
        time.sleep(2)
        during = proc_status(self.ts.p.pid)
        check("%s held" % ph, len(socks) == PARTIAL_CONNS and self.rs.poll() is None,
              "%d connections each sent %d bytes of a %d-byte body%s; tracer VmRSS %.1f -> "
              "%.1f MiB" % (len(socks), len(chunk) - len(head), PARTIAL_CLEN,
                            " (" + err + ")" if err else "",
                            kib(before.get("VmRSS")) / 1024 if before else -1,
                            kib(during.get("VmRSS")) / 1024 if during else -1))
        self.good(ph + " (while held)")
        for s in socks:
            reset_close(s)
        time.sleep(0.5)
        self.ts.poll()
        n = sum(1 for d in self.ts.lines if isinstance(d, dict) and d.get("model") == "partial")
        info("%s: %d JSON lines for the partial requests after the resets" % (ph, n))
        self.after(ph)
        unf = sum(v for k, v in self.delta.items() if "unfinished_request" in k)
        # 200 x 64 KiB in a burst can fill the ring buffer on a loaded machine: a request
        # whose every record was lost cannot be seen, and may be missing only as far as
        # the lost records were counted (each hides at most one request's start).
        lost = sum(v for k, v in self.delta.items() if k.startswith("tokenscope_events_lost"))
        short = max(0, len(socks) - n - unf)
        check("%s accounted" % ph, short <= lost,
              "%d requests cut by their client: %d reported, %d counted as unfinished "
              "(tokenscope_dropped_total{what=\"unfinished_request\"})%s" % (
                  len(socks), n, unf,
                  "; %d not seen, within the %d records counted lost (events_lost_total)"
                  % (short, lost) if short else ""))

    def p05_cl20(self):
        ph = "p05 cl-20-digits"
        body = chat_body(tokens=5)
        good = exchange(self.rs_port, post(body, clen=b"%020d" % len(body)))
        bad, matched = match_report(self.ts, [good])
        check("%s zero-padded length" % ph, not bad and good.get("tokens") == 5,
              "Content-Length: %020d: client %s tokens=%s; %s" % (
                  len(body), good.get("status"), good.get("tokens"),
                  "reported exactly" if not bad else "; ".join(bad)))
        recs = []
        for v in (b"99999999999999999999", b"18446744073709551616", b"18446744073709551615",
                  b"12345678901234567890", b"-0000000000000000001", b"00000000000000000000"):
            r = exchange(self.rs_port, post(body, clen=v) + b"trailing bytes after the body")
            r["clen"] = v.decode()
            recs.append(r)
        time.sleep(0.5)
        for r, rep in zip(recs, self.reported(recs)):
            info("%s: Content-Length: %s: server %s" % (ph, r["clen"], rep))
        self.after(ph, unreported=self.unreported(recs, "clen"))

    def p06_models(self):
        ph = "p06 model-names"
        raw = [b"ctl\x01\x02\x07\x08\x0b\x0c\x1f\x7f", b"nul\x00after", b'q\\"uo\\"te',
               b"back\\\\slash", b"single'quote", b"line1\nline2\r\nline3", b"tab\there",
               b"\x1b[31mred\x1b[0m", b"\x1b]0;title\x07", b"\x1b[2J\x1b[H",
               b"bad\xff\xfe", b"bad\xc3\x28", b"sur\xed\xa0\x80", b"big\xf4\x90\x80\x80",
               b"overlong\xc0\xaf", b"cut\xe2\x82", b"label}{=\\\"x\\\"}", b"valid-\xe6\xa8\xa1"
               b"\xe5\x9e\x8b-\xc3\xbc", b"x" * 300, b"", b"\xe2\x80\xa8sep\xe2\x80\xa9"]
        esc = [b"\\u0000", b"ctl\\u0001\\u001f\\u007f", b"\\u001b[31mred\\u001b[0m",
               b"nl\\u000a\\u000d", b"\\ud800", b"\\udfff", b"lone\\ud83d", b"\\ud83d\\ude00",
               b"\\u2028", b"\\u0022quote\\u005c", b"\\uFFFE\\uFFFF"]
        recs = []
        for kind, names in (("raw", raw), ("escaped", esc)):
            for name in names:
                r = exchange(self.rs_port, post(chat_body(b'"' + name + b'"', 3)))
                r["name"] = (kind, name)
                recs.append(r)
        # Models that are not strings, and a body that nests deeply.
        for mj in (b"123", b"null", b'{"a":"b"}', b'["x"]', b"true"):
            r = exchange(self.rs_port, post(chat_body(mj, 3)))
            r["name"] = ("json", mj)
            recs.append(r)
        bad, matched = match_report(self.ts, [r for r in recs if r.get("outcome") == "ok"])
        refused = [r for r in recs if r.get("outcome") != "ok"]
        check("%s requests" % ph, not bad,
              "%d of %d answered by the server%s; %d reported exactly%s" % (
                  len(recs) - len(refused), len(recs),
                  " (refused: %s)" % ", ".join("%r -> %s" % (r["name"][1][:20], r.get(
                      "status", r.get("error"))) for r in refused) if refused else "",
                  matched, ("; " + "; ".join(bad[:5])) if bad else ""))
        for r in recs:
            got = self.ts.find(r["port"], r["send_start_ns"] - 1000000, r["end_ns"] +
                               2000000000)
            info("%s: %s %s -> model %s" % (ph, r["name"][0], ascii(r["name"][1])[:60],
                                             ", ".join(ascii(g.get("model")) for g in got)
                                             or "(not reported)"))
        self.after(ph)

    def p07_models70(self):
        ph = "p07 models-70"
        outs, threads, recs = [], [], []
        lock = threading.Lock()

        def one(i):
            out = self.path("gt-model-%02d.json" % i)
            rc, r, err = gtclient(self.rs_port, 1, 1, 1, out,
                                  GOOD + ["--model", "stress-model-%02d" % i])
            with lock:
                recs.extend(r)
        for base in range(0, MODELS, 10):
            threads = [threading.Thread(target=one, args=(i,), daemon=True)
                       for i in range(base, min(base + 10, MODELS))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(T_CLIENT)
        bad, matched = match_report(self.ts, recs)
        check("%s requests" % ph, not bad and len(recs) == MODELS,
              "%d of %d client records, %d reported exactly%s" % (
                  len(recs), MODELS, matched, ("; " + "; ".join(bad[:5])) if bad else ""))
        time.sleep(0.5)
        body, why = self.m.scrape(ph + "-cap")
        labels = model_labels(body)
        over = metric_sum(body, "tokenscope_label_overflow_total", rb'family="requests"')
        # What the cap should have done: the first 64 label sets kept, later ones "other".
        self.ts.poll()
        seen, expect = [], 0
        for d in self.ts.lines:
            if not isinstance(d, dict):
                continue
            key = (d.get("model") if d.get("model") is not None else "unknown")
            if key in seen:
                continue
            if len(seen) < 64:
                seen.append(key)
            else:
                expect += 1
        other_reqs = metric_sum(body, "tokenscope_requests_total", rb'model="other"')
        check("%s label cap" % ph, len(labels) <= 65 and b"other" in labels and over > 0,
              "%d model label values (64 + other expected at most), "
              "label_overflow_total{family=\"requests\"} %d, requests under other %d; "
              "distinct models in the JSON lines %d" % (
                  len(labels), over, other_reqs,
                  len(set(d.get("model") if d.get("model") is not None else "unknown"
                          for d in self.ts.lines if isinstance(d, dict)))))
        info("%s: requests past the cap by the JSON lines' order: %d (a label set is new at "
             "its first finished request)" % (ph, expect + 0))
        self.after(ph)

    def p08_endless(self):
        ph = "p08 endless-line"
        recs = []
        for path in (b"/endless-finish", b"/endless-close", b"/endless-raw"):
            r = exchange(self.es_port, post(chat_body(b'"endless"', 3), path=path), timeout=30,
                         discard=True)
            r["path"] = path.decode()
            recs.append(r)
        time.sleep(1)
        for r, rep in zip(recs, self.reported(recs)):
            got = self.ts.find(r["port"], r["send_start_ns"] - 1000000, r["end_ns"] +
                               2000000000)
            info("%s: %s: client %s, %s bytes%s; tracer %s" % (
                ph, r["path"], r.get("status"), r.get("bytes"),
                " (" + r["error"] + ")" if r.get("error") else "",
                "; ".join("outcome %s frames %s all_frames %s lost_bytes %s" % (
                    g.get("outcome"), g.get("frames"), g.get("all_frames"),
                    g.get("lost_bytes")) for g in got) or "not reported"))
        # What a client sees: /endless-finish one content frame; /endless-close a chunked
        # body cut short (not ok); /endless-raw a body ended by the close whose last event never
        # ended, so no content frame (SSE drops an unfinished event). The tracer may instead
        # say lost, but never ok with another count.
        want_frames = {"/endless-finish": 1, "/endless-raw": 0}
        bad = []
        for r in recs:
            got = self.ts.find(r["port"], r["send_start_ns"] - 1000000, r["end_ns"] +
                               2000000000)
            if len(got) != 1:
                bad.append("%s: %d lines" % (r["path"], len(got)))
            elif got[0].get("outcome") == "ok" and got[0].get("frames") != want_frames.get(
                    r["path"]):
                bad.append("%s: ok with %s frames" % (r["path"], got[0].get("frames")))
        check("%s reported" % ph, not bad,
              "each endless response reported once, none ok with a wrong count"
              if not bad else "; ".join(bad))
        self.good(ph + " (endless server)", port=self.es_port, n=3, c=1, k=3,
                  extra=["--max-tokens", "5", "--usage"])
        self.after(ph)
        # A line the tracer let go must be counted, unless the request says it was cut.
        whole = [r for r in recs if not any(g.get("outcome") in ("aborted", "lost") for g in
                                            self.ts.find(r["port"], r["send_start_ns"] - 1000000,
                                                         r["end_ns"] + 2000000000))]
        over = sum(v for k, v in self.delta.items() if "oversize_frame" in k)
        check("%s accounted" % ph, over >= len(whole),
              "%d frames over the size limit counted (tokenscope_dropped_total"
              "{what=\"oversize_frame\"}) for the %d endless lines not reported as aborted or "
              "lost (%s)" % (over, len(whole), ", ".join(r["path"] for r in whole) or "none"))

    def p09_streams(self):
        ph = "p09 streams-1000"
        out = self.path("gt-1000.json")
        t0 = time.monotonic()
        rc, recs, err = gtclient(self.rs_port, STREAMS, STREAMS, 1, out,
                                 ["--max-tokens", "10", "--token-ms", "20", "--prefill-ms", "5",
                                  "--usage"], timeout=120)
        dt = time.monotonic() - t0
        okc = sum(1 for r in recs if r.get("outcome") == "ok")
        bad, matched = match_report(self.ts, recs, timeout=30)
        check("%s reported" % ph, rc == 0 and len(recs) == STREAMS and not bad,
              "gtclient rc=%s in %.1f s: %d records, %d ok; %d reported exactly%s" % (
                  rc, dt, len(recs), okc, matched,
                  ("; " + "; ".join(bad[:5]) + (" (+%d)" % (len(bad) - 5) if len(bad) > 5
                                                else "")) if bad else ""))
        self.after(ph)

    def p10_truncated(self):
        ph = "p10 truncated-body"
        variants = [
            ("object cut after a comma", b'{"model":"x","messages":[{"role":"user",'
             b'"content":"hi"},'),
            ("array never closed", b'{"model":"x","stream":true,"messages":['),
            ("string never closed", b'{"model":"x","messages":["abc'),
            ("model string never closed", b'{"model":"abc'),
            ("10,000 nested arrays", b'{"model":"x","messages":' + b"[" * 10000),
            ("10,000 nested objects", b'{"model":"x","m":' + b'{"a":' * 10000),
            ("a lone backslash in a string", b'{"model":"x\\'),
            ("a number cut short", b'{"model":"x","max_tokens":1e'),
            ("closing brace where a value is due", b'{"model":"x","messages":[}'),
            ("closing brace where a key is due", b'{"model":"x",}'),
            ("closing bracket in an object", b'{"model":"x"]'),
        ]
        hung = None
        for what, body in variants:
            r = exchange(self.rs_port, post(body), timeout=5)
            rc, recs, err = gtclient(self.rs_port, 1, 1, 1, self.path("gt-trunc.json"), GOOD)
            bad, matched = match_report(self.ts, recs, timeout=5)
            cpu = self.ts.cpu_pct(1.0) if self.ts.alive() else None
            info("%s: %s (%d bytes): server %s; a good request after it %s; tracer CPU %s%%" % (
                ph, what, len(body), r.get("status", r.get("error")),
                "reported exactly" if not bad else "NOT reported (%s)" % "; ".join(bad),
                "%.0f" % cpu if cpu is not None else "?"))
            if bad:
                hung = (what, body, cpu)
                break
        if hung and self.ts.alive():
            stack = gdb_stack(self.ts.p.pid)
            self.hang_stack = stack
            info("%s: the tracer's threads after %r:\n%s" % (ph, hung[0], "\n".join(
                "    " + l for l in stack.splitlines())))
        check("%s tracer keeps reporting" % ph, hung is None,
              "after %d malformed bodies every following good request was reported" %
              len(variants) if hung is None else
              "after %r (%r) the next good request was not reported within 5 s; tracer %s, "
              "CPU %s%% of a core" % (hung[0], hung[1][:40], "alive" if self.ts.alive()
                                      else "gone", "%.0f" % hung[2] if hung[2] is not None
                                      else "?"))
        self.after(ph)

    # --- the main tracer's end
    def finish_main(self):
        time.sleep(1)
        body, why = self.m.scrape("final")
        rcv0 = receiver_stats(self.rcv_port)
        alive = self.ts.alive()
        hung = self.ts.finish()
        err = self.ts.stderr()
        st = self.ts.status
        crash = ""
        if st is not None and st < 0:
            crash = "killed by signal %d (%s); %s" % (-st, signal.Signals(-st).name,
                                                    segfault_site(self.ts.p.pid))
        san = sanitizer_report(err)
        if san:
            info("the main tracer's sanitizer report:\n" + san)
        check("tracer exit", alive and not hung and st == 0,
              "SIGINT -> exit status %s" % st if not hung and st == 0 else
              ("hung: no exit %d s after SIGINT (killed)" % T_EXIT if hung else
               "was alive at the end: %s; exit status %s %s" % (alive, st, crash)))
        summ = summary_lines(err)
        for l in summ:
            info("summary: " + l.strip())
        lost = [l for l in summ if l.strip().startswith("lost:")]
        conns = [l for l in summ if l.strip().startswith("connections:")]
        self.ts.poll()
        docs = [d for d in self.ts.lines if isinstance(d, dict)]
        m = re.search(r"--- summary: (\d+) requests", err)
        nsum = int(m.group(1)) if m else None
        req_total = metric_sum(body, "tokenscope_requests_total") if body else None
        # requests that are not inference: in the JSON lines, counted apart elsewhere
        mo = re.search(r"other requests: (\d+)", err)
        nother = int(mo.group(1)) if mo else 0
        other_total = metric_sum(body, "tokenscope_other_requests_total") if body else 0
        ev_lost = metric_sum(body, "tokenscope_events_lost_total") if body else None
        ml = re.search(r"lost: (\d+) records", err)
        lost_outcomes = sum(1 for d in docs if d.get("outcome") == "lost")
        info("JSON lines %d, summary requests %s, requests_total %s, outcome lost %d, "
             "events_lost_total %s" % (len(docs), nsum, req_total, lost_outcomes, ev_lost))
        check("loss counted and shown", bool(lost) and bool(conns) and nsum is not None and
              nsum + nother == len(docs) and req_total is not None and
              req_total + (other_total or 0) == len(docs) and ml is not None and
              ev_lost == int(ml.group(1)),
              "summary has its lost and connections lines; summary requests %s (+ %d other) = "
              "JSON lines %d = sum of tokenscope_requests_total %s (+ %s other); kernel records "
              "lost %s = tokenscope_events_lost_total %s" % (
                  nsum, nother, len(docs), req_total, other_total,
                  ml.group(1) if ml else "?", ev_lost))
        mism = summary_vs_metrics(err, body)
        check("summary = metrics loss counters", mism == [],
              "every number of the summary's lost and dropped lines equals its counter in "
              "/metrics" if mism == [] else "; ".join(mism))
        if getattr(self, "tls_first", None):
            mi = re.search(r"(\d+) carried TLS, of which (\d+) ended with no plaintext seen",
                           err)
            check("TLS-first connection counted",
                  mi is not None and int(mi.group(1)) >= 1 and int(mi.group(2)) >= 1,
                  "connections line: %s" % (conns[0].strip() if conns else "missing"))
        self.json_check("JSON lines", self.ts)
        hwm = self.ts.hwm_kib()
        check("tracer peak RSS", hwm is not None and 0 < hwm <= RSS_LIMIT_KIB,
              "%.1f MiB (ru_maxrss at exit; limit %d MiB)" % (hwm / 1024, RSS_LIMIT_KIB // 1024)
              if hwm else "unknown: the tracer was not reaped by this script")
        self.main_hwm = hwm
        self.otlp_line(err)

    def json_check(self, name, tr):
        n = len(tr.lines)
        detail = "%d lines, every one strict UTF-8 JSON" % n
        if tr.bad:
            detail = "%d of %d lines are not strict UTF-8 JSON: %s" % (
                len(tr.bad), n, "; ".join("line %d: %s: %s" % (i, why, ascii(raw[:160]))
                                          for i, why, raw in tr.bad[:3]))
        check(name, n > 0 and not tr.bad, detail)

    def otlp_line(self, err):
        for l in err.splitlines():
            if "otlp:" in l:
                info(l.strip())

    # --- the soak
    def soak(self, ph, tag, binary, duration, asan=False):
        """A `trace --all` tracer over two pre-forking servers for duration seconds."""
        P = lambda name: self.path(tag + "-" + name)
        bindir = P("bin")
        os.makedirs(bindir, exist_ok=True)
        named = os.path.join(bindir, "llama-server")
        shutil.copy(os.path.join(HERE, "prefork_server.py"), named)
        limit = str(int(duration + 120))
        a = spawn([PY, named, "--per-worker", "4", "--token-ms", "5", "--pid-log",
                   P("a.pids"), "--wait-signal", "--spawn-per-s", str(SPAWN_PER_S),
                   "--limit-s", limit], P("a.out"))
        b = spawn([PY, os.path.join(HERE, "prefork_server.py"), "--per-worker", "12",
                   "--token-ms", "5", "--pid-log", P("b.pids"), "--limit-s", limit],
                  P("b.out"))
        aport, bport = wait_listening(P("a.out"), a), wait_listening(P("b.out"), b)
        if not aport or not bport:
            return check("%s setup" % ph, False, "pre-forking servers did not start")
        # The named server runs in a "container": a cgroup named as docker names one, which is
        # all --all reads. Its workers inherit it; each request must carry its id.
        cid, why = container_cgroup(a.pid, tag)
        if not cid:
            info("%s: no container for the named server (%s)" % (ph, why))
        mport = free_port()
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
                   UBSAN_OPTIONS="print_stacktrace=1") if asan else None
        tr = Tracer(tag, [binary, "trace", "--all", "--json", "--listen",
                          "127.0.0.1:%d" % mport, "--otlp",
                          "http://127.0.0.1:%d/%s/v1/traces" % (self.rcv_port, tag),
                          "--slow-ttft", "1ms"], self.tmp, env=env)
        found = wait_for(lambda: ("found %d (llama.cpp" % a.pid) in tr.stderr() or
                         not tr.alive(), T_START)
        if not tr.alive() or ("found %d (llama.cpp" % a.pid) not in tr.stderr():
            return check("%s setup" % ph, False, "the --all tracer did not find %d: %s" % (
                a.pid, tr.stderr()[-600:]))
        check("%s setup" % ph, True, "--all tracer %d found the named master %d%s; the other "
              "master %d is found only through its workers' frames" % (
                  tr.p.pid, a.pid, " in container %s" % cid[:12] if cid else "", b.pid))
        os.kill(a.pid, signal.SIGUSR1)
        m = Metrics(mport, self.tmp, tag)
        stop_at = time.monotonic() + duration
        outs = {"a": [], "b": []}

        def load(which, port):
            i = 0
            while time.monotonic() < stop_at and tr.alive() and not exiting.is_set():
                i += 1
                out = P("gt-%s-%04d.json" % (which, i))
                gtclient(port, 20, 2, 1, out, ["--max-tokens", "4", "--usage", "--model",
                                               SOAK_MODEL], timeout=60)
                outs[which].append(out)
        threads = [threading.Thread(target=load, args=("a", aport), daemon=True),
                   threading.Thread(target=load, args=("b", bport), daemon=True)]
        for t in threads:
            t.start()
        samples, promtool_bad, t0 = [], [], time.monotonic()
        while time.monotonic() < stop_at and tr.alive():
            time.sleep(min(5, max(stop_at - time.monotonic(), 0)))
            s = proc_status(tr.p.pid)
            body, why = m.scrape("soak")
            if why:
                promtool_bad.append(why)
            # the soak's own series: --all may also find other servers on a shared machine
            ser = [x for x in series(body) if b'model="%s"' % SOAK_MODEL.encode() in x[1]] \
                if body else []
            # A leak adds label sets (a pid, a container, a model per fork); a family that
            # starts only once some request has it (the queue and prefill histograms, from the
            # first request that GPU steps on the machine were attributed to) adds series on
            # label sets already there.
            sets = {re.sub(rb',?le="[^"]*"', b"", x[1]) for x in ser}
            if s:
                samples.append((time.monotonic() - t0, kib(s.get("VmRSS")), kib(s.get("VmHWM")),
                                len(sets), metric_sum(body, "tokenscope_label_overflow_total"),
                                len(model_labels(body)), fd_count(tr.p.pid),
                                int(s.get("Threads", "0") or 0),
                                metric_sum(body, "tokenscope_traced_processes")))
        for t in threads:
            t.join(90)
        time.sleep(1.5)
        body, why = m.scrape("soak-final")
        if why:
            promtool_bad.append(why)
        spawned = SPAWN_PER_S * (time.monotonic() - t0)
        forks_a = len(file_text(P("a.pids")).split())
        forks_b = len(file_text(P("b.pids")).split())
        alive = tr.alive()
        hung = tr.finish()
        st = tr.status
        err = tr.stderr()
        crash = ""
        if st is not None and st < 0:
            crash = "killed by signal %d (%s); %s" % (-st, signal.Signals(-st).name,
                                                    segfault_site(tr.p.pid))
        san = sanitizer_report(err)
        if san:
            info("%s: the --all tracer's sanitizer report:\n%s" % (ph, san))
        info("%s: %.0f s, %d + %d workers forked (named, traffic), and about %d short-lived "
             "children of the named master" % (ph, time.monotonic() - t0, forks_a, forks_b,
                                                spawned))
        info("%s: samples (s, VmRSS KiB, VmHWM KiB, label sets, label_overflow, models, fds, "
             "threads, traced processes):" % ph)
        for smp in samples:
            info("    %5.1f %7d %7d %5d %4d %3d %4d %3d %4d" % smp)
        check("%s tracer survived" % ph, alive and not hung and st == 0,
              "alive to the end, SIGINT -> exit status 0" if alive and not hung and st == 0
              else "alive at the end: %s; %s" % (alive, "hung after SIGINT" if hung else
                                                 "exit status %s %s; %s" % (
                                                     st, crash, crash_line(err))))
        for l in summary_lines(err):
            info("soak summary: " + l.strip())
        self.otlp_line(err)
        # named server: every request exact
        recs = {"a": [], "b": []}
        for w in ("a", "b"):
            for out in outs[w]:
                try:
                    with open(out) as f:
                        recs[w].extend(json.loads(l) for l in f if l.strip())
                except (OSError, ValueError):
                    pass
        bad, matched = match_report(tr, recs["a"], timeout=1, server=aport)
        check("%s named server's requests" % ph, recs["a"] and not bad,
              "%d client requests, %d reported with the client's token counts%s" % (
                  len(recs["a"]), matched, ("; " + "; ".join(bad[:4]) + (
                      " (+%d)" % (len(bad) - 4) if len(bad) > 4 else "")) if bad else ""))
        # traffic-found workers: whatever is reported must be exact
        bpids = set(int(x) for x in file_text(P("b.pids")).split())
        found_b = sum(1 for p in bpids if re.search(r"found %d " % p, err))
        wrong, rep = [], 0
        for r in recs["b"]:
            got = tr.find(r["port"], r["send_start_ns"] - 1000000, r["end_ns"], bport) \
                if r.get("port") else []
            got = [g for g in got if g.get("pid") in bpids]
            if not got:
                continue
            rep += 1
            g = got[0]
            if len(got) > 1 or (g.get("outcome"), g.get("tokens")) != (r.get("outcome"),
                                                                        r.get("tokens")):
                wrong.append("port %s: %d lines, %s tokens=%s vs client %s tokens=%s" % (
                    r["port"], len(got), g.get("outcome"), g.get("tokens"), r.get("outcome"),
                    r.get("tokens")))
        if cid:
            apids = set(int(x) for x in file_text(P("a.pids")).split()) | {a.pid}
            short = cid[:12]
            wrongc = {}
            for d in tr.lines:
                if not isinstance(d, dict):
                    continue
                want = short if d.get("pid") in apids else (None if d.get("pid") in bpids
                                                            else "-")
                if want != "-" and d.get("container") != want:
                    k = ascii(d.get("container"))
                    wrongc[k] = wrongc.get(k, 0) + 1
            conts = set()
            for n, labels, v in series(body or b""):
                mc = re.search(rb'container="((?:[^"\\]|\\.)*)"', labels)
                if mc:
                    conts.add(mc.group(1).decode("utf-8", "replace"))
            check("%s container labels" % ph, not wrongc and conts == {short},
                  "every request of the named server's %d processes carries container %s, the "
                  "others none; /metrics container values %s" % (
                      len(apids), short, sorted(conts)) if not wrongc and conts == {short} else
                  "requests with a wrong container: %s; /metrics container values %s" % (
                      ", ".join("%s x%d" % kv for kv in wrongc.items()), sorted(conts)))
        check("%s traffic-found workers' requests" % ph, not wrong and rep > 0,
              "%d of %d workers found by their frames; %d of %d client requests reported, "
              "every one exact%s" % (found_b, len(bpids), rep, len(recs["b"]),
                                     ("; " + "; ".join(wrong[:4])) if wrong else ""))
        # flat over the soak
        if asan:
            pass
        elif len(samples) >= 4:
            n3 = len(samples) // 3
            mid, end = samples[n3:2 * n3], samples[2 * n3:]
            q, last = min(mid, key=lambda x: x[1]), min(end, key=lambda x: x[1])
            growth = last[1] - q[1]
            nforks = (forks_a + forks_b + spawned) * (last[0] - q[0]) / max(samples[-1][0], 1)
            check("%s RSS flat" % ph, growth <= SOAK_RSS_GROWTH_KIB,
                  "VmRSS floor %d KiB (%.0f-%.0f s) -> %d KiB (%.0f-%.0f s): %+d KiB (limit +%d "
                  "KiB), about %d forks apart (%.1f bytes per fork)" % (
                      q[1], mid[0][0], mid[-1][0], last[1], end[0][0], end[-1][0], growth,
                      SOAK_RSS_GROWTH_KIB, nforks, growth * 1024.0 / max(nforks, 1)))
            traced = [smp[8] for smp in samples]
            check("%s traced processes bounded" % ph, max(traced) <= SOAK_TRACED_MAX,
                  "tokenscope_traced_processes at most %d (limit %d) while %d processes forked "
                  "and exited; samples %s" % (max(traced), SOAK_TRACED_MAX,
                                              forks_a + forks_b + spawned,
                                              " ".join("%d" % v for v in traced)))
            ser0, ser1 = samples[0][3], samples[-1][3]
            over = max(smp[4] for smp in samples)
            check("%s label sets flat" % ph, ser1 == ser0 and over == 0,
                  "%d label sets at %.0f s, %d at %.0f s; label_overflow_total %d" % (
                      ser0, samples[0][0], ser1, samples[-1][0], over))
        else:
            check("%s RSS flat" % ph, False, "only %d samples (the tracer died?)" % len(samples))
        check("%s metrics" % ph, not promtool_bad and m.n > 0,
              "%d scrapes, promtool check metrics ok on each" % m.n if not promtool_bad else
              "%d of %d scrapes failed: %s" % (len(promtool_bad), m.n, promtool_bad[0]))
        self.json_check("%s JSON lines" % ph, tr)
        if not asan:
            hwm = tr.hwm_kib()
            check("%s peak RSS" % ph, hwm is not None and 0 < hwm <= RSS_LIMIT_KIB,
                  "%.1f MiB (ru_maxrss at exit; limit %d MiB)" % (hwm / 1024,
                                                                 RSS_LIMIT_KIB // 1024)
                  if hwm else "unknown")
        for p in (a, b):
            stop(p, signal.SIGTERM)


# The summary's lost and dropped lines, number by number, and the counter each one is.
SUMMARY_COUNTERS = [
    (r"lost: (\d+) records", 'tokenscope_events_lost_total'),
    (r"lost: \d+ records \((\d+) bytes\)", 'tokenscope_dropped_bytes_total{where="kernel"}'),
    (r"(\d+) bytes beyond capture", 'tokenscope_dropped_bytes_total{where="capture"}'),
    (r"(\d+) bytes missing from streams", 'tokenscope_dropped_bytes_total{where="stream"}'),
    (r"(\d+) desyncs", 'tokenscope_dropped_total{what="desync"}'),
    (r"(\d+) bad records", 'tokenscope_dropped_total{what="bad_record"}'),
    (r"(\d+) unfinished requests", 'tokenscope_dropped_total{what="unfinished_request"}'),
    (r"(\d+) responses to unseen requests", 'tokenscope_dropped_total{what="orphan_response"}'),
    (r"(\d+) requests past the pipelining limit",
     'tokenscope_dropped_total{what="pipelining_overflow"}'),
    (r"(\d+) frames over \d+ KiB", 'tokenscope_dropped_total{what="oversize_frame"}'),
    (r"(\d+) stream runs with missing bytes", 'tokenscope_dropped_total{what="damaged_stream"}'),
]


def summary_vs_metrics(err, body):
    """Mismatches between the final summary's loss numbers and the last scrape's counters."""
    text = "\n".join(summary_lines(err))
    have = loss_counters(body)
    out = []
    for rx, key in SUMMARY_COUNTERS:
        m = re.search(rx, text)
        if not m:
            out.append("summary has no %r" % rx)
        elif key not in have:
            out.append("/metrics has no %s (summary %s)" % (key, m.group(1)))
        elif int(m.group(1)) != have[key]:
            out.append("%s: summary %s, /metrics %d" % (key, m.group(1), have[key]))
    return out


CGROUPS = []  # made for the soak's container, removed at exit


def container_cgroup(pid, tag):
    """Moves pid into a cgroup named as docker names a container's; (id, None) or (None, why)."""
    try:
        with open("/proc/mounts") as f:
            cg2 = next((l.split()[1] for l in f if l.split()[2:3] == ["cgroup2"]), None)
    except OSError as e:
        return None, str(e)
    if not cg2:
        return None, "no cgroup2 mount"
    import hashlib
    cid = hashlib.sha256(b"tokenscope-stress-%d-%s" % (os.getpid(), tag.encode())).hexdigest()
    top = os.path.join(cg2, "tokenscope-stress-%d-%s" % (os.getpid(), tag))
    d = os.path.join(top, "docker-%s.scope" % cid)
    try:
        os.makedirs(d)
        CGROUPS[:0] = [top, d]
        if PIDFILE:  # for the caller's cleanup, should this process be killed
            with open(PIDFILE + ".cgroups", "a") as f:
                f.write("%s\n%s\n" % (d, top))
        with open(os.path.join(d, "cgroup.procs"), "w") as f:
            f.write(str(pid))
    except OSError as e:
        return None, "%s: %s" % (d, e)
    return cid, None


def remove_cgroups():
    for d in reversed(CGROUPS):
        for _ in range(30):
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


def summary_lines(err):
    i = err.rfind("--- summary")
    return err[i:].splitlines() if i >= 0 else []


def receiver_stats(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/stats" % port, timeout=5) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def tls_client_hello(rnd):
    """A TLS 1.2/1.3 ClientHello record as a browser would start a connection."""
    ciphers = bytes.fromhex("130113021303c02bc02fc02cc030cca9cca8c013c014009c009d002f0035")
    sni = b"inference.example"
    ext_sni = struct.pack(">HHHBH", 0, len(sni) + 5, len(sni) + 3, 0, len(sni)) + sni
    ext_alpn = bytes.fromhex("0010000e000c02683208687474702f312e31")
    ext_versions = bytes.fromhex("002b0005040304030303")
    exts = ext_sni + ext_alpn + ext_versions
    body = (b"\x03\x03" + bytes(rnd.getrandbits(8) for _ in range(32)) + b"\x20" +
            bytes(rnd.getrandbits(8) for _ in range(32)) + struct.pack(">H", len(ciphers)) +
            ciphers + b"\x01\x00" + struct.pack(">H", len(exts)) + exts)
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs


def main():
    for path, what in ((TS, "tokenscope"), (RS, "refserver"), (GT, "gtclient")):
        if not os.access(path, os.X_OK):
            skip("stress", "%s not built: %s (make)" % (what, path))
            return 0
    if os.geteuid() != 0:
        skip("stress", "needs root to load BPF programs")
        return 0
    for tool in ("promtool", "curl"):
        if not shutil.which(tool):
            skip("stress", "%s not installed (scripts/deps.sh)" % tool)
            return 0
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = IDLE_CONNS + FD_SPARE if hard == resource.RLIM_INFINITY else hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    except (ValueError, OSError) as e:
        skip("stress", "cannot raise RLIMIT_NOFILE to %d: %s" % (nofile, e))
        return 0
    if nofile < 4 * FD_SPARE + STREAMS:
        skip("stress", "RLIMIT_NOFILE hard limit %d is too low" % hard)
        return 0
    tmp = tempfile.mkdtemp(prefix="tokenscope-stress.")
    keep = os.environ.get("STRESS_KEEP") == "1"
    atexit.register(lambda: keep or shutil.rmtree(tmp, ignore_errors=True))
    atexit.register(remove_cgroups)
    atexit.register(cleanup)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(128 + s))
    say("stress: tokenscope %s, work directory %s%s" % (TS, tmp, " (kept)" if keep else ""))
    t_start = time.monotonic()
    st = Stress(tmp)
    st.nofile = nofile
    if st.setup():
        for phase in (st.p01_idle, st.p02_header, st.p03_garbage, st.p04_partial, st.p05_cl20,
                      st.p06_models, st.p07_models70, st.p08_endless, st.p09_streams,
                      st.p10_truncated):
            if ONLY and phase.__name__[:3] not in ONLY:
                continue
            t = time.monotonic()
            try:
                phase()
            except Exception as e:  # a phase that breaks is a failure, the run goes on
                import traceback
                check(phase.__name__, False, "the phase raised %s: %s\n%s" % (
                    type(e).__name__, e, traceback.format_exc()))
            info("(%s took %.1f s)" % (phase.__name__, time.monotonic() - t))
        st.finish_main()
        stop(st.rs)
        stop(st.es, signal.SIGTERM)
        rs_stats = file_text(st.path("rs.out")).strip().splitlines()
        info("refserver: " + (rs_stats[-1] if rs_stats else "?"))
        soaks = [("p11", "p11 prefork-soak", "soak", TS, SOAK_S, False)]
        if TS_ASAN:
            soaks.append(("p12", "p12 prefork-soak-asan", "asan", TS_ASAN, SOAK_ASAN_S, True))
        else:
            skip("p12 prefork-soak-asan", "no sanitizer build of tokenscope (TOKENSCOPE_ASAN)")
        for key, ph, tag, binary, duration, asan in soaks:
            if ONLY and key not in ONLY:
                continue
            t = time.monotonic()
            try:
                st.soak(ph, tag, binary, duration, asan)
            except Exception as e:
                import traceback
                check(ph, False, "the phase raised %s: %s\n%s" % (
                    type(e).__name__, e, traceback.format_exc()))
            info("(%s took %.1f s)" % (ph, time.monotonic() - t))
        time.sleep(2)  # the last OTLP batch
        rs = receiver_stats(st.rcv_port)
        if rs is None:
            check("OTLP bodies accepted", False, "receiver not answering")
        else:
            check("OTLP bodies accepted", rs["rejected"] == 0 and rs["accepted"] > 0,
                  "%d bodies (%d spans) accepted, %d rejected%s" % (
                      rs["accepted"], rs["spans"], rs["rejected"],
                      ": " + "; ".join("%dx %s" % (n, why) for why, n in
                                       rs["reasons"].items()) if rs["rejected"] else ""))
            if rs["rejected"] and keep:
                info("rejected bodies in %s" % os.path.join(tmp, "otlp", "rejected"))
    say("stress took %.0f s" % (time.monotonic() - t_start))
    say("%d passed, %d failed, %d skipped" % (results["PASS"], results["FAIL"], results["SKIP"]))
    return 1 if results["FAIL"] else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--hold"]:
        sys.exit(hold(int(sys.argv[2]), int(sys.argv[3])))
    sys.exit(main())
