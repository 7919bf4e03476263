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

// `program args` exits 1 and says `message`; skipped where the program is
// not built (the benchmarks and examples are not, in the sanitizer build).
void expect_refused(const std::string& program, std::vector<std::string> args,
                    const std::string& message) {
  auto exe = bin_dir + program;
  if (!std::filesystem::exists(exe))
    GTEST_SKIP() << program << " not built";
  args.insert(args.begin(), exe);
  auto r = run(std::move(args));
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find(message), std::string::npos) << r.text;
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
  expect_refused("remote_bench", {"tcp", "--sise", "1000"},
                 "remote_bench: unknown option '--sise'");
}

// Before (per the old parser, which only looked up known names): the
// misspelt option was ignored and the benchmark ran its default rounds.
TEST(ProgramOptions, ConnectBenchNamesAnUnknownOption) {
  expect_refused("connect_bench", {"--round", "3"},
                 "connect_bench: unknown option '--round'");
}

TEST(ProgramOptions, PpoCartpoleNamesAnUnknownOption) {
  expect_refused("ppo_cartpole", {"--sede", "3"},
                 "unknown option '--sede' (see --help)");
}
