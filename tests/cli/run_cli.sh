#!/usr/bin/env bash
# CLI behaviour with real processes: bad input, no permission, SIGINT, a target that exits
# mid-stream, several -p, descendants started after attach, --all by command line and by
# traffic; and no BPF program or link of ours left behind afterwards. Prints PASS/FAIL/SKIP
# lines and the totals line.
set -u
cd "$(dirname "$0")/../.."
TS=${TOKENSCOPE:-.output/tokenscope}
RS=${REFSERVER:-.output/refserver}
GT=${GTCLIENT:-.output/gtclient}
TMP=$(mktemp -d)
. tests/lib.sh
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$TMP"
}
trap cleanup EXIT


# refserver in the background; sets RSPID and PORT
start_server() {
	"$RS" --port 0 "$@" >"$TMP/rs.out" 2>&1 &
	RSPID=$!
	pids+=("$RSPID")
	for _ in $(seq 50); do grep -q listening "$TMP/rs.out" && break; sleep 0.1; done
	PORT=$(grep -o '[0-9]*$' "$TMP/rs.out")
}

# tokenscope (TSCMD, default trace) in the background on the given args; sets TSPID; waits
# until attached
start_tracer() {
	local name=$1
	shift
	"$TS" "${TSCMD:-trace}" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
	TSPID=$!
	pids+=("$TSPID")
	for _ in $(seq 100); do grep -q "attached" "$TMP/$name.err" && return 0; sleep 0.1; done
	return 1
}

# The text request lines of output $1 (up to its summary): "N lines, W cells wide, GPU columns
# yes|no", or what is wrong with them: a line wider than 100 display cells where the run had no
# GPU steps (a 100-column terminal holds them), or lines unlike their header.
text_lines() {
	/usr/bin/python3 - "$1" <<'PY'
import sys, unicodedata
def cells(s):
    return sum(0 if unicodedata.combining(c) else
               2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)
lines = []
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    if line.startswith(("--- summary", "--- interval")):
        break
    lines.append(line.rstrip("\n"))
heads = [i for i, l in enumerate(lines) if l.startswith("PID ")]
gpu = bool(heads) and "QUEUE" in lines[heads[-1]]
before = lines[:heads[-1]] if gpu else lines  # the lines of the run before any GPU step
after = lines[heads[-1]:] if heads else []
if len(lines) < 2 or heads[:1] != [0]:
    print("no header and request lines: %r" % lines[:2])
elif any(cells(l) > 100 for l in before):
    print("a line of over 100 cells without GPU steps: %s" % max(before, key=cells))
elif len({cells(l) for l in after}) != 1:
    print("lines unlike their header: widths %s" % sorted({cells(l) for l in after}))
else:
    print("%d lines, %d cells wide, GPU columns %s" % (len(lines), cells(after[0]),
                                                       "yes" if gpu else "no"))
PY
}

# IDs of the BPF programs and links held by process $1, from its fds' fdinfo.
owned_ids() {
	grep -hE '^(prog_id|link_id):' /proc/"$1"/fdinfo/* 2>/dev/null |
		sed -e 's/^prog_id:[[:space:]]*/prog /' -e 's/^link_id:[[:space:]]*/link /' | sort -u
}

# Whether any of the listed "kind id" lines still exists 3 s on: the kernel frees tracing links
# and programs after an RCU grace period, not at close().
still_loaded() {
	local kind id left
	for _ in $(seq 30); do
		left=0
		while read -r kind id; do
			bpftool "$kind" show id "$id" >/dev/null 2>&1 && left=1
		done <"$1"
		[ $left -eq 0 ] && return 1
		sleep 0.1
	done
	return 0
}

# 1. a PID that does not exist
"$TS" trace -p 999999999 >"$TMP/nopid.out" 2>"$TMP/nopid.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "no process with PID 999999999" "$TMP/nopid.err"; then
	ok "bad PID is refused with a message"
else
	ko "bad PID" "rc=$rc: $(cat "$TMP/nopid.err")"
fi

# 2. usage errors: no -p, junk PID, junk interval, --tokens without --json, --by-process
# without metrics to label, --no-traffic without --all
bad=0
for args in "" "-p abc" "-p 1 x" "-p 1 --tokens" "-p 1 -d -3" "-p 1 -d nan" "-p 1 -d inf" \
	"-p 1 --slow-ttft 4e41h" "-p 1 --by-process" "-p 1 --no-traffic"; do
	# shellcheck disable=SC2086
	"$TS" trace $args >/dev/null 2>"$TMP/usage.err"
	rc=$?
	if [ $rc -ne 2 ] || ! grep -q "Try.*--help\|Usage" "$TMP/usage.err"; then
		echo "  args '$args': rc=$rc $(head -n 2 "$TMP/usage.err")"
		bad=1
	fi
done
[ $bad -eq 0 ] && ok "usage errors exit 2 with a hint" || ko "usage errors" "see above"

# 3. no permission: an unprivileged user cannot load BPF
if command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
	cp "$TS" "$TMP/ts-unpriv" && chmod 755 "$TMP" "$TMP/ts-unpriv"
	setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all \
		"$TMP/ts-unpriv" trace -p $$ >"$TMP/perm.out" 2>"$TMP/perm.err"
	rc=$?
	if [ $rc -eq 1 ] && grep -q "not allowed to load BPF programs" "$TMP/perm.err"; then
		ok "no permission is explained"
	else
		ko "no permission" "rc=$rc: $(cat "$TMP/perm.err")"
	fi
else
	echo "SKIP no permission: setpriv or user nobody missing"
	skip=$((skip + 1))
fi

