// GAE across collectors: three collectors (2, 3 and 1 CartPoles stepped by
// a real policy network, T = 24) send one iteration each; the learner's GAE
// on their context merged with offset end indices (as dice's context
// exchanger merges it) must equal GAE computed per collector, and per env
// segment, on the same steps. With DI-engine's merge (end indices not
// offset) the learner refuses the batch, and GAE with DI-engine's
// traj_flag rule differs from the per-collector GAE. Moved from
// tests/ppo/merge_test.cpp without the actor cluster (whose exchanger
// offsets the indices exactly as merge_context does; tests/ppo keeps the
// cluster version).

#include "dice/core/errc.hpp"
#include "dice/rl/ppo.hpp"

#include "ppo_support.hpp"
#include <gtest/gtest.h>

#include <cmath>
#include <map>

using namespace dice::rl;

namespace {

class PpoMergeTest : public ::testing::Test {
 protected:
  static constexpr std::int64_t steps = 24;
  // Collectors 2, 3, 4 with 2, 3 and 1 envs.
  std::map<std::uint32_t, std::size_t> envs{{2, 2}, {3, 3}, {4, 1}};
  std::map<std::uint32_t, collected_segments> sent;

  ppo_options options() {
    ppo_options o;
    o.gamma = 0.97f;
    o.lambda = 0.9f;
    return o;
  }

  actor_critic make_net() {
    torch::manual_seed(3);
    return actor_critic{test::cartpole_obs_space(), dice::space::discrete(2),
                        actor_critic_options{{32, 32}, 0.0}};
  }

  // Every collector's first iteration with `net`.
  void collect_all(actor_critic& net) {
    for (auto& [node, n] : envs) {
      auto c = test::make_cartpole_collector(n, 100 + node);
      sent[node] = c.collect(net, steps, node, 0);
    }
  }
};

TEST_F(PpoMergeTest, LearnerGaeOnThreeCollectorsMergedEqualsPerCollector) {
  auto net = make_net();
  collect_all(net);
  std::vector<dice::payload> trajs;
  std::vector<std::int64_t> ends;
  for (auto& [node, c] : sent)
    merge_context(trajs, ends, c.trajectories, c.trajectory_end_idx);
  ASSERT_EQ(trajs.size(), 3u);
  ppo_learner learner{net, options(), 1};
  auto all = learner.prepare(trajs, ends, 0);
  ASSERT_TRUE(all) << dice::render(all.error());
  std::size_t total = 0;
  for (auto& [node, n] : envs)
    total += n * steps;
  ASSERT_EQ(all->segments.size(), total);
  EXPECT_EQ(all->segments.segments, 6);
  // The merged end indices are offset: one per env, increasing.
  ASSERT_EQ(ends.size(), 6u);
  EXPECT_EQ(ends.back(), static_cast<std::int64_t>(total) - 1);
  // Episodes ended inside segments, so the per-step flags matter too.
  std::int64_t terminations = 0;
  for (auto t : all->segments.steps.terminated)
    terminations += t;
  EXPECT_GT(terminations, 0);
  // Per collector, in the order merged.
  std::size_t at = 0;
  for (auto& [node, own] : sent) {
    ppo_learner solo{net, options(), 1};
    auto one = solo.prepare(own.trajectories, own.trajectory_end_idx, 0);
    ASSERT_TRUE(one) << dice::render(one.error());
    auto n = one->segments.size();
    ASSERT_EQ(n, envs[node] * steps);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(all->advantages[at + i], one->advantages[i], 1e-5)
        << "node " << node << " step " << i;
      ASSERT_NEAR(all->value_targets[at + i], one->value_targets[i], 1e-5);
    }
    // ... and per env segment alone: a list holding just that segment, its
    // last step the only segment end.
    auto& s = one->segments.steps;
    for (std::size_t e = 0; e < envs[node]; ++e) {
      return_inputs seg;
      for (std::size_t k = 0; k < steps; ++k) {
        auto i = e * steps + k;
        seg.value.push_back(one->inputs.value[i]);
        seg.next_value.push_back(one->inputs.next_value[i]);
        seg.reward.push_back(s.reward[i]);
        seg.terminated.push_back(s.terminated[i]);
        seg.traj_flag.push_back(k + 1 == steps || s.terminated[i]
                                || s.truncated[i]);
      }
      auto adv = gae(seg, options().gamma, options().lambda);
      ASSERT_TRUE(adv);
      for (std::size_t k = 0; k < steps; ++k)
        ASSERT_NEAR(all->advantages[at + e * steps + k], (*adv)[k], 1e-5)
          << "node " << node << " env " << e << " step " << k;
    }
    at += n;
  }
}

TEST_F(PpoMergeTest, DroppingTheEndIndexOffsetsBreaksTheComparison) {
  auto net = make_net();
  collect_all(net);
  std::vector<dice::payload> trajs, unused;
  std::vector<std::int64_t> offset, unoffset;
  for (auto& [node, c] : sent) {
    merge_context(trajs, offset, c.trajectories, c.trajectory_end_idx);
    // DI-engine's merge of the same deltas: end indices unchanged.
    merge_context(unused, unoffset, c.trajectories, c.trajectory_end_idx,
                  false);
  }
  ASSERT_NE(unoffset, offset);
  // dice's learner refuses such a batch with a clear error ...
  ppo_learner learner{net, options(), 1};
  auto refused = learner.prepare(trajs, unoffset, 0);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(dice::is(refused.error(), dice::errc::malformed_input));
  EXPECT_EQ(learner.intake().batches_rejected, 1);
  // ... and DI-engine's gae_estimator (traj_flag[end_idx] = True) computes
  // GAE across segment and collector boundaries.
  auto good = learner.prepare(trajs, offset, 0);
  ASSERT_TRUE(good);
  auto inputs = good->inputs;
  inputs.traj_flag = dingengine_flags(good->segments.steps, unoffset);
  auto wrong = gae(inputs, options().gamma, options().lambda);
  ASSERT_TRUE(wrong);
  std::size_t differ = 0;
  double worst = 0;
  for (std::size_t i = 0; i < wrong->size(); ++i) {
    auto d = std::abs((*wrong)[i] - good->advantages[i]);
    worst = std::max(worst, static_cast<double>(d));
    differ += d > 1e-3 ? 1 : 0;
  }
  EXPECT_GT(differ, 0u);
  EXPECT_GT(worst, 0.1);
}

} // namespace
