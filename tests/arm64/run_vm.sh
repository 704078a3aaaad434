#!/usr/bin/env bash
# The arm64 BPF tests (tests/bpf/, cross-built by make ARCH=arm64) on a real arm64 kernel: a
# Debian arm64 kernel booted in qemu-system-aarch64 (emulated, so no arm64 machine is needed),
# from an initramfs that holds the tests, the arm64 libraries they load and an init
# (vminit.c) that runs them and powers off. Prints the tests' PASS/FAIL lines.
# test_bpf_gotls's Go program is static (CGO_ENABLED=0) and needs no library.
#
# The kernel: ARM64_KERNEL (a vmlinuz, or a linux-image-*-arm64-unsigned .deb), else the newest
# Debian 12 linux-image-6.12*-arm64-unsigned, downloaded once into .output/arm64/vm (6.1, the
# release's first kernel, lacks the sk_data_ready tracepoint the programs attach to).
# test_bpf_cuda is left out: it hooks the CUDA toolkit's libcudart, which is x86-64's.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=.output/arm64
VM=$OUT/vm
TESTS_IN_VM=(test_bpf_capture test_bpf_traffic test_bpf_tls test_bpf_gotls)
# Generous: booting and the tests take about a minute under emulation on 2 cores.
VM_TIMEOUT=${ARM64_VM_TIMEOUT:-900}
mkdir -p "$VM"

for t in "${TESTS_IN_VM[@]}"; do
	[ -x "$OUT/tests/$t" ] || { echo "FAIL arm64_vm: $OUT/tests/$t missing (make ARCH=arm64)"; exit 1; }
done
for f in vminit gotlspair; do
	[ -x "$OUT/$f" ] || { echo "FAIL arm64_vm: $OUT/$f missing (make ARCH=arm64)"; exit 1; }
done
command -v qemu-system-aarch64 >/dev/null ||
	{ echo "FAIL arm64_vm: qemu-system-aarch64 missing (qemu-system-arm: scripts/deps.sh)"; exit 1; }

kernel=${ARM64_KERNEL:-}
if [ -z "$kernel" ]; then
	kernel=$(ls "$VM"/linux-image-*-arm64-unsigned_*.deb 2>/dev/null | sort -V | tail -n 1 || true)
	if [ -z "$kernel" ]; then
		pkg=$(apt-cache search --names-only '^linux-image-6\.12\..*-arm64-unsigned$' |
			awk '$1 !~ /cloud|rt-arm64/ {print $1}' | sort -V | tail -n 1)
		[ -n "$pkg" ] || { echo "FAIL arm64_vm: no linux-image-6.12*-arm64-unsigned in apt's lists (dpkg --add-architecture arm64; apt-get update)"; exit 1; }
		(cd "$VM" && apt-get download "$pkg:arm64" >/dev/null 2>&1) ||
			{ echo "FAIL arm64_vm: apt-get download $pkg:arm64 failed"; exit 1; }
		kernel=$(ls "$VM"/linux-image-*-arm64-unsigned_*.deb | sort -V | tail -n 1)
	fi
fi
if [ "${kernel%.deb}" != "$kernel" ]; then
	rm -rf "$VM/pkg"
	dpkg-deb -x "$kernel" "$VM/pkg"
	image=$(find "$VM"/pkg/boot -name 'vmlinuz-*' -print -quit)
else
	image=$kernel
fi
echo "arm64 kernel: $(basename "$kernel")"

# The initramfs: init, the tests and every library they load, at the paths the arm64 loader
# looks in (as qemu-user resolves them here, from the multiarch packages).
root=$VM/root
rm -rf "$root"
mkdir -p "$root/work/tests" "$root/dev"
cp "$OUT/vminit" "$root/init"
# test_bpf_gotls runs it by its path in the build, from /work.
mkdir -p "$root/work/$OUT"
cp "$OUT/gotlspair" "$root/work/$OUT/"
for t in "${TESTS_IN_VM[@]}"; do
	cp "$OUT/tests/$t" "$root/work/tests/"
	qemu-aarch64-static -E LD_TRACE_LOADED_OBJECTS=1 "$OUT/tests/$t" |
		awk '{for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i}'
done | sort -u | while read -r lib; do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
/usr/bin/python3 tests/arm64/mkinitrd.py "$VM/initrd.gz" "$root"

args=()
for t in "${TESTS_IN_VM[@]}"; do
	args+=("/work/tests/$t")
done
log=$VM/console.log
timeout "$VM_TIMEOUT" qemu-system-aarch64 -M virt -cpu max -smp 2 -m 1024 -nographic \
	-no-reboot -nic none -kernel "$image" -initrd "$VM/initrd.gz" \
	-append "console=ttyAMA0 panic=-1 quiet -- ${args[*]}" >"$log" 2>&1 || true
# The console ends lines with CR LF.
tr -d '\r' <"$log" | grep -vE '^\[ *[0-9]+\.[0-9]+\]' | grep -vE '^[0-9]+ passed' || true
for t in "${TESTS_IN_VM[@]}"; do
	if ! tr -d '\r' <"$log" | grep "^vminit: /work/tests/$t exited 0$" >/dev/null; then
		echo "FAIL arm64_vm_$t: did not exit 0 in the VM (console: $log)"
		fail=1
	fi
done
exit "${fail:-0}"
