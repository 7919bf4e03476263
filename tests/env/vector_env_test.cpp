// vector_env's batch semantics, step by step on scripted envs whose
// observation is (episode, step): gymnasium 1.x's same-step and next-step
// auto-reset, the final observation, TimeLimit truncation, seeding and the
// episode statistics.

#include "dice/env/vector_env.hpp"
#include "dice/envs/cartpole.hpp"

#include "scripted_env.hpp"
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

using dice::autoreset;
using dice::vector_env;
using dice::test::make_scripted;
using dice::test::row;
using dice::test::script;
using dice::test::scripted;
using dice::test::scripted_env;

namespace {

using obs2 = std::vector<float>;

TEST(VectorEnv, MakeRefusesBadBatches) {
  auto one = [](std::size_t) {
    return std::make_unique<scripted_env>();
  };
  auto none = vector_env::make(0, one);
  ASSERT_FALSE(none);
  EXPECT_TRUE(dice::is(none.error(), dice::errc::invalid_config));
  auto null = vector_env::make(2, [](std::size_t i) {
    return i == 1 ? nullptr : std::make_unique<scripted_env>();
  });
  ASSERT_FALSE(null);
  EXPECT_TRUE(dice::is(null.error(), dice::errc::invalid_config));
  auto throws = vector_env::make(2, [](std::size_t i) {
    if (i == 1)
      throw std::runtime_error("no such env");
    return std::make_unique<scripted_env>();
  });
  ASSERT_FALSE(throws);
  EXPECT_NE(dice::render(throws.error()).find("no such env"),
            std::string::npos);
}

TEST(VectorEnv, MakeRefusesEnvsWhoseSpacesDiffer) {
  auto actions = vector_env::make(3, [](std::size_t i) {
    script s;
    s.box_actions = i == 2;
    return std::make_unique<scripted_env>(s);
  });
  ASSERT_FALSE(actions);
  EXPECT_TRUE(dice::is(actions.error(), dice::errc::invalid_config));
  EXPECT_EQ(dice::render(actions.error()),
            "invalid_config: vector_env: env 2 (scripted) has action space "
            "Box(-1.0, 1.0, (2,), float32), env 0 has Discrete(3)");
  auto obs = vector_env::make(2, [](std::size_t i) {
    script s;
    s.obs_bound = i == 0 ? 1.0f : 2.0f;
    return std::make_unique<scripted_env>(s);
  });
  ASSERT_FALSE(obs);
  EXPECT_NE(dice::render(obs.error()).find("observation space"),
            std::string::npos);
}

TEST(VectorEnv, StepBeforeResetIsAnError) {
  auto v = make_scripted({script{}});
  std::vector<std::int64_t> a{0};
  auto err = v.step(a);
  EXPECT_TRUE(dice::is(err, dice::errc::env_failed));
  EXPECT_EQ(scripted(v, 0).step_calls, 0);
  EXPECT_EQ(v.step_count(), 0u);
}

TEST(VectorEnv, WrongActionKindOrCountIsRefusedWithoutStepping) {
  auto v = make_scripted({script{}, script{}});
  ASSERT_FALSE(v.reset());
  std::vector<float> floats{0, 0};
  EXPECT_TRUE(dice::is(v.step(floats), dice::errc::invalid_action));
  std::vector<std::int64_t> three{0, 0, 0};
  EXPECT_TRUE(dice::is(v.step(three), dice::errc::invalid_action));
  EXPECT_EQ(scripted(v, 0).step_calls, 0);
  EXPECT_EQ(v.errors(), 0u); // the caller's mistake, not an env's
  script box;
  box.box_actions = true;
  auto w = make_scripted({box});
  ASSERT_FALSE(w.reset());
  std::vector<std::int64_t> ints{0};
  EXPECT_TRUE(dice::is(w.step(ints), dice::errc::invalid_action));
  std::vector<float> one{0.5f}; // needs act_dim() = 2 values per env
  EXPECT_TRUE(dice::is(w.step(one), dice::errc::invalid_action));
  std::vector<float> two{0.5f, -0.5f};
  EXPECT_FALSE(w.step(two));
  EXPECT_EQ(w.rewards()[0], 10.5f); // 10 * step 1 + 0.5
}

TEST(VectorEnv, SameStepResetsInTheFinishingStep) {
  script a;
  a.terminate_at = 2;
  script b;
  b.terminate_at = 3;
  auto v = make_scripted({a, b});
  ASSERT_EQ(v.obs_dim(), 2u);
  ASSERT_FALSE(v.reset());
  EXPECT_EQ(row(v.obs(), 0), (obs2{1, 0}));
  EXPECT_EQ(v.obs(), v.final_obs());
  // Step 1: nobody finishes; reward = 10 * step + action.
  ASSERT_FALSE(v.step(std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(row(v.obs(), 0), (obs2{1, 1}));
  EXPECT_EQ(row(v.obs(), 1), (obs2{1, 1}));
  EXPECT_EQ(v.rewards(), (std::vector<float>{11, 12}));
  EXPECT_TRUE(v.episodes().empty());
  // Step 2: env 0 terminates and starts episode 2 at once.
  ASSERT_FALSE(v.step(std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(row(v.obs(), 0), (obs2{2, 0}));       // the new episode
  EXPECT_EQ(row(v.final_obs(), 0), (obs2{1, 2})); // the finished one's last
  EXPECT_EQ(row(v.obs(), 1), (obs2{1, 2}));
  EXPECT_EQ(row(v.final_obs(), 1), (obs2{1, 2}));
  EXPECT_EQ(v.rewards(), (std::vector<float>{20, 21})); // the finished step's
  EXPECT_EQ(v.terminated(), (std::vector<std::uint8_t>{1, 0}));
  EXPECT_EQ(v.truncated(), (std::vector<std::uint8_t>{0, 0}));
  ASSERT_EQ(v.episodes().size(), 1u);
  auto ep = v.episodes()[0];
  EXPECT_EQ(ep.env, 0u);
  EXPECT_EQ(ep.ret, 31.0); // 11 + 20
  EXPECT_EQ(ep.length, 2);
  EXPECT_TRUE(ep.terminated);
  EXPECT_FALSE(ep.failed);
  // Step 3: env 0 is in its new episode, env 1 terminates.
  ASSERT_FALSE(v.step(std::vector<std::int64_t>{2, 0}));
  EXPECT_EQ(row(v.obs(), 0), (obs2{2, 1}));
  EXPECT_EQ(v.rewards()[0], 12.0f);
  EXPECT_EQ(v.terminated(), (std::vector<std::uint8_t>{0, 1}));
  EXPECT_EQ(row(v.obs(), 1), (obs2{2, 0}));
  EXPECT_EQ(row(v.final_obs(), 1), (obs2{1, 3}));
  ASSERT_EQ(v.episodes().size(), 1u);
  EXPECT_EQ(v.episodes()[0].env, 1u);
  EXPECT_EQ(v.episodes()[0].ret, 63.0); // 12 + 21 + 30
  EXPECT_EQ(v.episodes()[0].length, 3);
  EXPECT_EQ(v.total_episodes(), 2u);
  EXPECT_EQ(v.total_steps(), 6u);
  EXPECT_EQ(v.step_count(), 3u);
  EXPECT_EQ(v.episode_lengths(), (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(v.episode_returns(), (std::vector<double>{12, 0}));
}

TEST(VectorEnv, NextStepResetsInTheFollowingStepAndIgnoresItsAction) {
  script a;
  a.terminate_at = 2;
  auto v = make_scripted({a, script{}}, {autoreset::next_step, {}});
  ASSERT_FALSE(v.reset());
  ASSERT_FALSE(v.step(std::vector<std::int64_t>{1, 1}));
  // Step 2: env 0 terminates; the step shows the terminal observation.
  ASSERT_FALSE(v.step(std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(row(v.obs(), 0), (obs2{1, 2}));
  EXPECT_EQ(row(v.final_obs(), 0), (obs2{1, 2}));
  EXPECT_EQ(v.terminated()[0], 1);
  EXPECT_EQ(v.rewards()[0], 22.0f);
  ASSERT_EQ(v.episodes().size(), 1u);
  EXPECT_EQ(v.episodes()[0].ret, 33.0); // 11 + 22
  EXPECT_EQ(scripted(v, 0).episode, 1);
  // Step 3: env 0 resets instead of stepping: reward 0, no flags.
  ASSERT_FALSE(v.step(std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(row(v.obs(), 0), (obs2{2, 0}));
  EXPECT_EQ(row(v.final_obs(), 0), (obs2{2, 0}));
  EXPECT_EQ(v.rewards()[0], 0.0f);
  EXPECT_EQ(v.terminated()[0], 0);
  EXPECT_EQ(v.truncated()[0], 0);
  EXPECT_EQ(scripted(v, 0).step_calls, 2); // the action was not applied
  EXPECT_TRUE(v.episodes().empty());
  EXPECT_EQ(row(v.obs(), 1), (obs2{1, 3})); // env 1 stepped as usual
  EXPECT_EQ(v.rewards()[1], 30.0f);
  // Step 4: the new episode's first step.
  ASSERT_FALSE(v.step(std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(row(v.obs(), 0), (obs2{2, 1}));
  EXPECT_EQ(v.rewards()[0], 11.0f);
  EXPECT_EQ(v.total_steps(), 7u); // 2 + 2 + 1 + 2: the reset step is none
}

TEST(VectorEnv, TimeLimitTruncatesAndMayCoincideWithTermination) {
  script limit;
  limit.time_limit = 3;
  script both;
  both.time_limit = 3;
  both.terminate_at = 3;
  script own;
  own.truncate_at = 2;
  auto v = make_scripted({limit, both, own});
  ASSERT_FALSE(v.reset());
  std::vector<std::int64_t> zeros(3, 0);
  ASSERT_FALSE(v.step(zeros));
  ASSERT_FALSE(v.step(zeros));
  // The env's own truncation at step 2.
  EXPECT_EQ(v.truncated(), (std::vector<std::uint8_t>{0, 0, 1}));
  ASSERT_EQ(v.episodes().size(), 1u);
  EXPECT_FALSE(v.episodes()[0].terminated);
  ASSERT_FALSE(v.step(zeros));
  EXPECT_EQ(v.truncated(), (std::vector<std::uint8_t>{1, 1, 0}));
  // gymnasium's TimeLimit sets truncated whether or not the step terminated.
  EXPECT_EQ(v.terminated(), (std::vector<std::uint8_t>{0, 1, 0}));
  ASSERT_EQ(v.episodes().size(), 2u);
  EXPECT_EQ(v.episodes()[0].env, 0u);
  EXPECT_FALSE(v.episodes()[0].terminated);
  EXPECT_EQ(v.episodes()[0].length, 3);
  EXPECT_EQ(v.episodes()[1].env, 1u);
  EXPECT_TRUE(v.episodes()[1].terminated);
  EXPECT_EQ(row(v.obs(), 0), (obs2{2, 0}));
  EXPECT_EQ(row(v.final_obs(), 0), (obs2{1, 3}));
}

TEST(VectorEnv, SeedsAreMixedPerEnvAndResetWithoutSeedPassesNone) {
  // SplitMix64's first output from state 0 (its reference sequence).
  EXPECT_EQ(dice::splitmix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(dice::env_seed(7, 2), dice::splitmix64(7 * 1000003 + 2));
  auto v = make_scripted({script{}, script{}, script{}});
  ASSERT_FALSE(v.reset(7));
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(scripted(v, i).seeds.back(), dice::env_seed(7, i));
  ASSERT_FALSE(v.reset());
  EXPECT_EQ(scripted(v, 1).seeds.back(), std::nullopt);
  // Auto-resets never reseed.
  script a;
  a.terminate_at = 1;
  auto w = make_scripted({a});
  ASSERT_FALSE(w.reset(3));
  ASSERT_FALSE(w.step(std::vector<std::int64_t>{0}));
  ASSERT_EQ(scripted(w, 0).seeds.size(), 2u);
  EXPECT_EQ(scripted(w, 0).seeds[1], std::nullopt);
}

// Two vectors of CartPoles stepped with the same actions.
std::vector<float> cartpole_trajectory(std::uint64_t seed, int steps,
                                       bool reset_again) {
  auto v = vector_env::make(4, [](std::size_t) {
    return std::make_unique<dice::envs::cartpole>();
  });
  EXPECT_TRUE(v);
  EXPECT_FALSE(v->reset(seed));
  if (reset_again) {
    EXPECT_FALSE(v->reset());
  }
  std::vector<float> all = v->obs();
  std::vector<std::int64_t> actions(4);
  for (int t = 0; t < steps; ++t) {
    for (std::size_t i = 0; i < 4; ++i)
      actions[i] = (t * 7 + static_cast<int>(i) * 3) % 5 < 2 ? 1 : 0;
    EXPECT_FALSE(v->step(actions));
    all.insert(all.end(), v->obs().begin(), v->obs().end());
    all.insert(all.end(), v->final_obs().begin(), v->final_obs().end());
  }
  return all;
}

TEST(VectorEnv, SeedingReproducesATrajectoryBitExactly) {
  auto x = cartpole_trajectory(42, 300, false);
  auto y = cartpole_trajectory(42, 300, false);
  ASSERT_EQ(x.size(), y.size());
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
  EXPECT_NE(x, cartpole_trajectory(43, 300, false));
  // A reset without a seed goes on with each env's generator: new states,
  // and the same ones again for the same history.
  auto z = cartpole_trajectory(42, 0, true);
  EXPECT_NE(z, cartpole_trajectory(42, 0, false));
  EXPECT_EQ(z, cartpole_trajectory(42, 0, true));
}

TEST(VectorEnv, ResetClearsRunningEpisodesAndPendingResets) {
  script a;
  a.terminate_at = 2;
  auto v = make_scripted({a}, {autoreset::next_step, {}});
  ASSERT_FALSE(v.reset());
  ASSERT_FALSE(v.step(std::vector<std::int64_t>{1}));
  ASSERT_FALSE(v.step(std::vector<std::int64_t>{1})); // terminal: reset due
  ASSERT_FALSE(v.reset());
  EXPECT_EQ(v.episode_lengths()[0], 0);
  EXPECT_EQ(v.episode_returns()[0], 0.0);
  EXPECT_EQ(v.terminated()[0], 0);
  // The next step steps the fresh episode instead of resetting again.
  ASSERT_FALSE(v.step(std::vector<std::int64_t>{1}));
  EXPECT_EQ(row(v.obs(), 0), (obs2{2, 1}));
  EXPECT_EQ(v.rewards()[0], 11.0f);
  EXPECT_EQ(scripted(v, 0).reset_calls, 2);
}

} // namespace
