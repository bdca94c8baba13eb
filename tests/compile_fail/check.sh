#!/usr/bin/env bash
# check.sh CXX INCLUDE_DIR SOURCE TYPE REQUIREMENT [FLAG]: a compile-fail test (FLAG, e.g. a
# -D, is passed to both compiles). SOURCE must compile with
# -DRAIL_CONTROL_CODABLE (the control: the same code with the missing piece supplied, so the
# failure below is not a typo or a broken include) and must NOT compile without it, with one
# diagnostic line naming both TYPE and REQUIREMENT (the payload type and the concept it misses).
# Carets are off so that the echoed source line, which names TYPE anyway, cannot pass the check.
set -uo pipefail
cxx=$1 include=$2 source=$3 type=$4 requirement=$5
flags=(-std=c++20 -fsyntax-only -fdiagnostics-color=never -I "$include" ${6:+"$6"})
if [[ $("$cxx" --version) == *clang* ]]; then
  flags+=(-fno-caret-diagnostics)
else
  flags+=(-fno-diagnostics-show-caret)
fi
fail() { echo "FAIL: $*" >&2; exit 1; }

control=$(LC_ALL=C "$cxx" "${flags[@]}" -DRAIL_CONTROL_CODABLE "$source" 2>&1) ||
  fail "the control (with the missing piece supplied) does not compile either, so the test proves nothing:
$control"
out=$(LC_ALL=C "$cxx" "${flags[@]}" "$source" 2>&1) &&
  fail "$source compiled, expected a compile error naming $type and $requirement"
grep -F "$type" <<<"$out" | grep -qF "$requirement" ||
  fail "the compile failed, but no diagnostic line names both $type and $requirement:
$out"
echo "compile failed as expected; the diagnostic names $type and $requirement:"
grep -F "$type" <<<"$out" | grep -F "$requirement" | head -3
