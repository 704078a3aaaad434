#!/usr/bin/env python3
"""Every relative link and #anchor in the README and docs/ resolves (make check, group docs).

  check_links.py [FILE.md ...]   (default: README.md, docs/*.md and the other READMEs)
  check_links.py --self-test     the checker against files made to fail it

A link is [text](target) or ![alt](target) outside code (its text may be code); external ones (http:, https:,
mailto:) are not fetched. A path must exist relative to the file that links it; a #anchor
must be a heading of the target Markdown file (or of the file itself), named as GitHub names
it: the heading's text without its formatting, lowercased, punctuation dropped except '-' and
'_', each space a '-', and -1, -2... added to a repeated one. Prints a PASS line per file, a
FAIL line per broken link; exits 1 if any."""
import glob, os, re, sys

LINK_RE = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^()\s<>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def split_code(text):
    """(chunk, is_code) pieces of text: fenced blocks and inline code spans are code."""
    pieces, buf, fence = [], [], None
    for line in text.splitlines(keepends=True):
        m = FENCE_RE.match(line)
        if fence is None and m:
            pieces.append(("".join(buf), False))
            buf, fence = [line], m.group(1)
        elif fence is not None:
            buf.append(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                pieces.append(("".join(buf), True))
                buf, fence = [], None
        else:
            buf.append(line)
    pieces.append(("".join(buf), fence is not None))
    out = []
    for chunk, code in pieces:
        if code:
            out.append((chunk, True))
            continue
        pos = 0
        # Inline code: a run of backticks up to the next run of the same length.
        for m in re.finditer(r"(`+)(.+?)(?<!`)\1(?!`)", chunk, re.S):
            out.append((chunk[pos:m.start()], False))
            out.append((m.group(0), True))
            pos = m.end()
        out.append((chunk[pos:], False))
    return out


def slug(heading):
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    t = re.sub(r"<[^>]+>", "", t)  # inline HTML
    t = t.replace("`", "").replace("*", "")
    t = t.strip().lower()
    t = "".join(c for c in t if c.isalnum() or c in " -_")
    return t.replace(" ", "-")


def anchors_of(text):
    """The anchors of a Markdown text, in order (headings outside code, and id=/name=)."""
    seen, out, fence = {}, [], None
    for line in text.splitlines():
        m = FENCE_RE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        h = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if h:
            base = slug(h.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.append(base if n == 0 else f"{base}-{n}")
        for a in re.finditer(r"<a\s+(?:id|name)=\"([^\"]+)\"", line):
            out.append(a.group(1))
    return out


def masked(text):
    """text with its code blanked at the same offsets (fenced blocks and inline code spans
    become 'x's, their newlines kept), so that a link whose text is code (`[`top`](#x)`) is
    still found and no link inside code is."""
    return "".join(chunk if not code else "".join(c if c == "\n" else "x" for c in chunk)
                   for chunk, code in split_code(text))


def check(path, cache):
    text = open(path, encoding="utf-8").read()
    bad, n = [], 0
    for m in LINK_RE.finditer(masked(text)):
        target = m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            continue
        n += 1
        p, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), p)) if p else path
        if not os.path.exists(dest):
            bad.append(f"{path}:{line}: {target}: no such file {dest}")
            continue
        if frag and dest.endswith(".md"):
            if dest not in cache:
                cache[dest] = set(anchors_of(open(dest, encoding="utf-8").read()))
            if frag not in cache[dest]:
                bad.append(f"{path}:{line}: {target}: no heading #{frag} in {dest}")
    return n, bad


def self_test():
    """The checker on files made for it: each broken link found (a same-page anchor, one whose
    text is code, a missing file), and none inside code or in a good file."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        bad = os.path.join(d, "bad.md")
        good = os.path.join(d, "good.md")
        with open(bad, "w") as f:
            f.write("# Title\n\n[a](#nope) [`b`](#title) [`c`](#gone) [d](none.md)\n"
                    "`[e](#in-code)`\n\n```\n[f](#fenced)\n```\n")
        with open(good, "w") as f:
            f.write("# One two\n\n[`x`](#one-two) [y](bad.md#title)\n")
        n, found = check(bad, {})
        ok = n == 4 and len(found) == 3 and all(w in "".join(found) for w in
                                                 ("#nope", "#gone", "none.md"))
        n2, found2 = check(good, {})
        ok = ok and n2 == 2 and not found2
    print(f"{'PASS' if ok else 'FAIL'} links self-test: same-page anchors, links whose text is "
          f"code, missing files found; none inside code" + ("" if ok else f": {found} {found2}"))
    return 0 if ok else 1


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    os.chdir(root)
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    files = sys.argv[1:] or (["README.md"] + sorted(glob.glob("docs/*.md")) +
                             sorted(glob.glob("deploy/**/*.md", recursive=True)) +
                             sorted(glob.glob("tests/**/*.md", recursive=True)))
    cache, failed = {}, 0
    for f in files:
        n, bad = check(f, cache)
        for b in bad:
            print(f"FAIL links {b}")
        if bad:
            failed += 1
        else:
            print(f"PASS links {f}: {n} relative links resolve")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
