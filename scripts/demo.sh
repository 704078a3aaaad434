#!/usr/bin/env bash
# The demo: start the bundled reference server, attach tokenscope to it, drive streaming
# requests with the ground-truth client, show what tokenscope printed, and compare its numbers
# with what the client measured on the same clock.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.output
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

if [ "$(id -u)" -ne 0 ]; then
	echo "demo: tokenscope loads BPF programs: run as root (sudo make demo)" >&2
	exit 1
fi

echo "== starting the reference server: 30 ms/token, 200 ms prefill, at most 4 streams at once"
"$OUT/refserver" --port 0 --token-ms 30 --jitter-ms 10 --prefill-ms 200 --max-streams 4 \
	--pattern mixed >"$TMP/server.out" 2>&1 &
server=$!
pids+=("$server")
for _ in $(seq 50); do grep -q listening "$TMP/server.out" && break; sleep 0.1; done
port=$(grep -o '[0-9]*$' "$TMP/server.out")
echo "   pid $server, port $port"

echo "== tokenscope trace -p $server 3   (a line per request, a summary every 3 s)"
"$OUT/tokenscope" trace -p "$server" 3 &
tracer=$!
pids+=("$tracer")
sleep 1.5
echo "== 16 streaming requests, 6 at a time (2 aborted by the client, 1 HTTP error)"
"$OUT/gtclient" --port "$port" -n 16 -c 6 -k 2 --max-tokens 20 --usage \
	--abort-every 7 --abort-after 5 --http-error-every 9 -o "$TMP/client.json"
sleep 0.5
kill -INT "$tracer"
wait "$tracer" || true

echo
echo "== the same again with --json --tokens, checked against the client's own clock"
"$OUT/tokenscope" trace -p "$server" --json --tokens >"$TMP/ts.json" 2>"$TMP/ts.err" &
tracer=$!
pids+=("$tracer")
for _ in $(seq 100); do grep -q attached "$TMP/ts.err" && break; sleep 0.1; done
"$OUT/gtclient" --port "$port" -n 12 -c 4 --max-tokens 20 --usage -o "$TMP/client.json" 2>/dev/null
sleep 0.5
kill -INT "$tracer"
wait "$tracer" || true
echo "first JSON line:"
head -n 1 "$TMP/ts.json" | cut -c1-400
/usr/bin/python3 - "$TMP/ts.json" "$TMP/client.json" <<'PY'
import json, sys
ts = [t for t in map(json.loads, filter(str.strip, open(sys.argv[1]))) if "summary" not in t]
gt = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
by_port = {int(r["conn"].split("<-")[1].split("#")[0].rsplit(":", 1)[1]): r for r in ts}
dttft, dsock, wait, dtok, n = [], [], [], [], 0
for c in gt:
    t = by_port.get(c["port"])
    if not t or c["ttft_ms"] is None or t["ttft_ms"] is None:
        continue
    n += 1
    dttft.append(abs(t["ttft_ms"] - c["ttft_ms"]))
    if t.get("received_ns"):
        # The client's TTFT starts at its send: tokenscope's from the socket arrival.
        dsock.append(abs((t["first_token_ns"] - t["received_ns"]) / 1e6 - c["ttft_ms"]))
        wait.append(t["socket_wait_ms"])
    dtok += [abs(a - b) / 1e6 for a, b in zip(t["token_ns"], c["token_ns"])]
print(f"tokenscope vs client over {n} requests: max |TTFT diff| {max(dttft):.3f} ms "
      f"(the server read the requests up to {max(wait or [0]):.3f} ms after they reached its "
      f"socket: socket_wait_ms); from the socket arrival, max diff {max(dsock or [0]):.3f} ms "
      f"({len(dsock)} known); max |token time diff| {max(dtok):.3f} ms ({len(dtok)} tokens)")
PY
