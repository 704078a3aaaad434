#!/usr/bin/env bash
# How long tokenscope takes to exit after its summary, tracing many processes with probes in
# them: N Python processes (default 100) that map OpenSSL (so each holds the TLS probes), all
# children of one parent traced with -p, on a machine loaded with LOAD busy loops (default 2).
# Prints the seconds from SIGINT to the summary, from the summary to the exit, and from the
# exit until the probes are gone (tokenscope-exit, the child that removes them, has ended: a
# tokenscope started meanwhile waits that long), ROUNDS times (default 3). Needs root. Usage: scripts/detach_time.sh [TOKENSCOPE]
set -u
cd "$(dirname "$0")/.." || exit 1
TS=${1:-.output/tokenscope}
N=${N:-100}
LOAD=${LOAD:-2}
ROUNDS=${ROUNDS:-3}
TMP=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	pkill -P "$parent" 2>/dev/null
	kill "$parent" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT

# The parent and its N children, each with libssl mapped.
python3 -c '
import os, ssl, subprocess, sys, time
n = int(sys.argv[1])
kids = [subprocess.Popen([sys.executable, "-c", "import ssl, time; time.sleep(3600)"])
        for _ in range(n)]
print("ready", flush=True)
time.sleep(3600)
' "$N" >"$TMP/parent.out" &
parent=$!
for _ in $(seq 300); do grep -q ready "$TMP/parent.out" && break; sleep 0.1; done
sleep 1
for _ in $(seq "$LOAD"); do
	(while :; do :; done) &
	pids+=($!)
done

for r in $(seq "$ROUNDS"); do
	"$TS" trace -p "$parent" >"$TMP/out" 2>"$TMP/err" &
	ts=$!
	for _ in $(seq 600); do grep -q attached "$TMP/err" && break; sleep 0.1; done
	sleep 2
	t0=$(date +%s.%N)
	kill -INT "$ts"
	# the summary's first line, then the exit
	while ! grep -q -- '--- summary' "$TMP/out" && kill -0 "$ts" 2>/dev/null; do sleep 0.01; done
	t1=$(date +%s.%N)
	wait "$ts"
	rc=$?
	t2=$(date +%s.%N)
	# what removes the probes after the exit (a tokenscope started now waits for it)
	# (not one that exited and waits to be reaped: init may take a second or two)
	while ps -C tokenscope-exit -o stat= | grep -v Z >/dev/null; do sleep 0.01; done
	t3=$(date +%s.%N)
	probes=$(grep -o 'tracing TLS calls' "$TMP/err" | wc -l)
	printf 'round %d: %d processes hooked (TLS), SIGINT -> summary %.2f s, summary -> exit %.2f s (exit %d), probes gone %.2f s after the exit\n' \
		"$r" "$probes" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$rc" "$(echo "$t3 - $t2" | bc)"
	grep -E 'removing|background' "$TMP/err" | sed 's/^/  /'
done
