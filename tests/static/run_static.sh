#!/usr/bin/env bash
# The static build (make STATIC=1, docs/building.md "Static build") in a bare root: an empty folder
# holding .output/static/tokenscope alone, with /proc and /sys (BTF, tracefs) mounted inside
# in a mount namespace of its own, so nothing leaks to the host and the mounts go with the last
# process in it. Checks that the binary has no dynamic section, that --version runs there, that
# a trace of the reference server (started on the host, traced by PID) reports the requests and
# tokens the ground-truth client made, that the metrics listener serves, and that what needs a
# shared library (NVML, --otlp) says so in one line instead of loading it. Prints PASS/FAIL/SKIP
# lines and the totals line.
set -u
cd "$(dirname "$0")/../.."
BIN=${TOKENSCOPE_STATIC:-.output/static/tokenscope}
DYN=${TOKENSCOPE:-.output/tokenscope}
RS=${REFSERVER:-.output/refserver}
GT=${GTCLIENT:-.output/gtclient}
TMP=$(mktemp -d)
ROOT=$(mktemp -d)
. tests/lib.sh
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	# The mounts are in the namespaces of the processes just killed: here ROOT holds only
	# empty mount points and the binary.
	rm -rf "$TMP" "$ROOT"
}
trap cleanup EXIT

if [ ! -x "$BIN" ]; then
	ko "static binary" "$BIN is missing: build it with make STATIC=1"
	finish
fi

# 1. nothing to load: no dynamic section, no interpreter
if readelf -d "$BIN" 2>&1 | grep -q "There is no dynamic section" &&
	! readelf -l "$BIN" | grep -q INTERP; then
	ok "no dynamic section and no interpreter"
else
	ko "no dynamic section" "$(readelf -d "$BIN" 2>&1 | head -n 5)"
fi

if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null || ! command -v chroot >/dev/null; then
	sk "bare root" "needs root, unshare and chroot"
	finish
fi
cp "$BIN" "$ROOT/tokenscope"
mkdir "$ROOT/proc" "$ROOT/sys"

# "${IN_ROOT[@]}" ARGS... runs tokenscope ARGS in the bare root: a private mount namespace with
# the host's /proc (the same PID namespace, so host PIDs are traced) and /sys with what is
# mounted below it (/sys/kernel/btf, /sys/kernel/tracing). unshare, sh and chroot each exec the
# next, so the $! of one started in the background is the tracer itself.
IN_ROOT=(unshare --mount --propagation private sh -c
	'mount -t proc proc "$0/proc" && mount --rbind /sys "$0/sys" && exec chroot "$0" /tokenscope "$@"'
	"$ROOT")

# 2. --version, as the dynamic build prints it
if "${IN_ROOT[@]}" --version >"$TMP/version.out" 2>"$TMP/version.err" &&
	grep -q '^tokenscope [0-9]' "$TMP/version.out"; then
	if [ -x "$DYN" ] && [ "$(cat "$TMP/version.out")" != "$("$DYN" --version)" ]; then
		ko "--version in a bare root" "$(cat "$TMP/version.out") differs from the dynamic build's"
	else
		ok "--version in a bare root: $(cat "$TMP/version.out")"
	fi
else
	ko "--version in a bare root" "$(cat "$TMP/version.out")"
fi

# 3. a trace by PID from the bare root, with the metrics listener: the summary must count the
# requests and tokens the client saw, and the listener must serve them
"$RS" --port 0 --token-ms 2 --prefill-ms 5 >"$TMP/rs.out" 2>&1 &
RSPID=$!
pids+=("$RSPID")
for _ in $(seq 50); do grep -q listening "$TMP/rs.out" && break; sleep 0.1; done
PORT=$(grep -o '[0-9]*$' "$TMP/rs.out")
"${IN_ROOT[@]}" trace -p "$RSPID" --listen 127.0.0.1:0 >"$TMP/trace.out" 2>"$TMP/trace.err" </dev/null &
TSPID=$!
pids+=("$TSPID")
for _ in $(seq 100); do grep -q attached "$TMP/trace.err" && break; sleep 0.1; done
MPORT=$(grep -o 'metrics at http://127.0.0.1:[0-9]*' "$TMP/trace.err" | grep -o '[0-9]*$')
if [ -z "$PORT" ] || ! grep -q attached "$TMP/trace.err"; then
	ko "trace in a bare root" "the tracer did not attach (server port '$PORT')"
	finish
fi
timeout 30 "$GT" --port "$PORT" -n 5 -c 2 --max-tokens 7 -o "$TMP/gt.json" 2>/dev/null
want_n=$(grep -c '"outcome":"ok"' "$TMP/gt.json")
want_tok=$(grep -o '"tokens":[0-9]*' "$TMP/gt.json" | awk -F: '{ s += $2 } END { print s + 0 }')
# Counted once the pipeline published a snapshot with them.
scraped=
for _ in $(seq 30); do
	scraped=$(curl -s -m 2 "http://127.0.0.1:$MPORT/metrics" |
		sed -n 's/^tokenscope_requests_total{model="ref",role="server",outcome="ok"} //p')
	[ "$scraped" = "$want_n" ] && break
	sleep 0.1
done
kill -INT "$TSPID"
for _ in $(seq 50); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
kill -9 "$TSPID" 2>/dev/null
wait "$TSPID"
rc=$?
got_n=$(sed -n 's/^--- summary: \([0-9]*\) requests.*/\1/p' "$TMP/trace.out")
got_tok=$(sed -n 's/^  tokens \([0-9]*\),.*/\1/p' "$TMP/trace.out")
if [ "$rc" -ne 0 ]; then
	ko "trace in a bare root" "exit status $rc"
elif [ "$want_n" -ne 5 ] || [ "$got_n" != "$want_n" ] || [ "$got_tok" != "$want_tok" ]; then
	ko "trace in a bare root" "client: $want_n requests, $want_tok tokens; tracer: '$got_n' requests, '$got_tok' tokens"
else
	ok "trace in a bare root: $got_n requests, $got_tok tokens, as the client saw"
fi
if [ -n "$MPORT" ] && [ "$scraped" = "$want_n" ]; then
	ok "metrics listener in a bare root"
else
	ko "metrics listener in a bare root" "port '$MPORT', requests_total '$scraped', want $want_n"
fi
# The listener wants GPU metrics, and NVML cannot be loaded: that is said only once a traced
# process maps a CUDA library, which the reference server does not.
if ! grep -q 'NVML' "$TMP/trace.err"; then
	ok "no NVML in a static binary: not said, as no traced process maps a CUDA library"
else
	ko "no NVML in a static binary" "said without a CUDA process: $(grep NVML "$TMP/trace.err")"
fi

# 4. --otlp needs libcurl: refused at start with one line, not a crash
timeout 20 "${IN_ROOT[@]}" trace -p "$RSPID" --otlp http://127.0.0.1:9/v1/traces >"$TMP/otlp.out" 2>"$TMP/otlp.err" </dev/null
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] &&
	grep -q 'OTLP export needs libcurl (a static tokenscope cannot load shared libraries' "$TMP/otlp.err"; then
	ok "--otlp refused with a message (exit $rc)"
else
	ko "--otlp in a static binary" "exit $rc: $(cat "$TMP/otlp.err")"
fi
finish
