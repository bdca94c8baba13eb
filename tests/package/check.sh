#!/usr/bin/env bash
# check.sh <rail source dir> <rail build dir> <scratch dir>: installs the built rail into a
# scratch prefix, then builds and runs the consumer both ways (find_package, add_subdirectory).
set -euo pipefail
src=$1 build=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$src/tests/package" -B "$scratch/fp" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
      -DRAIL_CONSUME=find_package >/dev/null
cmake --build "$scratch/fp" -j2 >/dev/null
"$scratch/fp/consumer"
cmake -S "$src/tests/package" -B "$scratch/sub" -DRAIL_CONSUME=add_subdirectory \
      -DRAIL_SOURCE_DIR="$src" >/dev/null
cmake --build "$scratch/sub" --target consumer -j2 >/dev/null
"$scratch/sub/consumer"
echo "rail package: find_package and add_subdirectory consumers built and ran"
