// Nodes whose large snapshots travel on the data plane beside BASP, over
// real loopback sockets in one process: both directions, order relative to
// a peer's other messages, the fallback to BASP when the data connection
// cannot be opened, and TLS (on the data connections too). Every wait has
// a deadline.

#include "dice/logging/log.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/runtime/node.hpp"
#include "dice/security/trust.hpp"
#include "dice/type_ids.hpp"
#include "net/data_plane.hpp"

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A snapshot published by node `sender` (peers refuse one that names
// another node).
dice::model_snapshot make_snapshot(std::size_t n, std::int64_t version,
                                   std::uint32_t sender = 0) {
  std::vector<std::uint8_t> bytes(n);
  for (std::size_t i = 0; i < n; ++i)
    bytes[i] = static_cast<std::uint8_t>(i * 7 + version);
  dice::snapshot_builder b{dice::snapshot_builder::padded(n)};
  b.add("w", dice::dtype::uint8, {static_cast<std::int64_t>(n)}, bytes.data(),
        n);
  return b.build(sender, 1, version, 0);
}

bool is_snapshot(const caf::message& x) {
  return x.match_elements<std::string, dice::model_snapshot>();
}

bool is_delta(const caf::message& x) {
  return x.match_elements<std::string, dice::context_delta>();
}

bool same_payload(const dice::model_snapshot& x,
                  const dice::model_snapshot& y) {
  return x.version == y.version && x.data.size() == y.data.size()
    && std::memcmp(x.data.data(), y.data.data(), x.data.size()) == 0;
}

class DataChannel : public ::testing::Test {
 protected:
  caf::actor_system& make_system(bool tls) {
    auto cfg = std::make_unique<dice::node_system_config>();
    if (tls) {
      cfg->openssl_certificate = (*dir_ / "cert.pem").string();
      cfg->openssl_key = (*dir_ / "key.pem").string();
      cfg->openssl_cafile = (*dir_ / "ca.pem").string();
    }
    configs_.push_back(std::move(cfg));
    systems_.push_back(std::make_unique<caf::actor_system>(*configs_.back()));
    return *systems_.back();
  }

  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path()
                        / ("dice-data-" + std::to_string(::getpid())));
    auto cmd = std::string{"bash "} + DICE_SOURCE_DIR
      + "/scripts/make-test-certs " + dir_->string() + " >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }

  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  dice::node& start(std::uint32_t id, bool listen, bool tls = false) {
    dice::node_config nc;
    nc.id = id;
    nc.distributed = true;
    nc.listen = listen;
    nc.host = "127.0.0.1";
    nc.peer_loss_timeout = 1h;
    nc.connect_timeout = 2s;
    nc.secret = "0123456789abcdef0123456789abcdef";
    if (tls)
      nc.tls = {(*dir_ / "cert.pem").string(), (*dir_ / "key.pem").string(),
                (*dir_ / "ca.pem").string()};
    auto& sys = make_system(tls);
    auto n = dice::node::start(sys, std::move(nc));
    if (!n) {
      ADD_FAILURE() << dice::render(n.error());
      std::abort();
    }
    nodes_.push_back(std::move(*n));
    return nodes_.back();
  }

  static caf::actor_system& system_of(const dice::node& n) {
    return caf::actor_cast<caf::abstract_actor*>(n.router())->home_system();
  }

  // A member on `n` subscribed to "model": a scoped actor of n's system.
  std::unique_ptr<caf::scoped_actor> member(dice::node& n) {
    auto self = std::make_unique<caf::scoped_actor>(system_of(n));
    (*self)->send(n.router(), dice::join_atom::value, n.id(), dice::role_set{},
                  caf::actor{*self}, std::vector<std::string>{"model"});
    (*self)->receive([](const std::vector<dice::finish>&) {});
    return self;
  }

  void connect(dice::node& client, dice::node& server) {
    // Each router takes control messages from its own node's actors only.
    caf::scoped_actor self{system_of(client)};
    caf::scoped_actor at_server{system_of(server)};
    self->send(client.router(), dice::attach_atom::value,
               std::string{"127.0.0.1"}, server.port());
    std::uint32_t got = 0;
    at_server
      ->request(server.router(), 5s, dice::peers_atom::value, std::uint32_t{1})
      .receive(
        [&](std::uint32_t x) {
          got = x;
        },
        [](caf::error&) {});
    ASSERT_EQ(got, 1u);
    self
      ->request(client.router(), 5s, dice::peers_atom::value, std::uint32_t{1})
      .receive(
        [&](std::uint32_t x) {
          got = x;
        },
        [](caf::error&) {});
    ASSERT_EQ(got, 1u);
  }

  static void publish(caf::scoped_actor& self, dice::node& n,
                      caf::message msg) {
    self->send(n.router(), dice::publish_atom::value, std::string{"model"},
               n.id(), std::move(msg));
  }

  // The next message on "model" at `self` (a failure after 10 s).
  static caf::message next(caf::scoped_actor& self) {
    caf::message result;
    self->receive(
      [&](std::string& topic, dice::model_snapshot& x) {
        result = caf::make_message(std::move(topic), std::move(x));
      },
      [&](std::string& topic, dice::context_delta& x) {
        result = caf::make_message(std::move(topic), std::move(x));
      },
      caf::after(10s) >>
        [] {
          ADD_FAILURE() << "nothing arrived";
        });
    return result;
  }

  // Node 0 (listening) and node 1, connected, a member on "model" at each,
  // data connections up both ways, bytes on them (the same-host shortcut
  // has its tests).
  struct connected {
    dice::node& server;
    dice::node& client;
    std::unique_ptr<caf::scoped_actor> at_server;
    std::unique_ptr<caf::scoped_actor> at_client;
  };

  connected connected_pair() {
    auto& server = start(0, true);
    auto& client = start(1, false);
    server.data_plane()->set_same_host(false);
    client.data_plane()->set_same_host(false);
    connected result{server, client, member(server), member(client)};
    connect(client, server);
    EXPECT_TRUE(client.data_plane()->wait_sendable(0, 5s));
    EXPECT_TRUE(server.data_plane()->wait_sendable(1, 5s));
    return result;
  }

  void TearDown() override {
    members_.clear();
    for (auto& n : nodes_)
      n.stop();
    nodes_.clear();
    systems_.clear();
  }

  static inline fs::path* dir_ = nullptr;
  std::vector<std::unique_ptr<dice::node_system_config>> configs_;
  std::vector<std::unique_ptr<caf::actor_system>> systems_;
  std::deque<dice::node> nodes_;
  std::vector<std::unique_ptr<caf::scoped_actor>> members_;
};

