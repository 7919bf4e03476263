// The categorical and diagonal Gaussian policies: log-probabilities and
// entropies against hand-computed values, sampling statistics with a fixed
// seed, and the categorical's draws against today's collector's loop.

#include "dice/rl/distributions.hpp"

#include <gtest/gtest.h>

#include <cmath>

using namespace dice::rl;

namespace {

TEST(Categorical, HandComputedLogProbsAndEntropy) {
  // Row 0: logits (0, ln 3) -> pi = (1/4, 3/4).
  //   log pi(0) = ln 0.25 = -1.3862944, log pi(1) = ln 0.75 = -0.2876821
  //   H = 0.25 * 1.3862944 + 0.75 * 0.2876821 = 0.5623351
  // Row 1: logits (ln 3, 0) -> pi = (3/4, 1/4), the same entropy.
  auto logits = torch::tensor({0.0f, std::log(3.0f), std::log(3.0f), 0.0f})
                  .reshape({2, 2});
  categorical d{logits};
  auto lp = d.log_prob(torch::tensor({0, 0}, torch::kLong));
  EXPECT_NEAR(lp[0].item<float>(), -1.3862944, 1e-6);
  EXPECT_NEAR(lp[1].item<float>(), -0.2876821, 1e-6);
  auto h = d.entropy();
  EXPECT_NEAR(h[0].item<float>(), 0.5623351, 1e-6);
  EXPECT_NEAR(h[1].item<float>(), 0.5623351, 1e-6);
  auto m = d.mode();
  EXPECT_EQ(m[0].item<std::int64_t>(), 1);
  EXPECT_EQ(m[1].item<std::int64_t>(), 0);
}

TEST(Categorical, ThreeActions) {
  // logits (0, 0, ln 2) -> pi = (1/4, 1/4, 1/2):
  //   H = 2 * 0.25 * ln 4 + 0.5 * ln 2 = 0.6931472 + 0.3465736 = 1.0397208
  categorical d{torch::tensor({0.0f, 0.0f, std::log(2.0f)}).reshape({1, 3})};
  EXPECT_NEAR(d.entropy()[0].item<float>(), 1.0397208, 1e-6);
  EXPECT_NEAR(d.log_prob(torch::tensor({2}, torch::kLong))[0].item<float>(),
              std::log(0.5), 1e-6);
}

// examples/ppo_cartpole's collector, as it sampled (for the comparison).
std::vector<std::int64_t> old_collector_draws(const torch::Tensor& logits,
                                              std::mt19937_64& rng) {
  auto lp = torch::log_softmax(logits, 1).contiguous();
  auto n = static_cast<std::size_t>(lp.size(0));
  auto num_actions = static_cast<std::size_t>(lp.size(1));
  auto* p = lp.data_ptr<float>();
  std::uniform_real_distribution<float> u{0.0f, 1.0f};
  std::vector<std::int64_t> actions(n);
  for (std::size_t i = 0; i < n; ++i) {
    float draw = u(rng);
    float cum = 0;
    std::size_t a = num_actions - 1;
    for (std::size_t k = 0; k + 1 < num_actions; ++k) {
      cum += std::exp(p[i * num_actions + k]);
      if (draw < cum) {
        a = k;
        break;
      }
    }
    actions[i] = static_cast<std::int64_t>(a);
  }
  return actions;
}

TEST(Categorical, SamplesAsTodaysCollectorDoes) {
  torch::manual_seed(0);
  auto logits = torch::randn({500, 3});
  std::mt19937_64 a{42}, b{42};
  for (int round = 0; round < 3; ++round) {
    auto got = categorical{logits}.sample(a);
    auto want = old_collector_draws(logits, b);
    ASSERT_EQ(got.size(0), 500);
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[static_cast<std::int64_t>(i)].item<std::int64_t>(), want[i])
        << "round " << round << " row " << i;
  }
}

