#!/usr/bin/env bash
# GPU utilisation and memory (NVML) end to end, against the stand-in NVML (tests/nvmlstub.c,
# .output/standin/libnvidia-ml.so.1, found through LD_LIBRARY_PATH as the real one would be;
# its devices come from TS_NVML_STUB). The reference server runs in GPU mode, so two processes
# are traced (its API process and its engine child); the stand-in also lists this shell and
# pid 1, which are not traced.
#  (a) `trace -p PID --listen`: /metrics has every NVML family with the stand-in's exact values
#      (a ratio, bytes, Hz, W), no series for a value the device refused (power on GPU 1), the
#      per-process memory of the two traced processes only, `promtool check metrics` passes,
#      and the sample counter rises once a second;
#  (b) at SIGINT the summary has the GPUs' lines, with the traced processes' memory;
#  (c) `--timeline`: counter events for utilisation and memory, on the timeline's clock;
#  (d) no driver (nvmlInit fails; and, where no NVML is installed, no library at all): one
#      message on stderr, no NVML family on /metrics, no GPU line in the summary; no message
#      when no traced process maps a CUDA library;
#  (e) a trace with neither --listen nor --timeline does not open NVML (no message);
#  (f) `top`: a line per GPU in its frames, with the traced processes' memory;
#  (g) `record --listen`: the samples go into the recording, and `report --prometheus` gives the
#      same gauges and the summary's GPU lines.
# Needs root (BPF). Prints PASS/FAIL/SKIP lines and the totals line; exits 1 if anything failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
TS=${TOKENSCOPE:-.output/tokenscope}
RS=${REFSERVER:-.output/refserver}
STANDIN_DIR=.output/standin
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
TMP=$(mktemp -d)
. tests/lib.sh
KO_LOGS="$TMP/rs.out"
pids=()
NVML_FAMILIES='^tokenscope_gpu_(samples_total|info|utilization_ratio|memory_used_bytes|memory_total_bytes|sm_clock_hertz|power_watts|process_memory_bytes|unlisted)'
NO_DRIVER='tokenscope: NVML unavailable (nvmlInit: Driver Not Loaded): no GPU utilisation or memory'

cleanup() {
	stop_pids
	rm -rf "$TMP"
}
trap cleanup EXIT

missing=""
for t in "$TS" "$RS" "$STANDIN_DIR/libnvidia-ml.so.1"; do [ -e "$t" ] || missing="$missing $t"; done
for c in curl promtool; do command -v $c >/dev/null || missing="$missing $c"; done
if [ "$(id -u)" -ne 0 ]; then
	sk "nvml" "needs root to load BPF programs"
	finish
elif [ -n "$missing" ]; then
	sk "nvml" "missing:$missing (make; scripts/deps.sh)"
	finish
fi

"$RS" --port 0 --gpu --token-ms 2 --prefill-ms 2 >"$TMP/rs.out" 2>&1 </dev/null &
RSPID=$!
pids+=("$RSPID")
for _ in $(seq 100); do grep -q listening "$TMP/rs.out" && break; sleep 0.1; done
ENGINE=$(sed -n 's/^refserver: engine pid \([0-9]*\),.*/\1/p' "$TMP/rs.out")
if [ -z "$ENGINE" ] || ! grep -q listening "$TMP/rs.out"; then
	ko "refserver --gpu" "did not start"
	finish
fi

# GPU 0: every value; the API process, the engine, this shell and pid 1 on it. GPU 1: a name
# and UUID with bytes to escape, utilisation, no power reading, nothing else.
STUB="name=Stub H200,uuid=GPU-0000-aaaa,util=45,mem=1073741824/8589934592,sm=1980,power=350125"
STUB="$STUB,procs=$RSPID:536870912/$ENGINE:2147483648/$$:1048576/1:2097152"
STUB="$STUB;name=Stub \"B\" \\ x,uuid=GPU-1111,util=7,power=na"
GOOD_STUB=$STUB # (d) makes the stand-in fail; (g) uses this

