#!/usr/bin/env bash
# The GPU check's dry run: `GPU_CHECK_NO_GPU=1 scripts/gpu-check.sh` with its artefacts in a
# scratch folder (the servers sleep instead of CUDA; cb_server.py runs its fake engine), then its
# artefacts asserted on:
#  (a) the run ended in time, and the report's last lines are its one-line verdicts;
#  (b) the continuous-batching front answered every request at 1, 8, 32 and 64 streams, and with
#      a small KV cache; the engine is a process of its own (its pid in the engine log's meta
#      line, not the HTTP process's);
#  (c) the engine log parses, every request of the client is in it (by the client's port), and
#      its per-request token counts equal the client's;
#  (d) tokenscope saw every request with exact tokens (the fake engine's front is traced as a
#      real one is);
#  (e) the fake engine with a small KV pool logged preemptions (evictions after a first token,
#      each followed by a resumption), and the checker counted them. tokenscope's preemption
#      rule needs GPU steps, which the fake engine does not make: its `preemptions` must then
#      be null for every request (what can honestly be asserted), and the checker must say so;
#  (f) the cost phase ran its interleaved rounds (3 untraced, 3 traced) and printed ratios; the
#      `--device-times off` rounds only where tokenscope accepts the option.
# Builds nothing: needs .output/tokenscope and .output/gtclient (make), root (BPF) and aiohttp.
set -u
cd "$(dirname "$0")/../.." || exit 1
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
TMP=$(mktemp -d)
. tests/lib.sh
trap 'rm -rf "$TMP"' EXIT
DRY_LIMIT_S=120 # the dry run takes about a minute here

if [ "$(id -u)" != 0 ]; then
	sk gpu-check-dry "needs root (BPF)"
	finish
fi
for b in tokenscope gtclient; do
	[ -x ".output/$b" ] || {
		sk gpu-check-dry ".output/$b is not built"
		finish
	}
done
if ! "$PY" -c 'import aiohttp' 2>/dev/null; then
	sk gpu-check-dry "no aiohttp for $PY"
	finish
fi

OUT=$TMP/out
start=$(date +%s)
GPU_CHECK_NO_GPU=1 PYTHON=$PY OUT=$OUT GPU_CHECK_TIMEOUT_S=$DRY_LIMIT_S scripts/gpu-check.sh \
	>"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
took=$(($(date +%s) - start))
R=$OUT/report.txt
KO_LOGS="$R"
if [ "$rc" -eq 0 ] && [ "$took" -lt "$DRY_LIMIT_S" ]; then
	ok "gpu-check-dry: ran (exit 0, ${took} s)"
else
	ko "gpu-check-dry: ran" "exit status $rc after ${took} s"
fi

# (a) The last lines: the verdicts section, every line a verdict.
last=$(sed -n '/^== verdicts$/,$p' "$R" | tail -n +2)
nv=$(printf '%s\n' "$last" | grep -c '^gpu-check')
nl=$(printf '%s\n' "$last" | grep -c .)
if [ "$nv" -ge 8 ] && [ "$nv" -eq "$nl" ] &&
	printf '%s\n' "$last" | grep -q '^gpu-check cb cb.c64: ' &&
	printf '%s\n' "$last" | grep -q '^gpu-check cb cb-kv.c32: ' &&
	printf '%s\n' "$last" | grep -q '^gpu-check cost: '; then
	ok "gpu-check-dry: the report ends with $nv one-line verdicts"
else
	ko "gpu-check-dry: verdicts" "$nv verdicts in the last $nl lines"
fi

# (b)-(e) From the artefacts, in Python: one PASS/FAIL line each, counted here.
"$PY" - "$OUT" >"$TMP/py.out" 2>&1 <<'PY'
import json
import os
import re
import sys

out = sys.argv[1]


def say(ok, name, why=""):
    print(f"PASS gpu-check-dry: {name}" if ok else f"FAIL gpu-check-dry: {name}: {why}")


def jsonl(name):
    with open(os.path.join(out, name)) as f:
        return [json.loads(line) for line in f if line.strip()]


def level(label, log, srv_out):
    try:
        client = jsonl(f"{label}.client.jsonl")
        eng = jsonl(log)
        with open(os.path.join(out, srv_out)) as f:
            m = re.search(r"^server pid (\d+) engine pid (\d+)$", f.read(), re.M)
        ts = [r for r in jsonl(f"{label}.tokenscope.jsonl") if "conn" in r]
        with open(os.path.join(out, f"{label}.check.json")) as f:
            chk = json.load(f)
    except (OSError, ValueError) as e:
        say(False, f"{label}: artefacts", str(e))
        return None
    want = {"cb.c1": 8, "cb.c8": 16, "cb.c32": 64, "cb.c64": 128, "cb-kv.c32": 64}[label]
    okc = [c for c in client if c.get("outcome") == "ok" and c.get("status") == 200]
    say(len(client) == want and len(okc) == want, f"{label}: the front answered every request",
        f"{len(okc)} ok of {len(client)}, {want} sent")
    meta = next((x["meta"] for x in eng if "meta" in x), {})
    say(m is not None and meta.get("pid") == int(m.group(2)) != int(m.group(1)),
        f"{label}: the engine is a process of its own",
        f"server line {m and m.group(0)}, engine log pid {meta.get('pid')}")
    # Ports are used again across levels and cost rounds: a request is the one that arrived
    # on the client's port while that client sent and read it.
    arrivals = [x for x in eng if x.get("event") == "arrival"]
    fin = {x["req"]: x["tokens"] for x in eng if x.get("event") == "finished"}
    out_tok = {}
    for s in eng:
        if "step" in s:
            for b in s.get("batch", []):
                out_tok[b["req"]] = out_tok.get(b["req"], 0) + b["out"]
    bad = []
    for c in client:
        r = next((x["req"] for x in arrivals if x["port"] == c.get("port")
                  and c.get("send_start_ns", 0) <= x["t_ns"] <= c.get("end_ns", 0)), None)
        if r is None or fin.get(r) != c.get("tokens") or out_tok.get(r) != c.get("tokens"):
            bad.append(c.get("port"))
    say(not bad, f"{label}: the engine log has every request, its tokens the client's",
        f"{len(bad)} requests differ or are missing (ports {bad[:5]})")
    tsp = {int(r["conn"].split("<-")[1].split("#")[0].rsplit(":", 1)[1]): r for r in ts}
    bad = [c["port"] for c in client if tsp.get(c["port"], {}).get("tokens") != c["tokens"]]
    say(not bad and chk.get("ts_tokens_exact") == want,
        f"{label}: tokenscope saw every request, tokens exact",
        f"{len(bad)} missing or different; checker {chk.get('ts_tokens_exact')}/{want}")
    return eng, tsp, client, chk


