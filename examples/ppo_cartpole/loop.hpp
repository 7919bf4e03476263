#pragma once

// PPO on CartPole-v1 in one plain loop, without the cluster: collectors ->
// payloads merged as the context exchanger merges them -> learner update ->
// greedy evaluation. The learning check and hyper-parameter bench of the
// algorithm; the cluster run wires the same pieces as role actors.

#include "algo.hpp"
#include "segment.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ppo {

/// Settings of a plain-loop run.
struct loop_options {
  /// The algorithm.
  ppo_config algo;
  /// Collectors whose segments merge into each learner batch.
  std::uint32_t collectors = 1;
  /// CartPoles per collector.
  std::uint32_t envs_per_collector = 8;
  /// Steps of every env per segment (T).
  std::int64_t steps_per_segment = 32;
  /// Seeds networks, envs, sampling and shuffling.
  std::uint64_t seed = 0;
  /// Stop after this many seconds (0: no limit).
  double max_seconds = 120;
  /// Stop after this many env steps (0: no limit).
  std::int64_t max_env_steps = 0;
  /// Stop once the greedy evaluation mean reaches this.
  double stop_value = 475;
  /// Evaluate every this many learner updates.
  std::int64_t eval_every = 4;
  /// Greedy episodes per evaluation.
  int eval_episodes = 10;
  /// Collectors act with the model this many versions behind the learner
  /// (simulated asynchrony; 0: on-policy).
  std::int64_t lag = 0;
};

/// One evaluation.
struct loop_eval {
  /// Env steps so far.
  std::int64_t env_step = 0;
  /// Learner updates (model versions) so far.
  std::int64_t version = 0;
  /// Seconds since the start.
  double seconds = 0;
  /// Mean and lowest greedy return.
  double mean = 0, min = 0;
};

/// What a plain-loop run achieved.
struct loop_result {
  /// The stop value was reached.
  bool solved = false;
  /// Seconds (wall, evaluations included) until then (-1: never).
  double solve_seconds = -1;
  /// Env steps until then (-1: never).
  std::int64_t solve_env_steps = -1;
  /// Best evaluation mean.
  double best_eval = 0;
  /// Env steps, learner updates and gradient steps made.
  std::int64_t env_steps = 0, updates = 0, grad_steps = 0;
  /// Wall time.
  double seconds = 0;
  /// Lag of every sample the learner received.
  lag_summary lags;
  /// What the learner received, dropped and refused.
  intake_counters intake;
  /// Every evaluation.
  std::vector<loop_eval> evals;
};

/// Runs until the stop value, the time or the step budget; `log` (if set)
/// gets one line per evaluation.
loop_result run_loop(const loop_options& opts,
                     const std::function<void(const std::string&)>& log = {});

/// The result as one JSON object.
std::string to_json(const loop_result& x);

} // namespace ppo
