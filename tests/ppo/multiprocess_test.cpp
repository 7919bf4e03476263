// PPO on CartPole as 5 processes (dice-launch --workers 5: learner,
// evaluator, three collectors): segments and models cross real loopback
// TCP. A short seeded run with a budget must reach a reduced stop value
// (200; random play: ~22); the learner's lag and intake add up with what
// the collectors sent. Bounded, not timed: the budget ends the run.

#include "support/child_process.hpp"
#include "support/files.hpp"
#include "support/launch.hpp"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using dice::test::child_process;
using json = nlohmann::json;

using dice::test::bin_dir;

json read_json(const fs::path& p) {
  std::ifstream f{p};
  auto j = json::parse(f, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

using dice::test::scratch;

TEST(PpoMultiprocess, FiveProcessesBeatARandomPolicy) {
  scratch out{"dice_ppo_mp"};
  auto t0 = std::chrono::steady_clock::now();
  // The evaluator stops the run at a mean return of 200; the learner at
  // 40k env steps or 40 s at the latest (a budget, not an assertion).
  child_process launch{
    {bin_dir + "dice-launch", "--workers", "5", "--", bin_dir + "ppo_cartpole",
     "--seed=0", "--stop-value=200", "--max-env-steps=40000",
     "--max-seconds=40", "--quiet", "--no-plot", "--out=" + out.dir.string()}};
  auto rc = launch.wait_exit(100s);
  ASSERT_TRUE(rc) << "the 5-process run did not end within 100 s\n"
                  << launch.text();
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - t0)
                .count();
  std::cout << "5-process PPO run took " << secs << " s" << std::endl;
  EXPECT_EQ(*rc, 0) << launch.text();
  auto learner = read_json(out.dir / "summary-0.json");
  auto evaluator = read_json(out.dir / "summary-1.json");
  ASSERT_FALSE(learner.empty()) << launch.text();
  ASSERT_FALSE(evaluator.empty()) << launch.text();
  std::cout << "evaluator: " << evaluator.dump()
            << "\nlearner: " << learner.dump() << std::endl;
  EXPECT_EQ(learner.value("roles", ""), "learner");
  EXPECT_EQ(evaluator.value("roles", ""), "evaluator");
  std::int64_t collected = 0;
  for (int id = 2; id <= 4; ++id) {
    auto c = read_json(out.dir / ("summary-" + std::to_string(id) + ".json"));
    EXPECT_EQ(c.value("roles", ""), "collector") << launch.text();
    EXPECT_GT(c.value("env_steps", 0), 0);
    collected += c.value("env_steps", std::int64_t{0});
  }
  // Seed 0's initial weights are poor when played greedily
  // (PpoCluster.InProcessRunLearnsThroughTheExchangers checks that), so the
  // stop value takes learning: several updates, several evaluations.
  EXPECT_TRUE(evaluator.value("solved", false)) << evaluator.dump();
  EXPECT_GE(evaluator.value("best_eval", 0.0), 200.0) << evaluator.dump();
  EXPECT_GE(evaluator.value("evaluations", 0), 2) << evaluator.dump();
  // Nothing in flight is lost at the finish: the learner counted every env
  // step the collectors made, and trained on all of it but what arrived
  // after its last iteration.
  EXPECT_EQ(learner.value("env_steps", std::int64_t{-1}), collected);
  auto received = learner.value("steps_received", std::int64_t{0});
  EXPECT_GT(received, 0);
  EXPECT_LE(received, collected);
  // Every received sample's lag is in the histogram.
  auto hist = learner["lag_histogram"].get<std::vector<std::int64_t>>();
  EXPECT_EQ(std::accumulate(hist.begin(), hist.end(), std::int64_t{0}),
            received);
  EXPECT_GE(learner.value("train_iters", 0), 2);
  EXPECT_TRUE(fs::exists(out.dir / "latest.pt"));
  EXPECT_TRUE(fs::exists(out.dir / "best.pt"));
  EXPECT_FALSE(fs::exists(out.dir / "metrics.jsonl"));
  for (int id = 0; id <= 4; ++id)
    EXPECT_TRUE(
      fs::exists(out.dir / ("metrics-" + std::to_string(id) + ".jsonl")));
}

} // namespace
