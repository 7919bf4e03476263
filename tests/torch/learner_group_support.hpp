#pragma once

// Shared by the learner-group tests: a small net, one training step on
// rank-specific data, and the raw bytes of a module.

#include "dice/core/errc.hpp"
#include "dice/torch/learner_group.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dice::test {

/// An in-memory rendezvous_store (the seam for a store carried over dice's
/// authenticated router): a group forms through it without any TCPStore.
class memory_store : public rendezvous_store {
 public:
  caf::error set(const std::string& key,
                 std::vector<std::uint8_t> value) override {
    std::lock_guard<std::mutex> guard{mtx_};
    kv_[key] = std::move(value);
    cv_.notify_all();
    return caf::none;
  }

  caf::expected<std::vector<std::uint8_t>>
  get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> guard{mtx_};
    if (!cv_.wait_for(guard, timeout, [&] {
          return kv_.count(key) > 0;
        }))
      return make_error(errc::timeout, "no key " + key);
    return kv_[key];
  }

  caf::expected<std::int64_t> add(const std::string& key,
                                  std::int64_t delta) override {
    std::lock_guard<std::mutex> guard{mtx_};
    auto& v = kv_[key];
    std::int64_t x = 0;
    if (v.size() == sizeof(x))
      std::memcpy(&x, v.data(), sizeof(x));
    x += delta;
    v.resize(sizeof(x));
    std::memcpy(v.data(), &x, sizeof(x));
    cv_.notify_all();
    return x;
  }

 private:
  std::mutex mtx_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::uint8_t>> kv_;
};

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

/// A generator only this rank and step draw from.
inline at::Generator step_generator(int rank, int step,
                                    std::uint64_t seed = 7) {
  return at::make_generator<at::CPUGeneratorImpl>(
    seed * 1000003 + static_cast<std::uint64_t>(rank) * 1009
    + static_cast<std::uint64_t>(step));
}

/// One step of regression on data only this rank and step see: forward,
/// backward, the group's gradient average, then the optimizer.
inline caf::error train_step(learner_group& g, tiny_net& net,
                             torch::optim::Optimizer& opt, int rank, int step,
                             std::uint64_t seed = 7) {
  auto gen = step_generator(rank, step, seed);
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

/// A config for tests: loopback, short timeouts, 2 KiB buckets (the tiny
/// net then spans several buckets, some holding several gradients and some
/// one gradient reduced in place).
inline learner_group_config
test_config(int rank, int size, std::uint16_t port,
            reduce_mode mode = reduce_mode::automatic) {
  learner_group_config c;
  c.rank = rank;
  c.size = size;
  c.store_port = port;
  c.mode = mode;
  c.bucket_bytes = 2048;
  c.timeout = std::chrono::seconds{10};
  c.join_timeout = std::chrono::seconds{30};
  return c;
}

/// Forms a group of `base.size` ranks, one thread each (rank 0 hosts the
/// store on an ephemeral port), and runs `body(rank, group)` in each;
/// `tweak(rank, config)` may set a rank's own options first.
template <class Body, class Tweak>
void with_group(learner_group_config base, Body body, Tweak tweak) {
  auto c0 = base;
  c0.rank = 0;
  c0.store_port = 0;
  tweak(0, c0);
  auto g0 = learner_group::create(c0);
  ASSERT_TRUE(g0) << render(g0.error());
  auto port = g0->store_port();
  ASSERT_NE(port, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < base.size; ++r)
    threads.emplace_back([&, r] {
      if (r == 0) {
        auto err = g0->join();
        ASSERT_FALSE(err) << render(err);
        body(0, *g0);
        return;
      }
      auto c = base;
      c.rank = r;
      c.store_port = port;
      tweak(r, c);
      auto g = learner_group::form(c);
      ASSERT_TRUE(g) << render(g.error());
      body(r, *g);
    });
  for (auto& t : threads)
    t.join();
}

/// with_group, every rank with `base`'s options.
template <class Body>
void with_group(learner_group_config base, Body body) {
  with_group(base, std::move(body), [](int, learner_group_config&) {});
}

/// The error of `x`, none if it holds a value (error() alone is undefined
/// then).
template <class T>
caf::error error_of(const caf::expected<T>& x) {
  return x ? caf::error{} : x.error();
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

/// Forms a group of 3 ranks as threads (rank r with `config_of(r)`, which
/// must give no store port), trains 2 steps from different starts, and
/// returns each rank's parameter bytes ("" for a rank that failed).
template <class ConfigOf>
std::vector<std::string> train_three_without_a_store_port(ConfigOf config_of) {
  std::vector<std::string> bytes(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto g = learner_group::form(config_of(r));
      ASSERT_TRUE(g) << render(g.error());
      EXPECT_EQ(g->store_port(), 0);
      auto net = make_net(10 + static_cast<std::uint64_t>(r));
      torch::optim::SGD opt{net->parameters(), torch::optim::SGDOptions(0.1)};
      ASSERT_FALSE(g->broadcast_parameters(*net));
      for (int s = 1; s <= 2; ++s)
        ASSERT_FALSE(train_step(*g, net, opt, r, s));
      bytes[static_cast<std::size_t>(r)] = module_bytes(*net);
    });
  for (auto& t : threads)
    t.join();
  return bytes;
}

/// Milliseconds from `t0` to now.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
           std::chrono::steady_clock::now() - t0)
    .count();
}

