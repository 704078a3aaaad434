#!/usr/bin/env bash
# `tokenscope check`, the preflight, against what a run on the same kernel does. Checked:
#  1. as root: exit 0, a line per feature and per hook within 100 columns, "tracing can start
#     here"; --json parses, with can_trace true, the six features and the checks, the cost
#     line with its two measured figures and batches on;
#  2. with features turned off (TOKENSCOPE_FEATURES_OFF, the stand-ins an older kernel gets,
#     the legacy object among them): check says each is off and the programs still load; a
#     trace under the same setting traces the reference server with exact token counts, its
#     JSON summary's kernel_features and its /metrics' tokenscope_feature say what check said,
#     and received_ns is null on every request line (sk_data_ready off) and set without it;
#  3. as user nobody without capabilities: exit 1, CAP_BPF FAIL, every feature "?" (the kernel
#     answers no probe), the advice on capabilities; --json: can_trace false, "unknown";
#  4. as nobody with CAP_BPF and CAP_PERFMON: exit 0, the programs load;
#  5. an unknown option: exit 2 and the usage hint.
# Needs root (BPF, and setpriv to drop capabilities). Every wait is bounded.
# Prints PASS/FAIL/SKIP lines and the totals line; exits 1 if anything failed.
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
trap 'stop_pids; rm -rf "$TMP"' EXIT

if [ "$(id -u)" -ne 0 ]; then
	sk "check" "needs root (BPF)"
	finish
fi
OFF=atomics,bpf_cookie,sk_data_ready

# 1. As root.
"$TS" check >"$TMP/check.txt" 2>"$TMP/check.err"
rc=$?
wide=$(awk 'length > 100' "$TMP/check.txt" | head -n 1)
if [ "$rc" = 0 ] && tail -n 1 "$TMP/check.txt" | grep -qx "tracing can start here" &&
	[ -z "$wide" ] && grep -q "^  programs *ok " "$TMP/check.txt" &&
	grep -q "^  syscalls *ok " "$TMP/check.txt"; then
	ok "check as root: exit 0, programs and syscalls ok, every line within 100 columns"
else
	ko "check as root" "exit $rc; wide line: '$wide'; $(tail -n 3 "$TMP/check.txt")"
fi
"$TS" check --json >"$TMP/check.json" 2>"$TMP/check.err"
rc=$?
if why=$("$PY" - "$TMP/check.json" "$TMP/check.txt" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
names = [f["name"] for f in c["features"]]
want = ["task_storage", "task_btf", "atomics", "bpf_cookie", "bpf_loop", "sk_data_ready"]
assert names == want, names
assert c["can_trace"] is True, c["can_trace"]
assert all(f["state"] in ("on", "off") for f in c["features"]), c["features"]
checks = {k["name"]: k["state"] for k in c["checks"]}
for n in ("kernel", "programs", "syscalls", "CAP_BPF", "uprobes", "tracefs"):
    assert n in checks, n
# the text and the JSON say the same thing, line for line
for k in c["checks"]:
    assert f"  {k['name']}" in text, k["name"]
# what the attached programs cost a process nobody traces, measured by check on itself; and on
# this kernel (6.3 and later) records are batched per CPU
import re
cost = [k["detail"] for k in c["checks"] if k["name"] == "cost"]
assert cost and re.search(r"pays [+-]\d+ ns per syscall \(getppid\), [+-]\d+ ns per socket write "
                          r"and read while tokenscope is attached \(measured now\)", cost[0]), cost
assert cost[0].endswith("; traced records are batched per CPU"), cost
EOF
); then
	[ "$rc" = 0 ] && ok "check --json: can_trace, six features, the same checks as the text, the cost measured" ||
		ko "check --json" "exit $rc"
else
	ko "check --json" "$why $(head -c 300 "$TMP/check.json")"
fi

