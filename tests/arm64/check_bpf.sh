#!/usr/bin/env bash
# The arm64 cross build's BPF object and binary (make ARCH=arm64), checked without an arm64
# kernel, which loading them needs: the object's BTF reads, its programs are the x86 object's,
# its syscall program compares the syscall number with arm64's numbers (taken from the kernel's
# generic header, not from bpf/) and with none of x86's, its first syscall argument is read as
# orig_x0 through CO-RE and its Go probe reads g from x28; the tracer starts under qemu-user.
# Prints PASS/FAIL lines like the C tests.
set -u
cd "$(dirname "$0")/../.."
OBJ=.output/arm64/tokenscope.bpf.o
BIN=.output/arm64/tokenscope
HDR=/usr/include/asm-generic/unistd.h
fail=0

check() { # name ok(0/1) detail
	if [ "$2" -eq 0 ]; then
		echo "PASS $1"
	else
		echo "FAIL $1: $3"
		fail=1
	fi
}

[ -f "$OBJ" ] || { echo "FAIL arm64_bpf_object: $OBJ missing (make ARCH=arm64)"; exit 1; }

btf=$(bpftool btf dump file "$OBJ" 2>&1)
check arm64_bpf_btf $? "bpftool btf dump: $(echo "$btf" | tail -n 1)"

# The programs, by section, against the native object's (or the list as it stands, without one).
secs=$(llvm-objdump -h "$OBJ" | awk '$2 ~ /^(tp_btf|uprobe|uretprobe|usdt)/ {print $2}' | sort -u)
if [ -f .output/tokenscope.bpf.o ]; then
	want=$(llvm-objdump -h .output/tokenscope.bpf.o |
		awk '$2 ~ /^(tp_btf|uprobe|uretprobe|usdt)/ {print $2}' | sort -u)
else
	want=$(printf '%s\n' tp_btf/sched_process_exit tp_btf/sched_process_fork \
		tp_btf/sk_data_ready tp_btf/sys_enter tp_btf/sys_exit uprobe uretprobe usdt)
fi
[ "$secs" = "$want" ]
check arm64_bpf_sections $? "sections $(echo $secs), expected $(echo $want)"

# Every immediate the sys_enter program compares a register with.
imms=$(llvm-objdump -d --section=tp_btf/sys_enter "$OBJ" |
	sed -n 's/.*if r[0-9]* == \(-\{0,1\}[0-9][0-9]*\) goto.*/\1/p' | sort -un)
missing=
for sc in read write readv writev close accept accept4 sendto recvfrom sendmsg recvmsg; do
	nr=$(sed -n "s/^#define __NR_$sc \([0-9][0-9]*\)$/\1/p" "$HDR")
	[ -n "$nr" ] || { missing="$missing $sc(not in $HDR)"; continue; }
	grep -qx "$nr" <<<"$imms" || missing="$missing $sc=$nr"
done
[ -z "$missing" ]
check arm64_bpf_syscall_numbers $? "sys_enter compares with none of:$missing"
# x86's accept4 (288) and recvmsg/sendmsg (47/46) are no arm64 syscall the program matches.
x86=$(grep -xE '288|47|46' <<<"$imms" | tr '\n' ' ')
[ -z "$x86" ]
check arm64_bpf_no_x86_numbers $? "sys_enter compares with x86's numbers $x86"

grep -q "STRUCT 'pt_regs___arm64'" <<<"$btf" && grep -A1 "STRUCT 'pt_regs___arm64'" <<<"$btf" |
	grep -q "'orig_x0'"
check arm64_bpf_syscall_arg1_orig_x0 $? "no CO-RE flavour pt_regs___arm64 with orig_x0 in the BTF"

# x28 is word 28 of the registers: offset 224.
llvm-objdump -d --section=uprobe "$OBJ" | sed -n '/<ts_go_tls_enter>:/,/^$/p' |
	grep -q '= \*(u64 \*)(r[0-9] + 224)'
check arm64_bpf_go_g_x28 $? "ts_go_tls_enter reads no register at offset 224 (x28)"

if command -v qemu-aarch64-static >/dev/null && [ -x "$BIN" ]; then
	out=$(qemu-aarch64-static "$BIN" --help 2>&1)
	grep -q '^Usage: tokenscope' <<<"$out"
	check arm64_tokenscope_starts $? "qemu-aarch64-static $BIN --help: $(head -n 1 <<<"$out")"
else
	check arm64_tokenscope_starts 1 "qemu-aarch64-static (qemu-user-static) or $BIN missing"
fi
exit $fail
