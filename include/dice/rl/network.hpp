#pragma once

// Multi-layer perceptrons as torch::nn::Sequential, so that a state_dict
// has PyTorch's nn.Sequential names ("0.weight", "0.bias", "2.weight", ...)
// and a Python user loads dice's checkpoints into the same nn.Sequential.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace dice::rl {

/// The nonlinearity between the layers of an MLP.
enum class activation : std::uint8_t {
  /// torch::relu.
  relu,
  /// torch::tanh.
  tanh,
};

/// Linear(in, hidden[0]), act, Linear(hidden[0], hidden[1]), act, ...,
/// Linear(hidden.back(), out); the layers are built (and their weights
/// drawn) in that order.
torch::nn::Sequential mlp(std::int64_t in,
                          const std::vector<std::int64_t>& hidden,
                          std::int64_t out, activation act = activation::relu);

} // namespace dice::rl
