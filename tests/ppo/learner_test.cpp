// The PPO loss on a hand-computed minibatch, the learner's V-trace at lag 0
// against its GAE targets, stale data dropped by learn(), and a short
// reduced-threshold learning run of the plain loop.

#include "loop.hpp"
#include "ppo.hpp"
#include <gtest/gtest.h>

#include <cmath>

using namespace ppo;

namespace {

TEST(PpoLoss, HandComputedMinibatch) {
  // Three samples; pi from the logits, mu from behaviour_logp:
  //   0: pi(0) = 0.5,  mu = 0.25 -> ratio 2,   A = +1 -> clipped: 1.2
  //   1: pi(0) = 0.75, mu = 0.75 -> ratio 1,   A = -1 -> -1
  //   2: pi(1) = 0.5,  mu = 1    -> ratio 0.5, A = -1 -> clipped: -0.8
  // policy = -mean(1.2, -1, -0.8) = 0.2
  // value = 0.5 mean((0.5-1.5)^2, 0, 0) = 1/6
  // entropy = mean(ln 2, -(.75 ln .75 + .25 ln .25), ln 2) = 0.6495429
  // total = 0.2 + 0.5 / 6 - 0.01 * 0.6495429
  auto logits = torch::tensor({0.0f, 0.0f, std::log(3.0f), 0.0f, 0.0f, 0.0f})
                  .reshape({3, 2})
                  .set_requires_grad(true);
  auto values = torch::tensor({0.5f, 1.0f, 0.0f});
  auto actions = torch::tensor({0, 0, 1}, torch::kLong);
  auto blogp = torch::tensor({std::log(0.25f), std::log(0.75f), 0.0f});
  auto adv = torch::tensor({1.0f, -1.0f, -1.0f});
  auto targets = torch::tensor({1.5f, 1.0f, 0.0f});
  ppo_config cfg;
  cfg.clip = 0.2;
  cfg.vf_coef = 0.5;
  cfg.ent_coef = 0.01;
  auto t = ppo_loss(logits, values, actions, blogp, adv, targets, cfg);
  EXPECT_NEAR(t.policy.item<double>(), 0.2, 1e-6);
  EXPECT_NEAR(t.value.item<double>(), 1.0 / 6, 1e-6);
  EXPECT_NEAR(t.entropy.item<double>(), 0.6495429, 1e-6);
  EXPECT_NEAR(t.total.item<double>(), 0.2 + 0.5 / 6 - 0.006495429, 1e-6);
  EXPECT_NEAR(t.clip_fraction, 2.0 / 3, 1e-6);
  EXPECT_NEAR(t.approx_kl, 0.0, 1e-6);
  // Clipped samples give the policy no gradient; the unclipped one does.
  t.policy.backward();
  auto g = logits.grad();
  EXPECT_EQ(g[0].abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(g[2].abs().sum().item<float>(), 0.0f);
  // d(-(1/3) * ratio * A)/d logit_0 of sample 1 with A = -1:
  // (1/3) * ratio * (1 - pi(0)) = (1/3) * 0.25.
  EXPECT_NEAR(g[1][0].item<float>(), 0.25 / 3, 1e-6);
}

// One collector iteration with `net` at version `version`.
collected collect_once(actor_critic& net, std::int64_t version,
                       std::uint64_t seed = 5) {
  segment_collector c{4, 32, seed};
  return c.collect(net, 2, version);
}

TEST(Learner, VtraceAtLagZeroGivesTheOnPolicyTargets) {
  torch::manual_seed(1);
  actor_critic net{32};
  auto c = collect_once(net, 0);
  for (float lambda : {0.9f, 1.0f}) {
    ppo_config cfg;
    cfg.gamma = 0.98f;
    cfg.lambda = lambda;
    ppo_learner on_policy{net, cfg, 1};
    cfg.vtrace = true;
    ppo_learner corrected{net, cfg, 1};
    auto a = on_policy.prepare(c.trajectories, c.trajectory_end_idx, 0);
    auto b = corrected.prepare(c.trajectories, c.trajectory_end_idx, 0);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->value_targets.size(), 128u);
    for (std::size_t i = 0; i < a->value_targets.size(); ++i) {
      // The same network acted and evaluates: log(pi/mu) is 0 up to float
      // rounding of two forward passes.
      ASSERT_NEAR(b->log_rho[i], 0.0, 1e-5);
      // V-trace targets = lambda-returns = V + GAE.
      ASSERT_NEAR(b->value_targets[i], a->value_targets[i], 1e-4) << i;
      // With lambda = 1 the policy-gradient advantages are GAE's too.
      if (lambda == 1.0f) {
        ASSERT_NEAR(b->advantages[i], a->advantages[i], 1e-4) << i;
      }
    }
  }
}

TEST(Learner, VtraceCorrectsDataFromAnOlderPolicy) {
  torch::manual_seed(1);
  actor_critic old_net{32};
  auto c = collect_once(old_net, 0);
  // The learner moved on: a different network evaluates the same steps.
  torch::manual_seed(2);
  actor_critic now{32};
  ppo_config cfg;
  cfg.vtrace = true;
  ppo_learner learner{now, cfg, 1};
  auto b = learner.prepare(c.trajectories, c.trajectory_end_idx, 3);
  ASSERT_TRUE(b);
  double sum_abs = 0;
  for (auto x : b->log_rho)
    sum_abs += std::abs(x);
  EXPECT_GT(sum_abs, 0.0);
  cfg.vtrace = false;
  ppo_learner plain{now, cfg, 1};
  auto g = plain.prepare(c.trajectories, c.trajectory_end_idx, 3);
  ASSERT_TRUE(g);
  // Importance weights below 1 shrink the corrections: targets differ.
  double diff = 0;
  for (std::size_t i = 0; i < g->value_targets.size(); ++i)
    diff = std::max(
      diff,
      static_cast<double>(std::abs(g->value_targets[i] - b->value_targets[i])));
  EXPECT_GT(diff, 1e-3);
  EXPECT_EQ(learner.lags().mean(), 3.0);
}

TEST(Learner, LearnTrainsOnlyOnDataWithinMaxLag) {
  torch::manual_seed(1);
  actor_critic net{32};
  ppo_config cfg;
  cfg.max_lag = 1;
  cfg.epochs = 1;
  cfg.minibatch = 64;
  ppo_learner learner{net, cfg, 1};
  // Three collectors acted with versions 4, 6 and 7; the learner is at 7.
  std::vector<dice::payload> trajs;
  std::vector<std::int64_t> ends;
  std::uint64_t seed = 1;
  for (std::int64_t v : {4, 6, 7}) {
    auto c = collect_once(net, v, seed++);
    merge_context(trajs, ends, c.trajectories, c.trajectory_end_idx);
  }
  auto st = learner.learn(trajs, ends, 7);
  ASSERT_TRUE(st) << dice::render(st.error());
  EXPECT_EQ(st->samples, 256);  // versions 6 and 7
  EXPECT_EQ(st->grad_steps, 4); // 256 / 64, one epoch
  EXPECT_EQ(learner.intake().steps_dropped_stale, 128);
  EXPECT_EQ(learner.intake().segments_dropped_stale, 4);
  EXPECT_EQ(learner.lags().count(), 384);
  EXPECT_NEAR(learner.lags().mean(), (3 + 1 + 0) / 3.0, 1e-9);
  // A batch of nothing but stale data trains nothing.
  auto c = collect_once(net, 0, 9);
  auto none = learner.learn(c.trajectories, c.trajectory_end_idx, 7);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->samples, 0);
  EXPECT_EQ(none->grad_steps, 0);
  EXPECT_EQ(learner.intake().steps_dropped_stale, 256);
}

