#!/usr/bin/env bash
# Installs the Debian packages tokenscope needs to build, test, demo and benchmark.
# Idempotent: installs only what is missing, and says what it installs.
set -euo pipefail

PKGS=(
	# build
	clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev libzstd-dev make gcc
	libclang-rt-14-dev # libFuzzer, for make fuzz (tests/fuzz/)
	# the metrics endpoint (libmicrohttpd) and its tests (promtool, prometheus)
	libmicrohttpd-dev prometheus curl
	# HTTP/2 header decompression (HPACK)
	libnghttp2-dev
	# Go TLS: the RET instructions of crypto/tls functions, probed one by one (x86 decoder)
	libcapstone-dev
	# OTLP export: libcurl's header (the library is loaded at run time); openssl makes the
	# https test's certificate
	libcurl4-openssl-dev openssl
	# the ground-truth client's https (tests/gtclient.c --tls)
	libssl-dev
	# JSON in the test programs (refserver, gtclient, unit tests and fuzz targets read what
	# tokenscope writes with a parser other than its own)
	libcjson-dev
	# end-to-end test servers and tools
	python3 python3-fastapi python3-uvicorn python3-uvloop python3-httptools python3-aiohttp
	golang-go nodejs strace bpftrace iproute2 procps
	# HTTP/2 and gRPC stacks of the e2e test and the fixtures (hypercorn, grpcio, httpx + h2)
	python3-hypercorn python3-grpcio python3-h2 python3-httpx
	# the TLS-terminating reverse proxy of the e2e test (run from the test, never as a service)
	nginx
	# make stress: the stacks of a tracer that stopped reporting
	gdb
	# the USDT probes of the CUPTI injection library (cupti/)
	systemtap-sdt-dev
	# the HTML report's test (tests/html/): the page opened in a headless browser
	chromium
)

# The arm64 cross build that make check runs on x86 (make cross; docs/building.md, "arm64"):
# the cross compiler, the arm64 libraries the tracer and its tests link (multiarch),
# qemu-user to run the unit tests and qemu-system to boot an arm64 kernel for the BPF tests (tests/arm64/run_vm.sh).
# libc6:arm64 puts the arm64 loader where the binaries look for it.
if [ "$(uname -m)" = x86_64 ]; then
	PKGS+=(
		gcc-aarch64-linux-gnu qemu-user-static qemu-system-arm libc6:arm64 libc6-dev:arm64
		linux-libc-dev:arm64 libbpf-dev:arm64 libelf-dev:arm64 zlib1g-dev:arm64
		libzstd-dev:arm64 libcjson-dev:arm64 libmicrohttpd-dev:arm64
		libnghttp2-dev:arm64 libcapstone-dev:arm64 libcurl4-openssl-dev:arm64
		libssl-dev:arm64
	)
fi

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
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
# Packages with a service (nginx) are installed without starting it: the tests start their own.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod +x "$policy"
	trap 'rm -f "$policy"' EXIT
fi
# The :arm64 packages come from the arm64 architecture, added once (before the update that
# fetches its lists).
if printf '%s\n' "${missing[@]}" | grep -q ':arm64$' &&
	! dpkg --print-foreign-architectures | grep -qx arm64; then
	dpkg --add-architecture arm64
fi
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
