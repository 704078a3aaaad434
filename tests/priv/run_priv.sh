#!/usr/bin/env bash
# The least privilege tokenscope runs with, and what it says without each part of it. The
# servers run as another user (uid 12345, no capabilities) than the tracer, which runs
#  - as user nobody with exactly the capabilities named, ambient (a container's non-root user,
#    or a binary given file capabilities), or
#  - as uid 0 with the bounding set cut down to them (a DaemonSet's root with capabilities
#    added to drop: ALL).
# Checked:
#  1. nobody with CAP_BPF and CAP_PERFMON traces the server with exact token counts, with a
#     16 MiB ring buffer (over RLIMIT_MEMLOCK: BPF memory is the cgroup's, no
#     CAP_SYS_RESOURCE);
#  2. without CAP_BPF, and without CAP_PERFMON, as nobody and as root: exit status 1 and a
#     message naming what is missing;
#  3. root with CAP_BPF and CAP_PERFMON: --all finds the server, and --listen serves its
#     requests exactly;
#  4. --listen on a port below 1024 without CAP_NET_BIND_SERVICE: exit 1, and why;
#  5. GPU steps (refserver --gpu with the stand-in CUDA runtime): with CAP_SYS_ADMIN (uprobes,
#     Linux 6.16 and later) and CAP_SYS_PTRACE (the engine's library through /proc/PID/root)
#     as well, CUDA calls are hooked and GPU steps reported; without either, the tracer says
#     which is missing, and still traces the requests exactly (exit 0).
#  6. record -o as root in a directory anyone may write to: a symbolic link planted at the path
#     (to a file, or dangling) is refused and what it points to stays untouched, as are
#     another user's file and a file with a second hard link; a FIFO, a descriptor
#     (/dev/fd/3), a process substitution and an existing file of ours are written, and
#     report reads what was written.
# Every wait is bounded. Needs root (to hand out the capabilities) and setpriv.
# Prints PASS/FAIL/SKIP lines and the totals line; exits 1 if anything failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
TS=${TOKENSCOPE:-.output/tokenscope}
RS=${REFSERVER:-.output/refserver}
GT=${GTCLIENT:-.output/gtclient}
CUDART=${STANDIN_CUDART:-.output/standin/libcudart.so.13}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
TARGET_UID=12345
TMP=$(mktemp -d)
. tests/lib.sh
pids=()

cleanup() {
	stop_pids
	rm -rf "$TMP"
}
trap cleanup EXIT



if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1; then
	sk "privilege" "needs root, setpriv (util-linux) and user nobody"
	finish
fi

# Copies every user can reach: the checkout may sit under a directory closed to others.
chmod 755 "$TMP"
mkdir -p "$TMP/bin" "$TMP/lib"
cp "$TS" "$TMP/bin/tokenscope" && cp "$RS" "$TMP/bin/refserver" && cp "$GT" "$TMP/bin/gtclient" &&
	cp "$RS" "$TMP/bin/llama-server" || {
	ko "setup" "cannot copy the binaries"
	finish
}
have_cudart=0
[ -f "$CUDART" ] && cp "$CUDART" "$TMP/lib/libcudart.so.13" && have_cudart=1
chmod -R a+rX "$TMP/bin" "$TMP/lib"
TS=$TMP/bin/tokenscope GT=$TMP/bin/gtclient

# priv nobody|root CAPS: sets PRIV, the command that runs a program as user nobody holding
# exactly CAPS (",+bpf,+perfmon"; "" for none), or as uid 0 with the bounding set cut down to
# CAPS. setpriv execs the program: its pid is the program's.
priv() {
	if [ "$1" = nobody ]; then
		PRIV=(setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all"$2"
			--ambient-caps=-all"$2" --bounding-set=-all"$2")
	else
		PRIV=(setpriv --inh-caps=-all"$2" --bounding-set=-all"$2")
	fi
}

