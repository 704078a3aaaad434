#!/usr/bin/env bash
# Installs the Debian packages tokenscope needs, for the purposes named (several allowed):
#   demo     make demo: tokenscope, the reference server and the ground-truth client built, and
#            scripts/demo.sh run
#   test     make (all), make STATIC=1, make fuzz, make stress, and tests/run.sh but for its
#            arm64 and html groups
#   cross    make cross, and tests/run.sh's arm64 and arm64-vm groups (x86_64 only)
#   browser  tests/run.sh's html group (the report opened in headless Chromium)
#   bench    make bench
#   image    make image (the static binary and its OCI image), and tests/run.sh's container
#            group (a private containerd running the image)
#   all      every one of them (also what no purpose means)
# make check installs test (which includes image), cross and browser. Idempotent: installs only
# what is missing, and says what it installs. --list prints the packages of the purposes named,
# one a line, installed or not, and installs nothing.
set -euo pipefail

usage() {
	echo "usage: scripts/deps.sh [--list] [demo|test|cross|browser|bench|image|all]..." >&2
	exit 2
}

# make demo. Every header and -l flag of .output/tokenscope, .output/refserver and
# .output/gtclient (Makefile: LDLIBS and their rules), and every command scripts/demo.sh runs
# that is not in Debian's essential set.
DEMO=(
	# the compilers and make; libc6-dev: libc's headers, and the kernel's (linux-libc-dev:
	# <linux/*.h>, and the <asm/errno.h> the BPF program includes through libbpf's usdt.bpf.h)
	make gcc libc6-dev clang llvm bpftool
	# the loader: libbpf, libelf and zlib (-lbpf -lelf -lz)
	libbpf-dev libelf-dev zlib1g-dev
	# HTTP/2 header decompression (HPACK): tokenscope's and the ground-truth client's
	libnghttp2-dev
	# headers of the libraries the dynamic tokenscope opens at run time when a feature needs
	# them: capstone (Go TLS: the RET instructions of crypto/tls functions, probed one by one),
	# libmicrohttpd (the metrics endpoint), libcurl (OTLP export)
	libcapstone-dev libmicrohttpd-dev libcurl4-openssl-dev
	# JSON in the reference server and the client (read with a parser other than tokenscope's),
	# and the client's https (tests/gtclient.c --tls)
	libcjson-dev libssl-dev
	# scripts/demo.sh compares tokenscope's figures with the client's
	python3
)

# The rest of make (all) beyond the demo's binaries, for test, cross and bench: the unit and BPF
# tests, the stand-in libraries, the CUPTI injection library, the static build.
BUILD=(
	# test_bpf_gotls's Go crypto/tls pair (.output/gotlspair)
	golang-go
	# the USDT probes of the CUPTI injection library (cupti/), built where CUDA's headers are
	systemtap-sdt-dev
	# make STATIC=1 (make check): libelf's static archive needs zstd's
	libzstd-dev
)

# tests/run.sh (but arm64 and html), make fuzz, make stress.
TEST=(
	# libFuzzer, for make fuzz and the fuzz group (tests/fuzz/)
	libclang-rt-14-dev
	# the metrics endpoint's tests (promtool, prometheus, curl); openssl makes the https test's
	# certificate (tests/otlp/)
	prometheus curl openssl
	# end-to-end test servers and tools
	python3-fastapi python3-uvicorn python3-uvloop python3-httptools python3-aiohttp
	nodejs strace iproute2 procps
	# HTTP/2 and gRPC stacks of the e2e test and the fixtures (hypercorn, grpcio, httpx + h2)
	python3-hypercorn python3-grpcio python3-h2 python3-httpx
	# the TLS-terminating reverse proxy of the e2e test (run from the test, never as a service)
	nginx
	# make stress: the stacks of a tracer that stopped reporting
	gdb
	# the kernel matrix (tests/kernels/): Debian's 5.10, 6.1 and 6.12 kernels booted in an
	# emulated x86 machine from an initramfs whose shell and tools are busybox's
	qemu-system-x86 busybox-static
	# make install's test (tests/cli/run_install.sh): the manual page rendered and checked
	man-db groff-base bsdextrautils
)

