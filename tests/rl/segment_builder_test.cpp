// The collector's bookkeeping: N envs fed step by step come out env by env
// with one end index per env, episodes carry over iterations, Box actions
// and missing values travel, missing arrays are error values.

#include "dice/core/errc.hpp"
#include "dice/rl/segment_builder.hpp"

#include <gtest/gtest.h>

using namespace dice::rl;

namespace {

// The arrays of one vector step, owned.
struct fake_step {
  std::vector<float> obs, next_obs, logp, value, reward, box;
  std::vector<std::int64_t> actions;
  std::vector<std::uint8_t> terminated, truncated;

  step_arrays view(bool values = true) const {
    step_arrays s;
    s.obs = obs.data();
    s.next_obs = next_obs.data();
    s.logp = logp.data();
    s.value = values ? value.data() : nullptr;
    s.reward = reward.data();
    s.discrete_actions = actions.empty() ? nullptr : actions.data();
    s.box_actions = box.empty() ? nullptr : box.data();
    s.terminated = terminated.data();
    s.truncated = truncated.data();
    return s;
  }
};

// Step t of `n` envs with 2-float observations: obs (10 t + i, -i), reward
// t + 1, action (t + i) % 2 (Discrete) or (t, -i) (Box).
fake_step step_at(std::size_t n, int t, bool box = false) {
  fake_step s;
  for (std::size_t i = 0; i < n; ++i) {
    auto fi = static_cast<float>(i);
    s.obs.push_back(10.0f * t + fi);
    s.obs.push_back(-fi);
    s.next_obs.push_back(10.0f * (t + 1) + fi);
    s.next_obs.push_back(-fi);
    s.logp.push_back(-0.1f * fi);
    s.value.push_back(0.5f * t);
    s.reward.push_back(static_cast<float>(t + 1));
    if (box) {
      s.box.push_back(static_cast<float>(t));
      s.box.push_back(-fi);
    } else {
      s.actions.push_back((t + static_cast<int>(i)) % 2);
    }
    s.terminated.push_back(0);
    s.truncated.push_back(0);
  }
  return s;
}

TEST(SegmentBuilder, LaysOutStepsEnvByEnv) {
  auto b = segment_builder::make(3, step_layout{2, 2, 0});
  ASSERT_TRUE(b) << dice::render(b.error());
  for (int t = 0; t < 4; ++t)
    ASSERT_FALSE(b->add(step_at(3, t).view()));
  EXPECT_EQ(b->steps(), 4);
  auto out = b->finish(7, 12);
  EXPECT_EQ(out.env_steps, 12);
  EXPECT_EQ(out.trajectory_end_idx, (std::vector<std::int64_t>{3, 7, 11}));
  EXPECT_TRUE(out.episodes.empty());
  ASSERT_EQ(out.trajectories.size(), 1u);
  auto& p = out.trajectories.front();
  EXPECT_EQ(p.count, 12u);
  EXPECT_EQ(p.origin, 7u);
  EXPECT_EQ(p.model_version, 12);
  auto cols = unpack_steps(p);
  ASSERT_TRUE(cols) << dice::render(cols.error());
  // Row i * T + t is env i's step t.
  for (int i = 0; i < 3; ++i)
    for (int t = 0; t < 4; ++t) {
      auto r = static_cast<std::size_t>(i * 4 + t);
      EXPECT_EQ(cols->obs[2 * r], 10.0f * t + i) << "row " << r;
      EXPECT_EQ(cols->obs[2 * r + 1], -static_cast<float>(i));
      EXPECT_EQ(cols->next_obs[2 * r], 10.0f * (t + 1) + i);
      EXPECT_EQ(cols->reward[r], static_cast<float>(t + 1));
      EXPECT_EQ(cols->discrete_actions[r], (t + i) % 2);
      EXPECT_FLOAT_EQ(cols->logp[r], -0.1f * i);
      EXPECT_EQ(cols->value[r], 0.5f * t);
      EXPECT_EQ(cols->has_value[r], 1);
    }
  // The next iteration starts empty.
  EXPECT_EQ(b->steps(), 0);
  auto none = b->finish(7, 13);
  EXPECT_TRUE(none.trajectories.empty());
  EXPECT_TRUE(none.trajectory_end_idx.empty());
  EXPECT_EQ(none.env_steps, 0);
}

TEST(SegmentBuilder, EpisodesCarryOverIterations) {
  auto b = segment_builder::make(2, step_layout{2, 2, 0});
  ASSERT_TRUE(b);
  // Iteration 1, steps 0..2: env 0 terminates at step 1 (return 1 + 2).
  for (int t = 0; t < 3; ++t) {
    auto s = step_at(2, t);
    if (t == 1)
      s.terminated[0] = 7; // any nonzero byte
    ASSERT_FALSE(b->add(s.view()));
  }
  auto one = b->finish(1, 0);
  EXPECT_EQ(one.finished_returns, (std::vector<double>{3.0}));
  auto cols = unpack_steps(one.trajectories.front());
  ASSERT_TRUE(cols);
  EXPECT_EQ(cols->terminated, (std::vector<std::uint8_t>{0, 1, 0, 0, 0, 0}));
  // Iteration 2, steps 3..4 (rewards 4, 5): env 1 is truncated at step 4
  // (return 1 + 2 + 3 + 4 + 5 = 15, 5 steps), env 0 terminates there too
  // (return 3 + 4 + 5 = 12, 3 steps).
  for (int t = 3; t < 5; ++t) {
    auto s = step_at(2, t);
    if (t == 4) {
      s.truncated[1] = 1;
      s.terminated[0] = 1;
    }
    ASSERT_FALSE(b->add(s.view()));
  }
  auto two = b->finish(1, 1);
  EXPECT_EQ(two.finished_returns, (std::vector<double>{12.0, 15.0}));
  ASSERT_EQ(two.episodes.size(), 1u);
  auto eps = dice::unpack<episode_record>(two.episodes.front());
  ASSERT_TRUE(eps);
  ASSERT_EQ(eps->size(), 2u);
  EXPECT_EQ((*eps)[0].length, 3);
  EXPECT_EQ((*eps)[1].length, 5);
  EXPECT_EQ(two.episodes.front().model_version, 1);
}

TEST(SegmentBuilder, BoxActionsAndNoValues) {
  auto b = segment_builder::make(2, step_layout{2, 0, 2});
  ASSERT_TRUE(b);
  for (int t = 0; t < 2; ++t)
    ASSERT_FALSE(b->add(step_at(2, t, true).view(false)));
  auto out = b->finish(3, 4);
  auto cols = unpack_steps(out.trajectories.front());
  ASSERT_TRUE(cols) << dice::render(cols.error());
  EXPECT_EQ(cols->layout, (step_layout{2, 0, 2}));
  // Env 0: actions (0, 0), (1, 0); env 1: (0, -1), (1, -1).
  EXPECT_EQ(cols->box_actions, (std::vector<float>{0, 0, 1, 0, 0, -1, 1, -1}));
  EXPECT_EQ(cols->has_value, (std::vector<std::uint8_t>{0, 0, 0, 0}));
}

TEST(SegmentBuilder, MissingArraysAreErrorValues) {
  auto b = segment_builder::make(2, step_layout{2, 2, 0});
  ASSERT_TRUE(b);
  auto s = step_at(2, 0, true); // Box actions for a Discrete layout
  auto err = b->add(s.view());
  EXPECT_TRUE(dice::is(err, dice::errc::invalid_config));
  auto v = step_at(2, 0).view();
  v.next_obs = nullptr;
  EXPECT_TRUE(b->add(v));
  EXPECT_EQ(b->steps(), 0);
  EXPECT_TRUE(b->finish(0, 0).trajectories.empty());
}

TEST(SegmentBuilder, MakeRefusesNoEnvsAndBadLayouts) {
  EXPECT_FALSE(segment_builder::make(0, step_layout{2, 2, 0}));
  EXPECT_FALSE(segment_builder::make(1, step_layout{0, 2, 0}));
  EXPECT_FALSE(segment_builder::make(1, step_layout{2, 2, 1}));
  EXPECT_FALSE(segment_builder::make(1, step_layout{2, 0, 0}));
}

} // namespace
