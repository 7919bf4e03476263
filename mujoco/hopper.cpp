#include "dice/mujoco/hopper.hpp"

#include "dice/core/errc.hpp"

#include <mujoco/mujoco.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace dice::envs {

namespace {

// Gymnasium's gymnasium/envs/mujoco/assets/hopper.xml (used by Hopper-v2 to
// v4), rewritten from its global coordinates (compiler coordinate="global",
// which MuJoCo 2.3.3 dropped) into local ones; the physics are the same:
// - capsules torso 1.45-1.05 m (r 0.05), thigh 1.05-0.6 (r 0.05), leg
//   0.6-0.1 (r 0.04), foot from x -0.13 to 0.26 at 0.1 (r 0.06); masses and
//   inertias from the geoms at MuJoCo's default density 1000 kg/m^3
//   (inertiafromgeom). MuJoCo 2.2.2 makes them 3.665, 4.058, 2.781 and
//   5.316 kg (exact capsule volumes); the masses quoted for gymnasium's
//   Hopper (3.534, 3.927, 2.714, 5.089 kg) are those of cylinders of length
//   L + r: a MuJoCo that computes capsules so has a ~4 % lighter hopper (not
//   checked which versions do);
// - root: slide x, slide z (ref 1.25: qpos[1] is the torso's height), hinge
//   y, unlimited and undamped; hinges thigh and leg -150..0 deg, foot
//   -45..45 deg, armature 1, damping 1;
// - contacts condim 1, margin 0.001, solimp .8 .8 .01, solref .02 1;
//   friction 0.9, foot 2.0; the floor condim 3;
// - motors with gear 200 and ctrlrange -1..1;
// - RK4 with timestep 0.002 s; Hopper-v4 adds frame_skip 4 (dt 0.008 s).
// Materials, lights and cameras are left out: they do not touch the physics.
// <size njmax nconmax> is dice's: MuJoCo 2.2.2 sizes the stack from njmax
// (500 by default: 1.28M numbers, 10 MB that mj_resetData clears, 283 us a
// reset against 9 us with 100); the hopper needs at most 8 contacts of 4
// rows and 3 limits, and step_checked refuses a step that ran out.
const char* const hopper_mjcf = R"(<mujoco model="hopper">
  <compiler angle="degree" inertiafromgeom="true"/>
  <default>
    <joint armature="1" damping="1" limited="true"/>
    <geom conaffinity="1" condim="1" contype="1" margin="0.001"
          solimp=".8 .8 .01" solref=".02 1"/>
    <motor ctrllimited="true" ctrlrange="-.4 .4"/>
  </default>
  <size njmax="100" nconmax="20"/>
  <option integrator="RK4" timestep="0.002"/>
  <worldbody>
    <geom conaffinity="1" condim="3" name="floor" pos="0 0 0"
          size="20 20 .125" type="plane"/>
    <body name="torso" pos="0 0 1.25">
      <joint armature="0" axis="1 0 0" damping="0" limited="false"
             name="rootx" pos="0 0 0" stiffness="0" type="slide"/>
      <joint armature="0" axis="0 0 1" damping="0" limited="false"
             name="rootz" pos="0 0 0" ref="1.25" stiffness="0" type="slide"/>
      <joint armature="0" axis="0 1 0" damping="0" limited="false"
             name="rooty" pos="0 0 0" stiffness="0" type="hinge"/>
      <geom friction="0.9" fromto="0 0 0.2 0 0 -0.2" name="torso_geom"
            size="0.05" type="capsule"/>
      <body name="thigh" pos="0 0 -0.2">
        <joint axis="0 -1 0" name="thigh_joint" pos="0 0 0" range="-150 0"
               type="hinge"/>
        <geom friction="0.9" fromto="0 0 0 0 0 -0.45" name="thigh_geom"
              size="0.05" type="capsule"/>
        <body name="leg" pos="0 0 -0.45">
          <joint axis="0 -1 0" name="leg_joint" pos="0 0 0" range="-150 0"
                 type="hinge"/>
          <geom friction="0.9" fromto="0 0 0 0 0 -0.5" name="leg_geom"
                size="0.04" type="capsule"/>
          <body name="foot" pos="0 0 -0.5">
            <joint axis="0 -1 0" name="foot_joint" pos="0 0 0"
                   range="-45 45" type="hinge"/>
            <geom friction="2.0" fromto="-0.13 0 0 0.26 0 0"
                  name="foot_geom" size="0.06" type="capsule"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor ctrllimited="true" ctrlrange="-1.0 1.0" gear="200.0"
           joint="thigh_joint"/>
    <motor ctrllimited="true" ctrlrange="-1.0 1.0" gear="200.0"
           joint="leg_joint"/>
    <motor ctrllimited="true" ctrlrange="-1.0 1.0" gear="200.0"
           joint="foot_joint"/>
  </actuator>
</mujoco>
)";

