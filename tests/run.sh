#!/usr/bin/env bash
# Runs every test program and script; each prints PASS/FAIL/SKIP lines. Ends with the totals
# line "N passed, N failed, N skipped" and exits non-zero if anything failed.
# TESTS=docs|unit|arm64|arm64-vm|kernels|bpf|cli|static|container|golden|html|prom|e2e|fuzz|stress
# (space separated) runs a subset; docs checks that every relative link and #anchor of the README and
# docs/ resolves (tests/docs/check_links.py) and that no script under pipefail ends a pipeline
# with a reader that stops early (tests/docs/check_pipes.py); container runs make image's image in a private
# containerd beside a server in a pod-like container (tests/container/); html opens the HTML
# report in headless Chromium (tests/html/); arm64-vm runs the arm64 BPF tests in an emulated
# arm64 machine (about two minutes, and a Debian arm64 kernel package downloaded once); kernels
# boots Debian's 5.10, 6.1 and 6.12 kernels in qemu and traces in each (tests/kernels/, about
# two minutes, the packages downloaded once); bpf runs each BPF test twice, the second time with
# every kernel feature that has a stand-in turned off (what a 5.10 kernel gets).
# CHECK_FUZZ_SECONDS (default 10) is how long the short campaign fuzzes each target.
set -u
cd "$(dirname "$0")/.."
OUT=.output
LOG=$OUT/test-logs
mkdir -p "$LOG"
export TS_FIXTURES=tests/fixtures
TESTS=${TESTS:-"docs unit arm64 arm64-vm kernels bpf cli static container golden html prom e2e fuzz stress"}
passed=0 failed=0 skipped=0

run() { # name command...
	local name=$1 log="$LOG/$1.log"
	shift
	echo "== $name"
	"$@" >"$log" 2>&1
	local rc=$?
	grep -E '^(PASS|FAIL|SKIP) ' "$log" | sed 's/^/  /'
	local p f s
	p=$(grep -c '^PASS ' "$log")
	f=$(grep -c '^FAIL ' "$log")
	s=$(grep -c '^SKIP ' "$log")
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		# A crash or an early exit is a failure even when no test said FAIL.
		echo "  FAIL $name: exited with status $rc (log: $log)"
		tail -n 20 "$log" | sed 's/^/    /'
		f=1
	elif [ "$f" -gt 0 ]; then
		grep -vE '^(PASS|SKIP) ' "$log" | grep -vE '^[0-9]+ passed' | head -n 40 | sed 's/^/    /'
	fi
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
}

for t in $TESTS; do
	case $t in
	docs)
		run docs-links /usr/bin/python3 tests/docs/check_links.py
		run docs-links-self /usr/bin/python3 tests/docs/check_links.py --self-test
		run docs-layout /usr/bin/python3 tests/docs/check_layout.py
		run docs-layout-self /usr/bin/python3 tests/docs/check_layout.py --self-test
		run includes /usr/bin/python3 tests/docs/check_includes.py
		run includes-self /usr/bin/python3 tests/docs/check_includes.py --self-test
		run functions /usr/bin/python3 tests/docs/check_functions.py
		run functions-self /usr/bin/python3 tests/docs/check_functions.py --self-test
		run pipes /usr/bin/python3 tests/docs/check_pipes.py
		;;
	unit)
		for b in "$OUT"/tests/test_*; do
			case $(basename "$b") in test_bpf_*) continue ;; esac
			run "$(basename "$b")" "$b"
		done
		;;
	arm64)
		# The arm64 cross build (make cross, run by make check on x86): its unit tests under
		# qemu-user, called directly so no binfmt is needed (the arm64 loader and libraries
		# are the multiarch ones), and its BPF object checked, as no arm64 kernel is here to
		# load it.
		if [ "$(uname -m)" != x86_64 ]; then
			echo "== arm64"
			echo "  SKIP arm64: a cross build from x86 only (the unit group ran natively)"
			skipped=$((skipped + 1))
			continue
		fi
		for b in "$OUT"/arm64/tests/test_*; do
			# The BPF tests need an arm64 kernel: group arm64-vm.
			case $(basename "$b") in test_bpf_*) continue ;; esac
			[ -x "$b" ] || continue
			run "arm64-$(basename "$b")" qemu-aarch64-static "$b"
		done
		run arm64-bpf-object tests/arm64/check_bpf.sh
		;;
	arm64-vm)
		run arm64-vm tests/arm64/run_vm.sh
		;;
	kernels)
		run kernels /usr/bin/python3 tests/kernels/run_matrix.py
		;;
	bpf)
		for b in "$OUT"/tests/test_bpf_*; do
			[ -x "$b" ] && run "$(basename "$b")" "$b"
		done
		for b in "$OUT"/tests/test_bpf_*; do
			[ -x "$b" ] && run "$(basename "$b")-standins" \
				env TOKENSCOPE_FEATURES_OFF=task_storage,task_btf,atomics,bpf_cookie,bpf_loop,sk_data_ready "$b"
		done
		;;
	cli)
		run cli tests/cli/run_cli.sh
		run k8s-names tests/cli/run_k8s_names.sh
		run hold tests/cli/run_hold.sh
		run check tests/cli/run_check.sh
		run ttft-definitions /usr/bin/python3 tests/cli/run_ttft.py
		run privilege tests/priv/run_priv.sh
		run demo-deps tests/cli/run_demo_deps.sh
		run install tests/cli/run_install.sh
		run width /usr/bin/python3 tests/cli/run_width.py
		;;
	static)
		run static tests/static/run_static.sh
		;;
	container)
		run container tests/container/run_container.sh
		;;
	golden)
		run golden tests/golden/run_golden.sh
		run e2e-compare /usr/bin/python3 tests/e2e/test_compare.py
		;;
	html)
		run html tests/html/run_html.sh
		;;
	fuzz)
		run fuzz-regress scripts/fuzz.sh --regress
		run fuzz-short env FUZZ_SECONDS="${CHECK_FUZZ_SECONDS:-10}" FUZZ_RUNS= scripts/fuzz.sh
		;;
	stress)
		run stress tests/stress/run_stress.sh
		;;
	prom)
		run prom tests/prom/run_prom.sh
		run listener tests/prom/run_listener.sh
		run nvml tests/prom/run_nvml.sh
		run grafana tests/prom/run_grafana.sh
		run cost /usr/bin/python3 tests/prom/run_cost.py
		run otlp-live tests/otlp/run_live.sh
		run otlp-report tests/otlp/run_report.sh
		;;
	e2e)
		run e2e /usr/bin/python3 tests/e2e/run_e2e.py
		run e2e-twonode /usr/bin/python3 tests/e2e/run_twonode.py
		run e2e-gpu /usr/bin/python3 tests/e2e/run_gpu_e2e.py
		run e2e-cupti /usr/bin/python3 tests/e2e/run_cupti_e2e.py
		run gpu-check-dry tests/e2e/run_gpu_check_dry.sh
		;;
	esac
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
