#pragma once

// How a CartPole demo's node in a multi-process cluster picks its one role
// and builds its pipeline: the same per-role order in both demos. The
// algorithm's middlewares come from the demo's namespace (found through the
// run and network types), so only the node's own role is built.

#include "dice/core/role.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/torch/model.hpp"

#include <cstdint>
#include <memory>
#include <utility>

namespace demo {

/// The role a node with `roles` runs: the first of learner, evaluator,
/// collector (one pipeline per process; the exchangers serve one role well).
inline dice::role main_role(const dice::role_set& roles) {
  return roles.has(dice::role::learner) ? dice::role::learner
    : roles.has(dice::role::evaluator)  ? dice::role::evaluator
                                        : dice::role::collector;
}

/// What a node does besides its role's usual work.
struct role_plan {
  /// The node's role (main_role).
  dice::role role = dice::role::collector;
  /// A learner that publishes models (a group's rank 0, or the only one).
  bool sends_models = true;
  /// A learner that also evaluates (no evaluator node); an evaluator always.
  bool evaluates = false;
};

/// Appends the middlewares of `plan.role` after what `pipe` already holds
/// (the context exchanger): a learner's model exchanger (if it sends
/// models), training, then evaluation if it `evaluates`; an evaluator's
/// model exchanger and evaluation; a collector's model exchanger and
/// collection. The demo's namespace provides learner_models(net, opts),
/// train_step(run, net, node, train_args...), eval_step(run, net, node),
/// collector_models(net, opts) and collect_step(run, net, node).
template <class Run, class Net, class... TrainArgs>
void use_role(dice::pipeline& pipe, const role_plan& plan,
              const std::shared_ptr<Run>& run, Net& net, std::uint32_t node,
              TrainArgs&&... train_args) {
  auto& opts = run->opts;
  switch (plan.role) {
    case dice::role::learner:
      if (plan.sends_models)
        pipe.use(learner_models(net, opts));
      pipe.use(
        train_step(run, net, node, std::forward<TrainArgs>(train_args)...));
      if (plan.evaluates)
        pipe.use(eval_step(run, net, node));
      break;
    case dice::role::evaluator:
      pipe.use(dice::model_exchanger(dice::model_port_of(net.ptr())))
        .use(eval_step(run, net, node));
      break;
    default:
      pipe.use(collector_models(net, opts)).use(collect_step(run, net, node));
  }
}

} // namespace demo
