# shellcheck shell=bash
# Sourced by make_golden.sh and run_golden.sh: the outputs of `tokenscope report` that are kept
# for each recording, and how each is made.
#
# golden_outputs REC DIR: writes into DIR every output of recording REC (a .tsr path), one file
# per kind (REC's base name, then the kind):
#   .text       report (the request lines, summary, diagnosis) on stdout
#   .text.err   its stderr, then "exit N"
#   .jsonl      report --json --tokens --gpu-steps on stdout (requests and GPU steps)
#   .json.err   its stderr (the summary goes there with --json), then "exit N"
#   .slo        report --json --slo 'ttft<=0.1ms,tpot<=1ms,e2e<=30ms': the request lines with
#               their verdicts and the JSON summary (stdout), then the text summary (stderr)
#   .prom       report --prometheus --by-process --alert 'ttft.p99 > 5ms' on stdout
#   .timeline   report --timeline FILE: the file
#   .otlp       report --otlp to tests/otlp/receiver.py with --trace-sample 1 and --slow-ttft 8ms:
#               every span of every body, in the order sent, with the random trace and span
#               ids put in order of first appearance (otlp_norm.py)
# Needs TS (the tokenscope binary) and PY (python3).
golden_outputs() {
	local rec=$1 dir=$2 base rc port tmp rpid
	base=$dir/$(basename "$rec" .tsr)
	"$TS" report "$rec" >"$base.text" 2>"$base.text.err"
	echo "exit $?" >>"$base.text.err"
	"$TS" report --json --tokens --gpu-steps "$rec" >"$base.jsonl" 2>"$base.json.err"
	echo "exit $?" >>"$base.json.err"
	{
		"$TS" report --json --slo 'ttft<=0.1ms,tpot<=1ms,e2e<=30ms' "$rec" 2>"$base.slo.tmp"
		echo "exit $?"
		cat "$base.slo.tmp"
	} >"$base.slo"
	rm -f "$base.slo.tmp"
	"$TS" report --prometheus --by-process --alert 'ttft.p99 > 5ms' "$rec" >"$base.prom" \
		2>/dev/null
	"$TS" report --timeline "$base.timeline" "$rec" >/dev/null 2>&1
	tmp=$(mktemp -d)
	"$PY" tests/otlp/receiver.py --dir "$tmp/bodies" --port-file "$tmp/port" &
	rpid=$!
	for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
	port=$(cat "$tmp/port" 2>/dev/null)
	"$TS" report --otlp "http://127.0.0.1:$port/golden/v1/traces" --trace-sample 1 \
		--slow-ttft 8ms "$rec" >/dev/null 2>"$tmp/otlp.err"
	rc=$?
	kill "$rpid" 2>/dev/null
	wait "$rpid" 2>/dev/null
	{
		"$PY" tests/golden/otlp_norm.py "$tmp/bodies/golden"
		echo "exit $rc"
	} >"$base.otlp"
	rm -rf "$tmp"
}

# shellcheck disable=SC2034 # read by the scripts that source this
GOLDEN_KINDS="text text.err jsonl json.err slo prom timeline otlp"
