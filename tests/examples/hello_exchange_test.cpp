// Runs the hello_exchange example as a user would and checks the JSON line
// each role actor prints at the end.

#include "support/child_process.hpp"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

struct run_result {
  int exit_code = -1;
  std::vector<nlohmann::json> lines;
};

// Runs the example with a deadline and parses its JSON lines.
run_result run_example(std::vector<std::string> args,
                       std::string* output = nullptr,
                       std::vector<std::string> env = {}) {
  run_result result;
  args.insert(args.begin(),
              std::string{DICE_BINARY_DIR} + "/bin/hello_exchange");
  dice::test::child_process p{std::move(args), std::move(env)};
  auto rc = p.wait_exit(std::chrono::seconds{120});
  result.exit_code = rc ? *rc : -1;
  for (auto& line : p.lines())
    if (!line.empty() && line.front() == '{')
      result.lines.push_back(nlohmann::json::parse(line));
  if (output)
    *output = p.text();
  return result;
}

void check_run(const run_result& res, int steps, int collectors) {
  ASSERT_EQ(res.exit_code, 0);
  ASSERT_EQ(res.lines.size(), static_cast<size_t>(2 + collectors));
  std::map<std::string, int> roles;
  nlohmann::json learner;
  std::int64_t collected = 0;
  std::int64_t episodes = 0;
  for (auto& j : res.lines) {
    for (auto key : {"node", "role", "total_step", "env_step", "env_episode",
                     "train_iter", "model_version", "trajectories_received"})
      EXPECT_TRUE(j.contains(key)) << key << " missing in " << j.dump();
    auto role = j["role"].get<std::string>();
    ++roles[role];
    if (role == "learner")
      learner = j;
    if (role == "collector") {
      collected += j["env_step"].get<std::int64_t>();
      episodes += j["env_episode"].get<std::int64_t>();
      // Collectors end with the learner's final train_iter.
      EXPECT_EQ(j["train_iter"].get<int>(), steps) << j.dump();
    }
  }
  EXPECT_EQ(roles["learner"], 1);
  EXPECT_EQ(roles["evaluator"], 1);
  EXPECT_EQ(roles["collector"], collectors);
  // Nothing is lost: the learner counted every step the collectors made and
  // received every batch (one item of 16 steps per collector iteration).
  EXPECT_EQ(learner["env_step"].get<std::int64_t>(), collected);
  EXPECT_EQ(learner["env_episode"].get<std::int64_t>(), episodes);
  EXPECT_EQ(learner["trajectories_received"].get<std::int64_t>() * 16,
            collected);
  EXPECT_EQ(learner["train_iter"].get<int>(), steps);
  EXPECT_EQ(learner["total_step"].get<int>(), steps - 1);
  EXPECT_EQ(learner["model_version"].get<int>(), steps);
  EXPECT_EQ(learner["stop_reason"].get<std::string>(), "max_step");
}

TEST(HelloExchange, DefaultRunPrintsOneJsonLinePerRoleActor) {
  check_run(run_example({"--steps=10"}), 10, 2);
}

TEST(HelloExchange, MoreCollectors) {
  check_run(run_example({"--steps=7", "--collectors=4"}), 7, 4);
}

// Before: CAF 0.17's parser took only --key=value and this run failed with
// parser_error(missing_argument).
TEST(HelloExchange, OptionsTakeTheirValueAsTheNextArgument) {
  // Flags in between keep taking no value.
  check_run(
    run_example({"--steps", "6", "--dice.deterministic", "--collectors", "3"}),
    6, 3);
}

TEST(HelloExchange, UnknownOptionIsNamed) {
  std::string out;
  auto res = run_example({"--stepz", "10"}, &out);
  EXPECT_EQ(res.exit_code, 1);
  EXPECT_NE(out.find("unknown option '--stepz' (see --help)"),
            std::string::npos)
    << out;
}

TEST(HelloExchange, OptionWithoutItsValueIsNamed) {
  std::string out;
  auto res = run_example({"--collectors=1", "--steps"}, &out);
  EXPECT_EQ(res.exit_code, 1);
  EXPECT_NE(out.find("option '--steps' needs a value"), std::string::npos)
    << out;
}

