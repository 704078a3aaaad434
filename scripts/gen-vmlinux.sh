#!/usr/bin/env bash
# Regenerates vmlinux/<arch>/vmlinux.h from the running kernel's BTF. The BPF programs use
# CO-RE, so the committed header only needs the types; field offsets are relocated at load.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=$(uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
btf=${1:-/sys/kernel/btf/vmlinux}
[ -r "$btf" ] || { echo "gen-vmlinux.sh: $btf not readable: kernel without BTF?" >&2; exit 1; }
mkdir -p "vmlinux/$arch"
bpftool btf dump file "$btf" format c >"vmlinux/$arch/vmlinux.h.tmp"
mv "vmlinux/$arch/vmlinux.h.tmp" "vmlinux/$arch/vmlinux.h"
echo "wrote vmlinux/$arch/vmlinux.h from $btf"
