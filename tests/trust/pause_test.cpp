// A collector, then the learner, frozen (SIGSTOP) past the heartbeat
// timeout and thawed (SIGCONT), in a real three-process cluster: the
// collector must resume within about a second (it resends what the learner
// has not acknowledged as soon as they are connected again, instead of
// waiting out its 5 s resend timer), and the learner still counts every
// step the collector made, exactly once.

#include "support/child_process.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::test::child_process;
using clock_type = std::chrono::steady_clock;

const std::string bin = std::string{DICE_BINARY_DIR}
  + "/bin/dice_exchange_probe";

const std::regex collect_line{"collect iteration ([0-9]+) "};

std::vector<std::string> node(int id, std::string loss_timeout,
                              std::vector<std::string> extra) {
  std::vector<std::string> args{bin,
                                "--dice.node-id=" + std::to_string(id),
                                "--dice.workers=3",
                                "--dice.topology=star",
                                "--dice.host=127.0.0.1",
                                "--dice.peer-loss-timeout=" + loss_timeout};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Follows the collector's trace ("collect iteration N ...").
struct iterations {
  child_process& c;
  long last = -1;

  // The latest iteration printed so far.
  long latest() {
    std::smatch m;
    while (c.wait_for(collect_line, 1ms, &m))
      last = std::stol(m[1]);
    return last;
  }

  // Waits until iteration `n` was printed; false at the deadline.
  bool reach(long n, std::chrono::milliseconds limit) {
    auto deadline = clock_type::now() + limit;
    std::smatch m;
    while (last < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - clock_type::now());
      if (left.count() <= 0 || !c.wait_for(collect_line, left, &m))
        return false;
      last = std::stol(m[1]);
    }
    return true;
  }
};

// Freezes `victim` until `watcher` reports the lost peer (the connection
// timeout passed) and then `extra` more, thaws it and returns how long the
// collector took to make 50 more iterations (seconds; < 0: not within 15 s).
double pause_and_resume(child_process& victim, child_process& watcher,
                        const std::string& lost, iterations& collector,
                        std::chrono::milliseconds extra) {
  auto at = collector.latest();
  victim.kill(SIGSTOP);
  auto noticed = watcher.wait_for(std::regex{lost}, 10s);
  // The fault's length (not a wait for a result): frozen past the timeout,
  // reading the watcher's output meanwhile so that its pipe never fills.
  static const std::regex never{"(?!)"};
  watcher.wait_for(never, extra);
  victim.kill(SIGCONT);
  if (!noticed)
    return -2;
  auto t0 = clock_type::now();
  auto printed = collector.latest();
  if (!collector.reach(std::max(at, printed) + 50, 15s))
    return -1;
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

TEST(Pause, FrozenCollectorAndLearnerResumeAtOnceAndLoseNothing) {
  // Timeouts: heartbeat 200 ms / connection 1.5 s (dice's defaults). Each
  // frozen process stays frozen past its peer's connection timeout (the
  // peer logs the loss first). The collector's own peer-loss timeout (4 s)
  // must outlast the learner's freeze, or it would end the run by design.
  child_process learner{node(0, "10s", {"--steps=100000000"})};
  std::smatch m;
  ASSERT_TRUE(learner.wait_for(
    std::regex{"dice-node 0 listening on port ([0-9]+)"}, 20s, &m))
    << learner.text();
  auto attach = "--dice.attach-to=127.0.0.1:" + m[1].str();
  child_process evaluator{node(1, "10s", {attach})};
  child_process collector{
    node(2, "4s", {attach, "--trace", "--collector-steps=4000"})};
  iterations trace{collector};
  ASSERT_TRUE(trace.reach(200, 20s)) << collector.text();
  std::vector<double> resumes;
  for (int i = 0; i < 2; ++i) {
    auto s = pause_and_resume(collector, learner,
                              "lost peer node 2 \\(collector\\)", trace, 1s);
    resumes.push_back(s);
    ASSERT_GE(s, 0) << "the collector did not resume within 15 s (" << s
                    << ")\n"
                    << collector.text().substr(0, 20000);
    std::cout << "collector frozen, resumed " << s << " s after SIGCONT"
              << std::endl;
  }
  auto s = pause_and_resume(learner, collector,
                            "lost peer node 0 \\(learner\\)", trace, 500ms);
  resumes.push_back(s);
  ASSERT_GE(s, 0) << "the collector did not resume within 15 s (" << s << ")\n"
                  << learner.text().substr(0, 20000);
  std::cout << "learner frozen, collector resumed " << s << " s after SIGCONT"
            << std::endl;
  // A thawed collector reconnects at once and resends what the learner
  // has not acknowledged (it stalled 5-7 s on its resend timer before).
  EXPECT_LT(resumes[0], 2.0) << "a stall after SIGCONT";
  EXPECT_LT(resumes[1], 2.0) << "a stall after SIGCONT";
  // A thawed learner is found by the collector's next connection attempt:
  // bounded by the connect timeout (2 s) plus the reconnect backoff (at
  // most 2 s), not by the resend timer.
  EXPECT_LT(resumes[2], 5.0) << "a stall after SIGCONT";
  // The collector's 4000th iteration ends the run: nothing it made is lost.
  // (A deadline, not a speed test: under ASan at -O0 on 2 loaded cores the
  // 4000 iterations once took longer than 60 s.)
  auto rc = collector.wait_exit(150s);
  ASSERT_TRUE(rc) << collector.text().substr(0, 20000);
  EXPECT_EQ(*rc, 0);
  auto lrc = learner.wait_exit(20s);
  ASSERT_TRUE(lrc);
  EXPECT_EQ(*lrc, 0) << learner.text().substr(0, 20000);
  evaluator.wait_exit(20s);
  long made = -1;
  long got = -1;
  for (auto& l : collector.lines()) {
    if (l.find("\"stop_reason\"") != std::string::npos)
      made = dice::test::json_int(l, "env_step");
    if (l.find("context exchange: sent") != std::string::npos)
      std::cout << "collector: " << l << std::endl;
  }
  for (auto& l : learner.lines())
    if (l.find("\"stop_reason\"") != std::string::npos)
      got = dice::test::json_int(l, "env_step");
  std::cout << "transitions made " << made << ", received " << got << std::endl;
  EXPECT_EQ(made, 4000 * 16);
  EXPECT_EQ(got, made) << "the learner lost or doubled steps";
}

} // namespace
