// The learner group inside dice (issue 12): dqn_cartpole with 2 learners,
// in one process (each learner its own node) and as a dice-launch cluster:
// a learner killed, restarted and admitted again; rank 0 killed.
// Short runs with budgets: what they prove is the wiring (exact counts,
// identical parameters, failure and re-formation), not solving CartPole
// (the long solves are manual, figures in docs/learner_group.md).

#include "support/child_process.hpp"
#include "support/files.hpp"
#include "support/launch.hpp"
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
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

using dice::test::bin_dir;

using dice::test::read_all;

std::vector<std::string> read_lines(const fs::path& p) {
  std::vector<std::string> result;
  std::ifstream f{p};
  for (std::string line; std::getline(f, line);)
    if (!line.empty())
      result.push_back(line);
  return result;
}

using dice::test::scratch;

/// The last report JSON line per node in `lines` (every node prints its
/// final report as one JSON object on stdout).
std::map<long, std::string> reports(const std::vector<std::string>& lines) {
  std::map<long, std::string> result;
  for (auto& l : lines) {
    auto pos = l.find("{\"node\"");
    if (pos == std::string::npos
        || l.find("\"stop_reason\"") == std::string::npos)
      continue;
    auto json = l.substr(pos);
    result[json_int(json, "node")] = json;
  }
  return result;
}

// L learners in one process: the group's env_step equals the steps the
// collectors made (each collector's context went to exactly one learner,
// and the group added the learners' shares), every learner reports the same
// totals, and the parameter digests every learner logged after every
// iteration are identical, line by line (the group also compared them).
void in_process_run(int learners) {
  scratch out{"dice_lg_inproc" + std::to_string(learners)};
  child_process run{
    {bin_dir + "dqn_cartpole", "--learners=" + std::to_string(learners),
     "--seed=3", "--collectors=3", "--envs-per-collector=4",
     "--max-env-steps=6000", "--learning-starts=400", "--stop-value=100000",
     "--verify-every=1", "--quiet", "--no-plot", "--out=" + out.dir.string()}};
  auto rc = run.wait_exit(120s);
  ASSERT_TRUE(rc) << "the run did not end within 120 s\n" << run.text();
  EXPECT_EQ(*rc, 0) << run.text();
  auto reps = reports(run.lines());
  // Nodes 0..L-1 are ranks 0..L-1, node L the evaluator, L+1..L+3 the
  // collectors (dice::run's default roles).
  ASSERT_EQ(reps.size(), 4u + static_cast<std::size_t>(learners)) << run.text();
  long collected = 0;
  long episodes = 0;
  for (long id = learners + 1; id <= learners + 3; ++id) {
    EXPECT_EQ(json_str(reps[id], "role"), "collector") << reps[id];
    collected += json_int(reps[id], "env_step");
    episodes += json_int(reps[id], "env_episode");
  }
  std::cout << "collectors made " << collected << " env steps, " << episodes
            << " episodes" << std::endl;
  EXPECT_GE(collected, 6000);
  std::vector<long> ranks;
  for (long r = 0; r < learners; ++r)
    ranks.push_back(r);
  auto d0 = read_lines(out.dir / "digests-0.txt");
  ASSERT_GT(d0.size(), 10u);
  for (long id : ranks) {
    std::cout << "learner node " << id << ": " << reps[id] << std::endl;
    EXPECT_EQ(json_str(reps[id], "role"), "learner") << reps[id];
    EXPECT_EQ(json_int(reps[id], "env_step"), collected) << reps[id];
    EXPECT_EQ(json_int(reps[id], "env_episode"), episodes) << reps[id];
    EXPECT_EQ(json_int(reps[0], "train_iter"),
              json_int(reps[id], "train_iter"));
    // Only rank 0 publishes models.
    if (id != 0) {
      EXPECT_EQ(json_int(reps[id], "models_sent"), 0) << reps[id];
    }
    EXPECT_EQ(d0,
              read_lines(out.dir / ("digests-" + std::to_string(id) + ".txt")))
      << "node " << id;
  }
  EXPECT_GT(json_int(reps[0], "train_iter"), 0) << reps[0];
  EXPECT_GT(json_int(reps[0], "models_sent"), 0) << reps[0];
  EXPECT_EQ(json_int(read_all(out.dir / "summary.json"), "env_steps"),
            collected);
  // The digests change as the learners train (each line: generation,
  // train_iter, gradient steps, digest).
  EXPECT_NE(d0.front().substr(d0.front().rfind(' ')),
            d0.back().substr(d0.back().rfind(' ')));
  std::cout << d0.size() << " identical digests, last: " << d0.back()
            << std::endl;
}

TEST(LearnerGroupRun, InProcessCountsExactlyAndKeepsParametersIdentical) {
  in_process_run(2);
}

// Three learners: the partition is collector id mod 3 (one collector each).
TEST(LearnerGroupRun, InProcessThreeLearnersCountExactly) {
  in_process_run(3);
}

// dice-launch --workers 5 --learners 2: nodes 0 and 1 form the group over
// loopback (rank 0's store address travels on the router). Once rank 0 trains,
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
  auto victim = dice::test::launched_node_pid(launch.pid(), 1);
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

