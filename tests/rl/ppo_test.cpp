// The PPO loss on hand-computed minibatches (with and without value
// clipping), the learner's V-trace at lag 0 against its GAE targets, stale
// data dropped by learn(), one update moving the policy the advantages'
// way for Discrete and Box actions, refused batches, and a short CartPole
// run. Moved from tests/ppo/learner_test.cpp; the collector is the test's
// (ppo_support.hpp) on the library's segment_builder.

#include "dice/core/errc.hpp"
#include "dice/rl/ppo.hpp"

#include "ppo_support.hpp"
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace dice::rl;

namespace {

// The evaluation a categorical network would give for these logits.
evaluation categorical_eval(const torch::Tensor& logits,
                            const torch::Tensor& actions,
                            const torch::Tensor& values) {
  categorical d{logits};
  return evaluation{d.log_prob(actions), d.entropy(), values};
}

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
  loss_inputs in;
  in.behaviour_logp = torch::tensor({std::log(0.25f), std::log(0.75f), 0.0f});
  in.advantages = torch::tensor({1.0f, -1.0f, -1.0f});
  in.value_targets = torch::tensor({1.5f, 1.0f, 0.0f});
  ppo_options o;
  o.clip = 0.2;
  o.vf_coef = 0.5;
  o.ent_coef = 0.01;
  auto t = ppo_loss(categorical_eval(logits, actions, values), in, o);
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

TEST(PpoLoss, HandComputedValueClipping) {
  // V = (2, 0, 1), V_old = (1, 1, 1.1), R = (3, 2, 1.05), c = 0.2:
  //   0: (2 - 3)^2 = 1;      clipped 1 + 0.2 = 1.2:   (1.2 - 3)^2 = 3.24
  //   1: (0 - 2)^2 = 4;      clipped 1 - 0.2 = 0.8:   (0.8 - 2)^2 = 1.44
  //   2: (1 - 1.05)^2 = .0025; |V - V_old| = 0.1 < c: clipped = V, the same
  // value = 0.5 mean(max) = 0.5 (3.24 + 4 + 0.0025) / 3 = 1.2070833
  // (unclipped: 0.5 (1 + 4 + 0.0025) / 3 = 0.8337500).
  auto values = torch::tensor({2.0f, 0.0f, 1.0f}).set_requires_grad(true);
  auto logits = torch::zeros({3, 2});
  auto actions = torch::tensor({0, 1, 0}, torch::kLong);
  loss_inputs in;
  in.behaviour_logp = torch::full({3}, std::log(0.5f));
  in.advantages = torch::zeros({3});
  in.value_targets = torch::tensor({3.0f, 2.0f, 1.05f});
  in.behaviour_values = torch::tensor({1.0f, 1.0f, 1.1f});
  ppo_options o;
  o.value_clip = 0.2;
  auto t = ppo_loss(categorical_eval(logits, actions, values), in, o);
  EXPECT_NEAR(t.value.item<double>(), 1.2070833, 1e-6);
  // Gradients: sample 0 takes the clipped branch, which is flat in V;
  // samples 1 and 2 the plain one, d/dV 0.5 (V - R)^2 / 3 = (V - R) / 3.
  t.value.backward();
  auto g = values.grad();
  EXPECT_NEAR(g[0].item<float>(), 0.0, 1e-6);
  EXPECT_NEAR(g[1].item<float>(), -2.0 / 3, 1e-6);
  EXPECT_NEAR(g[2].item<float>(), -0.05 / 3, 1e-6);
  o.value_clip = 0;
  auto plain = ppo_loss(categorical_eval(logits, actions, values.detach()), in,
                        o);
  EXPECT_NEAR(plain.value.item<double>(), 0.8337500, 1e-6);
}

TEST(PpoLoss, GaussianPolicy) {
  // One sample, mean 0, sigma 1, action 1 with mu's log-density ln N(1; 0,
  // 1) - ln 2 (so pi/mu = 2, clipped to 1.2 for A = 1).
  auto mean = torch::zeros({1, 1}).set_requires_grad(true);
  auto log_std = torch::zeros({1});
  diag_gaussian d{mean, log_std};
  auto a = torch::ones({1, 1});
  evaluation e{d.log_prob(a), d.entropy(), torch::zeros({1})};
  loss_inputs in;
  in.behaviour_logp = e.log_prob.detach() - std::log(2.0f);
  in.advantages = torch::ones({1});
  in.value_targets = torch::zeros({1});
  auto t = ppo_loss(e, in, ppo_options{});
  EXPECT_NEAR(t.policy.item<double>(), -1.2, 1e-6);
  // H of N(0, 1) = 1/2 + ln(2 pi)/2 = 1.4189385.
  EXPECT_NEAR(t.entropy.item<double>(), 1.4189385, 1e-6);
}

// One collector iteration (4 CartPoles x 32 steps) with `net` at `version`.
collected_segments collect_once(actor_critic& net, std::int64_t version,
                                std::uint64_t seed = 5) {
  auto c = test::make_cartpole_collector(4, seed);
  return c.collect(net, 32, 2, version);
}

actor_critic cartpole_net(std::int64_t hidden) {
  return actor_critic{test::cartpole_obs_space(), dice::space::discrete(2),
                      actor_critic_options{{hidden, hidden}, 0.0}};
}

TEST(Learner, VtraceAtLagZeroGivesTheOnPolicyTargets) {
  torch::manual_seed(1);
  auto net = cartpole_net(32);
  auto c = collect_once(net, 0);
  for (float lambda : {0.9f, 1.0f}) {
    ppo_options o;
    o.gamma = 0.98f;
    o.lambda = lambda;
    ppo_learner on_policy{net, o, 1};
    o.vtrace = true;
    ppo_learner corrected{net, o, 1};
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
  auto old_net = cartpole_net(32);
  auto c = collect_once(old_net, 0);
  // The learner moved on: a different network evaluates the same steps.
  torch::manual_seed(2);
  auto now = cartpole_net(32);
  ppo_options o;
  o.vtrace = true;
  ppo_learner learner{now, o, 1};
  auto b = learner.prepare(c.trajectories, c.trajectory_end_idx, 3);
  ASSERT_TRUE(b);
  double sum_abs = 0;
  for (auto x : b->log_rho)
    sum_abs += std::abs(x);
  EXPECT_GT(sum_abs, 0.0);
  o.vtrace = false;
  ppo_learner plain{now, o, 1};
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
  auto net = cartpole_net(32);
  ppo_options o;
  o.max_lag = 1;
  o.epochs = 1;
  o.minibatch = 64;
  ppo_learner learner{net, o, 1};
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

// log pi(a|x) of the batch's steps under the learner's network now.
torch::Tensor logp_of(ppo_learner& learner, const prepared_batch& b) {
  torch::NoGradGuard ng;
  auto& s = b.segments.steps;
  return learner.net()->evaluate(obs_tensor(s), action_tensor(s)).log_prob;
}

TEST(Learner, OneUpdateRaisesTheProbabilityOfPositiveAdvantageActions) {
  torch::manual_seed(4);
  auto net = cartpole_net(32);
  auto c = collect_once(net, 0);
  ppo_options o;
  o.normalize_adv = false;
  ppo_learner learner{net, o, 1};
  auto b = learner.prepare(c.trajectories, c.trajectory_end_idx, 0);
  ASSERT_TRUE(b);
  auto before = logp_of(learner, *b);
  ASSERT_TRUE(learner.train(*b));
  auto after = logp_of(learner, *b);
  auto adv = torch::tensor(b->advantages);
  // The surrogate's direction: sum A * (log pi' - log pi) > 0.
  EXPECT_GT((adv * (after - before)).sum().item<float>(), 0.0f);
}

TEST(Learner, OneBoxUpdateRaisesTheLogProbOfPositiveAdvantageActions) {
  torch::manual_seed(4);
  actor_critic net{test::reach_obs_space(), test::reach_act_space(),
                   actor_critic_options{{32, 32}, -0.5}};
  auto col = test::make_reach_collector(8, 3);
  auto c = col.collect(net, 16, 2, 0);
  ppo_options o;
  o.normalize_adv = false;
  o.epochs = 2;
  ppo_learner learner{net, o, 1};
  auto b = learner.prepare(c.trajectories, c.trajectory_end_idx, 0);
  ASSERT_TRUE(b) << dice::render(b.error());
  ASSERT_EQ(b->segments.size(), 128u);
  EXPECT_EQ(b->segments.steps.layout, (step_layout{3, 0, 2}));
  auto log_std = learner.net()->log_std.clone();
  auto before = logp_of(learner, *b);
  auto st = learner.train(*b);
  ASSERT_TRUE(st) << dice::render(st.error());
  EXPECT_GT(st->grad_steps, 0);
  auto after = logp_of(learner, *b);
  auto adv = torch::tensor(b->advantages);
  EXPECT_GT((adv * (after - before)).sum().item<float>(), 0.0f);
  // The state-independent log_std is trained too.
  EXPECT_FALSE(torch::equal(log_std, learner.net()->log_std));
}

TEST(Learner, ValueClippingClipsAroundTheBehaviourValues) {
  // An older network acted (its values are V_old); the learner's differ.
  // One gradient step on the whole batch reports the loss at the start,
  // 0.5 mean(max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)) with
  // V the learner's values at preparation.
  torch::manual_seed(1);
  auto old_net = cartpole_net(32);
  auto c = collect_once(old_net, 0);
  torch::manual_seed(2);
  auto now = cartpole_net(32);
  ppo_options o;
  o.value_clip = 0.02;
  o.epochs = 1;
  o.minibatch = 1 << 20;
  ppo_learner learner{now, o, 1};
  auto b = learner.prepare(c.trajectories, c.trajectory_end_idx, 0);
  ASSERT_TRUE(b);
  double clipped = 0, plain = 0;
  auto n = b->segments.size();
  for (std::size_t i = 0; i < n; ++i) {
    double v = b->inputs.value[i];
    double v_old = b->segments.steps.value[i];
    double r = b->value_targets[i];
    auto vc = v_old + std::clamp(v - v_old, -0.02, 0.02);
    plain += (v - r) * (v - r);
    clipped += std::max((v - r) * (v - r), (vc - r) * (vc - r));
  }
  clipped *= 0.5 / static_cast<double>(n);
  plain *= 0.5 / static_cast<double>(n);
  ASSERT_GT(clipped - plain, 1e-3); // the clip matters on this batch
  auto st = learner.train(*b);
  ASSERT_TRUE(st) << dice::render(st.error());
  EXPECT_EQ(st->grad_steps, 1);
  EXPECT_NEAR(st->value_loss, clipped, 1e-5);
}

TEST(Learner, RefusedBatchLeavesTheNetworkUntouched) {
  torch::manual_seed(1);
  auto net = cartpole_net(32);
  ppo_learner learner{net, ppo_options{}, 1};
  auto c = collect_once(net, 0);
  auto before = net->pi[4]->as<torch::nn::Linear>()->weight.clone();
  auto ends = c.trajectory_end_idx;
  ends.pop_back(); // the last steps end no trajectory
  auto r = learner.learn(c.trajectories, ends, 0);
  ASSERT_FALSE(r);
  EXPECT_TRUE(dice::is(r.error(), dice::errc::malformed_input));
  EXPECT_TRUE(
    torch::equal(before, net->pi[4]->as<torch::nn::Linear>()->weight));
  EXPECT_EQ(learner.grad_steps(), 0);
}

TEST(Learner, PayloadsOfAnotherLayoutAreDropped) {
  torch::manual_seed(1);
  auto net = cartpole_net(16);
  ppo_learner learner{net, ppo_options{}, 1};
  actor_critic box_net{test::reach_obs_space(), test::reach_act_space()};
  auto col = test::make_reach_collector(2, 1);
  auto c = col.collect(box_net, 4, 3, 0);
  auto st = learner.learn(c.trajectories, c.trajectory_end_idx, 0);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->samples, 0);
  EXPECT_EQ(learner.intake().payloads_rejected, 1);
  EXPECT_EQ(learner.grad_steps(), 0);
}

// Mean greedy return of `n` CartPole episodes.
double greedy_return(actor_critic& net, std::size_t n, std::uint64_t seed) {
  test::cartpoles envs{n, seed};
  std::vector<double> ret(n, 0.0);
  std::vector<bool> done(n, false);
  std::size_t left = n;
  while (left > 0) {
    auto x = torch::from_blob(envs.obs.data(),
                              {static_cast<std::int64_t>(n), 4});
    envs.step(net->mode(x).contiguous());
    for (std::size_t i = 0; i < n; ++i)
      if (!done[i]) {
        ret[i] += envs.rewards[i];
        if (envs.terminated[i] || envs.truncated[i]) {
          done[i] = true;
          --left;
        }
      }
  }
  double sum = 0;
  for (auto r : ret)
    sum += r;
  return sum / static_cast<double>(n);
}

// A smoke run, not a solve: 8 CartPoles x 32 steps per update, 25 000 env
// steps must lift the greedy return well above a random policy's (~22),
// as the demo's PlainLoop test asks of its loop.
TEST(Learner, ShortCartPoleRunBeatsARandomPolicy) {
  torch::set_num_threads(1);
  torch::manual_seed(1);
  auto net = cartpole_net(64);
  ppo_learner learner{net, ppo_options{}, 38};
  auto col = test::make_cartpole_collector(8, 7920);
  double best = 0;
  for (std::int64_t v = 0; v * 256 < 25000 && best < 200; ++v) {
    auto c = col.collect(learner.net(), 32, 1, v);
    auto st = learner.learn(c.trajectories, c.trajectory_end_idx, v);
    ASSERT_TRUE(st) << dice::render(st.error());
    if ((v + 1) % 4 == 0)
      best = std::max(best, greedy_return(learner.net(), 5, 1000 + v));
  }
  EXPECT_GT(best, 100.0);
  EXPECT_EQ(learner.lags().max(), 0);
  EXPECT_GT(learner.grad_steps(), 0);
}

} // namespace
