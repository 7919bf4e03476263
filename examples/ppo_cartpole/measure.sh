#!/usr/bin/env bash
# The figures in docs/ppo.md: seeds 0..4 of the cluster run in one process
# and as 5 processes (dice-launch --workers 5), each with GAE and with
# V-trace targets. One line per run: seconds and env steps to greedy eval
# >= 475, mean lag and lag histogram, and how many exchanger waits timed
# out (a stall). Usage (from the repository root, after scripts/build):
#   bash examples/ppo_cartpole/measure.sh [seeds] [extra ppo_cartpole args]
# KEEP=1 keeps every run's folder and log (the path is printed first).
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds=${1:-5}
shift || true
bin=build/bin
out=$(mktemp -d /tmp/ppo_measure.XXXXXX)
if [ "${KEEP:-0}" = 1 ]; then echo "# runs kept in $out"; else trap 'rm -rf "$out"' EXIT; fi
field() { # FILE KEY
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$1" "$2"
}
report() { # LABEL SEED SUMMARY_OF_EVALUATOR SUMMARY_OF_LEARNER LOG
  printf '%-22s seed %s: solved %-5s after %6s s, %6s env steps | lag mean %.2f, hist %s | dropped %s | timeouts %s | %s\n' \
    "$1" "$2" "$(field "$3" solved)" "$(printf '%.1f' "$(field "$3" solve_seconds)")" \
    "$(field "$3" solve_env_steps)" "$(field "$4" lag_mean)" \
    "$(field "$4" lag_histogram | tr -d ' ')" "$(field "$4" steps_dropped_stale)" \
    "$(grep -c 'Timeout when waiting' "$5" || true)" "$(field "$4" stop_reason)"
}
echo "# $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
for targets in gae vtrace; do
  flag=""
  [ "$targets" = vtrace ] && flag="--vtrace"
  for ((s = 0; s < seeds; ++s)); do
    d="$out/in-$targets-$s"
    "$bin/ppo_cartpole" --seed=$s $flag --quiet --no-plot --out="$d" "$@" \
      >"$d.log" 2>&1 || true
    report "in-process $targets" $s "$d/summary.json" "$d/summary.json" "$d.log"
  done
  for ((s = 0; s < seeds; ++s)); do
    d="$out/mp-$targets-$s"
    "$bin/dice-launch" --workers 5 -- "$bin/ppo_cartpole" --seed=$s $flag \
      --quiet --no-plot --out="$d" "$@" >"$d.log" 2>&1 || true
    report "5 processes $targets" $s "$d/summary-1.json" "$d/summary-0.json" "$d.log"
  done
done
