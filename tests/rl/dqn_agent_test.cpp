// DQN's middleware (dice/rl/dqn_agent.hpp): the collector fills correct
// transition batches and counters from a scripted environment; the whole
// agent trains CartPole through dice::run_nodes, checkpoints, resumes from
// the saved steps and, as a learner group, counts every env step once.

#include "dice/envs/cartpole.hpp"
#include "dice/envs/pendulum.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/rl/dqn_agent.hpp"

#include "support/files.hpp"
#include "support/json.hpp"
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <set>

namespace {

namespace fs = std::filesystem;
using namespace dice::rl;
using dice::test::read_all;
using dice::test::scratch;

/// Observes [step in episode, env tag]; Discrete(3); reward = action + 1;
/// terminates after `length` steps.
class counting_env : public dice::env {
 public:
  counting_env(float tag, std::int64_t length) : tag_(tag), length_(length) {
    // nop
  }
  std::string name() const override {
    return "Counting";
  }
  dice::space observation_space() const override {
    return dice::space::box({2}, -1000.0f, 1000.0f);
  }
  dice::space action_space() const override {
    return dice::space::discrete(3);
  }
  void reset(std::optional<std::uint64_t>, float* obs) override {
    t_ = 0;
    obs[0] = 0;
    obs[1] = tag_;
  }
  dice::step_result step(const dice::action_view& a, float* obs) override {
    ++t_;
    obs[0] = static_cast<float>(t_);
    obs[1] = tag_;
    return {static_cast<float>(a.index + 1), t_ >= length_, false};
  }

 private:
  float tag_;
  std::int64_t length_;
  std::int64_t t_ = 0;
};

dqn_run_options counting_options(int nstep) {
  dqn_run_options o;
  o.make_env = [](std::size_t i) {
    return std::make_unique<counting_env>(static_cast<float>(i), 3);
  };
  o.envs_per_collector = 2;
  o.steps_per_collect = 5;
  o.algo.nstep = nstep;
  o.algo.gamma = 0.5f;
  o.algo.hidden = {8};
  // Always explore: every action is drawn, and the reward says which.
  o.algo.epsilon.start = o.algo.epsilon.end = 1.0;
  return o;
}

TEST(DqnCollector, FillsOneStampedBatchOfOneStepTransitions) {
  auto opts = counting_options(1);
  q_network net{2, 3, {8}};
  auto m = dqn_collector(net, opts, nullptr, 7, 1);
  ASSERT_TRUE(m) << dice::render(m.error());
  dice::context ctx;
  ctx.model_version = 4;
  m->before(ctx);
  // 2 envs x 5 steps; episodes of 3 steps: each env finished one.
  EXPECT_EQ(ctx.env_step, 10);
  EXPECT_EQ(ctx.env_episode, 2);
  ASSERT_EQ(ctx.trajectories.size(), 1u);
  EXPECT_EQ(ctx.trajectories[0].model_version, 4);
  EXPECT_EQ(ctx.trajectories[0].origin, 7u);
  auto batches = dice::unpack<transition_batch>(ctx.trajectories);
  ASSERT_TRUE(batches);
  ASSERT_EQ(batches->size(), 1u);
  auto& b = (*batches)[0];
  EXPECT_FALSE(validate(b));
  ASSERT_EQ(b.obs_dim, 2);
  ASSERT_EQ(b.size(), 10u);
  std::set<std::int64_t> actions;
  int terminal = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    auto t = b.obs[2 * i];
    // The reward names the action, the next observation is one step on in
    // the same env, the episode's last step does not bootstrap.
    EXPECT_EQ(b.reward[i], static_cast<float>(b.action[i] + 1));
    actions.insert(b.action[i]);
    EXPECT_EQ(b.next_obs[2 * i], t + 1);
    EXPECT_EQ(b.next_obs[2 * i + 1], b.obs[2 * i + 1]);
    if (t + 1 == 3) {
      EXPECT_EQ(b.discount[i], 0.0f);
      ++terminal;
    } else {
      EXPECT_EQ(b.discount[i], 0.5f);
    }
  }
  EXPECT_EQ(terminal, 2);
  EXPECT_EQ(actions, (std::set<std::int64_t>{0, 1, 2}));
  // The next iteration goes on counting.
  m->before(ctx);
  EXPECT_EQ(ctx.env_step, 20);
}

