#!/usr/bin/env bash
# check.sh <rail source dir> <rail build dir> <scratch dir>: installs the built rail into a
# scratch prefix, then builds and runs the consumer both ways (find_package, add_subdirectory),
# and once more linked against jemalloc when Debian's libjemalloc-dev is installed: each consumer
# checks that its malloc is still the one it linked (glibc's or jemalloc's) after rail ran.
# First, a plain top-level configure with the test and benchmark packages hidden must succeed
# and say which parts it skipped and why (a user without them still gets the library).
set -euo pipefail
src=$1 build=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
plain=$(cmake -S "$src" -B "$scratch/plain" -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
              -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON 2>&1) || {
  echo "$plain" >&2
  echo "check.sh: a configure without GoogleTest and Google Benchmark failed" >&2
  exit 1
}
for part in "GoogleTest not found, so RAIL_BUILD_TESTS is off" \
            "Google Benchmark not found, so RAIL_BUILD_BENCHMARKS"; do
  if ! tr -s ' \n' ' ' <<<"$plain" | grep -q "$part"; then
    echo "$plain" >&2
    echo "check.sh: the configure did not say: $part" >&2
    exit 1
  fi
done
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
# A build with the tools installs rail-dlq, and the installed one runs.
tools="no tools built"
if [[ -x "$build/tools/rail-dlq" ]]; then
  if [[ ! -x "$scratch/prefix/bin/rail-dlq" ]]; then
    echo "check.sh: cmake --install did not install rail-dlq into $scratch/prefix/bin" >&2
    exit 1
  fi
  "$scratch/prefix/bin/rail-dlq" --help >/dev/null
  tools="rail-dlq installed and ran"
fi
cmake -S "$src/tests/package" -B "$scratch/fp" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
      -DRAIL_CONSUME=find_package >/dev/null
cmake --build "$scratch/fp" -j1 >/dev/null
"$scratch/fp/consumer"
cmake -S "$src/tests/package" -B "$scratch/sub" -DRAIL_CONSUME=add_subdirectory \
      -DRAIL_SOURCE_DIR="$src" >/dev/null
cmake --build "$scratch/sub" --target consumer -j1 >/dev/null
"$scratch/sub/consumer"
consumers="find_package and add_subdirectory consumers (glibc malloc)"
if dpkg-query -W -f='${Status}' libjemalloc-dev 2>/dev/null | grep -q "install ok installed"; then
  cmake -S "$src/tests/package" -B "$scratch/je" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
        -DRAIL_CONSUME=find_package -DRAIL_CONSUMER_ALLOCATOR=jemalloc >/dev/null
  cmake --build "$scratch/je" -j1 >/dev/null
  "$scratch/je/consumer"
  consumers="$consumers and a jemalloc consumer"
else
  echo "check.sh: libjemalloc-dev is not installed: the jemalloc consumer is skipped" >&2
fi
echo "rail package: a configure without test packages skipped them, saying so; $tools; $consumers built, ran and kept their allocator"
