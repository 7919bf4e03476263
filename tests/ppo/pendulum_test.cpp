// Continuous actions end to end: PPO with the diagonal Gaussian policy on
// Pendulum-v1 (dice::envs::pendulum, Box(1) torques in [-2, 2]) through
// dice::rl::use_ppo in one process (learner, evaluator, 2 collectors). A
// short seeded run with an env-step budget must raise the greedy return
// clearly above where the initial weights play (random torques: about
// -1200). The stop value (-250) or the budget (60k env steps) ends it;
// about 36k steps and 18 s on 2 busy cores for seed 0. No timing is
// asserted.

#include "ppo/run_support.hpp"
#include "support/files.hpp"
#include <gtest/gtest.h>

#include <algorithm>

namespace {

using dice::test::read_json_file;
using dice::test::read_json_lines;
using dice::test::run_ppo;
using dice::test::scratch;

std::unique_ptr<dice::env> pendulum(std::size_t) {
  return std::make_unique<dice::envs::pendulum>();
}

TEST(PpoPendulum, GaussianPolicyRaisesTheReturnClearly) {
  scratch out{"dice_ppo_pendulum"};
  auto rc = run_ppo({"--seed=0", "--collectors=2", "--envs-per-collector=8",
                     "--steps-per-collect=64", "--max-env-steps=60000",
                     "--max-seconds=0", "--stop-value=-250", "--eval-every=5",
                     "--eval-episodes=8", "--gamma=0.9", "--lr=1e-3",
                     "--epochs=10", "--minibatch=64", "--model-period=1",
                     "--quiet", "--no-plot", "--out=" + out.dir.string()},
                    pendulum, "PPO Pendulum-v1");
  EXPECT_EQ(rc, 0);
  auto sum = read_json_file(out.dir / "summary.json");
  ASSERT_FALSE(sum.empty());
  std::cout << sum.dump() << std::endl;
  std::vector<double> evals;
  for (auto& j : read_json_lines(out.dir / "metrics.jsonl"))
    if (j.is_object() && j.value("role", "") == "evaluator")
      evals.push_back(j.value("eval_return_mean", -1e9));
  ASSERT_GE(evals.size(), 3u);
  // The first evaluation plays the initial weights.
  auto best = *std::max_element(evals.begin(), evals.end());
  std::cout << "first eval " << evals.front() << ", best " << best << " of "
            << evals.size() << std::endl;
  EXPECT_GT(best, evals.front() + 400.0);
  EXPECT_EQ(sum.value("payloads_rejected", -1), 0);
  EXPECT_GT(sum.value("grad_steps", 0), 0);
}

} // namespace
