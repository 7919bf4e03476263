// dice-launch --max-restarts: real processes. A stand-in node
// (dice_flaky_node) fails on request for the launcher's own rules; a
// dice_exchange_probe cluster shows that a collector killed with kill -9 three
// times comes back three times and that the learner counts exactly what the
// collectors produced: nothing twice, and (through the spool the launcher
// gives each node) nothing lost in flight at a kill.
// Every wait has a deadline; nothing sleeps to pass.

#include "support/child_process.hpp"
#include "support/launch.hpp"
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using process = dice::test::child_process;
using clock_type = std::chrono::steady_clock;

using dice::test::bin_dir;

std::vector<std::string> launch(std::vector<std::string> launcher_args,
                                std::vector<std::string> program) {
  std::vector<std::string> args{bin_dir + "dice-launch"};
  args.insert(args.end(), launcher_args.begin(), launcher_args.end());
  args.push_back("--");
  args.insert(args.end(), program.begin(), program.end());
  return args;
}

/// Running: the process exists and is not a zombie (an orphan waits for
/// init to reap it, but it no longer runs).
bool running(pid_t pid) {
  std::ifstream f{"/proc/" + std::to_string(pid) + "/stat"};
  std::string stat;
  if (!std::getline(f, stat))
    return false;
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size()
    && stat[close + 2] != 'Z';
}

/// Waits (bounded) until none of `pids` runs; returns those still running.
/// A pidfd becomes readable when its process ends, also for processes that
/// are not our children.
std::vector<pid_t> wait_gone(const std::vector<pid_t>& pids,
                             std::chrono::milliseconds timeout) {
  auto deadline = clock_type::now() + timeout;
  std::vector<pid_t> alive;
  for (auto pid : pids) {
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - clock_type::now());
      pollfd pfd{fd, POLLIN, 0};
      ::poll(&pfd, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
      ::close(fd);
    }
    if (running(pid))
      alive.push_back(pid);
  }
  return alive;
}

std::size_t count_lines(const process& p, const std::regex& re) {
  std::size_t n = 0;
  for (auto& l : p.lines())
    if (std::regex_search(l, re))
      ++n;
  return n;
}

// DI-engine's test_auto_recover: a main that fails in its first runs is
// run again and then completes.
TEST(Supervision, NodeThatFailsItsFirstRunsIsRestartedAndCompletes) {
  process p{launch({"--workers", "1", "--topology", "alone", "--max-restarts",
                    "3", "--restart-backoff", "0.05"},
                   {bin_dir + "dice_flaky_node", "--fail-runs=2"})};
  auto rc = p.wait_exit(30s);
  ASSERT_TRUE(rc) << p.text();
  EXPECT_EQ(*rc, 0) << p.text();
  EXPECT_EQ(count_lines(p, std::regex{"fails on purpose"}), 2u) << p.text();
  EXPECT_EQ(count_lines(p, std::regex{"flaky node 0 pid [0-9]+ restart 2"}), 1u)
    << "the third run did not see DICE_RESTART_COUNT=2\n"
    << p.text();
  EXPECT_EQ(count_lines(p, std::regex{"flaky node 0 succeeded"}), 1u);
  // Exponential backoff, each restart logged with how the node ended.
  EXPECT_EQ(count_lines(p,
                        std::regex{"node 0 died \\(exit code 3\\); restart "
                                   "1 of 3 in 0.05 s"}),
            1u)
    << p.text();
  EXPECT_EQ(count_lines(p,
                        std::regex{"node 0 died \\(exit code 3\\); restart "
                                   "2 of 3 in 0.1 s"}),
            1u)
    << p.text();
  EXPECT_EQ(count_lines(p,
                        std::regex{"summary: 1 nodes, 2 restart\\(s\\); "
                                   "node 0: 2 restart\\(s\\) after exit "
                                   "code 3, exit code 3; exit code 0"}),
            1u)
    << p.text();
}

