#pragma once

// Gymnasium's Pendulum-v1 (classic_control/pendulum.py): swing a pendulum up
// and hold it with a bounded torque. Continuous actions, reward in
// [-16.27, 0], no terminal state, truncated at 200 steps.

#include "dice/env/env.hpp"

#include <cstdint>
#include <random>

namespace dice::envs {

/// The pendulum's state (gymnasium keeps it in float64).
struct pendulum_state {
  /// Angle (rad, 0 = upright), not normalized.
  double th = 0;
  /// Angular velocity (rad/s).
  double thdot = 0;
};

/// Constants of gymnasium's Pendulum-v1; `g` is its constructor argument.
struct pendulum_params {
  /// Gravity (m/s^2).
  double g = 10.0;
  /// Mass (kg).
  double m = 1.0;
  /// Length (m).
  double l = 1.0;
  /// Seconds per step.
  double dt = 0.05;
  /// Bound of the angular velocity (rad/s).
  double max_speed = 8.0;
  /// Bound of the torque (N m).
  double max_torque = 2.0;
};

/// Maps an angle into [-pi, pi) like gymnasium's angle_normalize (Python's
/// modulo, which takes the divisor's sign).
double angle_normalize(double x);

/// The cost of `u` in `s`: normalized angle^2 + 0.1 thdot^2 + 0.001 u^2;
/// the reward is its negative. `u` is clipped to the torque bound first.
double pendulum_cost(const pendulum_state& s, double u,
                     const pendulum_params& p);

/// One step with torque `u` (clipped): the velocity is updated and clipped
/// first, the angle moves with the new velocity (semi-implicit Euler).
pendulum_state pendulum_dynamics(const pendulum_state& s, double u,
                                 const pendulum_params& p);

/// Pendulum-v1: Box(-2, 2, (1,)) torque, observations [cos th, sin th,
/// thdot] in Box([-1 -1 -8], [1 1 8]).
class pendulum : public env {
 public:
  /// Seeds the generator; the state is zero until the first reset().
  explicit pendulum(std::uint64_t seed = 0, pendulum_params params = {});

  /// "Pendulum-v1".
  std::string name() const override;

  /// Box([-1. -1. -8.], [1. 1. 8.], (3,), float32).
  space observation_space() const override;

  /// Box(-max_torque, max_torque, (1,), float32).
  space action_space() const override;

  /// Draws th from uniform(-pi, pi), then thdot from uniform(-1, 1), from a
  /// std::mt19937_64 (reseeded if a seed is given).
  void reset(std::optional<std::uint64_t> seed, float* obs) override;

  /// Applies the torque a.values[0]; reward -pendulum_cost, never terminal.
  step_result step(const action_view& a, float* obs) override;

  /// 200.
  std::int64_t max_episode_steps() const override;

  /// The current state.
  const pendulum_state& state() const noexcept {
    return state_;
  }

  /// Overrides the state (tests).
  void set_state(const pendulum_state& s) noexcept {
    state_ = s;
  }

  /// The constants.
  const pendulum_params& params() const noexcept {
    return params_;
  }

  /// Writes [cos th, sin th, thdot] as float32 to `obs`.
  void observe(float* obs) const noexcept;

 private:
  std::mt19937_64 rng_;
  pendulum_params params_;
  pendulum_state state_;
};

} // namespace dice::envs
