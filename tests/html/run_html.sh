#!/usr/bin/env bash
# The HTML report (--html) in a real browser. A traced run of the reference server in GPU mode
# (the stand-in CUDA runtime) is recorded, with two requests whose model name tries to end the
# page's data element (</script><b>...); `report --json --html` replays it; the page is opened
# in headless Chromium through the DevTools protocol (cdp.py) and must load with no exception,
# no console error and no network request, draw every chart with marks in it, show the figures
# of the {"summary":...} line of the same report (and as many requests as there are request
# lines), show the hostile model name as text without it changing the page, and give a
# screenshot. Then a short live `trace --html` must write a page that renders too. SKIPs only
# when chromium is not installed. Needs root (BPF). Prints PASS/FAIL/SKIP lines and the totals.
set -u
cd "$(dirname "$0")/../.." || exit 1
TS=${TOKENSCOPE:-.output/tokenscope}
RS=${REFSERVER:-.output/refserver}
GT=${GTCLIENT:-.output/gtclient}
CUDART=${STANDIN_CUDART:-.output/standin/libcudart.so.13}
PY=/usr/bin/python3
CDP=tests/html/cdp.py
TMP=$(mktemp -d)
# shellcheck source=tests/lib.sh
. tests/lib.sh
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$TMP"
}
trap cleanup EXIT
HOSTILE='</script><b>x<!--'

chromium=$(command -v chromium 2>/dev/null)
if [ -z "$chromium" ] || [ ! -x "$chromium" ] || [ -d "$chromium" ]; then
	sk "html" "chromium is not installed (scripts/deps.sh installs it)"
	finish
fi
for f in "$TS" "$RS" "$GT" "$CUDART"; do
	[ -e "$f" ] || { ko "html" "$f is not built (make)"; finish; }
done

# refserver in the background with ARGS; sets RSPID and PORT (bounded wait)
start_server() {
	"$RS" --port 0 "$@" >"$TMP/rs.out" 2>&1 &
	RSPID=$!
	pids+=("$RSPID")
	for _ in $(seq 100); do grep -q listening "$TMP/rs.out" && break; sleep 0.05; done
	PORT=$(grep -o 'listening on [0-9.]*:[0-9]*' "$TMP/rs.out" | grep -o '[0-9]*$')
}

# tokenscope CMD ARGS... in the background, NAME.out / NAME.err; sets TSPID; waits until
# attached (10 s at most)
start_tracer() {
	local name=$1
	shift
	"$TS" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
	TSPID=$!
	pids+=("$TSPID")
	for _ in $(seq 100); do grep -q attached "$TMP/$name.err" && return 0; sleep 0.1; done
	return 1
}

# SIGINT to the tracer, 10 s at most to exit; sets RC
stop_tracer() {
	kill -INT "$TSPID" 2>/dev/null
	for _ in $(seq 100); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$TSPID" 2>/dev/null
	wait "$TSPID"
	RC=$?
}

# The page's figures and charts, as cdp.py's --eval returns them.
# shellcheck disable=SC2016 # JavaScript
PROBE='(() => {
	const m = {};
	document.querySelectorAll("[data-metric]").forEach(e => {
		m[e.dataset.metric] = { value: e.dataset.value, text: e.textContent };
	});
	const charts = {};
	document.querySelectorAll("[data-chart]").forEach(e => {
		charts[e.dataset.chart] = e.querySelectorAll("svg .mark").length;
	});
	return { metrics: m, charts: charts, scripts: document.scripts.length,
		bold: document.querySelectorAll("b").length,
		failed: document.querySelectorAll("section.status.warn").length,
		title: document.title };
})()'

# 1. a recorded GPU run, replayed with --json and --html
start_server --gpu --cudart "$CUDART" --token-ms 3 --prefill-ms 8 --max-batch 2
if [ -z "$PORT" ]; then
	ko "html record" "refserver did not start: $(cat "$TMP/rs.out")"
	finish
