// A snapshot is never torn: an "optimizer step" on another thread that holds
// torch_model::lock() writes every parameter, and each snapshot taken
// meanwhile sees either all of a step or none of it.

#include "dice/torch/model.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <thread>

namespace {

TEST(SnapshotConsistency, NeverTornByAConcurrentStep) {
  auto net = std::make_shared<torch::nn::SequentialImpl>(
    torch::nn::Linear(256, 256), torch::nn::Linear(256, 256),
    torch::nn::Linear(256, 256));
  auto port = dice::model_port_of(net);
  std::atomic<bool> stop{false};
  std::atomic<int> steps{0};
  std::thread trainer{[&] {
    torch::NoGradGuard no_grad;
    for (int k = 1; !stop; ++k) {
      auto guard = port->lock();
      // Parameter by parameter, like an optimizer: a snapshot taken
      // between two of these writes would mix two steps.
      for (auto& p : net->parameters())
        p.fill_(static_cast<float>(k));
      steps = k;
    }
  }};
  // Before the first step the weights are random, not one value.
  while (steps == 0)
    std::this_thread::yield();
  int checked = 0;
  while (checked < 200 || steps < 50) {
    auto x = port->snapshot();
    ASSERT_TRUE(x);
    auto p = reinterpret_cast<const float*>(x->data.data());
    auto first = p[0];
    for (auto& e : x->index) {
      auto q = reinterpret_cast<const float*>(x->data.data() + e.offset);
      for (std::size_t i = 0; i < e.nbytes / sizeof(float); ++i)
        if (q[i] != first) {
          stop = true;
          trainer.join();
          FAIL() << "torn snapshot: '" << e.name << "' holds step " << q[i]
                 << ", the first tensor step " << first;
        }
    }
    ++checked;
  }
  stop = true;
  trainer.join();
  EXPECT_GE(checked, 200);
}

} // namespace
