#include "dice/mujoco/model.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"

#include <mujoco/mujoco.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <vector>

namespace dice::envs {

namespace {

struct model_deleter {
  void operator()(const mjModel* m) const noexcept {
    mj_deleteModel(const_cast<mjModel*>(m));
  }
};

// mj_loadXML leaves an empty message for some failures; say so rather than
// print "MuJoCo: ".
std::string mujoco_message(const char* err) {
  return err[0] != '\0' ? std::string{err} : std::string{"(no message)"};
}

} // namespace

void mujoco_data_deleter::operator()(mjData* d) const noexcept {
  mj_deleteData(d);
}

namespace {

// MuJoCo prints its warnings and appends them to MUJOCO_LOG.TXT in the
// working directory (a test's, a user's): dice's envs log them as every
// other line instead. A handler the program set first stays.
void log_mujoco_warning(const char* msg) {
  log::warning(0, std::string{"MuJoCo: "} + msg);
}

void route_mujoco_warnings() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (mju_user_warning == nullptr)
      mju_user_warning = log_mujoco_warning;
  });
}

} // namespace

caf::expected<mujoco_model> load_mujoco_model(const std::string& path) {
  route_mujoco_warnings();
  char err[1000] = {0};
  auto* m = mj_loadXML(path.c_str(), nullptr, err, sizeof(err));
  if (m == nullptr)
    return make_error(errc::invalid_config,
                      "cannot load MuJoCo model " + path + ": "
                        + mujoco_message(err));
  return mujoco_model{m, model_deleter{}};
}

caf::expected<mujoco_model> parse_mujoco_model(const std::string& xml,
                                               const std::string& name) {
  route_mujoco_warnings();
  // MuJoCo 2.2 reads MJCF from files only: a virtual file system holds the
  // text under a file name. mjVFS is ~2 MB (2000 names of 1000 chars): heap.
  auto vfs = std::make_unique<mjVFS>();
  mj_defaultVFS(vfs.get());
  // The VFS matches names without their folder; a plain name keeps it simple.
  const char* file = "model.xml";
  if (mj_makeEmptyFileVFS(vfs.get(), file, static_cast<int>(xml.size())) != 0)
    return make_error(errc::invalid_config,
                      "cannot load MuJoCo model " + name
                        + ": no room in MuJoCo's virtual file system");
  auto i = mj_findFileVFS(vfs.get(), file);
  std::memcpy(vfs->filedata[i], xml.data(), xml.size());
  char err[1000] = {0};
  auto* m = mj_loadXML(file, vfs.get(), err, sizeof(err));
  mj_deleteVFS(vfs.get());
  if (m == nullptr)
    return make_error(errc::invalid_config,
                      "cannot load MuJoCo model " + name + ": "
                        + mujoco_message(err));
  return mujoco_model{m, model_deleter{}};
}

mujoco_data make_mujoco_data(const mujoco_model& model) {
  auto* d = mj_makeData(model.get());
  if (d == nullptr)
    throw std::bad_alloc{};
  return mujoco_data{d};
}

std::string mujoco_version() {
  return mj_versionString();
}

space actuator_space(const mjModel_& m) {
  std::vector<float> low(static_cast<std::size_t>(m.nu));
  std::vector<float> high(low.size());
  for (std::size_t i = 0; i < low.size(); ++i) {
    low[i] = static_cast<float>(m.actuator_ctrlrange[2 * i]);
    high[i] = static_cast<float>(m.actuator_ctrlrange[2 * i + 1]);
  }
  auto same = [](const std::vector<float>& xs) {
    return std::all_of(xs.begin(), xs.end(), [&](float x) {
      return x == xs.front();
    });
  };
  if (!low.empty() && same(low) && same(high))
    return space::box({m.nu}, low[0], high[0]);
  return space::box(std::move(low), std::move(high));
}

void reset_with_noise(const mjModel_& m, mjData_& d, double scale,
                      std::mt19937_64& rng) {
  mj_resetData(&m, &d); // qpos = qpos0, qvel = 0, ctrl = 0
  std::uniform_real_distribution<double> noise{-scale, scale};
  for (int i = 0; i < m.nq; ++i)
    d.qpos[i] += noise(rng);
  for (int i = 0; i < m.nv; ++i)
    d.qvel[i] += noise(rng);
}

double set_controls(const mjModel_& m, mjData_& d, const action_view& a,
                    const std::string& env) {
  if (a.values == nullptr || a.size != static_cast<std::size_t>(m.nu))
    throw std::invalid_argument(env + ": needs " + std::to_string(m.nu)
                                + " action values, got "
                                + std::to_string(a.size));
  double sq = 0;
  for (int i = 0; i < m.nu; ++i) {
    auto u = static_cast<double>(a.values[i]);
    if (!std::isfinite(u))
      throw std::invalid_argument(env + ": action[" + std::to_string(i)
                                  + "] is not finite");
    d.ctrl[i] = u; // MuJoCo clamps it to ctrlrange (ctrllimited)
    sq += u * u;
  }
  return sq;
}

void step_checked(const mjModel_& m, mjData_& d, int frame_skip,
                  const std::string& env) {
  for (int i = 0; i < frame_skip; ++i)
    mj_step(&m, &d);
  // MuJoCo drops what does not fit and only counts it: a step that ran
  // short of contact or constraint rows is not the model's physics.
  auto full = [&](int w) {
    return d.warning[w].number > 0;
  };
  if (full(mjWARN_CONTACTFULL) || full(mjWARN_CNSTRFULL))
    throw std::runtime_error(
      env + ": more contacts or constraints than the model's size allows ("
      + std::to_string(d.ncon) + " contacts of nconmax "
      + std::to_string(m.nconmax) + ", " + std::to_string(d.nefc)
      + " constraint rows of njmax " + std::to_string(m.njmax)
      + "); raise <size njmax nconmax> in its MJCF");
}

} // namespace dice::envs
