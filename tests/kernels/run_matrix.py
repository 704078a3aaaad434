#!/usr/bin/python3
"""The kernel matrix: tokenscope on Debian's own packaged kernels, each booted in qemu (software
emulation, TCG: nested KVM hangs these kernels here) from an initramfs that holds busybox, the
static tokenscope, the reference server and the ground-truth client, and the BPF tests with the
libraries they load. In each machine tests/kernels/vm_init.sh runs `tokenscope check`, the BPF
tests, a trace of the reference server under the mixed workload (aborts, HTTP and stream errors,
keep-alive), and `--all` finding a server by its name's rule; this script reads the console and
judges: every request of the client reported with its outcome, every ok one with the client's
token count and its first token within TOL_MS of the client's, and what `check` said against
what the run saw (features off leave exactly their fields null).

The kernels (Debian packages, downloaded once into .output/kernels; 5.10 from bullseye through
an apt configuration of the script's own, the system's left alone):
  5.10  bullseye's linux-image-5.10.0-*-amd64-unsigned (Debian 11, Amazon Linux 2's generation)
  6.1   bookworm's linux-image-6.1.0-*-amd64-unsigned (Debian 12, Amazon Linux 2023's)
  6.12  bookworm's linux-image-6.12.*+deb12-amd64-unsigned (Debian 13's, backported)

Prints PASS/FAIL/SKIP lines, a table of each kernel's features, and "N passed, N failed,
N skipped". x86_64 hosts only. KERNELS="5.10 6.1" runs some.

  run_matrix.py [--keep] [--write-doc]
    --keep        leaves the consoles and the initramfs in .output/kernels
    --write-doc   rewrites docs/building.md's kernel table from what the machines saw (else it
                  is checked against it)
"""
import concurrent.futures
import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from lib import ko, ok, sk, totals  # noqa: E402
OUT = os.path.join(ROOT, ".output")
KDIR = os.path.join(OUT, "kernels")
TS_STATIC = os.path.join(OUT, "static", "tokenscope")
MKINITRD = os.path.join(ROOT, "tests", "arm64", "mkinitrd.py")
# Booting and the checks take about a minute per kernel under emulation on 2 cores.
VM_TIMEOUT = int(os.environ.get("KERNEL_VM_TIMEOUT", "900"))
# Machines booted at once, at most one per host core.
PARALLEL = int(os.environ.get("KERNEL_VM_PARALLEL", "3"))
TOL_MS = 25.0  # a first token as tokenscope saw it (the server's write) vs the client's read
BULLSEYE = ("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
            "http://deb.debian.org/debian bullseye main\n"
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
            "http://deb.debian.org/debian-security bullseye-security main\n")
KERNELS = [
    ("5.10", r"^linux-image-5\.10\.0-[0-9]+-amd64-unsigned$", "bullseye"),
    ("6.1", r"^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$", None),
    ("6.12", r"^linux-image-6\.12\.[0-9.]+\+deb12-amd64-unsigned$", None),
]
# How docs/building.md names each kernel in its table.
DOC_NAMES = {"5.10": "5.10 (Debian 11)", "6.1": "6.1 (Debian 12)",
             "6.12": "6.12 (Debian 12 backports, Debian 13)"}
DOC = os.path.join(ROOT, "docs", "building.md")
DOC_BEGIN = "<!-- kernel table: tests/kernels/run_matrix.py writes and checks it -->"
DOC_END = "<!-- end of the kernel table -->"
# What a feature that is off leaves null on every request line.
NULL_WITHOUT = {"sk_data_ready": ["received_ns", "socket_wait_ms"]}

def apt_opts(suite):
    """apt-get options for a suite the system does not list: sources, lists and cache of our own."""
    if not suite:
        return []
    base = os.path.join(KDIR, "apt-" + suite)
    for d in ("lists/partial", "cache/archives/partial"):
        os.makedirs(os.path.join(base, d), exist_ok=True)
    src = os.path.join(base, "sources.list")
    with open(src, "w") as f:
        f.write(BULLSEYE if suite == "bullseye" else "")
    return ["-o", f"Dir::Etc::SourceList={src}", "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", f"Dir::State::Lists={base}/lists", "-o", f"Dir::Cache={base}/cache",
            "-o", "APT::Architectures::=amd64"]