/// How a learner group reports a lost member: a timeout or unreachable.
inline bool is_failure(const caf::error& err) {
  return is(err, errc::timeout) || is(err, errc::unreachable);
}

/// What rank 1 of two saw when rank 0 left (`abort()`) after step 1, while
/// rank 1 waited in (or was about to start) step 2.
struct left_mid_step {
  caf::error err;            // what step 2 returned
  double fail_ms = 0;        // how long step 2 took
  bool later_failed = false; // a later call failed too (without blocking)
};

/// Two ranks of `base` (seeds `seed` + rank) take step 1; then rank 0
/// leaves while rank 1 takes step 2.
inline left_mid_step leave_mid_step(learner_group_config base,
                                    std::uint64_t seed) {
  base.size = 2;
  std::promise<void> stepping;
  auto stepping_future = stepping.get_future().share();
  left_mid_step result;
  with_group(base, [&](int r, learner_group& g) {
    auto net = make_net(seed + static_cast<std::uint64_t>(r));
    torch::optim::SGD opt{net->parameters(), 0.1};
    ASSERT_FALSE(train_step(g, net, opt, r, 1));
    if (r == 0) {
      stepping_future.wait();
      g.abort();
      return;
    }
    stepping.set_value();
    auto t0 = std::chrono::steady_clock::now();
    result.err = train_step(g, net, opt, r, 2);
    result.fail_ms = ms_since(t0);
    result.later_failed = is_failure(g.all_reduce_gradients(*net));
  });
  return result;
}

/// What rank 0 of two saw in step 2 when rank 1, after step 1, stayed
/// linked but never sent step 2 (it leaves once rank 0's step ended).
inline left_mid_step hang_mid_step(learner_group_config base,
                                   std::uint64_t seed) {
  base.size = 2;
  std::promise<void> failed;
  auto failed_future = failed.get_future().share();
  left_mid_step result;
  with_group(base, [&](int r, learner_group& g) {
    auto net = make_net(seed + static_cast<std::uint64_t>(r));
    torch::optim::SGD opt{net->parameters(), 0.1};
    ASSERT_FALSE(train_step(g, net, opt, r, 1));
    if (r == 1) {
      EXPECT_EQ(failed_future.wait_for(std::chrono::seconds{60}),
                std::future_status::ready);
      g.abort();
      return;
    }
    auto t0 = std::chrono::steady_clock::now();
    result.err = train_step(g, net, opt, r, 2);
    result.fail_ms = ms_since(t0);
    failed.set_value();
  });
  return result;
}

} // namespace dice::test
