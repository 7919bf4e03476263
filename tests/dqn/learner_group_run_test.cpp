// The learner group inside dice (issue 12): dqn_cartpole with 2 learners,
// in one process (each learner its own node) and as a dice-launch cluster.
// Short runs with budgets: what they prove is the wiring (exact counts,
// identical parameters, failure and re-formation), not solving CartPole
// (the long solves are manual, figures in docs/learner_group.md).

#include "support/child_process.hpp"
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using dice::test::child_process;
using dice::test::json_int;
using dice::test::json_str;

const std::string bin_dir = std::string{DICE_BINARY_DIR} + "/bin/";

std::string read_all(const fs::path& p) {
  std::ifstream f{p};
  return {std::istreambuf_iterator<char>{f}, {}};
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::vector<std::string> result;
  std::ifstream f{p};
  for (std::string line; std::getline(f, line);)
    if (!line.empty())
      result.push_back(line);
  return result;
}

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

/// The last "report {...}" JSON per node in `lines` (in-process runs log
/// every node's final report).
std::map<long, std::string> reports(const std::vector<std::string>& lines) {
  std::map<long, std::string> result;
  for (auto& l : lines) {
    auto pos = l.find("report {");
    if (pos == std::string::npos)
      continue;
    auto json = l.substr(pos + 7);
    result[json_int(json, "node")] = json;
  }
  return result;
}

// Two learners in one process: the group's env_step equals the steps the
// collectors made (each collector's context went to exactly one learner,
// and the group added the learners' shares), both learners report the same
// totals, and the parameter digests both learners logged after every
// iteration are identical, line by line (the group also compared them).
TEST(LearnerGroupRun, InProcessCountsExactlyAndKeepsParametersIdentical) {
  scratch out{"dice_lg_inproc"};
  child_process run{{bin_dir + "dqn_cartpole", "--learners=2", "--seed=3",
                     "--collectors=3", "--envs-per-collector=4",
                     "--max-env-steps=6000", "--learning-starts=400",
                     "--stop-value=100000", "--verify-every=1", "--quiet",
                     "--no-plot", "--out=" + out.dir.string()}};
  auto rc = run.wait_exit(120s);
  ASSERT_TRUE(rc) << "the run did not end within 120 s\n" << run.text();
  EXPECT_EQ(*rc, 0) << run.text();
  auto reps = reports(run.lines());
  // Node 0 is rank 0, node 1 the evaluator, 2..4 collectors, 5 rank 1.
  ASSERT_EQ(reps.size(), 6u) << run.text();
  long collected = 0;
  long episodes = 0;
  for (long id = 2; id <= 4; ++id) {
    EXPECT_EQ(json_str(reps[id], "role"), "collector") << reps[id];
    collected += json_int(reps[id], "env_step");
    episodes += json_int(reps[id], "env_episode");
  }
  std::cout << "collectors made " << collected << " env steps, " << episodes
            << " episodes\nrank 0: " << reps[0] << "\nrank 1: " << reps[5]
            << std::endl;
  EXPECT_GE(collected, 6000);
  for (long id : {0L, 5L}) {
    EXPECT_EQ(json_str(reps[id], "role"), "learner") << reps[id];
    EXPECT_EQ(json_int(reps[id], "env_step"), collected) << reps[id];
    EXPECT_EQ(json_int(reps[id], "env_episode"), episodes) << reps[id];
  }
  EXPECT_EQ(json_int(reps[0], "train_iter"), json_int(reps[5], "train_iter"));
  EXPECT_GT(json_int(reps[0], "train_iter"), 0) << reps[0];
  EXPECT_EQ(json_int(read_all(out.dir / "summary.json"), "env_steps"),
            collected);
  // Only rank 0 publishes models.
  EXPECT_GT(json_int(reps[0], "models_sent"), 0) << reps[0];
  EXPECT_EQ(json_int(reps[5], "models_sent"), 0) << reps[5];
  auto d0 = read_lines(out.dir / "digests-0.txt");
  auto d1 = read_lines(out.dir / "digests-5.txt");
  ASSERT_GT(d0.size(), 10u);
  EXPECT_EQ(d0, d1);
  // The digests change as the learners train (each line: generation,
  // train_iter, gradient steps, digest).
  EXPECT_NE(d0.front().substr(d0.front().rfind(' ')),
            d0.back().substr(d0.back().rfind(' ')));
  std::cout << d0.size() << " identical digests, last: " << d0.back()
            << std::endl;
}

