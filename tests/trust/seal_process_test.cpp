// Issue 9, item 1 over real TCP: a learner and collectors run as processes
// (dice_exchange_probe, no cluster secret, loopback, ephemeral ports); the test
// process is the stranger. It knows only the learner's port, passes dice's
// preamble (which without a secret anyone who speaks it passes) with
// dice's own dialer, gets the published actor and sends it what dice's own
// actors send, anonymously. A late collector then ends the run, and the
// learner's env_step must equal what the collectors sent.

#include "dice/messages/context_delta.hpp"
#include "dice/security/auth.hpp"
#include "dice/type_ids.hpp"
#include "net/dialer.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/exit_reason.hpp"
#include "caf/io/middleman.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/send.hpp"

#include "support/child_process.hpp"
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using process = dice::test::child_process;

// DICE_TEST_BIN_DIR runs the same test against other binaries (e.g. an
// older build, to see the test fail without the fix).
const std::string bin_dir = std::getenv("DICE_TEST_BIN_DIR")
  ? std::string{std::getenv("DICE_TEST_BIN_DIR")} + "/"
  : std::string{DICE_BINARY_DIR} + "/bin/";

std::vector<std::string> node_args(int id, std::vector<std::string> extra) {
  std::vector<std::string> args{bin_dir + "dice_exchange_probe",
                                "--dice.node-id=" + std::to_string(id),
                                "--dice.workers=3",
                                "--dice.topology=star",
                                "--dice.host=127.0.0.1",
                                "--dice.peer-loss-timeout=10s"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

struct net_config : caf::actor_system_config {
  net_config() {
    load<caf::io::middleman>();
    dice::add_message_types(*this);
    set("logger.verbosity", caf::atom("quiet"));
  }
};

struct report {
  std::string role;
  long env_step = -1;
  std::string stop_reason;
};

std::optional<report> report_of(const process& p) {
  for (auto& l : p.lines())
    if (dice::test::json_in(l).contains("stop_reason"))
      return report{dice::test::json_str(l, "role"),
                    dice::test::json_int(l, "env_step"),
                    dice::test::json_str(l, "stop_reason")};
  return std::nullopt;
}

using dice::test::secs_since;

// A learner (node 0) with one collector (node 1) running; `end_run` adds
// collector 2, whose max_step ends the run, and checks that every
// transition a collector sent reached the learner, and nothing else did.
class SealProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    learner.emplace(node_args(0, {"--steps=100000000", "--dice.min-peers=1"}));
    std::smatch m;
    ASSERT_TRUE(learner->wait_for(
      std::regex{"dice-node 0 listening on port ([0-9]+)"}, 20s, &m))
      << learner->text();
    port = static_cast<std::uint16_t>(std::stoi(m[1].str()));
    attach = "--dice.attach-to=127.0.0.1:" + m[1].str();
    c1.emplace(node_args(1, {attach, "--dice.roles=collector"}));
    ASSERT_TRUE(c1->wait_for(std::regex{"connected to peer node 0"}, 20s))
      << c1->text();
    auto dialer = dice::net::spawn_dialer(
      stranger, dice::net::dialer_config{99, "", false, 5s});
    caf::scoped_actor self{stranger};
    self
      ->request(dialer, 10s, caf::connect_atom::value, std::string{"127.0.0.1"},
                port)
      .receive(
        [&](const caf::node_id&, caf::strong_actor_ptr& ptr,
            const std::set<std::string>&) {
          published = caf::actor_cast<caf::actor>(ptr);
        },
        [&](caf::error& err) {
          FAIL() << "the stranger cannot connect: " << caf::to_string(err);
        });
    caf::anon_send_exit(dialer, caf::exit_reason::user_shutdown);
    ASSERT_TRUE(published);
  }

  /// Ends the run with a late collector; returns the learner's env_step
  /// minus the collectors' (0: exact).
  long end_run() {
    c2.emplace(node_args(2, {attach, "--collector-steps=10"}));
    for (auto* p : {&*c2, &*c1, &*learner}) {
      auto rc = p->wait_exit(30s);
      EXPECT_TRUE(rc) << "a node did not stop\n" << p->text();
      if (rc) {
        EXPECT_EQ(*rc, 0) << p->text();
      }
    }
    auto r0 = report_of(*learner);
    auto r1 = report_of(*c1);
    auto r2 = report_of(*c2);
    if (!r0 || !r1 || !r2) {
      ADD_FAILURE() << "missing report\n" << learner->text();
      return -1;
    }
    std::cout << "transitions: collectors sent " << r1->env_step << " + "
              << r2->env_step << ", learner received " << r0->env_step
              << "; learner stopped: " << r0->stop_reason << std::endl;
    return r0->env_step - (r1->env_step + r2->env_step);
  }

  /// Waits until the learner logs that it dropped something from a
  /// stranger; false at the deadline.
  bool learner_dropped(std::chrono::milliseconds timeout = 10s) {
    return learner->wait_for(std::regex{"dropped .* (anonymous|stranger)"},
                             timeout);
  }

  std::optional<process> learner;
  std::optional<process> c1;
  std::optional<process> c2;
  std::uint16_t port = 0;
  std::string attach;
  net_config cfg;
  caf::actor_system stranger{cfg};
  caf::actor published;
};

