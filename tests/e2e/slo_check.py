"""SLO verdicts checked against the client's own measurements (the e2e `slo-*` cases).

tokenscope runs with `--slo SLO_FLAG`; gtclient slows every SLOW_EVERY-th request on purpose
(`--slow-every`, a long prefill) and sends llm-d's headers on some requests
(`--header-every`). From the client's own clock this module works out what each request's
verdicts must be, under the rules of docs/slo.md, and compares them with tokenscope's, request
by request and in the summary's counts. The limits are far from every figure the mix makes
(20 ms vs 80 ms, 150 ms vs 80 and 400 ms, 5 ms vs 2 and 20 ms), so a verdict does not hang on
the 2 ms by which the client's and tokenscope's clocks may differ.
"""

SLO_FLAG = "ttft<=80ms,tpot<=20ms,e2e<=2s"
LIMITS_MS = {"ttft": 80.0, "tpot": 20.0, "e2e": 2000.0}
SLOW_EVERY, SLOW_PREFILL_MS = 3, 150
HEADERS = {  # every M-th request: (header, objective, limit in ms)
    6: ("x-llm-d-slo-ttft-ms", "ttft", 400.0),
    4: ("x-llm-d-slo-tpot-ms", "tpot", 2.0),
}
BAD_HEADER_EVERY = 10  # a value that is no number of ms: ignored, counted

CLIENT_EXTRA = ["--slow-every", str(SLOW_EVERY), "--slow-prefill-ms", str(SLOW_PREFILL_MS)]
for _every, (_name, _metric, _limit) in HEADERS.items():
    CLIENT_EXTRA += ["--header-every", f"{_every}:{_name}: {_limit:g}"]
CLIENT_EXTRA += ["--header-every", f"{BAD_HEADER_EVERY}:x-llm-d-slo-ttft-ms: soon"]
# Tenants from a header (the first of a repeated one kept) and a user from the body.
TENANTS = [(2, "acme"), (5, "globex")]
USER_EVERY, USER = 3, "u3"
for _every, _tenant in TENANTS:
    CLIENT_EXTRA += ["--header-every", f"{_every}:X-Tenant-Id: {_tenant}"]
CLIENT_EXTRA += ["--body-every", f"{USER_EVERY}:user={USER}"]
TRACE_EXTRA = ["--slo", SLO_FLAG, "--label", "tenant=header:X-Tenant-Id",
               "--label", "user=body:user"]


def labels(client):
    """The labels a request must carry, by its id."""
    n = client["id"] + 1
    tenant = next((t for every, t in TENANTS if n % every == 0), None)
    return {"tenant": tenant, "user": USER if n % USER_EVERY == 0 else None}


def objectives(client):
    """The request's limits in ms and where each came from, by its id."""
    n = client["id"] + 1
    lim = {k: (v, "flag") for k, v in LIMITS_MS.items()}
    for every, (_, metric, limit) in HEADERS.items():
        if n % every == 0:
            lim[metric] = (limit, "header")
    return lim


def client_figures(c):
    """TTFT, TPOT and E2E in ms from the client's own times; None where there is none."""
    toks = c.get("token_ns") or []
    ttft = (c["first_token_ns"] - c["send_ns"]) / 1e6 if c.get("first_token_ns") else None
    tpot = None
    if toks and c.get("tokens", 0) >= 2:
        tpot = (toks[-1] - toks[0]) / 1e6 / (c["tokens"] - 1)
    return {"ttft": ttft, "tpot": tpot, "e2e": (c["end_ns"] - c["send_ns"]) / 1e6}


def expected(c):
    """The verdicts the client's own measurements give: ({objective: result}, overall)."""
    fig = client_figures(c)
    left = c["outcome"] == "aborted"
    failed = c["outcome"] in ("http_error", "stream_error")
    res, unknown = {}, False
    for k, (limit, _) in objectives(c).items():
        if failed:
            res[k] = "missed"
        elif fig[k] is None or (left and k == "e2e"):
            res[k] = "unknown"
        else:
            res[k] = "met" if fig[k] <= limit else "missed"
        if res[k] == "unknown" and not (k == "tpot" and c.get("tokens", 0) < 2):
            unknown = True
    if left:
        overall = "aborted"
    elif "missed" in res.values():
        overall = "missed"
    elif unknown:
        overall = "unknown"
    else:
        overall = "met"
    return res, overall


def check_pair(c, t):
    """Mismatch texts of one request: its objectives, their sources and verdicts."""
    out = []
    slo = t.get("slo")
    if not isinstance(slo, dict):
        return [f"no slo object: {t.get('slo')!r}"]
    res, overall = expected(c)
    for k, (limit, src) in objectives(c).items():
        got = slo.get(k) or {}
        if got.get("limit_ms") != limit or got.get("from") != src:
            out.append(f"{k}: limit {got.get('limit_ms')} from {got.get('from')}, expected "
                       f"{limit:g} from {src}")
        if got.get("result") != res[k]:
            out.append(f"{k}: {got.get('result')}, the client's figures say {res[k]} "
                       f"({client_figures(c)[k]} ms against {limit:g})")
    if slo.get("result") != overall:
        out.append(f"overall {slo.get('result')}, expected {overall}")
    if t.get("labels") != labels(c):
        out.append(f"labels {t.get('labels')}, the client sent {labels(c)}")
    return out


def check_summary(gt, summary):
    """The summary's counts and goodput against the verdicts the client's figures give."""
    out = []
    slo = (summary or {}).get("slo")
    if not isinstance(slo, dict):
        return [f"summary: no slo object: {slo!r}"]
    counts = {k: {"met": 0, "missed": 0, "unknown": 0, "aborted": 0} for k in
              ("ttft", "tpot", "e2e", "all")}
    good = tokens = 0
    for c in gt:
        res, overall = expected(c)
        for k, r in res.items():
            counts[k]["aborted" if overall == "aborted" else r] += 1
        counts["all"][overall] += 1
        if overall == "met":
            good += 1
            tokens += c.get("tokens", 0)
    if slo.get("counts") != counts:
        out.append(f"summary counts {slo.get('counts')}, the client's figures give {counts}")
    gp = slo.get("goodput") or {}
    if gp.get("requests") != good or gp.get("tokens") != tokens:
        out.append(f"summary goodput {gp.get('requests')} requests, {gp.get('tokens')} tokens; "
                   f"expected {good} and {tokens}")
    bad = sum(1 for c in gt if (c["id"] + 1) % BAD_HEADER_EVERY == 0)
    if slo.get("header_invalid") != bad:
        out.append(f"summary header_invalid {slo.get('header_invalid')}, {bad} were sent")
    judged = counts["all"]["met"] + counts["all"]["missed"]
    want = round(counts["all"]["met"] / judged, 4) if judged else None
    if (slo.get("attainment") or {}).get("all") != want:
        out.append(f"summary attainment {slo.get('attainment')}, expected all {want}")
    by_tenant = {}
    for c in gt:
        _, overall = expected(c)
        k = labels(c)["tenant"] or ""
        d = by_tenant.setdefault(k, {"met": 0, "missed": 0, "unknown": 0, "aborted": 0})
        d[overall] += 1
    got = {x.get("value"): (x.get("counts") or {}).get("all")
           for x in (slo.get("by_label") or {}).get("tenant", [])}
    if got != by_tenant:
        out.append(f"summary by tenant {got}, the client's figures give {by_tenant}")
    if not counts["all"]["met"] or not counts["all"]["missed"]:
        out.append(f"the mix must give both met and missed requests: {counts['all']}")
    return out
