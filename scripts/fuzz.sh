#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz/ (tests/fuzz/README.md).
#
#   scripts/fuzz.sh            builds every target and fuzzes each for FUZZ_SECONDS (default 60)
#                              from its seeds, with its dictionary, into a work corpus under
#                              .output/fuzz/corpus/<target>; prints a line per target and exits
#                              non-zero on any crash, leak, timeout or sanitizer report
#   scripts/fuzz.sh --regress  builds every target and runs each input of its regression
#                              corpus and of its seeds once: a PASS or FAIL line per target
#
# FUZZ_TARGETS="fuzz_sse fuzz_pipeline" picks targets; FUZZ_RUNS stops each target after that
# many executions (before FUZZ_SECONDS if it gets there first); FUZZ_TIMEOUT (seconds per input,
# default 10), FUZZ_RSS_MB (default 2048) and FUZZ_JOBS (parallel targets, default 1) tune
# a campaign. Each target's line starts with PASS or FAIL. Everything runs under nice(1): other
# work on the machine comes first. fuzz_cupti needs the CUDA toolkit's CUPTI headers (CUDA_INC,
# default /usr/local/cuda/include): without them it is skipped, with a SKIP line.
set -u
cd "$(dirname "$0")/.." || exit 1

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10}
FUZZ_RSS_MB=${FUZZ_RSS_MB:-2048}
FUZZ_JOBS=${FUZZ_JOBS:-1}
OUT=.output/fuzz
SRC=tests/fuzz

mode=run
case "${1:-}" in
--regress) mode=regress ;;
"") ;;
*)
	sed -n '2,17s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac

# The dictionaries (tests/fuzz/dict/<format>.dict) of the formats each target reads.
dict_formats() {
	case $1 in
	fuzz_http_request) echo http ;;
	fuzz_http_response) echo http sse ;;
	fuzz_sse) echo sse json ;;
	fuzz_reqbody) echo json utf8 ;;
	fuzz_tracectx) echo http utf8 ;;
	fuzz_frame) echo json sse ;;
	fuzz_json) echo json ;;
	fuzz_record) echo tsr http sse json ;;
	fuzz_pipeline) echo http sse json h2 ;;
	fuzz_h2) echo h2 ;;
	fuzz_json_string) echo utf8 ;;
	fuzz_prom_label) echo utf8 alert ;;
	fuzz_duration | fuzz_alert_rule) echo alert ;;
	fuzz_otlp_response) echo http ;;
	fuzz_cupti) echo cupti ;;
	fuzz_httpd) echo http ;;
	fuzz_proc) echo proc utf8 ;;
	fuzz_container) echo proc json utf8 ;;
	fuzz_alert_exec) echo alert utf8 ;;
	esac
}

# What a libFuzzer log says went wrong; empty when nothing did.
verdict() {
	local log=$1
	if grep -q 'ERROR: libFuzzer: timeout' "$log"; then
		echo "timeout (a hang)"
	elif grep -q 'ERROR: libFuzzer: out-of-memory' "$log"; then
		echo "out of memory"
	elif grep -q 'ERROR: LeakSanitizer' "$log"; then
		echo "leak"
	elif grep -q 'ERROR: AddressSanitizer' "$log"; then
		grep -m1 -o 'AddressSanitizer: [a-zA-Z-]*' "$log"
	elif grep -q 'runtime error:' "$log"; then
		echo "UBSan: $(grep -m1 -o 'runtime error: .*' "$log" | cut -c16-130)"
	elif grep -q 'property failed' "$log"; then
		echo "property: $(grep -m1 -o 'property failed: .*' "$log" | cut -c18-120)"
	elif grep -q 'ERROR: libFuzzer: deadly signal' "$log"; then
		echo "deadly signal"
	elif grep -q 'ERROR: ' "$log"; then
		grep -m1 -o 'ERROR: .*' "$log" | cut -c1-80
	fi
}

if [ -n "${FUZZ_TARGETS:-}" ]; then
	targets=$FUZZ_TARGETS
