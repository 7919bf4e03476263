#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds tests/install/consumer
# against it with find_package(dice), runs it and checks its output.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/tests/install/consumer" -B "$work/build" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" -j 2 >/dev/null
out=$("$work/build/consumer")
echo "$out"
# The collector sends 5 per iteration; the learner runs 4 iterations and
# merges at least one delta in each, and everything sent is counted.
steps=$(echo "$out" | sed -n 's/^learner env_step \([0-9]*\)$/\1/p')
if [ -z "$steps" ] || [ "$steps" -lt 20 ] || [ $((steps % 5)) -ne 0 ]; then
  echo "unexpected output: $out" >&2
  exit 1
fi
echo "install test passed"
