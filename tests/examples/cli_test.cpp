// Every program takes `--key value` as well as `--key=value`, names an
// option it does not know or a value that is missing, and prints its options
// with --help (exit 0).

#include "support/child_process.hpp"
#include "support/launch.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

using dice::test::bin_dir;

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

// `program args` exits 0 and prints `message` (the help); skipped where the
// program is not built.
void expect_help(const std::string& program, std::vector<std::string> args,
                 const std::string& message) {
  auto exe = bin_dir + program;
  if (!std::filesystem::exists(exe))
    GTEST_SKIP() << program << " not built";
  args.insert(args.begin(), exe);
  auto r = run(std::move(args));
  EXPECT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find(message), std::string::npos) << r.text;
}

// The lines of `text` that begin with `prefix`.
std::vector<std::string> lines_with(const std::string& text,
                                    const std::string& prefix) {
  std::vector<std::string> result;
  std::size_t at = 0;
  while (at < text.size()) {
    auto end = text.find('\n', at);
    if (end == std::string::npos)
      end = text.size();
    auto line = text.substr(at, end - at);
    if (line.rfind(prefix, 0) == 0)
      result.push_back(line);
    at = end + 1;
  }
  return result;
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

TEST(ProgramOptions, ABadValueReadsAsDicesErrorNotCafsTuple) {
  // A config's member function sees actor_system_config::render, which
  // prints error(9, 'dice', (...)); dice::render prints the errc's name.
  for (auto prog : {"dqn_cartpole", "ppo_cartpole", "custom_env"}) {
    if (!std::filesystem::exists(bin_dir + prog))
      GTEST_SKIP() << prog << " not built (the sanitizer build)";
    auto r = run({bin_dir + prog, "--lr=-1"});
    EXPECT_EQ(r.code, 2) << prog << ": " << r.text;
    EXPECT_EQ(r.text.rfind("invalid_config: ", 0), 0u)
      << prog << ": " << r.text;
    EXPECT_EQ(r.text.find("error("), std::string::npos)
      << prog << ": " << r.text;
  }
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
    argv.insert(argv.end(),
                {"--", bin_dir + "dice_exchange_probe", "--steps", "2"});
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

// Before CLI11: --help was refused as a usage error (exit 2).
TEST(ProgramOptions, DiceLaunchHelpExitsZero) {
  for (auto flag : {"--help", "-h"}) {
    auto r = run({bin_dir + "dice-launch", flag});
    EXPECT_EQ(r.code, 0) << r.text;
    EXPECT_NE(r.text.find("Usage: dice-launch [OPTIONS] -- PROGRAM [ARGS...]"),
              std::string::npos)
      << r.text;
    EXPECT_NE(r.text.find("--max-restarts"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("--openssl.KEY=VALUE"), std::string::npos) << r.text;
  }
}

// The refusal names the option (CLI11's words: "--workers: 1 required N
// missing").
TEST(ProgramOptions, DiceLaunchNamesAMissingValue) {
  for (auto args :
       {std::vector<std::string>{"--workers"},
        std::vector<std::string>{"--workers", "--", "true"},
        std::vector<std::string>{"--openssl.cafile", "--", "true"}}) {
    auto name = args.front();
    args.insert(args.begin(), bin_dir + "dice-launch");
    auto r = run(args);
    EXPECT_EQ(r.code, 2) << r.text;
    auto refusal = lines_with(r.text, "dice-launch: ");
    ASSERT_EQ(refusal.size(), 1u) << r.text;
    EXPECT_NE(refusal[0].find(name), std::string::npos) << refusal[0];
    EXPECT_NE(refusal[0].find("missing"), std::string::npos) << refusal[0];
  }
}

TEST(ProgramOptions, DiceLaunchRefusesABadValue) {
  auto r = run({bin_dir + "dice-launch", "--topology=ring", "--", "true"});
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("dice-launch: --topology: ring not in"),
            std::string::npos)
    << r.text;
  // Not a number: Range's own check ("nan" passes it).
  r = run({bin_dir + "dice-launch", "--stop-timeout", "nan", "--", "true"});
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("--stop-timeout: 'nan' is not 0 to 3600 seconds"),
            std::string::npos)
    << r.text;
}

// What follows `--` is the program's, options dice-launch knows included.
TEST(ProgramOptions, DiceLaunchPassesWhatFollowsTheSeparatorUntouched) {
  auto r = run({bin_dir + "dice-launch", "--workers", "1", "--", "/bin/echo",
                "--workers", "7", "--", "--help"});
  EXPECT_EQ(r.code, 0) << r.text;
  // One node (the launcher's --workers 1), echoing its own options (which
  // dice-launch puts first) and then the program's arguments as given.
  auto lines = lines_with(r.text, "[node ");
  ASSERT_EQ(lines.size(), 1u) << r.text;
  EXPECT_EQ(lines[0].rfind("[node 0] --dice.node-id=0 --dice.workers=1 ", 0),
            0u)
    << lines[0];
  auto tail = std::string{" --workers 7 -- --help"};
  ASSERT_GE(lines[0].size(), tail.size()) << lines[0];
  EXPECT_EQ(lines[0].substr(lines[0].size() - tail.size()), tail) << lines[0];
}

// CLI11's own conversion reads "010" as octal 8; the launcher's as 10.
TEST(ProgramOptions, DiceLaunchReadsNumbersInDecimal) {
  auto r = run({bin_dir + "dice-launch", "--workers", "02", "--node-ids=010",
                "--", "/bin/echo"});
  EXPECT_EQ(r.code, 0) << r.text;
  for (auto id : {"10", "11"}) {
    auto prefix = std::string{"[node "} + id + "] --dice.node-id=" + id
      + " --dice.workers=2 ";
    EXPECT_EQ(lines_with(r.text, prefix).size(), 1u) << r.text;
  }
  r = run({bin_dir + "dice-launch", "--node-ids", "0x10", "--", "true"});
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("--node-ids: '0x10' is not a whole number"),
            std::string::npos)
    << r.text;
}