# Starts tokenscope (args...) with env STUB and LIBDIR; sets TSPID and, with --listen, MPORT.
start_ts() {
	# Emptied here: the shell may run the wait below before the child's redirection does.
	: >"$TMP/ts.out"
	: >"$TMP/ts.err"
	LD_LIBRARY_PATH=$LIBDIR TS_NVML_STUB=$STUB "$TS" trace -p "$RSPID" "$@" \
		>"$TMP/ts.out" 2>"$TMP/ts.err" </dev/null &
	TSPID=$!
	pids+=("$TSPID")
	for _ in $(seq 100); do grep -q attached "$TMP/ts.err" && break; sleep 0.1; done
	MPORT=$(grep -o 'metrics at http://127.0.0.1:[0-9]*' "$TMP/ts.err" | grep -o '[0-9]*$')
}

# SIGINT, then its exit status in RC (empty if it did not exit within 5 s).
stop_ts() {
	kill -INT "$TSPID"
	RC=
	for _ in $(seq 50); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
	if ! kill -0 "$TSPID" 2>/dev/null; then
		wait "$TSPID"
		RC=$?
	fi
}

scrape() { curl -s -m 2 "http://127.0.0.1:$MPORT/metrics"; }

# The value of the one sample line "NAME{LABELS} VALUE" in $TMP/m.txt, or nothing.
value() { sed -n "s/^$1 //p" "$TMP/m.txt"; }

# (a) the endpoint
LIBDIR=$STANDIN_DIR
start_ts --listen 127.0.0.1:0
if [ -z "$MPORT" ]; then
	ko "tokenscope --listen" "did not start"
	finish
fi
for _ in $(seq 50); do scrape | grep -q '^tokenscope_gpu_samples_total' && break; sleep 0.1; done
scrape >"$TMP/m.txt"
G0='gpu="0",uuid="GPU-0000-aaaa"'
bad=""
check() { # metric-with-labels want
	local got
	got=$(value "$1")
	[ "$got" = "$2" ] || bad="$bad; $1 = '$got', want '$2'"
}
check "tokenscope_gpu_info{$G0,name=\"Stub H200\"}" 1
check 'tokenscope_gpu_info{gpu="1",uuid="GPU-1111",name="Stub \\"B\\" \\\\ x"}' 1
check "tokenscope_gpu_utilization_ratio{$G0}" 0.45
check 'tokenscope_gpu_utilization_ratio{gpu="1",uuid="GPU-1111"}' 0.07
check "tokenscope_gpu_memory_used_bytes{$G0}" 1073741824
check "tokenscope_gpu_memory_total_bytes{$G0}" 8589934592
check "tokenscope_gpu_sm_clock_hertz{$G0}" 1980000000
check "tokenscope_gpu_power_watts{$G0}" 350.125
check "tokenscope_gpu_process_memory_bytes{$G0,pid=\"$RSPID\"}" 536870912
check "tokenscope_gpu_process_memory_bytes{$G0,pid=\"$ENGINE\"}" 2147483648
if [ -z "$bad" ]; then
	ok "NVML families on /metrics with the stand-in's exact values (ratio, bytes, Hz, W; escaped labels)"
else
	ko "NVML values" "${bad#; }"
fi
if grep -q 'gpu="1".*} ' "$TMP/m.txt" &&
	! grep -Eq '^tokenscope_gpu_(power_watts|memory_used_bytes|memory_total_bytes|sm_clock_hertz)\{gpu="1"' \
		"$TMP/m.txt"; then
	ok "values GPU 1 does not give (power: not supported; memory, clock) have no series"
else
	ko "absent values" "$(grep 'gpu="1"' "$TMP/m.txt")"