level("cb.c1", "cb.engine.jsonl", "cb.server.out")
level("cb.c8", "cb.engine.jsonl", "cb.server.out")
level("cb.c32", "cb.engine.jsonl", "cb.server.out")
got = level("cb.c64", "cb.engine.jsonl", "cb.server.out")
kv = level("cb-kv.c32", "cb-kv.engine.jsonl", "cb-kv.server.out")
if kv:
    eng, tsp, client, chk = kv
    first = {x["req"]: x["t_ns"] for x in eng if x.get("event") == "first_token"}
    pre = [x for x in eng if x.get("event") == "preempted"]
    res = [x for x in eng if x.get("event") == "resumed"]
    after = [x for x in pre if x["req"] in first and x["t_ns"] > first[x["req"]]]
    say(len(after) > 0 and len(res) == len(pre),
        "cb-kv.c32: the small KV pool made the engine preempt after first tokens",
        f"{len(pre)} preempted ({len(after)} after a first token), {len(res)} resumed")
    say(chk.get("engine_preemptions") == len(after) and chk.get("engine_preemptions_all") == len(pre),
        "cb-kv.c32: the checker counted the engine's preemptions",
        f"checker {chk.get('engine_preemptions')}/{chk.get('engine_preemptions_all')}, "
        f"log {len(after)}/{len(pre)}")
    # Stalls without GPU steps: only likely prefills (another request waiting for its first
    # token) or unknown, and the checker read every one listed.
    listed = [v for r in tsp.values() for v in (r.get("stalls") or {}).get("list", [])]
    odd = [v for v in listed if not ((v["cause"] == "prefill" and v["likely"]) or
                                     (v["cause"] == "unknown" and not v["likely"]))]
    say(listed and not odd and chk.get("stalls") == len(listed),
        "cb-kv.c32: stalls without GPU steps are likely prefills or unknown, all checked",
        f"{len(listed)} listed, {len(odd)} with a cause only steps can give; checker "
        f"{chk.get('stalls')}")
    nulls = [p for p, r in tsp.items() if r.get("preemptions") is not None]
    say(not nulls and chk.get("ts_preemptions_known") == 0,
        "cb-kv.c32: tokenscope's preemptions null without GPU steps, and not compared",
        f"{len(nulls)} requests with a value; checker compared {chk.get('ts_preemptions_known')}")
PY
cat "$TMP/py.out"
pass=$((pass + $(grep -c '^PASS ' "$TMP/py.out")))
fail=$((fail + $(grep -c '^FAIL ' "$TMP/py.out")))
if ! grep -q '^PASS .*cb-kv.c32: tokenscope' "$TMP/py.out" && ! grep -q '^FAIL ' "$TMP/py.out"; then
	ko "gpu-check-dry: artefact checks" "the Python checks did not finish"
fi

# (e) The checker's own words for what it could not compare.
if grep -q '^steps: no GPU steps (fake engine: no CUDA)' "$R" &&
	grep -q "tokenscope gave none: its rule needs GPU steps" "$R"; then
	ok "gpu-check-dry: the checker says what the fake engine cannot show"
else
	ko "gpu-check-dry: checker notes" "no 'no GPU steps (fake engine' line"
fi

# (f) The cost phase: interleaved rounds and their ratios.
rounds=$(find "$OUT" -name 'cost.*.client.jsonl' | wc -l)
offs=$(find "$OUT" -name 'cost.*.off.client.jsonl' | wc -l)
has_opt=
.output/tokenscope trace --help 2>&1 | grep -q -- '--device-times' && has_opt=1
if { [ -n "$has_opt" ] && [ "$rounds" -eq 9 ] && [ "$offs" -eq 3 ]; } ||
	{ [ -z "$has_opt" ] && [ "$rounds" -eq 6 ] && [ "$offs" -eq 0 ] &&
		grep -q "no --device-times: the 'off' rounds are skipped" "$R"; }; then
	ok "gpu-check-dry: cost rounds interleaved ($rounds rounds, ${offs} with --device-times off)"
else
	ko "gpu-check-dry: cost rounds" "$rounds rounds, $offs off (option ${has_opt:-absent})"
fi
if grep -qE '^  default / none: median [0-9.]+, min [0-9.]+ over 3 rounds$' "$R"; then
	ok "gpu-check-dry: cost ratios printed (median, min)"
else
	ko "gpu-check-dry: cost ratios" "no 'default / none: median' line"
fi
finish
