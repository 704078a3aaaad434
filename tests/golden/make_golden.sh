#!/usr/bin/env bash
# Makes the golden recordings of tests/golden/ with this build, and their outputs
# (outputs.sh): what `tokenscope report` gives today, which run_golden.sh (make check) compares
# later builds with byte for byte. Run it only to re-baseline, and say in the commit why an
# output changed.
#
#   tests/golden/make_golden.sh            # as root: records anew, then writes the outputs
#   tests/golden/make_golden.sh --outputs  # the outputs only, from the recordings kept
#
# The recordings (each the reference server traced with `tokenscope record` while the
# ground-truth client drives it):
#   patterns   --pattern mixed --syscall sendmsg: frames written one, several and split per
#              write; keep-alive connections (-k 2), usage frames
#   split      --pattern split --recv recvmsg --token-ms 2: frames cut across writes
#   errors     every 3rd request aborted after 2 frames, every 4th an HTTP error, every 5th a
#              stream error, every 6th not streamed
#   gpu        --gpu (the stand-in runtime's steps): requests queue for prefill (-c 4,
#              --max-batch 2), attribution by GPU steps
#   cupti      --gpu with the CUPTI library and the stand-in CUPTI: device times, attribution
#              cupti
#   ticks      --gpu as gpu, recorded in format version 5: drain marks, so its report ticks
#              where the live run ticked (the others are version 4 and keep the 25 ms ticks of
#              their records' time: a recording of an earlier version must still replay)
#
#   tests/golden/make_golden.sh --only NAME  # records NAME anew, keeps the others, then outputs
set -u
cd "$(dirname "$0")/../.." || exit 1
TS=${TOKENSCOPE:-.output/tokenscope}
RS=${REFSERVER:-.output/refserver}
GT=${GTCLIENT:-.output/gtclient}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
DIR=tests/golden
# shellcheck source=tests/golden/outputs.sh
. "$DIR/outputs.sh"

record_one() { # name "server args" "client args" [env...]
	local name=$1 srv=$2 cli=$3 tmp rs ts port
	shift 3
	tmp=$(mktemp -d)
	# shellcheck disable=SC2086 # the args are words
	env "$@" "$RS" --port 0 $srv >"$tmp/rs.out" 2>&1 &
	rs=$!
	for _ in $(seq 100); do grep -q listening "$tmp/rs.out" && break; sleep 0.05; done
	port=$(grep -o 'listening on [0-9.]*:[0-9]*' "$tmp/rs.out" | grep -o '[0-9]*$')
	# A warm-up request: the engine's CUDA initialisation loads the CUPTI library.
	"$GT" --port "$port" -n 1 --max-tokens 2 -o /dev/null 2>/dev/null
	"$TS" record -p "$rs" -o "$DIR/recordings/$name.tsr" 2>"$tmp/rec.err" &
	ts=$!
	for _ in $(seq 200); do grep -q attached "$tmp/rec.err" && break; sleep 0.05; done
	sleep 1.5 # the CUDA scan (once a second) and the CUPTI library's poll
	# shellcheck disable=SC2086
	"$GT" --port "$port" $cli -o /dev/null 2>/dev/null
	sleep 0.5
	kill -INT "$ts"
	wait "$ts"
	kill "$rs"
	wait "$rs" 2>/dev/null
	echo "$name: $(stat -c %s "$DIR/recordings/$name.tsr") bytes"
	rm -rf "$tmp"
}

ONLY=
[ "${1:-}" = --only ] && ONLY=${2:?--only NAME}
record_if() { # as record_one, for --only NAME that one alone
	[ -z "$ONLY" ] || [ "$ONLY" = "$1" ] || return 0
	record_one "$@"
}

if [ "${1:-}" != --outputs ]; then
	[ "$(id -u)" = 0 ] || {
		echo "make_golden.sh: recording needs root (BPF); --outputs remakes the outputs only" >&2
		exit 1
	}
	mkdir -p "$DIR/recordings"
	[ -n "$ONLY" ] || rm -f "$DIR"/recordings/*.tsr
	record_if patterns "--pattern mixed --syscall sendmsg --token-ms 1" \
		"-n 8 -c 2 -k 2 --usage --max-tokens 6"
	record_if split "--pattern split --recv recvmsg --token-ms 2" "-n 4 -c 2 --max-tokens 5"
	record_if errors "--token-ms 1" "-n 12 -c 2 --max-tokens 5 --abort-every 3 --abort-after 2 \
--http-error-every 4 --stream-error-every 5 --no-stream-every 6"
	record_if gpu "--gpu --token-ms 3 --prefill-ms 6 --max-batch 2" \
		"-n 8 -c 4 --usage --max-tokens 6"
	record_if cupti "--gpu --token-ms 3 --prefill-ms 6 --cudart .output/standin/libcudart.so.13" \
		"-n 6 -c 3 --usage --max-tokens 5" CUDA_INJECTION64_PATH="$PWD/.output/libtokenscope_cupti.so" \
		LD_LIBRARY_PATH="$PWD/.output/standin"
	record_if ticks "--gpu --token-ms 3 --prefill-ms 6 --max-batch 2" \
		"-n 8 -c 4 --usage --max-tokens 6"
fi
mkdir -p "$DIR/expected"
rm -f "$DIR"/expected/*
for rec in "$DIR"/recordings/*.tsr; do
	golden_outputs "$rec" "$DIR/expected"
done
ls -l "$DIR/expected"