fi
timeout 30 "$GT" --port "$PORT" -n 1 --max-tokens 2 -o /dev/null 2>/dev/null # warm-up
if ! start_tracer rec record -p "$RSPID" -o "$TMP/run.tsr"; then
	ko "html record" "the tracer did not attach"
	finish
fi
sleep 1.5 # the CUDA scan, once a second
timeout 60 "$GT" --port "$PORT" -n 10 -c 4 --usage --max-tokens 6 -o "$TMP/gt.json" 2>/dev/null
timeout 60 "$GT" --port "$PORT" -n 2 --model "$HOSTILE" --max-tokens 3 -o /dev/null 2>/dev/null
sleep 0.3
stop_tracer
kill "$RSPID" 2>/dev/null
wait "$RSPID" 2>/dev/null
# With an objective some requests meet and some miss: the SLO card and its chart; token gaps of
# 2 ms or more are stalls (decode steps of 3 ms: every gap is one): the stalls card.
"$TS" report --json --slo 'ttft<=20ms' --stall-ms 2 --html "$TMP/report.html" "$TMP/run.tsr" \
	>"$TMP/report.jsonl" 2>"$TMP/report.err"
rc=$?
nlines=$(grep -c '^{"pid"' "$TMP/report.jsonl")
nsteps=$(grep -c '^{"gpu_step"' <("$TS" report --json --gpu-steps "$TMP/run.tsr" 2>/dev/null))
if [ $RC -ne 0 ] || [ $rc -ne 0 ] || [ ! -s "$TMP/report.html" ] || [ "$nlines" -ne 12 ] ||
	[ "$nsteps" -eq 0 ] || ! tail -n 1 "$TMP/report.jsonl" | grep -q '^{"summary":'; then
	ko "html report" "record exit $RC, report exit $rc, $nlines request lines (want 12), $nsteps GPU steps, page $(stat -c %s "$TMP/report.html" 2>/dev/null) bytes"
	finish
fi
ok "record of refserver --gpu, report --json --html: 12 request lines, $nsteps GPU steps, the summary line, $(stat -c %s "$TMP/report.html") bytes of page"

# 2. the page in the browser
if ! "$PY" "$CDP" "$TMP/report.html" --eval "$PROBE" --screenshot "$TMP/report.png" \
	>"$TMP/cdp.json" 2>"$TMP/cdp.err"; then
	ko "html in chromium" "$(cat "$TMP/cdp.err")"
	finish
fi
verdict=$("$PY" - "$TMP/cdp.json" "$TMP/report.jsonl" "$nlines" "$HOSTILE" <<'PY'
import json, sys
page = json.load(open(sys.argv[1]))
summary = [json.loads(l)["summary"] for l in open(sys.argv[2]) if l.startswith('{"summary"')][0]
nlines, hostile = int(sys.argv[3]), sys.argv[4]
ev, m = page["eval"], page["eval"]["metrics"]
out = {}
# (a) no exception, console error or error log; nothing asked of the network
out["errors"] = "; ".join(page["errors"] + ["network: " + u for u in page["network"]] +
                          (["not rendered"] if not page["rendered"] else []) +
                          (["%d parts could not be drawn" % ev["failed"]] if ev["failed"] else []))
# (b) every chart drawn, with marks
want = ["hist-ttft_ms", "hist-itl_ms", "hist-e2e_ms", "hist-tpot_ms", "series-ttft_ms",
        "series-itl_ms", "stack", "steps", "ttft-definitions", "series-slo"]
out["charts"] = "; ".join("%s: %s marks" % (c, ev["charts"].get(c, "no chart")) for c in want
                          if not ev["charts"].get(c))
# (c) the figures shown are the summary line's: data-value exactly, the text to its rounding
bad = []
def same(key, want):
    got = m.get(key)
    if got is None:
        bad.append(key + " not shown")
        return
    if want is None:
        if got["value"] != "":
            bad.append("%s: page %r, summary null" % (key, got["value"]))
        return
    if float(got["value"]) != float(want):
        bad.append("%s: page %s, summary %s" % (key, got["value"], want))
    # Shown rounded: within half a unit of its last digit (success in percent).
    text = got["text"].replace(",", "").split()[0]
    places = len(text.split(".")[1]) if "." in text else 0
    pct = key == "success" or (key.startswith("slo.") and key != "slo.goodput")
    if abs(float(text) - float(want) * (100 if pct else 1)) > 0.5 * 10 ** -places + 1e-9:
        bad.append("%s: shown %r for %s" % (key, got["text"], want))
for key in ("requests", "tokens", "success"):
    same(key, summary[key])
same("in_flight.max", summary["in_flight"]["max"])
for h in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "proxy_ttft_ms"):
    if h in summary:
        for k in ("count", "p50", "p90", "p99", "max"):
            same(h + "." + k, summary[h][k])
