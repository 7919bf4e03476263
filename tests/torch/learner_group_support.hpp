#pragma once

// Shared by the learner-group tests: a small net, one training step on
// rank-specific data, and the raw bytes of a module.

#include "dice/torch/learner_group.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace dice::test {

/// A small MLP with a constant buffer (broadcast and digested too).
struct tiny_net_impl : torch::nn::Module {
  explicit tiny_net_impl(std::int64_t in = 16, std::int64_t hidden = 32,
                         std::int64_t out = 4) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    head = register_module("head", torch::nn::Linear(hidden, out));
    scale = register_buffer("scale", torch::ones({out}));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::tanh(fc1->forward(x));
    x = torch::tanh(fc2->forward(x));
    return head->forward(x) * scale;
  }

  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, head{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE_IMPL(tiny_net, tiny_net_impl);

/// A net whose initial weights depend on `seed` (ranks start different).
inline tiny_net make_net(std::uint64_t seed) {
  torch::manual_seed(seed);
  return tiny_net{};
}

/// One step of regression on data only this rank and step see: forward,
/// backward, the group's gradient average, then the optimizer.
inline caf::error train_step(learner_group& g, tiny_net& net,
                             torch::optim::Optimizer& opt, int rank, int step,
                             std::uint64_t seed = 7) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(
    seed * 1000003 + static_cast<std::uint64_t>(rank) * 1009
    + static_cast<std::uint64_t>(step));
  auto x = torch::randn({32, 16}, gen);
  auto y = torch::randn({32, 4}, gen);
  opt.zero_grad();
  auto loss = torch::mse_loss(net->forward(x), y);
  loss.backward();
  if (auto err = g.all_reduce_gradients(*net))
    return err;
  opt.step();
  return caf::none;
}

/// Every parameter and buffer, concatenated as raw bytes.
inline std::string module_bytes(const torch::nn::Module& m) {
  std::string result;
  auto add = [&](const torch::Tensor& t) {
    auto c = t.contiguous();
    result.append(static_cast<const char*>(c.data_ptr()),
                  static_cast<std::size_t>(c.numel()) * c.element_size());
  };
  for (auto& p : m.parameters(true))
    add(p);
  for (auto& b : m.buffers(true))
    add(b);
  return result;
}

} // namespace dice::test
