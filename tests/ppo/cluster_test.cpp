// PPO on CartPole through dice::rl in one process: learner, evaluator and 3
// collectors as actors (dice::run, each node composed by use_ppo),
// segments through the real context exchanger, models through the real
// periodical model exchanger. Short and bounded (an env-step budget ends
// every run); no timing is asserted.

#include "ppo/run_support.hpp"
#include "support/files.hpp"
#include <gtest/gtest.h>

#include <numeric>
#include <set>

namespace {

namespace fs = std::filesystem;
using dice::test::read_json_file;
using dice::test::read_json_lines;
using dice::test::run_ppo;
using dice::test::scratch;

std::unique_ptr<dice::env> cartpole(std::size_t) {
  return std::make_unique<dice::envs::cartpole>();
}

/// The network use_ppo builds on every node for seed 0.
dice::rl::actor_critic initial_net() {
  torch::manual_seed(0);
  dice::envs::cartpole e;
  return *dice::rl::make_actor_critic(e.observation_space(), e.action_space());
}

double mean_greedy_return(dice::rl::actor_critic net) {
  auto r = dice::rl::play_greedy(cartpole, 10, 12345,
                                 [net](const torch::Tensor& obs) mutable {
                                   return net->mode(obs);
                                 });
  EXPECT_TRUE(r);
  return r ? std::accumulate(r->begin(), r->end(), 0.0) / 10 : 0.0;
}

TEST(PpoCluster, InProcessRunLearnsThroughTheExchangers) {
  scratch out{"dice_ppo_cluster"};
  // The network every node starts from is poor when played greedily, so
  // reaching the stop value takes learning.
  EXPECT_LT(mean_greedy_return(initial_net()), 50.0);
  // Stop value reduced to 200 (random play: ~22); the budget ends the run
  // either way.
  auto rc = run_ppo({"--seed=0", "--collectors=3", "--stop-value=200",
                     "--max-env-steps=40000", "--max-seconds=0", "--quiet",
                     "--no-plot", "--out=" + out.dir.string()},
                    cartpole);
  EXPECT_EQ(rc, 0);
  auto sum = read_json_file(out.dir / "summary.json");
  ASSERT_FALSE(sum.empty());
  std::cout << sum.dump() << std::endl;
  EXPECT_TRUE(sum.value("solved", false));
  EXPECT_GE(sum.value("best_eval", 0.0), 200.0);
  EXPECT_GE(sum.value("train_iters", 0), 2);
  EXPECT_GT(sum.value("grad_steps", 0), 0);
  EXPECT_EQ(sum.value("targets", ""), "gae");
  // The learner trained on several collectors' segments: what it received
  // is what the collectors counted, less at most what was still in flight
  // when the run finished (3 collectors x a window of 8 iterations of 4 x
  // 64 steps).
  auto env_steps = sum.value("env_steps", std::int64_t{0});
  auto received = sum.value("steps_received", std::int64_t{0});
  EXPECT_GT(received, 0);
  EXPECT_LE(received, env_steps);
  EXPECT_GE(received, env_steps - 3 * 8 * 4 * 64);
  EXPECT_EQ(sum.value("payloads_rejected", -1), 0);
  EXPECT_EQ(sum.value("batches_rejected", -1), 0);
  // Every received sample's lag is in the histogram.
  auto hist = sum["lag_histogram"].get<std::vector<std::int64_t>>();
  EXPECT_EQ(std::accumulate(hist.begin(), hist.end(), std::int64_t{0}),
            received);
  EXPECT_GE(sum.value("lag_mean", -1.0), 0.0);
  EXPECT_LE(sum.value("lag_mean", 1e9), sum.value("lag_max", 0) + 0.0);
  // Finished episodes reached the learner through ctx.episodes.
  EXPECT_GT(sum.value("train_episodes", 0), 0);
  // What a user finds in OUT.
  EXPECT_TRUE(fs::exists(out.dir / "latest.pt"));
  EXPECT_TRUE(fs::exists(out.dir / "best.pt"));
  EXPECT_TRUE(fs::exists(out.dir / "eval_return.dat"));
  std::set<std::string> roles;
  double first_eval = -1;
  for (auto& j : read_json_lines(out.dir / "metrics.jsonl")) {
    ASSERT_TRUE(j.is_object());
    roles.insert(j.value("role", std::string{}));
    if (first_eval < 0 && j.value("role", "") == "evaluator")
      first_eval = j.value("eval_return_mean", -1.0);
  }
  EXPECT_EQ(roles,
            (std::set<std::string>{"collector", "evaluator", "learner"}));
  EXPECT_LT(first_eval, 50.0); // the initial weights
  // The best checkpoint plays as well as its evaluation said.
  auto best = initial_net();
  ASSERT_FALSE(dice::rl::load_checkpoint(best, (out.dir / "best.pt").string()));
  EXPECT_GT(mean_greedy_return(best), 50.0);
}

TEST(PpoCluster, DataBeyondMaxLagIsDroppedAndCountedInARealRun) {
  scratch out{"dice_ppo_maxlag"};
  // Models every 2nd learner iteration: collectors act one iteration behind
  // at least half of the time, so lag 1 and more is certain to occur.
  auto rc = run_ppo({"--seed=1", "--model-period=2", "--max-lag=0",
                     "--stop-value=1000", "--max-env-steps=8000",
                     "--max-seconds=0", "--eval-every=1000", "--quiet",
                     "--no-plot", "--out=" + out.dir.string()},
                    cartpole);
  EXPECT_EQ(rc, 0);
  auto sum = read_json_file(out.dir / "summary.json");
  std::cout << sum.dump() << std::endl;
  auto hist = sum["lag_histogram"].get<std::vector<std::int64_t>>();
  ASSERT_GE(hist.size(), 2u);
  // Exactly the samples with lag > 0 were dropped.
  auto stale = std::accumulate(hist.begin() + 1, hist.end(), std::int64_t{0});
  EXPECT_GT(stale, 0);
  EXPECT_EQ(sum.value("steps_dropped_stale", std::int64_t{-1}), stale);
  EXPECT_GT(sum.value("segments_dropped_stale", 0), 0);
  EXPECT_EQ(sum.value("steps_dropped_stale", std::int64_t{1}) % 64, 0);
  // The lag-0 samples were trained on.
  EXPECT_GT(hist[0], 0);
  EXPECT_GT(sum.value("grad_steps", 0), 0);
}

TEST(PpoCluster, ResumeContinuesFromTheLastCheckpoint) {
  scratch out{"dice_ppo_resume"};
  std::vector<std::string> common{"--seed=2",
                                  "--stop-value=1000",
                                  "--max-seconds=0",
                                  "--eval-every=1000",
                                  "--quiet",
                                  "--no-plot",
                                  "--out=" + out.dir.string()};
  auto first = common;
  first.push_back("--max-env-steps=3000");
  ASSERT_EQ(run_ppo(first, cartpole), 0);
  auto latest = read_json_file(out.dir / "latest.json");
  auto steps = latest.value("env_step", std::int64_t{0});
  auto iters = latest.value("train_iter", std::int64_t{0});
  ASSERT_GE(steps, 3000);
  ASSERT_GT(iters, 0);
  auto lines = read_json_lines(out.dir / "metrics.jsonl").size();
  // The resumed run counts on from the checkpoint's counters, appends to
  // the metrics and stops at the combined budget.
  auto second = common;
  second.push_back("--resume");
  second.push_back("--max-env-steps=" + std::to_string(steps + 3000));
  ASSERT_EQ(run_ppo(second, cartpole), 0);
  auto sum = read_json_file(out.dir / "summary.json");
  std::cout << sum.dump() << std::endl;
  EXPECT_EQ(sum.value("resumed_env_steps", std::int64_t{-1}), steps);
  EXPECT_GE(sum.value("env_steps", std::int64_t{0}), steps + 3000);
  EXPECT_GT(sum.value("train_iters", std::int64_t{0}), iters);
  EXPECT_GT(read_json_lines(out.dir / "metrics.jsonl").size(), lines);
  auto after = read_json_file(out.dir / "latest.json");
  EXPECT_GE(after.value("env_step", std::int64_t{0}), steps + 3000);
}

} // namespace
