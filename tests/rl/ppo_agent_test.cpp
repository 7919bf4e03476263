// PPO's middleware (dice/rl/ppo_agent.hpp) in real one-node pipelines: the
// collector's segments, end indices, episodes and counters for Discrete and
// Box actions, Box actions clipped only on the env's copy, and a collector
// feeding a trainer on one node (synchronous PPO) that learns a bandit.

#include "dice/rl/ppo_agent.hpp"
#include "dice/runtime/local_cluster.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <mutex>
#include <vector>

namespace {

using dice::rl::actor_critic;

/// Scripted: obs [t, env seed tag], Discrete(2) or Box(2) in [-1, 1];
/// reward 1 per step (Discrete) or the first clipped action value the env
/// got (Box); terminates after `len` steps. Records the Box actions it got.
class scripted_env : public dice::env {
 public:
  scripted_env(bool box, int len, std::shared_ptr<std::vector<float>> got)
    : box_(box), len_(len), got_(std::move(got)) {
    // nop
  }

  std::string name() const override {
    return "Scripted";
  }

  dice::space observation_space() const override {
    return dice::space::box({2}, -1000.0f, 1000.0f);
  }

  dice::space action_space() const override {
    return box_ ? dice::space::box({2}, -1.0f, 1.0f) : dice::space::discrete(2);
  }

  void reset(std::optional<std::uint64_t>, float* obs) override {
    t_ = 0;
    obs[0] = 0;
    obs[1] = 1;
  }

  dice::step_result step(const dice::action_view& a, float* obs) override {
    ++t_;
    obs[0] = static_cast<float>(t_);
    obs[1] = 1;
    dice::step_result r;
    r.reward = 1;
    if (box_) {
      r.reward = a.values[0];
      if (got_)
        got_->insert(got_->end(), a.values, a.values + a.size);
    }
    r.terminated = t_ >= len_;
    return r;
  }

 private:
  bool box_;
  int len_;
  int t_ = 0;
  std::shared_ptr<std::vector<float>> got_;
};

/// What a node's context held after each iteration.
struct captured {
  std::mutex mtx;
  std::vector<dice::context> iterations;
};

dice::middleware capture(std::shared_ptr<captured> c) {
  dice::middleware m;
  m.name = "capture";
  m.before = [c](dice::context& ctx) -> dice::step {
    std::lock_guard<std::mutex> guard{c->mtx};
    c->iterations.push_back(ctx);
    return dice::proceed;
  };
  return m;
}

class PpoAgent : public ::testing::Test {
 protected:
  PpoAgent() : sys_(cfg_) {
    // nop
  }

  /// Runs one node with `pipe` for `steps` iterations.
  void run_node(dice::pipeline pipe, dice::role r, std::int64_t steps) {
    std::vector<dice::local_node> nodes;
    dice::local_node n;
    n.id = 2;
    n.roles = {r};
    n.pipe = std::move(pipe);
    n.max_step = steps;
    nodes.push_back(std::move(n));
    dice::local_run_options o;
    o.print_reports = false;
    auto reports = dice::run_local(sys_, std::move(nodes), o);
    ASSERT_TRUE(reports) << dice::render(reports.error());
    ASSERT_EQ(reports->size(), 1u);
    EXPECT_FALSE(reports->front().failed) << reports->front().stop_reason;
  }

