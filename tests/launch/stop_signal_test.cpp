// SIGINT and SIGTERM are a graceful stop: the first finishes the run the
// way a learner's limit does (every step counted, every node's report
// written, exit 0), a second ends the process at once. Tried on the
// mechanism itself in a forked child, on a run of one process, and on a
// dice-launch cluster the way an operator stops it.

#include "dice/runtime/stop_signals.hpp"

#include "support/child_process.hpp"
#include "support/launch.hpp"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <iterator>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::test::child_process;

using dice::test::bin_dir;

// Runs `body` in a forked child and returns its wait status.
template <class F>
int in_child(F body) {
  auto pid = ::fork();
  if (pid == 0) {
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// In a child: waits up to 10 s for `flag`.
bool wait_flag(std::mutex& mtx, std::condition_variable& cv, bool& flag) {
  std::unique_lock<std::mutex> guard{mtx};
  return cv.wait_for(guard, 10s, [&] {
    return flag;
  });
}

TEST(StopSignal, TheFirstSignalCallsBackAndASecondEndsTheProcess) {
  // One signal: the callback gets it and the process goes on to exit 0.
  auto once = in_child([] {
    std::mutex mtx;
    std::condition_variable cv;
    bool called = false;
    int got = 0;
    auto handle = dice::on_stop_signal([&](int sig) {
      std::lock_guard<std::mutex> guard{mtx};
      got = sig;
      called = true;
      cv.notify_all();
    });
    ::raise(SIGTERM);
    if (!wait_flag(mtx, cv, called))
      return 2;
    return got == SIGTERM && dice::stop_signal_received() == SIGTERM ? 0 : 3;
  });
  ASSERT_TRUE(WIFEXITED(once)) << "status " << once;
  EXPECT_EQ(WEXITSTATUS(once), 0);
  // A second signal after the first was taken: the default action.
  auto twice = in_child([] {
    std::mutex mtx;
    std::condition_variable cv;
    bool called = false;
    auto handle = dice::on_stop_signal([&](int) {
      std::lock_guard<std::mutex> guard{mtx};
      called = true;
      cv.notify_all();
    });
    ::raise(SIGINT);
    if (!wait_flag(mtx, cv, called))
      return 2;
    ::raise(SIGTERM);
    return 4; // not reached: SIGTERM's default action ends the process
  });
  ASSERT_TRUE(WIFSIGNALED(twice)) << "status " << twice;
  EXPECT_EQ(WTERMSIG(twice), SIGTERM);
}

TEST(StopSignal, ASignalBeforeARunRegistersStillStopsIt) {
  auto status = in_child([] {
    // Installed by an earlier run, signalled between runs.
    {
      auto first = dice::on_stop_signal([](int) {});
    }
    ::raise(SIGTERM);
    std::mutex mtx;
    std::condition_variable cv;
    bool called = false;
    for (int i = 0; i < 2; ++i) {
      // The watcher may not have taken the signal yet: the registration
      // that follows it must still see it, now or when it comes.
      auto handle = dice::on_stop_signal([&](int sig) {
        std::lock_guard<std::mutex> guard{mtx};
        called = sig == SIGTERM;
        cv.notify_all();
      });
      if (wait_flag(mtx, cv, called))
        return 0;
    }
    return 2;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The JSON report lines of a run's nodes (dice-launch prefixes "[node N] ").
std::vector<nlohmann::json> reports(const child_process& p) {
  std::vector<nlohmann::json> out;
  for (auto& line : p.lines()) {
    auto at = line.find("{\"node\"");
    if (at == std::string::npos)
      continue;
    auto j = nlohmann::json::parse(line.substr(at), nullptr, false);
    if (!j.is_discarded())
      out.push_back(j);
  }
  return out;
}

// Every step the collectors made reached the learner.
void expect_counted(const std::vector<nlohmann::json>& reps, int collectors,
                    const std::string& text) {
  nlohmann::json learner;
  std::int64_t collected = 0;
  int seen = 0;
  for (auto& j : reps) {
    EXPECT_FALSE(j.value("failed", true)) << j.dump();
    if (j["role"] == "learner")
      learner = j;
    if (j["role"] == "collector") {
      collected += j["env_step"].get<std::int64_t>();
      ++seen;
    }
  }
  ASSERT_EQ(seen, collectors) << text;
  ASSERT_FALSE(learner.is_null()) << text;
  EXPECT_GT(collected, 0);
  EXPECT_EQ(learner["env_step"].get<std::int64_t>(), collected) << text;
  EXPECT_EQ(learner["trajectories_received"].get<std::int64_t>(), collected)
    << text;
}

// Lets `run` train (a learner iteration after the 5th), stops it with
// SIGTERM and returns its nodes' reports; it must exit 0.
std::vector<nlohmann::json> stop_with_sigterm(child_process& run) {
  if (!run.wait_for(std::regex{"train iteration [5-9] "}, 60s)) {
    ADD_FAILURE() << "the learner did not train\n" << run.text();
    return {};
  }
  run.kill(SIGTERM);
  auto rc = run.wait_exit(60s);
  if (!rc) {
    ADD_FAILURE() << "still running 60 s after SIGTERM\n" << run.text();
    return {};
  }
  EXPECT_EQ(*rc, 0) << run.text();
  auto reps = reports(run);
  EXPECT_EQ(reps.size(), 4u) << run.text();
  return reps;
}

TEST(StopSignal, SigtermEndsARunOfOneProcessWithEveryStepCounted) {
  // --steps=0: the run has no end of its own.
  child_process run{{bin_dir + "dice_exchange_probe", "--steps=0",
                     "--collectors=2", "--trace"}};
  auto reps = stop_with_sigterm(run);
  for (auto& j : reps) {
    if (j["role"] == "learner") {
      EXPECT_EQ(j["stop_reason"], "SIGTERM") << j.dump();
    }
  }
  expect_counted(reps, 2, run.text());
}

TEST(StopSignal, SigtermToDiceLaunchStopsEveryNodeWithEveryStepCounted) {
  // As an operator (or Slurm) stops a job: the launcher gets SIGTERM and
  // forwards it to every node.
  child_process run{{bin_dir + "dice-launch", "--workers", "4", "--",
                     bin_dir + "dice_exchange_probe", "--steps=0", "--trace"}};
  auto reps = stop_with_sigterm(run);
  for (auto& j : reps) {
    auto reason = j["stop_reason"].get<std::string>();
    EXPECT_NE(reason.find("SIGTERM"), std::string::npos) << j.dump();
  }
  expect_counted(reps, 2, run.text());
  // No node was killed after the launcher's stop timeout.
  EXPECT_EQ(run.text().find("killing it"), std::string::npos) << run.text();
}

// Shared-memory segments of the node processes `pids` (storage_shm names
// them dice.NODE.PID.RANDOM.SEQ).
std::size_t segments_of(const std::vector<std::string>& pids) {
  std::size_t n = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator{"/dev/shm", ec}) {
    auto name = e.path().filename().string();
    for (auto& pid : pids)
      if (name.rfind("dice.", 0) == 0
          && name.find("." + pid + ".") != std::string::npos)
        ++n;
  }
  return n;
}

TEST(StopSignal, SigtermLeavesNoSharedMemorySegmentBehind) {
  // Context through the shared-memory storage: every delta is a segment
  // until the learner has read it (--inline-below=0: the probe's deltas are
  // small and would travel inline otherwise).
  child_process run{{bin_dir + "dice-launch", "--workers", "4", "--",
                     bin_dir + "dice_exchange_probe", "--steps=0",
                     "--storage=shm", "--inline-below=0", "--trace"}};
  std::vector<std::string> pids;
  std::smatch m;
  while (
    pids.size() < 4
    && run.wait_for(std::regex{"node [0-9] started, pid ([0-9]+)"}, 30s, &m))
    pids.push_back(m[1].str());
  ASSERT_EQ(pids.size(), 4u) << run.text();
  ASSERT_TRUE(run.wait_for(std::regex{"train iteration 3 "}, 60s))
    << run.text();
  EXPECT_GT(segments_of(pids), 0u) << "the run stored nothing in /dev/shm";
  // The text after the stop: an argument list's order is unspecified.
  auto reps = stop_with_sigterm(run);
  expect_counted(reps, 2, run.text());
  // Before the graceful stop the nodes died by the signal and left
  // thousands of segments (5,082 in the hello_exchange run).
  EXPECT_EQ(segments_of(pids), 0u);
}

// Issue 24, item 5: a stopping collector waited out its 10 s drain for the
// ack of its last delta from a learner that had already exited, racing
// dice-launch's own 10 s stop timeout (exit 137 instead of a graceful stop).
// Here the learner is killed first; the collectors' last iteration (run on
// the stop) sends a delta nobody can ack. They must stop at once, saying
// what they gave up, not at their drain timeout.
TEST(StopSignal, CollectorsWhoseLearnerIsGoneStopWithoutWaitingOutTheirDrain) {
  child_process run{{bin_dir + "dice-launch", "--workers", "4", "--",
                     bin_dir + "dice_exchange_probe", "--steps=0", "--trace"}};
  std::map<std::string, std::string> pids; // node id -> pid
  std::smatch m;
  while (
    pids.size() < 4
    && run.wait_for(std::regex{"node ([0-9]) started, pid ([0-9]+)"}, 30s, &m))
    pids[m[1].str()] = m[2].str();
  ASSERT_EQ(pids.size(), 4u) << run.text();
  ASSERT_TRUE(run.wait_for(std::regex{"train iteration [5-9] "}, 60s))
    << run.text();
  // Node 0 is the learner; without --max-restarts nobody restarts it.
  ASSERT_EQ(::kill(std::stoi(pids["0"]), SIGKILL), 0);
  // The other three nodes' routers noticed the loss before the stop.
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(
      run.wait_for(std::regex{"\\[node [1-3]\\].*lost peer .*node 0"}, 30s))
      << run.text();
  auto t0 = std::chrono::steady_clock::now();
  run.kill(SIGTERM);
  auto rc = run.wait_exit(60s);
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(rc) << run.text();
  EXPECT_NE(*rc, 0) << "node 0 died by SIGKILL";
  auto text = run.text();
  std::cerr << "SIGTERM to exit with the learner gone: "
            << std::chrono::duration<double>(took).count() << " s\n";
  EXPECT_NE(text.find("node 0 exited with code 137"), std::string::npos);
  for (const char* node : {"1", "2", "3"})
    EXPECT_NE(text.find(std::string{"node "} + node + " exited with code 0"),
              std::string::npos)
      << text;
  std::regex gone{"every learner is gone: stopping without waiting for the "
                  "acknowledgement of [1-9][0-9]* deltas"};
  EXPECT_EQ(std::distance(std::sregex_iterator(text.begin(), text.end(), gone),
                          std::sregex_iterator()),
            2)
    << text;
  EXPECT_EQ(text.find("at the drain timeout"), std::string::npos) << text;
  EXPECT_EQ(text.find("killing it"), std::string::npos) << text;
  // The drain alone was 10 s; a quiet machine stops in about 1 s.
  EXPECT_LT(took, 8s) << text;
}

} // namespace
