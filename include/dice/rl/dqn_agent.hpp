#pragma once

// DQN as middleware for any environment with a Box observation and Discrete
// actions: a collector that steps a batch of the user's environments with
// epsilon-greedy actions and sends n-step transitions, a learner that
// trains on them (alone or as one learner of a data-parallel group) with
// checkpoints and resume, and dqn_agent, which makes a node's network and
// outputs and hands out the middleware of its role. A whole program:
//
//   struct config : dice::rl::dqn_run_config {
//     config() { make_env = [](std::size_t) { return my_env(); }; }
//   };
//   int main(int argc, char** argv) {
//     return dice::run<config>(argc, argv, dice::rl::use_dqn);
//   }

#include "dice/core/model.hpp"
#include "dice/env/vector_env.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/rl/dqn.hpp"
#include "dice/rl/evaluator.hpp"
#include "dice/rl/outputs.hpp"
#include "dice/rl/run_config.hpp"
#include "dice/runtime/run.hpp"
#include "dice/torch/learner_group.hpp"
#include "dice/torch/learner_group_member.hpp"

#include "caf/expected.hpp"

#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>

namespace dice::rl {

/// What DQN's middleware needs besides a network and the run's outputs
/// (dqn_run_config::resolve makes it from the command line).
struct dqn_run_options {
  /// The algorithm.
  dqn_options algo;
  /// Makes environment i of a collector's batch and of an evaluation.
  vector_env::factory make_env;
  /// Seeds networks, environments, exploration and sampling.
  std::uint64_t seed = 0;
  /// Environments each collector steps as one batch.
  std::size_t envs_per_collector = 8;
  /// Steps of every environment per collector iteration.
  std::int64_t steps_per_collect = 16;
  /// The collectors' vector_env settings (what a failing env does).
  vector_env_options env;
  /// The learner finishes the run after this many env steps (0: never).
  std::int64_t max_env_steps = 0;
  /// The learner finishes the run after this many seconds (0: never).
  double max_seconds = 0;
  /// Seconds between the learner's checkpoints (it also writes one at stop).
  double checkpoint_every = 10;
  /// The learner starts from OUT/latest.pt and OUT/learner.pt.
  bool resume = false;
  /// A learner group compares parameter digests every this many iterations
  /// and logs them to OUT/digests-NODE.txt (0: never).
  std::int64_t verify_every = 0;
  /// A learner group's gradient all-reduce.
  reduce_mode reduce = reduce_mode::automatic;
  /// How a user runs the same program again with --resume (told when a
  /// learner group lost rank 0).
  std::string resume_command;
  /// The learner records what it applied here (--dice.record; empty: no).
  std::string record;
  /// The record's bound in bytes (0: none).
  std::uint64_t record_max_bytes = 0;
  /// The evaluator's settings.
  eval_options eval;
};

/// The options of a DQN program: the common RL options, DQN's (dqn_cli) and
/// a learner group's (--reduce, --verify-every). The program sets the
/// environment and the run's title, and may change any default.
class dqn_run_config : public run_config {
 public:
  /// Registers the options.
  dqn_run_config();

  /// DQN's hyper-parameters.
  dqn_cli dqn;
  /// --reduce: a learner group's all-reduce: automatic, exchange, bucketed
  /// or flat.
  std::string reduce = "automatic";
  /// --verify-every: a group's digest check period (0: never).
  std::int64_t verify_every = 0;
  /// Makes environment i (the program sets it).
  vector_env::factory make_env;
  /// Title of the plot, the progress line's owner and the summary.
  std::string title = "DQN";

  /// Everything the middleware needs, checked (errc::invalid_config names
  /// the bad option).
  caf::expected<dqn_run_options> resolve() const;

  /// Checks the options (exit code 2 naming the bad one), sets LibTorch's
  /// threads and, with --eval-only, plays --eval-episodes greedy episodes
  /// with that checkpoint and prints their returns; nullopt: run the nodes.
  std::optional<int> run_instead(caf::actor_system& sys) const override;
};

/// Steps `opts.envs_per_collector` environments `opts.steps_per_collect`
/// times per iteration with one batched forward pass of `net` per step,
/// epsilon-greedy by the estimated global env step (the resumed steps plus
/// its own times `collectors`), and puts one transition_batch of n-step
/// transitions into ctx.trajectories, stamped with ctx.model_version. Writes
/// a "collector" metrics line to `out` on its first iteration and then once
/// a second (null `out`: none). Fails when the environments cannot be made.
caf::expected<middleware> dqn_collector(q_network net,
                                        const dqn_run_options& opts,
                                        std::shared_ptr<run_outputs> out,
                                        std::uint32_t node,
                                        std::uint32_t collectors);

/// One learner of a data-parallel group (docs/learner_group.md): every
/// iteration the learners add up their new data and agree on the number of
/// gradient steps; each step averages the gradients over the group.
class dqn_group {
 public:
  /// What one iteration did.
  struct result {
    /// Gradient steps taken (the same on every rank unless a step failed).
    std::int64_t steps = 0;
    /// Loss of the last step.
    float loss = std::numeric_limits<float>::quiet_NaN();
    /// Some rank asked to stop.
    bool stop = false;
  };

