#!/usr/bin/env bash
# Kubernetes names of a real server process, without Kubernetes: the reference server is moved
# into a cgroup shaped as the kubelet makes one (a kubepods parent with the pod UID, the
# container id last), and a containerd-shaped state directory holds the container's OCI bundle
# config.json with the CRI annotations. `tokenscope trace -p` (and `--all` by traffic) must label
# its requests with the pod in the JSON lines and on /metrics, and a host server with none.
# Prints PASS/FAIL/SKIP lines and the totals line.
set -u
cd "$(dirname "$0")/../.."
TS=${TOKENSCOPE:-.output/tokenscope}
RS=${REFSERVER:-.output/refserver}
GT=${GTCLIENT:-.output/gtclient}
TMP=$(mktemp -d)
. tests/lib.sh
pids=()
CID=5f0c7e1a9b2d4c6e8f10213243546576879a0b1c2d3e4f5061728394a5b6c7d8
UID_=0b7c1d2e-3f40-4152-8364-758697a8b9ca
CG=""
MADE_RUN=""
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	# the cgroup goes once its process has left it
	if [ -n "$CG" ]; then
		for _ in $(seq 30); do rmdir "$CG" 2>/dev/null && break; sleep 0.1; done
		rmdir "$(dirname "$CG")" "$(dirname "$(dirname "$CG")")" 2>/dev/null
		rmdir "$(dirname "$(dirname "$(dirname "$CG")")")" 2>/dev/null
	fi
	[ -n "$MADE_RUN" ] && rm -rf /run/containerd
	rm -rf "$TMP"
}
trap cleanup EXIT

# Where a cgroup can be made: the v2 hierarchy, else v1's pids (any v1 hierarchy would do).
if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
	BASE=/sys/fs/cgroup
elif [ -d /sys/fs/cgroup/pids ]; then
	BASE=/sys/fs/cgroup/pids
else
	sk k8s-names "no cgroup hierarchy to place a process in here"
	finish
fi
# cgroupfs driver's layout: /kubepods/burstable/pod<UID>/<container id>
CG=$BASE/kubepods/burstable/pod$UID_/$CID
if ! mkdir -p "$CG" 2>"$TMP/mkdir.err"; then
	sk k8s-names "cannot make a cgroup under $BASE: $(cat "$TMP/mkdir.err")"
	CG=""
	finish
fi
STATE=$TMP/containerd
mkdir -p "$STATE/io.containerd.runtime.v2.task/k8s.io/$CID"
cat >"$STATE/io.containerd.runtime.v2.task/k8s.io/$CID/config.json" <<JSON
{"ociVersion":"1.0.2","process":{"args":["refserver"]},
 "annotations":{"io.kubernetes.cri.container-type":"container",
  "io.kubernetes.cri.sandbox-id":"aaaa$CID",
  "io.kubernetes.cri.sandbox-name":"vllm-llama-7d9f4-x2kq",
  "io.kubernetes.cri.sandbox-namespace":"inference",
  "io.kubernetes.cri.sandbox-uid":"$UID_",
  "io.kubernetes.cri.container-name":"engine"}}
JSON

"$RS" --port 0 >"$TMP/rs.out" 2>&1 &
RSPID=$!
pids+=("$RSPID")
"$RS" --port 0 >"$TMP/host.out" 2>&1 &
HOSTPID=$!
pids+=("$HOSTPID")
for _ in $(seq 50); do grep -q listening "$TMP/rs.out" && grep -q listening "$TMP/host.out" && break; sleep 0.1; done
PORT=$(grep -o '[0-9]*$' "$TMP/rs.out")
HOSTPORT=$(grep -o '[0-9]*$' "$TMP/host.out")
echo "$RSPID" >"$CG/cgroup.procs"
if ! grep -q "pod$UID_/$CID" "/proc/$RSPID/cgroup"; then
	ko k8s-names "the server did not move into $CG: $(cat "/proc/$RSPID/cgroup")"
	finish
fi

"$TS" trace -p "$RSPID" --container-state "$TMP/no-such-dir" >/dev/null 2>"$TMP/baddir.txt"
rc=$?
if [ $rc -eq 2 ] && grep -q "container-state $TMP/no-such-dir: No such file or directory" "$TMP/baddir.txt"; then
	ok "k8s-names: a --container-state that cannot be read is a usage error naming it"
else
	ko k8s-names "--container-state of a missing folder: exit $rc: $(head -n 1 "$TMP/baddir.txt")"
fi

MPORT=$((20000 + RANDOM % 20000))
"$TS" trace -p "$RSPID" -p "$HOSTPID" --json --container-state "$STATE" \
	--listen "127.0.0.1:$MPORT" >"$TMP/trace.out" 2>"$TMP/trace.err" &
TSPID=$!
pids+=("$TSPID")
for _ in $(seq 100); do grep -q attached "$TMP/trace.err" && break; sleep 0.1; done
"$GT" --port "$PORT" -n 3 --max-tokens 4 -o "$TMP/gt.json" 2>/dev/null
"$GT" --port "$HOSTPORT" -n 2 --max-tokens 4 -o "$TMP/gt-host.json" 2>/dev/null
sleep 0.5
curl -s "http://127.0.0.1:$MPORT/metrics" >"$TMP/metrics.txt"
kill -INT "$TSPID"
wait "$TSPID"

