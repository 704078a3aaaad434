#!/usr/bin/python3
"""No check that can pass or fail by timing: a shell script that sets `pipefail` must not end a
pipeline with a reader that stops early (`grep -q`, `grep -m N`, `head`, `sed ...q`, an awk
program that calls `exit`). When the
reader exits at its first match, the writer's next write gets SIGPIPE and the pipeline fails,
or not, by how the writer's output was cut into writes: `trace --help | grep -q OPTION` said
the option was missing whenever the help came in two writes. Read the whole input instead
(`grep PATTERN >/dev/null`, `grep -m 1 PATTERN FILE` without a pipe, `sed -n 1p`, `find
-print -quit`, awk that keeps the first match and prints it in END). `make image` failed so:
`ldconfig -p | awk '... { print; exit }'` under pipefail, when ldconfig wrote again after awk
had gone.

Scans every shell script of the repository (*.sh, .ci/run, and any file under scripts/ or
tests/ that starts with a shell's #!), skipping .output/. A line may say why it is safe with a
comment `# pipe-ok: REASON`. Prints PASS/FAIL lines and "N passed, N failed".
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHELLS = re.compile(rb"^#!\s*(/usr/bin/env\s+)?(/bin/|/usr/bin/)?(ba|da|k)?sh\b")
PIPEFAIL = re.compile(r"^\s*set\s+(-[a-zA-Z]*o\s+pipefail|.*-o\s+pipefail)")
# After a '|' (not '||'): a reader that can exit before its input ends.
EARLY = re.compile(
    r"(?<!\|)\|(?!\|)\s*("
    r"grep\b[^|;&]*\s(-[a-zA-Z]*[qm][a-zA-Z]*|--quiet|--silent|--max-count)\b"
    r"|head\b"
    r"|sed\b[^|;&]*[;'\"/ ]q\b"
    r"|awk\b.*\bexit\b"
    r")")


def scripts():
    for d, dirs, files in os.walk(ROOT):
        rel = os.path.relpath(d, ROOT)
        dirs[:] = [x for x in dirs if not x.startswith(".") or x == ".ci"]
        if rel.split(os.sep)[0] in (".output", ".git"):
            continue
        for f in files:
            p = os.path.join(d, f)
            if f.endswith(".sh") or os.path.relpath(p, ROOT) == os.path.join(".ci", "run"):
                yield p
            elif rel.split(os.sep)[0] in ("scripts", "tests") and "." not in f:
                try:
                    with open(p, "rb") as fh:
                        if SHELLS.match(fh.readline()):
                            yield p
                except OSError:
                    pass


def main():
    passed = failed = 0
    for p in sorted(scripts()):
        with open(p, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        if not any(PIPEFAIL.match(l) for l in lines):
            continue
        bad = []
        for i, l in enumerate(lines, 1):
            code = l.split("# pipe-ok:")[0]
            if code.lstrip().startswith("#"):
                continue
            if EARLY.search(code):
                bad.append(f"{i}: {l.strip()}")
        rel = os.path.relpath(p, ROOT)
        if bad:
            failed += 1
            print(f"FAIL pipes {rel}: sets pipefail and ends a pipeline with a reader that "
                  "stops early (SIGPIPE decides the status):")
            for b in bad:
                print("    " + b)
        else:
            passed += 1
            print(f"PASS pipes {rel}: no pipeline cut short under pipefail")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
