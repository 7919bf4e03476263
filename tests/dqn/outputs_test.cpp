// What dqn_cartpole writes to OUT is JSON that parses, whatever the text in
// it, and a resumed run reads back what the last run saved.

#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include "options.hpp"
#include "support/files.hpp"
#include "support/json.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

namespace {

namespace fs = std::filesystem;

using dice::test::read_all;
using dice::test::scratch;

dqn::run_options short_run(const fs::path& out) {
  dqn::run_options opts;
  opts.collectors = 1;
  opts.envs_per_collector = 4;
  opts.seed = 2;
  opts.out = out.string();
  opts.max_env_steps = 1500;
  opts.max_seconds = 30;
  opts.eval_every = 50;
  opts.eval_episodes = 1;
  opts.algo.learning_starts = 200;
  opts.progress = false;
  opts.plot = false;
  return opts;
}

} // namespace

TEST(Summary, StopReasonWithQuotesAndControlCharactersStaysValidJson) {
  // Before: the hand-written writer put the text between quotes as it was,
  // so this summary.json did not parse.
  dqn::run_summary sum;
  sum.node = 3;
  sum.roles = "collector";
  sum.stop_reason = "error: cannot read \"runs/a b\"\n\tthen \\ gave up";
  sum.seconds = 1.5;
  auto text = dqn::summary_json(sum);
  auto j = dice::test::json_in(text);
  ASSERT_TRUE(j.is_object()) << text;
  EXPECT_EQ(j["stop_reason"], sum.stop_reason);
  EXPECT_EQ(j["roles"], "collector");
  EXPECT_EQ(j["node"], 3);
  EXPECT_EQ(j["seconds"], 1.5);
  // Never evaluated: -infinity is not JSON, so it is written as null.
  EXPECT_TRUE(j["best_eval"].is_null()) << text;
}

TEST(Resume, ASecondRunStartsFromTheStepsTheFirstSaved) {
  scratch out{"dice_dqn_resume"};
  caf::actor_system_config cfg;
  dice::add_message_types(cfg);
  caf::actor_system sys{cfg};
  auto opts = short_run(out.dir);
  auto first = dqn::run_training(sys, opts);
  ASSERT_TRUE(first) << dice::render(first.error());
  ASSERT_GT(first->env_steps, 0);
  auto latest = dice::test::json_in(read_all(out.dir / "latest.json"));
  ASSERT_TRUE(latest.is_object());
  EXPECT_EQ(latest["env_step"], first->env_steps);
  EXPECT_EQ(latest["train_iter"], first->train_iters);
  opts.resume = true;
  opts.max_env_steps = first->env_steps + 500;
  auto second = dqn::run_training(sys, opts);
  ASSERT_TRUE(second) << dice::render(second.error());
  EXPECT_EQ(second->resumed_env_steps, first->env_steps);
  EXPECT_EQ(second->resumed_train_iters, first->train_iters);
  EXPECT_GT(second->env_steps, first->env_steps);
}
