# shellcheck shell=bash
# What the Prometheus tests share (run_prom.sh, run_grafana.sh): a free port, a query of the
# server's HTTP API, and a real Prometheus scraping tokenscope every second with
# deploy/prometheus/rules.yml loaded. Sourced after tests/lib.sh; needs TMP, PY, RULES and the
# array pids (the server's pid is added to it).

free_port() {
	"$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Query Prometheus' HTTP API (on PPORT); prints the first sample's value, or nothing.
prom_query() {
	curl -s --max-time 5 "http://127.0.0.1:$PPORT/api/v1/query" --data-urlencode "query=$1" |
		"$PY" -c 'import json,sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "")' 2>/dev/null
}

# start_prometheus MPORT: Prometheus on a free port (PPORT), scraping 127.0.0.1:MPORT and
# evaluating the rules every second, its data and log in $TMP/prom and $TMP/prometheus.err.
start_prometheus() {
	PPORT=$(free_port)
	mkdir -p "$TMP/prom"
	cp "$RULES" "$TMP/prom/rules.yml"
	cat >"$TMP/prom/prometheus.yml" <<EOC
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: tokenscope
    static_configs:
      - targets: ['127.0.0.1:$1']
EOC
	prometheus --config.file="$TMP/prom/prometheus.yml" --storage.tsdb.path="$TMP/prom/data" \
		--web.listen-address="127.0.0.1:$PPORT" --log.level=warn >"$TMP/prometheus.err" 2>&1 &
	pids+=("$!")
}