/// counting_env whose env 1 throws on its 2nd step of every episode.
class throwing_env : public counting_env {
 public:
  using counting_env::counting_env;
  dice::step_result step(const dice::action_view& a, float* obs) override {
    if (++n_ % 2 == 0)
      throw std::runtime_error("motor overheated");
    return counting_env::step(a, obs);
  }

 private:
  int n_ = 0;
};

dqn_run_options flaky_options(dice::env_error_policy on_error) {
  auto o = counting_options(1);
  o.make_env = [](std::size_t i) -> std::unique_ptr<dice::env> {
    if (i == 1)
      return std::make_unique<throwing_env>(1.0f, 3);
    return std::make_unique<counting_env>(0.0f, 3);
  };
  o.env.on_error = on_error;
  return o;
}

TEST(DqnCollector, AFailingEnvIsResetAndTheCollectorGoesOn) {
  q_network net{2, 3, {8}};
  auto m = dqn_collector(net, flaky_options(dice::env_error_policy::reset_env),
                         nullptr, 7, 1);
  ASSERT_TRUE(m) << dice::render(m.error());
  dice::context ctx;
  m->before(ctx);
  m->before(ctx);
  // Every step of both envs counts (a failed step ends its env's episode).
  EXPECT_EQ(ctx.env_step, 20);
  auto batches = dice::unpack<transition_batch>(ctx.trajectories);
  ASSERT_TRUE(batches);
  EXPECT_FALSE(validate((*batches)[0]));
}

TEST(DqnCollector, WithStopAFailingEnvFailsTheCollectorNamingTheEnv) {
  q_network net{2, 3, {8}};
  auto m = dqn_collector(net, flaky_options(dice::env_error_policy::stop),
                         nullptr, 7, 1);
  ASSERT_TRUE(m) << dice::render(m.error());
  dice::context ctx;
  try {
    m->before(ctx);
    FAIL() << "the collector went on after a failed env";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("motor overheated"), std::string::npos) << what;
    EXPECT_NE(what.find("env 1"), std::string::npos) << what;
  }
  // Nothing of the failed iteration was counted or sent.
  EXPECT_EQ(ctx.env_step, 0);
  EXPECT_TRUE(ctx.trajectories.empty());
}

TEST(DqnCollector, SumsNStepRewards) {
  auto opts = counting_options(2);
  q_network net{2, 3, {8}};
  auto m = dqn_collector(net, opts, nullptr, 2, 1);
  ASSERT_TRUE(m);
  dice::context ctx;
  m->before(ctx);
  auto batches = dice::unpack<transition_batch>(ctx.trajectories);
  ASSERT_TRUE(batches);
  auto& b = (*batches)[0];
  ASSERT_FALSE(b.empty());
  for (std::size_t i = 0; i < b.size(); ++i) {
    auto t = b.obs[2 * i];
    auto next = b.next_obs[2 * i];
    // Two steps ahead, or the episode's end (3) with no bootstrap.
    if (next == 3) {
      EXPECT_EQ(b.discount[i], 0.0f);
    } else {
      EXPECT_EQ(next, t + 2);
      EXPECT_EQ(b.discount[i], 0.25f);
    }
    // The first reward is the action's: reward = a + 1 + 0.5 * r2.
    auto rest = b.reward[i] - static_cast<float>(b.action[i] + 1);
    if (next - t == 2) {
      EXPECT_GE(rest, 0.5f);
      EXPECT_LE(rest, 1.5f);
    } else {
      EXPECT_EQ(rest, 0.0f);
    }
  }
}

TEST(DqnCollector, RefusesWhatDqnCannotPlay) {
  auto opts = counting_options(1);
  q_network wrong{4, 3, {8}};
  auto m = dqn_collector(wrong, opts, nullptr, 2, 1);
  ASSERT_FALSE(m);
  EXPECT_TRUE(dice::is(m.error(), dice::errc::model_mismatch));
  opts.make_env = [](std::size_t) {
    return std::make_unique<dice::envs::pendulum>();
  };
  q_network net{3, 3, {8}};
  EXPECT_FALSE(dqn_collector(net, opts, nullptr, 2, 1));
}

