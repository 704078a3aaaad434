#!/usr/bin/python3
"""Checks a Grafana dashboard (deploy/grafana/tokenscope.json) against a Prometheus server that
scrapes tokenscope, and against what tokenscope exports.

  grafana_check.py DASHBOARD --prom URL --metrics FILE --docs PAGE.md... [--model M]
                   [--rate-interval 1m] [--range 5m] [--optional METRIC]...

 - the JSON has what Grafana needs to import it: a schemaVersion, a uid, panels with unique
   integer ids and a gridPos inside the 24 columns that overlaps no other panel, targets with
   unique refIds and an expr, datasources that name the dashboard's datasource variable;
 - the template variables: each `label_values(SELECTOR, LABEL)` query is asked of Prometheus
   (/api/v1/label/LABEL/values with match[]), must return values (and M among them), and those
   values are what $model stands for in the panels' queries, as Grafana writes a multi-value
   variable in a regex (a|b);
 - every metric name in every expr (tokenscope_...; _bucket, _sum and _count of a histogram)
   is exported by tokenscope: in the scraped /metrics text FILE (as that type) or in the
   metric tables of the --docs pages (docs/prometheus.md, docs/nvml.md); a request metric (one
   whose series carry a `model` label) is read with role="server" and model=~"$model" in
   every selector;
 - every expr, with Grafana's variables substituted ($__rate_interval, $__interval, $__range,
   ...), runs as an instant query on Prometheus without error and returns at least one series
   with a number (not NaN). A target whose metrics are all given with --optional and has no
   data is a SKIP instead (an exporter family the run could not make appear).
Prints PASS/FAIL/SKIP lines, one per panel for the queries; exits 1 if anything failed.
"""
import argparse
import json
import math
import re
import sys
import urllib.parse
import urllib.request

NAME = re.compile(r"\btokenscope_[a-z0-9_]+")
VAR = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\[\[(\w+)\]\]|\$(\w+)")
LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*(\w+)\s*\)\s*$", re.S)
HIST_SUFFIXES = ("_bucket", "_sum", "_count")
GRID_COLUMNS = 24

results = {"PASS": 0, "FAIL": 0, "SKIP": 0}


def say(kind, text):
    print(f"{kind} {text}", flush=True)
    results[kind] += 1


def walk_panels(panels):
    """Every panel, rows' nested panels included, in order."""
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def prom_get(base, path, params):
    url = f"{base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:  # 400/422: the body says why
        try:
            return json.load(e)
        except ValueError:
            return {"status": "error", "error": f"HTTP {e.code}"}
    except (OSError, ValueError) as e:
        return {"status": "error", "error": str(e)}


def scraped_families(path):
    """{family: type} from the # TYPE lines, and every sample name with its labels' names."""
    types, labels = {}, {}
    for line in open(path):
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split()[:4]
            types[name] = typ
        elif line and not line.startswith("#"):
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?", line)
            if m:
                names = set(re.findall(r'(\w+)="', m.group(2) or ""))
                labels.setdefault(m.group(1), set()).update(names)
    return types, labels


def documented(pages):
    """Metric names of the pages' tables: `tokenscope_a_b_c`, `_d_e` rows name
    tokenscope_a_d_e or tokenscope_a_b_d_e etc. (a shared prefix), so every prefix is
    tried."""
    names = set()
    for line in (l for page in pages for l in open(page)):
        if not line.startswith("| `tokenscope_"):
            continue
        cell = line.split("|")[1]
        spans = re.findall(r"`([a-z0-9_]+)`", cell)
        first = spans[0]
        names.add(first)
        parts = first.split("_")
        for s in spans[1:]:
            if s.startswith("_"):
                for k in range(1, len(parts)):
                    names.add("_".join(parts[:k]) + s)
    return names


def family_of(name, types):
    """The exported family a name in a query reads, and the type it must have."""
    if name in types:
        return name, None
    for suf in HIST_SUFFIXES:
        if name.endswith(suf) and name[: -len(suf)] in types:
            return name[: -len(suf)], "histogram"
    return None, None


def substitute(expr, values):
    """Grafana's interpolation of $var, ${var}, ${var:fmt} and [[var]]; unknown names are
    returned in a list."""
    unknown = []

    def one(m):
        name = m.group(1) or m.group(3) or m.group(4)
        if name in values:
            return values[name]
        unknown.append(name)
        return m.group(0)

    return VAR.sub(one, expr), unknown


