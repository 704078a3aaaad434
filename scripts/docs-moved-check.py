#!/usr/bin/env python3
"""Move, do not lose (issue 27, the README split): every non-empty line of an old README is
found, whole, in README.md or docs/*.md today. Link targets and heading levels are ignored
(the split rewrote them); what is left is printed, to be read against the rewrites listed
in the commit.

  scripts/docs-moved-check.py [COMMIT]   (default 61bcd9e, the last commit before the split)"""
import glob, re, subprocess, sys

rev = sys.argv[1] if len(sys.argv) > 1 else "61bcd9e"
old = subprocess.check_output(["git", "show", f"{rev}:README.md"], text=True).splitlines()


def norm(line):
    line = re.sub(r"\]\([^)]*\)", "]()", line.strip())
    return re.sub(r"^#+\s*", "", line)


have = set()
for f in ["README.md"] + sorted(glob.glob("docs/*.md")):
    have.update(norm(l) for l in open(f))
missing = [(i + 1, l) for i, l in enumerate(old) if l.strip() and norm(l) not in have]
for n, l in missing:
    print(f"{n}: {l}")
total = sum(1 for l in old if l.strip())
print(f"{total - len(missing)} of {total} non-empty lines of {rev}'s README found whole; "
      f"{len(missing)} not")