/// A short seeded CartPole run's options.
struct short_run : dqn_run_config {
  explicit short_run(const fs::path& out_dir) {
    make_env = [](std::size_t) {
      return std::make_unique<dice::envs::cartpole>();
    };
    title = "DQN test";
    collectors = 1;
    envs_per_collector = 4;
    seed = 2;
    out = out_dir.string();
    max_env_steps = 1500;
    max_seconds = 30;
    eval_every = 50;
    eval_episodes = 1;
    dqn.values.learning_starts = 200;
    quiet = true;
    no_plot = true;
  }
};

/// Runs the nodes `cfg` describes with use_dqn; returns the exit code and
/// the nodes' reports.
int run(caf::actor_system& sys, short_run& cfg,
        dice::run_result* result = nullptr) {
  auto saved = std::make_shared<dice::run_result>();
  auto mtx = std::make_shared<std::mutex>();
  auto rc = dice::run_nodes(sys, cfg, [&](dice::node_setup& n) {
    n.print_report(false);
    use_dqn(n, cfg);
    n.at_exit([saved, mtx](const dice::run_result& r) {
      std::lock_guard<std::mutex> guard{*mtx};
      *saved = r;
    });
  });
  if (result != nullptr)
    *result = *saved;
  return rc;
}

TEST(DqnAgent, TrainsCheckpointsAndResumesFromTheSavedSteps) {
  scratch out{"dice_rl_dqn_resume"};
  short_run cfg{out.dir};
  caf::actor_system sys{cfg};
  ASSERT_EQ(run(sys, cfg), 0);
  auto first = dice::test::json_in(read_all(out.dir / "summary.json"));
  ASSERT_TRUE(first.is_object());
  auto env_steps = first["env_steps"].get<std::int64_t>();
  EXPECT_GE(env_steps, 1500);
  EXPECT_GT(first["train_iters"].get<std::int64_t>(), 0);
  EXPECT_EQ(first["stop_reason"], "max_env_steps");
  EXPECT_GE(first["lag_min"].get<double>(), 0.0);
  // The checkpoint: weights PyTorch reads, the learner's state, counters.
  for (auto name : {"latest.pt", "learner.pt", "latest.json", "best.pt"})
    EXPECT_TRUE(fs::exists(out.dir / name)) << name;
  auto latest = dice::test::json_in(read_all(out.dir / "latest.json"));
  EXPECT_EQ(latest["env_step"], env_steps);
  EXPECT_EQ(latest["train_iter"], first["train_iters"]);
  q_network net{4, 2, {64, 64}};
  EXPECT_FALSE(load_q_network(net, (out.dir / "latest.pt").string()));
  // Every role wrote its metrics.
  std::set<std::string> roles;
  for (auto& j : dice::test::json_lines(read_all(out.dir / "metrics.jsonl")))
    roles.insert(j.value("role", ""));
  EXPECT_EQ(roles,
            (std::set<std::string>{"learner", "evaluator", "collector"}));
  // The second run starts where the first saved.
  cfg.resume = true;
  cfg.max_env_steps = env_steps + 500;
  ASSERT_EQ(run(sys, cfg), 0);
  auto second = dice::test::json_in(read_all(out.dir / "summary.json"));
  EXPECT_EQ(second["resumed_env_steps"], env_steps);
  EXPECT_GT(second["env_steps"].get<std::int64_t>(), env_steps);
  EXPECT_GE(second["train_iters"].get<std::int64_t>(),
            first["train_iters"].get<std::int64_t>());
}

TEST(DqnAgent, ResumeWithoutACheckpointIsAnError) {
  scratch out{"dice_rl_dqn_nockpt"};
  short_run cfg{out.dir};
  cfg.resume = true;
  caf::actor_system sys{cfg};
  EXPECT_NE(run(sys, cfg), 0);
}