// Before: "run finished by node 9: evil" and every node stopped soon after.
TEST_F(SealProcess, AnonymousFinishIsDropped) {
  auto t0 = clock_type::now();
  caf::anon_send(published, dice::finish{9, "evil", false});
  std::smatch m;
  ASSERT_TRUE(learner->wait_for(
    std::regex{"run finished by node 9: evil|dropped .* (anonymous|stranger)"},
    10s, &m))
    << learner->text();
  if (m.str().find("evil") != std::string::npos) {
    auto rc = learner->wait_exit(10s);
    ADD_FAILURE() << "an anonymous finish stopped the learner after "
                  << secs_since(t0) << " s (rc " << (rc ? *rc : -1) << ")";
    return;
  }
  EXPECT_EQ(end_run(), 0);
  EXPECT_NE(report_of(*learner)->stop_reason.find("finish from node 2"),
            std::string::npos);
}

// Before: the learner dialled the address the stranger named.
TEST_F(SealProcess, AnonymousAttachDialsNothing) {
  auto fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  auto bait = ntohs(addr.sin_port);
  caf::anon_send(published, dice::attach_atom::value, std::string{"127.0.0.1"},
                 bait);
  // Either the learner logs the drop, or it dials the bait.
  auto t0 = clock_type::now();
  bool dialled = false;
  bool dropped = false;
  while (!dialled && !dropped && secs_since(t0) < 10) {
    pollfd p{fd, POLLIN, 0};
    dialled = ::poll(&p, 1, 50) > 0;
    dropped = learner_dropped(50ms);
  }
  pollfd p{fd, POLLIN, 0};
  dialled = dialled || ::poll(&p, 1, 0) > 0;
  ::close(fd);
  EXPECT_FALSE(dialled) << "the learner dialled a stranger's address after "
                        << secs_since(t0) << " s";
  EXPECT_TRUE(dropped) << learner->text();
  EXPECT_EQ(end_run(), 0);
}

struct spy_state {
  std::shared_ptr<std::atomic<int>> deltas;
};

// Before: the stranger received the collectors' deltas (1,091 in 2 s) and
// their incarnations.
TEST_F(SealProcess, AnonymousSubscribeGetsNothing) {
  auto got = std::make_shared<std::atomic<int>>(0);
  auto spy = stranger.spawn([got](caf::event_based_actor*) -> caf::behavior {
    return {[got](const std::string&, const dice::context_delta&) {
      ++*got;
    }};
  });
  caf::anon_send(published, dice::subscribe_atom::value,
                 std::string{"context_exchanger_collector"}, std::uint32_t{9},
                 spy);
  auto t0 = clock_type::now();
  auto dropped = learner_dropped();
  EXPECT_TRUE(dropped) << learner->text();
  EXPECT_EQ(end_run(), 0);
  std::cout << "the stranger received " << got->load() << " deltas in "
            << secs_since(t0) << " s" << std::endl;
  EXPECT_EQ(got->load(), 0) << "a stranger streams the collectors' context";
  caf::anon_send_exit(spy, caf::exit_reason::user_shutdown);
}

// Before: the learner's env_step ended 1,000,000 above what collectors sent.
TEST_F(SealProcess, AnonymousPublishAddsNothing) {
  dice::context_delta d;
  d.sender = 9;
  d.incarnation = 1;
  d.seq = 1;
  d.env_step = 1'000'000;
  std::string topic = "context_exchanger_collector";
  caf::anon_send(published, dice::publish_atom::value, topic, std::uint32_t{9},
                 caf::make_message(topic, d));
  EXPECT_TRUE(learner_dropped()) << learner->text();
  EXPECT_EQ(end_run(), 0) << "a forged delta reached the learner's env_step";
}

// Before: the challenge reply came from the router; `send_exit(router, kill)`
// left the learner running with no router and no log line; its collectors died
// of peer loss.
TEST_F(SealProcess, NoInternalIdLeaksAndKillsDoNothing) {
  caf::scoped_actor self{stranger};
  caf::actor replier;
  self->request(published, 5s, dice::hello_atom::value, dice::random_nonce())
    .receive(
      [&](const std::string&, const std::string&) {
        replier = caf::actor_cast<caf::actor>(self->current_sender());
      },
      [&](caf::error& err) {
        ADD_FAILURE() << "no answer: " << caf::to_string(err);
      });
  ASSERT_TRUE(replier);
  EXPECT_EQ(replier.id(), published.id())
    << "actor " << replier.id() << " answered for the gate " << published.id();
  self->send_exit(replier, caf::exit_reason::kill);
  self->send_exit(published, caf::exit_reason::kill);
  caf::anon_send(published, caf::make_error(caf::sec::runtime_error));
  // The learner still answers, and the run ends with exact counts.
  self->request(published, 5s, dice::hello_atom::value, dice::random_nonce())
    .receive([](const std::string&, const std::string&) {},
             [&](caf::error& err) {
               ADD_FAILURE() << "the gate is gone: " << caf::to_string(err);
             });
  EXPECT_EQ(end_run(), 0);
}

} // namespace
