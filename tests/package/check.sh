#!/usr/bin/env bash
# check.sh <rail source dir> <rail build dir> <scratch dir>: installs the built rail into a
# scratch prefix, then builds and runs the consumer both ways (find_package, add_subdirectory),
# and once more linked against jemalloc when Debian's libjemalloc-dev is installed: each consumer
# checks that its malloc is still the one it linked (glibc's or jemalloc's) after rail ran.
set -euo pipefail
src=$1 build=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
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
echo "rail package: $consumers built, ran and kept their allocator"
