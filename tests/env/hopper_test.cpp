// Hopper-v4 on MuJoCo: gymnasium's spaces, reward and termination worked out
// from MuJoCo's own state, bit-exact seeding, a vector of hoppers (time limit,
// bad actions), and enough constraint rows for what a hopper does (the model
// loader's errors: mujoco_model_test.cpp).

#include "dice/env/vector_env.hpp"
#include "dice/mujoco/hopper.hpp"
#include "dice/mujoco/model.hpp"

#include "hopper_support.hpp"
#include <gtest/gtest.h>
#include <mujoco/mujoco.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace dice::envs;

namespace {

using namespace dice::test;

TEST(Hopper, SpacesAndLimitsAreGymnasiums) {
  hopper env;
  EXPECT_EQ(env.name(), "Hopper-v4");
  EXPECT_EQ(env.observation_space().to_string(),
            "Box(-inf, inf, (11,), float32)");
  EXPECT_EQ(env.action_space().to_string(), "Box(-1.0, 1.0, (3,), float32)");
  EXPECT_EQ(env.max_episode_steps(), 1000);
  EXPECT_EQ(env.model()->opt.timestep, 0.002);
  EXPECT_EQ(env.model()->opt.integrator, mjINT_RK4);
  EXPECT_NEAR(env.dt(), 0.008, 1e-15);
  EXPECT_EQ(env.model()->nq, 6);
  EXPECT_EQ(env.model()->nv, 6);
  EXPECT_EQ(env.model()->nu, 3);
  EXPECT_EQ(env.model()->qpos0[1], 1.25); // rootz's ref: the torso's height
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(env.model()->actuator_gear[6 * i], 200.0);
  // Masses from the capsules at density 1000: the torso is a cylinder of
  // 0.4 m and two half spheres of radius 0.05.
  auto r = 0.05;
  auto torso = 1000 * (M_PI * r * r * 0.4 + 4.0 / 3 * M_PI * r * r * r);
  EXPECT_NEAR(env.model()->body_mass[1], torso, 1e-9);
}

TEST(Hopper, ResetIsTheInitialPosePlusSmallNoise) {
  hopper env;
  float obs[obs_dim];
  env.reset(3, obs);
  const auto* d = env.data();
  // qpos0 = (0, 1.25, 0, 0, 0, 0), qvel = 0, each moved by at most 5e-3.
  double init[6] = {0, 1.25, 0, 0, 0, 0};
  bool moved = false;
  for (int i = 0; i < 6; ++i) {
    EXPECT_LE(std::abs(d->qpos[i] - init[i]), 5e-3) << i;
    EXPECT_LE(std::abs(d->qvel[i]), 5e-3) << i;
    moved = moved || d->qpos[i] != init[i];
  }
  EXPECT_TRUE(moved);
  // The observation drops x: qpos[1:] then qvel.
  for (int i = 1; i < 6; ++i)
    EXPECT_EQ(obs[i - 1], static_cast<float>(d->qpos[i]));
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(obs[5 + i], static_cast<float>(d->qvel[i]));
  EXPECT_TRUE(env.healthy());
}

TEST(Hopper, RewardIsForwardVelocityPlusHealthyMinusControlCost) {
  hopper env;
  float obs[obs_dim];
  env.reset(5, obs);
  float u[3] = {0.5f, -0.5f, 1.0f};
  auto x0 = env.data()->qpos[0];
  auto r = env.step(act(u), obs);
  auto x1 = env.data()->qpos[0];
  EXPECT_NE(x0, x1);
  EXPECT_EQ(env.data()->ctrl[2], 1.0);
  // 4 MuJoCo steps of 0.002 s.
  EXPECT_NEAR(env.data()->time, 0.008, 1e-12);
  auto expected = (x1 - x0) / 0.008 + 1.0 - 1e-3 * (0.25 + 0.25 + 1.0);
  EXPECT_FLOAT_EQ(r.reward, static_cast<float>(expected));
  EXPECT_FALSE(r.terminated);
  EXPECT_FALSE(r.truncated);
}

TEST(Hopper, VelocitiesAreClippedInTheObservation) {
  hopper env;
  float obs[obs_dim];
  env.reset(1, obs);
  env.data()->qvel[3] = 25.0;
  env.data()->qvel[4] = -40.0;
  env.observe(obs);
  EXPECT_EQ(obs[5 + 3], 10.0f);
  EXPECT_EQ(obs[5 + 4], -10.0f);
}

TEST(Hopper, ASeedReproducesATrajectoryBitExactly) {
  hopper a{1};
  hopper b{2}; // the constructor's seed is replaced by reset's
  auto ta = trajectory(a, 11, 400);
  auto tb = trajectory(b, 11, 400);
  EXPECT_TRUE(bit_equal(ta, tb));
  // The same env, reseeded after its own episodes, repeats it too.
  EXPECT_TRUE(bit_equal(trajectory(a, 11, 400), ta));
  // Another seed starts elsewhere and goes elsewhere.
  auto tc = trajectory(b, 12, 400);
  ASSERT_EQ(tc.size(), ta.size());
  EXPECT_FALSE(std::equal(ta.begin(), ta.begin() + obs_dim, tc.begin()));
  EXPECT_FALSE(bit_equal(ta, tc));
}

TEST(Hopper, FallsAndTerminatesWithoutTorque) {
  hopper env;
  float obs[obs_dim];
  env.reset(7, obs);
  float zero[3] = {0, 0, 0};
  int t = 0;
  dice::step_result r;
  do {
    auto x0 = env.data()->qpos[0];
    r = env.step(act(zero), obs);
    ++t;
    // The healthy reward is paid on the terminating step too (Hopper-v4).
    ASSERT_NEAR(r.reward, (env.data()->qpos[0] - x0) / 0.008 + 1.0, 1e-4);
    ASSERT_EQ(r.terminated, !env.healthy());
  } while (!r.terminated && t < 1000);
  ASSERT_TRUE(r.terminated) << "still standing after 1000 steps";
  EXPECT_FALSE(r.truncated);
  // Unhealthy: the torso is low or tilted (qpos[1] = obs[0], qpos[2] =
  // obs[1]) or some state left (-100, 100).
  auto low = obs[0] <= 0.7f;
  auto tilted = std::abs(obs[1]) >= 0.2f;
  auto wild = false;
  for (int i = 1; i < 6; ++i)
    wild = wild || std::abs(env.data()->qpos[i]) >= 100;
  for (int i = 0; i < 6; ++i)
    wild = wild || std::abs(env.data()->qvel[i]) >= 100;
  EXPECT_TRUE(low || tilted || wild) << "z " << obs[0] << " angle " << obs[1];
  // Without termination the same fall only loses the healthy reward.
  hopper_params p;
  p.terminate_when_unhealthy = false;
  hopper soft{0, p};
  soft.reset(7, obs);
  for (int i = 0; i < t; ++i)
    r = soft.step(act(zero), obs);
  EXPECT_FALSE(r.terminated);
  EXPECT_FALSE(soft.healthy());
  auto x0 = soft.data()->qpos[0];
  r = soft.step(act(zero), obs);
  EXPECT_NEAR(r.reward, (soft.data()->qpos[0] - x0) / 0.008, 1e-4);
}

TEST(Hopper, VectorTruncatesAt1000) {
  // Without termination every episode runs into the time limit.
  hopper_params p;
  p.terminate_when_unhealthy = false;
  auto v = dice::vector_env::make(2, [p](std::size_t i) {
    return std::make_unique<hopper>(i, p);
  });
  ASSERT_TRUE(v) << dice::render(v.error());
  EXPECT_EQ(v->obs_dim(), obs_dim);
  EXPECT_EQ(v->act_dim(), 3u);
  ASSERT_FALSE(v->reset(4));
  random_policy pi{1};
  std::vector<float> u(6);
  for (int t = 1; t <= 1000; ++t) {
    pi(u.data());
    pi(u.data() + 3);
    ASSERT_FALSE(v->step(u));
    ASSERT_EQ(v->truncated()[0], t == 1000 ? 1 : 0) << "step " << t;
    ASSERT_EQ(v->truncated()[1], t == 1000 ? 1 : 0) << "step " << t;
    ASSERT_EQ(v->terminated()[0], 0);
  }
  ASSERT_EQ(v->episodes().size(), 2u);
  EXPECT_EQ(v->episodes()[0].length, 1000);
  EXPECT_FALSE(v->episodes()[0].terminated);
}

TEST(Hopper, VectorEndsEpisodesThatFall) {
  auto v = dice::vector_env::make(4, [](std::size_t i) {
    return std::make_unique<hopper>(i);
  });
  ASSERT_TRUE(v);
  ASSERT_FALSE(v->reset(9));
  std::vector<float> zero(12, 0.0f);
  int t = 0;
  while (v->episodes().empty() && t < 1000) {
    ASSERT_FALSE(v->step(zero));
    ++t;
  }
  ASSERT_FALSE(v->episodes().empty());
  EXPECT_TRUE(v->episodes()[0].terminated);
  EXPECT_LT(v->episodes()[0].length, 1000);
}

TEST(Hopper, VectorRefusesNaNAndActionsOutsideTheBox) {
  auto v = dice::vector_env::make(2, [](std::size_t i) {
    return std::make_unique<hopper>(i);
  });
  ASSERT_TRUE(v);
  ASSERT_FALSE(v->reset(1));
  std::vector<float> bad{0.0f, 1.5f, 0.0f, 0.0f, 0.0f, 0.0f};
  // The default policy ends the env's episode as failed and goes on.
  ASSERT_FALSE(v->step(bad));
  EXPECT_EQ(dice::render(v->last_error()),
            "invalid_action: env 0 (Hopper-v4): action[1] = 1.5 outside "
            "Box(-1.0, 1.0, (3,), float32) at step 1 of its episode (vector "
            "step 1)");
  ASSERT_EQ(v->episodes().size(), 1u);
  EXPECT_TRUE(v->episodes()[0].failed);
  // Under env_error_policy::stop the step itself fails.
  dice::vector_env_options opts;
  opts.on_error = dice::env_error_policy::stop;
  auto w = dice::vector_env::make(
    2,
    [](std::size_t i) {
      return std::make_unique<hopper>(i);
    },
    opts);
  ASSERT_TRUE(w);
  ASSERT_FALSE(w->reset(1));
  std::vector<float> nan{0.0f, 0.0f, 0.0f, 0.0f, 0.0f, std::nanf("")};
  auto err = w->step(nan);
  ASSERT_TRUE(err);
  EXPECT_EQ(err, dice::errc::invalid_action);
  EXPECT_NE(dice::render(err).find("env 1 (Hopper-v4): action[2] = nan"),
            std::string::npos)
    << dice::render(err);
}

TEST(Hopper, TheEnvItselfRejectsNonFiniteActions) {
  hopper env;
  float obs[obs_dim];
  env.reset(0, obs);
  float u[3] = {0.0f, INFINITY, 0.0f};
  EXPECT_THROW(env.step(act(u), obs), std::invalid_argument);
  EXPECT_THROW(env.step({0, u, 2}, obs), std::invalid_argument);
}

TEST(Hopper, EnvsShareOneParsedModel) {
  hopper a;
  hopper b;
  EXPECT_EQ(a.model().get(), b.model().get());
  EXPECT_NE(a.data(), b.data());
}

TEST(Hopper, RandomActionsNeverRunOutOfContactOrConstraintRows) {
  // dice's MJCF sizes the constraint rows (njmax 100, nconmax 20) so that a
  // reset clears 0.45 MB instead of 10 MB; flailing and falling, the most
  // contacts a hopper makes, must still fit in every step.
  EXPECT_EQ(hopper_model()->njmax, 100);
  EXPECT_EQ(hopper_model()->nconmax, 20);
  hopper env{11};
  random_policy policy{12};
  float obs[obs_dim], a[3];
  int most_contacts = 0, most_rows = 0;
  env.reset(11, obs);
  for (int t = 0; t < 20000; ++t) {
    policy(a);
    auto r = env.step(act(a), obs); // throws when MuJoCo runs out
    most_contacts = std::max(most_contacts, env.data()->ncon);
    most_rows = std::max(most_rows, env.data()->nefc);
    if (r.terminated)
      env.reset(std::nullopt, obs);
  }
  EXPECT_GT(most_contacts, 0);
  EXPECT_LE(most_contacts, 20);
  EXPECT_LE(most_rows, 100);
  std::cout << "most contacts " << most_contacts << ", most rows " << most_rows
            << '\n';
}

} // namespace
