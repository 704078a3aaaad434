#!/usr/bin/env bash
# A process held at its mapping of the CUDA runtime until hooked (docs/gpu.md, "A library mapped
# after attach"), and never left stopped. cudaloop --late loads a copy of the runtime of its own
# (a file no traced process mapped before and no ld.so cache lists) only after tokenscope
# attached, and goes into its steps microseconds after its dlopen:
#   hold-first-step   every step is seen, the first included: tokenscope says the process was
#                     held and that no call was missed; the held time is printed
#   hold-watchdog     tokenscope is stopped (it cannot continue anything), the process is held
#                     at its mapping, tokenscope is killed with SIGKILL: its watchdog continues
#                     the process at once, which finishes its steps; the watchdog is gone after
#   hold-bounded      tokenscope stopped longer than a hold may last: the watchdog continues the
#                     process after a second, and tokenscope says it came too late
#   hold-no-cap-kill  without CAP_KILL nothing is held (a process of another user could not be
#                     continued): the mapping's record hooks it, the window said
# Needs root and the CUDA toolkit's runtime (or the stand-in); prints PASS/FAIL/SKIP lines.
set -u
cd "$(dirname "$0")/../.."
TS=${TOKENSCOPE:-.output/tokenscope}
LOOP=.output/cudaloop
TMP=$(mktemp -d)
. tests/lib.sh
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill -CONT "$p" 2>/dev/null
		kill -9 "$p" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT

if [ "$(id -u)" -ne 0 ]; then
	sk hold "needs root"
	finish
fi
CUDART=/usr/local/cuda/lib64/libcudart.so.13
[ -f "$CUDART" ] || CUDART=.output/standin/libcudart.so.13
if [ ! -x "$LOOP" ] || [ ! -f "$CUDART" ]; then
	sk hold "no $LOOP or CUDA runtime"
	finish
fi
mkdir -p "$TMP/lib"
cp "$CUDART" "$TMP/lib/libcudart.so.13"
STEPS=3

# cudaloop --late on a fifo for its stdin; sets LPID and opens fd 7 to write its lines.
start_loop() { # name
	rm -f "$TMP/$1.in"
	mkfifo "$TMP/$1.in"
	"$LOOP" --cudart "$TMP/lib/libcudart.so.13" --late -n "$STEPS" --launches 4 \
		<"$TMP/$1.in" >"$TMP/$1.loop" 2>"$TMP/$1.loop.err" &
	LPID=$!
	pids+=("$LPID")
	exec 7>"$TMP/$1.in"
	for _ in $(seq 50); do grep -q '^ready' "$TMP/$1.loop" && return 0; sleep 0.1; done
	return 1
}

# tokenscope trace -p LPID in the background (command prefix in $@); sets TPID.
start_ts() { # name [prefix...]
	local name=$1
	shift
	"$@" "$TS" trace -p "$LPID" --json --gpu-steps -v >"$TMP/$name.ts" 2>"$TMP/$name.ts.log" &
	TPID=$!
	pids+=("$TPID")
	for _ in $(seq 100); do grep -q 'tokenscope: attached' "$TMP/$name.ts.log" && return 0; sleep 0.1; done
	return 1
}

state() { sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null; }

# 1. Held until hooked: every step seen.
if start_loop first && start_ts first; then
	echo go >&7
	for _ in $(seq 100); do grep -q '^steps=' "$TMP/first.loop" && break; sleep 0.1; done
	echo end >&7
	exec 7>&-
	sleep 0.3
	kill -INT "$TPID" 2>/dev/null
	wait "$TPID"
	rc=$?
	steps=$(grep -c '"gpu_step"' "$TMP/first.ts")
	held=$(grep -m 1 'held at a library mapping until hooked' "$TMP/first.ts.log")
	if [ $rc -eq 0 ] && [ "$steps" -eq $((2 * STEPS)) ] && [ -n "$held" ] &&
		! grep -q 'calls in that time not seen' "$TMP/first.ts.log"; then
		ok "hold-first-step: $steps of $((2 * STEPS)) steps, the first included; ${held#tokenscope: }"
	else
		ko hold-first-step "exit $rc, $steps of $((2 * STEPS)) steps; $(grep -E 'held|hook' "$TMP/first.ts.log" | tr '\n' '|')"
	fi
else
	ko hold-first-step "cudaloop or tokenscope did not start"
fi

