#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds tests/install/consumer
# against it with find_package(dice) -- a dice::core program, and
# examples/custom_env's one source against dice::rl when dice was built
# with LibTorch -- runs them and checks their output.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
custom_env=""
if [ -f "$build_dir/bin/custom_env" ]; then
  custom_env="-DCUSTOM_ENV_SOURCE=$source_dir/examples/custom_env/main.cpp"
fi
cmake -S "$source_dir/tests/install/consumer" -B "$work/build" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release $custom_env \
  >/dev/null
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
if [ -n "$custom_env" ]; then
  # The installed build of the template runs: a short run to its env-step
  # budget writes its summary (learning itself: tests/examples).
  "$work/build/custom_env" --max-env-steps=2000 --quiet --no-plot \
    --out="$work/run" >"$work/custom_env.log" 2>&1 ||
    { cat "$work/custom_env.log" >&2; exit 1; }
  grep -q '"stop_reason"' "$work/run/summary.json" ||
    { echo "custom_env wrote no summary" >&2; exit 1; }
  echo "custom_env built against the installed dice::rl and ran"
fi
echo "install test passed"