def kernel_deb(label, pattern, suite):
    """The newest package of the pattern, downloaded once; its path, or None with why."""
    have = sorted(glob.glob(os.path.join(KDIR, "linux-image-*.deb")))
    for p in have:
        name = os.path.basename(p).split("_")[0]
        if re.match(pattern, name):
            return p, None
    opts = apt_opts(suite)
    if suite:
        r = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True)
        if r.returncode:
            return None, f"apt-get update of {suite} failed: {r.stderr.strip()[-200:]}"
    r = subprocess.run(["apt-cache", *opts, "search", "--names-only", pattern.strip("^$")],
                       capture_output=True, text=True)
    names = sorted((l.split()[0] for l in r.stdout.splitlines()
                    if re.match(pattern, l.split()[0])),
                   key=lambda n: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", n)])
    if not names:
        return None, f"no package matching {pattern} in apt's lists"
    r = subprocess.run(["apt-get", *opts, "download", names[-1]], cwd=KDIR,
                       capture_output=True, text=True)
    if r.returncode:
        return None, f"apt-get download {names[-1]} failed: {r.stderr.strip()[-200:]}"
    got = [p for p in glob.glob(os.path.join(KDIR, names[-1] + "_*.deb"))]
    return (got[0], None) if got else (None, f"{names[-1]} not downloaded")


def vmlinuz(deb):
    """The kernel image of a package, extracted once beside it."""
    out = deb[:-4] + ".vmlinuz"
    if not os.path.exists(out):
        with tempfile.TemporaryDirectory() as t:
            subprocess.run(["dpkg-deb", "-x", deb, t], check=True)
            img = glob.glob(os.path.join(t, "boot", "vmlinuz-*"))[0]
            shutil.copyfile(img, out)
    return out


def libs_of(binary):
    r = subprocess.run(["ldd", binary], capture_output=True, text=True)
    found = []
    for l in r.stdout.splitlines():
        for w in l.split():
            if w.startswith("/"):
                found.append(w)
    return found


def initramfs(path):
    """busybox, the init, tokenscope and the test programs with every library they load."""
    root = tempfile.mkdtemp(prefix="ts-kroot-")
    try:
        for d in ("bin", "work/tests", "work/.output", "proc", "sys", "tmp", "dev"):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        shutil.copy(shutil.which("busybox") or "/bin/busybox", os.path.join(root, "bin", "busybox"))
        shutil.copy(os.path.join(ROOT, "tests", "kernels", "vm_init.sh"), os.path.join(root, "init"))
        os.chmod(os.path.join(root, "init"), 0o755)
        work = os.path.join(root, "work")
        shutil.copy(TS_STATIC, os.path.join(work, "tokenscope"))
        progs = [os.path.join(OUT, "refserver"), os.path.join(OUT, "gtclient")]
        for p in progs:
            shutil.copy(p, work)
        # --all finds llama.cpp's server by its name's rule
        shutil.copy(os.path.join(OUT, "refserver"), os.path.join(work, "llama-server"))
        tests = []
        for t in ("test_bpf_capture", "test_bpf_traffic", "test_bpf_tls", "test_bpf_gotls",
                  "test_bpf_cuda"):
            src = os.path.join(OUT, "tests", t)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(work, "tests"))
                tests.append(src)
        # test_bpf_gotls runs the Go pair by its path in the build, from /work
        if os.path.exists(os.path.join(OUT, "gotlspair")):
            shutil.copy(os.path.join(OUT, "gotlspair"), os.path.join(work, ".output"))
        # test_bpf_cuda hooks the toolkit's runtime and the stand-in, by their paths here
        extra = [os.path.realpath("/usr/local/cuda/lib64/libcudart.so.13"),
                 os.path.join(OUT, "standin", "libcudart.so.13")]
        # opened with dlopen, so ldd does not list it: Go's crypto/tls RETs (test_bpf_gotls)
        extra += glob.glob("/lib/x86_64-linux-gnu/libcapstone.so.*")
        links = {"/usr/local/cuda/lib64/libcudart.so.13":
                 os.path.realpath("/usr/local/cuda/lib64/libcudart.so.13")}
        for lib in sorted(set(l for p in progs + tests for l in libs_of(p))) + extra:
            if not os.path.exists(lib):
                continue
            dst = os.path.join(root, lib.lstrip("/"))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(lib, dst)
        if os.path.exists(os.path.join(OUT, "standin", "libcudart.so.13")):
            dst = os.path.join(work, ".output", "standin")
            os.makedirs(dst, exist_ok=True)
            shutil.copy(os.path.join(OUT, "standin", "libcudart.so.13"), dst)
        for link, target in links.items():
            dst = os.path.join(root, link.lstrip("/"))
            if os.path.exists(os.path.join(root, target.lstrip("/"))):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.symlink(target, dst)
        # the dynamic loader where the programs look for it
        for d in ("lib64",):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        ld = "/lib64/ld-linux-x86-64.so.2"
        if not os.path.exists(os.path.join(root, ld.lstrip("/"))):
            shutil.copy(os.path.realpath(ld), os.path.join(root, ld.lstrip("/")))
        subprocess.run([sys.executable, MKINITRD, path, root], check=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def boot(image, initrd, console):
    cmd = ["qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "2048",
           "-nographic", "-no-reboot", "-nic", "none", "-kernel", image, "-initrd", initrd,
           "-append", "console=ttyS0 panic=-1 quiet"]
    with open(console, "w") as f:
        try:
            subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=VM_TIMEOUT)
        except subprocess.TimeoutExpired:
            f.write("\n@@ TIMEOUT\n")
    with open(console, errors="replace") as f:
        return f.read().replace("\r", "")


