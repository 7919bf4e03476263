// GAE across the cluster: three collectors (role actors stepping real
// CartPoles with a real policy network) send segments through the real
// context exchanger; the learner's GAE on the merged context must equal GAE
// computed per collector, and per env segment, on the same steps. With
// DI-engine's merge (end indices not offset) the learner refuses the batch,
// and GAE with DI-engine's traj_flag rule differs from the per-collector GAE.
// Deterministic: CAF's test coordinator and a fake clock.

#include "dice/exchangers/context_exchanger.hpp"

#include "ppo.hpp"
#include "support/deterministic.hpp"
#include "support/probes.hpp"

#include <chrono>
#include <map>

using namespace std::chrono_literals;
using namespace dice;

namespace {

using sent_log = std::map<std::uint32_t, std::vector<ppo::collected>>;

/// A PPO collector's work: one segment per env per iteration, as context.
middleware ppo_collect(std::uint32_t node, std::size_t envs, std::int64_t t,
                       ppo::actor_critic net, std::shared_ptr<sent_log> sent) {
  auto col = std::make_shared<ppo::segment_collector>(envs, t, 100 + node);
  middleware m;
  m.name = "collect";
  m.before = [=](context& ctx) mutable -> step {
    auto out = col->collect(net, node, ctx.model_version);
    ctx.env_step += out.env_steps;
    ctx.env_episode += static_cast<std::int64_t>(out.finished_returns.size());
    ctx.trajectories = out.trajectories;
    ctx.episodes = out.episodes;
    ctx.trajectory_end_idx = out.trajectory_end_idx;
    (*sent)[node].push_back(std::move(out));
    return proceed;
  };
  return m;
}

class PpoMergeTest : public dice::test::deterministic {
 protected:
  // Collectors 2, 3, 4 with 2, 3 and 1 envs, T = 24 steps.
  static constexpr std::int64_t steps = 24;
  std::map<std::uint32_t, std::size_t> envs{{2, 2}, {3, 3}, {4, 1}};

  ppo::ppo_config cfg() {
    ppo::ppo_config c;
    c.gamma = 0.97f;
    c.lambda = 0.9f;
    return c;
  }

