#pragma once

// PPO's actor-critic: separate policy and value MLPs (tanh, orthogonal
// weights, zero biases, a small policy head so the first policy is nearly
// uniform) for a flat Box observation and a Discrete or Box action space.
// Discrete actions draw from a categorical over the policy's logits; Box
// actions from a diagonal Gaussian whose mean is the policy's output and
// whose log standard deviation is one learnable parameter per action
// dimension, independent of the state.
//
// Box actions are neither squashed nor clipped here: act() returns the
// sampled action, and that unclipped value is what a collector stores and
// the learner scores. Clipping it to the action space's bounds is the
// collector's job, on the copy it hands to env.step (as in Stable-Baselines3
// and CleanRL).
//
// Parameter names follow PyTorch: "pi.0.weight", "pi.0.bias", "pi.2.weight",
// ..., "v.0.weight", ..., and "log_std" (Box), as a Python module with
// `self.pi = nn.Sequential(...)`, `self.v = nn.Sequential(...)` and
// `self.log_std = nn.Parameter(...)` names them.

#include "dice/env/space.hpp"
#include "dice/rl/distributions.hpp"

#include "caf/expected.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <random>
#include <vector>

namespace dice::rl {

/// How an actor_critic is built.
struct actor_critic_options {
  /// Widths of the hidden layers, the same for the policy and the value MLP.
  std::vector<std::int64_t> hidden{64, 64};
  /// Initial log standard deviation of every Box action dimension.
  double log_std_init = 0.0;
};

/// What act() returns for a batch of observations.
struct act_result {
  /// int64 [B] (Discrete) or float [B, D] (Box, unclipped); CPU.
  torch::Tensor actions;
  /// log pi(a|x) [B] of those actions; CPU.
  torch::Tensor log_prob;
  /// V(x) [B]; CPU.
  torch::Tensor value;
};

/// What evaluate() returns (differentiable).
struct evaluation {
  /// log pi(a|x) [B].
  torch::Tensor log_prob;
  /// Entropy of pi(.|x) [B].
  torch::Tensor entropy;
  /// V(x) [B].
  torch::Tensor value;
};

/// Policy and value MLPs for one observation and action space.
class actor_critic_impl : public torch::nn::Module {
 public:
  /// Builds the network; the spaces must pass check_spaces (throws
  /// std::invalid_argument otherwise: use make_actor_critic for an error
  /// value). Layers are built policy first, then value, each Linear
  /// initialized right after it is built: for Discrete(2), a 4-float
  /// observation and hidden {h, h} the weights equal examples/ppo_cartpole's
  /// actor_critic{h} for the same torch seed.
  actor_critic_impl(const space& observation_space, const space& action_space,
                    const actor_critic_options& opts = {});

  /// The policy MLP's output [B, A] (logits) or [B, D] (Gaussian means).
  torch::Tensor policy_out(const torch::Tensor& obs);

  /// V(x) [B] for observations [B, obs_dim].
  torch::Tensor value(const torch::Tensor& obs);

  /// pi(.|x) for Discrete actions.
  categorical categorical_policy(const torch::Tensor& obs);

  /// pi(.|x) for Box actions.
  diag_gaussian gaussian_policy(const torch::Tensor& obs);

  /// Samples actions for a collector (no gradient): observations [B,
  /// obs_dim] on the network's device, results on the CPU.
  act_result act(const torch::Tensor& obs, std::mt19937_64& gen);

  /// Log-probabilities of `actions` (int64 [B] or float [B, D]), entropies
  /// and values, with gradients, for the learner.
  evaluation evaluate(const torch::Tensor& obs, const torch::Tensor& actions);

  /// The most probable actions (argmax, or the Gaussian means) for greedy
  /// evaluation (no gradient).
  torch::Tensor mode(const torch::Tensor& obs);

  /// True for a Discrete action space.
  bool discrete() const noexcept {
    return num_actions_ > 0;
  }

  /// Floats per observation.
  std::int64_t obs_dim() const noexcept {
    return obs_dim_;
  }

  /// Discrete(n): n; Box: 0.
  std::int64_t num_actions() const noexcept {
    return num_actions_;
  }

  /// Box: floats per action; Discrete: 0.
  std::int64_t act_dim() const noexcept {
    return act_dim_;
  }

  /// The policy MLP (Linear, Tanh, ..., Linear).
  torch::nn::Sequential pi{nullptr};

  /// The value MLP (Linear, Tanh, ..., Linear to 1).
  torch::nn::Sequential v{nullptr};

  /// Box: log standard deviations [D]; undefined for Discrete.
  torch::Tensor log_std;

 private:
  std::int64_t obs_dim_ = 0;
  std::int64_t num_actions_ = 0;
  std::int64_t act_dim_ = 0;
};

/// A shared handle to an actor_critic_impl (torch's module holder).
TORCH_MODULE_IMPL(actor_critic, actor_critic_impl);

/// Why an observation / action space pair cannot drive an actor_critic
/// ("" if it can): the observation must be a non-empty Box, the action
/// space Discrete(n >= 1) or a non-empty Box.
std::string check_spaces(const space& observation_space,
                         const space& action_space);

/// Builds an actor_critic, or errc::invalid_config for unusable spaces or
/// options (a hidden width below 1).
caf::expected<actor_critic>
make_actor_critic(const space& observation_space, const space& action_space,
                  const actor_critic_options& opts = {});

/// Copies every parameter of `src` into `dst` (same spaces and widths).
void copy_weights(actor_critic& dst, const actor_critic& src);

} // namespace dice::rl