def sections(text):
    out, rcs, cur, buf = {}, {}, None, []
    for line in text.splitlines():
        if line.startswith("@@ BEGIN "):
            cur, buf = line[9:].split(" (at ")[0].strip(), []
        elif line.startswith("@@ END ") and cur:
            out[cur] = "\n".join(buf)
            cur = None
        elif line.startswith("@@ RC "):
            name, rc = line[6:].rsplit(" ", 1)
            rcs[name] = int(rc) if rc.isdigit() else -1
        elif cur is not None:
            buf.append(line)
    return out, rcs


def jsonl(text):
    rows = []
    for l in text.splitlines():
        l = l.strip()
        if l.startswith("{"):
            try:
                rows.append(json.loads(l))
            except json.JSONDecodeError:
                pass
    return rows


def peer_port(conn):
    return int(conn.split("<-")[1].split("#")[0].rsplit(":", 1)[1])


def compare(name, ts_rows, client, feats):
    """Every client request reported, ok ones with their tokens and first token; features off
    leave exactly their fields null."""
    reqs = [t for t in ts_rows if "conn" in t]
    by_port = {}
    for t in reqs:
        by_port.setdefault(peer_port(t["conn"]), []).append(t)
    for v in by_port.values():
        v.sort(key=lambda t: t["arrival_ns"])
    problems, worst = [], 0.0
    want_outcome = {"ok": "ok", "http_error": "http_error", "stream_error": "stream_error",
                    "aborted": "aborted"}
    for c in client:
        lst = by_port.get(c["port"], [])
        if c["seq"] >= len(lst):
            problems.append(f"request {c['id']} ({c['outcome']}) not reported")
            continue
        t = lst[c["seq"]]
        if want_outcome.get(c["outcome"]) != t["outcome"]:
            problems.append(f"request {c['id']}: outcome {t['outcome']}, the client's "
                            f"{c['outcome']}")
        if c["outcome"] != "ok":
            continue
        if t["tokens"] != c["tokens"]:
            problems.append(f"request {c['id']}: {t['tokens']} tokens, the client's {c['tokens']}")
        if c.get("first_token_ns") and t.get("first_token_ns"):
            d = (c["first_token_ns"] - t["first_token_ns"]) / 1e6
            worst = max(worst, abs(d))
            if d < -1 or d > TOL_MS:
                problems.append(f"request {c['id']}: first token {d:.1f} ms before the client's")
    for feat, fields in NULL_WITHOUT.items():
        for t in reqs:
            for fl in fields:
                if not feats.get(feat, True) and t.get(fl) is not None:
                    problems.append(f"{fl} set on a kernel without {feat}")
                    break
    nulls = sorted({fl for t in reqs for fl in sum(NULL_WITHOUT.values(), [])
                    if t.get(fl) is None})
    return problems, worst, nulls, len(reqs)


