#!/usr/bin/env bash
# make stress: hostile clients end to end against traced servers (tests/stress/README.md).
# Runs tests/stress/stress.py with the descriptor limit raised (20,000 idle connections need
# as many descriptors in the server and in the client), bounded in time as a whole, and kills
# every process it started on exit, whatever way it ends.
# Prints PASS/FAIL/SKIP lines, the figures, and the totals line; exits 1 if anything failed.
# Environment: TOKENSCOPE, REFSERVER, GTCLIENT, TOKENSCOPE_ASAN, SOAK_S (60), SOAK_ASAN_S (20),
# STRESS_ASAN=0, STRESS_PHASES, STRESS_KEEP=1, STRESS_TIMEOUT_S (480).
set -u
cd "$(dirname "$0")/../.." || exit 1
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
# The whole run: about 3 minutes on a 2-core VM; this bounds it whatever hangs.
LIMIT=${STRESS_TIMEOUT_S:-480}
NOFILE=20200 # 20,000 idle connections and a few descriptors more

if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP stress: needs root to load BPF programs"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi

STRESS_PIDFILE=$(mktemp /tmp/tokenscope-stress-pids.XXXXXX)
export STRESS_PIDFILE
drv=
cleanup() {
	[ -n "$drv" ] && kill -TERM "$drv" 2>/dev/null
	for _ in $(seq 50); do [ -n "$drv" ] && kill -0 "$drv" 2>/dev/null || break; sleep 0.1; done
	[ -n "$drv" ] && kill -KILL "$drv" 2>/dev/null
	# Every process the driver started leads its own process group.
	while read -r p; do
		[ -n "$p" ] && kill -KILL -- "-$p" 2>/dev/null
	done <"$STRESS_PIDFILE"
	# The cgroups made for the soak's stand-in container, once their processes are gone.
	if [ -s "$STRESS_PIDFILE.cgroups" ]; then
		for _ in $(seq 30); do
			left=0
			while read -r d; do
				[ -d "$d" ] && { rmdir "$d" 2>/dev/null || left=1; }
			done <"$STRESS_PIDFILE.cgroups"
			[ $left -eq 0 ] && break
			sleep 0.1
		done
	fi
	rm -f "$STRESS_PIDFILE" "$STRESS_PIDFILE.cgroups"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Root with CAP_SYS_RESOURCE may raise the hard limit; else the soft one goes up to it. The
# servers, clients and tracers inherit it; stress.py spreads the idle connections over as
# many processes as the limit needs.
ulimit -Hn "$NOFILE" 2>/dev/null
ulimit -Sn "$(ulimit -Hn)" 2>/dev/null

# The soak is run again under AddressSanitizer and UBSan (p12), built here into a directory of
# its own (incremental after the first time). STRESS_ASAN=0 skips it.
ASAN_OUT=.output/stress-asan
if [ "${STRESS_ASAN:-1}" = 1 ] && [ -z "${TOKENSCOPE_ASAN:-}" ]; then
	if nice make --no-print-directory OUTPUT="$ASAN_OUT" \
		CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
		"$ASAN_OUT/tokenscope" >"$STRESS_PIDFILE.build" 2>&1; then
		export TOKENSCOPE_ASAN=$ASAN_OUT/tokenscope
	else
		echo "stress: the sanitizer build failed (p12 is skipped):"
		tail -n 5 "$STRESS_PIDFILE.build"
	fi
	rm -f "$STRESS_PIDFILE.build"
fi

timeout -k 10 "$LIMIT" "$PY" tests/stress/stress.py "$@" &
drv=$!
wait "$drv"
rc=$?
drv=
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	echo "FAIL stress: the run did not end within $LIMIT s (killed)"
	rc=1
fi
exit $rc
