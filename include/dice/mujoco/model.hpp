#pragma once

// Loading MuJoCo models (MJCF) for dice's environments. A parsed mjModel is
// read-only while stepping, so envs share one through a shared_ptr and each
// owns its mjData. The header names MuJoCo's structs without including
// <mujoco/mujoco.h>: users of the envs need not see MuJoCo's API.

#include "dice/env/env.hpp"
#include "dice/env/space.hpp"

#include "caf/expected.hpp"

#include <memory>
#include <random>
#include <string>

struct mjModel_;
struct mjData_;

namespace dice::envs {

/// A parsed MuJoCo model, shared by the envs that step it.
using mujoco_model = std::shared_ptr<const mjModel_>;

/// Deletes an mjData with mj_deleteData.
struct mujoco_data_deleter {
  /// mj_deleteData(d).
  void operator()(mjData_* d) const noexcept;
};

/// One env's simulation state.
using mujoco_data = std::unique_ptr<mjData_, mujoco_data_deleter>;

/// Parses the MJCF file at `path`. Errors (invalid_config) name the file and
/// carry mj_loadXML's message, for a missing file as for a malformed one.
caf::expected<mujoco_model> load_mujoco_model(const std::string& path);

/// Parses MJCF held in memory; `name` stands for the file in errors.
caf::expected<mujoco_model> parse_mujoco_model(const std::string& xml,
                                               const std::string& name);

/// A fresh mjData for `model` (mj_makeData); throws std::bad_alloc if MuJoCo
/// cannot allocate it.
mujoco_data make_mujoco_data(const mujoco_model& model);

/// The action space of `m`'s actuators: their ctrlrange as a Box, printed
/// with one bound (gymnasium's "Box(-1.0, 1.0, (3,), float32)") when all
/// actuators share it.
space actuator_space(const mjModel_& m);

/// mj_resetData, then uniform(-scale, scale) noise added to all of qpos,
/// then all of qvel, drawn from `rng` in that order (as gymnasium's MuJoCo
/// envs draw it). mj_forward is the caller's: it may fix qpos first.
void reset_with_noise(const mjModel_& m, mjData_& d, double scale,
                      std::mt19937_64& rng);

/// Writes the action `a` to d.ctrl (MuJoCo clamps it to ctrlrange) and
/// returns the sum of its squares; throws std::invalid_argument, naming
/// `env`, for another number of values than `m`'s actuators or a value that
/// is not finite (vector_env turns it into an error value).
double set_controls(const mjModel_& m, mjData_& d, const action_view& a,
                    const std::string& env);

/// Runs `frame_skip` mj_steps; throws std::runtime_error, naming `env`, if
/// MuJoCo ran out of contact or constraint rows (it drops them and only
/// counts a warning): the step would not be the model's physics.
void step_checked(const mjModel_& m, mjData_& d, int frame_skip,
                  const std::string& env);

/// MuJoCo's version string, e.g. "2.2.2".
std::string mujoco_version();

} // namespace dice::envs
