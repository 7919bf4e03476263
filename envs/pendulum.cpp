#include "dice/envs/pendulum.hpp"

#include <algorithm>
#include <cmath>

namespace dice::envs {

namespace {

constexpr double pi = 3.141592653589793;

} // namespace

double angle_normalize(double x) {
  // ((x + pi) % (2 pi)) - pi with Python's %, whose result is never
  // negative for a positive divisor (fmod's takes the dividend's sign).
  auto r = std::fmod(x + pi, 2 * pi);
  if (r < 0)
    r += 2 * pi;
  return r - pi;
}

double pendulum_cost(const pendulum_state& s, double u,
                     const pendulum_params& p) {
  u = std::clamp(u, -p.max_torque, p.max_torque);
  auto th = angle_normalize(s.th);
  return th * th + 0.1 * s.thdot * s.thdot + 0.001 * (u * u);
}

pendulum_state pendulum_dynamics(const pendulum_state& s, double u,
                                 const pendulum_params& p) {
  u = std::clamp(u, -p.max_torque, p.max_torque);
  auto thdot = s.thdot
    + (3 * p.g / (2 * p.l) * std::sin(s.th) + 3.0 / (p.m * p.l * p.l) * u)
      * p.dt;
  thdot = std::clamp(thdot, -p.max_speed, p.max_speed);
  return {s.th + thdot * p.dt, thdot};
}

pendulum::pendulum(std::uint64_t seed, pendulum_params params)
  : rng_(seed), params_(params) {
  // nop
}

std::string pendulum::name() const {
  return "Pendulum-v1";
}

space pendulum::observation_space() const {
  auto v = static_cast<float>(params_.max_speed);
  return space::box({-1.0f, -1.0f, -v}, {1.0f, 1.0f, v});
}

space pendulum::action_space() const {
  auto u = static_cast<float>(params_.max_torque);
  return space::box({1}, -u, u);
}

std::int64_t pendulum::max_episode_steps() const {
  return 200;
}

void pendulum::reset(std::optional<std::uint64_t> seed, float* obs) {
  if (seed)
    rng_.seed(*seed);
  std::uniform_real_distribution<double> th{-pi, pi};
  std::uniform_real_distribution<double> thdot{-1.0, 1.0};
  state_.th = th(rng_);
  state_.thdot = thdot(rng_);
  observe(obs);
}

step_result pendulum::step(const action_view& a, float* obs) {
  // The torque is float32, as in gymnasium's action array.
  auto u = static_cast<double>(a.size > 0 ? a.values[0] : 0.0f);
  auto cost = pendulum_cost(state_, u, params_);
  state_ = pendulum_dynamics(state_, u, params_);
  observe(obs);
  return {static_cast<float>(-cost), false, false};
}

void pendulum::observe(float* obs) const noexcept {
  obs[0] = static_cast<float>(std::cos(state_.th));
  obs[1] = static_cast<float>(std::sin(state_.th));
  obs[2] = static_cast<float>(state_.thdot);
}

} // namespace dice::envs
