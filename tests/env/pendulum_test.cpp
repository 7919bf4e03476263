// Pendulum-v1 against steps worked out by hand from gymnasium's equations,
// its spaces and limits, and a vector of pendulums with Box actions.

#include "dice/env/vector_env.hpp"
#include "dice/envs/pendulum.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

using namespace dice::envs;

namespace {

constexpr double pi = 3.141592653589793;

dice::action_view torque(const float& u) {
  return {0, &u, 1};
}

TEST(Pendulum, OneStepMatchesTheEquations) {
  // th = 0.5, thdot = 0.2, u = 1, g = 10, m = l = 1, dt = 0.05:
  //   cost     = 0.5^2 + 0.1 * 0.2^2 + 0.001 * 1^2      = 0.255
  //   thdot'   = 0.2 + (3 * 10 / 2 * sin 0.5 + 3 * 1) * 0.05
  //            = 0.2 + (7.191383079063045 + 3) * 0.05   = 0.7095691539531523
  //   th'      = 0.5 + 0.7095691539531523 * 0.05        = 0.5354784576976577
  //   obs      = (cos th', sin th', thdot')
  //            = (0.8600245934470603, 0.5102525832038666, 0.70956915...)
  pendulum env;
  env.set_state({0.5, 0.2});
  float obs[3];
  float u = 1.0f;
  auto r = env.step(torque(u), obs);
  EXPECT_NEAR(r.reward, -0.255f, 1e-7f);
  EXPECT_FALSE(r.terminated);
  EXPECT_FALSE(r.truncated);
  EXPECT_NEAR(env.state().thdot, 0.7095691539531523, 1e-15);
  EXPECT_NEAR(env.state().th, 0.5354784576976577, 1e-15);
  EXPECT_EQ(obs[0], static_cast<float>(std::cos(env.state().th)));
  EXPECT_NEAR(obs[0], 0.8600245934470603, 1e-7);
  EXPECT_NEAR(obs[1], 0.5102525832038666, 1e-7);
  EXPECT_EQ(obs[2], static_cast<float>(0.7095691539531523));
}

TEST(Pendulum, SpeedIsClippedAndTheAngleNormalizedInTheCost) {
  // th = 4, thdot = -7.9, u = -2:
  //   normalized th = 4 - 2 pi                            = -2.2831853071795862
  //   cost   = 2.2831853071795862^2 + 0.1 * 7.9^2 + 0.001 * 4
  //          = 5.212935146920741 + 6.241 + 0.004          = 11.457935146920741
  //   thdot' = -7.9 + (15 sin 4 - 6) * 0.05 = -8.7676..., clipped to -8
  //   th'    = 4 - 8 * 0.05                               = 3.6
  pendulum_params p;
  pendulum_state s{4.0, -7.9};
  EXPECT_NEAR(pendulum_cost(s, -2.0, p), 11.457935146920741, 1e-12);
  auto next = pendulum_dynamics(s, -2.0, p);
  EXPECT_EQ(next.thdot, -8.0);
  EXPECT_NEAR(next.th, 3.6, 1e-15);
  // A torque beyond the bound acts as the bound (gymnasium clips it).
  EXPECT_EQ(pendulum_cost(s, -5.0, p), pendulum_cost(s, -2.0, p));
  EXPECT_EQ(pendulum_dynamics(s, -5.0, p).th, next.th);
}

TEST(Pendulum, WorstCostIsGymnasiums) {
  // pi^2 + 0.1 * 8^2 + 0.001 * 2^2 = 16.2736044 (gymnasium's documentation).
  EXPECT_NEAR(pendulum_cost({pi, 8.0}, 2.0, {}), 16.2736044, 1e-7);
  EXPECT_EQ(pendulum_cost({0, 0}, 0, {}), 0.0);
}

TEST(Pendulum, AngleNormalizeTakesTheDivisorsSignLikePython) {
  EXPECT_NEAR(angle_normalize(4.0), -2.2831853071795862, 1e-15);
  EXPECT_NEAR(angle_normalize(-4.0), 2.2831853071795862, 1e-15);
  EXPECT_NEAR(angle_normalize(3 * pi / 2), -pi / 2, 1e-15);
  EXPECT_NEAR(angle_normalize(-3 * pi / 2), pi / 2, 1e-15);
  EXPECT_NEAR(angle_normalize(pi), -pi, 1e-15); // [-pi, pi)
  EXPECT_NEAR(angle_normalize(0.25), 0.25, 1e-15);
}

TEST(Pendulum, GravityIsAParameter) {
  // th = pi/2, thdot = 0, u = 0: thdot' = 3 g / 2 * 0.05.
  pendulum_params p;
  p.g = 9.81;
  EXPECT_NEAR(pendulum_dynamics({pi / 2, 0}, 0, p).thdot, 0.73575, 1e-12);
  EXPECT_NEAR(pendulum_dynamics({pi / 2, 0}, 0, {}).thdot, 0.75, 1e-12);
}

TEST(Pendulum, SpacesAndLimitAreGymnasiums) {
  pendulum env;
  EXPECT_EQ(env.name(), "Pendulum-v1");
  EXPECT_EQ(env.observation_space().to_string(),
            "Box([-1. -1. -8.], [1. 1. 8.], (3,), float32)");
  EXPECT_EQ(env.action_space().to_string(), "Box(-2.0, 2.0, (1,), float32)");
  EXPECT_EQ(env.max_episode_steps(), 200);
}

TEST(Pendulum, ResetDrawsAngleAndSpeedUniformlyAndIsSeeded) {
  pendulum a;
  pendulum b;
  float oa[3];
  float ob[3];
  double th_min = 10;
  double th_max = -10;
  a.reset(9, oa);
  b.reset(9, ob);
  EXPECT_EQ(a.state().th, b.state().th);
  for (int i = 0; i < 2000; ++i) {
    a.reset(std::nullopt, oa);
    ASSERT_GE(a.state().th, -pi);
    ASSERT_LT(a.state().th, pi);
    ASSERT_GE(a.state().thdot, -1.0);
    ASSERT_LT(a.state().thdot, 1.0);
    th_min = std::min(th_min, a.state().th);
    th_max = std::max(th_max, a.state().th);
    EXPECT_EQ(oa[0], static_cast<float>(std::cos(a.state().th)));
    EXPECT_EQ(oa[2], static_cast<float>(a.state().thdot));
  }
  EXPECT_LT(th_min, -3.0);
  EXPECT_GT(th_max, 3.0);
}

TEST(Pendulum, VectorTruncatesAt200AndRefusesTorquesOutsideTheBox) {
  auto v = dice::vector_env::make(2, [](std::size_t) {
    return std::make_unique<pendulum>();
  });
  ASSERT_TRUE(v);
  EXPECT_EQ(v->act_dim(), 1u);
  EXPECT_EQ(v->obs_dim(), 3u);
  ASSERT_FALSE(v->reset(4));
  std::vector<float> u{0.5f, -2.0f};
  for (int t = 1; t <= 200; ++t) {
    ASSERT_FALSE(v->step(u));
    ASSERT_EQ(v->truncated()[0], t == 200 ? 1 : 0) << "step " << t;
    ASSERT_EQ(v->terminated()[1], 0);
    ASSERT_LE(v->rewards()[0], 0.0f);
    ASSERT_GE(v->rewards()[0], -16.2736044f);
  }
  ASSERT_EQ(v->episodes().size(), 2u);
  EXPECT_EQ(v->episodes()[1].length, 200);
  EXPECT_FALSE(v->episodes()[1].terminated);
  std::vector<float> bad{2.5f, 0.0f};
  ASSERT_FALSE(v->step(bad));
  EXPECT_EQ(dice::render(v->last_error()),
            "invalid_action: env 0 (Pendulum-v1): action[0] = 2.5 outside "
            "Box(-2.0, 2.0, (1,), float32) at step 1 of its episode (vector "
            "step 201)");
}

} // namespace
