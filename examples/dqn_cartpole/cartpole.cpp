#include "cartpole.hpp"

#include <cmath>

namespace dqn {

cartpole_state cartpole_dynamics(const cartpole_state& s, int action) {
  using p = cartpole_params;
  constexpr double total_mass = p::masspole + p::masscart;
  constexpr double polemass_length = p::masspole * p::length;
  double force = action == 1 ? p::force_mag : -p::force_mag;
  double costheta = std::cos(s.theta);
  double sintheta = std::sin(s.theta);
  double temp = (force + polemass_length * s.theta_dot * s.theta_dot * sintheta)
    / total_mass;
  double thetaacc = (p::gravity * sintheta - costheta * temp)
    / (p::length
       * (4.0 / 3.0 - p::masspole * costheta * costheta / total_mass));
  double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
  // Gymnasium's default "euler" integrator: positions use the old velocities.
  cartpole_state r;
  r.x = s.x + p::tau * s.x_dot;
  r.x_dot = s.x_dot + p::tau * xacc;
  r.theta = s.theta + p::tau * s.theta_dot;
  r.theta_dot = s.theta_dot + p::tau * thetaacc;
  return r;
}

bool cartpole_terminated(const cartpole_state& s) {
  using p = cartpole_params;
  return s.x < -p::x_threshold || s.x > p::x_threshold
    || s.theta < -p::theta_threshold || s.theta > p::theta_threshold;
}

cartpole::cartpole(std::uint64_t seed) : rng_(seed) {
  reset();
}

cartpole_obs cartpole::observe() const noexcept {
  return {static_cast<float>(state_.x), static_cast<float>(state_.x_dot),
          static_cast<float>(state_.theta),
          static_cast<float>(state_.theta_dot)};
}

cartpole_obs cartpole::reset() {
  std::uniform_real_distribution<double> init{-0.05, 0.05};
  state_.x = init(rng_);
  state_.x_dot = init(rng_);
  state_.theta = init(rng_);
  state_.theta_dot = init(rng_);
  steps_ = 0;
  return observe();
}

cartpole_step cartpole::step(int action) {
  state_ = cartpole_dynamics(state_, action);
  ++steps_;
  cartpole_step r;
  r.obs = observe();
  r.reward = 1;
  r.terminated = cartpole_terminated(state_);
  // TimeLimit truncates independently of termination (both may hold).
  r.truncated = steps_ >= cartpole_params::max_episode_steps;
  return r;
}

namespace {

// SplitMix64: decorrelates the seeds of neighbouring environments.
std::uint64_t mix_seed(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

} // namespace

vec_cartpole::vec_cartpole(std::size_t n, std::uint64_t seed)
  : returns_(n, 0.0), obs_(n * 4), final_obs_(n * 4), rewards_(n),
    terminated_(n), truncated_(n) {
  envs_.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    envs_.emplace_back(mix_seed(seed * 1000003 + i));
  reset();
}

const std::vector<float>& vec_cartpole::reset() {
  for (std::size_t i = 0; i < envs_.size(); ++i) {
    auto o = envs_[i].reset();
    std::copy(o.begin(), o.end(), obs_.begin() + 4 * i);
    returns_[i] = 0;
  }
  final_obs_ = obs_;
  return obs_;
}

void vec_cartpole::step(const std::vector<std::int64_t>& actions) {
  finished_returns_.clear();
  for (std::size_t i = 0; i < envs_.size(); ++i) {
    auto r = envs_[i].step(static_cast<int>(actions[i]));
    std::copy(r.obs.begin(), r.obs.end(), final_obs_.begin() + 4 * i);
    rewards_[i] = r.reward;
    terminated_[i] = r.terminated;
    truncated_[i] = r.truncated;
    returns_[i] += r.reward;
    if (r.terminated || r.truncated) {
      finished_returns_.push_back(returns_[i]);
      returns_[i] = 0;
      auto o = envs_[i].reset();
      std::copy(o.begin(), o.end(), obs_.begin() + 4 * i);
    } else {
      std::copy(r.obs.begin(), r.obs.end(), obs_.begin() + 4 * i);
    }
  }
}

} // namespace dqn
