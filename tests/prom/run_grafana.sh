#!/usr/bin/env bash
# The Grafana dashboard (deploy/grafana/tokenscope.json) against a real Prometheus: the
# reference server in its GPU mode (an engine child making CUDA runtime calls, with the CUPTI
# injection library and the stand-in CUDA runtime and CUPTI where they were built, so device
# times are reported), traced with `tokenscope trace --listen --alert` and the stand-in NVML
# (tests/nvmlstub.c, as in run_nvml.sh), so that every family the dashboard reads is exported:
# request histograms and counters, GPU steps, NVML gauges, an --alert rule that fires, the loss
# counters. Prometheus scrapes it every second with deploy/prometheus/rules.yml loaded (an HTTP
# error makes TokenscopeSuccessRateLow pending, for the ALERTS panel); gtclient sends requests
# after the first scrape, so every rate has something to show. Then tests/prom/grafana_check.py
# checks the dashboard's JSON, its `model` variable's query, that every metric it names is
# tokenscope's, and runs every panel's query on Prometheus: each must succeed with data.
# CUPTI_LIB names the injection library (default: the one built); where it is missing, the
# device times panel is a SKIP. Needs root (BPF). Prints PASS/FAIL/SKIP lines and the totals
# line; exits 1 if anything failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
TS=${TOKENSCOPE:-.output/tokenscope}
RS=${REFSERVER:-.output/refserver}
GT=${GTCLIENT:-.output/gtclient}
DASH=deploy/grafana/tokenscope.json
RULES=deploy/prometheus/rules.yml
STANDIN=.output/standin
CUPTI_LIB=${CUPTI_LIB:-.output/libtokenscope_cupti.so}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
TMP=$(mktemp -d)
. tests/lib.sh
# shellcheck source=tests/prom/prom_lib.sh
. tests/prom/prom_lib.sh
KO_LOGS="$TMP/rs.out"
pids=()
# Every wait is bounded: this many tenths of a second (WAIT_START), seconds (the others).
WAIT_START=100 WAIT_READY=30 WAIT_SCRAPE=20
ALERT='ttft.p99 > 1ms' # fires at the first evaluation with a request in its window

cleanup() {
	stop_pids
	rm -rf "$TMP"
}
trap cleanup EXIT

missing=""
for t in "$TS" "$RS" "$GT" "$STANDIN/libnvidia-ml.so.1"; do [ -e "$t" ] || missing="$missing $t"; done
for c in curl prometheus; do command -v $c >/dev/null || missing="$missing $c"; done
if [ "$(id -u)" -ne 0 ]; then
	sk "grafana dashboard" "needs root to load BPF programs"
	finish
elif [ -n "$missing" ]; then
	sk "grafana dashboard" "missing:$missing (make; scripts/deps.sh)"
	finish
fi

# Device times need the injection library and the stand-in runtime (which loads it as the
# driver would); without them the toolkit's runtime still gives GPU steps.
rs_env=() rs_args=() optional=()
if [ -e "$CUPTI_LIB" ] && [ -e "$STANDIN/libcudart.so.13" ] && [ -e "$STANDIN/libcupti.so.13" ]; then
	rs_env=(CUDA_INJECTION64_PATH="$CUPTI_LIB" LD_LIBRARY_PATH="$STANDIN" TOKENSCOPE_CUPTI_QUIET=1)
	rs_args=(--cudart "$STANDIN/libcudart.so.13")
else
	optional=(--optional tokenscope_device_times_lost_total)
fi
env "${rs_env[@]}" "$RS" --port 0 --gpu "${rs_args[@]}" --token-ms 5 --prefill-ms 10 \
	>"$TMP/rs.out" 2>&1 </dev/null &
RSPID=$!
pids+=("$RSPID")
for _ in $(seq $WAIT_START); do grep -q listening "$TMP/rs.out" && break; sleep 0.1; done
PORT=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$TMP/rs.out" | head -n 1)
ENGINE=$(sed -n 's/^refserver: engine pid \([0-9]*\),.*/\1/p' "$TMP/rs.out")
if [ -z "$PORT" ] || [ -z "$ENGINE" ]; then
	ko "refserver --gpu" "did not start"
	finish
fi

# Two stand-in GPUs: the traced API and engine processes on GPU 0; GPU 1 reports no power.
STUB="name=Stub H200,uuid=GPU-0000-aaaa,util=45,mem=1073741824/8589934592,sm=1980,power=350125"
STUB="$STUB,procs=$RSPID:536870912/$ENGINE:2147483648;name=Stub B,uuid=GPU-1111,util=7,power=na"
LD_LIBRARY_PATH=$STANDIN TS_NVML_STUB=$STUB "$TS" trace -p "$RSPID" --listen 127.0.0.1:0 \
	--alert "$ALERT" >"$TMP/ts.out" 2>"$TMP/ts.err" </dev/null &