# The feature rows of docs/building.md ("Kernels") say what check says.
if why=$("$PY" - "$TMP/check.json" docs/building.md <<'EOF' 2>&1
import json, re, sys
c = json.load(open(sys.argv[1]))
doc = open(sys.argv[2]).read()
rows = doc.split("<!-- feature rows:")[1].split("<!-- end of the feature rows -->")[0]
rows = [[x.strip().replace("`", "") for x in l.strip().strip("|").split("|")]
        for l in rows.splitlines() if l.startswith("| `")]
assert [r[0] for r in rows] == [f["name"] for f in c["features"]], [r[0] for r in rows]
for r, f in zip(rows, c["features"]):
    assert r[1] == f["since"], (r, f["since"])
    assert r[2] == f["what"], (r, f["what"])
    assert r[3].startswith(f["without"]), (r, f["without"])
    if f["lost"]:
        assert f["lost"].replace("`", "") in r[3], (r, f["lost"])
EOF
); then
	ok "docs/building.md's feature rows: each feature's release, use and stand-in as check says"
else
	ko "docs/building.md's feature rows" "$why"
fi

# 2. Features off: check's verdict, then a trace under the same setting.
TOKENSCOPE_FEATURES_OFF=$OFF "$TS" check --json >"$TMP/off.json" 2>"$TMP/off.err"
rc=$?
if why=$("$PY" - "$TMP/off.json" "$OFF" <<'EOF' 2>&1
import json, sys
c = json.load(open(sys.argv[1]))
off = sys.argv[2].split(",")
st = {f["name"]: f["state"] for f in c["features"]}
assert all(st[n] == "off" for n in off), st
assert all(s == "on" for n, s in st.items() if n not in off), st
checks = {k["name"]: k["state"] for k in c["checks"]}
assert checks["programs"] == "ok", checks
assert checks["arrivals"] == "off", checks
assert c["can_trace"] is True
EOF
); then
	[ "$rc" = 0 ] && ok "check with $OFF off: each off, arrivals off, the programs load" ||
		ko "check with features off" "exit $rc"
else
	ko "check with features off" "$why"
fi

# trace_with OFF NAME: the reference server traced with --json --listen under
# TOKENSCOPE_FEATURES_OFF=OFF, 6 requests from the client; leaves NAME.jsonl, NAME.metrics,
# NAME.gt.
trace_with() {
	local off=$1 name=$2 srv port lport ts
	"$RS" --port 0 --token-ms 5 --prefill-ms 10 >"$TMP/$name.srv" 2>&1 &
	srv=$!
	pids+=("$srv")
	for _ in $(seq 100); do grep -q listening "$TMP/$name.srv" && break; sleep 0.1; done
	port=$(grep -o '[0-9]*$' "$TMP/$name.srv" | head -n 1)
	lport=$((20000 + RANDOM % 20000))
	TOKENSCOPE_FEATURES_OFF=$off "$TS" trace -p "$srv" --json --listen "127.0.0.1:$lport" \
		>"$TMP/$name.jsonl" 2>"$TMP/$name.ts" &
	ts=$!
	pids+=("$ts")
	for _ in $(seq 300); do grep -q "attached" "$TMP/$name.ts" && break; sleep 0.1; done
	"$GT" --port "$port" -n 6 -c 2 -o "$TMP/$name.gt" 2>/dev/null
	sleep 1.2 # one tick of the metrics
	curl -s "http://127.0.0.1:$lport/metrics" >"$TMP/$name.metrics"
	kill -INT "$ts"
	for _ in $(seq 50); do kill -0 "$ts" 2>/dev/null || break; sleep 0.1; done
	kill "$srv" 2>/dev/null
}
judge_trace() { # name off check.json
	"$PY" - "$TMP/$1.jsonl" "$TMP/$1.metrics" "$TMP/$1.gt" "$3" "$2" <<'EOF' 2>&1
import json, re, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
reqs = [l for l in lines if "conn" in l]
summ = [l["summary"] for l in lines if "summary" in l]
gt = [json.loads(l) for l in open(sys.argv[3]) if l.startswith("{")]
check = json.load(open(sys.argv[4]))
off = [n for n in sys.argv[5].split(",") if n]
assert len(reqs) == len(gt) == 6, (len(reqs), len(gt))
assert sorted(r["tokens"] for r in reqs) == sorted(g["tokens"] for g in gt), "token counts"
want = [{"name": f["name"], "state": f["state"]} for f in check["features"]]
assert summ and summ[-1].get("kernel_features") == want, (summ[-1:], want)
metrics = open(sys.argv[2]).read()
got = re.findall(r'^tokenscope_feature\{name="([a-z_]+)",state="(on|off)"\} 1$', metrics, re.M)
assert [{"name": n, "state": s} for n, s in got] == want, got
nulls = [r.get("received_ns") is None for r in reqs]
assert all(nulls) if "sk_data_ready" in off else not any(nulls), nulls
EOF
}
trace_with "$OFF" off
if why=$(judge_trace off "$OFF" "$TMP/off.json"); then
	ok "trace with $OFF off: 6 requests, exact tokens; kernel_features and tokenscope_feature\
 as check said; received_ns null"