/// The pid of dice-launch's child with `--dice.node-id=ID` (-1: none).
pid_t node_pid(pid_t launcher, int id) {
  auto want = "--dice.node-id=" + std::to_string(id);
  for (auto& e : fs::directory_iterator{"/proc"}) {
    auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::ifstream stat{e.path() / "stat"};
    std::string text{std::istreambuf_iterator<char>{stat}, {}};
    auto close = text.rfind(')');
    if (close == std::string::npos)
      continue;
    std::istringstream rest{text.substr(close + 2)};
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != launcher)
      continue;
    auto cmd = read_all(e.path() / "cmdline");
    for (auto& c : cmd)
      if (c == '\0')
        c = ' ';
    if (cmd.find(want + " ") != std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// dice-launch --workers 5 --learners 2: nodes 0 and 1 form the group over
// loopback (rank 0's store address travels on the bus). Once rank 0 trains,
// rank 1 is killed with SIGKILL: rank 0's step ends with an error (no
// hang), it re-forms alone as generation 1, takes over rank 1's collectors
// and the run ends by its budget with the group's env_step equal to what
// the collectors made: nothing counted twice or lost across the failure.
TEST(LearnerGroupRun, ClusterSurvivesKillNineOfRankOne) {
  scratch out{"dice_lg_kill"};
  child_process launch{{bin_dir + "dice-launch", "--workers", "5", "--learners",
                        "2", "--", bin_dir + "dqn_cartpole", "--seed=2",
                        "--envs-per-collector=4", "--max-env-steps=20000",
                        "--max-seconds=60", "--learning-starts=400",
                        "--stop-value=100000", "--verify-every=5", "--no-plot",
                        "--out=" + out.dir.string()}};
  ASSERT_TRUE(launch.wait_for(std::regex{R"(\[node 1\].*formed)"}, 60s))
    << launch.text();
  // Rank 0's progress line once the group trains.
  ASSERT_TRUE(
    launch.wait_for(std::regex{R"(\[node 0\].*iter [1-9][0-9]* \|)"}, 60s))
    << launch.text();
  auto victim = node_pid(launch.pid(), 1);
  ASSERT_GT(victim, 0) << "no node 1 under dice-launch";
  auto t_kill = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_TRUE(launch.wait_for(std::regex{R"(\[node 0\].*step failed)"}, 30s))
    << launch.text();
  auto t_err = std::chrono::steady_clock::now();
  ASSERT_TRUE(launch.wait_for(
    std::regex{R"(\[node 0\].*re-forming with 1 learners)"}, 30s))
    << launch.text();
  std::cout << "rank 0 saw the failure "
            << std::chrono::duration<double, std::milli>(t_err - t_kill).count()
            << " ms after the kill" << std::endl;
  auto rc = launch.wait_exit(120s);
  ASSERT_TRUE(rc) << "the run did not end\n" << launch.text();
  // Node 1 died: the launcher reports it; the others ended by the budget.
  EXPECT_NE(*rc, 0);
  auto learner = read_all(out.dir / "summary-0.json");
  ASSERT_FALSE(learner.empty()) << launch.text();
  long collected = 0;
  for (int id = 3; id <= 4; ++id) {
    auto c = read_all(out.dir / ("summary-" + std::to_string(id) + ".json"));
    ASSERT_FALSE(c.empty()) << launch.text();
    collected += json_int(c, "env_steps");
  }
  std::cout << "learner: " << learner << "collectors made " << collected
            << std::endl;
  EXPECT_EQ(json_str(learner, "stop_reason"), "max_env_steps") << learner;
  EXPECT_EQ(json_int(learner, "env_steps"), collected) << launch.text();
  EXPECT_GT(json_int(learner, "train_iters"), 0);
  EXPECT_FALSE(fs::exists(out.dir / "summary-1.json"));
}

} // namespace