TSPID=$!
pids+=("$TSPID")
for _ in $(seq $WAIT_START); do grep -q attached "$TMP/ts.err" && break; sleep 0.1; done
MPORT=$(grep -o 'metrics at http://127.0.0.1:[0-9]*' "$TMP/ts.err" | grep -o '[0-9]*$')
if [ -z "$MPORT" ]; then
	ko "tokenscope --listen" "did not start"
	finish
fi
ok "tokenscope traces refserver --gpu (pid $RSPID, engine $ENGINE), metrics on port $MPORT"

# Prometheus, scraping tokenscope every second, with the rules loaded (ALERTS).
start_prometheus "$MPORT"
up=
deadline=$((SECONDS + WAIT_READY))
while [ $SECONDS -lt $deadline ]; do
	up=$(prom_query 'up{job="tokenscope"}')
	[ "$up" = 1 ] && break
	sleep 0.1
done
[ "$up" = 1 ] || { ko "prometheus" "no scrape of tokenscope after $WAIT_READY s"; finish; }

# Requests. A series that Prometheus first sees with its final value has no rate: so one
# request first, which makes the request and GPU step series, and the others once Prometheus
# has scraped it; prompts of several sizes, two at a time; one HTTP error (success below 99 %:
# TokenscopeSuccessRateLow pending).
"$GT" --port "$PORT" -n 1 --max-tokens 4 --usage -o /dev/null 2>>"$TMP/gt.err"
NREQ=1
deadline=$((SECONDS + WAIT_SCRAPE))
while [ $SECONDS -lt $deadline ]; do
	[ "$(prom_query 'sum(tokenscope_requests_total{role="server"})')" = 1 ] && break
	sleep 0.1
done
for bytes in 64 1024 4096; do
	extra=()
	[ "$bytes" = 4096 ] && extra=(--http-error-every 4)
	"$GT" --port "$PORT" -n 4 -c 2 --max-tokens 6 --usage --prompt-bytes "$bytes" "${extra[@]}" \
		-o /dev/null 2>>"$TMP/gt.err" || true
	NREQ=$((NREQ + 4))
done
# Prometheus has every request, and the rules' alert, and the --alert rule has fired; and,
# with device times, two scrapes of their loss counters (a rate needs two samples: the family
# appears once the engine's CUPTI library has reported, a scan after attach).
n='' alerts='' firing='' dev=2
deadline=$((SECONDS + WAIT_SCRAPE))
while [ $SECONDS -lt $deadline ]; do
	n=$(prom_query 'sum(tokenscope_requests_total{role="server"})')
	alerts=$(prom_query 'count(ALERTS{alertname=~"Tokenscope.*"})')
	firing=$(prom_query 'max(tokenscope_alert_firing)')
	[ ${#optional[@]} -eq 0 ] && dev=$(prom_query 'min(count_over_time(tokenscope_device_times_lost_total[1m]))')
	[ "${n:-0}" = "$NREQ" ] && [ -n "$alerts" ] && [ "$firing" = 1 ] && [ "${dev:-0}" -ge 2 ] && break
	sleep 0.1
done
if [ "${n:-0}" = "$NREQ" ] && [ -n "$alerts" ] && [ "$firing" = 1 ]; then
	ok "prometheus has the $NREQ requests, $alerts rules.yml alert(s) and --alert '$ALERT' firing"
else
	rules=$(curl -s --max-time 5 "http://127.0.0.1:$PPORT/api/v1/rules" | "$PY" -c 'import json,sys
rs = [r for g in json.load(sys.stdin)["data"]["groups"] for r in g["rules"]]
print("; ".join(" ".join([r["name"], r["health"], r.get("state", ""), r.get("lastError", "")]) for r in rs))' 2>&1)
	ko "prometheus" "requests ${n:-none} (want $NREQ), ALERTS ${alerts:-none}, tokenscope_alert_firing ${firing:-none}; rules: $rules"
fi
curl -s --max-time 5 -o "$TMP/metrics.txt" "http://127.0.0.1:$MPORT/metrics"

# The dashboard, every query on Prometheus.
"$PY" tests/prom/grafana_check.py "$DASH" --prom "http://127.0.0.1:$PPORT" \
	--metrics "$TMP/metrics.txt" --docs docs/prometheus.md --docs docs/nvml.md --model ref \
	--rate-interval 1m --range 5m "${optional[@]}" >"$TMP/check.out" 2>"$TMP/check.err"
rc=$?
while IFS= read -r line; do
	echo "$line"
	case $line in
	"PASS "*) pass=$((pass + 1)) ;;
	"FAIL "*) fail=$((fail + 1)) ;;
	"SKIP "*) skip=$((skip + 1)) ;;
	esac
done <"$TMP/check.out"
if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$TMP/check.out"; then
	ko "grafana_check.py" "exit $rc: $(tail -n 5 "$TMP/check.err")"
fi
finish