TEST(Supervision, NodeThatKeepsFailingEndsTheRunAfterMaxRestarts) {
  process p{launch({"--workers", "2", "--topology", "alone", "--max-restarts",
                    "2", "--restart-backoff", "0.01"},
                   {bin_dir + "dice_flaky_node", "--fail-runs=-1",
                    "--fail-node=1", "--run"})};
  auto rc = p.wait_exit(30s);
  ASSERT_TRUE(rc) << p.text();
  EXPECT_NE(*rc, 0) << p.text();
  EXPECT_EQ(count_lines(p, std::regex{"fails on purpose"}), 3u) << p.text();
  EXPECT_EQ(count_lines(p,
                        std::regex{"node 1 failed 3 times \\(last: exit "
                                   "code 3\\); giving up after 2 "
                                   "restart\\(s\\) \\(--max-restarts 2\\): "
                                   "stopping the run"}),
            1u)
    << p.text();
  EXPECT_EQ(count_lines(p,
                        std::regex{"summary: 2 nodes, 2 restart\\(s\\);.* "
                                   "gave up"}),
            1u)
    << p.text();
  // Node 0 ran on until the launcher stopped it: it is not left behind.
  std::smatch m;
  auto node0 = std::regex{"flaky node 0 pid ([0-9]+)"};
  pid_t pid0 = 0;
  for (auto& l : p.lines())
    if (std::regex_search(l, m, node0))
      pid0 = static_cast<pid_t>(std::stol(m[1]));
  ASSERT_GT(pid0, 0) << p.text();
  EXPECT_TRUE(wait_gone({pid0}, 5s).empty());
}

TEST(Supervision, ExitZeroAndTheEndOfTheRunAreNeverRestarted) {
  // Node 0 ends the run (exit 0); node 1 fails later or earlier, with a
  // backoff long enough that the end of the run comes first.
  process p{
    launch({"--workers", "2", "--topology", "alone", "--max-restarts", "3",
            "--restart-backoff", "20"},
           {bin_dir + "dice_flaky_node", "--fail-runs=-1", "--fail-node=1"})};
  auto rc = p.wait_exit(15s);
  ASSERT_TRUE(rc) << "a restart was scheduled after the run ended\n"
                  << p.text();
  EXPECT_EQ(*rc, 3) << p.text();
  EXPECT_EQ(count_lines(p, std::regex{"restarted node"}), 0u) << p.text();
  EXPECT_EQ(count_lines(p, std::regex{"summary: 2 nodes, 0 restart\\(s\\)"}),
            1u)
    << p.text();
}

TEST(Supervision, NodeThatFailsAfterTheRunFinishedIsNotRestarted) {
  // It logged "run finished by node 0" (dice's router does at the end of the
  // run), then exited non-zero, as a node that crashes while stopping.
  process p{launch({"--workers", "1", "--topology", "alone", "--max-restarts",
                    "3", "--restart-backoff", "0.01"},
                   {bin_dir + "dice_flaky_node", "--finish-then-fail"})};
  auto rc = p.wait_exit(15s);
  ASSERT_TRUE(rc) << p.text();
  EXPECT_EQ(*rc, 3) << p.text();
  EXPECT_EQ(count_lines(p,
                        std::regex{"node 0 is not restarted: the run "
                                   "finished"}),
            1u)
    << p.text();
  EXPECT_EQ(count_lines(p, std::regex{"restarted node"}), 0u) << p.text();
}

TEST(Supervision, NodeKilledBySignalIsRestartedWithTheSignalLogged) {
  process p{launch({"--workers", "1", "--topology", "alone", "--max-restarts",
                    "1", "--restart-backoff", "0.01"},
                   {bin_dir + "dice_flaky_node", "--run"})};
  std::smatch m;
  ASSERT_TRUE(
    p.wait_for(std::regex{"flaky node 0 pid ([0-9]+) restart 0"}, 10s, &m))
    << p.text();
  ::kill(static_cast<pid_t>(std::stol(m[1])), SIGKILL);
  ASSERT_TRUE(p.wait_for(std::regex{"flaky node 0 pid [0-9]+ restart 1"}, 10s))
    << p.text();
  EXPECT_EQ(count_lines(p,
                        std::regex{"node 0 died \\(signal 9 \\(Killed\\)\\); "
                                   "restart 1 of 1"}),
            1u)
    << p.text();
  p.kill(SIGTERM);
  auto rc = p.wait_exit(10s);
  ASSERT_TRUE(rc) << p.text();
  EXPECT_EQ(count_lines(p,
                        std::regex{"node 0: 1 restart\\(s\\) after signal "
                                   "9 \\(Killed\\)"}),
            1u)
    << p.text();
}

