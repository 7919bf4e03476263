// A node's listener and dialer over real loopback sockets, in one process:
// strangers' bytes in every trust mode, the time limit, the cap on pending
// connections, wrong secrets, the refusal to listen beyond loopback
// unprotected, and a dialer facing a silent acceptor. Ephemeral ports; every
// wait has a deadline.

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/runtime/node.hpp"
#include "dice/security/auth.hpp"
#include "dice/security/trust.hpp"
#include "net/data_plane.hpp"
#include "net/preamble.hpp"
#include "net/socket.hpp"

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "support/child_process.hpp"
#include "support/raw_socket.hpp"
#include "support/secret_file.hpp"
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using dice::trust_event;
using dice::test::raw_socket;
namespace fs = std::filesystem;

using dice::test::secret_1;
using dice::test::secret_2;

long ms_since(clock_type::time_point t0) {
  return static_cast<long>(
    std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now()
                                                          - t0)
      .count());
}

/// How a node protects its port.
struct trust_mode {
  const char* name;
  bool secret;
  bool tls;
};

class Listener : public ::testing::TestWithParam<trust_mode> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path()
                        / ("dice-listener-" + std::to_string(::getpid())));
    dice::test::child_process certs{
      {"bash", std::string{DICE_SOURCE_DIR} + "/scripts/make-test-certs",
       dir_->string()}};
    ASSERT_EQ(certs.wait_exit(std::chrono::seconds{60}), 0) << certs.text();
  }

  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  static dice::tls_files certs() {
    return {(*dir_ / "cert.pem").string(), (*dir_ / "key.pem").string(),
            (*dir_ / "ca.pem").string()};
  }

  /// An actor system with the openssl module; TLS files when `tls`.
  caf::actor_system& make_system(bool tls) {
    auto cfg = std::make_unique<dice::node_system_config>();
    if (tls) {
      auto f = certs();
      cfg->openssl_certificate = f.certificate;
      cfg->openssl_key = f.key;
      cfg->openssl_cafile = f.cafile;
    }
    configs_.push_back(std::move(cfg));
    systems_.push_back(std::make_unique<caf::actor_system>(*configs_.back()));
    return *systems_.back();
  }

  /// Node settings for `mode` (node id `id`, loopback).
  static dice::node_config settings(std::uint32_t id, trust_mode mode) {
    dice::node_config nc;
    nc.id = id;
    nc.distributed = true;
    nc.host = "127.0.0.1";
    nc.peer_loss_timeout = 1h;
    nc.connect_timeout = 1s;
    if (mode.secret)
      nc.secret = secret_1;
    if (mode.tls)
      nc.tls = certs();
    return nc;
  }

  /// Starts a node in a fresh system; it is stopped when the test ends.
  dice::node& start(dice::node_config nc) {
    auto& sys = make_system(nc.tls.any());
    auto n = dice::node::start(sys, std::move(nc));
    if (!n) {
      ADD_FAILURE() << dice::render(n.error());
      std::abort();
    }
    nodes_.push_back(std::move(*n));
    return nodes_.back();
  }

  /// Waits (bounded) until `n` has at least `want` peers; returns how many
  /// it has (0 if fewer came in time).
  static std::uint32_t peers(dice::node& n, std::uint32_t want,
                             caf::timespan deadline) {
    caf::scoped_actor self{*systems_of(n)};
    std::uint32_t result = 0;
    self->request(n.router(), deadline, dice::peers_atom::value, want)
      .receive(
        [&](std::uint32_t x) {
          result = x;
        },
        [](caf::error&) {});
    return result;
  }

  /// Attaches `client` to `server`.
  static void attach(dice::node& client, const dice::node& server) {
    caf::scoped_actor self{*systems_of(client)};
    self->send(client.router(), dice::attach_atom::value,
               std::string{"127.0.0.1"}, server.port());
  }

  void TearDown() override {
    for (auto& n : nodes_)
      n.stop();
    nodes_.clear();
    systems_.clear();
  }

  static caf::actor_system* systems_of(dice::node& n) {
    return &caf::actor_cast<caf::abstract_actor*>(n.router())->home_system();
  }

  static inline fs::path* dir_ = nullptr;
  std::vector<std::unique_ptr<dice::node_system_config>> configs_;
  std::vector<std::unique_ptr<caf::actor_system>> systems_;
  std::deque<dice::node> nodes_; // references stay valid
};

// -- strangers' bytes in every mode -------------------------------------------

