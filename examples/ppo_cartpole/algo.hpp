#pragma once

// PPO's hyper-parameters; torch-free, so option parsing need not see torch.

#include <cstdint>

namespace ppo {

/// Hyper-parameters of the algorithm.
struct ppo_config {
  /// Width of the two hidden layers of each head (reference BLAS: small).
  std::int64_t hidden = 64;
  /// Discount.
  float gamma = 0.99f;
  /// GAE's lambda (and V-trace's trace decay).
  float lambda = 0.95f;
  /// PPO's clip range epsilon.
  double clip = 0.2;
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

} // namespace ppo
