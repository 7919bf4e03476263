#pragma once

// The two policy distributions of PPO: a categorical over Discrete(n)
// actions (from logits) and a diagonal Gaussian over Box actions with a
// state-independent log standard deviation. Log-probabilities, entropies
// and modes are differentiable tensors; sampling draws from a caller-owned
// std::mt19937_64 on the CPU, so a seeded collector acts the same on every
// machine and LibTorch version (torch's own generator is not involved).

#include <torch/torch.h>

#include <cstdint>
#include <random>

namespace dice::rl {

/// A categorical distribution per row of logits [B, A].
class categorical {
 public:
  /// The distribution with these (unnormalized) logits [B, A].
  explicit categorical(const torch::Tensor& logits);

  /// log softmax of the logits [B, A].
  const torch::Tensor& log_probs() const noexcept {
    return log_probs_;
  }

  /// log pi(a) [B] of one action index per row (int64 [B]).
  torch::Tensor log_prob(const torch::Tensor& actions) const;

  /// -sum_a pi(a) log pi(a) [B].
  torch::Tensor entropy() const;

  /// The most probable action of each row (int64 [B]).
  torch::Tensor mode() const;

  /// One action per row (int64 [B], CPU) by inverse CDF: one uniform float
  /// draw u per row, in row order, and the first a with u < pi(0) + ... +
  /// pi(a) (summed in float), else the last action.
  torch::Tensor sample(std::mt19937_64& gen) const;

 private:
  torch::Tensor log_probs_;
};

/// Independent Gaussians per action dimension: mean [B, D] and a log
/// standard deviation [D] shared by every row.
class diag_gaussian {
 public:
  /// The distribution N(mean, exp(log_std)^2) per dimension.
  diag_gaussian(const torch::Tensor& mean, const torch::Tensor& log_std);

  /// The means [B, D].
  const torch::Tensor& mean() const noexcept {
    return mean_;
  }

  /// The log standard deviations [D].
  const torch::Tensor& log_std() const noexcept {
    return log_std_;
  }

  /// log density [B] of actions [B, D], summed over the dimensions.
  torch::Tensor log_prob(const torch::Tensor& actions) const;

  /// Differential entropy [B], summed over the dimensions.
  torch::Tensor entropy() const;

  /// The mean [B, D] (the most probable action).
  torch::Tensor mode() const {
    return mean_;
  }

  /// mean + std * z [B, D] (CPU, float), z drawn from `gen` by
  /// std::normal_distribution<float>, row by row, dimension by dimension.
  torch::Tensor sample(std::mt19937_64& gen) const;

 private:
  torch::Tensor mean_;
  torch::Tensor log_std_;
};

} // namespace dice::rl