TEST_P(Listener, StrangersBytesNeverReachCaf) {
  auto mode = GetParam();
  auto& server = start(settings(0, mode));
  auto rejected = dice::counter(trust_event::preamble_rejected);
  // The frame that crashed CAF 0.17.6, a header announcing 1 GiB, and
  // another protocol: each is cut at its first byte.
  for (auto bytes :
       {dice::test::basp_crash_frame(), dice::test::basp_giant_frame(),
        std::string{"GET / HTTP/1.0\r\n\r\n"}}) {
    raw_socket stranger{server.port()};
    ASSERT_TRUE(stranger.ok());
    stranger.send(bytes);
    std::size_t got = 0;
    EXPECT_TRUE(stranger.wait_closed(5s, &got));
    EXPECT_EQ(got, 0u) << "a stranger got bytes back";
  }
  EXPECT_EQ(dice::counter(trust_event::preamble_rejected), rejected + 3);
  // The node is alive and a genuine peer of the same mode still joins.
  auto& client = start([&] {
    auto nc = settings(1, mode);
    nc.listen = false;
    return nc;
  }());
  attach(client, server);
  EXPECT_EQ(peers(client, 1, 5s), 1u);
  EXPECT_EQ(peers(server, 1, 5s), 1u);
}

INSTANTIATE_TEST_SUITE_P(
  Modes, Listener,
  ::testing::Values(trust_mode{"LoopbackWithoutSecret", false, false},
                    trust_mode{"SecretOnly", true, false},
                    trust_mode{"TlsOnly", false, true},
                    trust_mode{"TlsAndSecret", true, true}),
  [](const auto& info) {
    return std::string{info.param.name};
  });

// With TLS, passing the preamble is not enough either: BASP reads only
// what came through the TLS session. (Without TLS whoever passes the
// preamble speaks BASP: with a secret only its holders; docs/trust.md.)
class TlsListener : public Listener {};

TEST_P(TlsListener, TheCrashFrameAfterThePreambleGetsNoFurther) {
  auto mode = GetParam();
  auto& server = start(settings(0, mode));
  raw_socket stranger{server.port()};
  ASSERT_TRUE(stranger.ok());
  // Speaks the preamble as a dice node would (with the secret, if any),
  // then sends the crash frame in the clear: the TLS session drops it.
  dice::net::preamble_dialer hs{mode.secret ? secret_1 : "",
                                dice::random_nonce(32),
                                dice::net::channel::control};
  ASSERT_TRUE(stranger.send(hs.take_output()));
  auto a1 = stranger.read_exactly(dice::net::acceptor_hello_size, 5s);
  ASSERT_EQ(a1.size(), dice::net::acceptor_hello_size);
  hs.feed(a1.data(), a1.size());
  ASSERT_EQ(hs.state(), dice::net::preamble_state::done);
  stranger.send(hs.take_output() + dice::test::basp_crash_frame());
  EXPECT_TRUE(stranger.wait_closed(5s));
  auto& client = start([&] {
    auto nc = settings(1, mode);
    nc.listen = false;
    return nc;
  }());
  attach(client, server);
  EXPECT_EQ(peers(server, 1, 5s), 1u);
}

INSTANTIATE_TEST_SUITE_P(Modes, TlsListener,
                         ::testing::Values(trust_mode{"TlsOnly", false, true},
                                           trust_mode{"TlsAndSecret", true,
                                                      true}),
                         [](const auto& info) {
                           return std::string{info.param.name};
                         });

// -- time limit, cap, secrets -------------------------------------------------

class Guard : public Listener {};

const trust_mode secret_only{"SecretOnly", true, false};

TEST_F(Guard, ASilentStrangerIsCutAtTheTimeLimit) {
  auto nc = settings(0, secret_only);
  nc.handshake_timeout = 300ms;
  auto& server = start(nc);
  auto timeouts = dice::counter(trust_event::preamble_timeout);
  // One says nothing, one stops after the magic.
  raw_socket silent{server.port()};
  raw_socket stalled{server.port()};
  ASSERT_TRUE(silent.ok() && stalled.ok());
  auto t0 = clock_type::now();
  stalled.send("DICE");
  EXPECT_TRUE(silent.wait_closed(5s));
  EXPECT_TRUE(stalled.wait_closed(5s));
  auto ms = ms_since(t0);
  std::cout << "cut after " << ms << " ms (limit 300 ms)" << std::endl;
  EXPECT_GE(ms, 250);
  EXPECT_LT(ms, 3000);
  EXPECT_EQ(dice::counter(trust_event::preamble_timeout), timeouts + 2);
}

