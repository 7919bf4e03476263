// Every program takes `--key value` as well as `--key=value`, and names an
// option it does not know.

#include "support/child_process.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

const std::string bin_dir = std::string{DICE_BINARY_DIR} + "/bin/";

struct outcome {
  int code = -1;
  std::string text;
};

outcome run(std::vector<std::string> argv) {
  dice::test::child_process p{std::move(argv)};
  auto rc = p.wait_exit(60s);
  return {rc ? *rc : -1, p.text()};
}

} // namespace

TEST(ProgramOptions, DqnCartpoleReadsTheValueAfterTheOption) {
  if (!std::filesystem::exists(bin_dir + "dqn_cartpole"))
    GTEST_SKIP() << "dqn_cartpole not built (the sanitizer build)";
  // --eps-decay is checked by the program itself: reaching that check shows
  // the value was parsed (before: parser_error(missing_argument), exit 1).
  auto r = run(
    {bin_dir + "dqn_cartpole", "--quiet", "--eps-decay", "bogus", "--no-plot"});
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("--eps-decay must be linear or exponential"),
            std::string::npos)
    << r.text;
}

TEST(ProgramOptions, DqnCartpoleNamesAnUnknownOption) {
  if (!std::filesystem::exists(bin_dir + "dqn_cartpole"))
    GTEST_SKIP() << "dqn_cartpole not built (the sanitizer build)";
  auto r = run({bin_dir + "dqn_cartpole", "--colectors", "3"});
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find("dqn_cartpole: invalid_config: unknown option "
                        "'--colectors' (see --help)"),
            std::string::npos)
    << r.text;
}

TEST(ProgramOptions, DiceLaunchTakesBothForms) {
  for (auto form :
       {std::vector<std::string>{"--workers", "2", "--topology", "star"},
        std::vector<std::string>{"--workers=2", "--topology=star"}}) {
    std::vector<std::string> argv{bin_dir + "dice-launch"};
    argv.insert(argv.end(), form.begin(), form.end());
    argv.insert(argv.end(), {"--", bin_dir + "hello_exchange", "--steps", "2"});
    auto r = run(argv);
    EXPECT_EQ(r.code, 0) << r.text;
    EXPECT_NE(r.text.find("[node 0] {"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("[node 1] {"), std::string::npos) << r.text;
  }
}

TEST(ProgramOptions, DiceLaunchNamesAnUnknownOption) {
  auto r = run({bin_dir + "dice-launch", "--wrokers", "2", "--", "true"});
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("dice-launch: unknown option '--wrokers'"),
            std::string::npos)
    << r.text;
}

TEST(ProgramOptions, RemoteBenchNamesAnUnknownOption) {
  auto exe = bin_dir + "remote_bench";
  if (!std::filesystem::exists(exe))
    GTEST_SKIP() << "benchmarks not built";
  auto r = run({exe, "tcp", "--sise", "1000"});
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find("remote_bench: unknown option '--sise'"),
            std::string::npos)
    << r.text;
}

TEST(ProgramOptions, ConnectBenchNamesAnUnknownOption) {
  auto exe = bin_dir + "connect_bench";
  if (!std::filesystem::exists(exe))
    GTEST_SKIP() << "benchmarks not built";
  // Before (per the old parser, which only looked up known names): the
  // misspelt option was ignored and the benchmark ran its default rounds.
  auto r = run({exe, "--round", "3"});
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find("connect_bench: unknown option '--round'"),
            std::string::npos)
    << r.text;
}

TEST(ProgramOptions, PpoCartpoleNamesAnUnknownOption) {
  auto exe = bin_dir + "ppo_cartpole";
  if (!std::filesystem::exists(exe))
    GTEST_SKIP() << "ppo_cartpole not built (the sanitizer build)";
  auto r = run({exe, "--sede", "3"});
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find("unknown option '--sede' (see --help)"),
            std::string::npos)
    << r.text;
}
