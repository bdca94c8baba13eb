#!/usr/bin/env bash
# rail-dlq against the journal the orders demo leaves (issue 12's acceptance): `list` shows
# order-3 with its three errors, `show`, `stats`, `export --json` read it, `verify` exits 0 on it,
# 1 once a byte of its record is flipped, 2 on a missing file, a FIFO (at once, never blocking) or
# bad usage, with errors on stderr; hostile text is printed escaped, an empty file is a journal
# with no entries, and a sparse file costs what it holds.
#   rail_dlq_check.sh ORDERS_DEMO RAIL_DLQ SCRATCH_DIR
set -uo pipefail
demo=$1 dlq=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir"
journal=$dir/orders.dlq
fail() { echo "FAIL: $*" >&2; exit 1; }

"$demo" --dlq-journal "$journal" >"$dir/demo.out" || fail "orders_demo exited $?"
"$dlq" list "$journal" >"$dir/list.out" || fail "list exited $?"
grep -Eq '^3 +charge-card +order-3 +3/3 +3 ' "$dir/list.out" || fail "list does not show order-3 with 3 errors: $(cat "$dir/list.out")"
"$dlq" show "$journal" 3 >"$dir/show.out" || fail "show exited $?"
[ "$(grep -c '^  attempt [123] at .*Simulated payment gateway timeout' "$dir/show.out")" = 3 ] || fail "show lacks the three errors: $(cat "$dir/show.out")"
grep -q 'order-3' "$dir/show.out" || fail "show lacks the payload"
"$dlq" stats "$journal" | grep -Eq '^live entries: +1$' || fail "stats does not count one live entry"
"$dlq" export "$journal" --json | grep -q '"payload_hex"' || fail "export --json lacks payload_hex"
"$dlq" verify "$journal" >/dev/null; [ $? = 0 ] || fail "verify of a healthy journal is not 0"

cp "$journal" "$dir/damaged.dlq"
# Flip the byte's bits (setting it to 0xff changed nothing when it already was: the record holds
# wall-clock times, so CI once saw an undamaged "damaged" journal).
old_byte=$(od -An -tu1 -j100 -N1 "$dir/damaged.dlq" | tr -d ' ')
printf "\\$(printf '%03o' $((old_byte ^ 255)))" | dd of="$dir/damaged.dlq" bs=1 seek=100 conv=notrunc 2>/dev/null
cmp -s "$journal" "$dir/damaged.dlq" && fail "the damage did not change the journal"
"$dlq" verify "$dir/damaged.dlq" >"$dir/verify.out"; rc=$?
[ $rc = 1 ] || fail "verify of a damaged journal exited $rc, expected 1"
grep -q 'offset 64' "$dir/verify.out" || fail "verify does not name the offset: $(cat "$dir/verify.out")"

"$dlq" list "$dir/missing.dlq" >"$dir/missing.out" 2>"$dir/missing.err"; rc=$?
[ $rc = 2 ] || fail "a missing file exited $rc, expected 2"
[ -s "$dir/missing.out" ] && fail "an error went to stdout"
grep -q 'cannot open' "$dir/missing.err" || fail "no error on stderr for a missing file"
mkfifo "$dir/fifo.dlq"
timeout 10 "$dlq" list "$dir/fifo.dlq" >/dev/null 2>"$dir/fifo.err"; rc=$?
[ $rc = 2 ] || fail "a FIFO exited $rc, expected 2 at once (124: it blocked)"
grep -q 'not a regular file' "$dir/fifo.err" || fail "no reason on stderr for a FIFO: $(cat "$dir/fifo.err")"
"$dlq" frobnicate >/dev/null 2>&1; rc=$?
[ $rc = 2 ] || fail "an unknown command exited $rc, expected 2"
"$dlq" --help | grep -q verify || fail "--help does not list verify"
"$dlq" show --help | grep -q ID || fail "show --help does not describe ID"
# A file with escape sequences, C1 controls and invalid UTF-8 in its names and errors, and
# extreme times (tests/data/hostile-text.dlq): every command prints the text escaped, export stays
# valid JSON.
hostile=$(dirname "$0")/data/hostile-text.dlq
for cmd in list show stats; do
  extra=()
  [ "$cmd" = show ] && extra=(7)
  "$dlq" "$cmd" "$hostile" "${extra[@]}" >"$dir/hostile.out" 2>&1 || fail "$cmd of the hostile file exited $?"
  LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f\x80-\xff]' "$dir/hostile.out" &&
    fail "$cmd printed a control or non-ASCII byte: $(od -c "$dir/hostile.out" | head)"
  grep -q 'x1b' "$dir/hostile.out" || fail "$cmd does not show the escapes: $(cat "$dir/hostile.out")"
done
# Its times are the extremes (added INT64_MIN, dead INT64_MAX on the engine clock, INT64_MIN on
# the wall clock): every difference saturates at the earliest time (UBSan builds check it).
"$dlq" show "$hostile" 7 | grep -q '^added at:  1677-09-21T00:12:43.146Z$' ||
  fail "show does not saturate an extreme time: $("$dlq" show "$hostile" 7)"
"$dlq" export "$hostile" --json >"$dir/hostile.json" || fail "export of the hostile file exited $?"
LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f\x80-\xff]' "$dir/hostile.json" && fail "export wrote a control or non-ASCII byte"
grep -q '"name_hex": "1b5b33316d' "$dir/hostile.json" || fail "export lacks the name's exact bytes"
if command -v python3 >/dev/null; then
  python3 -m json.tool "$dir/hostile.json" >/dev/null || fail "export of the hostile file is not JSON"
fi

# An empty file (its creator stopped before the header) is a journal with no entries, as the
# library sees it; a 64 GiB sparse file is read only as far as its data.
: >"$dir/empty.dlq"
"$dlq" verify "$dir/empty.dlq" >"$dir/empty.out"; rc=$?
[ $rc = 0 ] || fail "verify of an empty journal exited $rc, expected 0"
grep -q 'empty' "$dir/empty.out" || fail "verify does not say the journal is empty"
"$dlq" list "$dir/empty.dlq" >/dev/null || fail "list of an empty journal exited $?"
cp "$journal" "$dir/sparse.dlq" && truncate -s 64G "$dir/sparse.dlq" || fail "cannot make a sparse file"
timeout 60 "$dlq" verify "$dir/sparse.dlq" >"$dir/sparse.out" 2>&1; rc=$?
[ $rc = 0 ] || fail "verify of a journal with a 64 GiB hole exited $rc: $(cat "$dir/sparse.out")"
truncate -s 0 "$dir/sparse.dlq" && truncate -s 64G "$dir/sparse.dlq"
timeout 60 "$dlq" verify "$dir/sparse.dlq" >"$dir/sparse.out" 2>&1; rc=$?
[ $rc = 1 ] || fail "verify of 64 GiB of hole exited $rc, expected 1 (no header): $(cat "$dir/sparse.out")"
rm -f "$dir/sparse.dlq"
echo "rail-dlq: all checks passed"
