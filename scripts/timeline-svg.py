#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Render a tokenscope timeline (tokenscope trace --timeline FILE) as an SVG picture.

One row per track: a connection's requests (an outlined request, its phases inside it, a tick
per token), then each GPU process's steps; slices are coloured by name; a time axis in ms from
the timeline's origin. A file cut off by a crash (no closing "]}") is read too.

usage: scripts/timeline-svg.py TIMELINE.json [-o OUT.svg] [--width PX] [--title TEXT]
       [--from MS] [--to MS]
"""
import argparse
import json
import math
import sys
from xml.sax.saxutils import escape

# Phases and GPU step kinds share colours: a request's prefill lines up with the GPU's.
COLOURS = {
    "queue": "#f0b429",
    "prefill": "#e4572e",
    "decode": "#3f9d6b",
    "mixed": "#8e6bbf",
    "other": "#a0a7b0",
    "waiting for first token": "#b8c0c8",
    "streaming": "#6aaed6",
}
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7"]
LEGEND_ORDER = ["queue", "prefill", "decode", "mixed", "other", "waiting for first token",
                "streaming"]

CONN_PID = 4194304  # user/sinks/timeline.h: TIMELINE_CONN_PID; a connection's tid is it + its number
LABEL_W = 200   # px for the row labels
RIGHT_PAD = 24
ROW_H = 22
ROW_GAP = 6
SECTION_GAP = 14
TOP = 58        # title and legend
AXIS_H = 34
FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""


def text_width(s, size=11):
    """Approximate width in px of s in a sans-serif font (no font metrics in the stdlib)."""
    w = 0.0
    for c in s:
        if c in "ijlft.,:;!|' ":
            w += 0.3
        elif c in "mwMW":
            w += 0.85
        elif c.isupper():
            w += 0.68
        else:
            w += 0.56
    return w * size


def colour(name):
    if name in COLOURS:
        return COLOURS[name]
    return PALETTE[sum(name.encode()) % len(PALETTE)]


def load(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # A tracer that died before closing the file leaves whole events and no "]}".
        return json.loads(text.rstrip().rstrip(",") + "]}")


def nice_step(span_ms, target=10):
    raw = span_ms / target
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def tracks_of(trace):
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    proc_name, proc_sort, thread_name = {}, {}, {}
    tracks = {}
    for e in events:
        ph, pid, tid = e.get("ph"), e.get("pid", 0), e.get("tid", 0)
        args = e.get("args") or {}
        if ph == "M":
            if e.get("name") == "process_name":
                proc_name[pid] = args.get("name", str(pid))
            elif e.get("name") == "process_sort_index":
                proc_sort[pid] = args.get("sort_index", 0)
            elif e.get("name") == "thread_name":
                thread_name[(pid, tid)] = args.get("name", str(tid))
            continue
        t = tracks.setdefault((pid, tid), {"slices": [], "instants": []})
        if ph == "X":
            t["slices"].append(e)
        elif ph == "i":
            t["instants"].append(e)
    return tracks, proc_name, proc_sort, thread_name


def row_label(pid, tid, proc_name, thread_name, tids_of_pid):
    pname = proc_name.get(pid, "pid %d" % pid)
    if (pid, tid) in thread_name:
        name = thread_name[(pid, tid)]
        # "local<-peer#N": the peer and the connection number say which client it is.
        return name.split("<-")[-1] if "<-" in name else name
    if pid == CONN_PID:
        return "#%d" % (tid - CONN_PID)
    if tids_of_pid[pid] > 1 or pid == tid:
        return "tid %d" % tid
    return pname


def render(trace, width, title, t_from, t_to):
    tracks, proc_name, proc_sort, thread_name = tracks_of(trace)
    times = []
    for t in tracks.values():
        for e in t["slices"]:
            times += [e["ts"], e["ts"] + e.get("dur", 0)]
        times += [e["ts"] for e in t["instants"]]
    if not times:
        times = [0.0, 1000.0]
    lo_ms = min(times) / 1000 if t_from is None else t_from
    hi_ms = max(times) / 1000 if t_to is None else t_to
    step = nice_step(max(hi_ms - lo_ms, 1e-3))
    lo_ms = math.floor(lo_ms / step) * step
    hi_ms = math.ceil(hi_ms / step) * step
    plot_w = width - LABEL_W - RIGHT_PAD

    def x(ts_us):
        return LABEL_W + (ts_us / 1000 - lo_ms) / (hi_ms - lo_ms) * plot_w

    order = sorted(tracks, key=lambda k: (proc_sort.get(k[0], 1), k[0], k[1]))
    tids_of_pid = {}
    for pid, _ in order:
        tids_of_pid[pid] = tids_of_pid.get(pid, 0) + 1

    out, late = [], []
    y = TOP
    used = set()
    prev_pid = None
    sections = []
    for pid, tid in order:
        if prev_pid is not None and pid != prev_pid:
            y += SECTION_GAP
        if pid != prev_pid:
            sections.append((y, proc_name.get(pid, "pid %d" % pid)))
            y += 16
        prev_pid = pid
        t = tracks[(pid, tid)]
        label = row_label(pid, tid, proc_name, thread_name, tids_of_pid)
        out.append('<text x="%d" y="%.1f" font-size="11" fill="#333">%s</text>'
                   % (22, y + ROW_H / 2 + 4, escape(label)))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="#f6f7f9"/>'
                   % (LABEL_W, y, plot_w, ROW_H))
        for e in sorted(t["slices"], key=lambda e: (e["ts"], -e.get("dur", 0))):
            name, cat = e.get("name", ""), e.get("cat", "")
            x0, x1 = x(e["ts"]), x(e["ts"] + e.get("dur", 0))
            if x1 < LABEL_W or x0 > LABEL_W + plot_w:
                continue
            x0, x1 = max(x0, LABEL_W), min(x1, LABEL_W + plot_w)
            w = max(x1 - x0, 0.8)
            tip = "%s: %.3f ms" % (name, e.get("dur", 0) / 1000)
            args = e.get("args") or {}
            if cat == "request":
                failed = name != "request"
                used.add("failed request" if failed else "request")
                if args.get("outcome"):
                    tip += ", %s, %s tokens, TTFT %s ms" % (
                        args.get("outcome"), args.get("tokens"), args.get("ttft_ms"))
                out.append('<rect x="%.2f" y="%.1f" width="%.2f" height="%d" fill="none" '
                           'stroke="%s" stroke-width="1.2"%s><title>%s</title></rect>'
                           % (x0, y + 0.6, w, ROW_H - 1.2, "#c0392b" if failed else "#4a4f57",
                              ' stroke-dasharray="4 2"' if failed else "", escape(tip)))
                outcome = args.get("outcome") or name.split(": ")[-1]
                if failed and x1 + 6 + text_width(outcome, 10) < LABEL_W + plot_w:
                    late.append('<text x="%.2f" y="%.1f" font-size="10" fill="#c0392b">%s'
                                '</text>' % (x1 + 4, y + ROW_H / 2 + 3.5, escape(outcome)))
                continue
            used.add(name)
            # Phases and a step's busy spans are drawn inside the slice that holds them.
            inset = 3 if cat == "phase" or name == "busy" else 1
            # GPU steps follow each other closely: a hairline keeps them apart.
            edge = ' stroke="#ffffff" stroke-width="0.5"' if cat in ("gpu", "device") else ""
            out.append('<rect x="%.2f" y="%.1f" width="%.2f" height="%d" fill="%s"%s>'
                       '<title>%s</title></rect>'
                       % (x0, y + inset, w, ROW_H - 2 * inset, colour(name), edge, escape(tip)))
        if t["instants"]:
            used.add("token")
            ticks = ["M%.2f %.1fv%d" % (x(e["ts"]), y + ROW_H - 9, 7) for e in t["instants"]
                     if LABEL_W <= x(e["ts"]) <= LABEL_W + plot_w]
            if ticks:
                out.append('<path d="%s" stroke="#1d2733" stroke-width="1.1"/>'
                           % " ".join(ticks))
        out += late
        late = []
        y += ROW_H + ROW_GAP

    # The axis: grid lines through every row, labels below.
    axis_y = y + 4
    grid = []
    k = 0
    while lo_ms + k * step <= hi_ms + step / 1e6:
        ms = lo_ms + k * step
        gx = x(ms * 1000)
        grid.append('<line x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="#d5d9de" '
                    'stroke-width="0.8"/>' % (gx, TOP, gx, axis_y))
        grid.append('<text x="%.2f" y="%d" font-size="10" fill="#555" text-anchor="middle">'
                    '%s</text>' % (gx, axis_y + 14, ("%g" % round(ms, 6))))
        k += 1
    grid.append('<text x="%d" y="%d" font-size="10" fill="#555" text-anchor="end">ms</text>'
                % (LABEL_W - 22, axis_y + 14))
    height = axis_y + AXIS_H

    head = []
    if title:
        head.append('<text x="12" y="20" font-size="14" font-weight="bold" fill="#222">%s'
                    '</text>' % escape(title))
    lx = 12
    for name in [n for n in LEGEND_ORDER if n in used] + sorted(
            n for n in used if n not in LEGEND_ORDER
            and n not in ("request", "failed request", "token")) + [
            n for n in ("request", "failed request", "token") if n in used]:
        if name == "token":
            head.append('<path d="M%d 35v9" stroke="#1d2733" stroke-width="1.4"/>' % (lx + 5))
        elif name in ("request", "failed request"):
            failed = name == "failed request"
            head.append('<rect x="%d" y="34" width="16" height="11" fill="none" stroke="%s"'
                        ' stroke-width="1.2"%s/>' % (lx, "#c0392b" if failed else "#4a4f57",
                                                      ' stroke-dasharray="4 2"' if failed
                                                      else ""))
        else:
            head.append('<rect x="%d" y="34" width="16" height="11" fill="%s"/>'
                        % (lx, colour(name)))
        head.append('<text x="%d" y="43" font-size="11" fill="#333">%s</text>'
                    % (lx + 21, escape(name)))
        lx += 21 + text_width(name) + 16
    for sy, sname in sections:
        head.append('<text x="12" y="%d" font-size="11" font-weight="bold" fill="#222">%s'
                    '</text>' % (sy + 11, escape(sname)))

    return "\n".join(
        ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>'
         % (width, height, width, height, FONT),
         '<rect width="100%" height="100%" fill="#ffffff"/>'] + grid + out + head + ["</svg>", ""])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline")
    ap.add_argument("-o", "--output", help="SVG file (default: stdout)")
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--title")
    ap.add_argument("--from", dest="t_from", type=float, help="first ms shown")
    ap.add_argument("--to", dest="t_to", type=float, help="last ms shown")
    a = ap.parse_args()
    svg = render(load(a.timeline), a.width, a.title, a.t_from, a.t_to)
    if a.output:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(svg)
    else:
        sys.stdout.write(svg)


if __name__ == "__main__":
    main()