// --dice.secret-file and --openssl.KEY reach every node, in either form.
TEST(ProgramOptions, DiceLaunchPassesTrustOptionsToEveryNode) {
  auto r = run({bin_dir + "dice-launch", "--workers=2", "--dice.secret-file",
                "/nonexistent/secret", "--openssl.cafile", "ca.pem",
                "--openssl.key=key.pem", "--", "/bin/echo", "end"});
  EXPECT_EQ(r.code, 0) << r.text;
  for (auto node : {"[node 0] ", "[node 1] "}) {
    auto lines = lines_with(r.text, node);
    ASSERT_EQ(lines.size(), 1u) << r.text;
    for (auto expected :
         {" --dice.secret-file=/nonexistent/secret ",
          " --openssl.cafile=ca.pem ", " --openssl.key=key.pem "})
      EXPECT_NE(lines[0].find(expected), std::string::npos) << lines[0];
  }
  // Trust given: the launcher made no secret of its own.
  EXPECT_EQ(r.text.find("fresh secret"), std::string::npos) << r.text;
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

TEST(ProgramOptions, RemoteBenchNamesAnUnknownMode) {
  expect_refused("remote_bench", {"tpc", "--size", "1000"},
                 "remote_bench: unknown mode 'tpc'");
}

TEST(ProgramOptions, RemoteBenchNamesAMissingValue) {
  expect_refused("remote_bench", {"tcp", "--size"}, "remote_bench: --size: ");
  expect_refused("remote_bench", {"tcp", "--size"}, " missing (see --help)");
}

// Before: std::stol threw and the benchmark aborted.
TEST(ProgramOptions, ConnectBenchNamesABadNumber) {
  expect_refused("connect_bench", {"--rounds=three"},
                 "connect_bench: --rounds: 'three' is not a whole number");
  expect_refused("connect_bench", {"--rounds", "99999999999999999999"},
                 "connect_bench: --rounds: '99999999999999999999' is out of "
                 "range");
}

TEST(ProgramOptions, RemoteBenchTakesBothForms) {
  auto exe = bin_dir + "remote_bench";
  if (!std::filesystem::exists(exe))
    GTEST_SKIP() << "remote_bench not built";
  // An option given twice counts with its first value (a collector's own
  // --port and --node come before the options its learner forwards);
  // numbers are decimal (01000 is not octal 512).
  auto r = run({exe, "tcp", "--size", "01000", "--rounds=3", "--size=2000"});
  EXPECT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find(R"({"mode":"tcp","size":1000,)"), std::string::npos)
    << r.text;
}

TEST(ProgramOptions, RemoteBenchHelpExitsZero) {
  expect_help("remote_bench", {"--help"}, "collector");
}

TEST(ProgramOptions, RemoteBenchModeHelpListsTheOptions) {
  expect_help("remote_bench", {"relay", "-h"}, "--fanout INT");
}

TEST(ProgramOptions, ConnectBenchHelpExitsZero) {
  expect_help("connect_bench", {"--help"}, "--rounds INT");
}

TEST(ProgramOptions, RouterLatencyBenchHelpExitsZero) {
  expect_help("router_latency_bench", {"--help"}, "--quick");
}

// Before: options it did not know were ignored.
TEST(ProgramOptions, RouterLatencyBenchNamesAnUnknownOption) {
  expect_refused("router_latency_bench", {"--quik"},
                 "router_latency_bench: unknown option '--quik'");
}

TEST(ProgramOptions, PpoCartpoleNamesAnUnknownOption) {
  expect_refused("ppo_cartpole", {"--sede", "3"},
                 "unknown option '--sede' (see --help)");
}
