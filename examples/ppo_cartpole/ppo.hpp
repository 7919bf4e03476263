#pragma once

// PPO with LibTorch: the actor-critic network, a collector that turns a
// vectorized CartPole into fixed-length segments (payloads + end indices),
// and a learner that cuts a merged context back into segments, computes GAE
// or V-trace targets and runs clipped-surrogate minibatch epochs.

#include "dice/messages/payload.hpp"

#include "caf/expected.hpp"

#include "algo.hpp"
#include "cartpole.hpp"
#include "returns.hpp"
#include "segment.hpp"
#include <torch/torch.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace ppo {

/// Policy and value MLPs: 4 -> hidden -> hidden -> 2 and -> 1 (tanh).
struct actor_critic_impl : torch::nn::Module {
  /// Builds the layers (orthogonal init, small policy head).
  explicit actor_critic_impl(std::int64_t hidden = 64);
  /// Action logits [B, 2] for observations [B, 4].
  torch::Tensor logits(const torch::Tensor& obs);
  /// Values [B] for observations [B, 4].
  torch::Tensor value(const torch::Tensor& obs);
  /// Policy layers.
  torch::nn::Linear pi1{nullptr}, pi2{nullptr}, pi_out{nullptr};
  /// Value layers.
  torch::nn::Linear v1{nullptr}, v2{nullptr}, v_out{nullptr};
};
TORCH_MODULE_IMPL(actor_critic, actor_critic_impl);

/// Copies every parameter of `src` into `dst`.
void copy_weights(actor_critic& dst, actor_critic& src);

/// What one collector iteration produced: one payload of steps (env by env),
/// its end indices, and one payload of finished episodes.
struct collected {
  /// Steps, T x N, stamped with origin and model version.
  std::vector<dice::payload> trajectories;
  /// Finished episodes (empty when none finished).
  std::vector<dice::payload> episodes;
  /// Index of each env's last step: T-1, 2T-1, ..., NT-1.
  std::vector<std::int64_t> trajectory_end_idx;
  /// Env steps taken (T x N).
  std::int64_t env_steps = 0;
  /// Returns of the episodes that finished.
  std::vector<double> finished_returns;
};

/// Steps N CartPoles T times per call with the policy sampled by a seeded
/// generator; episodes continue across calls.
class segment_collector {
 public:
  /// `envs` CartPoles, `steps` per call; seeds envs and sampling.
  segment_collector(std::size_t envs, std::int64_t steps, std::uint64_t seed);

  /// Collects one segment per env with `net`, stamped with `origin` and
  /// `version` (the model version that acts).
  collected collect(actor_critic& net, std::uint32_t origin,
                    std::int64_t version);

 private:
  dqn::vec_cartpole envs_;
  std::int64_t steps_;
  std::mt19937_64 rng_;
  std::vector<std::int64_t> lengths_;
};

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

/// Terms of the PPO loss on one minibatch.
struct loss_terms {
  /// policy + vf_coef * value - ent_coef * entropy.
  torch::Tensor total;
  /// -mean(min(ratio A, clip(ratio, 1-eps, 1+eps) A)).
  torch::Tensor policy;
  /// 0.5 mean((V - target)^2).
  torch::Tensor value;
  /// Mean entropy of the policy.
  torch::Tensor entropy;
  /// Fraction of samples whose ratio was clipped.
  double clip_fraction = 0;
  /// mean(log mu - log pi), an estimate of KL(mu || pi).
  double approx_kl = 0;
};

/// The PPO loss from `logits` [B, A] and `values` [B] of the network being
/// trained; ratio = pi(a|x) / mu(a|x) against the behaviour log-probs.
loss_terms ppo_loss(const torch::Tensor& logits, const torch::Tensor& values,
                    const torch::Tensor& actions,
                    const torch::Tensor& behaviour_logp,
                    const torch::Tensor& advantages,
                    const torch::Tensor& value_targets, const ppo_config& cfg);

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
  /// Trains `net` with `cfg`; `seed` drives minibatch shuffling.
  ppo_learner(actor_critic net, ppo_config cfg, std::uint64_t seed);

  /// Cuts segments from a merged context and computes targets with the
  /// current network, measuring lag against `learner_version`. Errors:
  /// see cut_segments.
  caf::expected<prepared_batch>
  prepare(const std::vector<dice::payload>& trajectories,
          const std::vector<std::int64_t>& end_idx,
          std::int64_t learner_version);

  /// prepare(), then `epochs` passes of minibatch Adam steps. A batch whose
  /// samples were all dropped trains nothing (samples == 0).
  caf::expected<update_stats>
  learn(const std::vector<dice::payload>& trajectories,
        const std::vector<std::int64_t>& end_idx, std::int64_t learner_version);

  /// Trains on a prepared batch.
  update_stats train(const prepared_batch& b);

  /// The network being trained.
  actor_critic& net() noexcept {
    return net_;
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

  /// The configuration.
  const ppo_config& config() const noexcept {
    return cfg_;
  }

 private:
  ppo_config cfg_;
  actor_critic net_;
  torch::optim::Adam opt_;
  std::mt19937_64 rng_;
  lag_summary lags_;
  intake_counters intake_;
  std::int64_t grad_steps_ = 0;
};

/// Greedy (argmax) actions for observations [n * 4].
std::vector<std::int64_t> greedy_actions(actor_critic& net,
                                         const std::vector<float>& obs);

/// Returns of `episodes` greedy episodes run side by side (seeded).
std::vector<double> evaluate_greedy(actor_critic& net, int episodes,
                                    std::uint64_t seed);

} // namespace ppo