TEST_F(Guard, PastTheCapTheOldestPendingIsClosedAndPeersStay) {
  auto nc = settings(0, secret_only);
  nc.max_pending = 4;
  nc.handshake_timeout = 30s;
  auto& server = start(nc);
  auto client_cfg = [&](std::uint32_t id) {
    auto c = settings(id, secret_only);
    c.listen = false;
    return c;
  };
  auto& a = start(client_cfg(1));
  attach(a, server);
  ASSERT_EQ(peers(server, 1, 5s), 1u);
  // The peer's data connections (dialled after the handshake, through the
  // same preamble) must be up first, or one may still be pending when the
  // strangers come and be counted among the evicted.
  ASSERT_TRUE(server.data_plane() && a.data_plane());
  ASSERT_TRUE(server.data_plane()->wait_sendable(1, 5s));
  ASSERT_TRUE(a.data_plane()->wait_sendable(0, 5s));
  auto evicted = dice::counter(trust_event::pending_evicted);
  std::vector<raw_socket> strangers;
  for (int i = 0; i < 8; ++i) {
    strangers.emplace_back(server.port());
    ASSERT_TRUE(strangers.back().ok());
  }
  // The four oldest make room for the four newest.
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(strangers[i].wait_closed(5s)) << "stranger " << i;
  EXPECT_EQ(dice::counter(trust_event::pending_evicted), evicted + 4);
  // With the cap full of idle strangers a genuine peer still gets in (its
  // preamble takes a round trip; the strangers' take 30 s), and the first
  // peer is untouched.
  auto& b = start(client_cfg(2));
  attach(b, server);
  EXPECT_EQ(peers(server, 2, 5s), 2u);
  EXPECT_EQ(peers(a, 1, 1s), 1u);
}

TEST_F(Guard, AWrongSecretGetsNothing) {
  auto& server = start(settings(0, secret_only));
  auto refused = dice::counter(trust_event::auth_refused);
  // A stranger that speaks the framing: it gets the acceptor's hello (a
  // nonce and a MAC over its own bytes), then its forged proof is refused.
  raw_socket stranger{server.port()};
  ASSERT_TRUE(stranger.ok());
  dice::net::preamble_dialer hs{secret_2, dice::random_nonce(32),
                                dice::net::channel::control};
  stranger.send(hs.take_output());
  auto a1 = stranger.read_exactly(dice::net::acceptor_hello_size, 5s);
  ASSERT_EQ(a1.size(), dice::net::acceptor_hello_size);
  std::string forged(dice::net::dialer_proof_size, '\0');
  forged[0] = 1;
  stranger.send(forged);
  std::size_t more = 0;
  EXPECT_TRUE(stranger.wait_closed(5s, &more));
  EXPECT_EQ(more, 0u);
  EXPECT_EQ(dice::counter(trust_event::auth_refused), refused + 1);
  // dice nodes with another secret, or none: no peer on either side.
  auto wrong = settings(1, secret_only);
  wrong.listen = false;
  wrong.secret = secret_2;
  auto& c1 = start(wrong);
  attach(c1, server);
  auto none = settings(2, secret_only);
  none.listen = false;
  none.secret.clear();
  auto& c2 = start(none);
  attach(c2, server);
  EXPECT_EQ(peers(c1, 1, 1500ms), 0u);
  EXPECT_EQ(peers(c2, 1, 500ms), 0u);
  EXPECT_EQ(peers(server, 1, 100ms), 0u);
  // Both were counted (the dialer with the wrong secret refused the
  // acceptor's proof; the acceptor refused the dialer without one).
  EXPECT_GE(dice::counter(trust_event::auth_refused), refused + 3);
}

