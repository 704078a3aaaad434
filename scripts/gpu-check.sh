#!/usr/bin/env bash
# GPU check: tokenscope against a real GPU streaming server, for a person to read.
#
# Starts scripts/gpu_server.py (an HTTP process plus a spawned GPU engine process: a random-
# weight transformer, eager prefill, CUDA-graph decode, .item() per token) three times:
#  1. trace -p: warms it up, attaches .output/tokenscope (--json --tokens --gpu-steps), drives
#     12 streaming requests with .output/gtclient (3 at a time, so requests queue) and prints
#     tokenscope's stderr, a per-request comparison with the client's own clock, GPU step
#     statistics, and tokenscope's steps matched against the server's own step log;
#  2. plain: the server alone under the load of phase 3 (24 requests, 3 at a time, 64 tokens),
#     for the overhead;
#  3. run: `tokenscope run --json --tokens --gpu-steps --listen` starts the server with the CUPTI
#     library injected (device times) and NVML read; the same load, one /metrics scrape and one
#     `nvidia-smi` reading during it; then scripts/gpu_check_device.py prints steps by kind with
#     device busy time, request prefill/decode device time against the server's own timings,
#     NVML against nvidia-smi, and the throughput ratio run / plain;
#  4. continuous batching: scripts/cb_server.py (an aiohttp front, transformers' own continuous
#     batching in an engine process over a random-weight ~1 B Llama, bf16) started with the CUPTI
#     library injected (it costs nothing until a tracer attaches); at 1, 8, 32 and 64 streams
#     `trace -p` on it, then scripts/gpu_check_cb.py compares requests, tokens, steps and
#     batches, step kinds (by the tokens each step gave), queue/prefill/decode, preemptions and
#     stalls blamed on prefills with the client and the engine's own log, and prints the
#     decode steps' modes (graph coverage);
#  5. cost: the same server, rounds interleaved none / `trace -p --device-times off` / `trace
#     -p` (default device times), 3 of each under the same load: output tokens/s per round and
#     the ratios to untraced (median, min). Without --device-times (before it exists) its
#     rounds are skipped, not faked;
#  6. a small KV cache: cb_server.py --kv-blocks 24, 64 requests 32 at a time: the scheduler must
#     evict (preempt) or make requests wait; the same comparisons, preemptions first.
# It passes or fails nothing; the last lines are one-line verdicts.
#
#   scripts/gpu-check.sh                 # as root, from any directory; about six minutes
#
# Environment:
#   OUT=DIR              artefacts (default /tmp/gpu-check): report.txt; phase 1: server.out,
#                        steps.jsonl, tokenscope.jsonl, tokenscope.err, client.jsonl; phase 2:
#                        plain.server.out, plain.steps.jsonl, plain.client.jsonl; phase 3:
#                        run.jsonl (tokenscope's lines and the server's stdout), run.err,
#                        run.steps.jsonl, run.client.jsonl, run.metrics.txt, run.nvsmi.csv,
#                        run.nvsmi-apps.csv; phases 4-6: cb.server.out, cb.engine.jsonl (the
#                        engine's log, format in cb_server.py), cb.cN.{client,tokenscope}.jsonl
#                        and .check.json per level N, cost.R.MODE.client.jsonl, cb-kv.*
#   PYTHON=python3       the Python that has torch
#   GPU_CHECK_NO_GPU=1   dry run on a machine without a GPU: skip the GPU checks and run the
#                        servers with --no-gpu and --engine fake (sleeps instead of CUDA; no GPU
#                        steps to match, no device times, no NVML); lighter loads
#   GPU_CHECK_TIMEOUT_S  bound on the whole run (default 460; then up to 20 s to clean up)
#   TOKENSCOPE_CUPTI_PATH  libcupti for the injection library, when neither the loader nor the
#                        places this script looks (PyTorch's nvidia/cuda_cupti wheel, the CUDA
#                        toolkit) find it
#
# Needs .output/tokenscope, .output/libtokenscope_cupti.so and .output/gtclient built beforehand
# (nothing is installed). When their shared libraries (libbpf, libcjson, libelf) are missing on
# this machine, put copies in .output/lib/: they are used for those programs only.
set -uo pipefail

if [ -z "${GPU_CHECK_BOUNDED:-}" ]; then
	export GPU_CHECK_BOUNDED=1
	exec timeout -k 20 "${GPU_CHECK_TIMEOUT_S:-460}" bash "$0" "$@"
fi
# On that SIGTERM this shell waits for main's clean-up and report (see the end).
trap : INT TERM

cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gpu-check}
PY=${PYTHON:-python3}
NO_GPU=${GPU_CHECK_NO_GPU:-}
mkdir -p "$OUT" || exit 1
rm -f "$OUT"/{report.txt,server.out,steps.jsonl,tokenscope.jsonl,tokenscope.err,client.jsonl} \
	"$OUT"/plain.{server.out,steps.jsonl,client.jsonl} \
	"$OUT"/run.{jsonl,err,steps.jsonl,client.jsonl,metrics.txt,nvsmi.csv,nvsmi-apps.csv} \
	"$OUT"/cb.* "$OUT"/cb-kv.* "$OUT"/cost.*