/// Starts 3 nodes that each fork a grandchild, SIGTERMs the launcher and
/// returns the pids still running afterwards.
std::vector<pid_t> stop_launcher(bool ignore_term,
                                 std::vector<std::string> launcher_args,
                                 std::string* out) {
  std::vector<std::string> prog{bin_dir + "dice_flaky_node", "--run",
                                "--grandchild"};
  if (ignore_term)
    prog.emplace_back("--ignore-term");
  launcher_args.insert(launcher_args.begin(),
                       {"--workers", "3", "--topology", "alone"});
  process p{launch(launcher_args, prog)};
  std::vector<pid_t> pids;
  std::smatch m;
  auto re = std::regex{"flaky node [0-9]+ (pid|grandchild) ([0-9]+)"};
  while (pids.size() < 6 && p.wait_for(re, 10s, &m))
    pids.push_back(static_cast<pid_t>(std::stol(m[2])));
  EXPECT_EQ(pids.size(), 6u) << p.text();
  p.kill(SIGTERM);
  auto rc = p.wait_exit(10s);
  EXPECT_TRUE(rc) << "the launcher did not exit after SIGTERM\n" << p.text();
  *out = p.text();
  auto alive = wait_gone(pids, 2s);
  // Leave nothing behind for the next test either.
  for (auto pid : alive)
    ::kill(pid, SIGKILL);
  return alive;
}

TEST(Supervision, SigtermToTheLauncherLeavesNoProcessBehind) {
  std::string out;
  // Plain launcher options: the same test runs against a launcher without
  // supervision or process groups (3 grandchildren survived it).
  auto alive = stop_launcher(false, {}, &out);
  EXPECT_TRUE(alive.empty()) << alive.size() << " processes survived\n" << out;
}

TEST(Supervision, NodesThatIgnoreSigtermAreKilledAfterTheStopTimeout) {
  std::string out;
  auto alive = stop_launcher(
    true, {"--max-restarts", "3", "--stop-timeout", "0.5"}, &out);
  EXPECT_TRUE(alive.empty()) << alive.size() << " processes survived\n" << out;
  EXPECT_EQ(out.find("restarted node"), std::string::npos)
    << "a stopped node was restarted\n"
    << out;
  EXPECT_NE(out.find("still runs 0.5 s after the stop; killing it"),
            std::string::npos)
    << out;
}

// -- a dice cluster -----------------------------------------------------------

long json_int(const std::string& line, const std::string& name) {
  return dice::test::json_int(line, name);
}

using dice::test::report_of;