TEST(Learner, OneUpdateRaisesTheProbabilityOfPositiveAdvantageActions) {
  torch::manual_seed(4);
  actor_critic net{32};
  auto c = collect_once(net, 0);
  ppo_config cfg;
  cfg.normalize_adv = false;
  ppo_learner learner{net, cfg, 1};
  auto b = learner.prepare(c.trajectories, c.trajectory_end_idx, 0);
  ASSERT_TRUE(b);
  auto logp_of = [&] {
    torch::NoGradGuard ng;
    auto n = static_cast<std::int64_t>(b->segments.size());
    auto obs = torch::empty({n, 4});
    auto act = torch::empty({n}, torch::kLong);
    for (std::int64_t i = 0; i < n; ++i) {
      auto& s = b->segments.steps[static_cast<std::size_t>(i)];
      std::copy(s.obs, s.obs + 4, obs.data_ptr<float>() + 4 * i);
      act.data_ptr<std::int64_t>()[i] = s.action;
    }
    return torch::log_softmax(learner.net()->logits(obs), 1)
      .gather(1, act.unsqueeze(1))
      .squeeze(1);
  };
  auto before = logp_of();
  learner.train(*b);
  auto after = logp_of();
  auto adv = torch::tensor(b->advantages);
  // The surrogate's direction: sum A * (log pi' - log pi) > 0.
  EXPECT_GT((adv * (after - before)).sum().item<float>(), 0.0f);
}

TEST(Learner, RefusedBatchLeavesTheNetworkUntouched) {
  torch::manual_seed(1);
  actor_critic net{32};
  ppo_learner learner{net, ppo_config{}, 1};
  auto c = collect_once(net, 0);
  auto before = net->pi_out->weight.clone();
  auto ends = c.trajectory_end_idx;
  ends.pop_back(); // the last steps end no trajectory
  auto r = learner.learn(c.trajectories, ends, 0);
  ASSERT_FALSE(r);
  EXPECT_TRUE(torch::equal(before, net->pi_out->weight));
  EXPECT_EQ(learner.grad_steps(), 0);
}

// A smoke run, not a solve: a short env-step budget must lift the greedy
// return well above a random policy's (~22). The full target (475 well
// under 2 minutes) is measured with `ppo_cartpole --seeds=5`.
TEST(PlainLoop, ShortRunBeatsARandomPolicy) {
  torch::set_num_threads(1);
  loop_options opts;
  opts.seed = 1;
  opts.max_seconds = 0;
  opts.max_env_steps = 25000;
  opts.stop_value = 200;
  opts.eval_episodes = 5;
  auto r = run_loop(opts);
  EXPECT_GT(r.best_eval, 100.0) << to_json(r);
  EXPECT_EQ(r.lags.max(), 0);
  EXPECT_EQ(r.intake.steps_dropped_stale, 0);
  EXPECT_GT(r.grad_steps, 0);
}

} // namespace