def judge(label, text):
    secs, rcs = sections(text)
    kern = re.search(r"@@ KERNEL (\S+)", text)
    if not kern:
        ko(f"kernel-{label}", "the machine did not start the checks: "
           + " | ".join(text.strip().splitlines()[-8:])[:600])
        return None
    if "@@ DONE" not in text:
        ko(f"kernel-{label}", "the checks did not finish (timed out or crashed): "
           + " | ".join(text.strip().splitlines()[-6:])[:500])
    feats = {}
    try:
        check = json.loads(secs.get("check", "{}") or "{}")
        feats = {f["name"]: f["state"] == "on" for f in check.get("features", [])}
        hooks = {k["name"]: k["detail"] for k in check.get("checks", [])}.get("syscalls", "")
        hooks = re.search(r"\((fentry/fexit|raw syscall tracepoints[^)]*)", hooks)
        if rcs.get("check") == 0 and check.get("can_trace"):
            ok(f"kernel-{label} check", f"Linux {kern.group(1)}: tracing can start; features "
               f"off: {', '.join(n for n, on in feats.items() if not on) or 'none'}; "
               f"syscalls hooked by {hooks.group(1) if hooks else '?'}")
        else:
            ko(f"kernel-{label} check", f"exit {rcs.get('check')}: "
               + secs.get("check-text", "")[-600:].replace("\n", " | "))
    except json.JSONDecodeError:
        ko(f"kernel-{label} check", "no JSON: " + secs.get("check", "")[:300])
    for t, rc in sorted(rcs.items()):
        if not t.startswith("test_bpf_"):
            continue
        log = secs.get(t, "")
        tail = [l for l in log.splitlines() if re.match(r"^\d+ passed", l)]
        if rc == 0:
            ok(f"kernel-{label} {t}", tail[-1] if tail else "")
        else:
            fails = [l for l in log.splitlines() if l.startswith("FAIL") or ": " in l][:4]
            ko(f"kernel-{label} {t}", f"exit {rc}: " + " | ".join(fails)[:500])
    client = jsonl(secs.get("client", ""))
    problems, worst, nulls, n = compare(label, jsonl(secs.get("trace-json", "")), client, feats)
    if rcs.get("trace") == 0 and client and not problems:
        ok(f"kernel-{label} trace", f"{len(client)} client requests, {n} reported, every "
           f"outcome and token count the client's, first tokens within {worst:.1f} ms of it; "
           f"null: {', '.join(nulls) or 'none'}")
    else:
        ko(f"kernel-{label} trace", f"exit {rcs.get('trace')}, {len(client)} client requests: "
           + "; ".join(problems[:6]) + " | " + secs.get("trace-err", "")[-300:])
    all_client = jsonl(secs.get("all-client", ""))
    all_problems, _, _, n_all = compare(label, jsonl(secs.get("all-json", "")), all_client, feats)
    found = re.search(r"found \d+ \(llama\.cpp", secs.get("all-err", ""))
    if rcs.get("all") == 0 and found and all_client and not all_problems:
        ok(f"kernel-{label} all", f"--all found the server by rule; {n_all} of "
           f"{len(all_client)} requests reported, token counts exact")
    else:
        ko(f"kernel-{label} all", f"exit {rcs.get('all')}, found: {bool(found)}: "
           + "; ".join(all_problems[:4]) + " | " + secs.get("all-err", "")[-300:])
    return feats, nulls