slo = summary.get("slo") or {}
for k in ("all", "ttft"):
    same("slo." + k, (slo.get("attainment") or {}).get(k, "missing"))
same("slo.goodput", (slo.get("goodput") or {}).get("requests_per_s", "missing"))
met = (slo.get("counts") or {}).get("all", {})
if not met.get("met") or not met.get("missed"):
    bad.append("the objective must be met by some requests and missed by others: %s" % met)
st = summary.get("stalls") or {}
if not st.get("gaps"):
    bad.append("no stall with --stall-ms 2: %s" % st)
for c, v in (st.get("by_cause") or {}).items():
    same("stalls." + c, v["gaps"])
td = summary["ttft_definitions"]
for d in ("first_byte_ms", "first_chunk_ms", "first_content_ms", "first_output_ms"):
    for k in ("count", "p50", "p90", "p99"):
        same("ttft_definitions.%s.%s" % (d, k), td[d][k])
if summary["requests"] != nlines or m.get("requests.kept", {}).get("value") != str(nlines):
    bad.append("summary %s requests, page keeps %s, %d request lines" % (
        summary["requests"], m.get("requests.kept", {}).get("value"), nlines))
nonzero = sum(1 for g in ("lost", "dropped") for v in summary[g].values() if v)
if m.get("loss.nonzero", {}).get("value") != str(nonzero):
    bad.append("%s loss counters shown, %d not 0 in the summary" % (m.get("loss.nonzero"), nonzero))
out["figures"] = "; ".join(bad)
# (d) a screenshot: a PNG, 1280 wide, not empty
s = page.get("screenshot") or {}
out["shot"] = "" if s.get("width") == 1280 and s.get("height", 0) > 500 and s.get("bytes", 0) > 20000 \
    else "screenshot %s" % s
# the hostile model name: shown as text, no <b> made of it, the two scripts only
models = m.get("models", {}).get("text", "")
out["escape"] = "" if hostile in models and ev["bold"] == 0 and ev["scripts"] == 2 else \
    "models shown %r, %d <b> elements, %d scripts" % (models, ev["bold"], ev["scripts"])