# Waits up to $2 tenths of a second for process $1 to be in state T (or, with $3 = go, out of it).
wait_state() { # pid tenths [go]
	local st
	for _ in $(seq "$2"); do
		st=$(state "$1")
		if [ "${3:-}" = go ]; then [ "$st" != T ] && return 0; else [ "$st" = T ] && return 0; fi
		sleep 0.1
	done
	return 1
}

# 2. tokenscope stopped, the process held, tokenscope killed at once: the watchdog continues it
# when the loader's end closes its pipe, not a second later.
if start_loop dog && start_ts dog; then
	dog=$(pgrep -P "$TPID" -x tokenscope-hold)
	kill -STOP "$TPID"
	echo go >&7
	wait_state "$LPID" 50 && held=1 || held=0
	kill -9 "$TPID"
	wait "$TPID" 2>/dev/null
	t0=$(date +%s%N)
	wait_state "$LPID" 50 go
	ms=$((($(date +%s%N) - t0) / 1000000))
	for _ in $(seq 50); do grep -q '^steps=' "$TMP/dog.loop" && break; sleep 0.1; done
	echo end >&7
	exec 7>&-
	# The watchdog ends once it has continued what was held (a zombie until reaped).
	for _ in $(seq 30); do
		case $(state "$dog") in "" | Z) break ;; esac
		sleep 0.1
	done
	if [ $held -eq 1 ] && [ $ms -lt 500 ] && grep -q '^steps=' "$TMP/dog.loop" && [ -n "$dog" ] &&
		case $(state "$dog") in "" | Z) true ;; *) false ;; esac; then
		ok "hold-watchdog: held (state T) while tokenscope was stopped; $ms ms after tokenscope was killed its watchdog (pid $dog) had continued it, and it finished its steps"
	else
		ko hold-watchdog "held $held, running again $ms ms after the kill, watchdog '$dog' (state '$(state "$dog")'), steps line: $(grep -c '^steps=' "$TMP/dog.loop")"
	fi
else
	ko hold-watchdog "cudaloop or tokenscope did not start"
fi

# 3. tokenscope stopped for longer than a hold may last: the watchdog continues the process
# after a second; tokenscope, continued, hooks it and says it came too late.
if start_loop bound && start_ts bound; then
	kill -STOP "$TPID"
	echo go >&7
	wait_state "$LPID" 50 && held=1 || held=0
	t0=$(date +%s%N)
	wait_state "$LPID" 50 go
	ms=$((($(date +%s%N) - t0) / 1000000))
	for _ in $(seq 50); do grep -q '^steps=' "$TMP/bound.loop" && break; sleep 0.1; done
	kill -CONT "$TPID"
	echo end >&7
	exec 7>&-
	sleep 0.5
	kill -INT "$TPID" 2>/dev/null
	wait "$TPID"
	if [ $held -eq 1 ] && [ $ms -ge 500 ] && [ $ms -lt 2500 ] &&
		grep -q '^steps=' "$TMP/bound.loop" &&
		grep -q 'went on before tokenscope hooked it' "$TMP/bound.ts.log"; then
		ok "hold-bounded: with tokenscope stopped, the process went on $ms ms after it was held; tokenscope said it came too late"
	else
		ko hold-bounded "held $held, running again after $ms ms; $(grep -E 'held|hook' "$TMP/bound.ts.log" | tr '\n' '|')"
	fi
else
	ko hold-bounded "cudaloop or tokenscope did not start"
fi

# 4. No CAP_KILL: nothing held.
if ! command -v setpriv >/dev/null; then
	sk hold-no-cap-kill "no setpriv"
elif start_loop nokill && start_ts nokill setpriv --inh-caps=-kill --bounding-set=-kill; then
	echo go >&7
	for _ in $(seq 100); do grep -q '^steps=' "$TMP/nokill.loop" && break; sleep 0.1; done
	echo end >&7
	exec 7>&-
	sleep 0.3
	kill -INT "$TPID" 2>/dev/null
	wait "$TPID"
	if grep -q 'no CAP_KILL' "$TMP/nokill.ts.log" &&
		! grep -q 'held at a library mapping' "$TMP/nokill.ts.log" &&
		grep -q '^steps=' "$TMP/nokill.loop"; then
		ok "hold-no-cap-kill: not held, said why; $(grep -m 1 -o 'hooked from the mapping.*' "$TMP/nokill.ts.log" || echo 'hooked at its mapping record')"
	else
		ko hold-no-cap-kill "$(grep -E 'held|hook|CAP_KILL' "$TMP/nokill.ts.log" | tr '\n' '|')"
	fi
else
	ko hold-no-cap-kill "cudaloop or tokenscope did not start"
fi
finish
