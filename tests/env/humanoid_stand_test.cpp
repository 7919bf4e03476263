// The humanoid stand task on the humanoid of libmujoco-samples: spaces from
// the shipped model, bit-exact seeding, the fall and a vector of them.

#include "dice/core/errc.hpp"
#include "dice/env/vector_env.hpp"
#include "dice/mujoco/humanoid_stand.hpp"
#include "dice/mujoco/model.hpp"

#include <gtest/gtest.h>
#include <mujoco/mujoco.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

using namespace dice::envs;

namespace {

// The shipped model (scripts/install-deps installs libmujoco-samples).
mujoco_model humanoid() {
  static mujoco_model model = [] {
    auto m = load_mujoco_model(humanoid_model_path);
    return m ? *m : mujoco_model{};
  }();
  return model;
}

#define REQUIRE_HUMANOID()                                                     \
  if (!std::ifstream{humanoid_model_path})                                     \
    GTEST_SKIP() << humanoid_model_path << " missing (libmujoco-samples)";     \
  ASSERT_TRUE(humanoid())

TEST(HumanoidStand, SpacesComeFromTheShippedModel) {
  REQUIRE_HUMANOID();
  humanoid_stand env{humanoid(), 0};
  EXPECT_EQ(env.name(), "HumanoidStand-dice");
  // 27 DoF: a free joint (7 positions, 6 velocities) and 21 hinges.
  EXPECT_EQ(env.observation_space().to_string(),
            "Box(-inf, inf, (53,), float32)");
  EXPECT_EQ(env.action_space().to_string(), "Box(-1.0, 1.0, (21,), float32)");
  EXPECT_EQ(env.max_episode_steps(), 1000);
  EXPECT_EQ(humanoid()->opt.timestep, 0.005);
}

std::vector<float> run(humanoid_stand& env, std::uint64_t seed, int steps) {
  std::vector<float> out;
  std::vector<float> obs(53);
  env.reset(seed, obs.data());
  out.insert(out.end(), obs.begin(), obs.end());
  std::mt19937_64 rng{5};
  std::uniform_real_distribution<float> u{-1.0f, 1.0f};
  std::vector<float> a(21);
  for (int t = 0; t < steps; ++t) {
    for (auto& x : a)
      x = u(rng);
    auto r = env.step({0, a.data(), a.size()}, obs.data());
    out.insert(out.end(), obs.begin(), obs.end());
    out.push_back(r.reward);
    if (r.terminated)
      env.reset(std::nullopt, obs.data());
  }
  return out;
}

TEST(HumanoidStand, TheDefaultConstructorLoadsTheShippedModelOnce) {
  REQUIRE_HUMANOID();
  auto m = humanoid_model();
  ASSERT_TRUE(m) << dice::render(m.error());
  // Parsed once per process: every env steps the same mjModel.
  EXPECT_EQ(humanoid_model()->get(), m->get());
  humanoid_stand a, b{7};
  EXPECT_EQ(a.model().get(), m->get());
  EXPECT_EQ(b.model().get(), m->get());
  EXPECT_EQ(a.action_space().to_string(), "Box(-1.0, 1.0, (21,), float32)");
}

TEST(HumanoidStand, ASeedReproducesATrajectoryBitExactly) {
  REQUIRE_HUMANOID();
  humanoid_stand a{humanoid(), 1};
  humanoid_stand b{humanoid(), 2};
  auto ta = run(a, 8, 150);
  auto tb = run(b, 8, 150);
  ASSERT_EQ(ta.size(), tb.size());
  EXPECT_EQ(std::memcmp(ta.data(), tb.data(), ta.size() * sizeof(float)), 0);
  auto tc = run(b, 9, 150);
  EXPECT_NE(std::memcmp(ta.data(), tc.data(), ta.size() * sizeof(float)), 0);
}

TEST(HumanoidStand, FallsWithoutTorqueAndTheRewardFollowsTheHeight) {
  REQUIRE_HUMANOID();
  humanoid_stand env{humanoid(), 0};
  std::vector<float> obs(53);
  env.reset(3, obs.data());
  EXPECT_NEAR(env.torso_height(), 1.5, 0.011);
  std::vector<float> zero(21, 0.0f);
  dice::step_result r;
  int t = 0;
  do {
    r = env.step({0, zero.data(), zero.size()}, obs.data());
    ++t;
    auto z = env.torso_height();
    auto up = std::clamp((z - 0.8) / 0.6, 0.0, 1.0);
    ASSERT_NEAR(r.reward, up, 1e-6);
    ASSERT_EQ(obs[0], static_cast<float>(z)); // qpos[2] leads
    ASSERT_EQ(r.terminated, z < 0.8);
  } while (!r.terminated && t < 1000);
  EXPECT_TRUE(r.terminated) << "standing after 1000 steps without torque";
  // A full torque costs 0.1 per step.
  env.reset(3, obs.data());
  std::vector<float> full(21, 1.0f);
  r = env.step({0, full.data(), full.size()}, obs.data());
  EXPECT_NEAR(r.reward,
              std::clamp((env.torso_height() - 0.8) / 0.6, 0.0, 1.0) - 0.1,
              1e-6);
}

TEST(HumanoidStand, VectorStepsAndRefusesActionsOutsideTheBox) {
  REQUIRE_HUMANOID();
  auto m = humanoid();
  auto v = dice::vector_env::make(3, [m](std::size_t i) {
    return std::make_unique<humanoid_stand>(m, i);
  });
  ASSERT_TRUE(v) << dice::render(v.error());
  EXPECT_EQ(v->obs_dim(), 53u);
  EXPECT_EQ(v->act_dim(), 21u);
  ASSERT_FALSE(v->reset(2));
  std::vector<float> a(63, 0.0f);
  int t = 0;
  while (v->episodes().empty() && t < 1000) {
    ASSERT_FALSE(v->step(a));
    ++t;
  }
  ASSERT_FALSE(v->episodes().empty());
  EXPECT_TRUE(v->episodes()[0].terminated);
  a[21 + 4] = -1.25f;
  ASSERT_FALSE(v->step(a));
  auto text = dice::render(v->last_error());
  EXPECT_NE(text.find("env 1 (HumanoidStand-dice): action[4] = -1.25 outside "
                      "Box(-1.0, 1.0, (21,), float32)"),
            std::string::npos)
    << text;
}

TEST(HumanoidStand, ARootThatIsNotFreeIsRefused) {
  auto m = parse_mujoco_model("<mujoco><worldbody><body><joint name=\"j\" "
                              "type=\"hinge\"/><geom size=\"0.1\"/></body>"
                              "</worldbody><actuator><motor joint=\"j\"/>"
                              "</actuator></mujoco>",
                              "hinge.xml");
  ASSERT_TRUE(m) << dice::render(m.error());
  EXPECT_THROW(humanoid_stand(*m, 0), std::invalid_argument);
}

} // namespace