TEST_F(Guard, ADialerGivesUpOnASilentAcceptorAndRetries) {
  // Something that accepts and never answers the preamble.
  auto fd = dice::net::listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(fd);
  auto port = dice::net::local_endpoint(fd->get()).port;
  auto nc = settings(1, secret_only);
  nc.listen = false;
  nc.connect_timeout = 300ms;
  auto& client = start(nc);
  caf::scoped_actor self{*systems_of(client)};
  self->send(client.router(), dice::attach_atom::value,
             std::string{"127.0.0.1"}, port);
  // Accept two attempts; the dialer closes each at its deadline and the router
  // tries again after its backoff.
  struct conn {
    int fd;
    clock_type::time_point opened;
  };
  std::vector<conn> conns;
  std::vector<long> held_ms;
  auto deadline = clock_type::now() + 10s;
  while (held_ms.size() < 2 && clock_type::now() < deadline) {
    std::vector<pollfd> fds{{fd->get(), POLLIN, 0}};
    for (auto& c : conns)
      fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 100) <= 0)
      continue;
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0)
        continue;
      char buf[128];
      if (::recv(fds[i].fd, buf, sizeof(buf), 0) <= 0) {
        held_ms.push_back(ms_since(conns[i - 1].opened));
        ::close(conns[i - 1].fd);
        conns[i - 1].fd = -1;
      }
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(),
                               [](const conn& c) {
                                 return c.fd < 0;
                               }),
                conns.end());
    if (fds[0].revents != 0)
      if (auto x = dice::net::accept_nonblocking(fd->get()))
        conns.push_back(conn{x->fd.release(), clock_type::now()});
  }
  for (auto& c : conns)
    ::close(c.fd);
  fd->reset();
  ASSERT_EQ(held_ms.size(), 2u) << "the dialer did not retry";
  std::cout << "attempts closed by the dialer after " << held_ms[0] << " and "
            << held_ms[1] << " ms (timeout 300 ms)" << std::endl;
  for (auto ms : held_ms) {
    EXPECT_GE(ms, 250) << "closed before its deadline";
    EXPECT_LT(ms, 2000) << "held past its deadline";
  }
  EXPECT_EQ(peers(client, 1, 10ms), 0u);
}

// -- where a node may listen
// ----------------------------------------------------

TEST_F(Guard, BeyondLoopbackANodeNeedsASecretOrTlsOrInsecure) {
  auto bare = [] {
    dice::node_config nc;
    nc.id = 0;
    nc.distributed = true;
    nc.peer_loss_timeout = 1h;
    return nc;
  };
  {
    auto& sys = make_system(false);
    auto nc = bare(); // host "": every interface
    auto n = dice::node::start(sys, nc);
    ASSERT_FALSE(n);
    auto why = dice::render(n.error());
    EXPECT_TRUE(dice::is(n.error(), dice::errc::invalid_config)) << why;
    EXPECT_NE(why.find("--dice.secret-file"), std::string::npos) << why;
    EXPECT_NE(why.find("--dice.insecure"), std::string::npos) << why;
  }
  auto nc = bare();
  nc.insecure = true;
  EXPECT_NE(start(nc).port(), 0);
  nc = bare();
  nc.secret = secret_1;
  EXPECT_NE(start(nc).port(), 0);
  nc = bare();
  nc.tls = certs();
  EXPECT_NE(start(nc).port(), 0);
  for (auto host : {"127.0.0.1", "localhost"}) {
    nc = bare();
    nc.host = host;
    EXPECT_NE(start(nc).port(), 0) << host;
  }
}

// -- a listening socket from the launcher -------------------------------------

TEST_F(Guard, ANodeListensOnTheSocketItInherits) {
  // dice-launch binds the port and passes the socket (--dice.listen-fd);
  // a peer may dial before the node runs: its connect waits in the backlog.
  auto fd = dice::net::listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(fd) << dice::render(fd.error());
  auto port = dice::net::local_endpoint(fd->get()).port;
  auto client_cfg = settings(1, secret_only);
  client_cfg.listen = false;
  auto& client = start(client_cfg);
  caf::scoped_actor self{*systems_of(client)};
  self->send(client.router(), dice::attach_atom::value,
             std::string{"127.0.0.1"}, port);
  auto nc = settings(0, secret_only);
  nc.port = 1;                  // not bound: the inherited socket wins
  nc.listen_fd = fd->release(); // the node adopts it
  auto& server = start(nc);
  EXPECT_EQ(server.port(), port);
  EXPECT_EQ(peers(server, 1, 10s), 1u);
  EXPECT_EQ(peers(client, 1, 1s), 1u);
}

TEST_F(Guard, AnInheritedFdThatIsNotAListeningSocketIsRefused) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  auto plain = ::socket(AF_INET, SOCK_STREAM, 0); // never listened
  ASSERT_GE(plain, 0);
  for (auto fd : {p[0], plain}) {
    auto& sys = make_system(false);
    auto nc = settings(0, secret_only);
    nc.listen_fd = fd;
    auto n = dice::node::start(sys, nc);
    ASSERT_FALSE(n) << "fd " << fd;
    auto why = dice::render(n.error());
    EXPECT_NE(why.find("is not a listening stream socket"), std::string::npos)
      << why;
  }
  for (auto fd : {p[0], p[1], plain})
    ::close(fd);
}

} // namespace
