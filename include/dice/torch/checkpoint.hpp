#pragma once

// Checkpoints PyTorch reads: `torch.load(path)` in Python returns a dict of
// tensors (a state_dict), and files written by `torch.save({...})` load
// here. This header stays free of LibTorch.

#include "dice/messages/model_snapshot.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <string>

namespace dice {

/// Writes `x` as a dict {name: tensor} in PyTorch's zip/pickle format
/// (LibTorch's pickle_save), via a temporary file and a rename.
caf::error save_pytorch_checkpoint(const model_snapshot& x,
                                   const std::string& path);

/// Reads a file `torch.save` wrote holding a dict of CPU tensors (or what
/// save_pytorch_checkpoint wrote) into a snapshot; anything else is
/// `errc::malformed_input`, a missing file `errc::storage_missing`.
caf::expected<model_snapshot> load_pytorch_checkpoint(const std::string& path);

} // namespace dice
