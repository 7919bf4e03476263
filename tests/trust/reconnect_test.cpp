// Issue 9, item 5: a reconnect always converges. Real processes on loopback
// (dice_exchange_probe, star): one side of a link is paused with SIGSTOP for
// longer than CAF's connection timeout (heartbeat, 1.5 s), then continued.
// The paused side and its peers must find each other again and the run must
// end with every transition a collector sent counted once by the learner.
// Peer-loss timeouts: a paused collector's own (3 s) is shorter than its
// pause (it is not running while the node has peers, and must not end the
// node once it resumes); a node left alone for its peer-loss timeout stops
// by design, so the learner (which keeps c2) and the collectors of a paused
// learner have longer ones (10 s, 20 s; the learner's also covers start-up
// on a loaded machine).
//
// The pause itself is the fault, so it lasts a fixed time (the output of
// every process is drained meanwhile); every wait for a result has a
// deadline.

#include "support/child_process.hpp"
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using process = dice::test::child_process;

// DICE_TEST_BIN_DIR runs the same test against other binaries (e.g. an
// older build, to see the test fail without the fix).
std::string bin_dir() {
  if (auto dir = std::getenv("DICE_TEST_BIN_DIR"))
    return std::string{dir} + "/";
  return std::string{DICE_BINARY_DIR} + "/bin/";
}

std::vector<std::string> node_args(int id, std::string loss,
                                   std::vector<std::string> extra) {
  std::vector<std::string> args{bin_dir() + "dice_exchange_probe",
                                "--dice.node-id=" + std::to_string(id),
                                "--dice.workers=4",
                                "--dice.topology=star",
                                "--dice.host=127.0.0.1",
                                "--dice.peer-loss-timeout=" + loss};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

long env_step(const process& p) {
  for (auto& l : p.lines())
    if (dice::test::json_in(l).contains("stop_reason"))
      return dice::test::json_int(l, "env_step");
  return -1;
}

/// Everything `p` wrote so far, including what is still in the pipe (for
/// failure messages).
std::string drained(process& p) {
  p.wait_for(std::regex{"(?!)"}, 200ms);
  return p.text();
}

using dice::test::secs_since;

class Reconnect : public ::testing::Test {
 protected:
  // Learner 0, collectors 1 and 2 (collectors only: node 1 would be an
  // evaluator by default), with the given peer-loss timeouts.
  void start(std::string learner_loss, std::string collector_loss) {
    learner.emplace(
      node_args(0, learner_loss, {"--steps=100000000", "--dice.min-peers=2"}));
    std::smatch m;
    ASSERT_TRUE(learner->wait_for(
      std::regex{"dice-node 0 listening on port ([0-9]+)"}, 20s, &m))
      << learner->text();
    attach = "--dice.attach-to=127.0.0.1:" + m[1].str();
    c1.emplace(node_args(1, collector_loss,
                         {attach, "--dice.roles=collector", "--trace"}));
    c2.emplace(node_args(2, collector_loss,
                         {attach, "--dice.roles=collector", "--trace"}));
    ASSERT_TRUE(learner->wait_for(std::regex{"2 peer\\(s\\) connected"}, 30s))
      << learner->text();
    ASSERT_TRUE(c1->wait_for(std::regex{"connected to peer node 0"}, 10s));
    ASSERT_TRUE(c2->wait_for(std::regex{"connected to peer node 0"}, 10s));
    // Mid-run: a collector's window (8 unacked deltas) lets it reach its
    // 20th iteration only after the learner applied (and acked) its first
    // deltas. (A pause before the learner saw any delta of a collector
    // hits the first-contact rule instead: a restarted stream's start is
    // unknown; deltas carrying their lowest unacked seq close that.)
    ASSERT_TRUE(c1->wait_for(std::regex{"collect iteration 20 "}, 30s))
      << c1->text();
    ASSERT_TRUE(c2->wait_for(std::regex{"collect iteration 20 "}, 30s))
      << c2->text();
  }

  /// Keeps reading everyone's output for `d` (the length of a pause).
  void hold_for(std::chrono::milliseconds d) {
    auto until = clock_type::now() + d;
    static const std::regex never{"(?!)"};
    while (clock_type::now() < until)
      for (auto* p : {&*learner, &*c1, &*c2}) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - clock_type::now());
        if (left.count() > 0)
          p->wait_for(never, std::min(left, 50ms));
      }
  }

  /// Waits until collector `p` ran 9 iterations past the last one it
  /// logged so far: with a window of 8 unacked deltas, that means every
  /// delta it sent before (including those the pause swallowed) was
  /// applied and acked. Returns the seconds that took.
  double window_moved_on(process& p) {
    static const std::regex it{"collect iteration ([0-9]+) "};
    long last = -1;
    for (auto& l : p.lines()) {
      std::smatch m;
      if (std::regex_search(l, m, it))
        last = std::max(last, std::stol(m[1].str()));
    }
    auto t0 = clock_type::now();
    auto target = "collect iteration " + std::to_string(last + 9) + " ";
    EXPECT_TRUE(p.wait_for(std::regex{target}, 30s))
      << "no progress after the pause\n"
      << p.text();
    return secs_since(t0);
  }

  /// A late collector ends the run; every node must exit 0 and the learner
  /// must have counted exactly what the collectors sent.
  void end_run_exactly(const std::string& fault) {
    c3.emplace(node_args(3, "10s",
                         {attach, "--dice.roles=collector",
                          "--collector-steps=10", "--trace"}));
    for (auto* p : {&*c3, &*c1, &*c2, &*learner}) {
      auto rc = p->wait_exit(60s);
      ASSERT_TRUE(rc) << "a node did not stop\n" << p->text();
      EXPECT_EQ(*rc, 0) << p->text();
    }
    auto sent = env_step(*c1) + env_step(*c2) + env_step(*c3);
    auto received = env_step(*learner);
    std::cout << fault << ": collectors sent " << env_step(*c1) << " + "
              << env_step(*c2) << " + " << env_step(*c3) << " = " << sent
              << " transitions, the learner received " << received << std::endl;
    EXPECT_EQ(received, sent) << "learner:\n"
                              << learner->text() << "\nlate collector 3:\n"
                              << c3->text() << "\ncollector 1 (last lines):\n"
                              << tail(*c1) << "\ncollector 2 (last lines):\n"
                              << tail(*c2);
  }

  /// The last lines `p` wrote (a --trace collector writes thousands).
  static std::string tail(const process& p, std::size_t n = 40) {
    auto lines = p.lines();
    std::string result;
    for (auto i = lines.size() > n ? lines.size() - n : 0; i < lines.size();
         ++i)
      result += lines[i] + "\n";
    return result;
  }

  std::optional<process> learner;
  std::optional<process> c1;
  std::optional<process> c2;
  std::optional<process> c3;
  std::string attach;
};