def check_structure(d):
    bad = []
    for key in ("schemaVersion", "uid", "title", "panels", "templating"):
        if key not in d:
            bad.append(f"no {key}")
    if not isinstance(d.get("schemaVersion"), int) or d.get("schemaVersion", 0) < 36:
        bad.append(f"schemaVersion {d.get('schemaVersion')!r} (want an integer >= 36)")
    tvars = d.get("templating", {}).get("list", [])
    names = [v.get("name") for v in tvars]
    if len(set(names)) != len(names):
        bad.append(f"template variable names repeat: {names}")
    ds_vars = {v["name"] for v in tvars if v.get("type") == "datasource"}
    inputs = {i.get("name") for i in d.get("__inputs", [])}
    ids, boxes = set(), []
    for p in walk_panels(d.get("panels", [])):
        t = p.get("title", "?")
        pid = p.get("id")
        if not isinstance(pid, int) or pid in ids:
            bad.append(f"panel {t!r}: id {pid!r} missing or repeated")
        ids.add(pid)
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "hwxy") or g["w"] <= 0 or g["h"] <= 0 \
                or g["x"] < 0 or g["x"] + g["w"] > GRID_COLUMNS:
            bad.append(f"panel {t!r}: gridPos {g}")
        else:
            for other, og in boxes:
                if g["x"] < og["x"] + og["w"] and og["x"] < g["x"] + g["w"] and \
                        g["y"] < og["y"] + og["h"] and og["y"] < g["y"] + g["h"]:
                    bad.append(f"panel {t!r} overlaps {other!r}")
            boxes.append((t, g))
        if "type" not in p or not p.get("title"):
            bad.append(f"panel id {pid}: no type or title")
        if p.get("type") == "row":
            continue
        targets = p.get("targets", [])
        if not targets:
            bad.append(f"panel {t!r}: no targets")
        refs = [x.get("refId") for x in targets]
        if None in refs or len(set(refs)) != len(refs):
            bad.append(f"panel {t!r}: refIds {refs}")
        for x in [p] + targets:
            uid = x.get("datasource", {}).get("uid", "")
            m = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid)
            if not m or (m.group(1) or m.group(2)) not in ds_vars | inputs:
                bad.append(f"panel {t!r}: datasource {uid!r} is not the dashboard's variable")
        if any(not x.get("expr") for x in targets):
            bad.append(f"panel {t!r}: a target without expr")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dashboard")
    ap.add_argument("--prom", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--docs", action="append", required=True)
    ap.add_argument("--model", default="ref")
    ap.add_argument("--rate-interval", default="1m")
    ap.add_argument("--range", default="5m")
    ap.add_argument("--optional", action="append", default=[])
    a = ap.parse_args()

    try:
        d = json.load(open(a.dashboard))
    except (OSError, ValueError) as e:
        say("FAIL", f"dashboard JSON: {e}")
        return 1
    bad = check_structure(d)
    panels = [p for p in walk_panels(d.get("panels", [])) if p.get("type") != "row"]
    if bad:
        say("FAIL", "dashboard structure: " + "; ".join(bad))
    else:
        say("PASS", f"dashboard JSON: schemaVersion {d['schemaVersion']}, {len(panels)} panels "
            "with unique ids, gridPos on 24 columns without overlap, targets with refIds")

    types, labels = scraped_families(a.metrics)
    docs = documented(a.docs)
    # A request metric has the request labels: its scraped series carry `model`.
    request_families = {n for n in types
                        if any("model" in labels.get(s, ()) for s in
                               [n] + [n + suf for suf in HIST_SUFFIXES])}

    # Builtin variables, as Grafana sets them for a 1 s scrape interval over a short range.
    secs = {"s": 1, "m": 60, "h": 3600}
    range_s = int(a.range[:-1]) * secs[a.range[-1]]
    values = {"__rate_interval": a.rate_interval, "__interval": a.rate_interval,
              "__interval_ms": str(int(a.rate_interval[:-1]) * secs[a.rate_interval[-1]] * 1000),
              "__range": a.range, "__range_s": str(range_s), "__range_ms": str(range_s * 1000)}

    # Template variables: label_values queries run against Prometheus.
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else q or ""
        m = LABEL_VALUES.match(q)
        name = v.get("name")
        if not m:
            say("FAIL", f"variable ${name}: query {q!r} is not label_values(SELECTOR, LABEL)")
            continue
        sel, label = m.group(1), m.group(2)
        r = prom_get(a.prom, f"/api/v1/label/{label}/values", {"match[]": sel})
        got = r.get("data") or []
        unknown = [n for n in NAME.findall(sel) if n not in types]
        if r.get("status") != "success" or not got or unknown:
            say("FAIL", f"variable ${name}: {q}: {r.get('error') or got or 'no values'}"
                f"{'; not exported: ' + ', '.join(unknown) if unknown else ''}")
            continue
        if name == "model" and a.model not in got:
            say("FAIL", f"variable $model: {got} lacks the traced model {a.model!r}")
            continue
        probs = []
        if name == "model" and not (v.get("multi") and v.get("includeAll")):
            probs.append("not multi-value with All")
        if probs:
            say("FAIL", f"variable ${name}: " + "; ".join(probs))
            continue
        # Grafana writes a multi-value variable in a regex as (a|b), each value escaped.
        values[name] = "(" + "|".join(re.escape(x) for x in got) + ")"
        say("PASS", f"variable ${name}: {q} -> {got}")

    # Metric names, every one in every expr.
    all_names, bad = set(), []
    for p in panels:
        for t in p.get("targets", []):
            expr = t.get("expr", "")
            for n in set(NAME.findall(expr)):
                all_names.add(n)
                fam, want = family_of(n, types)
                base = n
                for suf in HIST_SUFFIXES:
                    if n.endswith(suf) and n[: -len(suf)] in docs:
                        base = n[: -len(suf)]
                if fam is None and base not in docs:
                    bad.append(f"{p['title']!r} {t.get('refId')}: {n} is neither on the "
                               "scraped /metrics nor in the docs' metric tables")
                elif want and types.get(fam) != want:
                    bad.append(f"{p['title']!r} {t.get('refId')}: {n} reads a {types.get(fam)} "
                               f"{fam} as a {want}")
                if fam in request_families:
                    sels = re.findall(re.escape(n) + r"\b(\{[^}]*\})?", expr)
                    for s in sels:
                        if 'role="server"' not in s or 'model=~"$model"' not in s:
                            bad.append(f"{p['title']!r} {t.get('refId')}: request metric "
                                       f"{n}{s} without role=\"server\" and model=~\"$model\"")
    if bad:
        say("FAIL", "metric names: " + "; ".join(bad))
    else:
        say("PASS", f"metric names: the {len(all_names)} in the queries are tokenscope's "
            "(request metrics filtered by $model)")

    # Every query, on Prometheus.
    for p in panels:
        title = f"panel {p['id']} {p['title']!r}"
        probs, skipped, shown = [], [], []
        for t in p.get("targets", []):
            expr, unknown = substitute(t.get("expr", ""), values)
            ref = t.get("refId")
            if unknown:
                probs.append(f"{ref}: unknown variable(s) {', '.join(unknown)}")
                continue
            r = prom_get(a.prom, "/api/v1/query", {"query": expr})
            if r.get("status") != "success":
                probs.append(f"{ref}: {r.get('errorType', '')} {r.get('error')}: {expr}")
                continue
            res = r["data"]["result"]
            if r["data"]["resultType"] == "scalar":
                res = [{"value": res}]
            nums = [float(s["value"][1]) for s in res if not math.isnan(float(s["value"][1]))]
            if nums:
                shown.append(f"{ref} {len(res)} series")
                continue
            why = "no series" if not res else f"{len(res)} series, all NaN"
            names = set(NAME.findall(t.get("expr", "")))
            if names and names <= {
                    n for o in a.optional for n in (o,) + tuple(o + s for s in HIST_SUFFIXES)}:
                skipped.append(f"{ref}: {why} ({', '.join(sorted(names))} "
                               "not exported in this run)")
            else:
                probs.append(f"{ref}: {why}: {expr}")
        if probs:
            say("FAIL", f"{title}: " + "; ".join(probs))
        elif skipped:
            say("SKIP", f"{title}: " + "; ".join(skipped))
        else:
            say("PASS", f"{title}: data from every query ({', '.join(shown)})")
    return 1 if results["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
