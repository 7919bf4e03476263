// A secret holder past the preamble, as a compromised or buggy member
// sends: it speaks dice's preamble with the cluster secret, then raw BASP
// frames that CAF 0.17.6 mishandles (no TLS, so nothing but dice's guard
// stands between these bytes and CAF). Before the guard, the 32-byte
// handshake header with no payload killed the node (SIGSEGV) and two
// headers announcing 1 GiB took it from 163 to 2,211 MiB. Real
// dice_exchange_probe processes on an ephemeral loopback port; every wait
// has a deadline.

#include "dice/security/auth.hpp"
#include "net/preamble.hpp"

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

using dice::test::secret_1;

/// Connects and finishes dice's preamble with the secret, as a member does:
/// what it sends next goes to BASP.
raw_socket member_past_the_preamble(std::uint16_t port) {
  raw_socket s{port};
  if (!s.ok())
    return s;
  dice::net::preamble_dialer hs{secret_1, dice::random_nonce(32),
                                dice::net::channel::control};
  s.send(hs.take_output());
  auto a1 = s.read_exactly(dice::net::acceptor_hello_size, 5s);
  EXPECT_EQ(a1.size(), dice::net::acceptor_hello_size);
  hs.feed(a1.data(), a1.size());
  EXPECT_EQ(hs.state(), dice::net::preamble_state::done);
  s.send(hs.take_output());
  return s;
}

TEST(MemberFrames, CrashFramesFromASecretHolderCloseOnlyTheirConnection) {
  secret_file s{secret_1};
  std::unique_ptr<child_process> learner;
  auto port = dice::test::start_probe_learner(learner, s);
  ASSERT_NE(port, 0) << learner->text();
  // A client handshake and a server handshake (with its operation data),
  // both without the payload CAF then reads.
  auto server_hs = dice::test::basp_header(0, 0);
  server_hs[15] = 1;
  for (const auto& frame : {dice::test::basp_crash_frame(), server_hs}) {
    auto member = member_past_the_preamble(port);
    ASSERT_TRUE(member.ok());
    member.send(frame);
    // Closed by the guard (before it: by the node's death).
    EXPECT_TRUE(member.wait_closed(5s));
  }
  EXPECT_FALSE(learner->wait_exit(0ms)) << "the node died of a member's frame\n"
                                        << learner->text();
  EXPECT_TRUE(learner->wait_for(
    std::regex{"closed the connection from 127\\.0\\.0\\.1: BASP frame "
               "refused before CAF read it: a handshake without a payload"},
    5s))
    << learner->text();
  dice::test::expect_genuine_run(*learner, s, port);
}

TEST(MemberFrames, GiantAnnouncesFromASecretHolderLeaveMemoryFlat) {
  secret_file s{secret_1};
  std::unique_ptr<child_process> learner;
  auto port = dice::test::start_probe_learner(learner, s);
  ASSERT_NE(port, 0) << learner->text();
  auto before = dice::test::peak_rss(learner->pid());
  ASSERT_GT(before, 0u);
  std::vector<raw_socket> members;
  for (int i = 0; i < 2; ++i) {
    members.push_back(member_past_the_preamble(port));
    ASSERT_TRUE(members.back().ok());
    // A client handshake announcing 1 GiB of payload.
    members.back().send(dice::test::basp_giant_frame());
  }
  for (auto& m : members)
    EXPECT_TRUE(m.wait_closed(5s));
  auto after = dice::test::peak_rss(learner->pid());
  auto grown_mib = (static_cast<double>(after) - static_cast<double>(before))
    / (1 << 20);
  std::cout << "peak RSS " << before / (1 << 20) << " MiB -> "
            << after / (1 << 20) << " MiB after two 1 GiB announces"
            << std::endl;
  // Two frames announce 2 GiB (dice's bound is 256 MiB); the node may not
  // grow by a tenth of one.
  EXPECT_LT(grown_mib, 100.0);
  EXPECT_TRUE(learner->wait_for(
    std::regex{"BASP frame refused before CAF read it: a payload of "
               "1073741824 bytes announced, more than the 268435456 allowed"},
    5s))
    << learner->text();
  dice::test::expect_genuine_run(*learner, s, port);
}

} // namespace
