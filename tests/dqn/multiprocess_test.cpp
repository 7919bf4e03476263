// DQN on CartPole as 3 processes (dice-launch --workers 3: learner,
// evaluator, one collector): a short seeded run with a budget must clearly
// beat a random policy (~22), and each node writes its own outputs.

#include "support/child_process.hpp"
#include "support/files.hpp"
#include "support/launch.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using dice::test::child_process;

using dice::test::bin_dir;

using dice::test::read_all;
using dice::test::scratch;

TEST(Multiprocess, ThreeProcessesBeatARandomPolicy) {
  scratch out{"dice_dqn_mp"};
  auto t0 = std::chrono::steady_clock::now();
  // The learner stops the run at 35 s or 60k env steps at the latest; the
  // evaluator stops it at a mean return of 300.
  child_process launch{{bin_dir + "dice-launch", "--workers", "3", "--",
                        bin_dir + "dqn_cartpole", "--seed=1",
                        "--stop-value=300", "--max-env-steps=60000",
                        "--max-seconds=35", "--envs-per-collector=16",
                        "--quiet", "--no-plot", "--out=" + out.dir.string()}};
  auto rc = launch.wait_exit(58s);
  ASSERT_TRUE(rc) << "the 3-process run did not end within 58 s\n"
                  << launch.text();
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - t0)
                .count();
  std::cout << "3-process DQN run took " << secs << " s" << std::endl;
  EXPECT_EQ(*rc, 0) << launch.text();
  // Every node prints its report and writes its own summary and metrics.
  int reports = 0;
  for (auto& l : launch.lines())
    if (l.find("\"stop_reason\"") != std::string::npos)
      ++reports;
  EXPECT_EQ(reports, 3) << launch.text();
  auto learner = read_all(out.dir / "summary-0.json");
  auto evaluator = read_all(out.dir / "summary-1.json");
  auto collector = read_all(out.dir / "summary-2.json");
  ASSERT_FALSE(learner.empty()) << launch.text();
  ASSERT_FALSE(evaluator.empty()) << launch.text();
  ASSERT_FALSE(collector.empty()) << launch.text();
  std::cout << "evaluator: " << evaluator << "learner: " << learner;
  EXPECT_EQ(dice::test::json_str(learner, "roles"), "learner");
  EXPECT_EQ(dice::test::json_str(evaluator, "roles"), "evaluator");
  EXPECT_EQ(dice::test::json_str(collector, "roles"), "collector");
  // Clearly better than a random policy (~22).
  EXPECT_GT(dice::test::json_num(evaluator, "best_eval"), 100.0) << evaluator;
  EXPECT_GT(dice::test::json_int(evaluator, "evaluations"), 0) << evaluator;
  // Nothing in flight is lost at the finish: the learner counted every env
  // step the collector made.
  auto collected = dice::test::json_int(collector, "env_steps");
  EXPECT_GT(collected, 0) << collector;
  EXPECT_EQ(dice::test::json_int(learner, "env_steps"), collected) << learner;
  EXPECT_GT(dice::test::json_int(learner, "train_iters"), 0) << learner;
  EXPECT_GE(dice::test::json_num(learner, "lag_min"), 0.0) << learner;
  // Outputs do not clobber each other.
  EXPECT_TRUE(fs::exists(out.dir / "latest.pt"));
  EXPECT_TRUE(fs::exists(out.dir / "best.pt"));
  EXPECT_TRUE(fs::exists(out.dir / "eval_return.dat"));
  EXPECT_FALSE(fs::exists(out.dir / "metrics.jsonl"));
  // Each node's metrics: JSON lines of its own role only.
  int node = 0;
  for (auto role : {"learner", "evaluator", "collector"}) {
    auto name = "metrics-" + std::to_string(node) + ".jsonl";
    auto text = read_all(out.dir / name);
    auto lines = dice::test::json_lines(text);
    EXPECT_FALSE(lines.empty()) << name;
    for (auto& j : lines) {
      EXPECT_EQ(j.value("role", ""), role) << name << ": " << j.dump();
      EXPECT_EQ(j.value("node", -1), node) << name << ": " << j.dump();
    }
    ++node;
  }
}

} // namespace
