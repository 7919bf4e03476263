#pragma once

// PPO's update (Schulman et al. 2017) for Discrete and Box actions: the
// clipped surrogate objective, an optionally clipped value loss and an
// entropy bonus, and a learner that cuts a merged context back into
// segments, computes GAE or V-trace targets with its current network and
// runs epochs of shuffled minibatch Adam steps.

#include "dice/messages/payload.hpp"
#include "dice/rl/actor_critic.hpp"
#include "dice/rl/intake.hpp"
#include "dice/rl/returns.hpp"
#include "dice/rl/segments.hpp"

#include "caf/expected.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <random>
#include <vector>

namespace dice::rl {

/// Hyper-parameters of PPO (examples/ppo_cartpole's ppo_config plus value
/// clipping; the network's widths are actor_critic_options).
struct ppo_options {
  /// Discount.
  float gamma = 0.99f;
  /// GAE's lambda (and V-trace's trace decay).
  float lambda = 0.95f;
  /// PPO's clip range epsilon.
  double clip = 0.2;
  /// Value clipping range c (0: off): the value loss is 0.5 mean(max((V -
  /// R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)), V_old the behaviour
  /// value the collector sent.
  double value_clip = 0.0;
  /// Adam's learning rate.
  double lr = 1e-3;
  /// Passes over each batch.
  int epochs = 10;
  /// Samples per gradient step.
  std::int64_t minibatch = 64;
  /// Weight of the value loss.
  double vf_coef = 0.5;
  /// Weight of the entropy bonus.
  double ent_coef = 0.0;
  /// Gradient norm clip (0: none).
  double max_grad_norm = 0.5;
  /// Normalize advantages per minibatch.
  bool normalize_adv = true;
  /// V-trace targets (IMPALA) instead of GAE.
  bool vtrace = false;
  /// V-trace's rho_bar.
  float rho_bar = 1.0f;
  /// V-trace's c_bar.
  float c_bar = 1.0f;
  /// Drop segments more than this many model versions old (-1: keep all).
  std::int64_t max_lag = -1;
};

/// What the loss compares the network's outputs with (one minibatch).
struct loss_inputs {
  /// log mu(a|x) of the behaviour policy [B].
  torch::Tensor behaviour_logp;
  /// Advantages [B].
  torch::Tensor advantages;
  /// Value targets R [B].
  torch::Tensor value_targets;
  /// V_old [B], the behaviour values (needed only with value_clip > 0).
  torch::Tensor behaviour_values;
};

/// Terms of the PPO loss on one minibatch.
struct loss_terms {
  /// policy + vf_coef * value - ent_coef * entropy.
  torch::Tensor total;
  /// -mean(min(ratio A, clip(ratio, 1-eps, 1+eps) A)).
  torch::Tensor policy;
  /// 0.5 mean((V - R)^2), or its clipped form (see ppo_options).
  torch::Tensor value;
  /// Mean entropy of the policy.
  torch::Tensor entropy;
  /// Fraction of samples whose ratio was clipped.
  double clip_fraction = 0;
  /// mean(log mu - log pi), an estimate of KL(mu || pi).
  double approx_kl = 0;
};

/// The PPO loss from the network's log pi(a|x), entropies and values [B]
/// (actor_critic::evaluate, either action kind); ratio = pi(a|x) / mu(a|x).
loss_terms ppo_loss(const evaluation& e, const loss_inputs& in,
                    const ppo_options& opts);

/// One batch made ready for the update (exposed for tests).
struct prepared_batch {
  /// The segments kept.
  segment_batch segments;
  /// Values, bootstrap values, rewards, flags the targets came from.
  return_inputs inputs;
  /// log pi(a|x) - log mu(a|x) at preparation (0 on-policy).
  std::vector<float> log_rho;
  /// Advantages for the policy loss (GAE, or V-trace's pg advantages).
  std::vector<float> advantages;
  /// Value targets (GAE + V, or V-trace's v_s).
  std::vector<float> value_targets;
};

/// What one update did.
struct update_stats {
  /// Samples trained on (after drops).
  std::int64_t samples = 0;
  /// Gradient steps.
  std::int64_t grad_steps = 0;
  /// Loss terms averaged over the gradient steps.
  double policy_loss = 0, value_loss = 0, entropy = 0;
  /// Averaged over the gradient steps.
  double clip_fraction = 0, approx_kl = 0;
};

/// The learner: admits merged context, computes targets, trains.
class ppo_learner {
 public:
  /// Trains `net` (shared, not copied) with `opts`; `seed` drives
  /// minibatch shuffling.
  ppo_learner(actor_critic net, ppo_options opts, std::uint64_t seed);

  /// Cuts segments from a merged context (payloads of the network's
  /// layout) and computes targets with the current network, measuring lag
  /// against `learner_version`. Errors: see cut_segments; a torch failure
  /// gives errc::user_exception.
  caf::expected<prepared_batch>
  prepare(const std::vector<dice::payload>& trajectories,
          const std::vector<std::int64_t>& end_idx,
          std::int64_t learner_version);

  /// prepare(), then train(). A batch whose samples were all dropped
  /// trains nothing (samples == 0); a refused one leaves the network as it
  /// was.
  caf::expected<update_stats>
  learn(const std::vector<dice::payload>& trajectories,
        const std::vector<std::int64_t>& end_idx, std::int64_t learner_version);

  /// `epochs` passes of shuffled minibatch Adam steps on a prepared batch;
  /// a torch failure gives errc::user_exception.
  caf::expected<update_stats> train(const prepared_batch& b);

  /// The network being trained.
  actor_critic& net() noexcept {
    return net_;
  }

  /// The layout of the steps it trains on.
  const step_layout& layout() const noexcept {
    return layout_;
  }

  /// Lag of every sample received so far.
  const lag_summary& lags() const noexcept {
    return lags_;
  }

  /// What was received, dropped and refused so far.
  const intake_counters& intake() const noexcept {
    return intake_;
  }

  /// Gradient steps so far.
  std::int64_t grad_steps() const noexcept {
    return grad_steps_;
  }

  /// The optimizer (for checkpoints).
  torch::optim::Adam& optimizer() noexcept {
    return opt_;
  }

  /// The options.
  const ppo_options& options() const noexcept {
    return opts_;
  }

 private:
  void compute_targets(prepared_batch& b);

  update_stats train_impl(const prepared_batch& b);

  ppo_options opts_;
  actor_critic net_;
  step_layout layout_;
  torch::optim::Adam opt_;
  std::mt19937_64 rng_;
  lag_summary lags_;
  intake_counters intake_;
  std::int64_t grad_steps_ = 0;
};

/// Observations [n, obs_dim] of `steps` (a view of its column: keep
/// `steps` alive while it is used).
torch::Tensor obs_tensor(const step_columns& steps);

/// Actions of `steps`: int64 [n] (Discrete) or float [n, act_dim] (Box), a
/// view of its column.
torch::Tensor action_tensor(const step_columns& steps);

} // namespace dice::rl
