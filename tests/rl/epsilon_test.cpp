// The epsilon schedule and epsilon-greedy actions over Q-values.

#include "dice/rl/epsilon.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

using namespace dice::rl;

namespace {

TEST(Epsilon, LinearAndExponentialDecay) {
  epsilon_schedule s;
  s.start = 1.0;
  s.end = 0.1;
  s.decay_steps = 100;
  EXPECT_DOUBLE_EQ(s.at(0), 1.0);
  EXPECT_DOUBLE_EQ(s.at(50), 0.55); // 1 + 0.5 * (0.1 - 1)
  EXPECT_DOUBLE_EQ(s.at(1000), 0.1);
  s.decay = decay_kind::exponential;
  EXPECT_DOUBLE_EQ(s.at(0), 1.0);
  EXPECT_NEAR(s.at(100), 0.1 + 0.9 * std::exp(-1.0), 1e-12);
  s.decay_steps = 0;
  EXPECT_DOUBLE_EQ(s.at(0), 0.1); // no decay: always the end value
}

TEST(Epsilon, DefaultsAreTheExamples) {
  epsilon_schedule s;
  EXPECT_DOUBLE_EQ(s.start, 1.0);
  EXPECT_DOUBLE_EQ(s.end, 0.05);
  EXPECT_DOUBLE_EQ(s.decay_steps, 10000);
  EXPECT_EQ(s.decay, decay_kind::linear);
}

TEST(Greedy, ArgmaxPerRow) {
  auto q = torch::tensor({1.f, 3.f, 2.f, 0.f, -1.f, -2.f, 5.f, 4.f, 6.f})
             .reshape({3, 3});
  EXPECT_EQ(greedy(q), (std::vector<std::int64_t>{1, 0, 2}));
}

// examples/dqn_cartpole's epsilon_greedy_actions after its greedy pass,
// kept as the reference for the draws.
std::vector<std::int64_t> old_draws(std::vector<std::int64_t> result,
                                    double eps, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u{0.0, 1.0};
  std::bernoulli_distribution coin{0.5};
  for (auto& a : result)
    if (u(rng) < eps)
      a = coin(rng) ? 1 : 0;
  return result;
}

TEST(EpsilonGreedy, TwoActionsDrawAsTheExamplesDid) {
  torch::manual_seed(1);
  auto q = torch::randn({1000, 2});
  for (double eps : {0.0, 0.3, 1.0}) {
    std::mt19937_64 a{99};
    std::mt19937_64 b{99};
    auto got = epsilon_greedy(q, eps, a);
    auto want = old_draws(greedy(q), eps, b);
    EXPECT_EQ(got, want) << eps;
    EXPECT_EQ(a(), b()) << eps; // and the RNG is left in the same state
  }
}

TEST(EpsilonGreedy, ExploresEveryActionUniformly) {
  // eps 1, 5 actions: every action about 1/5 of 10000 rows (binomial std
  // sqrt(10000 * 0.2 * 0.8) = 40).
  auto q = torch::zeros({10000, 5});
  q.select(1, 3).fill_(1); // greedy would always pick 3
  std::mt19937_64 rng{5};
  std::vector<std::int64_t> out(10000, -1);
  epsilon_greedy(q, 1.0, rng, out.data());
  std::vector<int> n(5, 0);
  for (auto a : out) {
    ASSERT_GE(a, 0);
    ASSERT_LT(a, 5);
    ++n[static_cast<std::size_t>(a)];
  }
  for (int i = 0; i < 5; ++i)
    EXPECT_NEAR(n[i], 2000, 5 * 40) << i;
  // eps 0: greedy only.
  epsilon_greedy(q, 0.0, rng, out.data());
  for (auto a : out)
    ASSERT_EQ(a, 3);
}

TEST(EpsilonGreedy, ASeedGivesTheSameActions) {
  auto q = torch::randn({64, 7});
  std::mt19937_64 a{3};
  std::mt19937_64 b{3};
  std::mt19937_64 c{4};
  auto x = epsilon_greedy(q, 0.5, a);
  EXPECT_EQ(x, epsilon_greedy(q, 0.5, b));
  EXPECT_NE(x, epsilon_greedy(q, 0.5, c));
}

} // namespace