# Each line: the pod's names from the bundle, the UID from the cgroup path, the short id.
verdict=$(/usr/bin/python3 - "$TMP/trace.out" "$RSPID" "$HOSTPID" "$CID" "$UID_" <<'PY'
import json, sys
path, pod_pid, host_pid, cid, uid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
lines = [json.loads(l) for l in open(path) if l.startswith("{")]
reqs = [l for l in lines if "ttft_ms" in l]
pod = [l for l in reqs if l["pid"] == pod_pid]
host = [l for l in reqs if l["pid"] == host_pid]
want = {"namespace": "inference", "pod": "vllm-llama-7d9f4-x2kq", "pod_uid": uid,
        "container": "engine", "container_id": cid}
if len(pod) != 3 or len(host) != 2:
    print("requests: %d in the pod, %d on the host (want 3 and 2)" % (len(pod), len(host)))
elif any(l.get("k8s") != want or l.get("container") != cid[:12] for l in pod):
    print("pod request labelled %r / %r" % (pod[0].get("k8s"), pod[0].get("container")))
elif any("k8s" in l or "container" in l for l in host):
    print("host request labelled %r" % host[0])
else:
    print("ok")
PY
)
if [ "$verdict" = ok ]; then
	ok "k8s-names: 3 requests of the pod's server carry its namespace, pod, UID, container and id; 2 of a host server none"
else
	ko k8s-names "$verdict"
fi
if grep -q "^tokenscope_requests_total{model=\"ref\",role=\"server\",namespace=\"inference\",pod=\"vllm-llama-7d9f4-x2kq\",container=\"${CID:0:12}\",outcome=\"ok\"} 3$" "$TMP/metrics.txt" &&
	grep -q '^tokenscope_requests_total{model="ref",role="server",outcome="ok"} 2$' "$TMP/metrics.txt"; then
	ok "k8s-names: /metrics labels the pod's series with namespace and pod, the host's with none"
else
	ko k8s-names "/metrics: $(grep '^tokenscope_requests_total' "$TMP/metrics.txt" | head -4)"
fi

# A recording keeps the names: report shows what trace showed.
"$TS" record -p "$RSPID" --container-state "$STATE" -o "$TMP/run.tsr" >"$TMP/record.out" 2>"$TMP/record.err" &
RECPID=$!
pids+=("$RECPID")
for _ in $(seq 100); do grep -q attached "$TMP/record.err" && break; sleep 0.1; done
"$GT" --port "$PORT" -n 2 --max-tokens 4 -o /dev/null 2>/dev/null
sleep 0.3
kill -INT "$RECPID"
wait "$RECPID"
"$TS" report --json "$TMP/run.tsr" >"$TMP/report.out" 2>"$TMP/report.err"
n=$(grep -c '"k8s":{"namespace":"inference","pod":"vllm-llama-7d9f4-x2kq","pod_uid":"'"$UID_"'","container":"engine"' "$TMP/report.out")
if [ "$n" -eq 2 ]; then
	ok "k8s-names: report of a recording labels its 2 requests with the pod, as trace did"
else
	ko k8s-names "report: $n of 2 requests labelled: $(head -c 400 "$TMP/report.out")"
fi

# As the DaemonSet finds the names: no --container-state, the runtime's state at its default
# place seen through /proc/1/root (the node's root), from a mount namespace where /run is not
# the node's, as root with the DaemonSet's four capabilities; and without CAP_SYS_PTRACE, which
# /proc/1/root asks for, the pod UID alone. The state goes where containerd keeps it,
# /run/containerd, only when nothing is there (a real containerd's is left alone).
node_view() { # name caps
	unshare -m sh -c 'mount -t tmpfs none /run && exec setpriv --bounding-set=-all,'"$2"' \
		--inh-caps=-all -- "$@"' sh "$TS" trace -p "$RSPID" --json \
		>"$TMP/$1.out" 2>"$TMP/$1.err" &
	TSPID=$!
	pids+=("$TSPID")
	for _ in $(seq 100); do grep -q attached "$TMP/$1.err" && break; sleep 0.1; done
	"$GT" --port "$PORT" -n 1 --max-tokens 4 -o /dev/null 2>/dev/null
	sleep 0.3
	kill -INT "$TSPID"
	wait "$TSPID"
}
if [ -e /run/containerd ]; then
	sk k8s-names "/run/containerd exists (a containerd runs here): the default place is not tried"
elif ! command -v setpriv >/dev/null || ! unshare -m true 2>/dev/null; then
	sk k8s-names "needs setpriv and unshare -m"
elif ! ls /proc/1/root/ >/dev/null 2>"$TMP/pid1"; then
	sk k8s-names "pid 1's root cannot be read here even with every capability ($(cat "$TMP/pid1")): the node's view through /proc/1/root is not tried"
else
	MADE_RUN=1
	mkdir -p /run/containerd
	cp -r "$STATE/io.containerd.runtime.v2.task" /run/containerd/
	node_view node +bpf,+perfmon,+sys_admin,+sys_ptrace
	node_view noptrace +bpf,+perfmon,+sys_admin
	if grep -q '"k8s":{"namespace":"inference","pod":"vllm-llama-7d9f4-x2kq"' "$TMP/node.out"; then
		ok "k8s-names: with the DaemonSet's capabilities the names come from /proc/1/root/run/containerd"
	else
		ko k8s-names "through /proc/1/root: $(head -c 300 "$TMP/node.out") $(tail -n 3 "$TMP/node.err")"
	fi
	if grep -q '"k8s":{"namespace":null,"pod":null,"pod_uid":"'"$UID_"'"' "$TMP/noptrace.out"; then
		ok "k8s-names: without CAP_SYS_PTRACE the pod's UID alone, its names null"
	else
		ko k8s-names "without CAP_SYS_PTRACE: $(head -c 300 "$TMP/noptrace.out")"
	fi
	rm -rf /run/containerd
	MADE_RUN=""
fi
finish
