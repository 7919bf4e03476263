#pragma once

// Keep a humanoid standing: a task of dice's own on the humanoid that
// MuJoCo's samples ship (libmujoco-samples: DeepMind Control Suite's 21
// actuator humanoid). The reward rises linearly with the torso's height from
// the fall line to standing height, minus a small control cost; the episode
// terminates when the torso falls below the fall line.

#include "dice/env/env.hpp"
#include "dice/mujoco/model.hpp"

#include <cstdint>
#include <random>
#include <string>

namespace dice::envs {

/// Where libmujoco-samples installs the humanoid.
inline constexpr const char* humanoid_model_path = "/usr/share/mujoco/model/"
                                                   "humanoid/humanoid.xml";

/// The humanoid at humanoid_model_path, parsed once per process and shared;
/// a missing or malformed file is an error naming it (load_mujoco_model),
/// returned again on every call.
caf::expected<mujoco_model> humanoid_model();

/// The task's constants.
struct humanoid_stand_params {
  /// Torso height (m) below which the humanoid has fallen: terminated.
  double fall_z = 0.8;
  /// Torso height (m) that earns the full reward of 1 per step.
  double stand_z = 1.4;
  /// Weight of mean(a^2) in the control cost.
  double ctrl_cost_weight = 0.1;
  /// Half-width of the uniform noise added to qpos and qvel at reset
  /// (gymnasium's Humanoid-v4 uses 1e-2).
  double reset_noise_scale = 1e-2;
  /// MuJoCo steps per env step: the Control Suite's humanoid acts every
  /// 0.025 s on a 0.005 s timestep.
  int frame_skip = 5;
  /// Steps until a vector_env truncates.
  std::int64_t max_episode_steps = 1000;
};

/// The humanoid stand task: Box(-1, 1, (nu,)) actions from the actuators'
/// ctrlrange, observation qpos[2:] (all but the torso's x and y) and qvel in
/// Box(-inf, inf); reward clamp((z - fall_z) / (stand_z - fall_z), 0, 1) -
/// ctrl_cost_weight * mean(a^2).
class humanoid_stand : public env {
 public:
  /// Steps humanoid_model(); throws std::runtime_error with its error when
  /// the shipped model cannot be loaded (vector_env reports it as the
  /// env's error).
  explicit humanoid_stand(std::uint64_t seed = 0,
                          humanoid_stand_params params = {});

  /// Steps `model`, which must start with a free joint (the torso's) and
  /// have actuators (std::invalid_argument otherwise).
  humanoid_stand(mujoco_model model, std::uint64_t seed,
                 humanoid_stand_params params = {});

  /// Frees the mjData.
  ~humanoid_stand() override;

  /// "HumanoidStand-dice".
  std::string name() const override;

  /// Box(-inf, inf, (nq - 2 + nv,), float32): (53,) for the shipped model.
  space observation_space() const override;

  /// The actuators' ctrlrange: Box(-1.0, 1.0, (21,), float32).
  space action_space() const override;

  /// The model's initial pose plus uniform noise on qpos (then qvel), from a
  /// std::mt19937_64 reseeded if a seed is given; the free joint's
  /// quaternion is normalized again.
  void reset(std::optional<std::uint64_t> seed, float* obs) override;

  /// Sets ctrl, runs frame_skip mj_steps, rewards the torso's height.
  step_result step(const action_view& a, float* obs) override;

  /// params().max_episode_steps (1000).
  std::int64_t max_episode_steps() const override;

  /// The torso's height qpos[2].
  double torso_height() const noexcept;

  /// MuJoCo's state, for tests.
  mjData_* data() const noexcept {
    return data_.get();
  }

  /// The model.
  const mujoco_model& model() const noexcept {
    return model_;
  }

 private:
  void observe(float* obs) const noexcept;

  mujoco_model model_;
  mujoco_data data_;
  humanoid_stand_params params_;
  std::mt19937_64 rng_;
  int nu_;
};

} // namespace dice::envs
