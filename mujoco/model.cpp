#include "dice/mujoco/model.hpp"

#include "dice/core/errc.hpp"

#include <mujoco/mujoco.h>

#include <cstring>
#include <new>

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

caf::expected<mujoco_model> load_mujoco_model(const std::string& path) {
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

} // namespace dice::envs