# start_server NAME BINARY ARGS...: as TARGET_UID without capabilities; sets SRVPID, SRVPORT
start_server() {
	local name=$1 bin=$2
	shift 2
	setpriv --reuid=$TARGET_UID --regid=$TARGET_UID --clear-groups --inh-caps=-all \
		--bounding-set=-all "$bin" --port 0 "$@" >"$TMP/$name.srv" 2>"$TMP/$name.srv.err" </dev/null &
	SRVPID=$!
	pids+=("$SRVPID")
	for _ in $(seq 100); do grep -q listening "$TMP/$name.srv" && break; sleep 0.1; done
	SRVPORT=$(grep -o '[0-9]*$' "$TMP/$name.srv" | head -n 1)
}

# start_tracer NAME nobody|root CAPS ARGS...: tokenscope in the background; sets TSPID; true
# once it says it attached (within 10 s)
start_tracer() {
	local name=$1
	priv "$2" "$3"
	shift 3
	"${PRIV[@]}" "$TS" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" </dev/null &
	TSPID=$!
	pids+=("$TSPID")
	for _ in $(seq 100); do
		grep -q "attached" "$TMP/$name.err" && return 0
		kill -0 "$TSPID" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# stop_tracer: SIGINT, then its exit status in RC (empty if it did not end within 5 s)
stop_tracer() {
	RC=
	kill -INT "$TSPID" 2>/dev/null
	for _ in $(seq 50); do kill -0 "$TSPID" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$TSPID" 2>/dev/null; then
		kill -9 "$TSPID"
		return
	fi
	wait "$TSPID"
	RC=$?
}

# exact TRACER_JSON CLIENT_JSON PID: "-" when the tracer reported every request of the client,
# served by PID, ok with the client's token and frame counts; else what differs
exact() {
	"$PY" - "$@" <<'PY'
import json, sys
ts = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"pid"')]
gt = [json.loads(l) for l in open(sys.argv[2])]
pid = int(sys.argv[3])
mine = {int(t["conn"].split("<-")[1].split("#")[0].rsplit(":", 1)[1]): t for t in ts
        if t["pid"] == pid}
bad = []
if not gt or any(c["outcome"] != "ok" for c in gt):
    bad.append(f"client: {[c['outcome'] for c in gt]}")
for c in gt:
    t = mine.get(c["port"])
    if not t:
        bad.append(f"port {c['port']} not reported")
    elif (t["outcome"], t["tokens"], t["frames"]) != ("ok", c["tokens"], c["frames"]):
        bad.append(f"port {c['port']}: {t['outcome']} tokens={t['tokens']} "
                   f"frames={t['frames']}, client {c['tokens']}/{c['frames']}")
if len(mine) != len(gt):
    bad.append(f"{len(mine)} requests reported, {len(gt)} made")
print("; ".join(bad) or "-")
PY
}

gt_args=(-n 4 -c 2 --max-tokens 7 --usage --model privtest --timeout-s 10)

# 1. the container case: nobody, CAP_BPF and CAP_PERFMON, a server of another user
start_server http "$TMP/bin/refserver" --token-ms 2 --prefill-ms 3
http_pid=$SRVPID http_port=$SRVPORT
if [ -z "$http_port" ]; then
	ko "setup" "the reference server did not start as uid $TARGET_UID"
	finish
fi
if start_tracer min nobody ",+bpf,+perfmon" trace --json -p "$http_pid" --ring-buffer-mb 16; then
	timeout 20 "$GT" --port "$http_port" "${gt_args[@]}" -o "$TMP/gt-min.json" 2>/dev/null
	sleep 0.3
	stop_tracer
	verdict=$(exact "$TMP/min.out" "$TMP/gt-min.json" "$http_pid")
	if [ "$RC" = 0 ] && [ "$verdict" = "-" ]; then
		ok "user nobody with only CAP_BPF and CAP_PERFMON traces uid $TARGET_UID's server: every request, exact token counts (16 MiB ring, no CAP_SYS_RESOURCE)"
	else
		ko "minimal set" "exit status '${RC:-still running}': $verdict"
	fi
else
	ko "minimal set" "the tracer did not attach: $(head -c 300 "$TMP/min.err")"
fi

# 2. each of the two missing, for both kinds of tracer
for who in nobody root; do
	for miss in bpf perfmon; do
		keep=$([ $miss = bpf ] && echo ",+perfmon" || echo ",+bpf")
		want="needs CAP_${miss^^} as well as"
		priv $who "$keep"
		timeout 20 "${PRIV[@]}" "$TS" trace -p "$http_pid" -d 2 >"$TMP/no-$miss.out" 2>"$TMP/no-$miss.err" </dev/null
		rc=$?
		if [ $rc -eq 1 ] && grep -q "tokenscope: not allowed to load BPF programs (.*): $want" "$TMP/no-$miss.err"; then
			ok "$who without CAP_${miss^^}: exit 1, \"$(head -n 1 "$TMP/no-$miss.err")\""
		else
			ko "$who without CAP_${miss^^}" "rc=$rc: $(head -c 300 "$TMP/no-$miss.err")"
		fi
	done
done
priv nobody ""
timeout 20 "${PRIV[@]}" "$TS" trace -p "$http_pid" -d 2 >/dev/null 2>"$TMP/none.err" </dev/null
rc=$?
if [ $rc -eq 1 ] && grep -q "needs CAP_BPF and CAP_PERFMON (or root)" "$TMP/none.err"; then
	ok "no capability: exit 1, both named"
else
	ko "no capability" "rc=$rc: $(head -c 300 "$TMP/none.err")"
fi

# 3. the DaemonSet case: root with CAP_BPF and CAP_PERFMON only, --all --listen
start_server ll "$TMP/bin/llama-server" --token-ms 2 --prefill-ms 3
ll_pid=$SRVPID ll_port=$SRVPORT
if start_tracer all root ",+bpf,+perfmon" trace --all --json --listen 127.0.0.1:0; then
	mport=$(grep -o 'metrics at http://127.0.0.1:[0-9]*' "$TMP/all.err" | grep -o '[0-9]*$')
	for _ in $(seq 100); do grep -q "found $ll_pid (llama.cpp" "$TMP/all.err" && break; sleep 0.1; done
	timeout 20 "$GT" --port "$ll_port" "${gt_args[@]}" -o "$TMP/gt-all.json" 2>/dev/null
	n=
	for _ in $(seq 30); do
		n=$(curl -s -m 2 "http://127.0.0.1:$mport/metrics" |
			sed -n 's/^tokenscope_requests_total{model="privtest",role="server",outcome="ok"} //p')
		[ "$n" = 4 ] && break
		sleep 0.1
	done
	stop_tracer
	verdict=$(exact "$TMP/all.out" "$TMP/gt-all.json" "$ll_pid")
	if [ "$RC" = 0 ] && [ "$n" = 4 ] && [ "$verdict" = "-" ]; then
		ok "root with only CAP_BPF and CAP_PERFMON: --all finds uid $TARGET_UID's llama-server, --listen serves its 4 requests, token counts exact"
	else
		ko "--all --listen" "exit status '${RC:-still running}', metrics ok count '$n' (want 4): $verdict"
	fi
else
	ko "--all --listen" "the tracer did not attach: $(head -c 300 "$TMP/all.err")"
fi

# 4. a privileged port
if [ "$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start 2>/dev/null || echo 1024)" -le 81 ]; then
	sk "port below 1024" "net.ipv4.ip_unprivileged_port_start lets anyone bind port 81 here"
else
	priv nobody ",+bpf,+perfmon"
	timeout 20 "${PRIV[@]}" "$TS" trace -p "$http_pid" -d 2 --listen 127.0.0.1:81 \
		>/dev/null 2>"$TMP/port.err" </dev/null
	rc=$?
	if [ $rc -eq 1 ] && grep -q "cannot listen on 127.0.0.1:81: Permission denied (a port below 1024 needs CAP_NET_BIND_SERVICE)" "$TMP/port.err"; then
		ok "--listen on port 81 without CAP_NET_BIND_SERVICE: exit 1, and why"
	else
		ko "port below 1024" "rc=$rc: $(head -c 300 "$TMP/port.err")"
	fi
fi

# 5. GPU steps: CUDA uprobes in another user's engine process
gpu_run() { # NAME CAPS: traces the GPU server with --json --gpu-steps; sets RC, VERDICT, STEPS
	local name=$1 caps=$2
	VERDICT="the tracer did not attach" STEPS=0 RC=
	if start_tracer "$name" root "$caps" trace --json --gpu-steps -p "$gpu_pid"; then
		# The engine's library is looked for at attach and every second after.
		sleep 1.2
		timeout 20 "$GT" --port "$gpu_port" "${gt_args[@]}" -o "$TMP/gt-$name.json" 2>/dev/null
		sleep 0.3
		stop_tracer
		VERDICT=$(exact "$TMP/$name.out" "$TMP/gt-$name.json" "$gpu_pid")
		STEPS=$(grep -c '^{"gpu_step"' "$TMP/$name.out")
	fi
}
if [ $have_cudart -eq 0 ]; then
	sk "GPU steps" "no stand-in CUDA runtime at $CUDART (make .output/standin/libcudart.so.13)"
else
	start_server gpu "$TMP/bin/refserver" --gpu --cudart "$TMP/lib/libcudart.so.13" --token-ms 3 --prefill-ms 5
	gpu_pid=$SRVPID gpu_port=$SRVPORT
	engine=$(grep -o 'engine pid [0-9]*' "$TMP/gpu.srv.err" | grep -o '[0-9]*$')
	if [ -z "$gpu_port" ] || [ -z "$engine" ]; then
		ko "GPU steps" "the GPU-mode server did not start: $(head -c 300 "$TMP/gpu.srv.err")"
	else
		full=",+bpf,+perfmon,+sys_admin,+sys_ptrace"
		gpu_run gpu-full "$full"
		if [ "$RC" = 0 ] && [ "$VERDICT" = "-" ] && [ "$STEPS" -gt 0 ] &&
			grep -q "tracing CUDA calls of pid $engine" "$TMP/gpu-full.err"; then
			ok "root with CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN and CAP_SYS_PTRACE hooks uid $TARGET_UID's CUDA runtime: $STEPS GPU steps, requests exact"
		else
			ko "GPU steps, full set" "exit status '${RC:-still running}', $STEPS steps: $VERDICT"
		fi
		gpu_run gpu-noadmin ",+bpf,+perfmon,+sys_ptrace"
		want="cannot hook the CUDA library .* of pid $engine: uprobes need CAP_SYS_ADMIN"
		if grep -q "tracing CUDA calls of pid $engine" "$TMP/gpu-noadmin.err"; then
			sk "GPU steps without CAP_SYS_ADMIN" "this kernel lets CAP_PERFMON create uprobes (before Linux 6.16)"
		elif [ "$RC" = 0 ] && [ "$VERDICT" = "-" ] && [ "$STEPS" -eq 0 ] && grep -q "$want" "$TMP/gpu-noadmin.err"; then
			ok "without CAP_SYS_ADMIN: \"$(grep -o 'cannot hook.*' "$TMP/gpu-noadmin.err" | head -n 1)\"; requests still exact, exit 0"
		else
			ko "GPU steps without CAP_SYS_ADMIN" "exit status '${RC:-still running}', $STEPS steps: $VERDICT"
		fi
		gpu_run gpu-noptrace ",+bpf,+perfmon,+sys_admin"
		want="cannot hook the CUDA library .* of pid $engine: opening it through /proc/PID/root needs CAP_SYS_PTRACE"
		if [ "$RC" = 0 ] && [ "$VERDICT" = "-" ] && [ "$STEPS" -eq 0 ] && grep -q "$want" "$TMP/gpu-noptrace.err"; then
			ok "without CAP_SYS_PTRACE: \"$(grep -o 'cannot hook.*' "$TMP/gpu-noptrace.err" | head -n 1)\"; requests still exact, exit 0"
		else
			ko "GPU steps without CAP_SYS_PTRACE" "exit status '${RC:-still running}', $STEPS steps: $VERDICT"
		fi
	fi
fi

# 6. where record -o writes
rec() { # PATH [extra redirections are the caller's]: a 1 s recording of the HTTP server
	timeout 20 "$TS" record -p "$http_pid" -d 1 -o "$1" >/dev/null 2>>"$TMP/rec.err" </dev/null
}
pub=$TMP/pub
mkdir -m 1777 "$pub"
printf 'precious\n' >"$TMP/victim"
chmod 644 "$TMP/victim"
ln -s "$TMP/victim" "$pub/link.tsr"
ln -s "$TMP/not-there" "$pub/dangling.tsr"
bad=()
: >"$TMP/rec.err"
rec "$pub/link.tsr"
rc=$?
if [ $rc -ne 1 ] || [ "$(cat "$TMP/victim")" != precious ] || [ "$(stat -c %a "$TMP/victim")" != 644 ] ||
	! grep -q "cannot write $pub/link.tsr: it is a symbolic link, and a recording is never written through one" "$TMP/rec.err"; then
	bad+=("symlink to a file: rc=$rc, victim '$(cat "$TMP/victim")' mode $(stat -c %a "$TMP/victim")")
fi
rec "$pub/dangling.tsr"
rc=$?
[ $rc -eq 1 ] && [ ! -e "$TMP/not-there" ] || bad+=("dangling symlink: rc=$rc, target created: $([ -e "$TMP/not-there" ] && echo yes || echo no)")
printf 'theirs\n' >"$pub/theirs.tsr"
chown $TARGET_UID "$pub/theirs.tsr"
rec "$pub/theirs.tsr"
rc=$?
[ $rc -eq 1 ] && [ "$(cat "$pub/theirs.tsr")" = theirs ] && grep -q "belongs to another user" "$TMP/rec.err" ||
	bad+=("another user's file: rc=$rc, now '$(head -c 20 "$pub/theirs.tsr")'")
printf 'linked\n' >"$TMP/linked"
ln "$TMP/linked" "$pub/hard.tsr" 2>/dev/null
if [ -e "$pub/hard.tsr" ]; then
	rec "$pub/hard.tsr"
	rc=$?
	[ $rc -eq 1 ] && [ "$(cat "$TMP/linked")" = linked ] && grep -q "has other hard links" "$TMP/rec.err" ||
		bad+=("hard link: rc=$rc, now '$(head -c 20 "$TMP/linked")'")
fi
if [ ${#bad[@]} -eq 0 ]; then
	ok "record -o refuses a symbolic link (the file it points to untouched), a dangling one, another user's file and a hard link, each with exit 1 and why"
else
	ko "record -o refusals" "$(printf '%s; ' "${bad[@]}")"
fi
good=()
readable() { "$TS" report "$1" >/dev/null 2>&1; }
mkfifo "$pub/fifo"
timeout 20 cat "$pub/fifo" >"$TMP/from-fifo.tsr" &
rec "$pub/fifo" && wait $! && readable "$TMP/from-fifo.tsr" || good+=("FIFO")
timeout 20 "$TS" record -p "$http_pid" -d 1 -o /dev/fd/3 3>"$TMP/from-fd.tsr" >/dev/null 2>>"$TMP/rec.err" </dev/null &&
	readable "$TMP/from-fd.tsr" || good+=("/dev/fd/3")
timeout 20 "$TS" record -p "$http_pid" -d 1 -o >(cat >"$TMP/from-subst.tsr") >/dev/null 2>>"$TMP/rec.err" </dev/null
rc=$?
for _ in $(seq 20); do [ -s "$TMP/from-subst.tsr" ] && readable "$TMP/from-subst.tsr" && break; sleep 0.1; done
[ $rc -eq 0 ] && readable "$TMP/from-subst.tsr" || good+=("process substitution")
printf 'an older recording, longer than the new header%.0s' $(seq 200) >"$pub/mine.tsr"
chmod 644 "$pub/mine.tsr"
rec "$pub/mine.tsr" && readable "$pub/mine.tsr" && [ "$(stat -c %a "$pub/mine.tsr")" = 600 ] ||
	good+=("an existing file of ours (mode $(stat -c %a "$pub/mine.tsr"))")
if [ ${#good[@]} -eq 0 ]; then
	ok "record -o writes a FIFO, /dev/fd/3, a process substitution and our own existing file (truncated, mode 600), and report reads each"
else
	ko "record -o targets" "not written or not readable: $(printf '%s; ' "${good[@]}") $(tail -n 3 "$TMP/rec.err")"
fi
finish
