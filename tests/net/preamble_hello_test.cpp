// The router's secret challenge is skipped only where dice's preamble
// already proved the secret on the connection (router_config::
// preamble_proven, set by node::start with a secret): two real nodes over
// loopback connect with the hello alone, while a router without the flag
// (CAF's own publish/connect, the testing network backend) still refuses a
// hello without the challenge's proof, and a flagged router still checks a
// proof it is given.

#include "actors/router_state.hpp"
#include "dice/actors/router.hpp"
#include "dice/core/errc.hpp"
#include "dice/runtime/node.hpp"
#include "dice/security/trust.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "support/deterministic.hpp"
#include "support/planets.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace preamble_hello {

using namespace std::chrono_literals;

const std::string secret = "0123456789abcdef0123456789abcdef";

// -- real nodes over loopback
// ---------------------------------------------------

class PreambleHello : public ::testing::Test {
 protected:
  dice::node& start(dice::node_config nc) {
    configs_.push_back(std::make_unique<dice::node_system_config>());
    systems_.push_back(std::make_unique<caf::actor_system>(*configs_.back()));
    auto n = dice::node::start(*systems_.back(), std::move(nc));
    if (!n) {
      ADD_FAILURE() << dice::render(n.error());
      std::abort();
    }
    nodes_.push_back(std::move(*n));
    return nodes_.back();
  }

  static dice::node_config settings(std::uint32_t id, bool data_channel) {
    dice::node_config nc;
    nc.id = id;
    nc.distributed = true;
    nc.host = "127.0.0.1";
    nc.secret = secret;
    nc.data_channel = data_channel;
    nc.peer_loss_timeout = 1h;
    nc.connect_timeout = 2s;
    return nc;
  }

  static caf::actor_system& system_of(dice::node& n) {
    return caf::actor_cast<caf::abstract_actor*>(n.router())->home_system();
  }

  // Waits (bounded) until `n` has `want` peers; how many it has.
  static std::uint32_t peers(dice::node& n, std::uint32_t want) {
    caf::scoped_actor self{system_of(n)};
    std::uint32_t result = 0;
    self->request(n.router(), 10s, dice::peers_atom::value, want)
      .receive(
        [&](std::uint32_t x) {
          result = x;
        },
        [](caf::error&) {});
    return result;
  }

  void TearDown() override {
    for (auto& n : nodes_)
      n.stop();
    nodes_.clear();
    systems_.clear();
  }

  std::vector<std::unique_ptr<dice::node_system_config>> configs_;
  std::vector<std::unique_ptr<caf::actor_system>> systems_;
  std::deque<dice::node> nodes_;
};

TEST_F(PreambleHello, NodesWithASecretConnectWithoutTheRoutersChallenge) {
  // With and without the data plane (its key exchange rides in the hello).
  for (bool data_channel : {false, true}) {
    SCOPED_TRACE(data_channel ? "data plane on" : "data plane off");
    auto id = data_channel ? 10u : 0u;
    auto& server = start(settings(id, data_channel));
    auto cc = settings(id + 1, data_channel);
    cc.listen = false;
    auto& client = start(cc);
    auto before = dice::router_handshake_stats();
    auto refused = dice::counter(dice::trust_event::auth_refused);
    caf::scoped_actor self{system_of(client)};
    self->send(client.router(), dice::attach_atom::value,
               std::string{"127.0.0.1"}, server.port());
    EXPECT_EQ(peers(client, 1), 1u);
    EXPECT_EQ(peers(server, 1), 1u);
    auto after = dice::router_handshake_stats();
    // One hello round trip: no challenge was asked for or answered, and
    // the acceptor took the hello on the preamble's proof.
    EXPECT_EQ(after.challenges_answered, before.challenges_answered);
    EXPECT_EQ(after.hellos_on_preamble, before.hellos_on_preamble + 1);
    EXPECT_EQ(dice::counter(dice::trust_event::auth_refused), refused);
  }
}

// -- routers on CAF's own publish/connect (testing network backend)
// -------------

class PreambleHelloCaf : public dice::test::planets {
 protected:
  dice::router_config with_secret(bool preamble_proven) {
    dice::router_config cfg;
    cfg.secret = secret;
    cfg.preamble_proven = preamble_proven;
    return cfg;
  }

  // Publishes router `a`'s gate on planet 0, port 8080.
  void listen_on(const dice::router_actor& a) {
    publish(0, gate_of(0, a), 8080);
  }

  // Sends `h` to the gate published on planet 0, port 8080, from planet 1
  // (a peer past the transport, as anyone who reaches a CAF-published
  // port); the error it got, if any.
  caf::error send_hello(dice::peer_hello h) {
    auto err = std::make_shared<caf::error>();
    auto answered = std::make_shared<bool>(false);
    as_stranger(1, 0, "a", 8080,
                [=](caf::event_based_actor* self, caf::actor gate) {
                  self->request(gate, 10s, dice::hello_atom::value, h)
                    .then(
                      [=](const dice::peer_hello&) {
                        *answered = true;
                      },
                      [=](caf::error& e) {
                        *answered = true;
                        *err = e;
                      });
                });
    EXPECT_TRUE(*answered);
    return *err;
  }
};

TEST_F(PreambleHelloCaf, ARouterWithoutTheFlagRefusesAHelloWithoutProof) {
  auto a = spawn_router(0, 0, with_secret(false));
  listen_on(a);
  auto refused = dice::counter(dice::trust_event::auth_refused);
  dice::peer_hello h;
  h.node = 7;
  auto err = send_hello(h);
  EXPECT_TRUE(dice::is(err, dice::errc::unauthorized)) << dice::render(err);
  EXPECT_TRUE(router_of(a).peers.empty());
  EXPECT_EQ(dice::counter(dice::trust_event::auth_refused), refused + 1);
}

TEST_F(PreambleHelloCaf, AFlaggedRouterStillChecksAProofItIsGiven) {
  // The flag lets a hello without a proof through (its connection passed
  // the preamble); a wrong proof is still a wrong proof.
  auto a = spawn_router(0, 0, with_secret(true));
  listen_on(a);
  dice::peer_hello h;
  h.node = 7;
  h.proof = std::string(32, 'x');
  auto err = send_hello(h);
  EXPECT_TRUE(dice::is(err, dice::errc::unauthorized)) << dice::render(err);
  EXPECT_TRUE(router_of(a).peers.empty());
}

TEST_F(PreambleHelloCaf, WithoutADialerAFlaggedRouterStillAsksTheChallenge) {
  // The flag skips the challenge only on connections the node's dialer
  // made; through CAF's own connect the attacher proves the secret as
  // before, and an acceptor without the flag takes it.
  auto a = spawn_router(0, 0, with_secret(false));
  listen_on(a);
  auto b = spawn_router(1, 1, with_secret(true));
  auto before = dice::router_handshake_stats();
  attach(1, b, 0, "a", 8080);
  EXPECT_EQ(router_of(a).peers.size(), 1u);
  EXPECT_EQ(router_of(b).peers.size(), 1u);
  auto after = dice::router_handshake_stats();
  EXPECT_EQ(after.challenges_answered, before.challenges_answered + 1);
  EXPECT_EQ(after.hellos_on_preamble, before.hellos_on_preamble);
}

} // namespace preamble_hello