// DICE_LOG_LEVEL=debug shows the per-delta lines (applied, acked), which
// are off by default; the run's results do not change.
TEST(HelloExchange, DiceLogLevelDebugShowsPerDeltaLines) {
  std::string quiet;
  check_run(run_example({"--steps=5"}, &quiet), 5, 2);
  EXPECT_EQ(quiet.find(" debug "), std::string::npos) << quiet;
  std::string loud;
  check_run(run_example({"--steps=5"}, &loud, {"DICE_LOG_LEVEL=debug"}), 5, 2);
  EXPECT_NE(loud.find("applied delta"), std::string::npos) << loud;
  EXPECT_NE(loud.find("ack to node"), std::string::npos) << loud;
}

// caf_main's failure is the process's exit code (CAF 0.17's own CAF_MAIN
// exits 0 whatever caf_main returns).
TEST(HelloExchange, BadNodeSettingsFailWithNonZeroExit) {
  auto res = run_example({"--dice.roles=juggler"});
  EXPECT_EQ(res.exit_code, 1);
}

TEST(HelloExchange, BadOptionFailsWithNonZeroExit) {
  auto res = run_example({"--collectors", "notanumber"});
  EXPECT_NE(res.exit_code, 0);
}

// -- nothing in flight is lost at the end of a two-process run -------------

// Twenty two-process runs (learner + collector, dice-launch) with the
// storage loader on and off, four at a time. Even runs are ended by the
// collector (its last delta must reach the learner before its finish), odd
// ones by the learner (the collector's last delta, made after the finish,
// must still be loaded and merged before the learner quits).
class LastDeltaProcesses : public testing::TestWithParam<bool> {};

TEST_P(LastDeltaProcesses, TwentyRunsLoseNothing) {
  using namespace std::chrono_literals;
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path()
    / ("dice-last-delta-proc-" + std::to_string(::getpid()));
  auto bin = std::string{DICE_BINARY_DIR} + "/bin/";
  auto start = [&](int i) {
    std::vector<std::string> args{
      bin + "dice-launch",        "--workers", "2", "--topology", "star", "--",
      bin + "dice_exchange_probe"};
    if (i % 2 == 0) {
      args.push_back("--steps=100000000");
      args.push_back("--collector-steps=3");
    } else {
      args.push_back("--steps=3");
    }
    if (GetParam()) {
      args.push_back("--storage=file");
      args.push_back("--storage-dir=" + dir.string());
    }
    return std::make_unique<dice::test::child_process>(args);
  };
  int lossy = 0;
  for (int batch = 0; batch < 5; ++batch) {
    std::vector<std::unique_ptr<dice::test::child_process>> runs;
    for (int k = 0; k < 4; ++k)
      runs.push_back(start(batch * 4 + k));
    for (auto& run : runs) {
      auto rc = run->wait_exit(60s);
      ASSERT_TRUE(rc) << run->text();
      ASSERT_EQ(*rc, 0) << run->text();
      long learner = -1;
      long received = -1;
      long collector = -1;
      for (auto& line : run->lines()) {
        if (line.find("\"stop_reason\"") == std::string::npos)
          continue;
        auto role = dice::test::json_str(line, "role");
        if (role == "learner") {
          learner = dice::test::json_int(line, "env_step");
          received = dice::test::json_int(line, "trajectories_received");
        } else if (role == "collector") {
          collector = dice::test::json_int(line, "env_step");
        }
      }
      ASSERT_GT(collector, 0) << run->text();
      EXPECT_EQ(received, learner) << run->text();
      if (learner != collector)
        ++lossy;
    }
  }
  fs::remove_all(dir);
  EXPECT_EQ(lossy, 0) << "two-process runs that lost a delta, of 20";
}

INSTANTIATE_TEST_SUITE_P(Paths, LastDeltaProcesses, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "Loader" : "Router";
                         });

} // namespace
