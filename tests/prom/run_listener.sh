#!/usr/bin/env bash
# The /metrics listener under hostile clients (tests/prom/listener_attack.py), while the tracer
# traces the reference server:
#  (a) three slowloris connections, one per source address (under every limit, the per-address
#      one included when they come back), are each dropped by the head deadline
#      (HTTPD_HEAD_DEADLINE_S, 5 s) however they trickle, and scrapes go on meanwhile;
#  (b) a flood: 64 slowloris connections from 8 addresses, garbage of every kind from 3 more
#      and clients that never read their responses; a scrape from 127.0.0.1 every second must
#      get its 200 and the metrics within 2 s, the tracer's descriptors stay within the
#      connection limit and its memory within 8 MiB of what it was, and no slowloris
#      connection outlives the deadline;
#  (c) afterwards the tracer still counts requests exactly and exits 0 on SIGINT.
# Every connection goes to 127.0.0.1 (from other loopback source addresses too). About 25 s.
# Needs root (BPF). Prints PASS/FAIL/SKIP lines and the totals line; exits 1 on a failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
TS=${TOKENSCOPE:-.output/tokenscope}
RS=${REFSERVER:-.output/refserver}
GT=${GTCLIENT:-.output/gtclient}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
TMP=$(mktemp -d)
. tests/lib.sh
pids=()
# Limits the checks are made against (user/sinks/httpd.h).
HEAD_DEADLINE_S=5 MAX_CONNS=16

cleanup() {
	stop_pids
	rm -rf "$TMP"
}
trap cleanup EXIT



if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP listener: needs root to load BPF programs"
	skip=1
	finish
fi

"$RS" --port 0 --token-ms 2 --prefill-ms 2 >"$TMP/rs.out" 2>&1 </dev/null &
RSPID=$!
pids+=("$RSPID")
for _ in $(seq 50); do grep -q listening "$TMP/rs.out" && break; sleep 0.1; done
PORT=$(grep -o '[0-9]*$' "$TMP/rs.out")
"$TS" trace -p "$RSPID" --listen 127.0.0.1:0 >"$TMP/ts.out" 2>"$TMP/ts.err" </dev/null &
TSPID=$!
pids+=("$TSPID")
for _ in $(seq 100); do grep -q attached "$TMP/ts.err" && break; sleep 0.1; done
MPORT=$(grep -o 'metrics at http://127.0.0.1:[0-9]*' "$TMP/ts.err" | grep -o '[0-9]*$')
if [ -z "$PORT" ] || [ -z "$MPORT" ] || ! grep -q attached "$TMP/ts.err"; then
	ko "listener" "the tracer did not start (server port '$PORT', metrics port '$MPORT')"
	finish
fi
timeout 20 "$GT" --port "$PORT" -n 3 --max-tokens 3 -o /dev/null 2>/dev/null
# Counted once the pipeline published a snapshot with them.
scrape_ok() {
	curl -s -m 2 "http://127.0.0.1:$MPORT/metrics" |
		sed -n 's/^tokenscope_requests_total{model="ref",role="server",outcome="ok"} //p'
}
for _ in $(seq 30); do [ "$(scrape_ok)" = 3 ] && break; sleep 0.1; done
fds0=$(ls /proc/"$TSPID"/fd | wc -l)
rss0=$(awk '/^VmRSS:/ { print $2 }' /proc/"$TSPID"/status)

# (a) the head deadline alone
timeout 30 "$PY" tests/prom/listener_attack.py "$MPORT" "$TSPID" 7.5 deadline >"$TMP/a.json" 2>"$TMP/a.err"
verdict=$("$PY" - "$TMP/a.json" "$HEAD_DEADLINE_S" <<'PY'
import json, sys
d, limit = json.load(open(sys.argv[1])), float(sys.argv[2])
bad = [f"scrape {s}" for s in d["scrapes"] if not s["ok"] or s["s"] > 1.0]
lo, hi = d["slow_lived_min_s"], d["slow_lived_max_s"]
if d["slow_dropped"] < 3 or lo is None or lo < limit - 0.5 or hi > limit + 1.5:
    bad.append(f"{d['slow_dropped']} slow connections dropped, lived {lo}..{hi} s")
print("; ".join(bad) or "-")
PY
)
if [ "$verdict" = "-" ]; then
	ok "slowloris connections under the limits are dropped at the ${HEAD_DEADLINE_S} s head deadline"
else
	ko "head deadline" "$verdict"
fi

# (b) the flood
timeout 40 "$PY" tests/prom/listener_attack.py "$MPORT" "$TSPID" 12 flood >"$TMP/b.json" 2>"$TMP/b.err"
verdict=$("$PY" - "$TMP/b.json" "$fds0" "$rss0" "$MAX_CONNS" "$HEAD_DEADLINE_S" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
fds0, rss0, conns, limit = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
bad = [f"scrape {s}" for s in d["scrapes"] if not s["ok"] or s["s"] > 2.0]
if len(d["scrapes"]) < 10:
    bad.append(f"only {len(d['scrapes'])} scrapes")
# The scrape's own connection, and one being closed, on top of the limit.
if max(d["fds"]) > fds0 + conns + 2 or min(d["fds"]) < 0:
    bad.append(f"descriptors {min(d['fds'])}..{max(d['fds'])}, {fds0} before")
if max(d["rss_kb"]) > rss0 + 8 * 1024:
    bad.append(f"RSS up to {max(d['rss_kb'])} KiB, {rss0} before")
if d["slow_lived_max_s"] > limit + 1.5:
    bad.append(f"a slowloris connection lived {d['slow_lived_max_s']:.1f} s")
if d["garbage_sent"] < 20:
    bad.append(f"only {d['garbage_sent']} garbage connections made")
worst = max((s["s"] for s in d["scrapes"]), default=0)
print("; ".join(bad) or f"- {len(d['scrapes'])} {worst:.3f} {max(d['fds'])} {max(d['rss_kb'])}")
PY
)
if [ "${verdict%% *}" = "-" ]; then
	read -r _ n worst fdmax rssmax <<<"$verdict"
	ok "flood of slowloris, garbage and non-readers: $n scrapes all 200 (slowest ${worst} s), descriptors <= $fdmax ($fds0 before), RSS <= $rssmax KiB ($rss0 before)"
else
	ko "flood" "$verdict"
fi

# (c) tracing is untouched
timeout 20 "$GT" --port "$PORT" -n 3 --max-tokens 3 -o /dev/null 2>/dev/null
for _ in $(seq 30); do [ "$(scrape_ok)" = 6 ] && break; sleep 0.1; done
got=$(scrape_ok)
kill -INT "$TSPID"
rc=
for _ in $(seq 50); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
if ! kill -0 "$TSPID" 2>/dev/null; then
	wait "$TSPID"
	rc=$?
fi
if [ "$got" = 6 ] && [ "$rc" = 0 ]; then
	ok "after the attacks the tracer counts all 6 requests and exits 0 on SIGINT"
else
	ko "after the attacks" "ok requests in the scrape: '$got' (want 6), exit status '${rc:-still running}'"
fi
finish