TEST_F(DataChannel, LargeSnapshotsTravelBesideBaspInBothDirections) {
  auto [server, client, at_server, at_client] = connected_pair();
  auto before = dice::net::data_stats();
  auto x = make_snapshot(6'800'000, 1);
  publish(*at_server, server, caf::make_message(std::string{"model"}, x));
  auto got = next(*at_client);
  ASSERT_TRUE(is_snapshot(got));
  EXPECT_TRUE(same_payload(got.get_as<dice::model_snapshot>(1), x));
  auto y = make_snapshot(3'000'000, 2, 1);
  publish(*at_client, client, caf::make_message(std::string{"model"}, y));
  got = next(*at_server);
  ASSERT_TRUE(is_snapshot(got));
  EXPECT_TRUE(same_payload(got.get_as<dice::model_snapshot>(1), y));
  // A small snapshot stays on BASP (one message, no second trip).
  auto z = make_snapshot(100'000, 3);
  publish(*at_server, server, caf::make_message(std::string{"model"}, z));
  got = next(*at_client);
  ASSERT_TRUE(is_snapshot(got));
  EXPECT_TRUE(same_payload(got.get_as<dice::model_snapshot>(1), z));
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.transfers_received - before.transfers_received, 2u);
  EXPECT_EQ(after.bytes_received - before.bytes_received,
            x.data.size() + y.data.size());
  EXPECT_EQ(after.fallbacks, before.fallbacks);
}