TEST(SupervisedCluster,
     CollectorKilledThreeTimesComesBackAndNothingIsCountedTwice) {
  // Learner, evaluator, collectors 2 and 3; the first collector to make
  // 6000 iterations ends the run. Collector 3 is killed (kill -9) three
  // times, each time once it iterates again.
  process p{launch(
    {"--workers", "4", "--max-restarts", "3", "--restart-backoff", "0.05"},
    {bin_dir + "dice_exchange_probe", "--trace", "--collector-steps=6000",
     "--steps=1000000000", "--dice.peer-loss-timeout=20s"})};
  std::smatch m;
  ASSERT_TRUE(p.wait_for(std::regex{"node 3 started, pid ([0-9]+)"}, 30s, &m))
    << p.text();
  auto pid = static_cast<pid_t>(std::stol(m[1]));
  // What each killed incarnation produced: the steps it handed to its router
  // by its last "published" line (the context exchanger spools each delta
  // before it publishes it), plus a delta it spooled after that line, which
  // only its successor's "recovered" lines show.
  struct killed {
    long published = 0;
    long iteration = -1;
    std::string incarnation;
  };
  std::vector<killed> kills;
  std::vector<double> back_after;
  auto published_re = std::regex{
    "^\\[node 3\\] .*published iteration "
    "([0-9]+) env_step ([0-9]+) incarnation ([0-9]+)"};
  for (int kill = 0; kill < 3; ++kill) {
    ASSERT_TRUE(
      p.wait_for(std::regex{"^\\[node 3\\] .*collect iteration 20 "}, 60s))
      << p.text();
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    auto killed_at = clock_type::now();
    ASSERT_TRUE(p.wait_for(std::regex{"restarted node 3 \\(restart "
                                      + std::to_string(kill + 1)
                                      + " of 3, pid ([0-9]+)\\)"},
                           30s, &m))
      << p.text();
    auto next_pid = static_cast<pid_t>(std::stol(m[1]));
    // The old incarnation's lines all came before the restart line.
    killed last;
    for (auto& l : p.lines()) {
      std::smatch pm;
      if (std::regex_search(l, pm, published_re))
        last = killed{std::stol(pm[2]), std::stol(pm[1]), pm[3]};
      if (l.find("restarted node 3 (restart " + std::to_string(kill + 1))
          != std::string::npos)
        break;
      if (l.find("restarted node 3 (restart ") != std::string::npos)
        last = killed{}; // an earlier incarnation ended here
    }
    kills.push_back(last);
    // Back: the new incarnation iterates again.
    ASSERT_TRUE(
      p.wait_for(std::regex{"^\\[node 3\\] .*collect iteration 0 "}, 60s))
      << p.text();
    back_after.push_back(
      std::chrono::duration<double>(clock_type::now() - killed_at).count());
    pid = next_pid;
  }
  auto rc = p.wait_exit(120s);
  ASSERT_TRUE(rc) << "the run did not end\n" << p.text();
  EXPECT_EQ(*rc, 0) << p.text();
  EXPECT_EQ(count_lines(p,
                        std::regex{"summary: 4 nodes, 3 restart\\(s\\); "
                                   "node 3: 3 restart\\(s\\) after signal "
                                   "9 \\(Killed\\), signal 9 \\(Killed\\), "
                                   "signal 9 \\(Killed\\); exit code 0"}),
            1u)
    << p.text();
  // Each spooled delta a successor recovered, once per (incarnation, seq): an
  // incarnation killed before the learner acknowledged what it republished
  // leaves it to the next one.
  std::map<std::pair<std::string, long>, long> recovered;
  std::string spool_dir;
  auto recovered_re = std::regex{"^\\[node 3\\] .*spool: recovered delta "
                                 "([0-9]+) of incarnation ([0-9]+) "
                                 "\\(env_step \\+([0-9]+)\\)"};
  auto spool_re = std::regex{"spool unacknowledged context in (\\S+)"};
  for (auto& l : p.lines()) {
    std::smatch rm;
    if (std::regex_search(l, rm, recovered_re))
      recovered[{rm[2], std::stol(rm[1])}] = std::stol(rm[3]);
    if (std::regex_search(l, rm, spool_re))
      spool_dir = rm[1];
  }
  auto learner = report_of(p, 0);
  auto c2 = report_of(p, 2);
  auto c3 = report_of(p, 3);
  ASSERT_FALSE(learner.empty() || c2.empty() || c3.empty()) << p.text();
  EXPECT_EQ(json_int(c3, "restarts"), 3) << c3;
  long made = json_int(c2, "env_step") + json_int(c3, "env_step");
  long after_last_line = 0;
  for (auto& k : kills) {
    EXPECT_GT(k.published, 0);
    made += k.published;
    // Iteration i published seq i + 1 (a collector sends one delta per
    // iteration).
    for (auto& [key, steps] : recovered)
      if (key.first == k.incarnation && key.second > k.iteration + 1) {
        made += steps;
        after_last_line += steps;
      }
  }
  auto got = json_int(learner, "env_step");
  std::cout << "killed incarnations published " << kills[0].published << ", "
            << kills[1].published << ", " << kills[2].published
            << " steps; back iterating after " << back_after[0] << ", "
            << back_after[1] << ", " << back_after[2] << " s; "
            << recovered.size() << " spooled deltas recovered ("
            << after_last_line << " steps past a last published line)"
            << "; collectors made " << made << ", learner got " << got
            << " (lost " << made - got << ")" << std::endl;
  // Exactly once: what a killed incarnation published but the learner had
  // not acknowledged outlived it in the spool and was republished by its
  // successor under its own incarnation; the learner dropped what it had
  // already.
  EXPECT_EQ(got, made) << (got > made ? "duplicated " : "lost ")
                       << std::labs(got - made) << "\n"
                       << learner;
  EXPECT_EQ(json_int(learner, "trajectories_received"), got) << learner;
  // The launcher's spool directory is gone with the run.
  ASSERT_FALSE(spool_dir.empty()) << p.text();
  EXPECT_FALSE(std::filesystem::exists(spool_dir)) << spool_dir;
}

} // namespace
