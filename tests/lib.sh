# shellcheck shell=bash
# What the shell test scripts share: PASS/FAIL/SKIP lines (tests/run.sh counts them) and the
# totals line. Sourced after the script sets TMP, its scratch folder: a FAIL shows the tail of
# every non-empty $TMP/*.err, and of the files in KO_LOGS.
pass=0 fail=0 skip=0

ok() { echo "PASS $1"; pass=$((pass + 1)); }

ko() { # name why
	echo "FAIL $1: $2"
	fail=$((fail + 1))
	for f in "$TMP"/*.err ${KO_LOGS:-}; do [ -s "$f" ] && { echo "--- $f"; tail -n 5 "$f"; }; done
}

sk() { echo "SKIP $1: $2"; skip=$((skip + 1)); }

# SIGINT to every process in the array pids, up to 3 s each to exit, then SIGKILL.
stop_pids() {
	for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do
		for _ in $(seq 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null
	done
}

# The totals line; exits 0 when nothing failed.
finish() {
	echo "$pass passed, $fail failed, $skip skipped"
	[ "$fail" -eq 0 ]
	exit
}