// The collector side: c1 is paused for 5 s (connection timeout 1.5 s, its
// own peer-loss timeout 3 s); the learner goes on with c2 meanwhile.
TEST_F(Reconnect, StoppedCollectorComesBackAndNothingIsLost) {
  start("10s", "3s");
  c1->kill(SIGSTOP);
  auto t0 = clock_type::now();
  ASSERT_TRUE(learner->wait_for(std::regex{"lost peer node 1"}, 10s))
    << learner->text();
  std::cout << "learner saw the paused collector after " << secs_since(t0)
            << " s" << std::endl;
  hold_for(std::chrono::duration_cast<std::chrono::milliseconds>(
    5s - (clock_type::now() - t0)));
  c1->kill(SIGCONT);
  auto t1 = clock_type::now();
  ASSERT_TRUE(c1->wait_for(std::regex{"connected to peer node 0"}, 20s))
    << c1->text() << drained(*learner);
  std::cout << "the collector was back " << secs_since(t1) << " s after SIGCONT"
            << std::endl;
  // What the pause swallowed is resent (today by the 5 s resend timer).
  std::cout << "its window moved on " << window_moved_on(*c1)
            << " s after it was back" << std::endl;
  end_run_exactly("collector paused 5 s");
}

// The learner side: the learner is paused for 5 s (connection timeout
// 1.5 s); the collectors (peer-loss 20 s) see it go, retry (their dials
// queue up at its port meanwhile), and must get back in when it resumes,
// whichever side notices the old connections first.
TEST_F(Reconnect, StoppedLearnerComesBackAndNothingIsLost) {
  start("10s", "20s");
  learner->kill(SIGSTOP);
  auto t0 = clock_type::now();
  ASSERT_TRUE(c1->wait_for(std::regex{"lost peer node 0"}, 10s)) << c1->text();
  ASSERT_TRUE(c2->wait_for(std::regex{"lost peer node 0"}, 10s)) << c2->text();
  hold_for(std::chrono::duration_cast<std::chrono::milliseconds>(
    5s - (clock_type::now() - t0)));
  learner->kill(SIGCONT);
  auto t1 = clock_type::now();
  ASSERT_TRUE(c1->wait_for(std::regex{"connected to peer node 0"}, 20s))
    << c1->text() << drained(*learner);
  ASSERT_TRUE(c2->wait_for(std::regex{"connected to peer node 0"}, 20s))
    << c2->text() << drained(*learner);
  std::cout << "both collectors were back " << secs_since(t1)
            << " s after SIGCONT" << std::endl;
  auto w1 = window_moved_on(*c1);
  auto w2 = window_moved_on(*c2);
  std::cout << "their windows moved on " << w1 << " s and " << w2
            << " s after they were back" << std::endl;
  end_run_exactly("learner paused 5 s");
}

