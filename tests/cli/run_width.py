#!/usr/bin/env python3
"""Every line tokenscope writes for a person fits a 100-column terminal.

Measured in display cells (an East Asian wide character takes two), on:
  1. the help of tokenscope and of each command;
  2. `report` of every golden recording (the request lines, the summary, the diagnosis) and
     its stderr;
  3. a live trace of the reference server (the demo's mixed workload: aborts, an HTTP error,
     a summary every 2 s) with an OTLP collector that is not there, a CUPTI library that is
     not there and --listen: stdout and stderr;
  4. `run` of the reference server with --gpu (a CUDA library mapped: the CUPTI note, the
     NVML message), stdout and stderr.
JSON lines and the Prometheus text are machine formats and are not measured. Lines are wrapped
on a terminal (a log or a pipe keeps each message whole): the runs here set TOKENSCOPE_WRAP,
which wraps a pipe as a terminal, and one report also runs on a real pseudo-terminal. Needs
root for 3 and 4 (BPF); prints PASS/FAIL/SKIP lines and the totals line; exits 1 if anything
failed.
"""
import os
import pty
import signal
import subprocess
import sys
import tempfile
import time
import unicodedata

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from lib import free_port, ko, ok, sk, totals  # noqa: E402
TS = os.path.join(ROOT, ".output/tokenscope")
RS = os.path.join(ROOT, ".output/refserver")
GT = os.path.join(ROOT, ".output/gtclient")
WIDTH = 100
os.environ["TOKENSCOPE_WRAP"] = "1"


def cells(line):
    w = 0
    for ch in line:
        if unicodedata.combining(ch):
            continue
        w += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return w


def check(name, text):
    """text: what was written; PASS when every line is within WIDTH cells."""
    lines = text.splitlines()
    wide = [(cells(l), l) for l in lines if cells(l) > WIDTH]
    if wide:
        ko(name, "%d of %d lines wider than %d columns, the widest %d: %r" % (
            len(wide), len(lines), WIDTH, max(wide)[0], max(wide)[1][:160]))
    else:
        ok("%s: %d lines, the widest %d columns" % (
            name, len(lines), max([cells(l) for l in lines] or [0])))


def run(argv, **kw):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                       **kw)
    return p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def wait_line(path, text, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            with open(path, errors="replace") as f:
                if text in f.read():
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def on_terminal(rec):
    """report on a pseudo-terminal, without TOKENSCOPE_WRAP: wrapped all the same."""
    env = dict(os.environ)
    env.pop("TOKENSCOPE_WRAP", None)
    master, slave = pty.openpty()
    p = subprocess.Popen([TS, "report", rec], stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait()
    os.close(master)
    text = out.decode("utf-8", "replace").replace("\r\n", "\n")
    cont = [l for l in text.splitlines() if l.startswith("      ") and l.strip()]
    if not cont:
        ko("report on a terminal", "no line was wrapped (no continuation line)")
    else:
        check("report on a terminal (%d continuation lines)" % len(cont), text)


def main():
    if not os.access(TS, os.X_OK):
        sk("width", "%s is not built" % TS)
        return
    # 1. help
    out = run([TS, "--help"])[0]
    for c in ("trace", "run", "top", "record", "report", "check"):
        out += run([TS, c, "--help"])[0]
    check("help texts", out)

    # 2. report of every golden recording
    recs = os.path.join(ROOT, "tests/golden/recordings")
    out = err = ""
    for name in sorted(os.listdir(recs)):
        o, e = run([TS, "report", os.path.join(recs, name)])
        out += o
        err += e
    check("report of the golden recordings, stdout", out)
    check("report of the golden recordings, stderr", err)
    on_terminal(os.path.join(recs, "errors.tsr"))

    if os.geteuid() != 0:
        sk("live trace", "needs root (BPF)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        live(tmp)
        gpu_run(tmp)


def live(tmp):
    srv_out = os.path.join(tmp, "rs.out")
    srv = subprocess.Popen([RS, "--port", "0", "--token-ms", "5", "--prefill-ms", "20",
                            "--max-streams", "4", "--pattern", "mixed"],
                           stdout=open(srv_out, "w"), stderr=subprocess.STDOUT)
    try:
        if not wait_line(srv_out, "listening", 5):
            ko("live trace", "the reference server did not start")
            return
        port = open(srv_out).read().split()[-1]
        env = dict(os.environ, TOKENSCOPE_CUPTI_LIB="/nonexistent/libtokenscope_cupti.so")
        ts_out, ts_err = os.path.join(tmp, "ts.out"), os.path.join(tmp, "ts.err")
        ts = subprocess.Popen([TS, "trace", "-p", str(srv.pid), "2", "--listen", "127.0.0.1:0",
                               "--otlp", "http://127.0.0.1:%d/v1/traces" % free_port(),
                               "--slow-ttft", "1ms"],
                              stdout=open(ts_out, "w"), stderr=open(ts_err, "w"), env=env)
        if not wait_line(ts_err, "attached", 10):
            ts.kill()
            ko("live trace", "tokenscope did not attach: " + open(ts_err).read()[-300:])
            return
        subprocess.run([GT, "--port", port, "-n", "16", "-c", "6", "-k", "2",
                        "--max-tokens", "20", "--usage", "--abort-every", "7",
                        "--abort-after", "5", "--http-error-every", "9"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        time.sleep(2.5)  # an interval summary
        ts.send_signal(signal.SIGINT)
        try:
            ts.wait(20)
        except subprocess.TimeoutExpired:
            ts.kill()
        out, err = open(ts_out, errors="replace").read(), open(ts_err, errors="replace").read()
        if "--- summary" not in out:
            ko("live trace", "no summary: " + err[-300:])
            return
        check("live trace, stdout (request lines, interval summaries, summary)", out)
        check("live trace, stderr (attach, OTLP collector not there, exit)", err)
    finally:
        srv.kill()
        srv.wait()


def gpu_run(tmp):
    out_p, err_p = os.path.join(tmp, "run.out"), os.path.join(tmp, "run.err")
    env = dict(os.environ, TOKENSCOPE_CUPTI_LIB="/nonexistent/libtokenscope_cupti.so")
    p = subprocess.Popen([TS, "run", "--gpu-steps", "--", RS, "--port", "0", "--gpu"],
                         stdout=open(out_p, "w"), stderr=open(err_p, "w"), env=env)
    wait_line(err_p, "tracing CUDA calls", 10)
    time.sleep(1)
    p.send_signal(signal.SIGTERM)  # passed on to the server; then tokenscope ends
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    err = open(err_p, errors="replace").read()
    if "attached" not in err:
        ko("run --gpu", "did not attach: " + err[-300:])
        return
    check("run of a CUDA server, stdout", open(out_p, errors="replace").read())
    check("run of a CUDA server, stderr (the CUPTI note)", err)


if __name__ == "__main__":
    main()
    sys.exit(totals())
