#pragma once

// Gymnasium's CartPole-v1 (classic_control/cartpole.py): push a cart left or
// right to keep a pole upright. Reward 1 per step, terminal when the pole
// passes 12 degrees or the cart leaves [-2.4, 2.4], truncated at 500 steps.

#include "dice/env/env.hpp"

#include <cstdint>
#include <random>

namespace dice::envs {

/// The physical state of a cart-pole (gymnasium keeps it in float64).
struct cartpole_state {
  /// Cart position (m).
  double x = 0;
  /// Cart velocity (m/s).
  double x_dot = 0;
  /// Pole angle (rad, 0 = upright).
  double theta = 0;
  /// Pole angular velocity (rad/s).
  double theta_dot = 0;
};

/// Constants of gymnasium's CartPole-v1.
struct cartpole_params {
  /// Gravity (m/s^2).
  static constexpr double gravity = 9.8;
  /// Mass of the cart (kg).
  static constexpr double masscart = 1.0;
  /// Mass of the pole (kg).
  static constexpr double masspole = 0.1;
  /// Half the pole's length (m).
  static constexpr double length = 0.5;
  /// Magnitude of the push (N).
  static constexpr double force_mag = 10.0;
  /// Seconds between state updates.
  static constexpr double tau = 0.02;
  /// Pole angle at which the episode terminates (12 degrees, in rad).
  static constexpr double theta_threshold = 12 * 2 * 3.141592653589793 / 360;
  /// Cart position at which the episode terminates (m).
  static constexpr double x_threshold = 2.4;
  /// Steps after which the episode is truncated (the TimeLimit wrapper).
  static constexpr int max_episode_steps = 500;
};

/// Applies the Euler update for `action` (0: push left, 1: push right).
cartpole_state cartpole_dynamics(const cartpole_state& s, int action);

/// True if `s` is outside the allowed region.
bool cartpole_terminated(const cartpole_state& s);

/// CartPole-v1: Discrete(2) actions, 4 observations (x, x_dot, theta,
/// theta_dot as float32).
class cartpole : public env {
 public:
  /// Seeds the generator; the state is zero until the first reset().
  explicit cartpole(std::uint64_t seed = 0);

  /// "CartPole-v1".
  std::string name() const override;

  /// gymnasium's: high = [4.8, float32 max, 24 degrees, float32 max].
  space observation_space() const override;

  /// Discrete(2).
  space action_space() const override;

  /// Draws each state variable from uniform(-0.05, 0.05), in state order. A
  /// seeded reset reseeds std::mt19937_64 and drops the first such draw:
  /// dice's earlier CartPole (examples/dqn_cartpole) drew one state when it
  /// was built and another when its vector was reset, and seeded runs stay
  /// bit-identical to it that way.
  void reset(std::optional<std::uint64_t> seed, float* obs) override;

  /// Pushes (index 1: right, else left); reward 1, also on the last step.
  step_result step(const action_view& a, float* obs) override;

  /// 500.
  std::int64_t max_episode_steps() const override;

  /// The current state.
  const cartpole_state& state() const noexcept {
    return state_;
  }

  /// Overrides the state (tests).
  void set_state(const cartpole_state& s) noexcept {
    state_ = s;
  }

  /// Writes the state as float32 to `obs` (4 values).
  void observe(float* obs) const noexcept;

 private:
  void draw_state();

  std::mt19937_64 rng_;
  cartpole_state state_;
};

} // namespace dice::envs