// A collector's host dies without closing its connection (SIGSTOP stands
// in for it) and the collector is started again at once, with the same node
// id, while the learner still holds the old connection (its connection
// timeout is 4 s here). The new incarnation must be told to retry and get
// in once the old connection is found dead. Before: it was refused as
// "already connected", never retried, and stopped with an error after its
// peer-loss timeout.
TEST_F(Reconnect, RestartedCollectorGetsInOnceItsOldConnectionIsSeenDead) {
  learner.emplace(node_args(0, "10s",
                            {"--steps=100000000", "--dice.min-peers=2",
                             "--middleman.connection-timeout=4s"}));
  std::smatch m;
  ASSERT_TRUE(learner->wait_for(
    std::regex{"dice-node 0 listening on port ([0-9]+)"}, 20s, &m))
    << learner->text();
  attach = "--dice.attach-to=127.0.0.1:" + m[1].str();
  c1.emplace(
    node_args(1, "10s", {attach, "--dice.roles=collector", "--trace"}));
  c2.emplace(node_args(2, "10s", {attach, "--dice.roles=collector"}));
  ASSERT_TRUE(learner->wait_for(std::regex{"2 peer\\(s\\) connected"}, 30s))
    << learner->text();
  ASSERT_TRUE(c1->wait_for(std::regex{"collect iteration 20 "}, 30s))
    << c1->text();
  c1->kill(SIGSTOP);
  auto t0 = clock_type::now();
  process again{node_args(1, "10s", {attach, "--dice.roles=collector"})};
  ASSERT_TRUE(again.wait_for(std::regex{"connected to peer node 0"}, 20s))
    << again.text() << drained(*learner);
  std::cout << "the new incarnation got in " << secs_since(t0)
            << " s after the old one stopped answering" << std::endl;
  c1->kill(SIGKILL);
  c1->wait_exit(5s);
  c3.emplace(node_args(
    3, "10s", {attach, "--dice.roles=collector", "--collector-steps=10"}));
  for (auto* p : {&*c3, &again, &*c2, &*learner}) {
    auto rc = p->wait_exit(60s);
    ASSERT_TRUE(rc) << "a node did not stop\n" << p->text();
    EXPECT_EQ(*rc, 0) << p->text();
  }
  // The killed incarnation cannot report what it sent; the learner counts
  // it on top of the others' exact sum.
  auto others = env_step(again) + env_step(*c2) + env_step(*c3);
  auto received = env_step(*learner);
  std::cout << "collector restarted while its old connection looked alive: "
               "the new incarnation and the others sent "
            << others << " transitions, the learner received " << received
            << " (the difference came from the killed incarnation)"
            << std::endl;
  EXPECT_GE(received, others);
  EXPECT_GT(env_step(again), 0);
}

} // namespace