fi
procs=$(grep -c '^tokenscope_gpu_process_memory_bytes{' "$TMP/m.txt")
if [ "$procs" = 2 ] && ! grep -Eq "pid=\"($$|1)\"" "$TMP/m.txt"; then
	ok "per-process memory for the traced API and engine processes only ($RSPID, $ENGINE; not $$ or 1)"
else
	ko "per-process memory" "$procs series: $(grep '^tokenscope_gpu_process_memory_bytes' "$TMP/m.txt")"
fi
if out=$(promtool check metrics <"$TMP/m.txt" 2>&1); then
	ok "promtool check metrics with the NVML families ($(grep -c '^tokenscope_gpu_' "$TMP/m.txt") samples)"
else
	ko "promtool check metrics" "$out"
fi
s1=$(value tokenscope_gpu_samples_total)
sleep 3
scrape >"$TMP/m.txt"
s2=$(value tokenscope_gpu_samples_total)
if [ -n "$s1" ] && [ -n "$s2" ] && [ "$((s2 - s1))" -ge 2 ] && [ "$((s2 - s1))" -le 4 ]; then
	ok "one sample a second: tokenscope_gpu_samples_total $s1, then $s2 three seconds later"
else
	ko "sample rate" "tokenscope_gpu_samples_total '$s1', then '$s2' three seconds later"
fi

# (b) the summary
stop_ts
want0="  gpu 0 Stub H200 \\(GPU-0000-aaaa\\): "
if [ "$RC" = 0 ] &&
	grep -Eq "^$want0[0-9]+ samples, utilization mean 45.0% max 45%, memory used max 1.00 GiB of 8.00 GiB, SM clock mean 1980 MHz, power mean 350.1 W max 350.1 W$" \
		"$TMP/ts.out" &&
	grep -Eq '^  gpu 1 Stub "B" \\ x \(GPU-1111\): [0-9]+ samples, utilization mean 7.0% max 7%, memory n/a, SM clock n/a, power n/a$' \
		"$TMP/ts.out" &&
	grep -qx "  gpu 0 pid $RSPID: memory max 512.0 MiB" "$TMP/ts.out" &&
	grep -qx "  gpu 0 pid $ENGINE: memory max 2.00 GiB" "$TMP/ts.out" &&
	[ "$(grep -c '^  gpu ' "$TMP/ts.out")" = 4 ] && ! grep -q NVML "$TMP/ts.err"; then
	ok "summary: a line per GPU and per traced process on it, exit 0"
else
	ko "summary" "exit '$RC': $(grep '^  gpu ' "$TMP/ts.out")"
fi

# (c) the timeline
start_ts --timeline "$TMP/tl.json" -d 3
for _ in $(seq 80); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
wait "$TSPID"
verdict=$("$PY" - "$TMP/tl.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = [e for e in d["traceEvents"] if e["ph"] == "C"]
util = [e for e in c if e["name"] == "GPU 0 utilization"]
mem = [e for e in c if e["name"] == "GPU 0 memory used"]
util1 = [e for e in c if e["name"] == "GPU 1 utilization"]
bad = []
if not 2 <= len(util) <= 4 or len(mem) != len(util) or len(util1) != len(util):
    bad.append(f"{len(util)} utilisation, {len(mem)} memory, {len(util1)} GPU 1 events")
if any(e["args"] != {"percent": 45} for e in util) or any(e["args"] != {"bytes": 1073741824} for e in mem):
    bad.append("values " + json.dumps(util[:1] + mem[:1]))
if [e for e in c if e["name"].startswith("GPU 1 memory")]:
    bad.append("GPU 1 has no memory reading, but an event")
ts = [e["ts"] for e in util]
# tracing starts at the origin and the first sample follows within a second, then one a second
if ts and (not 0 <= ts[0] < 1e6 or any(not 0.8e6 < b - a < 1.2e6 for a, b in zip(ts, ts[1:]))):
    bad.append(f"times {ts} (us)")
names = [e for e in d["traceEvents"] if e["ph"] == "M" and e["args"].get("name") == "GPUs (NVML)"]
if len(names) != 1 or any(e["pid"] != names[0]["pid"] for e in c):
    bad.append("counter process")
print("; ".join(bad) or f"- {len(util)}")
PY
)
if [ "${verdict%% *}" = "-" ]; then
	ok "timeline: ${verdict#- } samples as counter events (utilisation %, memory bytes) a second apart"
