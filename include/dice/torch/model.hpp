#pragma once

// LibTorch side of dice: only programs that own torch models include this.

#include "dice/core/model.hpp"
#include "dice/messages/model_snapshot.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <torch/nn/module.h>

#include <memory>
#include <mutex>
#include <string>

namespace dice {

/// Maps a LibTorch scalar type to dice's dtype; unsupported types (complex,
/// quantized) give `errc::model_mismatch`.
caf::expected<dtype> from_torch(c10::ScalarType x);

/// Maps dice's dtype to a LibTorch scalar type.
c10::ScalarType to_torch(dtype x);

/// Copies every parameter and buffer of `m` (state_dict order, moved to the
/// CPU) into one flat buffer; one pass over the bytes.
caf::expected<model_snapshot> to_snapshot(const torch::nn::Module& m);

/// Loads `x` into `m`. Every name, shape and dtype is checked first: on any
/// mismatch nothing is written and `errc::model_mismatch` says what differs.
caf::error load_snapshot(torch::nn::Module& m, const model_snapshot& x);

/// Writes `m`'s parameters and buffers to `path` as a checkpoint PyTorch's
/// `torch.load` reads (a dict of tensors), via a temporary file and a rename.
caf::error save_module(const torch::nn::Module& m, const std::string& path);

/// Loads a checkpoint of `m`'s layout (save_module's, or a state_dict that
/// `torch.save` wrote) into `m`: a missing file is errc::storage_missing, a
/// corrupt one errc::malformed_input, another layout errc::model_mismatch,
/// and then `m` is unchanged.
caf::error load_module(torch::nn::Module& m, const std::string& path);

/// A model port for a LibTorch module. Training code that runs outside the
/// role actor (another thread) holds `lock()` during an optimizer step so
/// that a snapshot is never torn.
class torch_model : public model_port {
 public:
  /// Wraps `module`.
  explicit torch_model(std::shared_ptr<torch::nn::Module> module);

  caf::expected<model_snapshot> snapshot() override;

  caf::error load(const model_snapshot& x) override;

  /// Guards the module's tensors against concurrent snapshot and load.
  std::unique_lock<std::mutex> lock() {
    return std::unique_lock<std::mutex>{mtx_};
  }

  /// The wrapped module.
  const std::shared_ptr<torch::nn::Module>& module() const noexcept {
    return module_;
  }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::mutex mtx_;
};

/// Wraps a module in a model port, e.g. `dice::model_port_of(net.ptr())`.
std::shared_ptr<torch_model>
model_port_of(std::shared_ptr<torch::nn::Module> module);

} // namespace dice