TEST(DqnAgent, BadOptionsAreNamedBeforeAnythingRuns) {
  scratch out{"dice_rl_dqn_badopts"};
  short_run cfg{out.dir};
  cfg.reduce = "sideways";
  auto r = cfg.resolve();
  ASSERT_FALSE(r);
  EXPECT_NE(dice::render(r.error()).find("--reduce"), std::string::npos);
  cfg.reduce = "flat";
  cfg.dqn.eps_decay = "bogus";
  r = cfg.resolve();
  ASSERT_FALSE(r);
  EXPECT_NE(dice::render(r.error()).find("--eps-decay"), std::string::npos);
  cfg.dqn.eps_decay = "exponential";
  r = cfg.resolve();
  ASSERT_TRUE(r) << dice::render(r.error());
  EXPECT_EQ(r->reduce, dice::reduce_mode::flat);
  EXPECT_EQ(r->algo.epsilon.decay, decay_kind::exponential);
  cfg.make_env = nullptr;
  EXPECT_FALSE(cfg.resolve());
}

// Two learners in one process: every collector's steps reach exactly one
// learner and the group adds them up, so both learners end with the steps
// the collectors made, and the same gradient steps.
TEST(DqnAgent, LearnerGroupCountsEveryStepOnce) {
  scratch out{"dice_rl_dqn_group"};
  short_run cfg{out.dir};
  cfg.learners = 2;
  cfg.collectors = 2;
  cfg.max_env_steps = 3000;
  cfg.verify_every = 1;
  cfg.dqn.values.learning_starts = 400;
  dice::run_result result;
  caf::actor_system sys{cfg};
  ASSERT_EQ(run(sys, cfg, &result), 0);
  ASSERT_EQ(result.reports.size(), 5u);
  std::int64_t collected = 0;
  std::vector<const dice::node_report*> learners;
  for (auto& rep : result.reports) {
    if (rep.roles.has(dice::role::collector))
      collected += rep.env_step;
    if (rep.roles.has(dice::role::learner))
      learners.push_back(&rep);
  }
  ASSERT_EQ(learners.size(), 2u);
  EXPECT_GE(collected, 3000);
  for (auto* rep : learners) {
    EXPECT_EQ(rep->env_step, collected) << "node " << rep->node;
    EXPECT_EQ(rep->train_iter, learners[0]->train_iter);
  }
  EXPECT_GT(learners[0]->train_iter, 0);
  // Both ranks logged the same digests.
  EXPECT_EQ(read_all(out.dir / "digests-0.txt"),
            read_all(out.dir / "digests-1.txt"));
  EXPECT_FALSE(read_all(out.dir / "digests-0.txt").empty());
}

// A short run with the defaults clearly beats a random policy (~22), and
// its best checkpoint plays as well as its evaluation said.
TEST(DqnAgent, ShortInProcessRunBeatsARandomPolicy) {
  scratch out{"dice_rl_dqn_e2e"};
  short_run cfg{out.dir};
  cfg.collectors = 2;
  cfg.envs_per_collector = 8;
  cfg.seed = 1;
  cfg.stop_value = 300;
  cfg.max_env_steps = 60000;
  cfg.max_seconds = 45;
  cfg.eval_every = 100;
  cfg.eval_episodes = 10;
  cfg.dqn.values.learning_starts = 1000;
  caf::actor_system sys{cfg};
  ASSERT_EQ(run(sys, cfg), 0);
  auto sum = dice::test::json_in(read_all(out.dir / "summary.json"));
  EXPECT_GT(sum["best_eval"].get<double>(), 100.0) << sum.dump();
  EXPECT_GT(sum["evaluations"].get<std::int64_t>(), 0);
  EXPECT_LE(sum["lag_mean"].get<double>(), sum["lag_max"].get<double>());
  q_network net{4, 2, {64, 64}};
  ASSERT_FALSE(load_q_network(net, (out.dir / "best.pt").string()));
  auto returns = play_greedy(cfg.make_env, 10, 1,
                             [&](const torch::Tensor& obs) {
                               return net->forward(obs).argmax(1);
                             });
  ASSERT_TRUE(returns);
  double mean = 0;
  for (auto r : *returns)
    mean += r / 10;
  EXPECT_GT(mean, 50.0);
}

} // namespace
