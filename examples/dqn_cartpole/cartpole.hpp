#pragma once

// CartPole-v1 with Gymnasium's rules, in plain C++ (no torch): one
// environment and a vectorized form that steps N of them with auto-reset.

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace dqn {

/// The physical state of a cart-pole (Gymnasium keeps it in float64).
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

/// Constants of Gymnasium's CartPole-v1.
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
  /// Steps after which the episode is truncated (TimeLimit wrapper).
  static constexpr int max_episode_steps = 500;
};

/// Observation as the agent sees it: the state as float32.
using cartpole_obs = std::array<float, 4>;

/// What one step returns.
struct cartpole_step {
  /// Observation after the step.
  cartpole_obs obs{};
  /// Always 1, also on the terminating step (Gymnasium).
  float reward = 1;
  /// The pole fell or the cart left the track.
  bool terminated = false;
  /// The episode reached max_episode_steps.
  bool truncated = false;
};

/// Applies the Euler update for `action` (0: push left, 1: push right).
cartpole_state cartpole_dynamics(const cartpole_state& s, int action);

/// True if `s` is outside the allowed region.
bool cartpole_terminated(const cartpole_state& s);

/// One CartPole-v1 environment (with the 500-step time limit).
class cartpole {
 public:
  /// Seeds the environment's own generator.
  explicit cartpole(std::uint64_t seed = 0);

  /// Starts an episode from uniform(-0.05, 0.05) in each state variable.
  cartpole_obs reset();

  /// Applies `action` (0 or 1).
  cartpole_step step(int action);

  /// The current state.
  const cartpole_state& state() const noexcept {
    return state_;
  }

  /// Overrides the state (tests); the step counter is left as is.
  void set_state(const cartpole_state& s) noexcept {
    state_ = s;
  }

  /// Steps taken in the current episode.
  int elapsed_steps() const noexcept {
    return steps_;
  }

  /// The state as an observation.
  cartpole_obs observe() const noexcept;

 private:
  std::mt19937_64 rng_;
  cartpole_state state_;
  int steps_ = 0;
};

/// N CartPoles stepped together; a finished environment resets at once (its
/// last observation is kept in `final_obs`), as Gymnasium's vector envs do.
class vec_cartpole {
 public:
  /// Builds `n` environments; environment i is seeded from `seed` and i.
  vec_cartpole(std::size_t n, std::uint64_t seed);

  /// Resets every environment; returns the observations [n * 4].
  const std::vector<float>& reset();

  /// Steps environment i with actions[i]; afterwards obs() holds the next
  /// observations (of the new episode where one ended).
  void step(const std::vector<std::int64_t>& actions);

  /// Number of environments.
  std::size_t size() const noexcept {
    return envs_.size();
  }

  /// Current observations [n * 4], row-major.
  const std::vector<float>& obs() const noexcept {
    return obs_;
  }

  /// Last observation of each environment before an auto-reset [n * 4];
  /// equals obs() for environments that did not finish.
  const std::vector<float>& final_obs() const noexcept {
    return final_obs_;
  }

  /// Rewards of the last step.
  const std::vector<float>& rewards() const noexcept {
    return rewards_;
  }

  /// Terminated flags of the last step.
  const std::vector<std::uint8_t>& terminated() const noexcept {
    return terminated_;
  }

  /// Truncated flags of the last step.
  const std::vector<std::uint8_t>& truncated() const noexcept {
    return truncated_;
  }

  /// Returns of the episodes that ended in the last step.
  const std::vector<double>& finished_returns() const noexcept {
    return finished_returns_;
  }

 private:
  std::vector<cartpole> envs_;
  std::vector<double> returns_;
  std::vector<float> obs_;
  std::vector<float> final_obs_;
  std::vector<float> rewards_;
  std::vector<std::uint8_t> terminated_;
  std::vector<std::uint8_t> truncated_;
  std::vector<double> finished_returns_;
};

} // namespace dqn
