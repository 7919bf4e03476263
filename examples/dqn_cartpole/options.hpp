#pragma once

// Settings and results of a DQN run; free of torch so that main.cpp stays a
// cheap translation unit.

#include "caf/expected.hpp"
#include "caf/fwd.hpp"

#include "outputs.hpp"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace dice {
struct node_config;
} // namespace dice

namespace dqn {

/// How epsilon falls from `eps_start` to `eps_end`.
enum class decay_kind : std::uint8_t { linear, exponential };

/// Hyper-parameters of the algorithm.
struct dqn_config {
  /// Width of the two hidden layers (64: Debian's LibTorch multiplies with
  /// the reference BLAS, where a gradient step costs ~ hidden * batch).
  std::int64_t hidden = 64;
  /// Discount factor.
  float gamma = 0.99f;
  /// Steps summed into one TD target (1: plain DQN).
  int nstep = 3;
  /// Adam's learning rate.
  double lr = 1e-3;
  /// Samples per gradient step.
  std::int64_t batch_size = 64;
  /// Transitions the replay buffer holds.
  std::size_t buffer_size = 50000;
  /// Transitions in the buffer before the first gradient step.
  std::size_t learning_starts = 1000;
  /// Gradient steps per new transition that reaches the learner.
  double updates_per_step = 0.5;
  /// Hard target update every this many gradient steps (0: use `tau`).
  std::int64_t target_update_every = 250;
  /// Polyak factor when `target_update_every` is 0.
  double tau = 0.005;
  /// Select next actions with the online net (double DQN).
  bool double_dqn = true;
  /// Gradient norm clip (0: none).
  double grad_clip = 10.0;
  /// Exploration at the start.
  double eps_start = 1.0;
  /// Exploration at the end of the decay.
  double eps_end = 0.05;
  /// Env steps (all collectors) over which epsilon decays.
  double eps_decay_steps = 10000;
  /// Shape of the decay.
  decay_kind eps_decay = decay_kind::linear;
};

/// Settings of a distributed run (learner, evaluator, collectors).
struct run_options {
  /// Number of collector nodes.
  std::uint32_t collectors = 3;
  /// Environments each collector steps side by side.
  std::uint32_t envs_per_collector = 8;
  /// Steps of every environment per collector iteration.
  std::int64_t steps_per_collect = 16;
  /// Seeds networks, environments, exploration and sampling.
  std::uint64_t seed = 0;
  /// Stop once the collectors made this many env steps in total.
  std::int64_t max_env_steps = 500000;
  /// Stop after this many seconds (0: no limit).
  double max_seconds = 0;
  /// Stop once the mean greedy return reaches this.
  double stop_value = 475;
  /// Collectors take models through the periodical model exchanger.
  bool periodical = false;
  /// Period of the periodical exchanger (learner iterations).
  std::int64_t model_period = 1;
  /// Collector iterations a model may serve with `periodical`.
  std::int64_t stale_toleration = 4;
  /// Output folder: metrics, plot, checkpoints, summary.
  std::string out = "runs/dqn_cartpole";
  /// Start from OUT/latest.pt.
  bool resume = false;
  /// Seconds between the learner's checkpoints (latest.pt, learner.pt,
  /// latest.json); it also writes one when it stops.
  double checkpoint_every = 10;
  /// Evaluate every this many learner gradient steps (ctx.train_iter).
  std::int64_t eval_every = 100;
  /// Greedy episodes per evaluation.
  int eval_episodes = 10;
  /// Print the live progress line on stderr.
  bool progress = true;
  /// Write OUT/eval_return.png with gnuplot.
  bool plot = true;
  /// Learners forming one data-parallel group (docs/learner_group.md): in
  /// one process each is its own node; in a cluster dice.learners says it.
  std::uint32_t learners = 1;
  /// With a group: "bucketed" or "flat" gradient all-reduce.
  std::string reduce = "bucketed";
  /// With a group: every this many group iterations, each learner writes
  /// its parameter digest to OUT/digests-NODE.txt and the group checks that
  /// all digests are equal (0: never).
  std::int64_t verify_every = 0;
  /// The algorithm.
  dqn_config algo;
};

/// One evaluation (train_iter: learner gradient steps).
using eval_point = demo::eval_point;

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
  /// Best evaluation mean.
  double best_eval = -std::numeric_limits<double>::infinity();
  /// Last evaluation mean.
  double last_eval = -std::numeric_limits<double>::infinity();
  /// Env steps of all collectors.
  std::int64_t env_steps = 0;
  /// Learner gradient steps.
  std::int64_t train_iters = 0;
  /// Learner pipeline iterations.
  std::int64_t learner_iterations = 0;
  /// Wall time of the run.
  double seconds = 0;
  /// Policy lag of the trajectories (learner versions behind).
  double lag_min = 0, lag_mean = 0, lag_max = 0;
  /// Why the run stopped.
  std::string stop_reason;
  /// The run (in one process: any of its nodes) stopped on an error.
  bool failed = false;
  /// Every evaluation in order.
  std::vector<eval_point> evals;
  /// Env steps and gradient steps a resumed run started from.
  std::int64_t resumed_env_steps = 0, resumed_train_iters = 0;

  /// Env steps per second of this run (a resumed run's start excluded).
  double env_steps_per_s() const {
    return static_cast<double>(env_steps - resumed_env_steps)
      / (seconds > 0 ? seconds : 1e-9);
  }

  /// Gradient steps per second of this run.
  double train_iters_per_s() const {
    return static_cast<double>(train_iters - resumed_train_iters)
      / (seconds > 0 ? seconds : 1e-9);
  }
};

/// Runs learner (node 0), evaluator (node 1) and collectors (nodes 2..) in
/// `sys` until the stop value, the env-step budget or the time limit.
caf::expected<run_summary> run_training(caf::actor_system& sys,
                                        const run_options& opts);

/// Runs this process as one node of a cluster (learner, evaluator or
/// collector by `node`'s roles) until the cluster finishes. Writes
/// OUT/metrics-ID.jsonl and OUT/summary-ID.json; the learner writes
/// latest.pt, the evaluator best.pt and the plot.
caf::expected<run_summary> run_node(caf::actor_system& sys,
                                    const run_options& opts,
                                    const dice::node_config& node);

/// Collectors among `workers` nodes with the default roles.
std::uint32_t default_collectors(std::uint32_t workers,
                                 std::uint32_t learners = 1);

/// Loads `checkpoint` and returns the returns of `episodes` greedy episodes.
caf::expected<std::vector<double>> run_eval_only(const std::string& checkpoint,
                                                 const run_options& opts,
                                                 int episodes);

/// Sets LibTorch's intra-op threads (torch stays out of main.cpp).
void set_threads(int n);

/// The summary as one JSON object (OUT/summary.json).
std::string summary_json(const run_summary& x);

/// Human-readable summary (several lines).
std::string to_string(const run_summary& x);

} // namespace dqn
