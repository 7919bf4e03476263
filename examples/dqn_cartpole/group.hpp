#pragma once

// A DQN learner in a data-parallel group (docs/learner_group.md): every
// iteration the learners add up their new data and agree on the number of
// gradient steps; each step averages the gradients over the group.

#include "dice/pipeline/context.hpp"
#include "dice/torch/learner_group_member.hpp"

#include "dqn.hpp"
#include "options.hpp"

#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <string>

namespace dqn {

/// What one learner of a group keeps between iterations.
struct group_trainer {
  /// The learner's membership.
  std::shared_ptr<dice::learner_group_member> member;
  /// Gradient steps owed but not yet taken (identical on every rank).
  double owed = 0;
  /// Group iterations so far.
  std::int64_t iterations = 0;
  /// OUT/digests-NODE.txt with `run_options::verify_every`.
  std::ofstream digests;

  /// Lets `member` bring this learner to the root's state after forming.
  void attach(dqn_learner& learner);

  /// What one iteration did.
  struct result {
    /// Gradient steps taken (the same on every rank unless the step failed).
    std::int64_t steps = 0;
    /// Loss of the last step.
    float loss = std::numeric_limits<float>::quiet_NaN();
    /// Some rank asked to stop.
    bool stop = false;
  };

  /// One iteration: sums new transitions (`fresh`), readiness and stop
  /// requests over the group (ctx's env_step and env_episode become the
  /// group's), then takes the agreed gradient steps with averaged
  /// gradients; a failed collective ends the iteration (re-formed later).
  result iterate(dice::context& ctx, dqn_learner& learner,
                 const run_options& opts, std::size_t fresh, bool stop);
};

} // namespace dqn