using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

/// Seconds of the day of the first line matching `pattern` (the nodes log
/// "HH:MM:SS.mmm"); -1 if none.
double log_seconds(const std::vector<std::string>& lines,
                   const std::string& pattern) {
  std::regex re{pattern};
  std::regex stamp{R"((\d\d):(\d\d):(\d\d\.\d+) )"};
  for (auto& l : lines) {
    std::smatch m;
    if (std::regex_search(l, re) && std::regex_search(l, m, stamp))
      return std::stod(m[1]) * 3600 + std::stod(m[2]) * 60 + std::stod(m[3]);
  }
  return -1;
}

/// The collectors' env steps (nodes `first`..`last`' summaries).
long collectors_made(const fs::path& dir, int first, int last) {
  long result = 0;
  for (int id = first; id <= last; ++id) {
    auto c = read_all(dir / ("summary-" + std::to_string(id) + ".json"));
    EXPECT_FALSE(c.empty()) << "no summary of node " << id;
    result += json_int(c, "env_steps");
  }
  return result;
}

// dice-launch --max-restarts 1: rank 1 is killed mid-training; rank 0
// re-forms alone (generation 1), dice-launch starts node 1 again, which asks
// to join; rank 0 admits it at an iteration boundary and both form
// generation 2 at L = 2 (collector id mod 2 again: collector 3 goes back to
// rank 1, starting where the group counted it). The run ends by its budget
// with both learners' env_step equal to what the collectors made, the same
// train_iter, and the restarted learner's parameter digests equal to rank
// 0's at the same iterations.
TEST(LearnerGroupRun, RestartedLearnerRejoinsAndCountsStayExact) {
  scratch out{"dice_lg_rejoin"};
  child_process launch{
    {bin_dir + "dice-launch", "--workers", "5", "--learners", "2",
     "--max-restarts", "1", "--", bin_dir + "dqn_cartpole", "--seed=2",
     "--envs-per-collector=4", "--max-env-steps=12000", "--max-seconds=90",
     "--learning-starts=400", "--stop-value=100000", "--verify-every=5",
     "--no-plot", "--out=" + out.dir.string()}};
  ASSERT_TRUE(launch.wait_for(std::regex{R"(\[node 1\].*formed)"}, 60s))
    << launch.text();
  ASSERT_TRUE(
    launch.wait_for(std::regex{R"(\[node 0\].*iter [1-9][0-9]* \|)"}, 60s))
    << launch.text();
  auto victim = dice::test::launched_node_pid(launch.pid(), 1);
  ASSERT_GT(victim, 0) << "no node 1 under dice-launch";
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_TRUE(launch.wait_for(
    std::regex{R"(\[node 0\].*generation 1, rank 0 of 1\) formed)"}, 30s))
    << launch.text();
  ASSERT_TRUE(launch.wait_for(
    std::regex{R"(\[node 1\].*generation 2, rank 1 of 2\) formed)"}, 60s))
    << launch.text();
  // From the nodes' own timestamps: rank 0 saw the failure (tens of ms
  // after the kill), trained alone, the restarted node's first line, back.
  auto failed = log_seconds(launch.lines(), R"(\[node 0\].*step failed)");
  auto alone = log_seconds(launch.lines(),
                           R"(\[node 0\].*generation 1, rank 0 of 1\) formed)");
  auto restart = log_seconds(launch.lines(), R"(\[node 1\].*restart 1: )");
  auto back = log_seconds(launch.lines(),
                          R"(\[node 1\].*generation 2, rank 1 of 2\) formed)");
  std::cout << "failure seen -> training again at L = 1: "
            << 1000 * (alone - failed)
            << " ms; restarted node's first line -> back at L = 2: "
            << 1000 * (back - restart)
            << " ms; failure seen -> L = 2: " << 1000 * (back - failed) << " ms"
            << std::endl;
  auto rc = launch.wait_exit(120s);
  ASSERT_TRUE(rc) << "the run did not end\n" << launch.text();
  EXPECT_EQ(*rc, 0) << launch.text();
  auto r0 = read_all(out.dir / "summary-0.json");
  auto r1 = read_all(out.dir / "summary-1.json");
  ASSERT_FALSE(r0.empty()) << launch.text();
  ASSERT_FALSE(r1.empty()) << launch.text();
  auto collected = collectors_made(out.dir, 3, 4);
  std::cout << "rank 0: " << r0 << "rank 1 (restarted): " << r1
            << "collectors made " << collected << std::endl;
  EXPECT_EQ(json_str(r0, "stop_reason"), "max_env_steps") << r0;
  EXPECT_EQ(json_int(r0, "env_steps"), collected) << launch.text();
  EXPECT_EQ(json_int(r1, "env_steps"), collected) << launch.text();
  EXPECT_EQ(json_int(r0, "train_iters"), json_int(r1, "train_iters"));
  EXPECT_GT(json_int(r0, "train_iters"), 0);
  // Rank 0 is in generation 2 too (read once all output is in: its line
  // may come before or after rank 1's).
  EXPECT_GE(log_seconds(launch.lines(),
                        R"(\[node 0\].*generation 2, rank 0 of 2\) formed)"),
            0)
    << launch.text();
  // Peers leaving as the run ends are not mistaken for a lost rank 0.
  EXPECT_LT(log_seconds(launch.lines(), "was lost"), 0) << launch.text();
  // The restarted learner's digests (generation 2 only: its file began
  // with this incarnation) are rank 0's lines for the same iterations.
  auto d0 = read_lines(out.dir / "digests-0.txt");
  auto d1 = read_lines(out.dir / "digests-1.txt");
  ASSERT_FALSE(d1.empty()) << launch.text();
  for (auto& line : d1) {
    EXPECT_EQ(line.rfind("2 ", 0), 0u) << line;
    EXPECT_NE(std::find(d0.begin(), d0.end(), line), d0.end())
      << "rank 1's digest line is not rank 0's: " << line;
  }
  std::cout << d1.size() << " digest lines of the restarted learner equal "
            << "rank 0's" << std::endl;
}