else
	targets=
	for f in "$SRC"/fuzz_*.c; do
		f=${f##*/}
		targets="$targets ${f%.c}"
	done
fi
for t in $targets; do
	if [ ! -f "$SRC/$t.c" ]; then
		echo "fuzz.sh: no target $t (tests/fuzz/$t.c)" >&2
		exit 2
	fi
done

# fuzz_cupti reads the toolkit's record structs; the Makefile builds it only where they are.
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
if [ ! -f "$CUDA_INC/cupti_activity.h" ]; then
	kept=
	for t in $targets; do
		if [ "$t" = fuzz_cupti ]; then
			echo "SKIP fuzz_cupti: no CUPTI headers ($CUDA_INC/cupti_activity.h; CUDA_INC=...)"
		else
			kept="$kept $t"
		fi
	done
	targets=$kept
	# Nothing left: make with no binary named would build everything.
	[ -n "${targets// /}" ] || exit 0
fi

# libFuzzer comes with clang's runtime (Debian: libclang-rt-14-dev, which scripts/deps.sh
# installs); without it there is nothing to build.
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
	${CLANG:-clang} -x c -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
	if [ $mode = regress ]; then
		echo "SKIP fuzz: clang cannot link libFuzzer (install libclang-rt-14-dev)"
		exit 0
	fi
	echo "fuzz.sh: clang cannot link libFuzzer: install libclang-rt-14-dev (scripts/deps.sh)" >&2
	exit 1
fi

mkdir -p "$OUT/logs"
bins=$(for t in $targets; do printf '%s ' "$OUT/$t"; done)
# shellcheck disable=SC2086 # one word per binary
if ! nice -n 10 make --no-print-directory -j"$(nproc)" $bins >"$OUT/logs/build.log" 2>&1; then
	tail -n 30 "$OUT/logs/build.log" >&2
	# A binary left from an earlier build would test old code: nothing is replayed.
	[ $mode = regress ] && echo "FAIL fuzz-build: the targets do not build (log: $OUT/logs/build.log)"
	echo "fuzz.sh: the build failed (log: $OUT/logs/build.log)" >&2
	exit 1
fi

# ---- --regress: every saved input once ----

regress_one() { # target
	local t=$1 bin=$OUT/$1 log failed=() ninputs=0 why f rc
	local inputs=()

	for f in "$SRC/regressions/$t"/* "$SRC/seeds/$t"/*; do
		[ -f "$f" ] && [ "$(basename "$f")" != .gitkeep ] && inputs+=("$f")
	done
	# One run per input: libFuzzer stops at the first input that fails, and each must be told.
	for f in "${inputs[@]}"; do
		ninputs=$((ninputs + 1))
		log=$OUT/logs/$t.regress.log
		nice -n 10 "$bin" -timeout="$FUZZ_TIMEOUT" -rss_limit_mb="$FUZZ_RSS_MB" "$f" \
			>"$log" 2>&1
		rc=$?
		why=$(verdict "$log")
		if [ $rc -ne 0 ] || [ -n "$why" ]; then
			failed+=("${f#"$SRC"/} (${why:-exit status $rc})")
			cp "$log" "$OUT/logs/$t.$(basename "$f").log"
		fi
	done
	if [ ${#failed[@]} -eq 0 ]; then
		echo "PASS $t: $ninputs inputs"
	else
		local list
		list=$(printf '%s; ' "${failed[@]}")
		echo "FAIL $t: ${#failed[@]} of $ninputs inputs: ${list%; } (logs: $OUT/logs/$t.*.log)"
	fi
	[ ${#failed[@]} -eq 0 ]
}

if [ $mode = regress ]; then
	status=0
	for t in $targets; do
		regress_one "$t" || status=1
	done
	exit $status
fi

# ---- a campaign: FUZZ_SECONDS per target ----

fuzz_one() { # target
	local t=$1 corpus=$OUT/corpus/$1 art=$OUT/artifacts/$1/ log=$OUT/logs/$1.log
	local dict=$OUT/dict/$1.dict rc why execs eps cov ft units result input

	mkdir -p "$corpus" "$art" "$OUT/dict"
	: >"$dict"
	for fmt in $(dict_formats "$t"); do
		cat "$SRC/dict/$fmt.dict" >>"$dict"
	done
	nice -n 10 "$OUT/$t" -max_total_time="$FUZZ_SECONDS" ${FUZZ_RUNS:+-runs="$FUZZ_RUNS"} \
		-timeout="$FUZZ_TIMEOUT" -rss_limit_mb="$FUZZ_RSS_MB" -print_final_stats=1 -dict="$dict" \
		-artifact_prefix="$art" "$corpus" "$SRC/seeds/$t" >"$log" 2>&1
	rc=$?
	why=$(verdict "$log")
	execs=$(grep -m1 -o 'number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')
	eps=$(grep -m1 -o 'average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 | grep -o '[0-9]*$')
	ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n1 | grep -o '[0-9]*$')
	units=$(find "$corpus" -type f | wc -l)
	if [ $rc -eq 0 ] && [ -z "$why" ]; then
		result=PASS
	else
		input=$(grep -m1 -o 'Test unit written to .*' "$log" | cut -c22-)
		result=FAIL
		why="${why:-exit status $rc}; input: ${input:-none} log: $log"
	fi
	printf '%s %-20s execs %-10s exec/s %-7s cov %-6s ft %-7s corpus %-6s %s\n' "$result" \
		"$t:" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "$units" "${why:-}"
	[ "$result" = PASS ]
}

status=0
running=0
for t in $targets; do
	if [ "$FUZZ_JOBS" -gt 1 ]; then
		fuzz_one "$t" &
		running=$((running + 1))
		if [ $running -ge "$FUZZ_JOBS" ]; then
			wait -n || status=1
			running=$((running - 1))
		fi
	else
		fuzz_one "$t" || status=1
	fi
done
while [ $running -gt 0 ]; do
	wait -n || status=1
	running=$((running - 1))
done
if [ $status -ne 0 ]; then
	echo "fuzz.sh: failures above; replay one with $OUT/<target> <input>, and keep it in" \
		"tests/fuzz/regressions/<target>/" >&2
fi
exit $status
