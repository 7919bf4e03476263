#pragma once

// The exchangers of an RL node, in DI-engine's order, for whatever role the
// node has: one call instead of the same lines in every program.

#include "dice/core/model.hpp"
#include "dice/rl/run_config.hpp"
#include "dice/runtime/run.hpp"
#include "dice/torch/learner_group.hpp"
#include "dice/torch/learner_group_member.hpp"

#include <memory>

namespace dice::rl {

/// Appends the exchangers of `n`'s role to its pipeline:
/// - a learner: its hello when it was restarted (collectors waiting for a
///   model load the new learner's at once), then, in a group of learners,
///   its membership and a context exchanger partitioned by collector, else
///   the context exchanger; then its model exchanger (only rank 0 of a
///   group publishes models): per iteration, or periodical (send);
/// - a collector: the context exchanger and the model exchanger per
///   iteration, or periodical (receive, with `stale_toleration`);
/// - an evaluator: the context exchanger and a model exchanger that takes
///   every model.
/// Returns the learner's group membership (null without a group): the
/// learner's train step averages its gradients through it.
std::shared_ptr<learner_group_member>
use_exchangers(node_setup& n, model_port_ptr model,
               const model_exchange_options& models,
               reduce_mode mode = reduce_mode::automatic);

} // namespace dice::rl