TEST_F(DataChannel, ASnapshotKeepsItsPlaceAmongAPeersMessages) {
  auto& server = start(0, true);
  auto& client = start(1, false);
  auto at_server = member(server);
  auto at_client = member(client);
  connect(client, server);
  ASSERT_TRUE(server.data_plane()->wait_sendable(1, 5s));
  // Snapshots on the data plane, small messages on BASP, interleaved: the
  // receiver sees them in the order they were published.
  std::vector<dice::model_snapshot> xs;
  for (std::int64_t v = 1; v <= 3; ++v) {
    xs.push_back(make_snapshot(2'000'000 * static_cast<std::size_t>(v), v));
    publish(*at_server, server,
            caf::make_message(std::string{"model"}, xs.back()));
    dice::context_delta d;
    d.seq = static_cast<std::uint64_t>(v);
    publish(*at_server, server, caf::make_message(std::string{"model"}, d));
  }
  for (std::int64_t v = 1; v <= 3; ++v) {
    auto a = next(*at_client);
    ASSERT_TRUE(is_snapshot(a)) << "expected snapshot v" << v;
    EXPECT_TRUE(same_payload(a.get_as<dice::model_snapshot>(1), xs[v - 1]));
    auto b = next(*at_client);
    ASSERT_TRUE(is_delta(b)) << "expected marker " << v;
    EXPECT_EQ(b.get_as<dice::context_delta>(1).seq,
              static_cast<std::uint64_t>(v));
  }
}

