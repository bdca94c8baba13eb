# require_tool COMMAND PACKAGE SCRATCH: exit 77 (skipped), naming the Debian package, where
# COMMAND is not installed; else SCRATCH is made afresh.
require_tool() {
  command -v "$1" >/dev/null || { echo "$1 is not installed (apt-get install -y $2)"; exit 77; }
  rm -rf "$3" && mkdir -p "$3"
}

# start_server BINARY OUTFILE [ARGS...]: starts the example server on a free port of 127.0.0.1
# in the background, sets SERVER_PID and SERVER_URL once it listens; sourced by the checks here.
start_server() {
  local binary=$1 out=$2
  shift 2
  "$binary" --port 0 "$@" >"$out" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do
    if grep -q "^listening on " "$out"; then
      SERVER_URL=$(sed -n 's/^listening on //p' "$out")
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "the example server did not start:" >&2
  cat "$out" >&2
  return 1
}

# wait_for DESCRIPTION SECONDS COMMAND...: runs COMMAND until it succeeds, or fails naming what
# it waited for.
wait_for() {
  local what=$1 seconds=$2
  shift 2
  for _ in $(seq $((seconds * 10))); do
    if "$@"; then return 0; fi
    sleep 0.1
  done
  echo "gave up after ${seconds} s waiting for: $what" >&2
  return 1
}
