#!/usr/bin/env bash
# make demo does the demo's work alone (issue 27): scripts/deps.sh demo lists the packages that
# build tokenscope, the reference server and the ground-truth client and run scripts/demo.sh,
# and none that only the tests, the cross build, the browser test or the bench need; make demo
# installs those and builds those three binaries, with no test, sanitizer, fuzzer, stand-in or
# static build (a dry run into an empty output folder, so everything would be built); make
# check still installs what the tests, the cross build and the browser test need. Needs neither
# root nor a build. Prints PASS/FAIL lines and the totals line.
set -u
cd "$(dirname "$0")/../.." || exit 1
TMP=$(mktemp -d)
. tests/lib.sh
trap 'rm -rf "$TMP"' EXIT
# A make of our own, not a sub-make of the make check that may have started this test.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make "$@"; }

# 1. The demo's packages.
if ! scripts/deps.sh --list demo >"$TMP/demo.pkgs" 2>"$TMP/list.err"; then
	ko "deps_list_demo" "scripts/deps.sh --list demo failed"
else
	missing=""
	for p in make gcc clang llvm bpftool libbpf-dev libelf-dev libnghttp2-dev libcjson-dev \
		libssl-dev python3; do
		grep -qx "$p" "$TMP/demo.pkgs" || missing+=" $p"
	done
	# What the tests (e2e stacks, promtool, stress, fuzz, the static build, the Go TLS pair),
	# the cross build, the browser test and the bench need, and the demo does not.
	extra=$(grep -E '^(chromium|nginx|golang|qemu|gcc-aarch64|prometheus|gdb|bpftrace|strace|nodejs|python3-|libclang-rt|systemtap|libzstd-dev|curl$|openssl$)|:arm64$' \
		"$TMP/demo.pkgs" | tr '\n' ' ')
	if [ -n "$missing" ]; then
		ko "deps_list_demo" "the demo's list lacks$missing"
	elif [ -n "$extra" ]; then
		ko "deps_list_demo" "the demo's list has what the demo does not need: $extra"
	else
		ok "deps_list_demo ($(wc -l <"$TMP/demo.pkgs") packages, none of the tests', cross build's, browser's or bench's)"
	fi
fi

# 2. make check installs what every test group needs: all of scripts/deps.sh's packages but the
# bench's own (bpftrace).
scripts/deps.sh --list all | sort >"$TMP/all.pkgs"
# (Without CUDA's headers the Makefile says on stdout that the CUPTI library is not built.)
nocupti='^CUPTI headers not found'
check_deps=$(mk -s -n deps-check 2>"$TMP/check.err" | grep -v "$nocupti")
check_prereq=$(mk -pq check 2>/dev/null | grep -E '^check:' | head -n 1)
# shellcheck disable=SC2086 # the purposes, one word each
$check_deps --list 2>>"$TMP/check.err" | sort >"$TMP/check.pkgs"
left=$(comm -23 "$TMP/all.pkgs" "$TMP/check.pkgs" | tr '\n' ' ')
if [ "$check_prereq" != "check: deps-check" ]; then
	ko "deps_check" "make check's prerequisites are '$check_prereq', not deps-check"
elif [ "$check_deps" != "scripts/deps.sh test cross browser" ]; then
	ko "deps_check" "make deps-check runs '$check_deps', not scripts/deps.sh test cross browser"
elif [ "$left" != "bpftrace " ]; then
	ko "deps_check" "make check's packages leave out '$left' (bpftrace alone expected)"
else
	ok "deps_check (test cross browser: every package but the bench's bpftrace)"
fi

# 3. What make demo would run, with everything to build.
O=$TMP/out
mkdir -p "$O"
if ! mk -n demo OUTPUT="$O" 2>"$TMP/demo.err" | grep -v "$nocupti" >"$TMP/demo.n" ||
	[ "${PIPESTATUS[0]}" -ne 0 ]; then
	ko "demo_dry_run" "make -n demo failed"
	finish
fi
# The folder's files each command writes (-o FILE, >FILE), relative to the output folder.
grep -oE -- "(-o |> ?)$O/[^ ;]*" "$TMP/demo.n" | sed -E "s|^(-o \|> ?)$O/||" | sort -u \
	>"$TMP/written"
# The tracer (its objects, its BPF objects and skeletons, the default and the legacy one for
# kernels before 5.13, the HTML page as a C string), the reference server and the ground-truth
# client.
odd=$(grep -vxE 'tokenscope|refserver|gtclient|(legacy/)?tokenscope\.bpf\.o(\.tmp)?|(legacy/)?tokenscope\.skel\.h|html_page\.h(\.tmp)?|user/[a-z]+/[a-z0-9_]+\.o' \
	"$TMP/written" | tr '\n' ' ')
lacks=""
for f in tokenscope refserver gtclient tokenscope.bpf.o; do
	grep -qx "$f" "$TMP/written" || lacks+=" $f"
done
if [ -n "$odd" ]; then
	ko "demo_builds_only_demo" "make demo would also write $odd"
elif grep -qE -- '-fsanitize|/san/|/tests/|/fuzz/|go build|-static|standin|cupti' "$TMP/demo.n"; then
	ko "demo_builds_only_demo" "make demo would run: $(grep -m 1 -E -- '-fsanitize|/san/|/tests/|/fuzz/|go build|-static|standin|cupti' "$TMP/demo.n" | cut -c1-160)"
elif [ -n "$lacks" ]; then
	ko "demo_builds_only_demo" "make demo would not build$lacks"
else
	ok "demo_builds_only_demo ($(wc -l <"$TMP/written") files: tokenscope and its objects, refserver, gtclient)"
fi
first=$(head -n 1 "$TMP/demo.n")
last=$(tail -n 1 "$TMP/demo.n")
if [ "$first" != "scripts/deps.sh demo" ]; then
	ko "demo_deps_then_demo" "make demo starts with '$first', not scripts/deps.sh demo"
elif [ "$last" != "scripts/demo.sh" ]; then
	ko "demo_deps_then_demo" "make demo ends with '$last', not scripts/demo.sh"
else
	ok "demo_deps_then_demo (scripts/deps.sh demo, the build, scripts/demo.sh)"
fi
finish
