// A DQN learner killed (kill -9) mid-run under dice-launch --max-restarts:
// the launcher starts it again, it resumes from its last checkpoint
// (weights, train_iter, env_step, env_episode, replay buffer, target net,
// Adam) and the run completes. Real processes on loopback.

#include "support/child_process.hpp"
#include "support/launch.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using process = dice::test::child_process;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

using dice::test::bin_dir;

using dice::test::report_of;

TEST(LearnerSupervision, KilledLearnerResumesFromItsCheckpointAndTheRunEnds) {
  auto out = fs::temp_directory_path()
    / ("dice-learner-supervision-" + std::to_string(::getpid()));
  fs::remove_all(out);
  // Learner, evaluator (evaluates once: eval-every is out of reach) and
  // one collector; the run ends at 12,000 env steps.
  process p{{bin_dir + "dice-launch",
             "--workers",
             "3",
             "--max-restarts",
             "1",
             "--restart-backoff",
             "0.1",
             "--",
             bin_dir + "dqn_cartpole",
             "--out=" + out.string(),
             "--seed=1",
             "--envs-per-collector=4",
             "--max-env-steps=12000",
             "--stop-value=1000000",
             "--checkpoint-every=0.5",
             "--learning-starts=500",
             "--eval-every=1000000000",
             "--eval-episodes=1",
             "--quiet",
             "--no-plot"}};
  std::smatch m;
  ASSERT_TRUE(p.wait_for(std::regex{"node 0 started, pid ([0-9]+)"}, 30s, &m))
    << p.text();
  auto pid = static_cast<pid_t>(std::stol(m[1]));
  // Kill it right after a checkpoint past 3,000 env steps.
  long saved = 0;
  auto ckpt = std::regex{
    "^\\[node 0\\] .*checkpoint at env_step ([0-9]+), train_iter ([0-9]+)"};
  while (saved < 3000) {
    ASSERT_TRUE(p.wait_for(ckpt, 120s, &m)) << p.text();
    saved = std::stol(m[1]);
  }
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  auto killed_at = clock_type::now();
  ASSERT_TRUE(p.wait_for(std::regex{"restarted node 0 \\(restart 1 of 1"}, 30s))
    << p.text();
  // The checkpoint the new learner reads may be newer than the line we saw
  // (written between the line and the kill): take what it reports.
  ASSERT_TRUE(p.wait_for(
    std::regex{"^\\[node 0\\] .*resuming from .*latest.pt \\(env_step "
               "([0-9]+), train_iter ([0-9]+), env_episode ([0-9]+)\\)"},
    60s, &m))
    << p.text();
  auto resumed_env_step = std::stol(m[1]);
  auto resumed_train_iter = std::stol(m[2]);
  EXPECT_GE(resumed_env_step, saved);
  EXPECT_GT(resumed_train_iter, 0);
  EXPECT_GT(std::stol(m[3]), 0);
  ASSERT_TRUE(p.wait_for(std::regex{"^\\[node 0\\] .*resumed learner state "
                                    "from .*: replay ([0-9]+) transitions"},
                         30s, &m))
    << p.text();
  EXPECT_GT(std::stol(m[1]), 0);
  ASSERT_TRUE(p.wait_for(std::regex{"^\\[node 0\\] .*learner iterating from "
                                    "env_step ([0-9]+), train_iter ([0-9]+)"},
                         60s, &m))
    << p.text();
  auto back = std::chrono::duration<double>(clock_type::now() - killed_at);
  // Its first iteration starts from the checkpoint's counters (env_step
  // plus what it merged in that iteration).
  EXPECT_GE(std::stol(m[1]), resumed_env_step);
  EXPECT_LE(std::stol(m[1]) - resumed_env_step, 8 * 64);
  EXPECT_EQ(std::stol(m[2]), resumed_train_iter);
  auto rc = p.wait_exit(240s);
  ASSERT_TRUE(rc) << "the run did not end\n" << p.text();
  EXPECT_EQ(*rc, 0) << p.text();
  auto learner = report_of(p, 0);
  auto collector = report_of(p, 2);
  ASSERT_FALSE(learner.empty() || collector.empty()) << p.text();
  EXPECT_EQ(dice::test::json_int(learner, "restarts"), 1) << learner;
  auto made = dice::test::json_int(collector, "env_step");
  auto counted = dice::test::json_int(learner, "env_step");
  EXPECT_GE(counted, 12000) << learner;
  EXPECT_GE(dice::test::json_int(learner, "train_iter"), resumed_train_iter);
  // What the dead learner merged after its last checkpoint is not in the
  // resumed counters (lost from them: positive); deltas it merged before
  // the checkpoint but never acknowledged are resent and counted again
  // (negative). One collector iteration is 4 envs x 16 steps = 64.
  auto missing = made - counted;
  std::cout << "learner killed after the checkpoint at env_step " << saved
            << ", resumed from env_step " << resumed_env_step
            << ", iterating again after " << back.count()
            << " s; collector made " << made << ", learner counted " << counted
            << " (missing " << missing << ")" << std::endl;
  EXPECT_LE(std::abs(missing), 8 * 64) << "more than the 8-delta window";
  fs::remove_all(out);
}

TEST(LearnerSupervision, RestartedLearnerWithoutACheckpointSaysWhatItLacks) {
  auto out = fs::temp_directory_path()
    / ("dice-learner-no-checkpoint-" + std::to_string(::getpid()));
  fs::remove_all(out);
  // Two nodes (the learner evaluates, once); no checkpoint before the kill.
  process p{{bin_dir + "dice-launch", "--workers", "2", "--max-restarts", "1",
             "--restart-backoff", "0.1", "--", bin_dir + "dqn_cartpole",
             "--out=" + out.string(), "--seed=1", "--envs-per-collector=2",
             "--max-env-steps=2000", "--stop-value=1000000",
             "--checkpoint-every=1000000", "--eval-every=1000000000",
             "--eval-episodes=1", "--quiet", "--no-plot"}};
  std::smatch m;
  ASSERT_TRUE(p.wait_for(std::regex{"node 0 started, pid ([0-9]+)"}, 30s, &m))
    << p.text();
  auto pid = static_cast<pid_t>(std::stol(m[1]));
  ASSERT_TRUE(
    p.wait_for(std::regex{"^\\[node 0\\] .*learner iterating from"}, 60s))
    << p.text();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(p.wait_for(
    std::regex{"^\\[node 0\\] .*restart 1: no checkpoint in .*, so this "
               "learner starts without one: fresh weights, train_iter 0, "
               "env_step 0, env_episode 0, empty replay buffer"},
    60s))
    << p.text();
  auto rc = p.wait_exit(180s);
  ASSERT_TRUE(rc) << "the run did not end\n" << p.text();
  EXPECT_EQ(*rc, 0) << p.text();
  fs::remove_all(out);
}

} // namespace
