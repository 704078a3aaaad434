#!/usr/bin/env bash
# The Prometheus endpoint end to end: refserver traced with `tokenscope trace --json --listen`,
# about 40 requests from gtclient with TTFTs spread over several buckets, then
#  (a) /metrics fetched with curl passes `promtool check metrics` and counts every request;
#  (b) a real Prometheus server scraping every second computes a TTFT P99 with
#      histogram_quantile that agrees with tokenscope's own (from its JSON lines) within the
#      bucket's error, and evaluates deploy/prometheus/rules.yml without errors;
#  (c) `promtool check rules` and `promtool test rules` pass on the rules;
#  (d) `tokenscope trace --all --by-process --listen` on two servers, one in a cgroup named as
#      docker names a container's: every request series has the pid that served it (the JSON
#      lines' pid), the container's series its short id and the host's none, counts match the
#      JSON lines per process, and `promtool check metrics` passes on the scrape.
# Also: a port already taken is refused with a clear message. Needs root (BPF).
# Prints PASS/FAIL/SKIP lines and the totals line; exits 1 if anything failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
TS=${TOKENSCOPE:-.output/tokenscope}
RS=${REFSERVER:-.output/refserver}
GT=${GTCLIENT:-.output/gtclient}
RULES=deploy/prometheus/rules.yml
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
TMP=$(mktemp -d)
. tests/lib.sh
# shellcheck source=tests/prom/prom_lib.sh
. tests/prom/prom_lib.sh
KO_LOGS="$TMP/rs.out"
pids=()
CGDIR= # (d): the cgroup made for the container stand-in
# Every wait is bounded: this many tenths of a second at most.
WAIT_ATTACH=100 WAIT_READY=300 WAIT_SCRAPE=300 WAIT_LINES=100

