#pragma once

// The evaluator (DI-engine's interaction_evaluator): every few learner
// iterations it plays greedy episodes with the model it holds, records them
// in the run's outputs and metrics, keeps best.pt and ends the run once the
// mean return reaches the stop value. Also the plain function that plays
// the episodes, for --eval-only and tests.

#include "dice/env/vector_env.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/rl/outputs.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dice::rl {

/// Greedy actions for observations [n, obs_dim]: int64 [n] for a Discrete
/// action space, float [n, act_dim] for a Box (clipped to its bounds by the
/// player).
using greedy_policy = std::function<torch::Tensor(const torch::Tensor& obs)>;

/// Returns of `episodes` greedy episodes, one environment each, stepped side
/// by side in a vector_env reset with `seed`; each env counts only its
/// first episode.
caf::expected<std::vector<double>> play_greedy(const vector_env::factory& make,
                                               int episodes, std::uint64_t seed,
                                               const greedy_policy& act);

/// When and how the evaluator plays.
struct eval_options {
  /// Learner iterations (train_iter) between evaluations.
  std::int64_t every = 100;
  /// Greedy episodes per evaluation.
  int episodes = 10;
  /// Seed of the first evaluation (each one plays from its own seed).
  std::uint64_t seed = 0;
  /// Mean return that solves the run and ends it.
  double stop_value = std::numeric_limits<double>::infinity();
  /// Only a model the learner sent solves the run (some seeds' initial
  /// weights already play well greedily).
  bool trained_to_solve = false;
};

/// What the evaluator plays with.
struct eval_hooks {
  /// Makes environment i of an evaluation.
  vector_env::factory make_env;
  /// The greedy policy of the model the node holds.
  greedy_policy act;
  /// Writes that model to a path (best.pt).
  std::function<caf::error(const std::string& path)> save;
  /// The model version reported (default: ctx.model_version).
  std::function<std::int64_t(const context&)> version;
};

/// The evaluator middleware; logs its evaluations with the node's id.
middleware evaluator(std::shared_ptr<run_outputs> out, eval_hooks hooks,
                     eval_options opts);

/// Asks the cluster to finish once `env_step` reached `max_env_steps`
/// (reason "max_env_steps") or `seconds` reached `max_seconds` (reason
/// "max_seconds"); 0 means no limit. A learner calls it every iteration.
void finish_at_limits(node_services& svc, std::int64_t env_step,
                      std::int64_t max_env_steps, double seconds,
                      double max_seconds);

} // namespace dice::rl
