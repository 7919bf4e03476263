// The evaluator (dice/rl/evaluator.hpp): play_greedy plays each env's first
// episode with the policy; the middleware evaluates every few learner
// iterations, keeps best.pt, records the run's outputs and finishes the run
// at the stop value (only with a trained model when asked).

#include "dice/core/errc.hpp"
#include "dice/envs/cartpole.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/rl/dqn.hpp"
#include "dice/rl/evaluator.hpp"

#include "support/files.hpp"
#include "support/json.hpp"
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

namespace {

namespace fs = std::filesystem;
using namespace dice::rl;
using dice::test::read_all;
using dice::test::scratch;

/// Discrete(3), reward = action, episodes of `length` steps.
class paying_env : public dice::env {
 public:
  explicit paying_env(std::int64_t length) : length_(length) {
    // nop
  }
  std::string name() const override {
    return "Paying";
  }
  dice::space observation_space() const override {
    return dice::space::box({1}, 0.0f, 100.0f);
  }
  dice::space action_space() const override {
    return dice::space::discrete(3);
  }
  void reset(std::optional<std::uint64_t>, float* obs) override {
    t_ = 0;
    obs[0] = 0;
  }
  dice::step_result step(const dice::action_view& a, float* obs) override {
    obs[0] = static_cast<float>(++t_);
    return {static_cast<float>(a.index), t_ >= length_, false};
  }

 private:
  std::int64_t length_;
  std::int64_t t_ = 0;
};

dice::vector_env::factory paying(std::int64_t length) {
  return [length](std::size_t) {
    return std::make_unique<paying_env>(length);
  };
}

greedy_policy always(std::int64_t action) {
  return [action](const torch::Tensor& obs) {
    return torch::full({obs.size(0)}, action, torch::kLong);
  };
}

TEST(PlayGreedy, PlaysEachEnvsFirstEpisode) {
  auto returns = play_greedy(paying(4), 3, 1, always(2));
  ASSERT_TRUE(returns) << dice::render(returns.error());
  EXPECT_EQ(*returns, (std::vector<double>{8, 8, 8}));
  EXPECT_FALSE(play_greedy(paying(4), 0, 1, always(2)));
  // An action outside the space ends that env's episode (the vector counts
  // the error), not the evaluation.
  auto bad = play_greedy(paying(4), 2, 1, always(7));
  ASSERT_TRUE(bad) << dice::render(bad.error());
  EXPECT_EQ(*bad, (std::vector<double>{0, 0}));
}

TEST(PlayGreedy, AnUntrainedNetworkIsPoorAtCartpole) {
  torch::manual_seed(5);
  q_network net{4, 2, {8}};
  auto returns = play_greedy(
    [](std::size_t) {
      return std::make_unique<dice::envs::cartpole>();
    },
    10, 1,
    [&](const torch::Tensor& obs) {
      return net->forward(obs).argmax(1);
    });
  ASSERT_TRUE(returns);
  ASSERT_EQ(returns->size(), 10u);
  for (auto r : *returns) {
    EXPECT_GE(r, 1.0);
    EXPECT_LE(r, 500.0);
  }
}

struct eval_run {
  std::string stop_reason;
  std::int64_t train_iter = 0;
  int saves = 0;
};

// One learner node that counts iterations and evaluates every 2 with a
// policy whose return is 2 per step of a 4-step episode (8).
eval_run run_evaluator(const fs::path& dir, bool trained_to_solve) {
  dice::run_config cfg;
  cfg.collectors = 0;
  cfg.learners = 1;
  caf::actor_system sys{cfg};
  auto result = std::make_shared<eval_run>();
  auto mtx = std::make_shared<std::mutex>();
  dice::run_nodes(sys, cfg, [&](dice::node_setup& n) {
    n.print_report(false);
    outputs_options o;
    o.out = dir.string();
    o.progress = false;
    o.plot = false;
    auto out = run_outputs::of(n, o);
    dice::middleware count;
    count.before = [](dice::context& ctx) {
      ctx.train_iter += 1;
      return dice::proceed;
    };
    eval_hooks hooks;
    hooks.make_env = paying(4);
    hooks.act = always(2);
    hooks.save = [result, mtx](const std::string& path) -> caf::error {
      std::lock_guard<std::mutex> guard{*mtx};
      ++result->saves;
      std::ofstream{path} << "model";
      return caf::none;
    };
    eval_options eo;
    eo.every = 2;
    eo.episodes = 2;
    eo.stop_value = 8;
    eo.trained_to_solve = trained_to_solve;
    n.use(std::move(count)).use(evaluator(out, hooks, eo)).max_step(6);
    n.at_exit([result, mtx](const dice::run_result& r) {
      std::lock_guard<std::mutex> guard{*mtx};
      result->stop_reason = r.reports.at(0).stop_reason;
      result->train_iter = r.reports.at(0).train_iter;
    });
  });
  return *result;
}

TEST(Evaluator, StopsTheRunAtTheStopValueAndKeepsTheBest) {
  scratch out{"dice_rl_eval_stop"};
  auto r = run_evaluator(out.dir, false);
  EXPECT_EQ(r.stop_reason, "stop_value");
  EXPECT_LT(r.train_iter, 6);
  EXPECT_EQ(r.saves, 1); // a new best once, never again at the same return
  EXPECT_TRUE(fs::exists(out.dir / "best.pt"));
  auto best = dice::test::json_in(read_all(out.dir / "best.json"));
  EXPECT_EQ(best["eval_return"], 8.0);
  auto lines = dice::test::json_lines(read_all(out.dir / "metrics.jsonl"));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0]["role"], "evaluator");
  EXPECT_EQ(lines[0]["eval_return_mean"], 8.0);
  auto sum = dice::test::json_in(read_all(out.dir / "summary.json"));
  EXPECT_EQ(sum["solved"], true);
}

TEST(Evaluator, AnUntrainedModelDoesNotSolveWhenAskedNotTo) {
  scratch out{"dice_rl_eval_untrained"};
  // model_version stays -1 (no learner sent a model): evaluations go on
  // until the node's iterations end.
  auto r = run_evaluator(out.dir, true);
  EXPECT_NE(r.stop_reason, "stop_value");
  EXPECT_EQ(r.train_iter, 6);
  auto sum = dice::test::json_in(read_all(out.dir / "summary.json"));
  EXPECT_EQ(sum["solved"], false);
  EXPECT_GE(sum["evaluations"].get<int>(), 3);
}

} // namespace
