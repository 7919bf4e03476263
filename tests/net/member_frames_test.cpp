// A secret holder past the preamble, as a compromised or buggy member
// sends: it speaks dice's preamble with the cluster secret, then raw BASP
// frames that CAF 0.17.6 mishandles (no TLS, so nothing but dice's guard
// stands between these bytes and CAF). Before the guard, the 32-byte
// handshake header with no payload killed the node (SIGSEGV) and two
// headers announcing 1 GiB took it from 206 MB to 1,214 MB. Real
// dice_exchange_probe processes on an ephemeral loopback port; every wait
// has a deadline.

#include "dice/security/auth.hpp"
#include "net/preamble.hpp"

#include "support/child_process.hpp"
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

const std::string bin_dir = std::string{DICE_BINARY_DIR} + "/bin/";

const std::string the_secret = "0123456789abcdef0123456789abcdef";

std::vector<std::string> node_args(int id, const std::string& secret_path,
                                   const std::string& attach) {
  std::vector<std::string> args{bin_dir + "dice_exchange_probe",
                                "--dice.node-id=" + std::to_string(id),
                                "--dice.workers=2",
                                "--dice.topology=star",
                                "--dice.host=127.0.0.1",
                                "--dice.secret-file=" + secret_path,
                                "--dice.peer-loss-timeout=10s",
                                "--steps=5"};
  if (!attach.empty())
    args.push_back("--dice.attach-to=" + attach);
  return args;
}

const std::regex port_line{"dice-node 0 listening on port ([0-9]+)"};

std::uint16_t start_learner(std::unique_ptr<child_process>& learner,
                            const secret_file& s) {
  learner = std::make_unique<child_process>(node_args(0, s.path, ""));
  std::smatch m;
  if (!learner->wait_for(port_line, 20s, &m))
    return 0;
  return static_cast<std::uint16_t>(std::stoi(m[1].str()));
}

/// Connects and finishes dice's preamble with the secret, as a member does:
/// what it sends next goes to BASP.
raw_socket member_past_the_preamble(std::uint16_t port) {
  raw_socket s{port};
  if (!s.ok())
    return s;
  dice::net::preamble_dialer hs{the_secret, dice::random_nonce(32),
                                dice::net::channel::control};
  s.send(hs.take_output());
  auto a1 = s.read_exactly(dice::net::acceptor_hello_size, 5s);
  EXPECT_EQ(a1.size(), dice::net::acceptor_hello_size);
  hs.feed(a1.data(), a1.size());
  EXPECT_EQ(hs.state(), dice::net::preamble_state::done);
  s.send(hs.take_output());
  return s;
}

/// A genuine collector joins; both must finish the run and exit 0.
void expect_genuine_run(child_process& learner, const secret_file& s,
                        std::uint16_t port) {
  child_process collector{
    node_args(1, s.path, "127.0.0.1:" + std::to_string(port))};
  auto rc_c = collector.wait_exit(30s);
  auto rc_l = learner.wait_exit(30s);
  ASSERT_TRUE(rc_l) << "learner did not end\n" << learner.text();
  EXPECT_EQ(*rc_l, 0) << learner.text();
  ASSERT_TRUE(rc_c) << "collector did not end\n" << collector.text();
  EXPECT_EQ(*rc_c, 0) << collector.text();
  EXPECT_TRUE(learner.wait_for(std::regex{"\"train_iter\":5"}, 0ms))
    << learner.text();
}

TEST(MemberFrames, CrashFramesFromASecretHolderCloseOnlyTheirConnection) {
  secret_file s{the_secret};
  std::unique_ptr<child_process> learner;
  auto port = start_learner(learner, s);
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
  expect_genuine_run(*learner, s, port);
}

TEST(MemberFrames, GiantAnnouncesFromASecretHolderLeaveMemoryFlat) {
  secret_file s{the_secret};
  std::unique_ptr<child_process> learner;
  auto port = start_learner(learner, s);
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
  expect_genuine_run(*learner, s, port);
}

} // namespace
