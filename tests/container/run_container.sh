#!/usr/bin/env bash
# tokenscope's image run by a real container runtime, as the DaemonSet runs it on a node, beside
# an inference server in a container created as the kubelet's CRI plugin creates one.
#
#  - a private containerd (Debian's, with runc) whose config, root, state, sockets and runc root
#    are all under a temporary folder, in a mount namespace of its own (its mounts go with it);
#    the system's containerd, if any, is not used. Everything is removed at exit, on a signal
#    too: tasks, containers, the daemon and its shims, the cgroups, the folder.
#  - two images built offline and imported into its k8s.io namespace: tokenscope's, by `make
#    image`, and a server's, made here with umoci: tests/refserver.c (with the libraries it
#    links) as /usr/local/bin/llama-server, so that `--all` finds it by the llama.cpp rule
#    (user/loader/discover.h; the reference server's own name matches no rule).
#  - the server's container: the CRI annotations on its OCI spec (container-type, sandbox-name,
#    sandbox-namespace, sandbox-uid, container-name, sandbox-id) and the cgroup the kubelet's
#    cgroupfs driver gives it, /kubepods/burstable/pod<uid>/<container id>; host network, so the
#    client reaches it.
#  - tokenscope from its image (the default build and the shared libraries it loads) with the
#    DaemonSet's settings: the node's pid namespace, root with every capability dropped but BPF,
#    PERFMON, SYS_ADMIN, SYS_PTRACE and KILL, containerd's default seccomp profile
#    (RuntimeDefault), a read-only root filesystem, /sys/kernel/btf read-only, `tokenscope trace
#    --all --listen 0.0.0.0:PORT --json --otlp URL`, host network so it can be scraped and
#    reach the OTLP receiver (tests/otlp/receiver.py), the private containerd's state folder
#    read-only at the same path (where the server's bundle config.json is), given with
#    --container-state, and the stand-in NVML (tests/nvmlstub.c) bound where the NVIDIA
#    container toolkit mounts the driver's libnvidia-ml.so.1.
#  - the ground-truth client's requests to the server; then: the server is found by rule in its
#    container, every request is reported with the client's token count, each JSON line carries
#    the server's Kubernetes names ("k8s"), a real Prometheus scraping /metrics sees the
#    requests under the labels namespace and pod, /metrics has the stand-in GPU's utilisation,
#    the receiver gets every request's span under the server's pod (resource attributes), and
#    tokenscope exits 0 on SIGTERM.
# SKIPs, saying why, where the runtime cannot run here (not root, tools missing, no usable
# cgroup hierarchy, containerd not starting). Prints PASS/FAIL/SKIP lines and the totals line.
set -u
cd "$(dirname "$0")/../.." || exit 1
RS=${REFSERVER:-.output/refserver}
GT=${GTCLIENT:-.output/gtclient}
# The binary make image puts in the image (asked which options it has).
TS_BIN=.output/tokenscope
# The stand-in NVML, mounted where the NVIDIA container toolkit puts the driver's library, and
# what its GPU says.
NVML_STANDIN=.output/standin/libnvidia-ml.so.1
NVML_DIR=/usr/lib/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
NVML_STUB="name=Stub H200,uuid=GPU-ctr-0001,util=37,mem=1073741824/8589934592"
RULES=deploy/prometheus/rules.yml # start_prometheus loads it
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
TMP=$(mktemp -d /tmp/tokenscope-ctr.XXXXXX)
. tests/lib.sh
# shellcheck source=tests/prom/prom_lib.sh
. tests/prom/prom_lib.sh
KO_LOGS="$TMP/containerd.log $TMP/server.log"
# tokenscope's messages, without its JSON lines, for a FAIL to show.
ts_err() { grep -v '^{' "$TMP/ts.log" >"$TMP/tokenscope.err" 2>/dev/null; }
pids=()
# Every wait is bounded: this many tenths of a second at most.
WAIT_DAEMON=150 WAIT_READY=300 WAIT_FOUND=150 WAIT_LINES=150 WAIT_SCRAPE=300 WAIT_EXIT=100

# The private containerd's places. Its sockets' paths must stay under 108 bytes.
SOCK=$TMP/containerd.sock
STATE=$TMP/state
NS=k8s.io
ctr_() { ctr --address "$SOCK" --namespace "$NS" "$@"; }
CTD_PID=
# containerd 1.6 puts its shims' sockets in /run/containerd/s, whatever its state folder: made
# here if missing, and removed at exit if it was.
RUN_CTD_MADE=0
[ -d /run/containerd ] || RUN_CTD_MADE=1

