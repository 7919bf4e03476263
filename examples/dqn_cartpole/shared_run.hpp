#pragma once

// Internal to dqn_cartpole: what the nodes of one process share, the three
// middlewares (collector.cpp, learner.cpp, evaluator.cpp) and the helpers
// both wirings (local.cpp: one process; cluster.cpp: one node of a
// cluster) use. Torch-using.

#include "dice/core/node_report.hpp"
#include "dice/pipeline/middleware.hpp"

#include "caf/expected.hpp"

#include "dqn.hpp"
#include "group.hpp"
#include "options.hpp"
#include "outputs.hpp"
#include "run_record.hpp"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

namespace dqn {

/// What every node of one in-process run shares besides the clock, the
/// metrics file, the evaluation history and the progress line
/// (demo::run_record): the options, the policy lag and the resume point.
struct shared_run : demo::run_record {
  run_options opts;
  // Policy lag over every trajectory the learner received.
  std::int64_t lag_min = std::numeric_limits<std::int64_t>::max();
  std::int64_t lag_max = 0;
  double lag_sum = 0;
  std::int64_t lag_count = 0;
  // Starting point of a resumed run.
  std::int64_t resume_env_step = 0;
  std::int64_t resume_train_iter = 0;
  std::int64_t resume_env_episode = 0;
  // One node of a multi-process cluster: this process holds only its own
  // node, so outputs carry the node id and nothing is shared with others.
  bool distributed = false;
};

/// OUT/`name`.
inline std::string path_in(const run_options& opts, const std::string& name) {
  return demo::path_in(opts.out, name);
}

/// Steps `envs_per_collector` CartPoles `steps_per_collect` times with one
/// batched forward pass per step and emits one transition_batch per
/// iteration, stamped with the model version that acted.
dice::middleware collect_step(std::shared_ptr<shared_run> run, q_network net,
                              std::uint32_t node);

/// Feeds ctx.trajectories into the replay buffer, records their policy lag,
/// runs updates_per_step gradient steps per new transition, prints the
/// progress line and writes latest.pt. With a learner group (`group`) the
/// learners agree on the gradient steps and average their gradients; only
/// rank 0 reports and writes latest.pt.
dice::middleware train_step(std::shared_ptr<shared_run> run, q_network net,
                            std::uint32_t node,
                            std::shared_ptr<group_trainer> group = nullptr);

/// Runs greedy episodes every eval_every learner steps; keeps best.pt and
/// ends the run at the stop value (demo::eval_step with DQN's network).
dice::middleware eval_step(std::shared_ptr<shared_run> run, q_network net,
                           std::uint32_t node);

/// A fresh network, loaded from `resume_from` unless that is empty.
q_network make_net(const run_options& opts, const std::string& resume_from);

/// Creates OUT, reads the resume point and opens the metrics file
/// `metrics_name`; returns the checkpoint to start from ("" for none). A
/// resumed run needs OUT/latest.pt only where `need_checkpoint` (the
/// learner): other nodes of a cluster get the learner's model anyway.
caf::expected<std::string>
open_outputs(shared_run& run, const std::string& metrics_name,
             bool need_checkpoint, std::uint32_t node, bool restarted = false);

/// The learner's model exchanger: per iteration, or periodical (send).
dice::middleware learner_models(q_network net, const run_options& opts);

/// A collector's model exchanger: per iteration, or periodical (receive).
dice::middleware collector_models(q_network net, const run_options& opts);

/// Copies what `run` recorded (evaluations, solve point, lag) into `sum`.
void collect_results(shared_run& run, run_summary& sum);

/// Writes `sum` as one JSON object to OUT/`name`.
void write_summary(const run_options& opts, const run_summary& sum,
                   const std::string& name);

} // namespace dqn
