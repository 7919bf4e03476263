#!/usr/bin/env bash
# The layers of dice (CMakeLists.txt, "the layers of dice::core") seen from
# a compiler: each layer's public headers compile with only its own and its
# dependencies' include folders (build/layers/<target>), a header of a layer
# above does not, and no public header names a private one (those are found
# only through a layer's source folders, never installed).
#   check_layers.sh CXX BUILD_DIR SOURCE_DIR
set -euo pipefail
cxx=$1 build=$2 src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# layer: its folders, then the layers it links (bottom to top).
declare -A folders=(
  [dice_process]="process"
  [dice_messages]="core logging security messages"
  [dice_pipeline]="pipeline"
  [dice_wire]="net storage"
  [dice_actors]="actors exchangers"
  [dice_runtime]="runtime"
  [dice_env]="env envs"
  [dice_envs_mujoco]="mujoco"
)
declare -A deps=(
  [dice_process]=""
  [dice_messages]=""
  [dice_pipeline]="dice_messages"
  [dice_wire]="dice_messages dice_process"
  [dice_actors]="dice_pipeline dice_wire dice_messages dice_process"
  [dice_runtime]="dice_actors dice_pipeline dice_wire dice_messages dice_process"
  [dice_env]="dice_messages"
  [dice_envs_mujoco]="dice_env dice_messages"
)
# A header of a layer above each one (it must NOT compile there).
declare -A above=(
  [dice_process]="dice/core/errc.hpp"
  [dice_messages]="dice/pipeline/context.hpp"
  [dice_pipeline]="dice/actors/router.hpp"
  [dice_wire]="dice/pipeline/middleware.hpp"
  [dice_actors]="dice/runtime/node.hpp"
  [dice_env]="dice/pipeline/context.hpp"
  [dice_envs_mujoco]="dice/pipeline/context.hpp"
)

failed=0
compile() { # name, include flags..., reads the TU on stdin
  local name=$1; shift
  "$cxx" -std=c++17 -fsyntax-only -x c++ "$@" - -o /dev/null 2>"$work/$name.err"
}
for layer in "${!folders[@]}"; do
  # dice_envs_mujoco exists only where CMake found MuJoCo.
  if [ "$layer" = dice_envs_mujoco ] && [ ! -d "$build/layers/$layer" ]; then
    continue
  fi
  flags=(-I "$build/layers/$layer")
  for d in ${deps[$layer]}; do flags+=(-I "$build/layers/$d"); done
  tu="$work/$layer.cpp"
  : >"$tu"
  for f in ${folders[$layer]}; do
    for h in "$src"/include/dice/"$f"/*.hpp "$src"/include/dice/"$f"/*/*.hpp; do
      [ -f "$h" ] && echo "#include \"${h#"$src"/include/}\"" >>"$tu"
    done
  done
  if ! compile "$layer" "${flags[@]}" <"$tu"; then
    echo "FAIL: $layer's public headers do not compile with its own layers:"
    head -20 "$work/$layer.err"
    failed=1
  fi
  if [ -n "${above[$layer]:-}" ]; then
    if echo "#include \"${above[$layer]}\"" | compile "$layer-up" "${flags[@]}"; then
      echo "FAIL: $layer sees ${above[$layer]} of a layer above it"
      failed=1
    elif ! grep -q "No such file" "$work/$layer-up.err"; then
      echo "FAIL: $layer: ${above[$layer]} failed for another reason:"
      head -5 "$work/$layer-up.err"
      failed=1
    fi
  fi
done
# Public headers name only public headers ("dice/..."), never a private one
# ("net/...", "actors/router_state.hpp", ...).
private=$(grep -rnE '#include "(core|logging|security|messages|pipeline|net|storage|actors|exchangers|runtime|process|env|envs|mujoco|torch|rl)/' "$src/include/dice" || true)
if [ -n "$private" ]; then
  echo "FAIL: public headers include private ones:"
  echo "$private"
  failed=1
fi
[ "$failed" = 0 ] && echo "layers: every layer's headers compile alone, none sees a layer above"
exit "$failed"