# The pods. IDs as the CRI plugin makes them: 64 hex digits; pod UIDs are UUIDs.
hex64() { head -c 32 /dev/urandom | sha256sum | cut -c1-64; }
SRV_NS=inference SRV_POD=llama-server-0 SRV_CTR=server
SRV_UID=$(cat /proc/sys/kernel/random/uuid)
SRV_SANDBOX=$(hex64) SRV_ID=$(hex64)
TS_NS=tokenscope TS_POD=tokenscope-x7k2p TS_CTR=tokenscope
TS_UID=$(cat /proc/sys/kernel/random/uuid)
TS_SANDBOX=$(hex64) TS_ID=$(hex64)
# cgroupfs driver (the kubelet's --cgroup-driver=cgroupfs with containerd's SystemdCgroup =
# false): /kubepods/<qos>/pod<uid>/<container id> in every hierarchy. The systemd driver's
# kubepods-burstable-pod<uid>.slice:cri-containerd:<id> needs systemd as pid 1 to make slices.
srv_cgroup=/kubepods/burstable/pod$SRV_UID/$SRV_ID
ts_cgroup=/kubepods/burstable/pod$TS_UID/$TS_ID
CG_MOUNTS=() # every cgroup hierarchy mounted here (v1 and v2)
CG_MADE=()   # the folders of the cgroup paths above that did not exist before, deepest last