  // Runs the cluster for one learner iteration and returns what it merged.
  dice::test::seen run_cluster(ppo::actor_critic net,
                               std::shared_ptr<sent_log> sent) {
    auto router = spawn_router();
    auto llog = std::make_shared<std::vector<dice::test::seen>>();
    // The learner is busy for 1 s before it merges, so all three
    // collectors' deltas wait in its exchanger when it does.
    pipeline lp;
    lp.use(dice::test::busy_for(1s))
      .use(context_exchanger())
      .use(dice::test::probe(llog));
    auto learner = spawn_role(router, 0, {role::learner}, std::move(lp), 1);
    std::vector<role_actor> cs;
    for (auto& [node, n] : envs) {
      pipeline p;
      p.use(context_exchanger()).use(ppo_collect(node, n, steps, net, sent));
      cs.push_back(spawn_role(router, node, {role::collector}, std::move(p)));
    }
    start({learner, cs[0], cs[1], cs[2]});
    EXPECT_TRUE(llog->empty());
    advance(1s);
    run();
    EXPECT_EQ(llog->size(), 1u);
    return llog->empty() ? dice::test::seen{} : llog->front();
  }
};

TEST_F(PpoMergeTest, LearnerGaeOnThreeCollectorsMergedEqualsPerCollector) {
  torch::manual_seed(3);
  ppo::actor_critic net{32};
  auto sent = std::make_shared<sent_log>();
  auto merged = run_cluster(net, sent);
  // All three collectors' first iteration, merged in one learner iteration.
  ASSERT_EQ(merged.trajectories.size(), 3u);
  ppo::ppo_learner learner{net, cfg(), 1};
  auto all = learner.prepare(merged.trajectories, merged.trajectory_end_idx, 0);
  ASSERT_TRUE(all) << dice::render(all.error());
  std::size_t total = 0;
  for (auto& [node, n] : envs)
    total += n * steps;
  ASSERT_EQ(all->segments.size(), total);
  EXPECT_EQ(all->segments.segments, 6);
  // The end indices the learner got are offset: one per env, increasing.
  ASSERT_EQ(merged.trajectory_end_idx.size(), 6u);
  EXPECT_EQ(merged.trajectory_end_idx.back(),
            static_cast<std::int64_t>(total) - 1);
  // Episodes ended inside segments, so the per-step flags matter too.
  std::int64_t terminations = 0;
  for (auto& s : all->segments.steps)
    terminations += s.terminated;
  EXPECT_GT(terminations, 0);
  // Per collector, in the order the learner merged them.
  std::size_t at = 0;
  for (auto& p : merged.trajectories) {
    auto& own = (*sent)[p.origin].front();
    ppo::ppo_learner solo{net, cfg(), 1};
    auto one = solo.prepare(own.trajectories, own.trajectory_end_idx, 0);
    ASSERT_TRUE(one) << dice::render(one.error());
    auto n = one->segments.size();
    ASSERT_EQ(n, envs[p.origin] * steps);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(all->advantages[at + i], one->advantages[i], 1e-5)
        << "node " << p.origin << " step " << i;
      ASSERT_NEAR(all->value_targets[at + i], one->value_targets[i], 1e-5);
    }
    // ... and per env segment alone: a list holding just that segment, its
    // last step the only segment end.
    for (std::size_t e = 0; e < envs[p.origin]; ++e) {
      ppo::return_inputs seg;
      for (std::size_t k = 0; k < steps; ++k) {
        auto i = e * steps + k;
        auto& s = one->segments.steps[i];
        seg.value.push_back(one->inputs.value[i]);
        seg.next_value.push_back(one->inputs.next_value[i]);
        seg.reward.push_back(s.reward);
        seg.terminated.push_back(s.terminated);
        seg.traj_flag.push_back(k + 1 == steps || s.terminated || s.truncated);
      }
      auto adv = ppo::gae(seg, cfg().gamma, cfg().lambda);
      for (std::size_t k = 0; k < steps; ++k)
        ASSERT_NEAR(all->advantages[at + e * steps + k], adv[k], 1e-5)
          << "node " << p.origin << " env " << e << " step " << k;
    }
    at += n;
  }
}

TEST_F(PpoMergeTest, DroppingTheEndIndexOffsetsBreaksTheComparison) {
  torch::manual_seed(3);
  ppo::actor_critic net{32};
  auto sent = std::make_shared<sent_log>();
  auto merged = run_cluster(net, sent);
  ASSERT_EQ(merged.trajectories.size(), 3u);
  // DI-engine's merge of the same deltas in the same order: payloads
  // concatenated, end indices extended unchanged.
  std::vector<dice::payload> trajs;
  std::vector<std::int64_t> unoffset;
  for (auto& p : merged.trajectories) {
    auto& own = (*sent)[p.origin].front();
    ppo::merge_context(trajs, unoffset, own.trajectories,
                       own.trajectory_end_idx, false);
  }
  ASSERT_NE(unoffset, merged.trajectory_end_idx);
  // dice's learner refuses such a batch with a clear error ...
  ppo::ppo_learner learner{net, cfg(), 1};
  auto refused = learner.prepare(trajs, unoffset, 0);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(dice::is(refused.error(), dice::errc::malformed_input));
  EXPECT_EQ(learner.intake().batches_rejected, 1);
  // ... and DI-engine's gae_estimator (traj_flag[end_idx] = True) computes
  // GAE across segment and collector boundaries.
  auto good = learner.prepare(merged.trajectories, merged.trajectory_end_idx,
                              0);
  ASSERT_TRUE(good);
  auto inputs = good->inputs;
  inputs.traj_flag = ppo::dingengine_flags(good->segments.steps, unoffset);
  auto wrong = ppo::gae(inputs, cfg().gamma, cfg().lambda);
  std::size_t differ = 0;
  double worst = 0;
  for (std::size_t i = 0; i < wrong.size(); ++i) {
    auto d = std::abs(wrong[i] - good->advantages[i]);
    worst = std::max(worst, static_cast<double>(d));
    differ += d > 1e-3 ? 1 : 0;
  }
  EXPECT_GT(differ, 0u);
  EXPECT_GT(worst, 0.1);
}

} // namespace