  dice::node_system_config cfg_;
  caf::actor_system sys_;
};

actor_critic make_net(bool box, double log_std = 0.0) {
  torch::manual_seed(3);
  scripted_env e{box, 1, nullptr};
  dice::rl::actor_critic_options o;
  o.hidden = {16};
  o.log_std_init = log_std;
  return *dice::rl::make_actor_critic(e.observation_space(), e.action_space(),
                                      o);
}

TEST_F(PpoAgent, CollectorFillsSegmentsEndIndicesAndEpisodes) {
  for (bool box : {false, true}) {
    SCOPED_TRACE(box ? "Box" : "Discrete");
    auto got = std::make_shared<std::vector<float>>();
    auto factory = [box, got](std::size_t) {
      return std::make_unique<scripted_env>(box, 3, got);
    };
    dice::rl::ppo_collector_options o;
    o.envs = 2;
    o.steps = 5;
    auto stats = std::make_shared<dice::rl::ppo_collector_stats>();
    auto cap = std::make_shared<captured>();
    dice::pipeline p;
    p.use(dice::rl::ppo_collector(make_net(box), factory, o, nullptr, stats))
      .use(capture(cap));
    run_node(std::move(p), dice::role::collector, 2);
    ASSERT_EQ(cap->iterations.size(), 2u);
    std::int64_t episodes = 0;
    for (std::size_t it = 0; it < 2; ++it) {
      auto& ctx = cap->iterations[it];
      // Two envs x 5 steps, env by env: ends at 4 and 9; counters grow.
      EXPECT_EQ(ctx.env_step, 10 * static_cast<std::int64_t>(it + 1));
      EXPECT_EQ(ctx.trajectory_end_idx, (std::vector<std::int64_t>{4, 9}));
      ASSERT_EQ(ctx.trajectories.size(), 1u);
      EXPECT_EQ(ctx.trajectories[0].count, 10u);
      EXPECT_EQ(ctx.trajectories[0].origin, 2u);
      // No model arrived: the initial weights (version 0) acted.
      EXPECT_EQ(ctx.trajectories[0].model_version, 0);
      auto steps = dice::rl::unpack_steps(ctx.trajectories[0]);
      ASSERT_TRUE(steps) << dice::render(steps.error());
      EXPECT_EQ(steps->layout.discrete(), !box);
      // Episodes of 3 steps run on across iterations: env 0's rows see t =
      // 0 1 2 0 1 in the first iteration and 2 0 1 2 0 in the second.
      std::vector<float> t0;
      for (std::size_t i = 0; i < 5; ++i)
        t0.push_back(steps->obs[i * 2]);
      auto want = it == 0 ? std::vector<float>{0, 1, 2, 0, 1}
                          : std::vector<float>{2, 0, 1, 2, 0};
      EXPECT_EQ(t0, want);
      for (std::size_t i = 0; i < 10; ++i) {
        EXPECT_EQ(steps->terminated[i], steps->obs[i * 2] == 2 ? 1 : 0);
        EXPECT_EQ(steps->next_obs[i * 2], steps->obs[i * 2] + 1);
        EXPECT_EQ(steps->has_value[i], 1);
      }
      auto eps = dice::unpack<dice::rl::episode_record>(ctx.episodes);
      ASSERT_TRUE(eps);
      for (auto& e : *eps)
        EXPECT_EQ(e.length, 3);
      episodes += static_cast<std::int64_t>(eps->size());
      EXPECT_EQ(ctx.env_episode, episodes);
    }
    // 10 steps per env: 3 finished episodes each.
    EXPECT_EQ(episodes, 6);
    EXPECT_EQ(stats->env_steps, 20);
    EXPECT_EQ(stats->episodes, 6);
    EXPECT_EQ(stats->iterations, 2);
    EXPECT_EQ(stats->env_errors, 0);
    if (!box) {
      for (auto r : stats->returns)
        EXPECT_EQ(r, 3.0);
    }
  }
}

TEST_F(PpoAgent, BoxActionsAreClippedOnlyOnTheEnvsCopy) {
  auto got = std::make_shared<std::vector<float>>();
  auto factory = [got](std::size_t) {
    return std::make_unique<scripted_env>(true, 1000, got);
  };
  dice::rl::ppo_collector_options o;
  o.envs = 1;
  o.steps = 64;
  auto cap = std::make_shared<captured>();
  dice::pipeline p;
  // std e^1: most samples fall outside [-1, 1].
  p.use(dice::rl::ppo_collector(make_net(true, 1.0), factory, o))
    .use(capture(cap));
  run_node(std::move(p), dice::role::collector, 1);
  ASSERT_EQ(cap->iterations.size(), 1u);
  auto steps = dice::rl::unpack_steps(cap->iterations[0].trajectories.at(0));
  ASSERT_TRUE(steps);
  ASSERT_EQ(steps->box_actions.size(), 128u);
  ASSERT_EQ(got->size(), 128u);
  int outside = 0;
  for (std::size_t i = 0; i < 128; ++i) {
    auto a = steps->box_actions[i];
    outside += std::abs(a) > 1 ? 1 : 0;
    EXPECT_EQ((*got)[i], std::max(-1.0f, std::min(1.0f, a)));
  }
  EXPECT_GT(outside, 10);
  // The reward is what the env got.
  for (std::size_t t = 0; t < 64; ++t)
    EXPECT_EQ(steps->reward[t], (*got)[t * 2]);
}

TEST_F(PpoAgent, AThrowingEnvIsCountedResetAndTheCollectorGoesOn) {
  // Env 1 throws at the 2nd step of each episode; env 0 never does.
  class flaky : public scripted_env {
   public:
    explicit flaky(bool throws)
      : scripted_env(false, 3, nullptr), throws_(throws) {}
    dice::step_result step(const dice::action_view& a, float* obs) override {
      if (throws_ && ++n_ % 2 == 0)
        throw std::runtime_error("flaky step");
      return scripted_env::step(a, obs);
    }

   private:
    bool throws_;
    int n_ = 0;
  };
  dice::rl::ppo_collector_options o;
  o.envs = 2;
  o.steps = 4;
  auto stats = std::make_shared<dice::rl::ppo_collector_stats>();
  dice::pipeline p;
  p.use(dice::rl::ppo_collector(
    make_net(false),
    [](std::size_t i) {
      return std::make_unique<flaky>(i == 1);
    },
    o, nullptr, stats));
  run_node(std::move(p), dice::role::collector, 2);
  EXPECT_EQ(stats->iterations, 2);
  EXPECT_EQ(stats->env_errors, 4);
  // Env 0's episodes (3 steps each) are whole; env 1's end at each failure.
  EXPECT_GE(stats->episodes, 2 + 4);
}

TEST_F(PpoAgent, CollectorAndTrainerOnOneNodeLearnABandit) {
  // One step per episode; Discrete action 1 pays 1, action 0 nothing.
  class bandit : public scripted_env {
   public:
    bandit() : scripted_env(false, 1, nullptr) {}
    dice::step_result step(const dice::action_view& a, float* obs) override {
      auto r = scripted_env::step(a, obs);
      r.reward = a.index == 1 ? 1.0f : 0.0f;
      return r;
    }
  };
  auto net = make_net(false);
  auto p1 = [&] {
    torch::NoGradGuard no_grad;
    auto obs = torch::tensor({0.0f, 1.0f}).reshape({1, 2});
    return net->categorical_policy(obs).log_probs().exp()[0][1].item<double>();
  };
  auto before = p1();
  EXPECT_NEAR(before, 0.5, 0.1);
  dice::rl::ppo_collector_options co;
  co.envs = 4;
  co.steps = 16;
  dice::rl::ppo_trainer_options to;
  to.ppo.minibatch = 32;
  to.ppo.epochs = 4;
  auto stats = std::make_shared<dice::rl::ppo_trainer_stats>();
  dice::pipeline p;
  p.use(dice::rl::ppo_collector(
          net,
          [](std::size_t) {
            return std::make_unique<bandit>();
          },
          co))
    .use(dice::rl::ppo_trainer(net, to, nullptr, stats));
  run_node(std::move(p), dice::role::learner, 30);
  EXPECT_EQ(stats->updates, 30);
  EXPECT_EQ(stats->intake.steps_received, 30 * 64);
  EXPECT_EQ(stats->episodes, 30 * 64);
  EXPECT_GT(stats->grad_steps, 0);
  // Every sample's lag is in the histogram (the collector's model never
  // changes version here, so lag grows with the learner's).
  EXPECT_EQ(stats->lags.count(), 30 * 64);
  auto after = p1();
  EXPECT_GT(after, 0.9) << "before " << before;
}

TEST(PpoAgentOptions, TakeTheRunConfigAndRefuseBadOptions) {
  dice::rl::run_config cfg;
  cfg.seed = 5;
  cfg.envs_per_collector = 3;
  cfg.steps_per_collect = 7;
  cfg.hidden = 32;
  cfg.layers = 1;
  dice::rl::ppo_cli cli;
  cli.values.vtrace = true;
  cli.log_std = -0.5;
  auto x = dice::rl::ppo_agent_options_of(cfg, cli, "t");
  ASSERT_TRUE(x) << dice::render(x.error());
  EXPECT_EQ(x->collect.envs, 3);
  EXPECT_EQ(x->collect.steps, 7);
  EXPECT_EQ(x->net.hidden, (std::vector<std::int64_t>{32}));
  EXPECT_EQ(x->net.log_std_init, -0.5);
  EXPECT_TRUE(x->train.ppo.vtrace);
  EXPECT_TRUE(x->eval.trained_to_solve);
  EXPECT_EQ(x->outputs.title, "t");
  cli.values.epochs = 0;
  EXPECT_FALSE(dice::rl::ppo_agent_options_of(cfg, cli, "t"));
  cli.values.epochs = 1;
  cfg.envs_per_collector = 0;
  EXPECT_FALSE(dice::rl::ppo_agent_options_of(cfg, cli, "t"));
}

} // namespace