cleaned=0
cleanup() {
	[ $cleaned -eq 1 ] && return
	cleaned=1
	[ -n "${OTLP_PID:-}" ] && kill "$OTLP_PID" 2>/dev/null
	if [ -n "$CTD_PID" ] && kill -0 "$CTD_PID" 2>/dev/null; then
		for id in $(ctr_ tasks ls -q 2>/dev/null); do
			ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1
		done
		for id in $(ctr_ tasks ls -q 2>/dev/null); do
			for _ in $(seq 30); do
				ctr_ tasks ls 2>/dev/null | grep -q "^$id .*STOPPED" && break
				sleep 0.1
			done
			ctr_ tasks delete "$id" >/dev/null 2>&1
		done
		for id in $(ctr_ containers ls -q 2>/dev/null); do
			ctr_ containers delete "$id" >/dev/null 2>&1
		done
	fi
	stop_pids
	# The shims of this daemon (each started with its socket's address), if any outlived their
	# tasks: by pid, none of another containerd.
	for c in /proc/[0-9]*/cmdline; do
		p=${c#/proc/}
		p=${p%/cmdline}
		tr '\0' ' ' 2>/dev/null <"$c" | grep -q "containerd-shim.*-address $SOCK " &&
			kill -9 "$p" 2>/dev/null
	done
	# runc removes a container's own cgroup; the pod's and the parents made here are removed
	# deepest first, in each hierarchy (rmdir removes only empty ones).
	for ((i = ${#CG_MADE[@]} - 1; i >= 0; i--)); do
		for m in "${CG_MOUNTS[@]}"; do
			[ -d "$m${CG_MADE[$i]}" ] && rmdir "$m${CG_MADE[$i]}" 2>/dev/null
		done
	done
	if [ $RUN_CTD_MADE -eq 1 ]; then
		rmdir /run/containerd/s /run/containerd/fifo /run/containerd 2>/dev/null
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# What is needed, else SKIP.
if [ "$(id -u)" -ne 0 ]; then
	sk "container" "needs root (a container runtime, BPF)"
	finish
fi
missing=""
for c in containerd ctr runc containerd-shim-runc-v2 umoci skopeo prometheus curl unshare; do
	command -v $c >/dev/null || missing="$missing $c"
done
for t in "$RS" "$GT"; do [ -x "$t" ] || missing="$missing $t"; done
if [ -n "$missing" ]; then
	sk "container" "missing:$missing (scripts/deps.sh test; make)"
	finish
fi
while read -r _ mnt type _; do
	case $type in cgroup | cgroup2) CG_MOUNTS+=("$mnt") ;; esac
done </proc/self/mounts
probe=/tokenscope-probe-$$
if [ ${#CG_MOUNTS[@]} -eq 0 ] || ! mkdir "${CG_MOUNTS[0]}$probe" 2>/dev/null; then
	sk "container" "no cgroup hierarchy to make a container's cgroup in (${CG_MOUNTS[*]:-none mounted})"
	finish
fi
rmdir "${CG_MOUNTS[0]}$probe"
for p in /kubepods /kubepods/burstable "/kubepods/burstable/pod$SRV_UID" \
	"/kubepods/burstable/pod$TS_UID"; do
	[ -d "${CG_MOUNTS[0]}$p" ] || CG_MADE+=("$p")
done

# 1. tokenscope's image, by make image; the DaemonSet names it, and runs it with the settings
# used below (on port 9464, where this test takes a free port).
VERSION=$(sed -n 's/^#define TOKENSCOPE_VERSION "\(.*\)"/\1/p' user/lib/version.h)
DS=deploy/kubernetes/daemonset.yaml
dsbad=""
for line in "image: REGISTRY/tokenscope:$VERSION" 'command: ["tokenscope"]' \
	'args: ["trace", "--all", "--listen", "0.0.0.0:9464"]' 'hostPID: true' 'runAsUser: 0' \
	'readOnlyRootFilesystem: true' 'drop: ["ALL"]' '- BPF' '- PERFMON' '- SYS_ADMIN' \
	'- SYS_PTRACE' '- KILL' 'type: RuntimeDefault' 'mountPath: /sys/kernel/btf' 'readOnly: true' \
	'args: ["check"]' 'securityContext: *agent'; do
	grep -qxF -e "$line" <(sed 's/^ *//' "$DS") || dsbad="$dsbad '$line'"
done
if [ -z "$dsbad" ]; then
	ok "$DS runs REGISTRY/tokenscope:$VERSION with the settings this test gives it"
else
	ko "$DS" "lines missing:$dsbad"
fi
ARCHIVE=.output/image/tokenscope-$VERSION.oci.tar
if ! make --no-print-directory image >"$TMP/make-image.log" 2>&1 || [ ! -s "$ARCHIVE" ]; then
	ko "make image" "$(tail -n 5 "$TMP/make-image.log")"
	finish
fi
# What is in it: one layer, the one file, and the entrypoint.
layer_files=$(skopeo inspect --raw "oci-archive:$ARCHIVE" | "$PY" -c '
import json, sys
m = json.load(sys.stdin)
print(len(m["layers"]), m["layers"][0]["digest"].split(":")[1])' 2>&1)
read -r nlayers ldigest <<<"$layer_files"
tar -xOf "$ARCHIVE" "blobs/sha256/$ldigest" 2>/dev/null | tar -tvzf - 2>&1 |
	awk '/^-/ { print "/" $NF }' | sort >"$TMP/layer.files"
# Exactly the binary, the libraries image.sh found it loads (libraries.txt), and the CA file.
sort <(echo /usr/local/bin/tokenscope) .output/image/libraries.txt \
	<([ -f /etc/ssl/certs/ca-certificates.crt ] && echo /etc/ssl/certs/ca-certificates.crt) \
	>"$TMP/want.files"
nlibs=$(wc -l <.output/image/libraries.txt)
libs_needed=""
for l in libbpf.so.1 libelf.so.1 libcurl.so.4 libcapstone.so.4 libmicrohttpd.so.12 libc.so.6; do
	grep -q "/$l\$" "$TMP/layer.files" || libs_needed="$libs_needed $l"
done
entry=$(skopeo inspect --config "oci-archive:$ARCHIVE" 2>&1 | "$PY" -c '
import json, sys
c = json.load(sys.stdin)["config"]
print(" ".join(c["Entrypoint"]), " ".join(c["Env"]))' 2>&1)
if [ "$nlayers" = 1 ] && cmp -s "$TMP/layer.files" "$TMP/want.files" && [ -z "$libs_needed" ] &&
	[ "$entry" = "/usr/local/bin/tokenscope PATH=/usr/local/bin" ]; then
	ok "make image: $ARCHIVE ($(du -k "$ARCHIVE" | cut -f1) KiB), one layer: usr/local/bin/tokenscope, $nlibs shared libraries (libcurl, capstone, libmicrohttpd among them), the CA certificates; entrypoint $entry"
else
	ko "image contents" "layers '$nlayers', missing:$libs_needed; files: $(diff "$TMP/want.files" "$TMP/layer.files" | head -n 5 | tr '\n' ' '); entrypoint and env '$entry'"
fi

# 2. The server's image: the reference server and the libraries it links, FROM scratch too.
SL=$TMP/server-oci
{
	umoci init --layout "$SL" && umoci new --image "$SL:test" &&
		umoci unpack --image "$SL:test" "$TMP/server-bundle" >/dev/null &&
		install -D -m 0755 "$RS" "$TMP/server-bundle/rootfs/usr/local/bin/llama-server" &&
		for lib in $(ldd "$RS" | grep -o '/[^ ]*'); do
			install -D -m 0755 "$(readlink -f "$lib")" "$TMP/server-bundle/rootfs$lib" || exit 1
		done &&
		umoci repack --image "$SL:test" "$TMP/server-bundle" &&
		umoci config --image "$SL:test" --config.entrypoint /usr/local/bin/llama-server &&
		skopeo copy -q "oci:$SL:test" "oci-archive:$TMP/server.oci.tar:llama-server:test"
} >"$TMP/server-image.log" 2>&1
if [ ! -s "$TMP/server.oci.tar" ]; then
	ko "server image" "$(tail -n 5 "$TMP/server-image.log")"
	finish
fi

# 3. The private containerd, in a mount namespace of its own. overlayfs where the kernel can
# mount it on this folder's file system, else the native snapshotter (copies).
snap=native
mkdir -p "$TMP/ov/l" "$TMP/ov/u" "$TMP/ov/w" "$TMP/ov/m"
if unshare -m sh -c "mount -t overlay overlay -o lowerdir=$TMP/ov/l,upperdir=$TMP/ov/u,workdir=$TMP/ov/w $TMP/ov/m" \
	2>/dev/null; then
	snap=overlayfs
fi
cat >"$TMP/config.toml" <<EOF
version = 2
root = "$TMP/root"
state = "$STATE"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$TMP/opt"
EOF
unshare -m --propagation private containerd --config "$TMP/config.toml" >"$TMP/containerd.log" 2>&1 &
CTD_PID=$!
pids+=("$CTD_PID")
up=0
for _ in $(seq $WAIT_DAEMON); do
	ctr_ version >/dev/null 2>&1 && { up=1; break; }
	kill -0 "$CTD_PID" 2>/dev/null || break
	sleep 0.1
done
if [ $up -eq 0 ]; then
	sk "container" "the private containerd did not start: $(tail -n 3 "$TMP/containerd.log")"
	finish
fi
if ctr_ images import --snapshotter "$snap" "$ARCHIVE" >"$TMP/import.log" 2>&1 &&
	ctr_ images import --snapshotter "$snap" "$TMP/server.oci.tar" >>"$TMP/import.log" 2>&1; then
	ok "a private containerd $(ctr_ version 2>/dev/null | awk '/Server:/ {s = 1} s && /Version:/ {print $2; exit}') ($snap snapshotter) imports tokenscope:$VERSION and llama-server:test into namespace $NS"
else
	ko "image import" "$(cat "$TMP/import.log")"
	finish
fi

# ctr run's common options: the runc state and the I/O fifos under TMP too.
RUN=(run -d --snapshotter "$snap" --runc-root "$TMP/runc" --fifo-dir "$TMP/fifo")
cri_annotations() { # namespace pod uid container sandbox-id
	echo --annotation io.kubernetes.cri.container-type=container \
		--annotation "io.kubernetes.cri.sandbox-namespace=$1" \
		--annotation "io.kubernetes.cri.sandbox-name=$2" \
		--annotation "io.kubernetes.cri.sandbox-uid=$3" \
		--annotation "io.kubernetes.cri.container-name=$4" \
		--annotation "io.kubernetes.cri.sandbox-id=$5"
}
task_pid() { ctr_ tasks ls 2>/dev/null | awk -v id="$1" '$1 == id && $3 == "RUNNING" { print $2 }'; }

# 4. The server's container.
PORT=$(free_port)
# shellcheck disable=SC2046 # the annotations' words
ctr_ "${RUN[@]}" --log-uri "file://$TMP/server.log" --net-host --read-only \
	--cgroup "$srv_cgroup" \
	$(cri_annotations "$SRV_NS" "$SRV_POD" "$SRV_UID" "$SRV_CTR" "$SRV_SANDBOX") \
	llama-server:test "$SRV_ID" llama-server --host 127.0.0.1 --port "$PORT" --prefill-ms 20 \
	--token-ms 4 >"$TMP/run-server.err" 2>&1
for _ in $(seq $WAIT_READY); do grep -q listening "$TMP/server.log" 2>/dev/null && break; sleep 0.1; done
SPID=$(task_pid "$SRV_ID")
BUNDLE=$STATE/io.containerd.runtime.v2.task/$NS/$SRV_ID/config.json
if [ -z "$SPID" ] || ! grep -q listening "$TMP/server.log" 2>/dev/null; then
	ko "server container" "not running: $(cat "$TMP/run-server.err") $(tail -n 3 "$TMP/server.log" 2>/dev/null)"
	finish
fi
annot=$("$PY" -c '
import json, sys
a = json.load(open(sys.argv[1])).get("annotations", {})
print(a.get("io.kubernetes.cri.sandbox-namespace"), a.get("io.kubernetes.cri.sandbox-name"),
      a.get("io.kubernetes.cri.sandbox-uid"), a.get("io.kubernetes.cri.container-name"))' "$BUNDLE" 2>&1)
if [ "$annot" = "$SRV_NS $SRV_POD $SRV_UID $SRV_CTR" ] &&
	grep -qx "0::$srv_cgroup\|[0-9]*:[^:]*:$srv_cgroup" "/proc/$SPID/cgroup"; then
	ok "server container: pid $SPID in cgroup $srv_cgroup, the CRI annotations in its bundle's config.json"
else
	ko "server container" "annotations '$annot' (want '$SRV_NS $SRV_POD $SRV_UID $SRV_CTR'), cgroup: $(head -n 3 "/proc/$SPID/cgroup")"
fi

# 5. tokenscope from its image, as the DaemonSet runs it (deploy/kubernetes/daemonset.yaml),
# plus --json and the runtime's state folder. ctr has no "drop ALL" (the CRI plugin expands it):
# every capability of containerd's default spec is dropped by name, and the four added.
MPORT=$(free_port)
drop=()
for c in $(ctr oci spec | "$PY" -c '
import json, sys
print(" ".join(json.load(sys.stdin)["process"]["capabilities"]["bounding"]))'); do
	# The runtime's defaults go, but for CAP_KILL, which tokenscope keeps (ctr drops after
	# it adds).
	[ "$c" = CAP_KILL ] || drop+=(--cap-drop "$c")
done
# The DaemonSet's init container first: `tokenscope check` from the image with the same
# settings, which must say tracing can start (exit 0) before the agent's container runs.
ctr_ run --rm --snapshotter "$snap" --runc-root "$TMP/runc" --fifo-dir "$TMP/fifo" --net-host \
	--read-only --seccomp --with-ns "pid:/proc/$$/ns/pid" \
	"${drop[@]}" --cap-add CAP_BPF --cap-add CAP_PERFMON --cap-add CAP_SYS_ADMIN \
	--cap-add CAP_SYS_PTRACE --cap-add CAP_KILL \
	--mount type=bind,src=/sys/kernel/btf,dst=/sys/kernel/btf,options=rbind:ro \
	"tokenscope:$VERSION" "$TS_ID-check" tokenscope check >"$TMP/check.out" 2>&1
rc=$?
if [ "$rc" = 0 ] && grep -qx "tracing can start here" "$TMP/check.out" &&
	grep -q "^  CAP_KILL *ok" "$TMP/check.out" && grep -q "^  programs *ok" "$TMP/check.out"; then
	ok "the init container: tokenscope check in the image, as the DaemonSet runs it: exit 0, every capability present, the programs load"
else
	ko "the init container (tokenscope check)" "exit $rc: $(grep -E "FAIL|off|cannot" "$TMP/check.out" | head -n 6)"
fi
state_opt=()
if "$TS_BIN" trace --help 2>&1 | grep -q -- '--container-state'; then
	state_opt=(--container-state "$STATE")
fi
# An OTLP receiver on the host's network, which the agent sends its spans to (the first
# requests are exported whatever the sampling ratio).
"$PY" tests/otlp/receiver.py --dir "$TMP/otlp" --port-file "$TMP/otlp.port" \
	2>"$TMP/otlp.err" &
OTLP_PID=$!
for _ in $(seq $WAIT_READY); do [ -s "$TMP/otlp.port" ] && break; sleep 0.1; done
OPORT=$(cat "$TMP/otlp.port" 2>/dev/null)
# The GPU: the stand-in NVML where the toolkit mounts the driver's (NVIDIA_VISIBLE_DEVICES and
# NVIDIA_DRIVER_CAPABILITIES as the DaemonSet sets them; no toolkit here reads them).
nvml=()
if [ -f "$NVML_STANDIN" ]; then
	nvml=(--mount "type=bind,src=$PWD/$NVML_STANDIN,dst=$NVML_DIR/libnvidia-ml.so.1,options=rbind:ro"
		--env NVIDIA_VISIBLE_DEVICES=all --env NVIDIA_DRIVER_CAPABILITIES=utility
		--env "TS_NVML_STUB=$NVML_STUB")
fi
# shellcheck disable=SC2046 # the annotations' words
ctr_ "${RUN[@]}" --log-uri "file://$TMP/ts.log" --net-host --read-only --seccomp \
	--with-ns "pid:/proc/$$/ns/pid" --cgroup "$ts_cgroup" \
	"${drop[@]}" --cap-add CAP_BPF --cap-add CAP_PERFMON --cap-add CAP_SYS_ADMIN \
	--cap-add CAP_SYS_PTRACE --cap-add CAP_KILL \
	--mount type=bind,src=/sys/kernel/btf,dst=/sys/kernel/btf,options=rbind:ro \
	--mount "type=bind,src=$STATE,dst=$STATE,options=rbind:ro" "${nvml[@]}" \
	$(cri_annotations "$TS_NS" "$TS_POD" "$TS_UID" "$TS_CTR" "$TS_SANDBOX") \
	"tokenscope:$VERSION" "$TS_ID" tokenscope trace --all --listen "0.0.0.0:$MPORT" --json \
	--otlp "http://127.0.0.1:$OPORT/agent/v1/traces" \
	"${state_opt[@]}" >"$TMP/run-ts.err" 2>&1
for _ in $(seq $WAIT_FOUND); do
	grep -q "found $SPID " "$TMP/ts.log" 2>/dev/null && grep -q "attached" "$TMP/ts.log" && break
	sleep 0.1
done
TPID=$(task_pid "$TS_ID")
ts_err
if [ -z "$TPID" ]; then
	ko "tokenscope container" "not running: $(cat "$TMP/run-ts.err") $(tail -n 5 "$TMP/ts.log" 2>/dev/null)"
	finish
fi
# Its process as the kubelet would have made it: the four capabilities and no other, the node's
# pid namespace, the image's root read-only.
capeff=$(awk '/^CapEff:/ { print $2 }' "/proc/$TPID/status")
want_caps=$(printf '%016x' $(((1 << 39) | (1 << 38) | (1 << 21) | (1 << 19) | (1 << 5))))
rootro=$(awk '$5 == "/" { print $6 }' "/proc/$TPID/mountinfo" | head -n 1)
if [ "$capeff" = "$want_caps" ] &&
	[ "$(readlink "/proc/$TPID/ns/pid")" = "$(readlink /proc/$$/ns/pid)" ] &&
	[ "${rootro%%,*}" = ro ] && grep -q "^Seccomp:[[:space:]]*2" "/proc/$TPID/status"; then
	ok "tokenscope container: pid $TPID, capabilities $capeff (BPF, PERFMON, SYS_ADMIN, SYS_PTRACE, KILL), the node's pid namespace, read-only root, seccomp filter"
else
	ko "tokenscope container" "CapEff $capeff (want $want_caps), pid ns $(readlink "/proc/$TPID/ns/pid"), root '$rootro', $(grep Seccomp: "/proc/$TPID/status")"
fi
if [ ${#state_opt[@]} -eq 0 ]; then
	echo "note: $TS_BIN has no --container-state: the state folder is mounted but not named"
fi

# 6. Found by rule, in its container.
short=${SRV_ID:0:12}
ts_err
found="tokenscope: found $SPID (llama.cpp, rule 'llama-server') in pod $SRV_NS/$SRV_POD, container $SRV_CTR ($short)"
if grep -qxF "$found" "$TMP/ts.log"; then
	ok "--all found the server by rule, with its pod: ${found#tokenscope: }"
elif grep -q "tokenscope: found $SPID (llama.cpp, rule 'llama-server')" "$TMP/ts.log"; then
	ko "--all" "found, but not as '$found'"
else
	ko "--all" "no 'found $SPID (llama.cpp, ...)' line"
	finish
fi

# 7. Requests: two batches of different lengths; every one must be reported with the client's
# token count (matched by the client's port), under the server's container.
start_prometheus "$MPORT"
: >"$TMP/gt.jsonl"
"$GT" --port "$PORT" -n 6 -c 3 --max-tokens 7 --usage -o "$TMP/gt1.jsonl" 2>>"$TMP/gt.err"
"$GT" --port "$PORT" -n 6 -c 2 --max-tokens 12 --usage --prompt-bytes 300 -o "$TMP/gt2.jsonl" \
	2>>"$TMP/gt.err"
cat "$TMP/gt1.jsonl" "$TMP/gt2.jsonl" >"$TMP/gt.jsonl" 2>/dev/null
NREQ=12
for _ in $(seq $WAIT_LINES); do
	[ "$(grep -c '^{"pid":' "$TMP/ts.log")" -ge $NREQ ] && break
	sleep 0.1
done
grep '^{"pid":' "$TMP/ts.log" >"$TMP/ts.jsonl"
ts_err
verdict=$("$PY" - "$TMP/gt.jsonl" "$TMP/ts.jsonl" "$SPID" "$short" <<'EOF'
import json, sys
gt = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ts = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
pid, short = int(sys.argv[3]), sys.argv[4]
by_port = {int(r["conn"].split("<-")[1].split("#")[0].rsplit(":", 1)[1]): r for r in ts}
bad = []
if len(gt) != 12 or any(g["outcome"] != "ok" for g in gt):
    bad.append(f"the client made {len(gt)} requests, outcomes {sorted({g['outcome'] for g in gt})}")
for g in gt:
    r = by_port.get(g["port"])
    if r is None:
        bad.append(f"client port {g['port']}: no line")
    elif (r["pid"], r["outcome"], r["tokens"], r.get("container")) != (pid, "ok", g["tokens"], short):
        bad.append(f"port {g['port']}: pid {r['pid']} {r['outcome']} {r['tokens']} tokens "
                   f"container {r.get('container')} (client: {g['tokens']} tokens)")
if len(ts) != len(gt):
    bad.append(f"{len(ts)} lines for {len(gt)} requests")
print("ok" if not bad else "bad " + "; ".join(bad[:4]),
      sorted({g["tokens"] for g in gt}))
EOF
)
case $verdict in
ok*) ok "every request reported with the client's token count (12 requests, tokens ${verdict#ok }) under container $short" ;;
*) ko "requests" "${verdict#bad }" ;;
esac

# 8. The Kubernetes names on every JSON line.
verdict=$("$PY" - "$TMP/ts.jsonl" "$SRV_NS" "$SRV_POD" "$SRV_UID" "$SRV_CTR" "$SRV_ID" <<'EOF'
import json, sys
want = dict(zip(["namespace", "pod", "pod_uid", "container", "container_id"], sys.argv[2:7]))
ts = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
got = [r.get("k8s") for r in ts]
bad = [g for g in got if g != want]
print("ok" if ts and not bad else f"bad {len(bad)} of {len(ts)} lines; first: {bad[0] if bad else None}")
EOF
)
case $verdict in
ok) ok "every JSON line has \"k8s\": namespace $SRV_NS, pod $SRV_POD, pod_uid, container $SRV_CTR, container_id" ;;
*) ko "k8s names in JSON" "${verdict#bad }; want {namespace: $SRV_NS, pod: $SRV_POD, pod_uid: $SRV_UID, container: $SRV_CTR, container_id: $SRV_ID}" ;;
esac

# 9. Prometheus, scraping the container's listener: the requests under the container's short id,
# and under namespace and pod.
ready=0
for _ in $(seq $WAIT_READY); do
	curl -sf --max-time 2 "http://127.0.0.1:$PPORT/-/ready" >/dev/null && { ready=1; break; }
	sleep 0.1
done
if [ $ready -eq 1 ]; then
	for _ in $(seq $WAIT_SCRAPE); do
		c=$(prom_query "sum(tokenscope_requests_total{container=\"$short\",outcome=\"ok\"})")
		n=$(prom_query 'count_over_time(up{job="tokenscope"}[5m])')
		[ "${c:-0}" = $NREQ ] && [ "${n:-0}" -ge 2 ] && break
		sleep 0.1
	done
	if [ "${c:-0}" = $NREQ ]; then
		ok "prometheus scraped the container's /metrics $n times: $c ok requests under container=\"$short\""
	else
		ko "prometheus scrape" "requests under container=\"$short\": '${c:-none}' (want $NREQ), scrapes '${n:-none}'"
	fi
	k=$(prom_query "sum(tokenscope_requests_total{namespace=\"$SRV_NS\",pod=\"$SRV_POD\",outcome=\"ok\"})")
	t=$(prom_query "sum(tokenscope_time_to_first_token_seconds_count{namespace=\"$SRV_NS\",pod=\"$SRV_POD\"})")
	if [ "${k:-0}" = $NREQ ] && [ "${t:-0}" = $NREQ ]; then
		ok "prometheus: requests_total and the TTFT histogram carry namespace=\"$SRV_NS\", pod=\"$SRV_POD\" ($k requests)"
	else
		curl -s --max-time 5 "http://127.0.0.1:$MPORT/metrics" >"$TMP/metrics.txt"
		ko "namespace and pod labels" "requests_total{namespace=\"$SRV_NS\",pod=\"$SRV_POD\"} '${k:-none}', TTFT count '${t:-none}' (want $NREQ); the scrape has: $(grep -m 1 '^tokenscope_requests_total{' "$TMP/metrics.txt")"
	fi
else
	ko "prometheus" "not ready after $((WAIT_READY / 10)) s"
fi

# 9b. GPU utilisation from NVML: the stand-in, loaded by the image's dynamic loader from where
# the toolkit mounts the driver's library.
if [ ${#nvml[@]} -eq 0 ]; then
	sk "NVML in the image" "no $NVML_STANDIN (make)"
else
	for _ in $(seq $WAIT_SCRAPE); do
		curl -s --max-time 2 "http://127.0.0.1:$MPORT/metrics" >"$TMP/metrics.txt"
		grep -q '^tokenscope_gpu_utilization_ratio{gpu="0",uuid="GPU-ctr-0001"} 0.37$' \
			"$TMP/metrics.txt" && break
		sleep 0.1
	done
	if grep -q '^tokenscope_gpu_utilization_ratio{gpu="0",uuid="GPU-ctr-0001"} 0.37$' "$TMP/metrics.txt" &&
		grep -q '^tokenscope_gpu_memory_used_bytes{gpu="0",uuid="GPU-ctr-0001"} 1073741824$' "$TMP/metrics.txt"; then
		ok "NVML in the image: the library mounted at $NVML_DIR/libnvidia-ml.so.1 is loaded; /metrics has the GPU's utilisation (0.37) and memory"
	else
		ko "NVML in the image" "no GPU utilisation on /metrics: $(grep -m 2 '^tokenscope_gpu' "$TMP/metrics.txt"); log: $(grep NVML "$TMP/ts.log")"
	fi
fi

# 9c. OTLP from the image (libcurl in it): the spans reach the receiver, each with the server's
# pod as resource attributes.
for _ in $(seq $WAIT_LINES); do
	[ "$(cat "$TMP"/otlp/agent/* 2>/dev/null | grep -o '"spanId"' | wc -l)" -ge $NREQ ] && break
	sleep 0.1
done
verdict=$("$PY" - "$TMP/otlp/agent" "$SRV_NS" "$SRV_POD" "$SRV_UID" "$SRV_CTR" <<'EOF'
import json, os, sys
d = sys.argv[1]
want = dict(zip(["k8s.namespace.name", "k8s.pod.name", "k8s.pod.uid", "k8s.container.name"],
                sys.argv[2:6]))
spans, bad = 0, []
for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
    if not name.endswith(".json"):
        continue
    body = json.load(open(os.path.join(d, name)))
    for rs in body.get("resourceSpans", []):
        attrs = {a["key"]: a["value"].get("stringValue")
                 for a in rs.get("resource", {}).get("attributes", [])}
        n = sum(len(ss.get("spans", [])) for ss in rs.get("scopeSpans", []))
        spans += n
        if n and any(attrs.get(k) != v for k, v in want.items()):
            bad.append({k: attrs.get(k) for k in want})
print("ok %d" % spans if spans and not bad else "bad %d spans; resources %s" % (spans, bad[:2]))
EOF
)
case $verdict in
ok*) ok "OTLP from the image: ${verdict#ok } spans received, each under the server's pod ($SRV_NS/$SRV_POD, container $SRV_CTR, pod UID)" ;;
*) ko "OTLP from the image" "${verdict#bad }; $(grep otlp "$TMP/ts.log" | head -n 3)" ;;
esac

# 10. SIGTERM to the task, as the kubelet stops a container: tokenscope exits 0 with its summary.
ctr_ tasks kill -s SIGTERM "$TS_ID" >/dev/null 2>&1
stopped=0
for _ in $(seq $WAIT_EXIT); do
	ctr_ tasks ls 2>/dev/null | grep -q "^$TS_ID .*STOPPED" && { stopped=1; break; }
	sleep 0.1
done
# ctr's exit status is the task's.
ctr_ tasks delete "$TS_ID" >/dev/null 2>&1
rc=$?
ts_err
if [ $stopped -eq 1 ] && [ $rc -eq 0 ] && grep -q -- '"summary"' "$TMP/ts.log"; then
	ok "tokenscope's task exits 0 on SIGTERM, with its summary"
else
	ko "SIGTERM" "stopped $stopped, exit $rc, summary lines $(grep -c '"summary"' "$TMP/ts.log")"
fi

# 11. Nothing left behind: tasks, containers, the daemon and its shims, mounts, cgroups.
KO_LOGS=
cleanup
left=""
kill -0 "$CTD_PID" 2>/dev/null && left="$left containerd $CTD_PID;"
for c in /proc/[0-9]*/cmdline; do
	tr '\0' ' ' 2>/dev/null <"$c" | grep -q "$SOCK" && left="$left process ${c//[^0-9]/};"
done
grep -q "$TMP" /proc/self/mountinfo && left="$left mounts under $TMP;"
# The pods' cgroups only: /kubepods and /kubepods/burstable may be another test's too.
for m in "${CG_MOUNTS[@]}"; do
	for d in "/kubepods/burstable/pod$SRV_UID" "/kubepods/burstable/pod$TS_UID"; do
		[ -d "$m$d" ] && left="$left cgroup $m$d;"
	done
done
[ -e "$TMP" ] && left="$left $TMP;"
[ $RUN_CTD_MADE -eq 1 ] && [ -e /run/containerd ] && left="$left /run/containerd;"
if [ -z "$left" ]; then
	ok "cleaned up: no task, container, daemon, shim, mount, cgroup or folder of the test left"
else
	ko "cleanup" "left:$left"
fi
finish