TMP=$(mktemp -d)

SERVER_PID='' SERVER_PGID='' SRV='' ENGINE='' TS_PID='' PORT=''
# The server start_server runs (scripts/gpu_server.py unless set) and its time limit.
SRV_CMD=() SRV_LIMIT=250
# The load of phases 2 and 3, whose throughputs are compared.
LOAD=(-n 24 -c 3 --max-tokens 64 --usage)

say() { printf '%s\n' "$*"; }
STEP=start
section() {
	STEP=$*
	printf '\n== %s\n' "$*"
}
die() {
	say "gpu-check: $*"
	exit 1
}

# A process is alive when it exists and is not a zombie (an exited child not yet reaped).
alive() {
	local st
	[ -n "$1" ] && st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) &&
		[ -n "$st" ] && [ "$st" != Z ]
}

# wait_gone SECONDS PID...: true when every PID ended in time.
wait_gone() {
	local n=$(($1 * 10)) p any
	shift
	while [ "$n" -gt 0 ]; do
		any=
		for p in "$@"; do alive "$p" && any=1; done
		[ -z "$any" ] && return 0
		sleep 0.1
		n=$((n - 1))
	done
	return 1
}

# tool "TIMEOUT_ARGS" CMD...: runs one of our programs bounded, with .output/lib when present.
# --foreground keeps it in our process group, so the run's own time limit reaches it too.
TOOL_ENV=()
tool() {
	local t=$1
	shift
	# shellcheck disable=SC2086 # TIMEOUT_ARGS are words
	timeout --foreground $t ${TOOL_ENV[@]+"${TOOL_ENV[@]}"} "$@"
}

mono_ns() { "$PY" -c 'import time; print(time.monotonic_ns())'; }

stop_tokenscope() {
	[ -n "$TS_PID" ] || return 0
	if alive "$TS_PID"; then
		kill -INT "$TS_PID" 2>/dev/null
		wait_gone 8 "$TS_PID" || kill -KILL "$TS_PID" 2>/dev/null
	fi
	wait "$TS_PID" 2>/dev/null
	TS_RC=$?
	TS_PID=
}

# The server runs in its own process group (setsid): the HTTP process, the engine and
# multiprocessing's resource tracker go together.
# shellcheck disable=SC2086 # $SRV and $ENGINE are pids, or empty when never known
stop_server() {
	[ -n "$SERVER_PID" ] || return 0
	if [ -n "$SERVER_PGID" ]; then
		kill -TERM -- "-$SERVER_PGID" 2>/dev/null
	else
		kill -TERM $SERVER_PID $SRV $ENGINE 2>/dev/null
	fi
	if ! wait_gone 8 $SERVER_PID $SRV $ENGINE; then
		say "gpu-check: the server did not stop on SIGTERM; killing it"
		if [ -n "$SERVER_PGID" ]; then
			kill -KILL -- "-$SERVER_PGID" 2>/dev/null
		else
			kill -KILL $SERVER_PID $SRV $ENGINE 2>/dev/null
		fi
	fi
	wait "$SERVER_PID" 2>/dev/null
	SERVER_PID=
}

# start_server OUT ERR LOG [PREFIX...]: scripts/gpu_server.py logging its steps to LOG, started
# after PREFIX (tokenscope run ... --) in a session of its own, bounded; stdout to OUT, stderr
# to ERR (to OUT when ERR is empty). Waits for it to listen (150 s: torch import, CUDA context,
# capture) and sets SERVER_PID, SERVER_PGID, PORT, SRV and ENGINE; false when it did not start.
start_server() {
	local out=$1 err=${2:-$1} i setsid=() srv_args=(--port 0 --log "$3")
	shift 3
	local cmd=(scripts/gpu_server.py)
	if [ "${#SRV_CMD[@]}" -gt 0 ]; then
		cmd=("${SRV_CMD[@]}")
	elif [ -n "$NO_GPU" ]; then
		srv_args+=(--no-gpu)
	fi
	command -v setsid >/dev/null && setsid=(setsid)
	: >"$out"
	[ "$err" = "$out" ] || : >"$err"
	# -k: timeout starts its SIGKILL timer at any signal it passes on, stop_run's SIGINT too;
	# the server takes up to 12 s to stop (HTTP 5 s, engine 5 + 2 s), and tokenscope run waits
	# for it before its summary.
	${setsid[@]+"${setsid[@]}"} timeout -s INT -k 30 "$SRV_LIMIT" "$@" "$PY" -u "${cmd[@]}" \
		"${srv_args[@]}" >>"$out" 2>>"$err" &
	SERVER_PID=$!
	SERVER_PGID=
	[ -n "${setsid[*]}" ] && SERVER_PGID=$SERVER_PID
	for ((i = 0; i < 2400; i++)); do # 240 s: transformers' warm-up captures graphs
		grep -q '^listening on' "$out" && break
		alive "$SERVER_PID" || break
		sleep 0.1
	done
	grep -v '^{' "$out"
	[ "$err" = "$out" ] || grep -v '^tokenscope' "$err"
	grep -q '^listening on' "$out" || return 1
	PORT=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$out")
	SRV=$(sed -n 's/^server pid \([0-9]*\) engine pid \([0-9]*\)$/\1/p' "$out")
	ENGINE=$(sed -n 's/^server pid \([0-9]*\) engine pid \([0-9]*\)$/\2/p' "$out")
	say "HTTP process $SRV, engine process $ENGINE, port $PORT"
	say "warm-up: one request"
	tool 30 .output/gtclient --port "$PORT" -n 1 --max-tokens 8 --usage -o "$TMP/warmup.jsonl" ||
		{
			say "the warm-up request failed: $(cat "$TMP/warmup.jsonl" 2>/dev/null)"
			return 1
		}
}