cleanup() {
	stop_pids
	if [ -n "$CGDIR" ]; then
		for _ in $(seq 30); do [ -s "$CGDIR/cgroup.procs" ] || break; sleep 0.1; done
		rmdir "$CGDIR" "$(dirname "$CGDIR")" 2>/dev/null
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT

# (c) first: it needs neither root nor a tracer.
if command -v promtool >/dev/null; then
	if out=$(promtool check rules "$RULES" 2>&1); then
		ok "promtool check rules $RULES"
	else
		ko "promtool check rules" "$out"
	fi
	if out=$(promtool test rules tests/prom/rules_test.yml 2>&1); then
		ok "promtool test rules: each alert fires after its 'for' and not before"
	else
		ko "promtool test rules" "$out"
	fi
else
	sk "promtool check rules" "promtool not installed (Debian package prometheus)"
fi

missing=""
for t in "$TS" "$RS" "$GT"; do [ -x "$t" ] || missing="$missing $t"; done
for c in curl promtool prometheus; do command -v $c >/dev/null || missing="$missing $c"; done
if [ "$(id -u)" -ne 0 ]; then
	sk "metrics endpoint" "needs root to load BPF programs"
	finish
elif [ -n "$missing" ]; then
	sk "metrics endpoint" "missing:$missing (make; scripts/deps.sh)"
	finish
fi

# Server: TTFT = 50 ms + 0.1 ms per prompt byte, so prompt sizes spread TTFT over buckets;
# jittered token gaps.
"$RS" --port 0 --prefill-ms 50 --prefill-us-per-byte 100 --token-ms 5 --jitter-ms 10 \
	>"$TMP/rs.out" 2>&1 &
RSPID=$!
pids+=("$RSPID")
for _ in $(seq 50); do grep -q listening "$TMP/rs.out" && break; sleep 0.1; done
PORT=$(grep -o '[0-9]*$' "$TMP/rs.out")
[ -n "$PORT" ] || { ko "refserver" "did not start"; finish; }

MPORT=$(free_port)
# TTFT within 300 ms for prompts up to 2,048 bytes (254.8 ms at most), beyond it for larger ones.
"$TS" trace -p "$RSPID" --json --listen "127.0.0.1:$MPORT" --slo 'ttft<=300ms' \
	>"$TMP/ts.json" 2>"$TMP/ts.err" &
TSPID=$!
pids+=("$TSPID")
for _ in $(seq $WAIT_ATTACH); do grep -q attached "$TMP/ts.err" && break; sleep 0.1; done
if ! grep -q "metrics at http://127.0.0.1:$MPORT/metrics" "$TMP/ts.err"; then
	ko "tokenscope --listen" "no 'metrics at' line"
	finish
fi
ok "tokenscope serves metrics at http://127.0.0.1:$MPORT/metrics"

# A second tracer on the same port: refused, with the reason.
"$TS" trace -p "$RSPID" --listen "127.0.0.1:$MPORT" -d 5 >/dev/null 2>"$TMP/busy.err"
rc=$?
if [ $rc -eq 1 ] &&
	grep -qx "tokenscope: cannot listen on 127.0.0.1:$MPORT: Address already in use" \
		"$TMP/busy.err"; then
	ok "a port in use is refused: $(cat "$TMP/busy.err")"
else
	ko "port in use" "rc=$rc: $(cat "$TMP/busy.err")"
fi

# Prometheus, scraping tokenscope every second, with our rules loaded.
start_prometheus "$MPORT"
ready=0
for _ in $(seq $WAIT_READY); do
	curl -sf --max-time 2 "http://127.0.0.1:$PPORT/-/ready" >/dev/null && { ready=1; break; }
	sleep 0.1
done
[ $ready -eq 1 ] || { ko "prometheus" "not ready after $((WAIT_READY / 10)) s"; finish; }

# 40 requests: 8 prompt sizes x 5, 5 at a time; every 10th of the last batch an HTTP error.
NREQ=0
for bytes in 16 128 256 512 1024 2048 4096 8192; do
	extra=()
	[ "$bytes" = 8192 ] && extra=(--http-error-every 5)
	"$GT" --port "$PORT" -n 5 -c 5 --max-tokens 8 --usage --prompt-bytes "$bytes" "${extra[@]}" \
		-o "$TMP/gt.$bytes.jsonl" 2>>"$TMP/gt.err" || true
	NREQ=$((NREQ + 5))
done
for _ in $(seq $WAIT_LINES); do
	[ "$(grep -c '"outcome":"' "$TMP/ts.json")" -ge $NREQ ] && break
	sleep 0.1
done
NOK=$(grep -c '"outcome":"ok"' "$TMP/ts.json")
if [ "$(grep -c '"outcome":"' "$TMP/ts.json")" -eq $NREQ ] && [ "$NOK" -eq $((NREQ - 1)) ]; then
	ok "tokenscope reported $NREQ requests ($NOK ok)"
else
	ko "JSON lines" "$(grep -c '"outcome":"' "$TMP/ts.json") requests, $NOK ok; expected $NREQ"
fi

# (a) the endpoint, as any client sees it
sleep 0.2 # the snapshot follows the last records within a drain period (25 ms)
code=$(curl -s --max-time 5 -o "$TMP/metrics.txt" -D "$TMP/headers.txt" -w '%{http_code}' \
	"http://127.0.0.1:$MPORT/metrics")
if [ "$code" = 200 ] && grep -qi '^content-type: text/plain; version=0.0.4' "$TMP/headers.txt"; then
	ok "GET /metrics: 200, text/plain; version=0.0.4"
else
	ko "GET /metrics" "status $code, $(grep -i content-type "$TMP/headers.txt")"
fi
if out=$(promtool check metrics <"$TMP/metrics.txt" 2>&1); then
	ok "promtool check metrics ($(grep -vc '^#' "$TMP/metrics.txt") samples)"
else
	ko "promtool check metrics" "$out"
fi
total=$(awk '/^tokenscope_requests_total\{/ { s += $2 } END { print s + 0 }' "$TMP/metrics.txt")
ttft_n=$(awk '/^tokenscope_time_to_first_token_seconds_count\{/ { s += $2 } END { print s + 0 }' \
	"$TMP/metrics.txt")
if [ "$total" -eq "$NREQ" ] && [ "$ttft_n" -eq "$NOK" ] &&
	grep -q "^tokenscope_requests_total{model=\"ref\",role=\"server\",outcome=\"http_error\"} 1$" \
		"$TMP/metrics.txt"; then
	ok "metrics count every request: requests_total $total, TTFT count $ttft_n"
else
	ko "metrics counts" "requests_total $total (want $NREQ), TTFT count $ttft_n (want $NOK)"
fi
# The SLO counters against the verdicts in the JSON lines.
slo_want=$("$PY" - "$TMP/ts.json" <<'EOF'
import json, sys
n = {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "outcome" in j:
        r = (j.get("slo") or {}).get("result", "none")
        n[r] = n.get(r, 0) + 1
print(" ".join(f"{k}={n.get(k, 0)}" for k in ("met", "missed", "unknown", "aborted")))
EOF
)
slo_got=$(for r in met missed unknown aborted; do
	printf '%s=%s ' "$r" "$(grep "^tokenscope_slo_requests_total{.*slo=\"all\",result=\"$r\"}" \
		"$TMP/metrics.txt" | awk '{ s += $2 } END { print s + 0 }')"
done)
if [ "${slo_got% }" = "$slo_want" ] && [ "$slo_want" != "met=0 missed=0 unknown=0 aborted=0" ] &&
	grep -q '^tokenscope_goodput_requests_total{' "$TMP/metrics.txt"; then
	ok "SLO counters agree with the JSON lines' verdicts: $slo_want"
else
	ko "SLO counters" "metrics: ${slo_got% }; JSON lines: $slo_want"
fi
code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MPORT/")
if [ "$code" = 404 ]; then ok "GET /: 404"; else ko "GET /" "status $code"; fi

# (b) Prometheus: at least two scrapes, the last one after the last request
scraped=0
for _ in $(seq $WAIT_SCRAPE); do
	n=$(prom_query 'count_over_time(up{job="tokenscope"}[5m])')
	c=$(prom_query 'sum(tokenscope_time_to_first_token_seconds_count)')
	if [ "${n:-0}" -ge 2 ] && [ "${c:-0}" = "$NOK" ]; then
		scraped=1
		break
	fi
	sleep 0.1
done
if [ $scraped -eq 1 ]; then
	ok "prometheus scraped $n times; its TTFT count is $c"
else
	ko "prometheus scrapes" "scrapes ${n:-none}, TTFT count ${c:-none} (want $NOK)"
fi
q=$(prom_query 'histogram_quantile(0.99, sum by (le) (tokenscope_time_to_first_token_seconds_bucket))')
# P99 of the ok requests' ttft_ms (nearest rank), and whether Prometheus' interpolated value
# is in the same bucket or within that bucket's width of it.
verdict=$("$PY" - "$TMP/ts.json" "${q:-nan}" <<'EOF'
import json, math, sys
bounds = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
          7.5, 10.0]
v = sorted(json.loads(l)["ttft_ms"] / 1e3 for l in open(sys.argv[1])
           if '"outcome":"ok"' in l)
prom = float(sys.argv[2])
true = v[max(1, math.ceil(0.99 * len(v))) - 1]
i = next((k for k, b in enumerate(bounds) if true <= b), len(bounds))
lo = bounds[i - 1] if i > 0 else 0.0
hi = bounds[i] if i < len(bounds) else math.inf
same = lo < prom <= hi
close = abs(prom - true) <= hi - lo
print(f"{'ok' if same or close else 'bad'} tokenscope P99 {true:.4f} s, Prometheus "
      f"{prom:.4f} s, bucket ({lo}, {hi}]")
EOF
)
case $verdict in
ok*) ok "TTFT P99 agrees: ${verdict#ok }" ;;
*) ko "TTFT P99" "${verdict#bad }" ;;
esac
rules=$(curl -s --max-time 5 "http://127.0.0.1:$PPORT/api/v1/rules" |
	"$PY" -c 'import json,sys
rs = [r for g in json.load(sys.stdin)["data"]["groups"] for r in g["rules"]]
bad = [r["name"] + ": " + r.get("lastError", "") for r in rs if r["health"] != "ok"]
print(len(rs), "; ".join(bad))' 2>&1)
if [[ $rules =~ ^[0-9]+\ $ ]] && [ "${rules% }" -gt 0 ]; then
	ok "prometheus evaluates the ${rules% } rules of $RULES without errors"
else
	ko "rules in prometheus" "$rules"
fi

# tokenscope exits cleanly on SIGINT with the server running
kill -INT "$TSPID"
for _ in $(seq 50); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$TSPID" 2>/dev/null; then
	ko "SIGINT" "tokenscope still running after 5 s"
else
	wait "$TSPID"
	rc=$?
	if [ $rc -eq 0 ]; then
		ok "tokenscope with --listen exits 0 on SIGINT"
	else
		ko "SIGINT" "exit $rc"
	fi
fi

# (d) --all --by-process: a pid label on every request series, and a container label for the
# server in a container. The servers are named llama-server so that --all finds them; the
# "container" is a cgroup named as docker names one (docker-ID.scope), which is all --all reads.
CID=$(echo "tokenscope-test-$$" | sha256sum | cut -c1-64)
CG2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
mkdir -p "$TMP/bin"
cp "$RS" "$TMP/bin/llama-server"
start_llama() { # name: starts $TMP/bin/llama-server; sets LPID and LPORT
	"$TMP/bin/llama-server" --port 0 --prefill-ms 5 --token-ms 2 >"$TMP/$1.out" 2>&1 &
	LPID=$!
	pids+=("$LPID")
	for _ in $(seq 50); do grep -q listening "$TMP/$1.out" && break; sleep 0.1; done
	LPORT=$(grep -o '[0-9]*$' "$TMP/$1.out")
}
start_llama host
HPID=$LPID HPORT=$LPORT
start_llama ctr
CPID=$LPID CPORT=$LPORT
incontainer=0
if [ -n "$CG2" ] && mkdir -p "$CG2/tokenscope-test-$$/docker-$CID.scope" 2>/dev/null; then
	CGDIR="$CG2/tokenscope-test-$$/docker-$CID.scope"
	echo "$CPID" >"$CGDIR/cgroup.procs" 2>/dev/null && incontainer=1
fi
MPORT2=$(free_port)
"$TS" trace --all --by-process --json --listen "127.0.0.1:$MPORT2" >"$TMP/all.json" \
	2>"$TMP/all.err" &
TSPID=$!
pids+=("$TSPID")
for _ in $(seq $WAIT_ATTACH); do grep -q attached "$TMP/all.err" && break; sleep 0.1; done
if [ -z "$HPORT" ] || [ -z "$CPORT" ] || ! grep -q "found $HPID (llama.cpp" "$TMP/all.err" ||
	! grep -q "found $CPID (llama.cpp" "$TMP/all.err"; then
	ko "--all --by-process" "servers on ports '$HPORT' '$CPORT' not both found: $(head -c 400 "$TMP/all.err")"
	finish
fi
"$GT" --port "$CPORT" -n 6 -c 2 --max-tokens 4 --usage --http-error-every 3 -o /dev/null 2>>"$TMP/gt.err"
"$GT" --port "$HPORT" -n 4 -c 2 --max-tokens 4 --usage -o /dev/null 2>>"$TMP/gt.err"
for _ in $(seq $WAIT_LINES); do
	[ "$(grep -cE "\"pid\":($CPID|$HPID)," "$TMP/all.json")" -ge 10 ] && break
	sleep 0.1
done
sleep 0.2 # the snapshot follows the last records within a drain period
curl -s --max-time 5 -o "$TMP/all.txt" "http://127.0.0.1:$MPORT2/metrics"
if out=$(promtool check metrics <"$TMP/all.txt" 2>&1); then
	ok "promtool check metrics on the --all --by-process scrape ($(grep -vc '^#' "$TMP/all.txt") samples)"
else
	ko "promtool check metrics (--by-process)" "$out"
fi
# Per process: requests and ok requests in the JSON lines, and in the metrics (summed over
# every series with that pid label).
json_n() { grep "\"pid\":$1," "$TMP/all.json" | grep -c "$2"; }
metric_sum() { # family, labels that must all be there
	awk -v fam="$1{" -v a="$2" -v b="${3:-}" \
		'index($0, fam) == 1 && index($0, a) && (b == "" || index($0, b)) { s += $NF } END { print s + 0 }' \
		"$TMP/all.txt"
}
CL="pid=\"$CPID\"" HL="pid=\"$HPID\""
CTRL="container=\"${CID:0:12}\""
bad=""
for who in C H; do
	pid_var=${who}PID lab_var=${who}L
	pid=${!pid_var} lab=${!lab_var}
	n=$(json_n "$pid" '"outcome"') nok=$(json_n "$pid" '"outcome":"ok"')
	m=$(metric_sum tokenscope_requests_total "$lab")
	mok=$(metric_sum tokenscope_requests_total "$lab" 'outcome="ok"')
	ttft=$(metric_sum tokenscope_time_to_first_token_seconds_count "$lab")
	[ "$n" -gt 0 ] && [ "$m" -eq "$n" ] && [ "$mok" -eq "$nok" ] && [ "$ttft" -eq "$nok" ] ||
		bad="$bad pid $pid: JSON $n requests ($nok ok), metrics $m ($mok ok, TTFT count $ttft);"
done
[ "$(json_n "$CPID" '"outcome"')" -eq 6 ] && [ "$(json_n "$HPID" '"outcome"')" -eq 4 ] ||
	bad="$bad JSON lines: $(json_n "$CPID" '"outcome"') and $(json_n "$HPID" '"outcome"') (want 6 and 4);"
# every sample of the request families carries a pid
nopid=$(grep -E '^tokenscope_(requests_total|tokens_total|streams_in_flight|time_to_first|inter_token|time_per_output|request_(duration|queue|prefill|decode))' \
	"$TMP/all.txt" | grep -vc 'pid="')
[ "$nopid" -eq 0 ] || bad="$bad $nopid request samples without a pid;"
grep -q "^tokenscope_streams_in_flight{model=\"ref\",role=\"server\",$HL} 0$" "$TMP/all.txt" ||
	bad="$bad no in-flight gauge for $HPID without a container;"
if [ $incontainer -eq 1 ]; then
	[ "$(metric_sum tokenscope_requests_total "$CL" "$CTRL")" -eq 6 ] ||
		bad="$bad the container's requests lack $CTRL;"
	grep -q "^tokenscope_requests_total{model=\"ref\",role=\"server\",$CL,$CTRL,outcome=\"http_error\"} 2$" \
		"$TMP/all.txt" || bad="$bad no http_error line for the container;"
	grep "$HL" "$TMP/all.txt" | grep -q 'container=' && bad="$bad a container label on the host;"
fi
if [ -z "$bad" ]; then
	ok "--all --by-process: requests under pid $CPID and $HPID as in the JSON lines, every request sample with a pid"
else
	ko "--all --by-process" "$bad"
fi
if [ $incontainer -eq 1 ]; then
	[ -z "$bad" ] && ok "container=\"${CID:0:12}\" on the series of the server in the container, none on the host's"
else
	sk "container label" "cannot make a cgroup under '${CG2:-no cgroup2 mount}'"
fi
kill -INT "$TSPID"
for _ in $(seq 50); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
kill "$HPID" "$CPID" 2>/dev/null

# (e) --label from a hostile client: 3,000 requests, each with its own X-Tenant-Id, and two
# real tenants among them (every 100th and 150th request): the tenants keep series of their
# own, the hostile values none, within --label-top 5, and the scrape passes promtool.
"$RS" --port 0 >"$TMP/rs5.out" 2>&1 &
R5=$!
pids+=("$R5")
for _ in $(seq 50); do grep -q listening "$TMP/rs5.out" && break; sleep 0.1; done
P5=$(grep -o '[0-9]*$' "$TMP/rs5.out")
M5=$(free_port)
"$TS" trace -p "$R5" --json --listen "127.0.0.1:$M5" --label tenant=header:X-Tenant-Id \
	--label-top 5 >"$TMP/ts5.json" 2>"$TMP/ts5.err" &
T5=$!
pids+=("$T5")
for _ in $(seq $WAIT_ATTACH); do grep -q attached "$TMP/ts5.err" && break; sleep 0.1; done
"$GT" --port "$P5" -n 3000 -c 4 -k 50 --max-tokens 1 --unique-header X-Tenant-Id \
	--header-every '100:X-Tenant-Id: acme' --header-every '150:X-Tenant-Id: globex' \
	-o /dev/null 2>>"$TMP/gt.err" || true
for _ in $(seq $WAIT_LINES); do
	[ "$(grep -c '"outcome":"' "$TMP/ts5.json")" -ge 3000 ] && break
	sleep 0.1
done
sleep 0.2
curl -s --max-time 5 -o "$TMP/m5.txt" "http://127.0.0.1:$M5/metrics"
values=$(grep -o '^tokenscope_requests_total{[^}]*tenant="[^"]*"' "$TMP/m5.txt" |
	grep -o 'tenant="[^"]*"' | grep -v 'tenant=""' | sort -u | tr '\n' ' ')
acme=$(awk 'index($0, "tokenscope_requests_total{") == 1 && index($0, "tenant=\"acme\"") { s += $NF } END { print s + 0 }' "$TMP/m5.txt")
labelled=$(grep -c '"labels":{"tenant":"' "$TMP/ts5.json")
if out=$(promtool check metrics <"$TMP/m5.txt" 2>&1) &&
	[ "$values" = 'tenant="acme" tenant="globex" tenant="other" ' ] && [ "$acme" -eq 29 ] &&
	[ "$labelled" -eq 3000 ]; then
	ok "--label from a hostile client: 3000 distinct tenants, series for ${values% } only (acme $acme requests: its 30 but the first); every JSON line labelled; promtool passes"
else
	ko "--label cap" "tenant values in the scrape: ${values:-none}; acme $acme (want 29); $labelled of 3000 JSON lines labelled; promtool: $out"
fi
kill -INT "$T5"
for _ in $(seq 50); do kill -0 "$T5" 2>/dev/null || break; sleep 0.1; done
kill "$R5" 2>/dev/null
finish
