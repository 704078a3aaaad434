#!/usr/bin/env python3
"""No function in user/ is longer than LIMIT lines (make check, group docs).

  check_functions.py              every user/*/*.c
  check_functions.py --self-test  the checker against code made to fail it

A function is what the house style writes: its name and parameters, then `{` alone at the start
of a line, its body, and `}` alone at the start of a line; its length counts from `{` to `}`.
Prints the longest, and a FAIL line per function over the limit; exits 1 if any."""
import glob
import os
import re
import sys

LIMIT = 100


def functions(text):
    """(name, length) of each function of a C file."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i] == "{" and i > 0:
            j = i - 1
            while j > 0 and not re.match(r"^[A-Za-z_].*\(", lines[j]):
                j -= 1
            m = re.search(r"([A-Za-z_]\w*)\s*\(", lines[j])
            k = i + 1
            while k < len(lines) and lines[k] != "}":
                k += 1
            out.append((m.group(1) if m else "?", k - i + 1))
            i = k
        i += 1
    return out


def self_test():
    long_body = "\n".join(["\tx++;"] * LIMIT)
    text = f"static int a(void)\n{{\n\treturn 0;\n}}\n\nint b(int x)\n{{\n{long_body}\n}}\n"
    got = functions(text)
    ok = got == [("a", 3), ("b", LIMIT + 2)]
    print(f"{'PASS' if ok else 'FAIL'} functions self-test: lengths counted from {{ to }}"
          + ("" if ok else f": {got}"))
    return 0 if ok else 1


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    found = [(n, name, f) for f in sorted(glob.glob("user/*/*.c"))
             for name, n in functions(open(f, encoding="utf-8").read())]
    bad = [x for x in found if x[0] > LIMIT]
    for n, name, f in bad:
        print(f"FAIL functions: {f}: {name} is {n} lines (at most {LIMIT})")
    if not bad:
        n, name, f = max(found)
        print(f"PASS functions: {len(found)} functions in user/, none over {LIMIT} lines "
              f"(the longest: {name} in {f}, {n})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
