// The PPO cluster path in one process: learner, evaluator and 3 collectors
// as role actors, segments through the real context exchanger, models
// through the real periodical model exchanger. Short and bounded (an
// env-step budget ends every run); no timing is asserted.

#include "dice/core/errc.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include "options.hpp"
#include "ppo.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

namespace {

namespace fs = std::filesystem;

/// A fresh folder, removed at the end of the test.
struct scratch {
  fs::path dir;
  explicit scratch(const std::string& name)
    : dir(fs::temp_directory_path()
          / (name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::vector<demo::json> read_lines(const fs::path& p) {
  std::vector<demo::json> out;
  std::ifstream f{p};
  std::string line;
  while (std::getline(f, line)) {
    auto j = demo::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << p << ": " << line;
    out.push_back(std::move(j));
  }
  return out;
}

ppo::run_options quick(const fs::path& out) {
  ppo::run_options opts;
  opts.collectors = 3;
  opts.seed = 1;
  opts.out = out.string();
  opts.progress = false;
  opts.plot = false;
  opts.max_seconds = 0; // the env-step budget ends the run, not the clock
  return opts;
}

class PpoCluster : public ::testing::Test {
 protected:
  PpoCluster() : sys_(init(cfg_)) {
    // nop
  }

  static caf::actor_system_config& init(caf::actor_system_config& cfg) {
    dice::add_message_types(cfg);
    return cfg;
  }

  caf::actor_system_config cfg_;
  caf::actor_system sys_;
};

TEST_F(PpoCluster, InProcessRunLearnsThroughTheExchangers) {
  scratch out{"dice_ppo_cluster"};
  auto opts = quick(out.dir);
  opts.seed = 0;
  // The network every node starts from (same seed, same construction) is
  // poor when played greedily, so reaching the stop value takes learning.
  {
    torch::manual_seed(opts.seed);
    ppo::actor_critic initial{opts.algo.hidden};
    auto r = ppo::evaluate_greedy(initial, 10, 12345);
    EXPECT_LT(std::accumulate(r.begin(), r.end(), 0.0) / 10, 50.0);
  }
  opts.stop_value = 200;      // reduced: clearly better than random (~22)
  opts.max_env_steps = 40000; // budget: the run ends either way
  auto sum = ppo::run_training(sys_, opts);
  ASSERT_TRUE(sum) << dice::render(sum.error());
  std::cout << ppo::to_string(*sum);
  EXPECT_TRUE(sum->solved) << ppo::to_json(*sum);
  EXPECT_GE(sum->best_eval, 200.0) << ppo::to_json(*sum);
  ASSERT_FALSE(sum->evals.empty());
  EXPECT_LT(sum->evals.front().mean, 50.0); // the initial weights
  EXPECT_GE(sum->train_iters, 2);
  EXPECT_GT(sum->train_iters, 0);
  EXPECT_GT(sum->grad_steps, 0);
  // The learner trained on several collectors' segments: what it received
  // is what the collectors counted, less at most what was still in flight
  // when the run finished (merged on stop, not trained on: 3 collectors x
  // a window of 8 iterations of 4 x 64 steps).
  EXPECT_GT(sum->steps_received, 0);
  EXPECT_LE(sum->steps_received, sum->env_steps);
  EXPECT_GE(sum->steps_received, sum->env_steps - 3 * 8 * 4 * 64);
  EXPECT_EQ(sum->payloads_rejected, 0);
  EXPECT_EQ(sum->batches_rejected, 0);
  // Every received sample's lag is in the histogram.
  auto hist_total = std::accumulate(sum->lag_histogram.begin(),
                                    sum->lag_histogram.end(), std::int64_t{0});
  EXPECT_EQ(hist_total, sum->steps_received);
  EXPECT_GE(sum->lag_mean, 0.0);
  EXPECT_LE(sum->lag_mean, static_cast<double>(sum->lag_max));
  // Finished episodes reached the learner through ctx.episodes.
  EXPECT_GT(sum->train_episodes, 0);
  // What a user finds in OUT, all of it valid JSON.
  EXPECT_TRUE(fs::exists(out.dir / "latest.pt"));
  EXPECT_TRUE(fs::exists(out.dir / "best.pt"));
  EXPECT_TRUE(fs::exists(out.dir / "eval_return.dat"));
  auto summary = demo::read_json((out.dir / "summary.json").string());
  EXPECT_EQ(summary.value("env_steps", -1), sum->env_steps);
  EXPECT_EQ(summary.value("targets", std::string{}), "gae");
  std::set<std::string> roles;
  for (auto& j : read_lines(out.dir / "metrics.jsonl"))
    roles.insert(j.value("role", std::string{}));
  EXPECT_EQ(roles,
            (std::set<std::string>{"collector", "evaluator", "learner"}));
  // The best checkpoint plays as well as its evaluation said.
  auto returns = ppo::run_eval_only((out.dir / "best.pt").string(), opts);
  ASSERT_TRUE(returns) << dice::render(returns.error());
  double mean = std::accumulate(returns->begin(), returns->end(), 0.0)
    / static_cast<double>(returns->size());
  EXPECT_GT(mean, 50.0);
}

TEST_F(PpoCluster, DataBeyondMaxLagIsDroppedAndCountedInARealRun) {
  scratch out{"dice_ppo_maxlag"};
  auto opts = quick(out.dir);
  // Models every 2nd learner iteration: collectors act one iteration behind
  // at least half of the time, so lag 1 and more is certain to occur.
  opts.model_period = 2;
  opts.algo.max_lag = 0;
  opts.stop_value = 1000; // unreachable: the budget ends the run
  opts.max_env_steps = 8000;
  opts.eval_every = 1000;
  auto sum = ppo::run_training(sys_, opts);
  ASSERT_TRUE(sum) << dice::render(sum.error());
  std::cout << ppo::to_string(*sum);
  ASSERT_GE(sum->lag_histogram.size(), 2u) << ppo::to_json(*sum);
  // Exactly the samples with lag > 0 were dropped.
  auto stale = std::accumulate(sum->lag_histogram.begin() + 1,
                               sum->lag_histogram.end(), std::int64_t{0});
  EXPECT_GT(stale, 0);
  EXPECT_EQ(sum->steps_dropped_stale, stale);
  EXPECT_GT(sum->segments_dropped_stale, 0);
  EXPECT_EQ(sum->steps_dropped_stale % opts.steps_per_segment, 0);
  // The lag-0 samples were trained on.
  EXPECT_GT(sum->lag_histogram[0], 0);
  EXPECT_GT(sum->grad_steps, 0);
}

TEST(PpoSummary, AQuoteInTheStopReasonStillGivesValidJson) {
  ppo::run_summary sum;
  sum.stop_reason = "error: peer said \"bye\"\\\n\x01 and \xff\xfe";
  sum.lag_histogram = {5, 3, 1};
  auto j = demo::json::parse(ppo::to_json(sum), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << ppo::to_json(sum);
  EXPECT_EQ(j["stop_reason"].get<std::string>().rfind(
              "error: peer said \"bye\"\\\n\x01", 0),
            0u);
  EXPECT_EQ(j["lag_histogram"].size(), 3u);
  // NaN (no evaluation yet) is null, not an invalid token.
  EXPECT_TRUE(j["best_eval"].is_null());
}

} // namespace
