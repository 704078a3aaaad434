#!/usr/bin/env bash
# Makes docs/report.png, the picture of the HTML report (docs/html-report.md), from a
# real traced run: the reference server in GPU mode (the stand-in CUDA runtime, so no GPU is
# needed; 25 ms prefill steps, 8 ms decode steps of at most 4 requests) recorded with
# `tokenscope record` while streaming clients drive it, first 2 at a time, then 8 (so that the
# requests queue for prefill and the diagnosis has something to say), then
# `tokenscope report --html`, and the page shot 1280 px wide in headless Chromium
# (tests/html/cdp.py), cut at the end of the GPU steps' section.
#
#   scripts/html-shot.sh [OUT.png]     # as root (BPF); default docs/report.png
#
# Also leaves the page and the recording in .output/html-shot/ to look at.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${1:-docs/report.png}
TS=.output/tokenscope
RS=.output/refserver
GT=.output/gtclient
CUDART=.output/standin/libcudart.so.13
DIR=.output/html-shot
for f in "$TS" "$RS" "$GT" "$CUDART"; do
	[ -e "$f" ] || { echo "html-shot.sh: $f is not built (make)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "html-shot.sh: tracing needs root (BPF)" >&2; exit 1; }
mkdir -p "$DIR"
rm -f "$DIR"/*
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT

"$RS" --gpu --cudart "$CUDART" --port 0 --token-ms 8 --prefill-ms 25 --jitter-ms 2 \
	--max-batch 4 >"$DIR/rs.out" 2>&1 &
pids+=($!)
rs=$!
for _ in $(seq 100); do grep -q listening "$DIR/rs.out" && break; sleep 0.05; done
port=$(grep -o 'listening on [0-9.]*:[0-9]*' "$DIR/rs.out" | grep -o '[0-9]*$')
[ -n "$port" ] || { echo "html-shot.sh: refserver did not start" >&2; exit 1; }
# Warm-up, untraced: the engine's first steps load the runtime.
"$GT" --port "$port" -n 2 --max-tokens 2 -o /dev/null 2>/dev/null
"$TS" record -p "$rs" -o "$DIR/run.tsr" >/dev/null 2>"$DIR/rec.err" &
ts=$!
pids+=("$ts")
for _ in $(seq 200); do grep -q attached "$DIR/rec.err" && break; sleep 0.05; done
sleep 1.5 # the CUDA scan, once a second
"$GT" --port "$port" -n 30 -c 2 --usage --max-tokens 24 --stagger-ms 40 -o /dev/null 2>/dev/null
"$GT" --port "$port" -n 34 -c 8 --usage --max-tokens 24 --stagger-ms 15 -o /dev/null 2>/dev/null
sleep 0.3
kill -INT "$ts"
wait "$ts"
# From the folder: the page names the recording as given, run.tsr.
(cd "$DIR" && "$OLDPWD/$TS" report run.tsr --html report.html) >"$DIR/report.txt" 2>&1 ||
	{ echo "html-shot.sh: report failed: $(tail -n 3 "$DIR/report.txt")" >&2; exit 1; }
/usr/bin/python3 tests/html/cdp.py "$DIR/report.html" --width 1280 --until '[data-chart="steps"]' \
	--screenshot "$OUT" >"$DIR/cdp.json" || exit 1
/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
s = d["screenshot"]
print("%s: %dx%d, %d KB; page errors: %s" % (s["path"], s["width"], s["height"], s["bytes"] // 1024,
                                           d["errors"] or "none"))
sys.exit(1 if d["errors"] else 0)
' "$DIR/cdp.json"