# make image (scripts/image.sh: an OCI image FROM scratch, built offline) and the container test
# (tests/container/run_container.sh: a private containerd, and runc under it, running that image
# beside a server's). containerd's service is installed, not started (below); the test starts
# its own daemon.
IMAGE=(umoci skopeo containerd runc ca-certificates)

# The HTML report's test (tests/html/): the page opened in a headless browser.
BROWSER=(chromium)

# make bench (scripts/bench.py): the alternatives a user has today, measured beside tokenscope
# (a bpftrace uprobe script, strace), and the TLS section's certificate (openssl).
BENCH=(bpftrace strace openssl)

# The arm64 cross build that make check runs on x86 (make cross; docs/building.md,
# "arm64"): the cross compiler, the arm64 libraries the tracer and its tests link (multiarch),
# qemu-user to run the unit tests and qemu-system to boot an arm64 kernel for the BPF tests
# (tests/arm64/run_vm.sh). libc6:arm64 puts the arm64 loader where the binaries look for it.
# Nothing on another machine: make cross does nothing there.
CROSS=()
if [ "$(uname -m)" = x86_64 ]; then
	CROSS=(
		gcc-aarch64-linux-gnu qemu-user-static qemu-system-arm libc6:arm64 libc6-dev:arm64
		linux-libc-dev:arm64 libbpf-dev:arm64 libelf-dev:arm64 zlib1g-dev:arm64
		libzstd-dev:arm64 libcjson-dev:arm64 libmicrohttpd-dev:arm64
		libnghttp2-dev:arm64 libcapstone-dev:arm64 libcurl4-openssl-dev:arm64
		libssl-dev:arm64
	)
fi

list=0
purposes=()
for a in "$@"; do
	case $a in
	--list) list=1 ;;
	demo | test | cross | browser | bench | image | all) purposes+=("$a") ;;
	*) usage ;;
	esac
done
[ ${#purposes[@]} -gt 0 ] || purposes=(all)

# Each purpose builds the tracer: the demo's packages are in every one.
PKGS=()
for p in "${purposes[@]}"; do
	case $p in
	demo) PKGS+=("${DEMO[@]}") ;;
	test) PKGS+=("${DEMO[@]}" "${BUILD[@]}" "${TEST[@]}" "${IMAGE[@]}") ;;
	cross) PKGS+=("${DEMO[@]}" "${BUILD[@]}" "${CROSS[@]}") ;;
	browser) PKGS+=("${DEMO[@]}" "${BROWSER[@]}") ;;
	bench) PKGS+=("${DEMO[@]}" "${BUILD[@]}" "${BENCH[@]}") ;;
	image) PKGS+=("${DEMO[@]}" libzstd-dev "${IMAGE[@]}") ;;
	all) PKGS+=("${DEMO[@]}" "${BUILD[@]}" "${TEST[@]}" "${IMAGE[@]}" "${BROWSER[@]}" "${BENCH[@]}" "${CROSS[@]}") ;;
	esac
done
# Each once, in the order first named.
mapfile -t PKGS < <(printf '%s\n' "${PKGS[@]}" | awk 'NF && !seen[$0]++')

if [ "$list" -eq 1 ]; then
	printf '%s\n' "${PKGS[@]}"
	exit 0
fi

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null ||
		missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "deps.sh: missing packages: ${missing[*]}; run as root to install them" >&2
	exit 1
fi
echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Packages with a service (nginx, containerd) are installed without starting it: the tests start their own.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod +x "$policy"
	trap 'rm -f "$policy"' EXIT
fi
# The :arm64 packages come from the arm64 architecture, added once (before the update that
# fetches its lists).
if printf '%s\n' "${missing[@]}" | grep ':arm64$' >/dev/null &&
	! dpkg --print-foreign-architectures | grep -x arm64 >/dev/null; then
	dpkg --add-architecture arm64
fi
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