else
	ko "timeline counters" "$verdict"
fi

# (f) top: its frames have a line per GPU, with the traced processes' memory
LD_LIBRARY_PATH=$LIBDIR TS_NVML_STUB=$STUB "$TS" top -p "$RSPID" -d 3 >"$TMP/top.out" \
	2>"$TMP/top.err" </dev/null &
TSPID=$!
pids+=("$TSPID")
for _ in $(seq 80); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
wait "$TSPID"
RC=$?
top0="GPU 0 Stub H200: util 45%, memory 1.00 GiB of 8.00 GiB, SM 1980 MHz, 350.1 W"
procs0="  GPU 0 memory of pid $RSPID 512.0 MiB, pid $ENGINE 2.00 GiB"
top1='GPU 1 Stub "B" \ x: util 7%, memory n/a'
if [ "$RC" = 0 ] && grep -Eq "^[0-9]+\.[0-9]{3} $top0\$" "$TMP/top.out" &&
	grep -Eq "^[0-9]+\.[0-9]{3} $procs0\$" "$TMP/top.out" &&
	grep -qF " $top1" "$TMP/top.out" && ! grep -q $'\033' "$TMP/top.out" &&
	! grep -q NVML "$TMP/top.err"; then
	ok "top: a line per GPU in its frames (values, the traced processes' memory), exit 0"
else
	ko "top GPU lines" "exit '$RC': $(grep 'GPU [01]' "$TMP/top.out" | tail -n 2)"
fi

# (d) no driver: nvmlInit fails
STUB="fail=9;$STUB"
start_ts --listen 127.0.0.1:0
for _ in $(seq 30); do grep -q NVML "$TMP/ts.err" && break; sleep 0.1; done
sleep 1.2 # a sample would have come by now
scrape >"$TMP/m.txt"
stop_ts
if [ "$(grep -c NVML "$TMP/ts.err")" = 1 ] && grep -qxF "$NO_DRIVER" "$TMP/ts.err" &&
	grep -q '^tokenscope_traced_processes' "$TMP/m.txt" && ! grep -Eq "$NVML_FAMILIES" "$TMP/m.txt" &&
	! grep -q '^  gpu ' "$TMP/ts.out" && [ "$RC" = 0 ]; then
	ok "no driver: one message ($NO_DRIVER), no NVML family, no GPU summary line, exit 0"
else
	ko "no driver" "exit '$RC'; stderr: $(grep NVML "$TMP/ts.err"); families: $(grep -Ec "$NVML_FAMILIES" "$TMP/m.txt"); scrape: $(wc -l <"$TMP/m.txt") lines; summary: $(grep -c '^  gpu ' "$TMP/ts.out") GPU lines"
fi
# ... said only where a traced process maps a CUDA library: not for a server without one.
"$RS" --port 0 >"$TMP/plain.out" 2>&1 </dev/null &
PLAIN=$!
pids+=("$PLAIN")
for _ in $(seq 100); do grep -q listening "$TMP/plain.out" && break; sleep 0.1; done
GPU_RSPID=$RSPID
RSPID=$PLAIN
start_ts --listen 127.0.0.1:0
sleep 1.5 # the message above came within 0.3 s of the start
stop_ts
RSPID=$GPU_RSPID
kill "$PLAIN" 2>/dev/null
if grep -q attached "$TMP/ts.err" && ! grep -q NVML "$TMP/ts.err" && [ "$RC" = 0 ]; then
	ok "no driver, no CUDA process: nothing said of NVML"
