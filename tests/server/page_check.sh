#!/usr/bin/env bash
# page_check.sh SERVER SCRATCH: the example server's dashboard in a real browser (Debian's
# headless chromium): its queue table shows the demo's queues with non-zero counts, a job name
# holding <script> is shown as text (no script element is made of it), and a screenshot is saved
# as SCRATCH/dashboard.png. Exit 77 (skipped) where chromium is not installed.
set -euo pipefail
server=$1 scratch=$2
here=$(dirname "$0")
source "$here/start_server.sh"
require_tool chromium chromium "$scratch"
trap 'kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true' EXIT
start_server "$server" "$scratch/server.log" --demo-rate 50 --gateway-ms 1 --log json

hostile='<script>document.title="owned"</script><img src=x onerror=alert(1)>'
body=$(printf '{"customer":"mallory","amount_cents":1013,"label":%s}' \
  "$(printf '%s' "$hostile" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')")
traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
curl -sf -XPOST -H "traceparent: $traceparent" -d "$body" "$SERVER_URL/orders" >/dev/null
dead_lettered() { curl -sf "$SERVER_URL/dlq" | grep -q 'mallory'; }
wait_for "the hostile order in the DLQ" 30 dead_lettered
completed() { curl -sf "$SERVER_URL/metrics" | grep -Eq '^rail_jobs_completed_total\{queue="payments"\} [1-9]'; }
wait_for "completed payments" 30 completed

# The request's trace reached the job: its log lines carry the trace id.
grep -q '"job":"charge:<script>.*"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"' "$scratch/server.log" ||
  { echo "page_check: the hostile order's log lines carry no trace_id" >&2; exit 1; }
browse() {
  timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$scratch/profile" --virtual-time-budget=4000 "$@" 2>>"$scratch/chromium.log"
}
browse --dump-dom "$SERVER_URL/" >"$scratch/dom.html"
dom=$scratch/dom.html
fail() { echo "page_check: $1 (the page as the browser built it: $dom)" >&2; exit 1; }
# The queue table: one row per queue, the fifth cell the completed count.
row=$(grep -o '<tr><td class="text">payments</td>\(<td>[^<]*</td>\)\{4\}' "$dom" || true)
[ -n "$row" ] || fail "no row for queue payments"
completed_cell=$(echo "$row" | sed -E 's/.*<td>([^<]*)<\/td>$/\1/')
[ "$completed_cell" -gt 0 ] 2>/dev/null || fail "payments shows $completed_cell completed"
grep -q '<tr><td class="text">emails</td>' "$dom" || fail "no row for queue emails"
# The hostile name, escaped as text in a cell; nothing it holds became an element.
grep -q 'charge:&lt;script&gt;document.title="owned"&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;' "$dom" ||
  fail "the job name holding <script> is not shown as text"
grep -q '<title>rail: queues</title>' "$dom" || fail "the page's title changed: a script ran"
if grep -q '<img src="x"' "$dom"; then fail "an <img> element was made from a job name"; fi
browse --screenshot="$scratch/dashboard.png" --window-size=1400,1100 "$SERVER_URL/" >/dev/null
[ -s "$scratch/dashboard.png" ] || fail "no screenshot was saved"
echo "page_check: payments shows $completed_cell completed; the hostile name is text; screenshot $scratch/dashboard.png"