# 4. SIGINT: clean exit 0 with a summary, nothing of ours left in the kernel
start_server --token-ms 2 --prefill-ms 5
if start_tracer sigint -p "$RSPID"; then
	"$GT" --port "$PORT" -n 4 -c 2 --max-tokens 4 -o "$TMP/gt.json" 2>/dev/null
	owned_ids "$TSPID" >"$TMP/owned"
	sleep 0.3
	kill -INT "$TSPID"
	wait "$TSPID"
	rc=$?
	sleep 0.2
	if [ $rc -ne 0 ]; then
		ko "SIGINT" "exit status $rc"
	elif ! grep -q -- "--- summary: 4 requests" "$TMP/sigint.out"; then
		ko "SIGINT" "no summary of the 4 requests: $(cat "$TMP/sigint.out")"
	elif [ "$(grep -c '^prog' "$TMP/owned")" -lt 4 ] || [ "$(grep -c '^link' "$TMP/owned")" -lt 4 ]; then
		ko "SIGINT" "expected 4 programs and 4 links while tracing, saw: $(cat "$TMP/owned")"
	elif still_loaded "$TMP/owned"; then
		ko "SIGINT" "BPF programs or links still loaded after exit: $(cat "$TMP/owned")"
	else
		ok "SIGINT prints the summary, exits 0 and detaches"
	fi
else
	ko "SIGINT" "tracer did not attach"
fi
kill "$RSPID" 2>/dev/null
wait "$RSPID" 2>/dev/null

# 5. the target exits mid-stream: reported, the stream is aborted, the tracer ends by itself
start_server --token-ms 50 --prefill-ms 5
if start_tracer exit --json -p "$RSPID"; then
	"$GT" --port "$PORT" -n 1 --max-tokens 100 -o "$TMP/gt-exit.json" 2>/dev/null &
	gtpid=$!
	sleep 0.6
	kill -9 "$RSPID"
	wait "$gtpid" 2>/dev/null
	for _ in $(seq 50); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$TSPID" 2>/dev/null; then
		ko "target exits" "tracer still running after its only target exited"
		kill -INT "$TSPID"
	else
		wait "$TSPID"
		rc=$?
		if [ $rc -eq 0 ] && grep -q "process $RSPID (refserver) was killed by signal 9" "$TMP/exit.err" &&
			grep -q "every traced process has exited" "$TMP/exit.err" &&
			grep -q '"outcome":"aborted"' "$TMP/exit.out"; then
			ok "a target that exits is reported and its stream is aborted"
		else
			ko "target exits" "rc=$rc out=$(cat "$TMP/exit.out")"
		fi
	fi
else
	ko "target exits" "tracer did not attach"
fi

# 6. two -p targets, and a descendant started after attach
start_server --token-ms 1 --prefill-ms 1
first_pid=$RSPID first_port=$PORT
bash -c "sleep 1.5; exec \"$RS\" --port 0 --token-ms 1 --prefill-ms 1" >"$TMP/late.out" 2>&1 &
parent=$!
pids+=("$parent")
sleep 0.2
if start_tracer multi --json -p "$first_pid" -p "$parent"; then
	for _ in $(seq 50); do grep -q listening "$TMP/late.out" && break; sleep 0.1; done
	late_port=$(grep -o '[0-9]*$' "$TMP/late.out")
	"$GT" --port "$first_port" -n 3 --max-tokens 3 -o /dev/null 2>/dev/null
	"$GT" --port "$late_port" -n 2 --max-tokens 3 -o /dev/null 2>/dev/null
	sleep 0.3
	kill -INT "$TSPID"
	wait "$TSPID"
	n1=$(grep -c "\"pid\":$first_pid," "$TMP/multi.out")
	n2=$(grep -c "\"pid\":$parent," "$TMP/multi.out")
	if [ "$n1" -eq 3 ] && [ "$n2" -eq 2 ]; then
		ok "several -p, and a server started after attach under a traced parent"
	else
		ko "several -p" "requests seen: first=$n1 (want 3) late=$n2 (want 2)"
	fi
else
	ko "several -p" "tracer did not attach"
fi

# 7. a full ring buffer: the tracer is stopped (SIGSTOP) while the server streams at full speed.
# Records are dropped; that must be counted and the requests it hit reported "lost", never
# "ok" with wrong numbers.
start_server --token-ms 0
if start_tracer full --json --ring-buffer-mb 1 -p "$RSPID"; then
	"$GT" --port "$PORT" -n 4 -c 4 --max-tokens 20000 -o "$TMP/gt-full.json" 2>/dev/null &
	gtpid=$!
	sleep 0.2
	kill -STOP "$TSPID"
	sleep 1.5
	kill -CONT "$TSPID"
	wait "$gtpid"
	sleep 0.5
	kill -INT "$TSPID"
	wait "$TSPID"
	lost=$(sed -n 's/.*lost: \([0-9]*\) records.*/\1/p' "$TMP/full.err" | tail -n 1)
	verdict=$(/usr/bin/python3 - "$TMP/full.out" "$TMP/gt-full.json" <<'PY'
import json, sys
ts = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"pid"')]
gt = {c["port"]: c for c in map(json.loads, open(sys.argv[2]))}
bad = []
for t in ts:
    c = gt.get(int(t["conn"].split("<-")[1].split("#")[0].rsplit(":", 1)[1]))
    if t["outcome"] == "ok" and (not c or t["frames"] != c["frames"] or t["lost_bytes"]):
        bad.append(f'{t["conn"]}: ok with {t["frames"]} frames, client {c and c["frames"]}')
lost = sum(t["outcome"] == "lost" for t in ts)
print(f"{len(ts)} {lost} " + ("; ".join(bad) or "-"))
PY
)
	read -r nreq nlost wrong <<<"$verdict"
	if [ "${lost:-0}" -gt 0 ] && [ "$nreq" -eq 4 ] && [ "$nlost" -ge 1 ] && [ "$wrong" = "-" ]; then
		ok "a full ring buffer is counted ($lost records) and its requests are lost, not ok"
	else
		ko "full ring buffer" "kernel lost=${lost:-?} requests=$nreq lost=$nlost wrong=$wrong"
	fi