else
	ko "no driver, no CUDA process" "exit '$RC'; stderr: $(head -c 400 "$TMP/ts.err")"
fi

# ... and no library at all, where none is installed (an installed one is found anyway).
if ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1 '; then
	sk "no library" "libnvidia-ml.so.1 is installed here"
else
	mkdir -p "$TMP/empty"
	LIBDIR=$TMP/empty
	start_ts --listen 127.0.0.1:0
	for _ in $(seq 30); do grep -q NVML "$TMP/ts.err" && break; sleep 0.1; done
	scrape >"$TMP/m.txt"
	stop_ts
	msg=$(grep NVML "$TMP/ts.err")
	if [ "$(grep -c NVML "$TMP/ts.err")" = 1 ] &&
		[[ $msg == "tokenscope: NVML unavailable (no libnvidia-ml.so.1): no GPU utilisation or memory" ]] &&
		! grep -Eq "$NVML_FAMILIES" "$TMP/m.txt" && ! grep -q '^  gpu ' "$TMP/ts.out"; then
		ok "no library: one message ($msg), no NVML family"
	else
		ko "no library" "stderr: $msg; families: $(grep -Ec "$NVML_FAMILIES" "$TMP/m.txt")"
	fi
	LIBDIR=$STANDIN_DIR
fi

# (g) record with --listen: the GPU samples go into the recording, and report reproduces them
# (the same gauges as the live /metrics, the traced processes' memory only, the summary's lines)
: >"$TMP/rec.err"
LD_LIBRARY_PATH=$LIBDIR TS_NVML_STUB=$GOOD_STUB "$TS" record -p "$RSPID" -o "$TMP/nvml.tsr" \
	--listen 127.0.0.1:0 -d 3 >"$TMP/rec.out" 2>"$TMP/rec.err" </dev/null &
TSPID=$!
pids+=("$TSPID")
for _ in $(seq 80); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
wait "$TSPID"
RC=$?
"$TS" report "$TMP/nvml.tsr" --prometheus >"$TMP/m.txt" 2>"$TMP/rep.err"
RRC=$?
bad=""
check "tokenscope_gpu_utilization_ratio{$G0}" 0.45
check 'tokenscope_gpu_utilization_ratio{gpu="1",uuid="GPU-1111"}' 0.07
check "tokenscope_gpu_memory_used_bytes{$G0}" 1073741824
check "tokenscope_gpu_power_watts{$G0}" 350.125
check "tokenscope_gpu_process_memory_bytes{$G0,pid=\"$RSPID\"}" 536870912
check "tokenscope_gpu_process_memory_bytes{$G0,pid=\"$ENGINE\"}" 2147483648
samples=$(value tokenscope_gpu_samples_total)
if [ "$RC" = 0 ] && [ "$RRC" = 0 ] && [ -z "$bad" ] && [ "${samples:-0}" -ge 2 ] &&
	! grep -Eq "pid=\"($$|1)\"" "$TMP/m.txt" && grep -q '^  gpu 0 Stub H200' "$TMP/rep.err"; then
	ok "record --listen keeps the GPU samples; report --prometheus gives the live values ($samples samples) and the summary's GPU lines"
else
	ko "NVML in a recording" "record $RC, report $RRC, samples '$samples'${bad}; $(grep -c '^  gpu ' "$TMP/rep.err") gpu lines"
fi

# (e) neither output asked for: NVML is not opened
start_ts -d 2
for _ in $(seq 50); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
wait "$TSPID"
RC=$?
if [ "$RC" = 0 ] && ! grep -q NVML "$TMP/ts.err" && ! grep -q '^  gpu ' "$TMP/ts.out" &&
	grep -q '^--- summary' "$TMP/ts.out"; then
	ok "trace without --listen or --timeline: NVML not opened (no message, no GPU lines)"
else
	ko "plain trace" "exit '$RC'; $(grep NVML "$TMP/ts.err")"
fi
finish
