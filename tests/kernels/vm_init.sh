#!/bin/busybox sh
# The init of the kernel matrix's machine (tests/kernels/run_matrix.py): a Debian kernel booted
# in qemu with this initramfs, which holds busybox, the static tokenscope, the reference server
# and the ground-truth client, and the BPF tests with the libraries they load. It runs the checks
# and prints what each gave between "@@ BEGIN name" and "@@ END name" lines, with "@@ RC name N"
# for its exit status; the host reads the console and judges. Then it powers off.
/bin/busybox --install -s /bin
export PATH=/bin:/work
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null ||
	mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
ifconfig lo 127.0.0.1 up
ulimit -n 65536
cd /work

section() { # name file
	echo "@@ BEGIN $1 (at $(cut -d' ' -f1 /proc/uptime) s)"
	cat "$2"
	echo "@@ END $1"
}

# Waits (up to $2 tenths of a second) for text $3 in file $1.
wait_for() {
	i=0
	while [ $i -lt "$2" ]; do
		grep -q "$3" "$1" 2>/dev/null && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

echo "@@ KERNEL $(uname -r)"

# 1. The preflight.
tokenscope check --json >/tmp/check.json 2>/tmp/check.err
echo "@@ RC check $?"
section check /tmp/check.json
tokenscope check >/tmp/check.txt 2>&1
section check-text /tmp/check.txt
if ! grep -q '"can_trace":true' /tmp/check.json; then
	# libbpf's messages, the verifier's log among them: its last lines say what it refused.
	tokenscope check -v >/tmp/check-v.txt 2>&1
	tail -n 200 /tmp/check-v.txt >/tmp/check-v.tail
	section check-verbose /tmp/check-v.tail
fi

# 2. The BPF tests (each loads the skeleton adapted to this kernel).
for t in tests/test_bpf_*; do
	n=${t##*/}
	timeout 600 "$t" >/tmp/$n.log 2>&1
	rc=$?
	echo "@@ RC $n $rc"
	section "$n" /tmp/$n.log
	if [ "$rc" != 0 ]; then
		# Again with libbpf's messages, which say why a probe or a program was refused.
		TEST_LIBBPF_LOG=1 timeout 600 "$t" >/tmp/$n.log 2>&1
		tail -n 120 /tmp/$n.log >/tmp/$n.tail
		section "$n-libbpf" /tmp/$n.tail
	fi
done

# 3. A trace of the reference server, as a user runs one, with every pattern of the mixed
# workload (aborts, HTTP errors, stream errors, keep-alive): its JSON lines and the client's.
refserver --port 0 --pattern mixed --token-ms 20 --prefill-ms 50 >/tmp/srv.log 2>&1 &
srv=$!
wait_for /tmp/srv.log 100 "listening on"
port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' /tmp/srv.log)
tokenscope trace -p "$srv" --json --tokens >/tmp/ts.jsonl 2>/tmp/ts.err &
ts=$!
wait_for /tmp/ts.err 300 "tokenscope: attached"
gtclient --port "$port" -n 16 -c 4 -k 2 --usage --abort-every 5 --abort-after 2 \
	--http-error-every 7 --stream-error-every 6 -o /tmp/gt.jsonl 2>/tmp/gt.err
sleep 1
kill -INT "$ts"
wait "$ts"
echo "@@ RC trace $?"
kill "$srv"
wait "$srv" 2>/dev/null
section trace-json /tmp/ts.jsonl
section trace-err /tmp/ts.err
section client /tmp/gt.jsonl

# 4. --all: a server found by its name's rule (llama.cpp's llama-server) after tokenscope
# started, then traced.
tokenscope trace --all --json >/tmp/all.jsonl 2>/tmp/all.err &
ts=$!
wait_for /tmp/all.err 300 "tokenscope: attached"
llama-server --port 0 --token-ms 10 --prefill-ms 20 >/tmp/llama.log 2>&1 &
srv=$!
wait_for /tmp/llama.log 100 "listening on"
port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' /tmp/llama.log)
wait_for /tmp/all.err 100 "found $srv"
gtclient --port "$port" -n 6 -c 2 --usage -o /tmp/all-gt.jsonl 2>/dev/null
sleep 1
kill -INT "$ts"
wait "$ts"
echo "@@ RC all $?"
kill "$srv"
wait "$srv" 2>/dev/null
section all-json /tmp/all.jsonl
section all-err /tmp/all.err
section all-client /tmp/all-gt.jsonl

echo "@@ DONE"
sync
poweroff -f
