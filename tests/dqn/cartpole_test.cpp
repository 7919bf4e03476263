// CartPole-v1 dynamics, thresholds and time limit against values worked out
// from Gymnasium's equations. Torch-free: the env compiles into this test.

#include <gtest/gtest.h>

#include <cmath>
#include <set>

// The example is a program, not a library: compile its env source here.
#include "cartpole.hpp"

using namespace dqn;

namespace {

// Gymnasium's equations for s = (0.01, 0.02, 0.03, 0.04), push right:
//   temp     = (10 + 0.05 * 0.04^2 * sin 0.03) / 1.1           = 9.0909113
//   thetaacc = (9.8 sin 0.03 - cos 0.03 * temp)
//              / (0.5 * (4/3 - 0.1 cos^2 0.03 / 1.1))          = -14.1534359
//   xacc     = temp - 0.05 * thetaacc * cos 0.03 / 1.1         = 9.7339598
//   x' = 0.01 + 0.02 * 0.02, x_dot' = 0.02 + 0.02 * xacc,
//   theta' = 0.03 + 0.02 * 0.04, theta_dot' = 0.04 + 0.02 * thetaacc.
constexpr cartpole_state s0{0.01, 0.02, 0.03, 0.04};

TEST(Cartpole, OneStepPushRightMatchesTheEquations) {
  auto s = cartpole_dynamics(s0, 1);
  EXPECT_NEAR(s.x, 0.0104, 1e-15);
  EXPECT_NEAR(s.x_dot, 0.21467919574755523, 1e-13);
  EXPECT_NEAR(s.theta, 0.0308, 1e-15);
  EXPECT_NEAR(s.theta_dot, -0.2430687179600081, 1e-13);
}

TEST(Cartpole, OneStepPushLeftMatchesTheEquations) {
  auto s = cartpole_dynamics(s0, 0);
  EXPECT_NEAR(s.x, 0.0104, 1e-15);
  EXPECT_NEAR(s.x_dot, -0.17553901710278938, 1e-13);
  EXPECT_NEAR(s.theta, 0.0308, 1e-15);
  EXPECT_NEAR(s.theta_dot, 0.34199522377603914, 1e-13);
}

TEST(Cartpole, StepReturnsFloatObservationAndRewardOne) {
  cartpole env{1};
  env.set_state(s0);
  auto r = env.step(1);
  EXPECT_EQ(r.obs[0], static_cast<float>(0.0104));
  EXPECT_EQ(r.obs[1], static_cast<float>(0.21467919574755523));
  EXPECT_EQ(r.obs[3], static_cast<float>(-0.2430687179600081));
  EXPECT_EQ(r.reward, 1.0f);
  EXPECT_FALSE(r.terminated);
  EXPECT_FALSE(r.truncated);
  EXPECT_EQ(env.elapsed_steps(), 1);
}

TEST(Cartpole, ThetaThresholdIsTwelveDegrees) {
  EXPECT_DOUBLE_EQ(cartpole_params::theta_threshold, 0.20943951023931953);
}

TEST(Cartpole, TerminatesStrictlyBeyondTheThresholds) {
  const double th = cartpole_params::theta_threshold;
  EXPECT_FALSE(cartpole_terminated({2.4, 0, 0, 0}));
  EXPECT_TRUE(cartpole_terminated({2.4000001, 0, 0, 0}));
  EXPECT_FALSE(cartpole_terminated({-2.4, 0, 0, 0}));
  EXPECT_TRUE(cartpole_terminated({-2.4000001, 0, 0, 0}));
  EXPECT_FALSE(cartpole_terminated({0, 0, th, 0}));
  EXPECT_TRUE(cartpole_terminated({0, 0, th + 1e-9, 0}));
  EXPECT_TRUE(cartpole_terminated({0, 0, -th - 1e-9, 0}));
  // Euler: the position moves with the old velocity, so x = 2.4 - 0.02 * v
  // ends at 2.4 + 0.02 * 0.1 > 2.4 after one step with velocity v + 0.1.
  cartpole env{1};
  env.set_state({2.4, 0.0, 0.0, 0.0});
  EXPECT_FALSE(env.step(1).terminated); // x stays 2.4: not beyond
  env.set_state({2.4, 0.1, 0.0, 0.0});
  auto r = env.step(0);
  EXPECT_TRUE(r.terminated);
  EXPECT_EQ(r.reward, 1.0f); // Gymnasium rewards the terminating step too
  env.set_state({0.0, 0.0, th, 0.0});
  EXPECT_FALSE(env.step(0).terminated);
  env.set_state({0.0, 0.0, -th, -0.01});
  EXPECT_TRUE(env.step(1).terminated);
}

TEST(Cartpole, TruncatesAt500Steps) {
  cartpole env{2};
  for (int i = 1; i <= 500; ++i) {
    env.set_state({}); // upright and still: never terminates
    auto r = env.step(i % 2);
    EXPECT_FALSE(r.terminated);
    ASSERT_EQ(r.truncated, i == 500) << "step " << i;
  }
  env.reset();
  EXPECT_EQ(env.elapsed_steps(), 0);
}

TEST(Cartpole, ResetIsUniformInASmallBoxAndSeeded) {
  cartpole a{7};
  cartpole b{7};
  cartpole c{8};
  std::set<float> seen;
  for (int i = 0; i < 100; ++i) {
    auto oa = a.reset();
    auto ob = b.reset();
    auto oc = c.reset();
    EXPECT_EQ(oa, ob);
    EXPECT_NE(oa, oc);
    for (auto v : oa) {
      EXPECT_GE(v, -0.05f);
      EXPECT_LE(v, 0.05f);
      seen.insert(v);
    }
  }
  EXPECT_GT(seen.size(), 390u);
}

TEST(VecCartpole, AutoResetsAndKeepsTheFinalObservation) {
  vec_cartpole envs{3, 5};
  ASSERT_EQ(envs.obs().size(), 12u);
  // Always pushing right topples every pole within a few dozen steps.
  std::vector<std::int64_t> right(3, 1);
  int steps = 0;
  bool ended = false;
  std::vector<double> returns(3, 0);
  while (!ended && steps < 200) {
    envs.step(right);
    ++steps;
    for (std::size_t i = 0; i < 3; ++i) {
      returns[i] += envs.rewards()[i];
      if (!envs.terminated()[i])
        continue;
      ended = true;
      cartpole_state fin{envs.final_obs()[4 * i], envs.final_obs()[4 * i + 1],
                         envs.final_obs()[4 * i + 2],
                         envs.final_obs()[4 * i + 3]};
      EXPECT_TRUE(std::abs(fin.theta) > 0.2 || std::abs(fin.x) > 2.3);
      // The new episode starts near upright.
      for (int k = 0; k < 4; ++k)
        EXPECT_LE(std::abs(envs.obs()[4 * i + k]), 0.05f);
      ASSERT_FALSE(envs.finished_returns().empty());
      EXPECT_DOUBLE_EQ(envs.finished_returns().front(), returns[i]);
    }
  }
  EXPECT_TRUE(ended);
  EXPECT_LT(steps, 100);
}

TEST(VecCartpole, RandomPolicyReturnsAbout22) {
  vec_cartpole envs{16, 11};
  std::mt19937_64 rng{3};
  std::bernoulli_distribution coin{0.5};
  std::vector<double> returns;
  std::vector<std::int64_t> actions(16);
  while (returns.size() < 2000) {
    for (auto& a : actions)
      a = coin(rng);
    envs.step(actions);
    for (auto r : envs.finished_returns())
      returns.push_back(r);
  }
  double mean = 0;
  for (auto r : returns)
    mean += r;
  mean /= static_cast<double>(returns.size());
  EXPECT_GT(mean, 19.0);
  EXPECT_LT(mean, 25.0);
}

} // namespace
