// The learner group with its ranks as threads of this process: real c10d
// (TCPStore on an ephemeral loopback port, ProcessGroupGloo over loopback
// TCP). Every wait is a collective's own deadline; nothing sleeps.

#include "dice/core/errc.hpp"
#include "dice/torch/learner_group.hpp"
#include "torch/learner_group_support.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <thread>

namespace {

using namespace std::chrono_literals;
using dice::errc;
using dice::learner_group;
using dice::learner_group_config;
using dice::reduce_mode;
using dice::test::make_net;
using dice::test::module_bytes;
using dice::test::test_config;
using dice::test::tiny_net;
using dice::test::train_step;
using dice::test::with_group;

// Value of gradient element `e` of parameter `j` on rank `r`: small
// multiples of 1/4, so that every sum is exact in float.
float grad_value(int r, std::size_t j, std::int64_t e) {
  return static_cast<float>((r + 1)
                            * ((e + static_cast<std::int64_t>(j)) % 5 + 1))
    * 0.25f;
}

struct exact_case {
  int size;
  reduce_mode mode;
};

class LearnerGroupExact : public testing::TestWithParam<exact_case> {};

TEST_P(LearnerGroupExact, AveragesGradientsExactly) {
  auto [n, mode] = GetParam();
  std::vector<std::vector<std::vector<float>>> result(n);
  with_group(test_config(0, n, 0, mode), [&](int r, learner_group& g) {
    auto net = make_net(1);
    auto params = net->parameters();
    for (std::size_t j = 0; j < params.size(); ++j) {
      // Rank 1 leaves one gradient undefined: it counts as zeros.
      if (r == 1 && j == 1)
        continue;
      auto grad = torch::empty_like(params[j]);
      auto* p = grad.data_ptr<float>();
      for (std::int64_t e = 0; e < grad.numel(); ++e)
        p[e] = grad_value(r, j, e);
      params[j].mutable_grad() = grad;
    }
    auto err = g.all_reduce_gradients(*net);
    ASSERT_FALSE(err) << dice::render(err);
    for (auto& p : params) {
      ASSERT_TRUE(p.grad().defined());
      auto c = p.grad().contiguous();
      result[r].emplace_back(c.data_ptr<float>(),
                             c.data_ptr<float>() + c.numel());
    }
  });
  // Hand-computed: the exact float sum over ranks, divided by the size.
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(result[r].size(), result[0].size());
    for (std::size_t j = 0; j < result[r].size(); ++j)
      for (std::size_t e = 0; e < result[r][j].size(); ++e) {
        float sum = 0;
        for (int q = 0; q < n; ++q)
          if (!(q == 1 && j == 1))
            sum += grad_value(q, j, static_cast<std::int64_t>(e));
        ASSERT_EQ(result[r][j][e], sum / static_cast<float>(n))
          << "rank " << r << " param " << j << " element " << e;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(SizesAndModes, LearnerGroupExact,
                         testing::Values(exact_case{2, reduce_mode::bucketed},
                                         exact_case{2, reduce_mode::flat},
                                         exact_case{2, reduce_mode::exchange},
                                         exact_case{3, reduce_mode::bucketed},
                                         exact_case{3, reduce_mode::flat},
                                         exact_case{3, reduce_mode::exchange}),
                         [](const testing::TestParamInfo<exact_case>& info) {
                           return "L" + std::to_string(info.param.size) + "_"
                             + dice::to_string(info.param.mode);
                         });

// Rank r's random gradients (not exact in float), flattened.
torch::Tensor random_grads(int r) {
  auto net = make_net(1);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + r);
  std::vector<torch::Tensor> parts;
  for (auto& p : net->parameters())
    parts.push_back(torch::randn({p.numel()}, gen));
  return torch::cat(parts);
}

// Each mode's averages of random_grads, per rank.
std::vector<std::string> average_random(int n, reduce_mode mode) {
  std::vector<std::string> result(n);
  with_group(test_config(0, n, 0, mode), [&](int r, learner_group& g) {
    auto net = make_net(1);
    auto flat = random_grads(r);
    std::int64_t off = 0;
    for (auto& p : net->parameters()) {
      p.mutable_grad() = flat.narrow(0, off, p.numel()).view_as(p).clone();
      off += p.numel();
    }
    auto err = g.all_reduce_gradients(*net);
    ASSERT_FALSE(err) << dice::render(err);
    for (auto& p : net->parameters()) {
      auto c = p.grad().contiguous();
      result[r].append(static_cast<const char*>(c.data_ptr()),
                       static_cast<std::size_t>(c.numel()) * c.element_size());
    }
  });
  return result;
}

// Two ranks add a + b in both modes: bitwise equal. From three ranks on,
// Gloo's ring sums each element in an order set by where the element falls
// in the buffer, so the modes may differ in the last bit for inexact sums
// (exact sums agree: AveragesGradientsExactly). Within a mode every rank
// always gets the same bytes.
TEST(LearnerGroup, BucketedAndFlatAgree) {
  for (int n : {2, 3}) {
    auto flat = average_random(n, reduce_mode::flat);
    auto bucketed = average_random(n, reduce_mode::bucketed);
    auto exchanged = average_random(n, reduce_mode::exchange);
    ASSERT_EQ(flat.size(), static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      ASSERT_FALSE(flat[r].empty());
      EXPECT_TRUE(flat[r] == flat[0]) << "flat, L=" << n << ", rank " << r;
      EXPECT_TRUE(bucketed[r] == bucketed[0]) << "bucketed, L=" << n;
      EXPECT_TRUE(exchanged[r] == exchanged[0]) << "exchange, L=" << n;
    }
    if (n == 2) {
      EXPECT_TRUE(exchanged[0] == flat[0])
        << "exchange, L=2, must agree bitwise";
    }
    auto count = static_cast<std::int64_t>(flat[0].size() / sizeof(float));
    auto a = torch::from_blob(flat[0].data(), {count}, torch::kFloat32);
    auto b = torch::from_blob(bucketed[0].data(), {count}, torch::kFloat32);
    auto differ = (a != b).sum().item<std::int64_t>();
    RecordProperty("differing_elements_L" + std::to_string(n),
                   std::to_string(differ) + "/" + std::to_string(count));
    if (n == 2) {
      EXPECT_EQ(differ, 0) << "L=2 must agree bitwise";
    }
    // Two summation orders of n floats differ by at most (n - 1) roundings
    // of partial sums, each within eps/2 of sum |x_r|, then divided by n.
    auto abs_sum = torch::zeros({count});
    for (int r = 0; r < n; ++r)
      abs_sum += torch::abs(random_grads(r));
    auto bound = abs_sum
      * ((n - 1) * std::numeric_limits<float>::epsilon() / n);
    EXPECT_TRUE(torch::all(torch::abs(a - b) <= bound).item<bool>())
      << "L=" << n;
  }
}

// The exchange sums every element in rank order, ((g0 + g1) + g2) / 3, on
// every rank: the bytes are known exactly, also for inexact sums.
TEST(LearnerGroup, ExchangeSumsInRankOrder) {
  auto exchanged = average_random(3, reduce_mode::exchange);
  auto expected = ((random_grads(0) + random_grads(1)) + random_grads(2)) / 3;
  std::string bytes(static_cast<const char*>(expected.data_ptr()),
                    static_cast<std::size_t>(expected.numel())
                      * expected.element_size());
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(exchanged[r] == bytes) << "rank " << r;
}

// Receives are posted ahead for the layout of the last call; a call with
// another model (another layout) must neither match them nor hang.
TEST(LearnerGroup, ExchangeFollowsALayoutChange) {
  with_group(
    test_config(0, 2, 0, reduce_mode::exchange), [&](int r, learner_group& g) {
      tiny_net big = make_net(1);
      torch::manual_seed(2);
      tiny_net small{8, 16, 2};
      for (int round = 0; round < 4; ++round) {
        auto& net = round == 2 ? small : big;
        auto params = net->parameters();
        for (std::size_t j = 0; j < params.size(); ++j)
          params[j].mutable_grad() = torch::full_like(
            params[j], static_cast<float>((r + 1) * (round + 1) + j));
        auto err = g.all_reduce_gradients(*net);
        ASSERT_FALSE(err) << dice::render(err);
        for (std::size_t j = 0; j < params.size(); ++j) {
          // (1 (round + 1) + j + 2 (round + 1) + j) / 2, exact.
          auto want = (3.0f * static_cast<float>(round + 1)
                       + 2.0f * static_cast<float>(j))
            / 2.0f;
          EXPECT_TRUE(torch::all(params[j].grad() == want).item<bool>())
            << "round " << round << " param " << j;
        }
      }
    });
}

class LearnerGroupSteps : public testing::TestWithParam<exact_case> {};

TEST_P(LearnerGroupSteps, ParametersStayIdenticalAcrossSteps) {
  auto [n, mode] = GetParam();
  constexpr int steps = 6;
  // bytes[step][rank]; step 0 is right after the broadcast.
  std::vector<std::vector<std::string>> bytes(steps + 1,
                                              std::vector<std::string>(n));
  std::vector<std::vector<std::uint64_t>> digests(
    steps + 1, std::vector<std::uint64_t>(n));
  std::vector<std::string> before(n);
  with_group(test_config(0, n, 0, mode), [&](int r, learner_group& g) {
    auto net = make_net(10 + r); // every rank starts different
    before[r] = module_bytes(*net);
    torch::optim::Adam opt{net->parameters(), torch::optim::AdamOptions(1e-2)};
    auto err = g.broadcast_parameters(*net);
    ASSERT_FALSE(err) << dice::render(err);
    for (int s = 0; s <= steps; ++s) {
      if (s > 0) {
        err = train_step(g, net, opt, r, s);
        ASSERT_FALSE(err) << dice::render(err);
      }
      bytes[s][r] = module_bytes(*net);
      digests[s][r] = *dice::parameters_digest(*net);
      err = g.verify_identical(*net);
      ASSERT_FALSE(err) << dice::render(err);
    }
  });
  EXPECT_NE(before[1], before[0]) << "ranks must start different";
  for (int s = 0; s <= steps; ++s)
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(digests[s][r], digests[s][0]) << "step " << s;
      EXPECT_TRUE(bytes[s][r] == bytes[s][0]) << "step " << s;
    }
  EXPECT_NE(bytes[steps][0], bytes[0][0]) << "training changed nothing";
}

INSTANTIATE_TEST_SUITE_P(SizesAndModes, LearnerGroupSteps,
                         testing::Values(exact_case{2, reduce_mode::bucketed},
                                         exact_case{2, reduce_mode::flat},
                                         exact_case{2, reduce_mode::exchange},
                                         exact_case{3, reduce_mode::bucketed},
                                         exact_case{3, reduce_mode::flat},
                                         exact_case{3, reduce_mode::exchange}),
                         [](const testing::TestParamInfo<exact_case>& info) {
                           return "L" + std::to_string(info.param.size) + "_"
                             + dice::to_string(info.param.mode);
                         });

} // namespace
