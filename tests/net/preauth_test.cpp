// A stranger's raw bytes on a node's port, as an attacker sends them: real
// dice_exchange_probe processes on loopback with only the cluster secret (no
// TLS). CAF 0.17.6 parsed these bytes before dice saw them: one 32-byte
// BASP header crashed the node, four headers announcing 1 GiB each took
// gigabytes. Every wait has a deadline; nothing sleeps to pass.

#include "support/child_process.hpp"
#include "support/probe_nodes.hpp"
#include "support/raw_socket.hpp"
#include "support/secret_file.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::test::child_process;
using dice::test::raw_socket;
using dice::test::secret_file;
using clock_type = std::chrono::steady_clock;

using dice::test::secret_1;

TEST(Preauth, CrashFrameLeavesASecretOnlyNodeRunning) {
  secret_file s{secret_1};
  std::unique_ptr<child_process> learner;
  auto port = dice::test::start_probe_learner(learner, s);
  ASSERT_NE(port, 0) << learner->text();
  // Both crash frames: operation 1 (client handshake) and 0 (server
  // handshake with operation data) with no payload.
  for (auto frame : {dice::test::basp_crash_frame(), [] {
                       auto h = dice::test::basp_header(0, 0);
                       h[15] = 1; // operation_data != 0
                       return h;
                     }()}) {
    raw_socket stranger{port};
    ASSERT_TRUE(stranger.ok());
    stranger.send(frame);
    // The node cuts the stranger off (before the fix: it died of SIGSEGV,
    // which closed the connection too).
    EXPECT_TRUE(stranger.wait_closed(5s));
  }
  EXPECT_FALSE(learner->wait_exit(0ms))
    << "the node died of a stranger's frame\n"
    << learner->text();
  // Refused and said so (counted as trust_event::preamble_rejected).
  EXPECT_TRUE(learner->wait_for(
    std::regex{"refused a connection from 127\\.0\\.0\\.1:[0-9]+: not "
               "dice's preamble"},
    5s))
    << learner->text();
  dice::test::expect_genuine_run(*learner, s, port);
}

TEST(Preauth, GiantLengthAnnouncementsLeaveMemoryFlat) {
  secret_file s{secret_1};
  std::unique_ptr<child_process> learner;
  auto port = dice::test::start_probe_learner(learner, s);
  ASSERT_NE(port, 0) << learner->text();
  auto before = dice::test::peak_rss(learner->pid());
  ASSERT_GT(before, 0u);
  std::vector<raw_socket> strangers;
  for (int i = 0; i < 4; ++i) {
    strangers.emplace_back(port);
    ASSERT_TRUE(strangers.back().ok());
    strangers.back().send(dice::test::basp_giant_frame());
  }
  auto t0 = clock_type::now();
  for (auto& x : strangers)
    EXPECT_TRUE(x.wait_closed(5s));
  auto cut_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  clock_type::now() - t0)
                  .count();
  auto after = dice::test::peak_rss(learner->pid());
  auto grown_mib = (static_cast<double>(after) - static_cast<double>(before))
    / (1 << 20);
  std::cout << "peak RSS " << before / (1 << 20) << " MiB -> "
            << after / (1 << 20) << " MiB; strangers cut after " << cut_ms
            << " ms" << std::endl;
  // Four frames announce 4 GiB; the node may not grow by a tenth of one.
  EXPECT_LT(grown_mib, 100.0);
  dice::test::expect_genuine_run(*learner, s, port);
}

TEST(Preauth, PendingConnectionsAreCapped) {
  secret_file s{secret_1};
  std::unique_ptr<child_process> learner;
  auto port = dice::test::start_probe_learner(learner, s);
  ASSERT_NE(port, 0) << learner->text();
  // 100 idle connections against the default cap of 64: the oldest 36 are
  // closed at once (before the fix BASP held every one of them).
  std::vector<raw_socket> strangers;
  for (int i = 0; i < 100; ++i) {
    strangers.emplace_back(port);
    ASSERT_TRUE(strangers.back().ok());
  }
  int closed = 0;
  auto t0 = clock_type::now();
  for (int i = 0; i < 36; ++i)
    closed += strangers[i].wait_closed(i == 0 ? 5s : 1s) ? 1 : 0;
  std::cout << closed << " of the oldest 36 closed within "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                 clock_type::now() - t0)
                 .count()
            << " ms" << std::endl;
  EXPECT_EQ(closed, 36);
  EXPECT_TRUE(learner->wait_for(
    std::regex{"too many connections in the preamble \\(64\\)"}, 5s))
    << learner->text();
  // A genuine peer still joins while 64 strangers wait in the preamble.
  dice::test::expect_genuine_run(*learner, s, port);
}

TEST(Preauth, SilentStrangerIsCutAtTheTimeLimit) {
  secret_file s{secret_1};
  std::unique_ptr<child_process> learner;
  auto port = dice::test::start_probe_learner(
    learner, s, {"--dice.handshake-timeout=500ms"});
  ASSERT_NE(port, 0) << learner->text();
  raw_socket stranger{port};
  ASSERT_TRUE(stranger.ok());
  auto t0 = clock_type::now();
  // Says nothing: cut at the node's handshake time limit (before the fix
  // BASP kept such a connection open for good).
  EXPECT_TRUE(stranger.wait_closed(5s));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              clock_type::now() - t0)
              .count();
  std::cout << "silent stranger cut after " << ms << " ms" << std::endl;
  EXPECT_GE(ms, 400);
  dice::test::expect_genuine_run(*learner, s, port);
}

} // namespace