def main():
    keep = "--keep" in sys.argv[1:]
    if os.uname().machine != "x86_64":
        sk("kernels", "the matrix boots x86_64 kernels: an x86_64 host only")
        return finish()
    if os.geteuid() != 0:
        sk("kernels", "needs root (apt-get download, and the BPF tests in the machines)")
        return finish()
    for tool in ("qemu-system-x86_64", "busybox", "dpkg-deb", "apt-get"):
        if not shutil.which(tool):
            sk("kernels", f"no {tool} (scripts/deps.sh test installs qemu-system-x86 and "
               "busybox-static)")
            return finish()
    for f in (TS_STATIC, os.path.join(OUT, "refserver"), os.path.join(OUT, "gtclient")):
        if not os.path.exists(f):
            ko("kernels", f"{f} missing (make STATIC=1)")
            return finish()
    os.makedirs(KDIR, exist_ok=True)
    initrd = os.path.join(KDIR, "initrd.gz")
    initramfs(initrd)
    wanted = os.environ.get("KERNELS", "").split()
    table, machines = [], []
    for label, pattern, suite in KERNELS:
        if wanted and label not in wanted:
            continue
        deb, why = kernel_deb(label, pattern, suite)
        if not deb:
            ko(f"kernel-{label}", why)
            continue
        machines.append((label, deb))
    # A machine per core at once (each emulated CPU is one host thread), judged in order.
    def run_one(m):
        label, deb = m
        t0 = time.monotonic()
        print(f"booting {label} ({os.path.basename(deb)})", file=sys.stderr, flush=True)
        text = boot(vmlinuz(deb), initrd, os.path.join(KDIR, f"console-{label}.log"))
        print(f"{label} done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        return text
    workers = max(1, min(len(machines), os.cpu_count() or 1, PARALLEL))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for (label, deb), text in zip(machines, pool.map(run_one, machines)):
            res = judge(label, text)
            if res:
                table.append((label, os.path.basename(deb).split("_")[1], *res))
    if table:
        names = list(table[0][2].keys())
        print("kernel  package version        " + " ".join(f"{n:>13}" for n in names)
              + "  null fields")
        for label, ver, feats, nulls in table:
            print(f"{label:<7} {ver:<22} " + " ".join(f"{'on' if feats[n] else 'off':>13}"
                                                        for n in names)
                  + f"  {', '.join(nulls) or '-'}")
        doc_table(table, "--write-doc" in sys.argv[1:])
    if not keep and os.path.exists(initrd):
        os.remove(initrd)
    return finish()


def doc_table(table, write):
    """docs/building.md's table of what each kernel gets, against what the machines saw; with
    --write-doc, rewritten from it (after a run of every kernel)."""
    names = list(table[0][2].keys())
    rows = ["| kernel | " + " | ".join(f"`{n}`" for n in names) + " | null in every request |",
            "|---|" + "---|" * len(names) + "---|"]
    for label, _ver, feats, nulls in table:
        rows.append(f"| {DOC_NAMES.get(label, label)} | "
                    + " | ".join("on" if feats[n] else "off" for n in names) + " | "
                    + (", ".join(f"`{n}`" for n in nulls) or "none") + " |")
    with open(DOC) as f:
        text = f.read()
    if DOC_BEGIN not in text or DOC_END not in text:
        ko("kernels doc", f"{DOC} has no kernel table between its markers")
        return
    head, rest = text.split(DOC_BEGIN, 1)
    old, tail = rest.split(DOC_END, 1)
    old_rows = [l for l in old.strip().splitlines() if l.startswith("|")]
    if write and len(table) == len(KERNELS):
        with open(DOC, "w") as f:
            f.write(head + DOC_BEGIN + "\n" + "\n".join(rows) + "\n" + DOC_END + tail)
        ok("kernels doc", f"{DOC} written")
        return
    # Only the kernels that ran are compared (KERNELS= runs some).
    want = {r.split("|")[1].strip(): r for r in rows[2:]}
    have = {r.split("|")[1].strip(): r for r in old_rows[2:]}
    diff = [f"{k}: the doc says '{have.get(k)}', the machine '{v}'" for k, v in want.items()
            if have.get(k) != v]
    if old_rows[:1] != rows[:1]:
        diff.insert(0, f"header: '{old_rows[:1]}', want '{rows[0]}'")
    if diff:
        ko("kernels doc", "docs/building.md's kernel table is not what the matrix saw "
           "(run_matrix.py --write-doc rewrites it): " + "; ".join(diff))
    else:
        ok("kernels doc", f"docs/building.md's kernel table is what the matrix saw "
           f"({', '.join(want)})")


def finish():
    return totals()


if __name__ == "__main__":
    sys.exit(main())