# The run phase: SIGINT to tokenscope run (through timeout), which passes it on to the server
# and exits with its status once it exits; then whatever is left of the session goes.
stop_run() {
	[ -n "$SERVER_PID" ] || return 0
	kill -INT "$SERVER_PID" 2>/dev/null
	wait_gone 25 "$SERVER_PID" || say "gpu-check: tokenscope run did not end 25 s after SIGINT"
	stop_server
}

# libcupti for the injection library, where the loader would not find it: PyTorch's wheel
# (nvidia/cuda_cupti/lib), then the toolkit. Prints the path, or nothing.
find_cupti() {
	local d f
	for d in $("$PY" -c 'import os, nvidia.cuda_cupti as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null) \
		/usr/local/cuda/extras/CUPTI/lib64 /usr/local/cuda/lib64; do
		for f in "$d"/libcupti.so.13 "$d"/libcupti.so.12 "$d"/libcupti.so; do
			[ -e "$f" ] && echo "$f" && return 0
		done
	done
	return 1
}

# trace_start JSONL ERR ARGS...: `tokenscope trace -p $SRV ARGS` in the background (TS_PID),
# waiting up to 20 s for it to attach and 10 s more for its CUDA hooks; false (and stopped) when
# it did not attach.
trace_start() {
	local out=$1 err=$2 i
	shift 2
	# Not through tool(): $! must be timeout itself, which passes our SIGINT on.
	timeout --foreground -s INT -k 5 300 ${TOOL_ENV[@]+"${TOOL_ENV[@]}"} .output/tokenscope trace \
		-p "$SRV" "$@" >"$out" 2>"$err" &
	TS_PID=$!
	for ((i = 0; i < 200; i++)); do
		grep -q 'tokenscope: attached' "$err" && break
		alive "$TS_PID" || break
		sleep 0.1
	done
	for ((i = 0; i < 100; i++)); do
		grep -qE 'tracing CUDA calls|no CUDA library' "$err" && break
		alive "$TS_PID" || break
		sleep 0.1
	done
	alive "$TS_PID" && grep -q 'tokenscope: attached' "$err" && return 0
	stop_tokenscope
	return 1
}

# cb_phase NAME LOAD_LEVELS: scripts/cb_server.py (SRV_CMD) traced at each level (gtclient -c N,
# -n 2N at least 8, CB_TOKENS tokens each), then gpu_check_cb.py; false when it did not start.
cb_phase() {
	local name=$1 c n
	shift
	start_server "$OUT/$name.server.out" "" "$OUT/$name.engine.jsonl" \
		${CB_ENV[@]+"${CB_ENV[@]}"} || return 1
	for c in "$@"; do
		n=$((2 * c < 8 ? 8 : 2 * c))
		say "-- $c streams: trace -p $SRV --json --tokens --gpu-steps; gtclient -n $n -c $c --max-tokens $CB_TOKENS"
		if [ -n "$ts_ok" ] && ! trace_start "$OUT/$name.c$c.tokenscope.jsonl" \
			"$OUT/$name.c$c.tokenscope.err" --json --tokens --gpu-steps; then
			say "tokenscope did not attach; its stderr:"
			cat "$OUT/$name.c$c.tokenscope.err"
		fi
		tool 120 .output/gtclient --port "$PORT" -n "$n" -c "$c" --max-tokens "$CB_TOKENS" \
			--usage -o "$OUT/$name.c$c.client.jsonl"
		say "(client exit status $?)"
		sleep 0.5 # the last steps' batches are final 250 ms after the engine went idle
		stop_tokenscope
		grep -m 12 '^tokenscope:\|GPU\|preempted' "$OUT/$name.c$c.tokenscope.err" 2>/dev/null
	done
}

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	trap - EXIT INT TERM
	stop_tokenscope
	stop_server
	rm -rf "$TMP"
}

