#!/usr/bin/env python3
"""Sinks see values, never the pipeline's insides (docs/architecture.md, "Rules the code keeps").

  check_includes.py              user/sinks/ against the rule
  check_includes.py --self-test  the checker against a tree made to fail it

Follows every quoted #include of each file of user/sinks/, through every header it reaches (in
user/ and include/), and fails when one of them is a header of user/pipeline/ that is not a
value header (VALUES): a parser's, a stage's, the pipeline's own. Prints the chain of includes
that reached it. Run from anywhere; exits 1 on any."""
import os
import re
import sys
import tempfile

# What a sink may see of user/pipeline/: the values it is handed and their names.
VALUES = {"sink.h", "request.h", "step.h", "gpu_report.h", "device_sample.h", "self_cost.h",
          "workload.h", "loss.h", "slo.h", "labels.h", "frame_format.h", "req_info.h",
          "trace_ctx.h"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def resolve(root, name, here):
    for base in (os.path.join(root, "user"), os.path.join(root, "include"), here):
        p = os.path.join(base, name)
        if os.path.exists(p):
            return os.path.normpath(p)
    return None


def reach(root, path):
    """{header: the chain of files that included it} for every header path reaches."""
    seen, todo = {}, [(path, [path])]
    while todo:
        f, chain = todo.pop()
        try:
            text = open(f, encoding="utf-8").read()
        except OSError:
            continue
        for name in INCLUDE_RE.findall(text):
            p = resolve(root, name, os.path.dirname(f))
            if p and p not in seen:
                seen[p] = chain + [p]
                todo.append((p, chain + [p]))
    return seen


def check(root):
    bad = []
    pipeline = os.path.join(root, "user", "pipeline") + os.sep
    sinks = os.path.join(root, "user", "sinks")
    for f in sorted(os.listdir(sinks)):
        if not f.endswith((".c", ".h")):
            continue
        for h, chain in sorted(reach(root, os.path.join(sinks, f)).items()):
            if h.startswith(pipeline) and os.path.basename(h) not in VALUES:
                bad.append(" -> ".join(os.path.relpath(c, root) for c in chain))
    return bad


def self_test():
    with tempfile.TemporaryDirectory() as d:
        for p, text in {"user/sinks/a.c": '#include "pipeline/request.h"\n',
                        "user/sinks/b.c": '#include "sinks/b.h"\n',
                        "user/sinks/b.h": '#include "pipeline/step.h"\n',
                        "user/pipeline/request.h": '#include "pipeline/frame.h"\n',
                        "user/pipeline/frame.h": "",
                        "user/pipeline/step.h": '#include "pipeline/gpu_report.h"\n',
                        "user/pipeline/gpu_report.h": ""}.items():
            os.makedirs(os.path.dirname(os.path.join(d, p)), exist_ok=True)
            open(os.path.join(d, p), "w").write(text)
        bad = check(d)
    want = ["user/sinks/a.c -> user/pipeline/request.h -> user/pipeline/frame.h"]
    ok = bad == want
    print(f"{'PASS' if ok else 'FAIL'} includes self-test: a parser header reached through a "
          f"value header is found, value headers through a sink's own header are not"
          + ("" if ok else f": {bad}"))
    return 0 if ok else 1


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    bad = check(root)
    for b in bad:
        print(f"FAIL includes: a sink reaches a pipeline-internal header: {b}")
    if not bad:
        n = len([f for f in os.listdir(os.path.join(root, "user", "sinks"))
                 if f.endswith((".c", ".h"))])
        print(f"PASS includes: the {n} files of user/sinks/ reach only the value headers of "
              f"user/pipeline/ ({', '.join(sorted(VALUES))})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
