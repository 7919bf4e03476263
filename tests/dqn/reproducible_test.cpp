// Seeded and single-threaded (--dice.deterministic), the in-process DQN run
// is reproducible: two runs evaluate the same returns at the same steps.

#include "support/child_process.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>

namespace {

// Runs dqn_cartpole with a deadline and returns its "eval at ..." lines.
std::string eval_lines(const std::string& out_dir, int& exit_code) {
  dice::test::child_process p{
    {std::string{DICE_BINARY_DIR} + "/bin/dqn_cartpole", "--dice.deterministic",
     "--seed=2", "--max-env-steps=5000", "--eval-every=200", "--quiet",
     "--no-plot", "--out=" + out_dir}};
  auto rc = p.wait_exit(std::chrono::seconds{120});
  exit_code = rc ? *rc : -1;
  std::string lines;
  for (auto& line : p.lines()) {
    auto pos = line.find("eval at ");
    if (pos != std::string::npos)
      lines += line.substr(pos) + "\n";
  }
  return lines;
}

TEST(Reproducible, TwoSeededDeterministicRunsEvaluateTheSame) {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path()
    / ("dice-repro-" + std::to_string(::getpid()));
  int rc1 = -1;
  int rc2 = -1;
  auto first = eval_lines((dir / "a").string(), rc1);
  auto second = eval_lines((dir / "b").string(), rc2);
  fs::remove_all(dir);
  EXPECT_EQ(rc1, 0);
  EXPECT_EQ(rc2, 0);
  ASSERT_NE(first.find("eval at train_iter"), std::string::npos) << first;
  // Several evaluations, each at the same step with the same returns.
  EXPECT_GE(std::count(first.begin(), first.end(), '\n'), 3);
  EXPECT_EQ(first, second);
}

} // namespace
