#pragma once

// Gymnasium's Hopper-v4 (mujoco/hopper_v4.py) on dice's own MJCF copy of its
// hopper.xml: a one-legged planar robot (torso, thigh, leg, foot; 3 hinge
// motors) rewarded for moving forward (+x) and for staying upright.

#include "dice/env/env.hpp"
#include "dice/mujoco/model.hpp"

#include <cstdint>
#include <random>
#include <string>

namespace dice::envs {

/// Hopper-v4's constants (gymnasium's constructor defaults).
struct hopper_params {
  /// Weight of the forward velocity in the reward.
  double forward_reward_weight = 1.0;
  /// Weight of sum(a^2) in the control cost.
  double ctrl_cost_weight = 1e-3;
  /// Reward per step while healthy.
  double healthy_reward = 1.0;
  /// End the episode (terminated) when unhealthy; if false, an unhealthy
  /// state only loses the healthy reward.
  bool terminate_when_unhealthy = true;
  /// Bound of |qpos[2:]| and |qvel| for a healthy state.
  double healthy_state_range = 100.0;
  /// Lower bound of the torso height qpos[1] (no upper bound).
  double healthy_z_min = 0.7;
  /// Bound of |torso angle| qpos[2] (rad).
  double healthy_angle_range = 0.2;
  /// Half-width of the uniform noise added to qpos and qvel at reset.
  double reset_noise_scale = 5e-3;
  /// MuJoCo steps per env step.
  int frame_skip = 4;
  /// Bound of the velocities in the observation.
  double obs_velocity_clip = 10.0;
  /// Steps until a vector_env truncates.
  std::int64_t max_episode_steps = 1000;
};

/// The MJCF text of the hopper (gymnasium's hopper.xml in local coordinates).
const std::string& hopper_xml();

/// The hopper model, parsed once per process and shared.
const mujoco_model& hopper_model();

/// Hopper-v4: Box(-1, 1, (3,)) torques, observation qpos[1:] and clipped
/// qvel (11 floats) in Box(-inf, inf, (11,)); terminated when unhealthy,
/// truncated by a vector_env at 1000 steps.
class hopper : public env {
 public:
  /// Steps the built-in model (hopper_model()).
  explicit hopper(std::uint64_t seed = 0, hopper_params params = {});

  /// Steps `model`, which must have the hopper's 6 positions, 6 velocities
  /// and 3 actuators (std::invalid_argument otherwise).
  hopper(mujoco_model model, std::uint64_t seed, hopper_params params = {});

  /// Frees the mjData; the model lives on while other envs hold it.
  ~hopper() override;

  /// "Hopper-v4".
  std::string name() const override;

  /// Box(-inf, inf, (11,), float32).
  space observation_space() const override;

  /// The actuators' ctrlrange: Box(-1.0, 1.0, (3,), float32).
  space action_space() const override;

  /// Resets MuJoCo's state to the model's initial pose plus uniform noise on
  /// qpos, then on qvel, from a std::mt19937_64 (reseeded if a seed is
  /// given), runs mj_forward and writes the observation.
  void reset(std::optional<std::uint64_t> seed, float* obs) override;

  /// Sets ctrl to the action, runs frame_skip mj_steps; reward = forward
  /// velocity + healthy reward - control cost, terminated when unhealthy.
  step_result step(const action_view& a, float* obs) override;

  /// params().max_episode_steps (1000).
  std::int64_t max_episode_steps() const override;

  /// Whether the current state is healthy (gymnasium's is_healthy).
  bool healthy() const noexcept;

  /// Seconds per env step: the model's timestep times frame_skip (0.008).
  double dt() const noexcept;

  /// The model.
  const mujoco_model& model() const noexcept {
    return model_;
  }

  /// MuJoCo's state (qpos, qvel, ...), for tests and rendering.
  mjData_* data() const noexcept {
    return data_.get();
  }

  /// The constants.
  const hopper_params& params() const noexcept {
    return params_;
  }

  /// Writes qpos[1:] and clip(qvel, -10, 10) as float32 to `obs`.
  void observe(float* obs) const noexcept;

 private:
  mujoco_model model_;
  mujoco_data data_;
  hopper_params params_;
  std::mt19937_64 rng_;
};

} // namespace dice::envs