TEST_F(DataChannel, ASnapshotRoutedOnArrivalOvertakesNothingSentBeforeIt) {
  auto [server, client, at_server, at_client] = connected_pair();
  // Each round: many small messages on BASP, then a snapshot whose bytes
  // (on their own connection) would be there long before the last of them.
  // The receiver routes a snapshot when its bytes arrive, but only once
  // everything sent before it is handled.
  constexpr std::uint64_t rounds = 4;
  constexpr std::uint64_t per_round = 400;
  auto before = dice::net::data_stats();
  std::vector<dice::model_snapshot> xs;
  for (std::uint64_t v = 1; v <= rounds; ++v) {
    for (std::uint64_t i = 0; i < per_round; ++i) {
      dice::context_delta d;
      d.seq = v * per_round + i;
      publish(*at_server, server, caf::make_message(std::string{"model"}, d));
    }
    xs.push_back(make_snapshot(300'000, static_cast<std::int64_t>(v)));
    publish(*at_server, server,
            caf::make_message(std::string{"model"}, xs.back()));
  }
  for (std::uint64_t v = 1; v <= rounds; ++v) {
    for (std::uint64_t i = 0; i < per_round; ++i) {
      auto a = next(*at_client);
      ASSERT_TRUE(is_delta(a))
        << "round " << v << ": the snapshot overtook message " << i;
      EXPECT_EQ(a.get_as<dice::context_delta>(1).seq, v * per_round + i);
    }
    auto b = next(*at_client);
    ASSERT_TRUE(is_snapshot(b)) << "round " << v;
    EXPECT_TRUE(same_payload(b.get_as<dice::model_snapshot>(1), xs[v - 1]));
  }
  // The last snapshot's BASP reference was never sent (nothing followed it
  // on BASP): it went when its bytes arrived, or once the messages before
  // it were handled. Each earlier one went that way or at its reference
  // (sent before the next round's first message), whichever came first.
  auto after = dice::net::data_stats();
  EXPECT_GE(after.routed_on_arrival - before.routed_on_arrival, 1u);
}

// An authenticated peer whose data-plane snapshot names another node as its
// sender (in the header frame the receiver routes it by): dropped and
// counted, as its BASP reference would be; its honest snapshots still flow.
TEST_F(DataChannel, ASnapshotHeaderInAnotherNodesNameIsDropped) {
  auto [server, client, at_server, at_client] = connected_pair();
  auto forged = dice::counter(dice::trust_event::forged_origin);
  auto before = dice::net::data_stats();
  // Node 1 publishes a model in node 0's name (its router forwards what its
  // own members publish as it is).
  publish(*at_client, client,
          caf::make_message(std::string{"model"}, make_snapshot(300'000, 9)));
  auto honest = make_snapshot(300'000, 10, 1);
  publish(*at_client, client, caf::make_message(std::string{"model"}, honest));
  auto got = next(*at_server);
  ASSERT_TRUE(is_snapshot(got));
  EXPECT_EQ(got.get_as<dice::model_snapshot>(1).version, 10)
    << "the snapshot in node 0's name was delivered";
  EXPECT_TRUE(same_payload(got.get_as<dice::model_snapshot>(1), honest));
  EXPECT_EQ(dice::counter(dice::trust_event::forged_origin), forged + 1);
  EXPECT_EQ(
    dice::net::data_stats().transfers_received - before.transfers_received, 2u);
}

TEST_F(DataChannel, FallsBackToBaspWhenTheDataConnectionCannotOpen) {
  std::mutex mtx;
  std::vector<std::string> warnings;
  auto old = dice::log::set_sink(
    [&](dice::log::level lvl, std::uint32_t, const std::string& line) {
      std::lock_guard<std::mutex> guard{mtx};
      if (lvl == dice::log::level::warning)
        warnings.push_back(line);
    });
  auto& server = start(0, true);
  auto& client = start(1, false);
  // The server refuses every data connection (as a box in between that
  // cuts them would): its plane is stopped, its control channel is not.
  server.data_plane()->stop();
  auto at_server = member(server);
  auto at_client = member(client);
  connect(client, server);
  EXPECT_FALSE(client.data_plane()->wait_sendable(0, 5s));
  auto before = dice::net::data_stats();
  auto x = make_snapshot(9'000'000, 1, 1); // above one BASP chunk (8 MB)
  publish(*at_client, client, caf::make_message(std::string{"model"}, x));
  auto got = next(*at_server);
  ASSERT_TRUE(is_snapshot(got));
  EXPECT_TRUE(same_payload(got.get_as<dice::model_snapshot>(1), x));
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.fallbacks - before.fallbacks, 1u);
  EXPECT_EQ(after.transfers_received, before.transfers_received);
  dice::log::set_sink(std::move(old));
  std::lock_guard<std::mutex> guard{mtx};
  auto said = std::any_of(warnings.begin(), warnings.end(), [](auto& w) {
    return w.find("travel over BASP") != std::string::npos;
  });
  EXPECT_TRUE(said) << "no warning about the fallback";
}

TEST_F(DataChannel, UnderTlsSnapshotsTravelOnTheDataPlaneWithTls) {
  auto& server = start(0, true, true);
  auto& client = start(1, false, true);
  ASSERT_TRUE(server.data_plane()->tls() && client.data_plane()->tls());
  server.data_plane()->set_same_host(false);
  client.data_plane()->set_same_host(false);
  auto at_server = member(server);
  auto at_client = member(client);
  auto before = dice::net::data_stats();
  connect(client, server);
  ASSERT_TRUE(client.data_plane()->wait_sendable(0, 5s));
  ASSERT_TRUE(server.data_plane()->wait_sendable(1, 5s));
  auto x = make_snapshot(6'800'000, 1);
  publish(*at_server, server, caf::make_message(std::string{"model"}, x));
  auto got = next(*at_client);
  ASSERT_TRUE(is_snapshot(got));
  EXPECT_TRUE(same_payload(got.get_as<dice::model_snapshot>(1), x));
  auto y = make_snapshot(3'000'000, 2, 1);
  publish(*at_client, client, caf::make_message(std::string{"model"}, y));
  got = next(*at_server);
  ASSERT_TRUE(is_snapshot(got));
  EXPECT_TRUE(same_payload(got.get_as<dice::model_snapshot>(1), y));
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.links_opened - before.links_opened, 4u);
  EXPECT_EQ(after.transfers_received - before.transfers_received, 2u);
  EXPECT_EQ(after.fallbacks, before.fallbacks);
  EXPECT_EQ(after.refused, before.refused);
}

} // namespace
