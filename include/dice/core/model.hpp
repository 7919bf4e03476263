#pragma once

#include "dice/messages/model_snapshot.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <cstdint>
#include <memory>

namespace dice {

/// A model as the exchangers see it: something that can be snapshotted and
/// loaded. Keeps LibTorch out of the actors; `dice/torch/model.hpp` adapts a
/// `torch::nn::Module`.
class model_port {
 public:
  virtual ~model_port();

  /// Takes a consistent snapshot of parameters and buffers (never torn by a
  /// concurrent optimizer step holding the model's lock).
  virtual caf::expected<model_snapshot> snapshot() = 0;

  /// Loads a snapshot. A snapshot whose names, shapes or dtypes don't match
  /// returns `errc::model_mismatch` and leaves the model untouched.
  virtual caf::error load(const model_snapshot& x) = 0;
};

/// Shared handle to a model port.
using model_port_ptr = std::shared_ptr<model_port>;

} // namespace dice
