#!/usr/bin/env bash
# OTLP export over a real socket: builds tests/otlp/test_otlp_live.c with user/*.c (but the
# loader's main.c, trace.c, cuda.c, run.c) under ASan/UBSan into .output/otlp (OTLP_LIVE_BIN: use that
# binary instead), starts tests/otlp/receiver.py on a loopback port, and runs the program
# against it. Prints PASS/FAIL/SKIP lines and "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/../.."
OUT=.output
BIN=$OUT/otlp/otlp_live
PY=/usr/bin/python3

fail() {
	echo "FAIL $1"
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
}

if [ ! -x "$PY" ]; then
	echo "SKIP otlp_live: $PY not found"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi

# The pipeline's objects, built here with the unit tests' sanitizers (make treats its own
# .output/san objects as intermediate and removes them); rebuilt when a source or header changes.
build() {
	local obj=$OUT/otlp/obj flags objs=() pids=() f b o libs
	flags=(-O1 -g -Wall -Wextra -Werror -std=gnu11 -D_GNU_SOURCE -Iinclude -Iuser -I"$OUT"
		-Itests/unit -fsanitize=address,undefined -fno-sanitize-recover=all
		-fno-omit-frame-pointer)
	mkdir -p "$obj"
	for f in user/*.c; do
		b=$(basename "$f" .c)
		case $b in main | trace | cuda | run | kernel) continue ;; esac
		o=$obj/$b.o
		objs+=("$o")
		if [ ! -f "$o" ] || [ -n "$(find "$f" user/*.h include/*.h -newer "$o" 2>/dev/null)" ]; then
			${CC:-cc} "${flags[@]}" -c "$f" -o "$o" &
			pids+=($!)
		fi
	done
	for p in "${pids[@]}"; do
		wait "$p" || return 1
	done
	libs=(-lcjson -lm -lpthread)
	if grep -lq 'microhttpd.h' user/*.c; then
		libs+=(-lmicrohttpd)
	fi
	${CC:-cc} "${flags[@]}" tests/otlp/test_otlp_live.c "${objs[@]}" -o "$BIN" "${libs[@]}"
}
if [ -n "${OTLP_LIVE_BIN:-}" ]; then
	BIN=$OTLP_LIVE_BIN
else
	build || fail "otlp_live_build: building tests/otlp/test_otlp_live.c and user/*.c"
fi

tmp=$(mktemp -d /tmp/tokenscope-otlp.XXXXXX)
"$PY" tests/otlp/receiver.py --dir "$tmp/bodies" --port-file "$tmp/port" 2>"$tmp/receiver.log" &
receiver=$!
cleanup() {
	kill "$receiver" 2>/dev/null
	wait "$receiver" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
for _ in $(seq 100); do
	[ -s "$tmp/port" ] && break
	kill -0 "$receiver" 2>/dev/null || break
	sleep 0.05
done
if [ ! -s "$tmp/port" ]; then
	cat "$tmp/receiver.log"
	fail "otlp_live_receiver: receiver.py did not start"
fi
"$BIN" "$(cat "$tmp/port")" "$tmp/bodies"
