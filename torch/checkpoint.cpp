#include "dice/torch/checkpoint.hpp"

#include "dice/core/errc.hpp"
#include "dice/security/auth.hpp"
#include "dice/torch/model.hpp"

#include <sys/stat.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace dice {

caf::error save_pytorch_checkpoint(const model_snapshot& x,
                                   const std::string& path) {
  if (auto err = validate(x))
    return err;
  std::vector<char> bytes;
  try {
    c10::Dict<std::string, at::Tensor> dict;
    for (auto& e : x.index) {
      // A view of the snapshot's bytes: pickle_save copies them once.
      auto t = torch::from_blob(
        const_cast<std::uint8_t*>(x.data.data() + e.offset), e.shape,
        torch::TensorOptions().dtype(to_torch(e.type)));
      dict.insert(e.name, t);
    }
    bytes = torch::pickle_save(dict);
  } catch (const std::exception& e) {
    return make_error(errc::storage_failed,
                      std::string{"cannot encode checkpoint: "} + e.what());
  }
  auto tmp = path + ".part";
  {
    std::ofstream out{tmp, std::ios::binary | std::ios::trunc};
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out)
      return make_error(errc::storage_failed, "cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return make_error(errc::storage_failed,
                      "cannot rename " + tmp + ": " + ec.message());
  return caf::none;
}

caf::expected<model_snapshot> load_pytorch_checkpoint(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return make_error(errc::storage_missing, path + " cannot be opened");
  // A checkpoint another user owns or could have changed is not loaded
  // (another local user's planted weights would become the model).
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return make_error(errc::storage_missing, path + " cannot be opened");
  if (auto err = refuse_foreign_file(st.st_uid, st.st_mode, path))
    return err;
  std::vector<char> bytes{std::istreambuf_iterator<char>{in},
                          std::istreambuf_iterator<char>{}};
  try {
    auto value = torch::pickle_load(bytes);
    if (!value.isGenericDict())
      return make_error(errc::malformed_input,
                        path + " does not hold a dict of tensors");
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    std::size_t total = 0;
    for (auto& kvp : value.toGenericDict()) {
      if (!kvp.key().isString() || !kvp.value().isTensor())
        return make_error(errc::malformed_input,
                          path
                            + ": every key must be a string and every "
                              "value a tensor");
      auto t = kvp.value().toTensor().to(torch::kCPU).contiguous();
      total += snapshot_builder::padded(t.nbytes());
      tensors.emplace_back(kvp.key().toStringRef(), std::move(t));
    }
    snapshot_builder b{total};
    for (auto& [name, t] : tensors) {
      auto type = from_torch(t.scalar_type());
      if (!type)
        return make_error(errc::malformed_input,
                          path + ": tensor '" + name
                            + "': " + render(type.error()));
      auto sizes = t.sizes();
      b.add(name, *type, {sizes.begin(), sizes.end()}, t.data_ptr(),
            t.nbytes());
    }
    return b.build(0, 0, 0, 0);
  } catch (const std::exception& e) {
    return make_error(errc::malformed_input,
                      path + ": cannot decode checkpoint: " + e.what());
  }
}

} // namespace dice
