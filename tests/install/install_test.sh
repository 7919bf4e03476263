#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds tests/install/consumer
# against it with find_package(dice) -- a dice::core program -- and, when
# dice was built with LibTorch, a copy of the examples/custom_env folder as
# docs/getting-started.md does; runs them and checks their output.
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
if [ -f "$build_dir/bin/custom_env" ]; then
  # docs/getting-started.md, "Your own project": the template's folder,
  # copied out of the tree, builds against the installed package (one
  # include, dice::rl) and runs: a short run to its env-step budget writes
  # its summary (learning itself: tests/examples/custom_env_test.cpp).
  cp -r "$source_dir/examples/custom_env" "$work/my_rl"
  cmake -S "$work/my_rl" -B "$work/my_rl/build" \
    -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$work/my_rl/build" -j 2 >/dev/null
  "$work/my_rl/build/custom_env" --max-env-steps=2000 --quiet --no-plot \
    --out="$work/run" >"$work/custom_env.log" 2>&1 ||
    { cat "$work/custom_env.log" >&2; exit 1; }
  grep -q '"stop_reason"' "$work/run/summary.json" ||
    { echo "custom_env wrote no summary" >&2; exit 1; }
  echo "custom_env built against the installed dice::rl and ran"
fi
echo "install test passed"