out["n"] = "%d figures, %d charts" % (len([k for k in m if "." in k]), len(ev["charts"]))
print(json.dumps(out))
PY
)
field() { "$PY" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$verdict" "$1" 2>/dev/null || echo "no verdict: $verdict"; }
# judge FIELD NAME PASS-TEXT: PASS when the verdict's FIELD is empty, else FAIL with it
judge() {
	local why
	why=$(field "$1")
	if [ -z "$why" ]; then ok "$3"; else ko "$2" "$why"; fi
}
judge errors "html page errors" "html page loads with no exception, console error or network request"
judge charts "html charts" "html charts drawn: histograms, P50/P99 over time, per-request stack, GPU steps"
judge figures "html figures" "html figures equal the {\"summary\"} line of report --json ($(field n)); requests = request lines"
judge shot "html screenshot" "html screenshot: a 1280 px wide PNG"
e=$(field escape)
# The raw page must not hold the name as written either: only its \u003c form.
if [ -z "$e" ] && ! grep -qF "$HOSTILE" "$TMP/report.html" && grep -qF '\u003c/script>\u003cb>x\u003c!--' "$TMP/report.html"; then
	ok "html escapes a model name '$HOSTILE': written \\u003c, shown as text, the page intact"
else
	ko "html escaping" "${e:-the name is in the page as written}"
fi

# 3. a live trace --html
start_server --token-ms 2 --prefill-ms 5
if start_tracer live trace -p "$RSPID" --html "$TMP/live.html"; then
	timeout 30 "$GT" --port "$PORT" -n 3 -c 1 --max-tokens 4 -o /dev/null 2>/dev/null
	sleep 0.3
	stop_tracer
	if [ $RC -ne 0 ] || [ ! -s "$TMP/live.html" ]; then
		ko "html live trace" "exit $RC, page $(stat -c %s "$TMP/live.html" 2>/dev/null) bytes: $(tail -n 3 "$TMP/live.err")"
	elif ! "$PY" "$CDP" "$TMP/live.html" --eval "$PROBE" >"$TMP/live.json" 2>"$TMP/cdp-live.err"; then
		ko "html live trace" "$(cat "$TMP/cdp-live.err")"
	else
		v=$("$PY" -c '
import json, sys
p = json.load(open(sys.argv[1]))
e = p["eval"]
bad = p["errors"] + ["network: " + u for u in p["network"]]
if not p["rendered"] or e["failed"]:
    bad.append("not rendered")
if e["metrics"].get("requests", {}).get("value") != "3":
    bad.append("requests shown %s, want 3" % e["metrics"].get("requests"))
bad += ["%s not drawn" % c for c in ("hist-ttft_ms", "series-itl_ms", "stack") if not e["charts"].get(c)]
print("; ".join(bad))' "$TMP/live.json")
		if [ -z "$v" ]; then
			ok "html of a live trace --html (3 requests, no GPU) renders"
		else
			ko "html live trace" "$v"
		fi
	fi
else
	ko "html live trace" "the tracer did not attach"
fi
kill "$RSPID" 2>/dev/null
wait "$RSPID" 2>/dev/null

# 4. a page that cannot be written is refused before tracing starts
"$TS" report --html "$TMP/no/such/dir/x.html" "$TMP/run.tsr" >/dev/null 2>"$TMP/nodir.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "no/such/dir/x.html: No such file or directory" "$TMP/nodir.err"; then
	ok "html to a path that cannot be written: exit 1 with the reason"
else
	ko "html bad path" "exit $rc: $(cat "$TMP/nodir.err")"
fi

# 5. a page is written beside its path and renamed over it whole: a tracer killed mid-run
# leaves the earlier page as it was (and its unfinished file beside it), a run that finishes
# replaces it and leaves nothing beside
echo "earlier page" >"$TMP/keep.html"
sleep 30 &
SLEEPPID=$!
"$TS" trace -p "$SLEEPPID" --html "$TMP/keep.html" >/dev/null 2>"$TMP/keep.err" &
TSPID=$!
for _ in $(seq 100); do grep -q attached "$TMP/keep.err" && break; sleep 0.1; done
kill -9 "$TSPID" 2>/dev/null
wait "$TSPID" 2>/dev/null
kill "$SLEEPPID" 2>/dev/null
wait "$SLEEPPID" 2>/dev/null
killed=$(cat "$TMP/keep.html")
rm -f "$TMP"/keep.html.*
"$TS" report --html "$TMP/new.html" "$TMP/run.tsr" >/dev/null 2>&1
"$TS" report --html "$TMP/keep.html" "$TMP/run.tsr" >/dev/null 2>>"$TMP/keep.err"
rc=$?
left=$(find "$TMP" -maxdepth 1 -name 'keep.html.*' | wc -l)
if [ "$killed" = "earlier page" ] && [ $rc -eq 0 ] && cmp -s "$TMP/keep.html" "$TMP/new.html" &&
	[ "$left" -eq 0 ]; then
	ok "html: a killed tracer leaves an earlier page whole, a finished run replaces it and leaves nothing beside"
else
	ko "html replace" "after the kill the page was '$(echo "$killed" | head -c 40)', report exit $rc, $(cmp "$TMP/keep.html" "$TMP/new.html" 2>&1), $left files left: $(cat "$TMP/keep.err")"
fi
finish