TEST(Categorical, SampleFrequenciesFollowTheProbabilities) {
  // pi = (1/4, 3/4) on 20000 rows: the count of action 1 is binomial,
  // std sqrt(20000 * 0.75 * 0.25) = 61.2; allow 4 std.
  constexpr std::int64_t rows = 20000;
  auto logits = torch::tensor({0.0f, std::log(3.0f)})
                  .reshape({1, 2})
                  .expand({rows, 2});
  std::mt19937_64 gen{7};
  auto s = categorical{logits}.sample(gen);
  auto ones = s.sum().item<std::int64_t>();
  EXPECT_NEAR(static_cast<double>(ones), 0.75 * rows, 4 * 61.2);
  // The same seed draws the same actions; another seed others.
  std::mt19937_64 same{7}, other{8};
  EXPECT_TRUE(torch::equal(categorical{logits}.sample(same), s));
  EXPECT_FALSE(torch::equal(categorical{logits}.sample(other), s));
}

TEST(DiagGaussian, HandComputedLogProbAndEntropy) {
  // mean (0, 1), sigma (1, 2); action (0.5, -1): z = (0.5, -1).
  //   log p = sum(-z^2/2 - ln sigma - ln(2 pi)/2)
  //         = (-0.125 - 0 - 0.9189385) + (-0.5 - 0.6931472 - 0.9189385)
  //         = -1.0439385 - 2.1120857 = -3.1560242
  //   H = sum(1/2 + ln(2 pi)/2 + ln sigma)
  //     = 1.4189385 + 2.1120857 = 3.5310242
  auto mean = torch::tensor({0.0f, 1.0f}).reshape({1, 2});
  auto log_std = torch::tensor({0.0f, std::log(2.0f)}).set_requires_grad(true);
  diag_gaussian d{mean, log_std};
  auto lp = d.log_prob(torch::tensor({0.5f, -1.0f}).reshape({1, 2}));
  EXPECT_NEAR(lp[0].item<float>(), -3.1560242, 1e-5);
  EXPECT_NEAR(d.entropy()[0].item<float>(), 3.5310242, 1e-5);
  EXPECT_TRUE(torch::equal(d.mode(), mean));
  // d log p / d ln sigma = z^2 - 1 per dimension: (0.25 - 1, 1 - 1).
  lp.sum().backward();
  EXPECT_NEAR(log_std.grad()[0].item<float>(), -0.75, 1e-6);
  EXPECT_NEAR(log_std.grad()[1].item<float>(), 0.0, 1e-6);
}

TEST(DiagGaussian, EntropyIsTheSameForEveryRow) {
  auto mean = torch::randn({5, 3});
  auto log_std = torch::tensor({-1.0f, 0.0f, 0.5f});
  diag_gaussian d{mean, log_std};
  auto h = d.entropy();
  ASSERT_EQ(h.size(0), 5);
  // 3 (1/2 + ln(2 pi)/2) + (-1 + 0 + 0.5) = 4.2568156 - 0.5
  for (std::int64_t i = 0; i < 5; ++i)
    EXPECT_NEAR(h[i].item<float>(), 3.7568156, 1e-5);
}

TEST(DiagGaussian, SampleStatisticsFollowMeanAndStd) {
  // 20000 rows of N((1, -2), (0.5, 3)^2). The sample mean's std is
  // sigma / sqrt(n) (0.0035, 0.0212); the sample std's about sigma /
  // sqrt(2n) (0.0025, 0.015). Allow 4 of each.
  constexpr std::int64_t rows = 20000;
  auto mean = torch::tensor({1.0f, -2.0f}).reshape({1, 2}).expand({rows, 2});
  auto log_std = torch::tensor({std::log(0.5f), std::log(3.0f)});
  std::mt19937_64 gen{11};
  diag_gaussian d{mean, log_std};
  auto x = d.sample(gen);
  ASSERT_EQ(x.size(0), rows);
  ASSERT_EQ(x.size(1), 2);
  auto m = x.mean(0);
  auto s = x.std(0);
  EXPECT_NEAR(m[0].item<float>(), 1.0, 4 * 0.0035);
  EXPECT_NEAR(m[1].item<float>(), -2.0, 4 * 0.0212);
  EXPECT_NEAR(s[0].item<float>(), 0.5, 4 * 0.0025);
  EXPECT_NEAR(s[1].item<float>(), 3.0, 4 * 0.015);
  std::mt19937_64 same{11}, other{12};
  EXPECT_TRUE(torch::equal(d.sample(same), x));
  EXPECT_FALSE(torch::equal(d.sample(other), x));
}

} // namespace
