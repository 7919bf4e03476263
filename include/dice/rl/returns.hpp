#pragma once

// Advantage and value targets on flattened steps (torch-free): GAE(lambda)
// as DI-engine's ding.rl_utils.gae computes it, and V-trace (Espeholt et
// al. 2018, "IMPALA", eq. 1 and section 4.2) for data from an older policy.
//
// Steps of several trajectories lie one after another; `traj_flag` is 1 at
// the last step of each (segment end, termination or truncation), where the
// backward recursion starts over. `terminated` alone stops the bootstrap: a
// truncated step or a segment end bootstraps from V(next_obs).

#include "caf/expected.hpp"

#include <cstdint>
#include <vector>

namespace dice::rl {

/// Per-step inputs of the return computations (all of one length).
struct return_inputs {
  /// V(obs_t) under the value function being trained.
  std::vector<float> value;
  /// V(next_obs_t), the bootstrap value.
  std::vector<float> next_value;
  /// r_t.
  std::vector<float> reward;
  /// 1: the episode terminated at t (no bootstrap).
  std::vector<std::uint8_t> terminated;
  /// 1: a trajectory ends at t.
  std::vector<std::uint8_t> traj_flag;
};

/// GAE(lambda) advantages: delta_t = r_t + gamma (1 - term_t) V(next_t) -
/// V(obs_t); A_t = delta_t + gamma lambda (1 - flag_t) A_{t+1}. Inputs of
/// different lengths give errc::invalid_config.
caf::expected<std::vector<float>> gae(const return_inputs& in, float gamma,
                                      float lambda);

/// Clipping thresholds of V-trace.
struct vtrace_options {
  /// Discount.
  float gamma = 0.99f;
  /// Trace decay folded into c_t = lambda * min(c_bar, pi/mu) (IMPALA 4.2).
  float lambda = 1.0f;
  /// rho_bar: clip of the importance weight in the TD error.
  float rho_bar = 1.0f;
  /// c_bar: clip of the trace-cutting weights.
  float c_bar = 1.0f;
  /// Clip of the importance weight of the policy-gradient advantage.
  float pg_rho_bar = 1.0f;
};

/// V-trace targets and the advantages for the policy gradient.
struct vtrace_result {
  /// v_t = V(x_t) + delta_t + gamma c_t (v_{t+1} - V(x_{t+1})), with
  /// delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t)).
  std::vector<float> vs;
  /// min(pg_rho_bar, pi/mu) (r_t + gamma v_{t+1} - V(x_t)), where v_{t+1}
  /// is V(next_obs_t) at a trajectory's last step.
  std::vector<float> pg_adv;
};

/// V-trace from `log_rho` = log pi(a_t|x_t) - log mu(a_t|x_t) (target
/// policy minus behaviour policy). Inputs of different lengths give
/// errc::invalid_config.
caf::expected<vtrace_result> vtrace(const return_inputs& in,
                                    const std::vector<float>& log_rho,
                                    const vtrace_options& opts);

} // namespace dice::rl
