#!/usr/bin/env bash
# scrape_check.sh SERVER SCRATCH: a real Prometheus server (Debian's `prometheus`) scrapes the
# example server's /metrics: started on a free port of 127.0.0.1 with its own config and data
# directory under SCRATCH, it is queried through its HTTP API until rail_jobs_completed_total
# is positive; then exactly the processes this script started are stopped. Exit 77 (skipped)
# where prometheus is not installed.
set -euo pipefail
server=$1 scratch=$2
here=$(dirname "$0")
source "$here/start_server.sh"
require_tool prometheus prometheus "$scratch"
PROMETHEUS_PID=
stop_all() {
  for pid in $PROMETHEUS_PID $SERVER_PID; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
trap stop_all EXIT
start_server "$server" "$scratch/server.log" --demo-rate 50 --gateway-ms 1
target=${SERVER_URL#http://}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
prometheus_port=$(free_port)
cat >"$scratch/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: rail_example_server
    static_configs:
      - targets: ["$target"]
YML
prometheus --config.file="$scratch/prometheus.yml" --storage.tsdb.path="$scratch/data" \
  --web.listen-address="127.0.0.1:$prometheus_port" >"$scratch/prometheus.log" 2>&1 &
PROMETHEUS_PID=$!
api="http://127.0.0.1:$prometheus_port/api/v1/query"
completed_in_prometheus() {
  local value
  value=$(curl -sf --get --data-urlencode 'query=rail_jobs_completed_total{queue="payments"}' "$api" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)' 2>/dev/null) ||
    return 1
  [ "$(python3 -c "print(1 if float('$value') > 0 else 0)")" = 1 ] && echo "$value" >"$scratch/value"
}
if ! wait_for "Prometheus to scrape rail_jobs_completed_total > 0" 90 completed_in_prometheus; then
  echo "--- prometheus log" >&2
  tail -20 "$scratch/prometheus.log" >&2
  exit 1
fi
# The histogram arrived whole: its +Inf bucket equals its count.
histogram=$(curl -sf --get --data-urlencode 'query=rail_job_run_seconds_bucket{queue="payments",le="+Inf"} - ignoring(le) rail_job_run_seconds_count{queue="payments"}' "$api")
echo "$histogram" | grep -q '"value":\[[0-9.]*,"0"\]' || { echo "the +Inf bucket differs from the count: $histogram" >&2; exit 1; }
echo "scrape_check: Prometheus on 127.0.0.1:$prometheus_port read rail_jobs_completed_total{queue=\"payments\"} = $(cat "$scratch/value")"