// Rank 0 (the learner that publishes models) is killed: the group does not
// re-form around another rank 0 (not built); the survivor stops the run,
// writes the checkpoint and says how to resume. The resumed run (the same
// command with --resume) starts from that checkpoint's env_step and counts
// exactly from there.
TEST(LearnerGroupRun, RankZeroLostStopsWithACheckpointThatResumes) {
  scratch out{"dice_lg_rank0"};
  std::vector<std::string> dqn{bin_dir + "dqn_cartpole",
                               "--seed=2",
                               "--envs-per-collector=4",
                               "--max-seconds=60",
                               "--learning-starts=400",
                               "--stop-value=100000",
                               "--no-plot",
                               "--out=" + out.dir.string()};
  auto command = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> argv{
      bin_dir + "dice-launch", "--workers", "5", "--learners", "2", "--"};
    argv.insert(argv.end(), dqn.begin(), dqn.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  long ckpt_env_step = 0;
  {
    child_process launch{command({"--max-env-steps=40000"})};
    ASSERT_TRUE(launch.wait_for(std::regex{R"(\[node 1\].*formed)"}, 60s))
      << launch.text();
    ASSERT_TRUE(
      launch.wait_for(std::regex{R"(\[node 0\].*iter [1-9][0-9]* \|)"}, 60s))
      << launch.text();
    auto victim = dice::test::launched_node_pid(launch.pid(), 0);
    ASSERT_GT(victim, 0) << "no node 0 under dice-launch";
    auto t_kill = clock_type::now();
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
    std::smatch said;
    ASSERT_TRUE(launch.wait_for(
      std::regex{R"(\[node 1\].*lost rank 0.*Resume: run the same command )"
                 R"(again with --resume.*)"},
      30s, &said))
      << launch.text();
    std::cout << "kill of rank 0 -> the survivor's resume message: "
              << ms_between(t_kill, clock_type::now()) << " ms:\n"
              << said.str() << std::endl;
    auto rc = launch.wait_exit(60s);
    ASSERT_TRUE(rc) << "the run did not end\n" << launch.text();
    EXPECT_NE(*rc, 0);
    auto r1 = read_all(out.dir / "summary-1.json");
    ASSERT_FALSE(r1.empty()) << launch.text();
    EXPECT_EQ(json_str(r1, "stop_reason").rfind("error: rank 0", 0), 0u) << r1;
    auto ckpt = read_all(out.dir / "latest.json");
    ASSERT_FALSE(ckpt.empty());
    ckpt_env_step = json_int(ckpt, "env_step");
    // The survivor wrote it last, at the end of its run.
    EXPECT_EQ(ckpt_env_step, json_int(r1, "env_steps")) << ckpt << r1;
    EXPECT_GT(ckpt_env_step, 0);
  }
  std::error_code ec;
  for (int id = 0; id <= 4; ++id)
    fs::remove(out.dir / ("summary-" + std::to_string(id) + ".json"), ec);
  child_process resumed{command(
    {"--resume", "--max-env-steps=" + std::to_string(ckpt_env_step + 3000)})};
  ASSERT_TRUE(resumed.wait_for(
    std::regex{R"(\[node 0\].*resumed learner state from)"}, 60s))
    << resumed.text();
  auto rc = resumed.wait_exit(90s);
  ASSERT_TRUE(rc) << "the resumed run did not end\n" << resumed.text();
  EXPECT_EQ(*rc, 0) << resumed.text();
  auto r0 = read_all(out.dir / "summary-0.json");
  ASSERT_FALSE(r0.empty()) << resumed.text();
  auto collected = collectors_made(out.dir, 3, 4);
  std::cout << "resumed from env_step " << ckpt_env_step << "; rank 0: " << r0
            << "collectors made " << collected << std::endl;
  EXPECT_EQ(json_str(r0, "stop_reason"), "max_env_steps") << r0;
  EXPECT_EQ(json_int(r0, "env_steps"), ckpt_env_step + collected)
    << resumed.text();
}

} // namespace