  /// Trains `learner` in the group of `member`; a learner that forms or
  /// joins takes the root's weights, target, Adam and counters.
  dqn_group(std::shared_ptr<learner_group_member> member, dqn_learner& learner);

  /// The membership.
  learner_group_member& member() noexcept {
    return *member_;
  }

  /// Logs parameter digests to `path` every `every` iterations and checks
  /// that all ranks agree (0: never).
  void verify(std::int64_t every, const std::string& path);

  /// One iteration: sums new transitions (`fresh`), readiness and stop
  /// requests over the group (ctx's env_step and env_episode become the
  /// group's), then takes the agreed gradient steps with averaged
  /// gradients; a failed collective ends the iteration (re-formed later).
  result iterate(context& ctx, std::size_t fresh, bool stop);

  /// Counts what arrived after the last iteration and leaves the group (at
  /// stop); false if the count failed.
  bool finish(context& ctx);

 private:
  std::shared_ptr<learner_group_member> member_;
  dqn_learner* learner_;
  double owed_ = 0;
  std::int64_t iterations_ = 0;
  std::int64_t verify_every_ = 0;
  std::ofstream digests_;
};

/// The learner: feeds ctx.trajectories into the replay buffer, records the
/// policy lag, takes updates_per_step gradient steps per new transition
/// (averaged over the group of `member` when given), writes "learner"
/// metrics and the progress line, checkpoints OUT/latest.pt (PyTorch's
/// state_dict), OUT/learner.pt and OUT/latest.json every checkpoint_every
/// seconds and at stop, and finishes the run at max_env_steps or
/// max_seconds. With `opts.resume` it starts from those files (a missing
/// latest.pt is errc::storage_missing) and the counters of `out`'s resume
/// point.
caf::expected<middleware>
dqn_trainer(q_network net, const dqn_run_options& opts,
            std::shared_ptr<run_outputs> out,
            std::shared_ptr<learner_group_member> member = nullptr);

/// The evaluator middleware (rl::evaluator) playing `net` greedily.
middleware dqn_evaluator(q_network net, const dqn_run_options& opts,
                         std::shared_ptr<run_outputs> out);

/// One DQN node: its options, network and the process's outputs.
class dqn_agent {
 public:
  /// The agent of node `n`: resolves `cfg` (a learner restarted by
  /// dice-launch resumes from OUT/latest.pt), builds the network from
  /// --seed (every node starts from the same weights; a resuming node
  /// loads OUT/latest.pt) and opens the process's outputs. Throws
  /// std::runtime_error on bad options (dice::run reports it as the node's
  /// build error).
  dqn_agent(node_setup& n, const dqn_run_config& cfg);

  /// The options of this node.
  const dqn_run_options& options() const noexcept {
    return opts_;
  }

  /// The node's network.
  q_network& net() noexcept {
    return net_;
  }

  /// The network as the exchangers see it.
  model_port_ptr model() const;

  /// The process's outputs.
  const std::shared_ptr<run_outputs>& outputs() const noexcept {
    return out_;
  }

  /// The learner's middleware (dqn_trainer); throws on an error.
  middleware train(std::shared_ptr<learner_group_member> member = nullptr);

  /// The evaluator's middleware (dqn_evaluator).
  middleware evaluate();

  /// The collector's middleware (dqn_collector); throws on an error.
  middleware collect();

 private:
  dqn_run_options opts_;
  q_network net_{nullptr};
  model_port_ptr port_;
  std::shared_ptr<run_outputs> out_;
  std::uint32_t node_;
  std::uint32_t collectors_;
};

/// Builds node `n` of a DQN run: its exchangers (use_exchangers), then a
/// learner's training (and evaluation where the cluster has no evaluator
/// node), an evaluator's evaluation or a collector's collection.
void use_dqn(node_setup& n, const dqn_run_config& cfg);

} // namespace dice::rl
