// The common RL options (dice::rl::run_config) and DQN's (dqn_cli) read
// from a command line: every option lands in its field, derived settings
// (hidden sizes, outputs, evaluation) follow them, and a bad value is named.

#include "dice/core/errc.hpp"
#include "dice/rl/run_config.hpp"
#include "dice/runtime/main.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using namespace dice::rl;

struct dqn_program : run_config {
  dqn_cli dqn;
  dqn_program() {
    dqn.add_to(custom_options_);
  }
};

// Parses `args` into `cfg`; -1 when the program would go on.
int parse(dice::run_config& cfg, std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  bool deterministic = false;
  return dice::detail::parse_options(cfg, static_cast<int>(argv.size()),
                                     argv.data(), deterministic);
}

TEST(RlRunConfig, ReadsEveryCommonOption) {
  run_config cfg;
  ASSERT_EQ(parse(cfg,
                  {"--seed",
                   "3",
                   "--out=runs/x",
                   "--resume",
                   "--max-env-steps",
                   "1000",
                   "--max-seconds=2.5",
                   "--stop-value",
                   "195",
                   "--eval-every=7",
                   "--eval-episodes",
                   "4",
                   "--quiet",
                   "--no-plot",
                   "--threads",
                   "2",
                   "--envs-per-collector=16",
                   "--steps-per-collect",
                   "8",
                   "--hidden",
                   "32",
                   "--layers=3",
                   "--checkpoint-every",
                   "5",
                   "--periodical",
                   "--model-period=2",
                   "--stale-toleration",
                   "6",
                   "--collectors",
                   "5",
                   "--on-env-error",
                   "stop"}),
            -1);
  EXPECT_EQ(cfg.seed, 3);
  EXPECT_EQ(cfg.out, "runs/x");
  EXPECT_TRUE(cfg.resume);
  EXPECT_EQ(cfg.max_env_steps, 1000);
  EXPECT_DOUBLE_EQ(cfg.max_seconds, 2.5);
  EXPECT_EQ(cfg.envs_per_collector, 16);
  EXPECT_EQ(cfg.steps_per_collect, 8);
  EXPECT_EQ(cfg.threads, 2);
  EXPECT_DOUBLE_EQ(cfg.checkpoint_every, 5);
  EXPECT_EQ(cfg.collectors, 5);
  EXPECT_TRUE(cfg.models.periodical);
  EXPECT_EQ(cfg.models.period, 2);
  EXPECT_EQ(cfg.models.stale_toleration, 6);
  EXPECT_EQ(cfg.hidden_sizes(), (std::vector<std::int64_t>{32, 32, 32}));
  EXPECT_EQ(cfg.env_options().on_error, dice::env_error_policy::stop);
  auto o = cfg.outputs("T");
  EXPECT_EQ(o.out, "runs/x");
  EXPECT_EQ(o.title, "T");
  EXPECT_DOUBLE_EQ(o.stop_value, 195);
  EXPECT_FALSE(o.progress);
  EXPECT_FALSE(o.plot);
  EXPECT_TRUE(o.resume);
  auto e = cfg.eval();
  EXPECT_EQ(e.every, 7);
  EXPECT_EQ(e.episodes, 4);
  EXPECT_EQ(e.seed, 3u);
  EXPECT_DOUBLE_EQ(e.stop_value, 195);
  EXPECT_FALSE(cfg.validate());
}

TEST(RlRunConfig, BadValuesAreNamed) {
  auto bad = [](std::vector<std::string> args, const std::string& name) {
    run_config cfg;
    ASSERT_EQ(parse(cfg, args), -1);
    auto err = cfg.validate();
    ASSERT_TRUE(err) << name;
    EXPECT_TRUE(dice::is(err, dice::errc::invalid_config));
    EXPECT_NE(dice::render(err).find(name), std::string::npos)
      << dice::render(err);
  };
  bad({"--envs-per-collector", "0"}, "--envs-per-collector");
  bad({"--steps-per-collect=0"}, "--steps-per-collect");
  bad({"--layers", "0"}, "--layers");
  bad({"--eval-episodes", "0"}, "--eval-episodes");
  bad({"--eval-every=0"}, "--eval-every");
  bad({"--threads", "0"}, "--threads");
  bad({"--stale-toleration", "0"}, "--stale-toleration");
  bad({"--on-env-error=ignore"}, "--on-env-error");
}

TEST(RlRunConfig, AnUnknownOptionStopsTheProgram) {
  run_config cfg;
  EXPECT_GT(parse(cfg, {"--sead", "3"}), 0);
}

TEST(DqnCli, ReadsDqnsOptionsWithTheNetworkSize) {
  dqn_program cfg;
  ASSERT_EQ(parse(cfg,
                  {"--nstep",
                   "5",
                   "--lr=0.0005",
                   "--batch-size",
                   "32",
                   "--buffer-size",
                   "1000",
                   "--learning-starts=100",
                   "--updates-per-step",
                   "0.25",
                   "--target-update-every",
                   "0",
                   "--tau=0.01",
                   "--no-double-dqn",
                   "--eps-decay-steps",
                   "500",
                   "--eps-end=0.1",
                   "--eps-decay",
                   "exponential",
                   "--hidden",
                   "16",
                   "--layers",
                   "1"}),
            -1);
  auto x = cfg.dqn.resolve(cfg);
  ASSERT_TRUE(x) << dice::render(x.error());
  EXPECT_EQ(x->nstep, 5);
  EXPECT_DOUBLE_EQ(x->lr, 0.0005);
  EXPECT_EQ(x->batch_size, 32);
  EXPECT_EQ(x->replay.capacity, 1000u);
  EXPECT_EQ(x->learning_starts, 100u);
  EXPECT_DOUBLE_EQ(x->updates_per_step, 0.25);
  EXPECT_EQ(x->target_update_every, 0);
  EXPECT_DOUBLE_EQ(x->tau, 0.01);
  EXPECT_FALSE(x->double_dqn);
  EXPECT_DOUBLE_EQ(x->epsilon.decay_steps, 500);
  EXPECT_DOUBLE_EQ(x->epsilon.end, 0.1);
  EXPECT_EQ(x->epsilon.decay, decay_kind::exponential);
  EXPECT_EQ(x->hidden, (std::vector<std::int64_t>{16}));
}

TEST(DqnCli, DefaultsSolveCartpoleAndBadValuesAreNamed) {
  dqn_program cfg;
  auto x = cfg.dqn.resolve(cfg);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->nstep, 3);
  EXPECT_TRUE(x->double_dqn);
  EXPECT_EQ(x->hidden, (std::vector<std::int64_t>{64, 64}));
  cfg.dqn.eps_decay = "sideways";
  auto y = cfg.dqn.resolve(cfg);
  ASSERT_FALSE(y);
  EXPECT_NE(dice::render(y.error()).find("--eps-decay"), std::string::npos);
  cfg.dqn.eps_decay = "linear";
  cfg.dqn.values.lr = -1;
  EXPECT_FALSE(cfg.dqn.resolve(cfg));
}

} // namespace