main() {
	trap cleanup EXIT
	trap 'say "gpu-check: incomplete: interrupted during \"$STEP\""; exit 130' INT
	trap 'say "gpu-check: incomplete: stopped (time limit?) during \"$STEP\""; exit 143' TERM

	section "environment"
	say "date $(date -u +%FT%TZ), kernel $(uname -r), uid $(id -u), $(nproc) CPUs"
	say "repo $PWD, artefacts in $OUT"
	say "python: $(command -v "$PY") ($("$PY" --version 2>&1))"
	[ -r /sys/kernel/btf/vmlinux ] || say "warning: no /sys/kernel/btf/vmlinux: tokenscope needs BTF"
	[ "$(id -u)" = 0 ] || say "warning: not root: tokenscope needs root (or CAP_BPF+CAP_PERFMON)"

	section "GPU"
	if [ -n "$NO_GPU" ]; then
		say "GPU_CHECK_NO_GPU is set: no GPU checks; the server sleeps instead of using CUDA"
	else
		command -v nvidia-smi >/dev/null || die "no GPU: nvidia-smi is not installed"
		timeout --foreground 30 nvidia-smi -L || die "no GPU: 'nvidia-smi -L' failed"
		timeout --foreground 120 "$PY" -c '
import torch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
print("torch", torch.__version__, "CUDA", torch.version.cuda, "device", torch.cuda.get_device_name(0))
' || die "no GPU: PyTorch ($PY) cannot use CUDA"
	fi

	section "tools"
	local lib=$PWD/.output/lib
	if [ -d "$lib" ]; then
		TOOL_ENV=(env "LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
		say "using shared libraries from $lib for tokenscope and gtclient"
	fi
	local b ts_ok=1
	for b in tokenscope gtclient; do
		[ -x ".output/$b" ] || die ".output/$b is missing: build it first (make)"
		if ! tool 10 ".output/$b" --help >/dev/null 2>&1; then
			say ".output/$b cannot run here:"
			tool 10 ldd ".output/$b" 2>&1 | grep -E 'not found|version' || true
			say "  (on the build machine: mkdir -p .output/lib && cp -L /lib/x86_64-linux-gnu/{libbpf,libcjson,libelf,libz}.so.1 .output/lib/; for --listen also libmicrohttpd.so.12 and the libraries ldd lists for it)"
			[ "$b" = gtclient ] && die "without gtclient there is nothing to measure"
			ts_ok=
		fi
	done
	[ -n "$ts_ok" ] && say "tokenscope: $(tool 10 .output/tokenscope version 2>&1 | sed -n 1p)"

	section "GPU server: scripts/gpu_server.py"
	start_server "$OUT/server.out" "" "$OUT/steps.jsonl" || die "the GPU server did not start (above)"
	local i port=$PORT
	say "CUDA libraries the engine maps:"
	awk '$6 ~ /\/lib(cudart|cuda|cublas|cublasLt|nvrtc|cudnn)[.-][^\/]*$/ {print "  " $6}' \
		"/proc/$ENGINE/maps" 2>/dev/null | sort -u

	section "tokenscope trace -p $SRV --json --tokens --gpu-steps"
	if [ -n "$ts_ok" ]; then
		# Not through tool(): $! must be timeout itself, which passes our SIGINT on.
		timeout --foreground -s INT -k 5 150 ${TOOL_ENV[@]+"${TOOL_ENV[@]}"} .output/tokenscope trace \
			-p "$SRV" --json --tokens --gpu-steps >"$OUT/tokenscope.jsonl" \
			2>"$OUT/tokenscope.err" &
		TS_PID=$!
		for ((i = 0; i < 200; i++)); do # 20 s to load and attach
			grep -q 'tokenscope: attached' "$OUT/tokenscope.err" && break
			alive "$TS_PID" || break
			sleep 0.1
		done
		# The CUDA hooks go in just after the attach message.
		for ((i = 0; i < 100; i++)); do
			grep -qE 'tracing CUDA calls|no CUDA library' "$OUT/tokenscope.err" && break
			alive "$TS_PID" || break
			sleep 0.1
		done
		if alive "$TS_PID" && grep -q 'tokenscope: attached' "$OUT/tokenscope.err"; then
			grep '^tokenscope:' "$OUT/tokenscope.err"
		else
			say "tokenscope did not attach; its stderr:"
			cat "$OUT/tokenscope.err"
			stop_tokenscope
			say "(exit status $TS_RC; going on without it)"
		fi
	else
		say "skipped: tokenscope cannot run here (above)"
	fi
	local t_attach t_stop
	t_attach=$(mono_ns)

	section "client: gtclient --port $port -n 12 -c 3 --max-tokens 32 --usage"
	tool 90 .output/gtclient --port "$port" -n 12 -c 3 \
		--max-tokens 32 --usage -o "$OUT/client.jsonl"
	say "(exit status $?)"
	sleep 0.5
	t_stop=$(mono_ns)
	stop_tokenscope
	stop_server

	section "tokenscope stderr (exit status ${TS_RC:-none})"
	cat "$OUT/tokenscope.err" 2>/dev/null
	section "server output"
	cat "$OUT/server.out"

	section "artefacts in $OUT"
	(cd "$OUT" && ls -l report.txt server.out steps.jsonl tokenscope.jsonl tokenscope.err \
		client.jsonl 2>/dev/null)

	section "comparison"
	timeout --foreground 60 "$PY" - "$OUT" "${ENGINE:-0}" "$t_attach" "$t_stop" <<'PY' ||
"""Compares tokenscope's requests with the client's, and its GPU steps with the server's log."""
import bisect
import collections
import os
import sys

sys.path.insert(0, "scripts")
from gpu_check_device import jsonl as read_jsonl, pct  # noqa: E402 (the readers of phase 3)

out, engine_pid, t_attach, t_stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
MATCH_NS = 2_000_000  # a tokenscope step matches a server step within 2 ms at both ends


def jsonl(name):
    return read_jsonl(os.path.join(out, name))


def ms(x, width=8, digits=2):
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.{digits}f}"


def peer_port(conn):
    try:
        return int(conn.split("<-")[1].split("#")[0].rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return -1


ts_lines = jsonl("tokenscope.jsonl")
ts_reqs = [r for r in ts_lines if "conn" in r]
ts_steps = [r["gpu_step"] for r in ts_lines if "gpu_step" in r]
gt = jsonl("client.jsonl")
srv_steps = [s for s in jsonl("steps.jsonl")
             if s.get("start_ns", 0) >= t_attach and s.get("end_ns", 0) <= t_stop]

# ---- requests: tokenscope against the client, by client port and order on it -------------
print(f"requests: client {len(gt)}, tokenscope {len(ts_reqs)}")
ts_by_port = collections.defaultdict(list)
for r in sorted(ts_reqs, key=lambda r: (r.get("seq", 0), r.get("arrival_ns", 0))):
    ts_by_port[peer_port(r.get("conn", ""))].append(r)
gt_by_port = collections.defaultdict(list)
for c in sorted(gt, key=lambda c: (c.get("seq", 0), c.get("send_ns", 0))):
    gt_by_port[c.get("port")].append(c)
pairs = []
for port, cs in gt_by_port.items():
    for i, c in enumerate(cs):
        t = ts_by_port[port][i] if i < len(ts_by_port[port]) else None
        pairs.append((c, t))
pairs.sort(key=lambda p: p[0].get("send_ns", 0))
extra_ts = sum(max(0, len(v) - len(gt_by_port.get(p, []))) for p, v in ts_by_port.items())

# The server's own view of each request: its prefill step (by arrival order: the server numbers
# requests as it reads them, and tokenscope's arrival is that read).
srv_prefill = sorted((s for s in srv_steps if s.get("kind") == "prefill"), key=lambda s: s["req"])
ts_by_arrival = sorted((t for _, t in pairs if t), key=lambda t: t.get("arrival_ns", 0))
srv_of = {}
if len(srv_prefill) == len(ts_by_arrival):
    for t, s in zip(ts_by_arrival, srv_prefill):
        srv_of[id(t)] = s

print("times in ms; ttft c = client (send to first content frame read), ttft t = tokenscope "
      "(read of the request to write of the first frame);\n|tok| = max |client - tokenscope| "
      "over every token time; srvQ/srvP = the server log's prefill step start - tokenscope "
      "arrival, and its duration")
hdr = (f"{'port':>6} {'outcome c/t':>15} {'tok c/t':>7} {'ttft c':>8} {'ttft t':>8} {'diff':>7} "
       f"{'|tok|':>6} {'queue':>8} {'prefill':>8} {'decode':>8} {'gpu':>8} {'host':>7} "
       f"{'srvQ':>8} {'srvP':>6}")
print(hdr)
dttft, dtok, causal, attribution = [], [], [], collections.Counter()
for c, t in pairs:
    if t is None:
        print(f"{c.get('port'):>6} {c.get('outcome', '?') + '/-':>15}   (not seen by tokenscope)")
        continue
    attribution[t.get("attribution") or "null"] += 1
    d = None
    if c.get("ttft_ms") is not None and t.get("ttft_ms") is not None:
        d = t["ttft_ms"] - c["ttft_ms"]
        dttft.append(d)
    ct, tt = c.get("token_ns") or [], t.get("token_ns") or []
    diffs = [(a - b) / 1e6 for a, b in zip(ct, tt)]
    dtok += [abs(x) for x in diffs]
    causal += diffs
    s = srv_of.get(id(t))
    srv_q = (s["start_ns"] - t["arrival_ns"]) / 1e6 if s and t.get("arrival_ns") else None
    srv_p = (s["end_ns"] - s["start_ns"]) / 1e6 if s else None
    tok = f"{len(ct)}/{len(tt)}"
    print(f"{c.get('port'):>6} {c.get('outcome', '?') + '/' + t.get('outcome', '?'):>15} "
          f"{tok:>7} {ms(c.get('ttft_ms'))} {ms(t.get('ttft_ms'))} {ms(d, 7, 3)} "
          f"{ms(max((abs(x) for x in diffs), default=None), 6, 3)} {ms(t.get('queue_ms'))} "
          f"{ms(t.get('prefill_ms'))} {ms(t.get('decode_ms'))} {ms(t.get('gpu_ms'))} "
          f"{ms(t.get('host_ms'), 7)} {ms(srv_q)} {ms(srv_p, 6)}")
if extra_ts:
    print(f"tokenscope reported {extra_ts} request(s) the client did not make")
for how, n in attribution.most_common():
    print(f"attribution ({n}): {how}")
if dttft:
    print(f"ttft diff (tokenscope - client): median {pct(dttft, 0.5):+.3f} ms, "
          f"max |diff| {max(abs(x) for x in dttft):.3f} ms over {len(dttft)} requests")
if causal:
    print(f"token times (client read - tokenscope write): min {min(causal):+.3f} ms, median "
          f"{pct(causal, 0.5):+.3f} ms, max {max(causal):+.3f} ms over {len(causal)} tokens "
          f"(negative: the client read a frame before the server wrote it)")

# ---- GPU steps --------------------------------------------------------------------------
print()
pids = collections.Counter(s.get("pid") for s in ts_steps)
print(f"tokenscope GPU steps: {len(ts_steps)} "
      f"({', '.join(f'pid {p}: {n}' for p, n in pids.most_common()) or 'none'}); "
      f"engine pid {engine_pid}")
eng_steps = [s for s in ts_steps if s.get("pid") == engine_pid] or ts_steps


def kind_table(title, steps, counts):
    print(title)
    if not steps:
        print("  (none)")
        return
    head = f"  {'kind':<8} {'n':>5} {'dur p50':>8} {'p99':>8} {'max':>8} ms"
    if counts:
        head += (f"  {'launches/step':>20} {'graphs/step':>16} {'dtoh/step':>9} "
                 f"{'waits/step':>10}")
    print(head)
    by_kind = collections.defaultdict(list)
    for s in steps:
        by_kind[s.get("kind", "?")].append(s)
    for kind in sorted(by_kind):
        ss = by_kind[kind]
        dur = [(s["end_ns"] - s["start_ns"]) / 1e6 for s in ss]
        line = (f"  {kind:<8} {len(ss):>5} {pct(dur, 0.5):>8.3f} {pct(dur, 0.99):>8.3f} "
                f"{max(dur):>8.3f}   ")
        if counts:
            def rng(key):
                v = [s.get(key, 0) for s in ss]
                return f"{sum(v) / len(v):.1f} [{min(v)}-{max(v)}]"
            line += (f"{rng('launches'):>20} {rng('graph_launches'):>16} "
                     f"{sum(s.get('memcpys_dtoh', 0) for s in ss) / len(ss):>9.2f} "
                     f"{sum(s.get('waits', 0) for s in ss) / len(ss):>10.2f}")
        print(line)


kind_table("tokenscope steps of the engine, by kind:", eng_steps, True)
kind_table("the server's own steps (--log) while tokenscope traced, by kind:", srv_steps, False)

# Match every server step with the closest unused tokenscope step of the engine: a match when
# its start and its end are each within 2 ms of the server's.
starts_sorted = sorted(eng_steps, key=lambda s: s["start_ns"])
starts = [s["start_ns"] for s in starts_sorted]
used = set()
matched, kinds_agree, dstart, dend = 0, 0, [], []
match_by_kind = collections.Counter()
unmatched = []
for s in sorted(srv_steps, key=lambda s: s["start_ns"]):
    lo = bisect.bisect_left(starts, s["start_ns"] - MATCH_NS)
    hi = bisect.bisect_right(starts, s["start_ns"] + MATCH_NS)
    best = None
    for j in range(lo, hi):
        if j in used:
            continue
        t = starts_sorted[j]
        err = max(abs(t["start_ns"] - s["start_ns"]), abs(t["end_ns"] - s["end_ns"]))
        if err <= MATCH_NS and (best is None or err < best[0]):
            best = (err, j)
    if best is None:
        unmatched.append(s)
        continue
    used.add(best[1])
    t = starts_sorted[best[1]]
    matched += 1
    match_by_kind[s["kind"]] += 1
    kinds_agree += t.get("kind") == s["kind"]
    dstart.append((t["start_ns"] - s["start_ns"]) / 1e3)
    dend.append((t["end_ns"] - s["end_ns"]) / 1e3)
srv_kinds = collections.Counter(s["kind"] for s in srv_steps)
print(f"step matching (start and end within 2 ms): {matched}/{len(srv_steps)} server steps "
      f"have a tokenscope step ("
      + ", ".join(f"{k} {match_by_kind[k]}/{n}" for k, n in sorted(srv_kinds.items()))
      + f"); kinds agree for {kinds_agree}/{matched}")
if dstart:
    tight = sum(1 for a, b in zip(dstart, dend) if abs(a) <= 100 and abs(b) <= 100)
    print(f"  {tight}/{matched} matched steps are within 0.1 ms at both ends")
    print(f"  start: tokenscope - server median {pct(dstart, 0.5):+.1f} us, "
          f"max |diff| {max(abs(x) for x in dstart):.1f} us (expected >= 0: the first CUDA "
          f"call comes after the server's clock read)")
    print(f"  end:   tokenscope - server median {pct(dend, 0.5):+.1f} us, "
          f"max |diff| {max(abs(x) for x in dend):.1f} us (expected <= 0: the host wait returns "
          f"before .item() does)")
for s in unmatched[:5]:
    print(f"  unmatched server step {s['step']} ({s['kind']}, req {s.get('req')}, token "
          f"{s.get('token')}): {(s['end_ns'] - s['start_ns']) / 1e6:.3f} ms at "
          f"{(s['start_ns'] - t_attach) / 1e6:.3f} ms after attach")
extra = [starts_sorted[j] for j in range(len(starts_sorted)) if j not in used]
if extra:
    by = collections.Counter(s.get("kind") for s in extra)
    print(f"  tokenscope steps with no server step: {len(extra)} ("
          + ", ".join(f"{k} {n}" for k, n in by.most_common()) + ")")
    for s in extra[:5]:
        print(f"    {s.get('kind')} {(s['end_ns'] - s['start_ns']) / 1e6:.3f} ms at "
              f"{(s['start_ns'] - t_attach) / 1e6:.3f} ms after attach: launches "
              f"{s.get('launches')} graphs {s.get('graph_launches')} memcpys "
              f"{s.get('memcpys')} (dtoh {s.get('memcpys_dtoh')}) waits {s.get('waits')}")

print()
seen = sum(1 for _, t in pairs if t)
ttft_txt = f"{max(abs(x) for x in dttft):.3f} ms" if dttft else "n/a"
tok_txt = f"{max(dtok):.3f} ms" if dtok else "n/a"
print(f"gpu-check: {seen}/{len(gt)} requests seen by tokenscope, max |ttft diff| {ttft_txt}, "
      f"max |token diff| {tok_txt}, {matched}/{len(srv_steps)} server steps matched")
PY
		say "gpu-check: the comparison failed (above); artefacts in $OUT"

	section "plain: the server alone, under the load of the run phase"
	if start_server "$OUT/plain.server.out" "" "$OUT/plain.steps.jsonl"; then
		tool 120 .output/gtclient --port "$PORT" "${LOAD[@]}" -o "$OUT/plain.client.jsonl"
		say "(exit status $?)"
	else
		say "the GPU server did not start (above): no plain figures"
	fi
	stop_server

	section "run: tokenscope run --json --tokens --gpu-steps --listen 127.0.0.1:0 -- gpu_server.py"
	local cupti metrics=''
	# The server gets this shell's library path, not the one of .output/lib given to tokenscope.
	local SERVER_ENV=(env -u LD_LIBRARY_PATH)
	[ -n "${LD_LIBRARY_PATH+x}" ] && SERVER_ENV=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH")
	[ -f .output/libtokenscope_cupti.so ] ||
		say "warning: .output/libtokenscope_cupti.so is missing (no CUPTI headers where it was built): no device times"
	if [ -z "${TOKENSCOPE_CUPTI_PATH:-}" ] && cupti=$(find_cupti); then
		export TOKENSCOPE_CUPTI_PATH=$cupti
		say "libcupti: $cupti (TOKENSCOPE_CUPTI_PATH)"
	fi
	if [ -z "$ts_ok" ]; then
		say "skipped: tokenscope cannot run here (above)"
	elif start_server "$OUT/run.jsonl" "$OUT/run.err" "$OUT/run.steps.jsonl" \
		${TOOL_ENV[@]+"${TOOL_ENV[@]}"} .output/tokenscope run --json --tokens --gpu-steps \
		--listen 127.0.0.1:0 -- "${SERVER_ENV[@]}"; then
		# The engine loaded CUDA at start-up; its probes go in at the next scan (1 s).
		for ((i = 0; i < 100; i++)); do
			grep -q 'device times of pid' "$OUT/run.err" && break
			sleep 0.1
		done
		grep '^tokenscope' "$OUT/run.err"
		metrics=$(grep -m 1 -o 'metrics at http://[^ ]*' "$OUT/run.err" | cut -d' ' -f3)
		tool 120 .output/gtclient --port "$PORT" "${LOAD[@]}" -o "$OUT/run.client.jsonl" &
		local load=$!
		sleep 3 # into the load: the GPU busy, a few NVML samples taken
		if [ -n "$metrics" ]; then
			"$PY" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
				"$metrics" >"$OUT/run.metrics.txt" 2>&1 || say "the /metrics scrape failed"
		fi
		if [ -z "$NO_GPU" ]; then
			timeout --foreground 20 nvidia-smi --format=csv,noheader,nounits \
				--query-gpu=index,utilization.gpu,memory.used,memory.total,clocks.sm,power.draw \
				>"$OUT/run.nvsmi.csv" 2>&1
			timeout --foreground 20 nvidia-smi --format=csv,noheader,nounits \
				--query-compute-apps=pid,used_memory >"$OUT/run.nvsmi-apps.csv" 2>&1
			say "nvidia-smi: $(tr '\n' ';' <"$OUT/run.nvsmi.csv")"
		fi
		wait "$load"
		say "(client exit status $?)"
		sleep 0.5
	else
		say "the GPU server did not start under tokenscope run (above)"
	fi
	stop_run
	section "run: tokenscope's stderr"
	grep '^  \|^tokenscope\|^---' "$OUT/run.err" 2>/dev/null

	section "device comparison"
	timeout --foreground 60 "$PY" scripts/gpu_check_device.py "$OUT" "${ENGINE:-0}" ||
		say "gpu-check: the device comparison failed (above); artefacts in $OUT"

	# Phases 4-6: continuous batching. The dry run: the fake engine, lighter loads.
	local cb_engine=transformers levels=(1 8 32 64) cost_load=(-n 64 -c 32 --max-tokens 64)
	CB_TOKENS=32 CB_ENV=()
	if [ -n "$NO_GPU" ]; then
		cb_engine=fake cost_load=(-n 32 -c 16 --max-tokens 16)
	elif [ -f .output/libtokenscope_cupti.so ]; then
		CB_ENV=(env "CUDA_INJECTION64_PATH=$PWD/.output/libtokenscope_cupti.so")
	fi
	SRV_CMD=(scripts/cb_server.py --engine "$cb_engine") SRV_LIMIT=300
	section "continuous batching: cb_server.py --engine $cb_engine, ${levels[*]} streams"
	if ! cb_phase cb "${levels[@]}"; then
		say "cb_server.py did not start (above): no continuous-batching figures"
		stop_server
	else
		section "cost: rounds interleaved on the same server, gtclient ${cost_load[*]}"
		local modes=(none default) r m
		if [ -z "$ts_ok" ]; then
			modes=(none)
			say "tokenscope cannot run here: untraced rounds only"
		elif tool 10 .output/tokenscope trace --help 2>&1 | grep -- '--device-times' >/dev/null; then
			modes=(none off default)
		else
			say "this tokenscope has no --device-times: the 'off' rounds are skipped"
		fi
		say "modes: none (untraced), off (trace -p --device-times off), default (trace -p)"
		for r in 1 2 3; do
			for m in "${modes[@]}"; do
				case $m in
				off) trace_start "$TMP/cost.ts" "$OUT/cost.$r.$m.err" --device-times off ;;
				default) trace_start "$TMP/cost.ts" "$OUT/cost.$r.$m.err" ;;
				esac || say "round $r $m: tokenscope did not attach"
				tool 120 .output/gtclient --port "$PORT" "${cost_load[@]}" --usage \
					-o "$OUT/cost.$r.$m.client.jsonl" >/dev/null
				stop_tokenscope
			done
		done
		timeout --foreground 30 "$PY" scripts/gpu_check_cb.py cost "$OUT"
		stop_server
		section "the engine's stderr"
		grep -v '^{' "$OUT/cb.server.out" | tail -n 15
		section "continuous batching: comparison"
		timeout --foreground 60 "$PY" scripts/gpu_check_cb.py check "$OUT" "$OUT/cb.engine.jsonl" \
			"${levels[@]/#/cb.c}" || say "gpu-check: the comparison failed (above)"
	fi

	SRV_CMD=(scripts/cb_server.py --engine "$cb_engine" --kv-blocks 24) CB_TOKENS=64
	section "small KV cache: cb_server.py --engine $cb_engine --kv-blocks 24 (32-token blocks)"
	if cb_phase cb-kv 32; then
		stop_server
		timeout --foreground 60 "$PY" scripts/gpu_check_cb.py check "$OUT" \
			"$OUT/cb-kv.engine.jsonl" cb-kv.c32 || say "gpu-check: the comparison failed (above)"
	else
		say "cb_server.py --kv-blocks 24 did not start (above)"
		stop_server
	fi

	section "verdicts"
	grep -h '^gpu-check' "$OUT/report.txt"
}

main "$@" 2>&1 | (trap '' INT TERM && exec tee "$OUT/report.txt")
exit "${PIPESTATUS[0]}"