else
	ko "full ring buffer" "tracer did not attach"
fi
kill "$RSPID" 2>/dev/null
wait "$RSPID" 2>/dev/null

# 8. record, then report the recording; a cut recording is reported up to the cut
start_server --token-ms 2 --prefill-ms 5
if TSCMD=record start_tracer rec -p "$RSPID" -o "$TMP/run.tsr"; then
	"$GT" --port "$PORT" -n 6 -c 2 --max-tokens 4 --usage -o /dev/null 2>/dev/null
	sleep 0.3
	kill -INT "$TSPID"
	wait "$TSPID"
	"$TS" report "$TMP/run.tsr" >"$TMP/report.out" 2>"$TMP/report.err"
	rc=$?
	size=$(stat -c %s "$TMP/run.tsr")
	head -c $((size - 7)) "$TMP/run.tsr" >"$TMP/cut.tsr"
	"$TS" report --json "$TMP/cut.tsr" >"$TMP/cut.out" 2>"$TMP/cut.err"
	rc_cut=$?
	"$TS" report --prometheus --alert 'ttft.p50 > 1us' "$TMP/run.tsr" >"$TMP/report.prom" 2>/dev/null
	promtool check metrics <"$TMP/report.prom" >"$TMP/promtool.out" 2>&1
	rc_prom=$?
	printf 'garbage' >"$TMP/garbage.tsr"
	"$TS" report "$TMP/garbage.tsr" >/dev/null 2>"$TMP/garbage.err"
	rc_garbage=$?
	# The timeline of a report starts at the recording's start: its events lie within the few
	# seconds the recording lasted, not at the machine's uptime.
	"$TS" report --timeline "$TMP/report-tl.json" "$TMP/run.tsr" >/dev/null 2>&1
	tl_check=$(python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
ts = [e["ts"] for e in t["traceEvents"] if e.get("ph") == "X"]
o = t["otherData"]
print("ok" if ts and 0 <= min(ts) and max(ts) < 60e6 and o["origin"] == "start of tracing"
      else "events %s..%s us, origin %s" % (min(ts or [0]), max(ts or [0]), o))
' "$TMP/report-tl.json" 2>&1)
	# The recording is a tap on what the pipeline was fed: version 5, with a drain mark at each
	# tick (about every 25 ms of the run), their clocks in order, so a report ticks there.
	marks=$(python3 -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
ver, off = struct.unpack_from("<II", b, 8)
clocks = []
while off + 20 <= len(b):
    n, t = struct.unpack_from("<II", b, off)
    if t == 0x10003:
        clocks.append(struct.unpack_from("<Q", b, off + 20)[0])
    off += 4 + n
span = (clocks[-1] - clocks[0]) / 1e6 if clocks else 0
ok = ver == 5 and len(clocks) >= 3 and clocks == sorted(clocks) and len(clocks) >= span / 25 / 2
print("ok" if ok else "version %d, %d marks over %.0f ms" % (ver, len(clocks), span))
' "$TMP/run.tsr" 2>&1)
	if [ $rc -ne 0 ] || ! grep -q -- "--- summary: 6 requests" "$TMP/report.out" ||
		! grep -q -- "--- diagnosis" "$TMP/report.out"; then
		ko "record and report" "rc=$rc: $(head -c 600 "$TMP/report.out")"
	elif [ "$marks" != ok ]; then
		ko "record: drain marks" "$marks"
	elif [ "$(stat -c %a "$TMP/run.tsr")" != 600 ]; then
		ko "record and report" "the recording holds prompts but is mode $(stat -c %a "$TMP/run.tsr")"
	elif [ $rc_cut -ne 1 ] || ! grep -q "at byte [0-9]*; the report covers the [0-9]* records before it" "$TMP/cut.err" ||
		! grep -q -- "--- summary" "$TMP/cut.err"; then
		ko "cut recording" "rc=$rc_cut: $(tail -n 3 "$TMP/cut.err")"
	elif [ $rc_prom -ne 0 ] || ! grep -q 'tokenscope_alert_firing{rule="ttft.p50 > 1us"} 1' "$TMP/report.prom"; then
		ko "report --prometheus" "promtool rc=$rc_prom: $(head -c 300 "$TMP/promtool.out")"
	elif [ $rc_garbage -ne 1 ] || ! grep -q "not a tokenscope recording" "$TMP/garbage.err"; then
		ko "garbage recording" "rc=$rc_garbage: $(cat "$TMP/garbage.err")"
	elif [ "$tl_check" != ok ]; then
		ko "report --timeline" "$tl_check"
	else
		ok "record (version 5, a drain mark per tick), report, a cut recording reported up to the cut, garbage refused"
	fi
	# The recording carries the pid of every record: report --by-process labels by it.
	"$TS" report --prometheus --by-process "$TMP/run.tsr" >"$TMP/byproc.prom" 2>/dev/null
	rc=$?
	promtool check metrics <"$TMP/byproc.prom" >"$TMP/promtool.out" 2>&1
	rc_prom=$?
	n=$(awk -v want="tokenscope_requests_total{model=\"ref\",role=\"server\",pid=\"$RSPID\",outcome=" \
		'index($0, want) == 1 { s += $2 } END { print s + 0 }' "$TMP/byproc.prom")
	unlabelled=$(grep -E '^tokenscope_(requests|tokens|streams|time_|inter_|request_)' \
		"$TMP/byproc.prom" | grep -vc "pid=\"$RSPID\"")
	"$TS" report --by-process "$TMP/run.tsr" >/dev/null 2>"$TMP/byproc.err"
	rc_usage=$?
	if [ $rc -ne 0 ] || [ $rc_prom -ne 0 ] || [ "$n" -ne 6 ] || [ "$unlabelled" -ne 0 ]; then
		ko "report --by-process" "rc=$rc promtool rc=$rc_prom requests with pid $RSPID: $n \
(want 6), samples without it: $unlabelled; $(head -c 300 "$TMP/promtool.out")"
	elif [ $rc_usage -ne 2 ] || ! grep -q -- "--by-process labels the metrics: give --prometheus" \
		"$TMP/byproc.err"; then
		ko "report --by-process without --prometheus" "rc=$rc_usage: $(head -n 1 "$TMP/byproc.err")"
	else
		ok "report --prometheus --by-process: the 6 requests under pid=\"$RSPID\"; refused without --prometheus"
	fi
	# The text lines of a run without GPU steps fit 100 columns, live (the SIGINT test's trace)
	# and reported; a recording with GPU steps has the GPU columns (tests/golden: gpu).
	live=$(text_lines "$TMP/sigint.out")
	rep=$(text_lines "$TMP/report.out")
	"$TS" report tests/golden/recordings/gpu.tsr >"$TMP/gpu-report.out" 2>/dev/null
	gpu=$(text_lines "$TMP/gpu-report.out")
	if [ "$live" != "5 lines, 99 cells wide, GPU columns no" ]; then
		ko "text lines without GPU steps" "trace: $live"
	elif [ "$rep" != "7 lines, 99 cells wide, GPU columns no" ]; then
		ko "text lines without GPU steps" "report: $rep"
	elif [ "${gpu#* lines, }" != "135 cells wide, GPU columns yes" ]; then
		ko "text lines with GPU steps" "report of gpu.tsr: $gpu"
	else
		ok "text lines: 99 cells without GPU steps (trace, report), the GPU columns with them"
	fi
else
	ko "record" "tracer did not attach"
fi
kill "$RSPID" 2>/dev/null
wait "$RSPID" 2>/dev/null

# 10. top without a terminal: plain lines every second, no escape codes
start_server --token-ms 5 --prefill-ms 5
"$TS" top -p "$RSPID" -d 4 >"$TMP/top.out" 2>"$TMP/top.err" &
toppid=$!
sleep 1.5
"$GT" --port "$PORT" -n 8 -c 2 --max-tokens 4 -o /dev/null 2>/dev/null
wait "$toppid"
rc=$?
if [ $rc -eq 0 ] && grep -q "MODEL .*RPS .*TTFT50" "$TMP/top.out" && grep -q " ref " "$TMP/top.out" &&
	! grep -q $'\033' "$TMP/top.out"; then
	ok "top without a terminal prints plain frames"
else
	ko "top" "rc=$rc: $(head -c 400 "$TMP/top.out")"
fi
# Kernel time moves on while no record comes (before and after the client's requests): a frame
# each second of the 4 (records alone gave 3 here), each ending a later second.
frames=$(grep -c "tokenscope top  window" "$TMP/top.out")
ends=$(grep -o "ending [0-9][0-9]:[0-9][0-9]:[0-9][0-9] " "$TMP/top.out" | sort -u | wc -l)
if [ "$frames" -ge 4 ] && [ "$ends" -eq "$frames" ]; then
	ok "top draws a frame per second while idle ($frames frames, $ends distinct seconds)"
else
	ko "top idle frames" "$frames frames, $ends distinct ending seconds"
fi
kill "$RSPID" 2>/dev/null
wait "$RSPID" 2>/dev/null

# 11. --all finds an inference server by its name, including one started after attach
mkdir -p "$TMP/bin"
cp "$RS" "$TMP/bin/llama-server"
"$TS" trace --all --json >"$TMP/all.out" 2>"$TMP/all.err" &
TSPID=$!
pids+=("$TSPID")
for _ in $(seq 100); do grep -q "attached" "$TMP/all.err" && break; sleep 0.1; done
"$TMP/bin/llama-server" --port 0 --token-ms 2 --prefill-ms 2 >"$TMP/ll.out" 2>&1 &
llpid=$!
pids+=("$llpid")
for _ in $(seq 100); do grep -q "found $llpid (llama.cpp" "$TMP/all.err" && break; sleep 0.1; done
for _ in $(seq 50); do grep -q listening "$TMP/ll.out" && break; sleep 0.1; done
llport=$(grep -o '[0-9]*$' "$TMP/ll.out")
"$GT" --port "$llport" -n 3 --max-tokens 3 -o /dev/null 2>/dev/null
sleep 0.3
kill -INT "$TSPID"
wait "$TSPID"
rc=$?
n=$(grep -c "\"pid\":$llpid," "$TMP/all.out")
if [ $rc -eq 0 ] && grep -q "found $llpid (llama.cpp" "$TMP/all.err" && [ "$n" -eq 3 ]; then
	ok "--all finds a server started after attach and traces it"
else
	ko "--all" "rc=$rc requests=$n: $(head -n 3 "$TMP/all.err")"
fi
kill "$llpid" 2>/dev/null

# 12. --all finds servers that no name rule matches by the frames they write, passively: a copy
# of the reference server under a neutral name (write), the Node e2e server (writev of 4
# iovecs), the Go e2e server (raw writes from any thread; where a Go toolchain is installed)
# and an Ollama-style NDJSON server (sendto). Each client makes 3 requests on one
# keep-alive connection; the first is in flight when its server is found and is reported from
# its next frame (joined: its frames where the client read them, its end, no start), the other
# two whole, with the client's token counts. A process writing other bytes to TCP and
# one writing SSE frames to a pipe and a file are not attached.
cp "$RS" "$TMP/bin/xyzsrv"
"$TS" trace --all --json >"$TMP/traffic.out" 2>"$TMP/traffic.err" &
TSPID=$!
pids+=("$TSPID")
for _ in $(seq 100); do grep -q "attached" "$TMP/traffic.err" && break; sleep 0.1; done
# writes for 4 s: ordinary bytes to a TCP peer, or SSE frames to a pipe and a file
neg_writer() {
	/usr/bin/python3 - "$1" "$TMP/frames.txt" <<'PY' &
import os, socket, sys, threading, time
frame = b'a6\r\ndata: {"id":"chatcmpl-1","choices":[{"delta":{"content":"x"}}]}\n\n\r\n'
if sys.argv[1] == "tcp":
    l = socket.create_server(("127.0.0.1", 0))
    c = socket.create_connection(l.getsockname())
    s, _ = l.accept()
    threading.Thread(target=lambda: [c.recv(65536) for _ in iter(int, 1)], daemon=True).start()
    out = [lambda b: s.send(b)]
    msgs = [b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", b'{"id": 1, "data": {}}\n',
            b"hello world\n", b"e\r\ndata: [DONE]\n\n\r\n"]
else:
    r, w = os.pipe()
    threading.Thread(target=lambda: [os.read(r, 65536) for _ in iter(int, 1)], daemon=True).start()
    f = open(sys.argv[2], "wb", buffering=0)
    out = [lambda b: os.write(w, b), f.write]
    msgs = [frame]
end = time.monotonic() + 4
while time.monotonic() < end:
    for o in out:
        for m in msgs:
            o(m)
    time.sleep(0.01)
PY
	NEGPID=$!
	pids+=("$NEGPID")
}
neg_writer tcp
neg_tcp=$NEGPID
neg_writer pipe
neg_pipe=$NEGPID
# servers; each prints "listening on HOST:PORT"
start_named() { # name command...
	local name=$1
	shift
	"$@" >"$TMP/$name.srv" 2>&1 &
	SRVPID=$!
	pids+=("$SRVPID")
	for _ in $(seq 100); do grep -q listening "$TMP/$name.srv" && break; sleep 0.1; done
	SRVPORT=$(grep -o '[0-9]*$' "$TMP/$name.srv" | head -n 1)
}
start_named xyz "$TMP/bin/xyzsrv" --port 0 --prefill-ms 5
xyz_pid=$SRVPID xyz_port=$SRVPORT
start_named node node tests/e2e/servers/node_server.js 0
node_pid=$SRVPID node_port=$SRVPORT
start_named ndjson /usr/bin/python3 tests/cli/ndjson_server.py 0
nd_pid=$SRVPID nd_port=$SRVPORT
# servers to check: "pid name rule client-output"
servers=("$xyz_pid xyzsrv sse-traffic gt-xyz" "$node_pid node sse-traffic gt-node"
	"$nd_pid python3 ndjson-traffic gt-nd")
gt_args=(-n 3 -c 1 -k 3 --max-tokens 15 --token-ms 40 --prefill-ms 5)
"$GT" --port "$xyz_port" "${gt_args[@]}" -o "$TMP/gt-xyz.json" 2>/dev/null &
gts=($!)
"$GT" --port "$node_port" "${gt_args[@]}" -o "$TMP/gt-node.json" 2>/dev/null &
gts+=($!)
"$GT" --port "$nd_port" --path /api/chat --ndjson "${gt_args[@]}" -o "$TMP/gt-nd.json" 2>/dev/null &
gts+=($!)
go_pid=
if command -v go >/dev/null &&
	GOCACHE="$PWD/.output/go/cache" GOPATH="$PWD/.output/go/path" GOFLAGS= CGO_ENABLED=0 \
		go build -o "$TMP/bin/goserver" tests/e2e/servers/goserver.go 2>"$TMP/gobuild.log"; then
	start_named go "$TMP/bin/goserver" 0
	go_pid=$SRVPID
	servers+=("$go_pid goserver sse-traffic gt-go")
	"$GT" --port "$SRVPORT" "${gt_args[@]}" -o "$TMP/gt-go.json" 2>/dev/null &
	gts+=($!)
else
	echo "SKIP --all traffic: the Go server (no Go toolchain, or it failed to build)"
	skip=$((skip + 1))
fi
wait "${gts[@]}"
sleep 0.3
kill -INT "$TSPID"
wait "$TSPID"
rc=$?
verdict=$(/usr/bin/python3 - "$TMP" "$neg_tcp" "$neg_pipe" "${servers[@]}" <<'PY'
import json, re, sys
tmp, neg_tcp, neg_pipe = sys.argv[1:4]
err = open(f"{tmp}/traffic.err").read()
ts = [json.loads(l) for l in open(f"{tmp}/traffic.out") if l.startswith('{"pid"')]
bad = []
for pid, name, rule, gt in (a.split() for a in sys.argv[4:]):
    if f"found {pid} ({name}, rule '{rule}') on the host" not in err:
        bad.append(f"{name} {pid} not found by {rule}")
        continue
    client = sorted((json.loads(l) for l in open(f"{tmp}/{gt}.json")), key=lambda c: c["seq"])
    mine = [t for t in ts if t["pid"] == int(pid) and not t.get("joined")]
    joined = [t for t in ts if t["pid"] == int(pid) and t.get("joined")]
    want = client[1:]  # the first request was in flight when the server was found
    if len(mine) != len(want) or any(c["outcome"] != "ok" for c in client):
        bad.append(f"{name}: {len(mine)} requests reported whole, want {len(want)} "
                   f"(client outcomes {[c['outcome'] for c in client]})")
        continue
    # The revealing request, from its next frame: the rest of its frames, each where the
    # client read it, its end, no start. The revealing write may be the role frame, which
    # neither side counts: attached within the 5 ms of prefill after it, tokenscope sees
    # every counted frame (all of them, not fewer).
    if len(joined) != 1:
        bad.append(f"{name}: {len(joined)} requests reported joined, want 1")
    else:
        j, c = joined[0], client[0]
        seen = j["frames"]
        skipped = c["frames"] - seen
        nulls = [k for k in ("arrival_ns", "ttft_ms", "e2e_ms", "method", "path") if j[k] is not None]
        if j["outcome"] != "ok" or nulls or not 0 < seen <= c["frames"]:
            bad.append(f"{name} joined: {j['outcome']}, frames {seen} of {c['frames']}, "
                       f"not null: {nulls}")
        elif j["tokens_from"] == "usage" and j["tokens"] != c["tokens"]:
            bad.append(f"{name} joined: usage says {j['tokens']} tokens, client {c['tokens']}")
        elif j["tokens_from"] != "usage" and j["tokens"] != seen:
            bad.append(f"{name} joined: {j['tokens']} tokens from {seen} frames")
        else:
            d_first = (c["token_ns"][skipped] - j["first_token_ns"]) / 1e6
            d_end = (c["end_ns"] - j["end_ns"]) / 1e6
            if not (0 <= d_first < 10 and 0 <= d_end < 10):
                bad.append(f"{name} joined: client read its first frame seen {d_first:.3f} ms "
                           f"and its end {d_end:.3f} ms after tokenscope's times")
    m = re.search(r"in flight when tracing began: (\d+), reported from mid-response: (\d+)", err)
    if not m or int(m[2]) < 1:
        bad.append(f"no 'in flight when tracing began' line with the joined ones")
    for t, c in zip(mine, want):
        if (t["outcome"], t["tokens"], t["frames"]) != ("ok", c["tokens"], c["frames"]):
            bad.append(f"{name} seq {c['seq']}: {t['outcome']} tokens={t['tokens']} "
                       f"frames={t['frames']}, client {c['tokens']}/{c['frames']}")
for pid, what in ((neg_tcp, "plain TCP writer"), (neg_pipe, "pipe/file writer")):
    if re.search(rf"found {pid} ", err):
        bad.append(f"{what} {pid} attached")
print("; ".join(bad) or "-")
PY
)
if [ $rc -eq 0 ] && [ "$verdict" = "-" ]; then
	ok "--all finds servers by their SSE and NDJSON traffic; the revealing request joined, later ones exact, others not attached"
else
	ko "--all traffic" "rc=$rc: $verdict"
fi
for p in "$xyz_pid" "$node_pid" "$nd_pid" $go_pid "$neg_tcp" "$neg_pipe"; do kill "$p" 2>/dev/null; done

# 9. a bad alert rule is refused with the expected form
"$TS" trace -p $$ --alert 'ttft > 5' >/dev/null 2>"$TMP/alert.err"
rc=$?
if [ $rc -eq 2 ] && grep -q "expected METRIC OP VALUE" "$TMP/alert.err"; then
	ok "a bad alert rule is refused with the expected form"
else
	ko "bad alert rule" "rc=$rc: $(cat "$TMP/alert.err")"
fi

# 13. run: the command's exit status and signals pass through, its environment names the
# injection library, a command that cannot start is said so, and a server started by run is
# traced from its first request
"$TS" run -- sh -c 'exit 7' >/dev/null 2>&1
rc_exit=$?
"$TS" run -- sh -c 'kill -TERM $$' >/dev/null 2>&1
rc_sig=$?
"$TS" run -- "$TMP/no-such-command" >/dev/null 2>"$TMP/run-missing.err"
rc_missing=$?
"$TS" run >/dev/null 2>"$TMP/run-usage.err"
rc_usage=$?
"$TS" run -p $$ -- true >/dev/null 2>>"$TMP/run-usage.err"
rc_usage2=$?
if [ $rc_usage -eq 2 ] && [ $rc_usage2 -eq 2 ] && grep -q "no command given" "$TMP/run-usage.err" &&
	grep -q "run traces the command it starts" "$TMP/run-usage.err"; then
	ok "run without a command, or with -p, is a usage error"
else
	ko "run usage" "rc=$rc_usage/$rc_usage2: $(cat "$TMP/run-usage.err")"
fi
if [ $rc_exit -eq 7 ] && [ $rc_sig -eq 143 ] && [ $rc_missing -eq 127 ] &&
	[ "$(cat "$TMP/run-missing.err")" = "tokenscope: cannot run $TMP/no-such-command: No such file or directory" ]; then
	ok "run exits with the command's status (7, 143 for SIGTERM, 127 when it cannot start, said alone before anything is attached)"
else
	ko "run exit status" "exit 7 -> $rc_exit, SIGTERM -> $rc_sig, missing -> $rc_missing: $(cat "$TMP/run-missing.err")"
fi
: >"$TMP/not-executable"
"$TS" run -- "$TMP/not-executable" >/dev/null 2>"$TMP/run-noexec.err"
rc_noexec=$?
PATH=/nonexistent "$TS" run -- no-such-command-in-path >/dev/null 2>"$TMP/run-nopath.err"
rc_nopath=$?
if [ $rc_noexec -eq 126 ] && [ $rc_nopath -eq 127 ] &&
	[ "$(cat "$TMP/run-noexec.err")" = "tokenscope: cannot run $TMP/not-executable: Permission denied" ] &&
	[ "$(cat "$TMP/run-nopath.err")" = "tokenscope: cannot run no-such-command-in-path: No such file or directory" ]; then
	ok "run: a file that may not be run exits 126, a name not in PATH 127, each said alone"
else
	ko "run: commands that cannot start" "126? $rc_noexec: $(cat "$TMP/run-noexec.err"); 127? $rc_nopath: $(cat "$TMP/run-nopath.err")"
fi
# Nothing about the CUPTI library for a command that maps no CUDA library.
TOKENSCOPE_CUPTI_LIB=/nonexistent/libtokenscope_cupti.so "$TS" run -- true >/dev/null 2>"$TMP/run-nocuda.err"
if ! grep -qi cupti "$TMP/run-nocuda.err" && grep -q attached "$TMP/run-nocuda.err"; then
	ok "run of a command without CUDA says nothing of the CUPTI library"
else
	ko "run without CUDA" "$(cat "$TMP/run-nocuda.err")"
fi
: >"$TMP/fake_cupti.so"
inj=$(TOKENSCOPE_CUPTI_LIB="$TMP/fake_cupti.so" "$TS" run -- sh -c 'echo "inj=$CUDA_INJECTION64_PATH"' 2>/dev/null | grep '^inj=')
kept=$(CUDA_INJECTION64_PATH=/opt/other.so TOKENSCOPE_CUPTI_LIB="$TMP/fake_cupti.so" "$TS" run -- sh -c 'echo "inj=$CUDA_INJECTION64_PATH"' 2>/dev/null | grep '^inj=')
if [ "$inj" = "inj=$TMP/fake_cupti.so" ] && [ "$kept" = "inj=/opt/other.so" ]; then
	ok "run names the injection library in CUDA_INJECTION64_PATH, and keeps one already set"
else
	ko "run environment" "got '$inj' and '$kept'"
fi
"$TS" run -- sleep 30 >/dev/null 2>"$TMP/run-fwd.err" &
runpid=$!
pids+=("$runpid")
# The command runs once tokenscope is set up (its libraries' probes made): wait for it.
sleep_pid=
for _ in $(seq 150); do
	sleep_pid=$(pgrep -P "$runpid" -x sleep) && break
	sleep 0.1
done
kill -TERM "$runpid"
for _ in $(seq 30); do kill -0 "$runpid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$runpid" 2>/dev/null; then
	ko "run forwards signals" "still running 3 s after SIGTERM"
	kill -9 "$runpid"
else
	wait "$runpid"
	rc=$?
	if [ $rc -eq 143 ] && [ -n "$sleep_pid" ] && ! kill -0 "$sleep_pid" 2>/dev/null; then
		ok "run passes SIGTERM on to the command and exits with its status"
	else
		ko "run forwards signals" "rc=$rc, command pid '${sleep_pid}'"
	fi
fi
"$TS" run --json -- sh -c "exec \"$RS\" --port 0 --token-ms 1 --prefill-ms 1 >\"$TMP/rsrun.out\" 2>&1" \
	>"$TMP/run.out" 2>"$TMP/run.err" &
runpid=$!
pids+=("$runpid")
for _ in $(seq 100); do grep -q listening "$TMP/rsrun.out" 2>/dev/null && break; sleep 0.05; done
run_port=$(grep -o '[0-9]*$' "$TMP/rsrun.out")
"$GT" --port "$run_port" -n 3 --max-tokens 5 -o /dev/null 2>/dev/null
sleep 0.3
kill -TERM "$runpid"
wait "$runpid"
rc=$?
nok=$(grep -c '"outcome":"ok".*"tokens":5,' "$TMP/run.out")
nreq=$(grep -c '^{"pid"' "$TMP/run.out")
# The reference server exits 0 on SIGTERM, and so does run. The last line is the summary's.
if [ $rc -eq 0 ] && grep -q '(refserver) exited with status 0' "$TMP/run.err" &&
	[ "$nreq" -eq 3 ] && [ "$nok" -eq 3 ] && tail -n 1 "$TMP/run.out" | grep -q '^{"summary":{"requests":3,'; then
	ok "a server started by run is traced from its first request (3 of 3, tokens exact)"
else
	ko "run traces its command" "rc=$rc, $nok exact of $nreq: $(head -c 600 "$TMP/run.out") $(cat "$TMP/run.err")"
fi

# 14. --capture-bytes below a request line is refused, saying the minimum and why
bad=0
for n in 0 35; do
	# -d 1: a tracer that accepts the value ends (and the check fails) instead of running on
	"$TS" trace -p $$ -d 1 --capture-bytes $n >/dev/null 2>"$TMP/cap.err"
	rc=$?
	if [ $rc -ne 2 ] || ! grep -q -- "--capture-bytes $n is too small: at least 36, the request line" "$TMP/cap.err"; then
		echo "  --capture-bytes $n: rc=$rc $(head -n 1 "$TMP/cap.err")"
		bad=1
	fi
done
[ $bad -eq 0 ] && ok "--capture-bytes below a request line (36) is a usage error" ||
	ko "--capture-bytes minimum" "see above"

# 14b. --device-times takes sampled, all or off; anything else is a usage error naming them
"$TS" trace -p $$ -d 1 --device-times every >/dev/null 2>"$TMP/dt.err"
rc=$?
if [ $rc -eq 2 ] && grep -q -- "invalid --device-times 'every' (sampled, all or off)" "$TMP/dt.err"; then
	ok "--device-times with an unknown mode is a usage error"
else
	ko "--device-times every" "rc=$rc $(head -n 1 "$TMP/dt.err")"
fi

# 15. every command refuses the options it does not use, naming the option and the command
# (-d 1: a command that takes one ends, and the check fails, instead of running on)
bad=0
while IFS='|' read -r want args; do
	# shellcheck disable=SC2086
	"$TS" $args </dev/null >/dev/null 2>"$TMP/unused.err"
	rc=$?
	cmd=${args%% *}
	if [ $rc -ne 2 ] || ! grep -qF -- "$want" "$TMP/unused.err" || ! grep -q "tokenscope $cmd" "$TMP/unused.err"; then
		echo "  '$args': rc=$rc $(head -n 1 "$TMP/unused.err")"
		bad=1
	fi
done <<UNUSED
'--json'|top -p $$ -d 1 --json
'--tokens'|top -p $$ -d 1 --tokens
'--gpu-steps'|top -p $$ -d 1 --gpu-steps
'--kernels'|top -p $$ -d 1 --kernels
argument '5': top redraws every second|top -p $$ -d 1 5
'--no-traffic'|run --no-traffic -- true
invalid option -- 'o'|trace -p $$ -o $TMP/x.tsr
invalid option -- 'o'|top -p $$ -o $TMP/x.tsr
--slow-itl chooses the spans --otlp sends|trace -p $$ -d 1 --slow-itl 1s
--trace-sample chooses the spans --otlp sends|record -p $$ -o $TMP/x.tsr --trace-sample 0.5
--slow-ttft chooses the spans --otlp sends|report $TMP/x.tsr --slow-ttft 1s
--alert-exec runs when an --alert rule fires|trace -p $$ -d 1 --alert-exec true
--alert-exec runs when an --alert rule fires|report $TMP/x.tsr --alert-exec true
takes no option or argument: '--json'|version --json
UNUSED
[ $bad -eq 0 ] && ok "options a command does not use are usage errors naming option and command" ||
	ko "unused options" "see above"

# 16. -p of a process that is not the server: after 5 s one line says no HTTP connection was
# seen and names its ancestor that listens, and again after the summary. A server with no
# client: the line says it listens.
/usr/bin/python3 -c '
import socket, subprocess
s = socket.create_server(("127.0.0.1", 0))
c = subprocess.Popen(["sleep", "30"])
print(s.getsockname()[1], c.pid, flush=True)
c.wait()' >"$TMP/lst.out" &
lstpid=$!
pids+=("$lstpid")
for _ in $(seq 50); do [ -s "$TMP/lst.out" ] && break; sleep 0.1; done
read -r lstport childpid <"$TMP/lst.out"
pids+=("$childpid")
"$TS" trace -p "$childpid" -d 6.5 >/dev/null 2>"$TMP/quiet.err" &
q1=$!
"$TS" trace -p "$lstpid" -d 6.5 >/dev/null 2>"$TMP/quiet2.err" &
q2=$!
wait $q1 $q2
# The seconds each line says: 5 when first said, the trace's length (6.5 s) at the end.
hint="no HTTP connection seen in N s, and $childpid (sleep) listens on no TCP port: is it the server? Its ancestor $lstpid (python3) listens on port $lstport: try -p $lstpid"
sed -E 's/seen in ([0-9]+) s/seen in N s/' "$TMP/quiet.err" >"$TMP/quiet.n"
sed -E 's/seen in ([0-9]+) s/seen in N s/' "$TMP/quiet2.err" >"$TMP/quiet2.n"
first=$(sed -nE 's/^tokenscope: no HTTP connection seen in ([0-9]+) s.*/\1/p' "$TMP/quiet.err")
still=$(sed -nE 's/^tokenscope: still no HTTP connection seen in ([0-9]+) s.*/\1/p' "$TMP/quiet.err")
if [ "$(grep -cxF "tokenscope: $hint" "$TMP/quiet.n")" -eq 1 ] &&
	[ "$(grep -cxF "tokenscope: still $hint" "$TMP/quiet.n")" -eq 1 ] &&
	[ "$first" = 5 ] && { [ "$still" = 6 ] || [ "$still" = 7 ]; } &&
	grep -qxF "tokenscope: no HTTP connection seen in N s; $lstpid (python3) listens on port $lstport: is a client sending it requests?" "$TMP/quiet2.n"; then
	ok "a traced process with no HTTP traffic is said once (after $first s, still after $still s), with the listening ancestor to trace"
else
	ko "no traffic hint" "$(grep -hv '^  ' "$TMP/quiet.err" "$TMP/quiet2.err")"
fi
kill "$childpid" "$lstpid" 2>/dev/null

# 17. A tokenscope started while an earlier one's child (tokenscope-exit) still removes its
# probes waits for it before it probes anything, and says so: here a stand-in of that name that
# lives 1.5 s. One that exited and waits to be reaped (a zombie) is not waited for.
mkdir -p "$TMP/bin"
cp "$(command -v sleep)" "$TMP/bin/tokenscope-exit"
start_server
"$TMP/bin/tokenscope-exit" 1.5 &
standin=$!
pids+=("$standin")
t0=$(date +%s.%N)
if start_tracer earlier -p "$RSPID"; then
	t1=$(date +%s.%N)
	waited=$(echo "$t1 - $t0" | bc)
else
	waited=never
fi
kill -INT "$TSPID" 2>/dev/null
wait "$TSPID" 2>/dev/null
kill "$RSPID" 2>/dev/null
if grep -qx "tokenscope: waiting for tokenscope-exit (PID $standin) to remove an earlier run's probes first" \
	"$TMP/earlier.err" && [ "$waited" != never ] && [ "$(echo "$waited >= 1.4" | bc)" = 1 ] &&
	! kill -0 "$standin" 2>/dev/null; then
	ok "a start waits for an earlier run's probe removal (tokenscope-exit) to end: attached after $waited s"
else
	ko "earlier tokenscope-exit" "attached after $waited s: $(head -n 3 "$TMP/earlier.err")"
fi

echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
