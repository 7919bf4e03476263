#pragma once

// Settings and results of the PPO cluster run; free of torch so that
// main.cpp stays a cheap translation unit.

#include "caf/expected.hpp"
#include "caf/fwd.hpp"

#include "algo.hpp"
#include "outputs.hpp"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace dice {
struct node_config;
} // namespace dice

namespace ppo {

/// Settings of a cluster run (learner, evaluator, collectors as role
/// actors, in one process or one node per process).
struct run_options {
  /// The algorithm.
  ppo_config algo;
  /// Number of collector nodes.
  std::uint32_t collectors = 3;
  /// CartPoles each collector steps side by side.
  std::uint32_t envs_per_collector = 4;
  /// Steps of every env per segment (T): one segment per env and collector
  /// iteration.
  std::int64_t steps_per_segment = 64;
  /// Seeds networks, envs, sampling and shuffling.
  std::uint64_t seed = 0;
  /// Stop once the learner counted this many env steps.
  std::int64_t max_env_steps = 300000;
  /// Stop after this many seconds (0: never).
  double max_seconds = 120;
  /// Stop once the greedy eval mean reaches this.
  double stop_value = 475;
  /// The learner sends its model every this many iterations.
  std::int64_t model_period = 1;
  /// A collector acts with one model for at most this many iterations,
  /// then waits for a newer one.
  std::int64_t stale_toleration = 2;
  /// Output folder.
  std::string out = "runs/ppo_cartpole";
  /// Evaluate every this many learner updates (train_iter).
  std::int64_t eval_every = 2;
  /// Greedy episodes per evaluation.
  int eval_episodes = 10;
  /// Show the live progress line on stderr.
  bool progress = true;
  /// Write OUT/eval_return.png with gnuplot.
  bool plot = true;
};

/// What a run achieved (in a cluster: what one node saw).
struct run_summary {
  /// Node id of a cluster node (0 in one process).
  std::uint32_t node = 0;
  /// Role of a cluster node ("": the whole in-process run).
  std::string roles;
  /// The stop value was reached.
  bool solved = false;
  /// Seconds until the stop value was reached (-1: never).
  double solve_seconds = -1;
  /// Env steps until the stop value was reached (-1: never).
  std::int64_t solve_env_steps = -1;
  /// Best and last evaluation mean.
  double best_eval = std::numeric_limits<double>::quiet_NaN();
  /// Last evaluation mean.
  double last_eval = std::numeric_limits<double>::quiet_NaN();
  /// Env steps of all collectors (a collector: its own).
  std::int64_t env_steps = 0;
  /// Learner updates (model versions trained).
  std::int64_t train_iters = 0;
  /// Learner gradient steps.
  std::int64_t grad_steps = 0;
  /// Learner pipeline iterations.
  std::int64_t learner_iterations = 0;
  /// Wall time of the run.
  double seconds = 0;
  /// Policy lag of every sample the learner received.
  double lag_mean = std::numeric_limits<double>::quiet_NaN();
  /// Lag extremes and quantiles.
  std::int64_t lag_min = 0, lag_max = 0, lag_p50 = 0, lag_p90 = 0;
  /// Samples with lag 0, 1, ... (the learner's histogram, trailing zeros cut).
  std::vector<std::int64_t> lag_histogram;
  /// Steps received, and dropped beyond --max-lag.
  std::int64_t steps_received = 0, steps_dropped_stale = 0;
  /// Segments dropped beyond --max-lag.
  std::int64_t segments_dropped_stale = 0;
  /// Payloads and merged batches the learner refused.
  std::int64_t payloads_rejected = 0, batches_rejected = 0;
  /// Episodes the collectors finished, as the learner received them, and
  /// the mean return of the last 100 of them.
  std::int64_t train_episodes = 0;
  /// Mean return of the last (up to 100) training episodes.
  double train_return_mean = std::numeric_limits<double>::quiet_NaN();
  /// V-trace (true) or GAE targets.
  bool vtrace = false;
  /// Why the run stopped.
  std::string stop_reason;
  /// Every evaluation in order.
  std::vector<demo::eval_point> evals;

  /// Env steps per second.
  double env_steps_per_s() const {
    return static_cast<double>(env_steps) / (seconds > 0 ? seconds : 1e-9);
  }
};

/// Runs learner (node 0), evaluator (node 1) and collectors (nodes 2..) as
/// role actors in `sys` until the stop value, the env-step budget or the
/// time limit. Writes OUT/metrics.jsonl, summary.json, latest.pt, best.pt,
/// eval_return.dat and .png.
caf::expected<run_summary> run_training(caf::actor_system& sys,
                                        const run_options& opts);

/// Runs this process as one node of a cluster (learner, evaluator or
/// collector by `node`'s roles) until the cluster finishes. Writes
/// OUT/metrics-ID.jsonl and OUT/summary-ID.json; the learner latest.pt, the
/// evaluator best.pt and the plot.
caf::expected<run_summary> run_node(caf::actor_system& sys,
                                    const run_options& opts,
                                    const dice::node_config& node);

/// Loads `checkpoint` (a latest.pt or best.pt) and returns the returns of
/// opts.eval_episodes greedy episodes.
caf::expected<std::vector<double>> run_eval_only(const std::string& checkpoint,
                                                 const run_options& opts);

/// Sets LibTorch's intra-op threads (torch stays out of main.cpp).
void set_threads(int n);

/// The summary as a JSON object (what summary.json holds).
std::string to_json(const run_summary& x);

/// Human-readable summary (several lines).
std::string to_string(const run_summary& x);

} // namespace ppo
