#include "dice/mujoco/humanoid_stand.hpp"

#include "dice/core/errc.hpp"

#include <mujoco/mujoco.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace dice::envs {

namespace {

mujoco_model checked_humanoid(mujoco_model m) {
  if (!m)
    throw std::invalid_argument("humanoid_stand: no model");
  if (m->njnt < 1 || m->jnt_type[0] != mjJNT_FREE || m->nu < 1)
    throw std::invalid_argument(
      "humanoid_stand: the model needs a free root joint and actuators");
  return m;
}

mujoco_model loaded_humanoid() {
  auto m = humanoid_model();
  if (!m)
    throw std::runtime_error(render(m.error()));
  return *m;
}

} // namespace

caf::expected<mujoco_model> humanoid_model() {
  // Loaded once (a static's initialization is thread-safe), error included:
  // the file does not change while the process runs.
  static const caf::expected<mujoco_model> model = load_mujoco_model(
    humanoid_model_path);
  return model;
}

humanoid_stand::humanoid_stand(std::uint64_t seed, humanoid_stand_params params)
  : humanoid_stand(loaded_humanoid(), seed, params) {
  // nop
}

humanoid_stand::humanoid_stand(mujoco_model model, std::uint64_t seed,
                               humanoid_stand_params params)
  : model_(checked_humanoid(std::move(model))), data_(make_mujoco_data(model_)),
    params_(params), rng_(seed), nu_(model_->nu) {
  mj_forward(model_.get(), data_.get());
}

humanoid_stand::~humanoid_stand() = default;

std::string humanoid_stand::name() const {
  return "HumanoidStand-dice";
}

space humanoid_stand::observation_space() const {
  auto inf = std::numeric_limits<float>::infinity();
  return space::box({model_->nq - 2 + model_->nv}, -inf, inf);
}

space humanoid_stand::action_space() const {
  return actuator_space(*model_);
}

std::int64_t humanoid_stand::max_episode_steps() const {
  return params_.max_episode_steps;
}

double humanoid_stand::torso_height() const noexcept {
  return data_->qpos[2];
}

void humanoid_stand::reset(std::optional<std::uint64_t> seed, float* obs) {
  if (seed)
    rng_.seed(*seed);
  reset_with_noise(*model_, *data_, params_.reset_noise_scale, rng_);
  // The free joint's orientation is the unit quaternion qpos[3..6].
  mju_normalize4(data_->qpos + 3);
  mj_forward(model_.get(), data_.get());
  observe(obs);
}

step_result humanoid_stand::step(const action_view& a, float* obs) {
  auto* m = model_.get();
  auto* d = data_.get();
  auto sq = set_controls(*m, *d, a, "humanoid_stand");
  step_checked(*m, *d, params_.frame_skip, "humanoid_stand");
  auto z = torso_height();
  auto up = std::clamp(
    (z - params_.fall_z) / (params_.stand_z - params_.fall_z), 0.0, 1.0);
  auto reward = up - params_.ctrl_cost_weight * sq / nu_;
  observe(obs);
  return {static_cast<float>(reward), z < params_.fall_z, false};
}

void humanoid_stand::observe(float* obs) const noexcept {
  const auto* d = data_.get();
  for (int i = 2; i < model_->nq; ++i)
    *obs++ = static_cast<float>(d->qpos[i]);
  for (int i = 0; i < model_->nv; ++i)
    *obs++ = static_cast<float>(d->qvel[i]);
}

} // namespace dice::envs