else
	ko "trace with features off" "$why | $(tail -n 3 "$TMP/off.ts")"
fi
trace_with "" all
if why=$(judge_trace all "" "$TMP/check.json"); then
	ok "trace with every feature: kernel_features and tokenscope_feature as check said;\
 received_ns set"
else
	ko "trace with every feature" "$why | $(tail -n 3 "$TMP/all.ts")"
fi

# 3. Without capabilities.
NOCAP=(setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all --ambient-caps=-all
	--bounding-set=-all)
if ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1; then
	sk "check without capabilities" "needs setpriv (util-linux) and user nobody"
else
	"${NOCAP[@]}" "$TS" check >"$TMP/nocap.txt" 2>&1
	rc=$?
	if [ "$rc" = 1 ] && grep -q "^  CAP_BPF *FAIL" "$TMP/nocap.txt" &&
		[ "$(grep -c "^  [a-z_]* *? *Linux .*: not known" "$TMP/nocap.txt")" = 6 ] &&
		grep -q "^tracing cannot start here" "$TMP/nocap.txt" &&
		grep -q "^a capability missing" "$TMP/nocap.txt"; then
		ok "check without capabilities: exit 1, CAP_BPF FAIL, the features unknown, advice"
	else
		ko "check without capabilities" "exit $rc: $(head -n 12 "$TMP/nocap.txt")"
	fi
	"${NOCAP[@]}" "$TS" check --json >"$TMP/nocap.json" 2>"$TMP/nocap.err"
	rc=$?
	if why=$("$PY" -c '
import json, sys
c = json.load(open(sys.argv[1]))
assert c["can_trace"] is False
assert {f["state"] for f in c["features"]} == {"unknown"}, c["features"]
' "$TMP/nocap.json" 2>&1) && [ "$rc" = 1 ]; then
		ok "check --json without capabilities: can_trace false, features unknown, exit 1"
	else
		ko "check --json without capabilities" "exit $rc: $why"
	fi
	# 4. With exactly the two it needs.
	CAPS=-all,+bpf,+perfmon
	setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=$CAPS \
		--ambient-caps=$CAPS --bounding-set=$CAPS "$TS" check >"$TMP/caps.txt" 2>&1
	rc=$?
	if [ "$rc" = 0 ] && grep -q "^  programs *ok" "$TMP/caps.txt"; then
		ok "check as nobody with CAP_BPF and CAP_PERFMON: exit 0, the programs load"
	else
		ko "check with CAP_BPF and CAP_PERFMON" "exit $rc: $(grep -E "FAIL|programs" \
			"$TMP/caps.txt" | head -n 4)"
	fi
fi

# 5. Bad input.
"$TS" check --bogus >"$TMP/bad.out" 2>&1
rc=$?
if [ "$rc" = 2 ] && grep -q "unrecognized option '--bogus'" "$TMP/bad.out"; then
	ok "check --bogus: exit 2, the option named"
else
	ko "check --bogus" "exit $rc: $(head -c 200 "$TMP/bad.out")"
fi
finish
