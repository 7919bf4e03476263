#include "dice/envs/cartpole.hpp"

#include <cmath>
#include <limits>

namespace dice::envs {

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
  // nop
}

std::string cartpole::name() const {
  return "CartPole-v1";
}

space cartpole::observation_space() const {
  using p = cartpole_params;
  // Gymnasium bounds the velocities by float32's largest value, not inf.
  constexpr auto big = std::numeric_limits<float>::max();
  auto x = static_cast<float>(p::x_threshold * 2);
  auto theta = static_cast<float>(p::theta_threshold * 2);
  return space::box({-x, -big, -theta, -big}, {x, big, theta, big});
}

space cartpole::action_space() const {
  return space::discrete(2);
}

std::int64_t cartpole::max_episode_steps() const {
  return cartpole_params::max_episode_steps;
}

void cartpole::draw_state() {
  std::uniform_real_distribution<double> init{-0.05, 0.05};
  state_.x = init(rng_);
  state_.x_dot = init(rng_);
  state_.theta = init(rng_);
  state_.theta_dot = init(rng_);
}

void cartpole::reset(std::optional<std::uint64_t> seed, float* obs) {
  if (seed) {
    rng_.seed(*seed);
    draw_state(); // dropped; see the header
  }
  draw_state();
  observe(obs);
}

step_result cartpole::step(const action_view& a, float* obs) {
  state_ = cartpole_dynamics(state_, a.index == 1 ? 1 : 0);
  observe(obs);
  return {1.0f, cartpole_terminated(state_), false};
}

void cartpole::observe(float* obs) const noexcept {
  obs[0] = static_cast<float>(state_.x);
  obs[1] = static_cast<float>(state_.x_dot);
  obs[2] = static_cast<float>(state_.theta);
  obs[3] = static_cast<float>(state_.theta_dot);
}

} // namespace dice::envs
