"""Helpers the Python test drivers share (tests/lib.sh is the shell scripts' counterpart).
Import with the tests directory on sys.path: sys.path.insert(0, os.path.join(ROOT, "tests"))."""
import json
import os
import re
import socket
import subprocess
import time

# What the PASS/FAIL/SKIP lines counted (tests/run.sh adds the lines up; totals() prints these).
results = {"pass": 0, "fail": 0, "skip": 0}


def ok(name, why=""):
    results["pass"] += 1
    print(f"PASS {name}" + (f": {why}" if why else ""))


def ko(name, why):
    results["fail"] += 1
    print(f"FAIL {name}: {why}")


def sk(name, why):
    results["skip"] += 1
    print(f"SKIP {name}: {why}")


def totals():
    """Prints the totals line; the exit status: 1 when anything failed."""
    print(f"{results['pass']} passed, {results['fail']} failed, {results['skip']} skipped")
    return 1 if results["fail"] else 0


def wait_for(pred, seconds):
    """Whether pred() came true within seconds (asked every 50 ms)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (a moment later, something may)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bpf_prog_counters(pid):
    """The kernel's counters of each BPF program process pid holds, by name: {name: (run_time_ns,
    run_cnt)}, as bpftool reads them. The programs are found by the process's descriptors
    (their fdinfo's prog_id); bpftool names a program from its BTF whole, else as the kernel keeps
    the name (15 bytes)."""
    ids = set()
    fdinfo = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(fdinfo):
        try:
            with open(os.path.join(fdinfo, fd)) as f:
                m = re.search(r"^prog_id:\s*(\d+)", f.read(), re.M)
        except OSError:
            continue
        if m:
            ids.add(m.group(1))
    out = {}
    for i in ids:
        r = subprocess.run(["bpftool", "-j", "prog", "show", "id", i], capture_output=True)
        if r.returncode:
            continue  # a descriptor closed since
        j = json.loads(r.stdout)
        out[j.get("name", "")] = (j.get("run_time_ns", 0), j.get("run_cnt", 0))
    return out