constexpr int hopper_nq = 6;
constexpr int hopper_nv = 6;
constexpr int hopper_nu = 3;

mujoco_model checked_hopper(mujoco_model m) {
  if (!m)
    throw std::invalid_argument("hopper: no model");
  if (m->nq != hopper_nq || m->nv != hopper_nv || m->nu != hopper_nu)
    throw std::invalid_argument(
      "hopper: the model needs 6 positions, 6 velocities and 3 actuators, has "
      + std::to_string(m->nq) + ", " + std::to_string(m->nv) + " and "
      + std::to_string(m->nu));
  return m;
}

} // namespace

const std::string& hopper_xml() {
  static const std::string xml{hopper_mjcf};
  return xml;
}

const mujoco_model& hopper_model() {
  // Parsed once (a static's initialization is thread-safe); the text is
  // ours, so a failure is a bug in this file.
  static const mujoco_model model = [] {
    auto m = parse_mujoco_model(hopper_xml(), "hopper.xml (built in)");
    if (!m)
      throw std::logic_error(render(m.error()));
    return *m;
  }();
  return model;
}

hopper::hopper(std::uint64_t seed, hopper_params params)
  : hopper(hopper_model(), seed, params) {
  // nop
}

hopper::hopper(mujoco_model model, std::uint64_t seed, hopper_params params)
  : model_(checked_hopper(std::move(model))), data_(make_mujoco_data(model_)),
    params_(params), rng_(seed) {
  mj_forward(model_.get(), data_.get());
}

hopper::~hopper() = default;

std::string hopper::name() const {
  return "Hopper-v4";
}

space hopper::observation_space() const {
  auto inf = std::numeric_limits<float>::infinity();
  return space::box({hopper_nq - 1 + hopper_nv}, -inf, inf);
}

space hopper::action_space() const {
  return actuator_space(*model_);
}

std::int64_t hopper::max_episode_steps() const {
  return params_.max_episode_steps;
}

double hopper::dt() const noexcept {
  return model_->opt.timestep * params_.frame_skip;
}

void hopper::reset(std::optional<std::uint64_t> seed, float* obs) {
  if (seed)
    rng_.seed(*seed);
  reset_with_noise(*model_, *data_, params_.reset_noise_scale, rng_);
  mj_forward(model_.get(), data_.get());
  observe(obs);
}

step_result hopper::step(const action_view& a, float* obs) {
  auto* m = model_.get();
  auto* d = data_.get();
  auto ctrl_cost = params_.ctrl_cost_weight * set_controls(*m, *d, a, "hopper");
  auto x_before = d->qpos[0];
  step_checked(*m, *d, params_.frame_skip, "Hopper-v4");
  auto x_velocity = (d->qpos[0] - x_before) / dt();
  auto is_healthy = healthy();
  // As Hopper-v4: with termination the healthy reward is paid on every
  // step, the terminating one included.
  auto healthy_reward = is_healthy || params_.terminate_when_unhealthy
    ? params_.healthy_reward
    : 0.0;
  auto terminated = params_.terminate_when_unhealthy && !is_healthy;
  auto reward = params_.forward_reward_weight * x_velocity + healthy_reward
    - ctrl_cost;
  observe(obs);
  return {static_cast<float>(reward), terminated, false};
}

bool hopper::healthy() const noexcept {
  const auto* d = data_.get();
  auto z = d->qpos[1];
  auto angle = d->qpos[2];
  auto r = params_.healthy_state_range;
  // state_vector()[2:]: qpos[2:] then all of qvel, strictly inside (-r, r).
  for (int i = 2; i < hopper_nq; ++i)
    if (!(-r < d->qpos[i] && d->qpos[i] < r))
      return false;
  for (int i = 0; i < hopper_nv; ++i)
    if (!(-r < d->qvel[i] && d->qvel[i] < r))
      return false;
  return params_.healthy_z_min < z && -params_.healthy_angle_range < angle
    && angle < params_.healthy_angle_range;
}

void hopper::observe(float* obs) const noexcept {
  const auto* d = data_.get();
  for (int i = 1; i < hopper_nq; ++i)
    *obs++ = static_cast<float>(d->qpos[i]);
  auto c = params_.obs_velocity_clip;
  for (int i = 0; i < hopper_nv; ++i)
    *obs++ = static_cast<float>(std::clamp(d->qvel[i], -c, c));
}

} // namespace dice::envs
