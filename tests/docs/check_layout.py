#!/usr/bin/env python3
"""docs/architecture.md's Layout is the tree (make check, group docs).

  check_layout.py                the Layout block against the tree (git's files, tracked or not ignored)
  check_layout.py --self-test    the checker against a layout made to fail it

The Layout is the fenced block under "## Layout": an entry per line that starts in column 0
(a folder ending in '/', or a file), its description on that line and the indented lines after
it. A file is named when its name (or its path below the entry's folder) appears in the entry's
text. Checked:
- every file named exists, below the entry's folder;
- every source file of the source folders (COMPLETE) is named in its folder's entry: the files
  directly in it, and in its subfolders for those listed with '**' (a header x.h is named with
  its module's x.c);
- every subfolder and every file directly in tests/ is named in tests/'s entry.
Prints a PASS or FAIL line per rule; exits 1 if any fails."""
import os
import re
import subprocess
import sys

DOC = "docs/architecture.md"
# Folders whose every file is named; "**": their subfolders' files too.
COMPLETE = ["include/", "cupti/", "bpf/**", "user/cli/", "user/session/", "user/loader/",
            "user/pipeline/", "user/record/", "user/sinks/", "user/lib/", "scripts/", "static/",
            "deploy/**"]
NAME_RE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.+-]*\.[A-Za-z0-9]+)(?![\w/])")


def layout(text):
    """{entry: description} of the Layout block."""
    m = re.search(r"^## Layout\n```\n(.*?)^```", text, re.S | re.M)
    if not m:
        return None
    out, key = {}, None
    for line in m.group(1).splitlines():
        if line and not line[0].isspace():
            key, _, rest = line.partition(" ")
            out[key] = rest
        elif key:
            out[key] += " " + line.strip()
    return out


def names(desc):
    return {n.rstrip(".,;:)") for n in NAME_RE.findall(desc)}


def check(entries, files):
    """The problems of a layout against the tree's files (paths relative to the root)."""
    bad = []
    fileset = set(files)
    for key, desc in entries.items():
        base = key if key.endswith("/") else ""
        for n in names(desc):
            # a version (HTTP/1.1) or a build output (a .so) is not a file of the tree
            if re.search(r"\.\d+$", n) or n.endswith(".so"):
                continue
            if base + n in fileset or n in fileset or any(
                    f.startswith(base) and f.endswith("/" + n) for f in fileset):
                continue
            bad.append(f"{key}: names {n}, which is not in the tree")
    for spec in COMPLETE:
        folder, deep = spec.rstrip("*"), spec.endswith("**")
        desc = entries.get(folder)
        if desc is None:
            bad.append(f"{folder}: no entry")
            continue
        named = names(desc)
        for f in files:
            if not f.startswith(folder):
                continue
            rel = f[len(folder):]
            if "/" in rel and not deep:
                continue
            # a header is named with its module: x.h with x.c
            alike = {rel, os.path.basename(rel)}
            if rel.endswith(".h"):
                alike |= {a[:-2] + ".c" for a in list(alike)}
            if not alike & named:
                bad.append(f"{folder}: {rel} is not named")
    desc = entries.get("tests/")
    if desc is None:
        bad.append("tests/: no entry")
    else:
        tops = {f[len("tests/"):].split("/")[0] + ("/" if "/" in f[len("tests/"):] else "")
                for f in files if f.startswith("tests/")}
        for t in sorted(tops):
            if not re.search(r"(?<![\w.-])" + re.escape(t.rstrip("/")) + r"(?![\w.-])", desc):
                bad.append(f"tests/: {t} is not named")
    return bad


def self_test():
    entries = {"user/lib/": "a.c (one), gone.c (not there)", "tests/": "unit/",
               "include/": "x.h"}
    files = ["user/lib/a.c", "user/lib/b.c", "tests/unit/t.c", "tests/fuzz/f.c", "include/x.h"]
    saved = COMPLETE[:]
    COMPLETE[:] = ["user/lib/", "include/"]
    bad = check(entries, files)
    COMPLETE[:] = saved
    want = ["user/lib/: names gone.c, which is not in the tree", "user/lib/: b.c is not named",
            "tests/: fuzz/ is not named"]
    ok = sorted(bad) == sorted(want)
    print(f"{'PASS' if ok else 'FAIL'} layout self-test: a named file missing, a file not "
          f"named, a tests/ folder not named" + ("" if ok else f": {bad}"))
    return 0 if ok else 1


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    entries = layout(open(DOC, encoding="utf-8").read())
    if entries is None:
        print(f"FAIL layout: no '## Layout' block in {DOC}")
        return 1
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, text=True,
                           check=True).stdout.split()
    bad = check(entries, files)
    for b in bad:
        print(f"FAIL layout {b}")
    if not bad:
        print(f"PASS layout: {DOC} names every file of {len(COMPLETE)} source folders and "
              f"every part of tests/, and every file it names exists")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
