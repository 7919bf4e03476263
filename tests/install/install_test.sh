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
if ls "$build_dir"/python/dice/_core*.so >/dev/null 2>&1; then
  # The Python package, installed where Debian's python3 looks under the
  # prefix: it imports, carries a value, runs a pipeline and finds the
  # installed dice-launch.
  pkg=$(dirname "$(find "$work/prefix" -path '*/dice/__init__.py' | head -1)")
  [ -n "$pkg" ] || { echo "the dice package was not installed" >&2; exit 1; }
  cat >"$work/pipeline.py" <<'PY'
import numpy as np
import dice
from dice.framework import task
from dice.framework.middleware import ContextExchanger
got = []
def main():
    task.use(ContextExchanger())
    if task.has_role(task.role.LEARNER):
        def train(ctx):
            got.extend(ctx.trajectories or [])
            if len(got) >= 3:
                task.finish = True
        task.use(train)
    elif task.has_role(task.role.COLLECTOR):
        task.use(lambda ctx: setattr(ctx, "trajectories", [{"x": np.ones(2)}]))
assert dice.codec.decode(dice.codec.encode({"a": [1]})) == {"a": [1]}
assert dice.run(main, ["--collectors=1"]) == 0 and len(got) >= 3
import dice.launch
print("python package ok, launcher", dice.launch.launcher())
PY
  out=$(cd "$work" && PYTHONPATH="$(dirname "$pkg")" /usr/bin/python3 pipeline.py 2>&1) ||
    { echo "$out" >&2; exit 1; }
  echo "$out" | grep -q "launcher $work/prefix/bin/dice-launch" ||
    { echo "$out" >&2; echo "dice.launch did not find the installed dice-launch" >&2; exit 1; }
  echo "python package installed, imported and ran"
fi
echo "install test passed"
