// Deterministic multi-node tests: two or three actor systems on CAF's test
// coordinator, connected through the testing network backend
// (io::network::test_multiplexer). No sockets, no real time. Nodes publish
// their router's gate, as dice::node does.

#include "actors/gate.hpp"
#include "actors/router_state.hpp"
#include "dice/actors/router.hpp"
#include "dice/core/errc.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/security/trust.hpp"
#include "dice/type_ids.hpp"

#include "caf/exit_reason.hpp"
#include "caf/system_messages.hpp"

#include "support/deterministic.hpp"
#include "support/planets.hpp"
#include "support/secret_file.hpp"
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::router_actor;
using dice::router_config;
using dice::router_state;

class RouterNet : public dice::test::planets {
 protected:
  /// Publishes the gate of router `b` of planet `i` on `port`.
  void listen(int i, const router_actor& b, std::uint16_t port) {
    publish(i, gate_of(i, b), port);
  }

  void publish_delta(const router_actor& b, const std::string& topic,
                     std::uint32_t sender) {
    planets::publish_delta(planet_of(b), b, topic, sender);
  }

  /// Sends `x` from the local driver of the planet that runs `b`.
  template <class... Ts>
  void local_send(const router_actor& b, Ts&&... xs) {
    hosts[planet_of(b)]->driver->send(b, std::forward<Ts>(xs)...);
    exec_all();
  }

  int planet_of(const router_actor& b) {
    for (auto& [i, x] : actors)
      if (x.address() == b.address())
        return i;
    ADD_FAILURE() << "unknown router";
    return 0;
  }
};

TEST_F(RouterNet, HandshakeAndTopicForwarding) {
  auto a = spawn_router(0, 0);
  auto b = spawn_router(1, 1);
  auto ma = spawn_member(0, a, 0, {"t1"});
  auto mb = spawn_member(1, b, 1, {"t2"});
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(router_of(a).peers.size(), 1u);
  ASSERT_EQ(router_of(b).peers.size(), 1u);
  EXPECT_EQ(router_of(a).peers[0].node, 1u);
  EXPECT_EQ(router_of(b).peers[0].node, 0u);
  EXPECT_EQ(router_of(b).peers[0].topics, std::vector<std::string>{"t1"});
  // b -> a on a's topic; a -> b on b's topic; nobody gets other topics.
  publish_delta(b, "t1", 1);
  publish_delta(a, "t2", 0);
  publish_delta(a, "t1", 0); // a's own topic: never echoed to its node
  EXPECT_EQ(member_of(ma).topics, std::vector<std::string>{"t1"});
  EXPECT_EQ(member_of(mb).topics, std::vector<std::string>{"t2"});
}

TEST_F(RouterNet, OneDeliveryPerSubscription) {
  auto a = spawn_router(0, 0);
  auto b = spawn_router(1, 1);
  auto m1 = spawn_member(0, a, 0, {"t"});
  auto m2 = spawn_member(0, a, 0, {"t"});
  // Subscribing again changes nothing.
  local_send(a, dice::subscribe_atom::value, std::string{"t"}, std::uint32_t{0},
             m1);
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  publish_delta(b, "t", 1);
  publish_delta(b, "t", 1);
  EXPECT_EQ(member_of(m1).topics.size(), 2u);
  EXPECT_EQ(member_of(m2).topics.size(), 2u);
}

TEST_F(RouterNet, DataSentBeforeTheHandshakeIsHeld) {
  auto a = spawn_router(0, 0);
  auto b = spawn_router(1, 1);
  auto ma = spawn_member(0, a, 0, {"t"});
  // b publishes before it knows any peer: held, not dropped.
  publish_delta(b, "t", 1);
  EXPECT_EQ(router_of(b).held.count("t"), 1u);
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  EXPECT_EQ(member_of(ma).topics, std::vector<std::string>{"t"});
  EXPECT_EQ(router_of(b).held.count("t"), 0u);
}

TEST_F(RouterNet, LateSubscriptionAndRetainedTopics) {
  router_config cfg;
  cfg.retained_topics = {"model"};
  auto a = spawn_router(0, 0, cfg);
  auto b = spawn_router(1, 1);
  auto c = spawn_router(2, 2);
  spawn_member(1, b, 1, {"model"}); // the first receiver
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  publish_delta(a, "model", 0);
  publish_delta(a, "model", 0);
  // A node that joins later gets the last retained message at once.
  auto mc = spawn_member(2, c, 2, {"model"});
  attach(2, c, 0, "a", 8080);
  EXPECT_EQ(member_of(mc).topics.size(), 1u);
}

TEST_F(RouterNet, ProtocolMismatchIsRefused) {
  dice::test::log_capture logs;
  auto a = spawn_router(0, 0);
  listen(0, a, 8080);
  auto err = std::make_shared<caf::error>();
  as_stranger(1, 0, "a", 8080,
              [=](caf::event_based_actor* self, caf::actor gate) {
                dice::peer_hello h;
                h.version = 99;
                h.node = 7;
                self->request(gate, 1s, dice::hello_atom::value, h)
                  .then([](const dice::peer_hello&) {},
                        [=](caf::error& e) {
                          *err = e;
                        });
              });
  EXPECT_TRUE(dice::is(*err, dice::errc::handshake_failed))
    << dice::render(*err);
  EXPECT_TRUE(router_of(a).peers.empty());
  EXPECT_EQ(logs.count("protocol v99"), 1u);
}

TEST_F(RouterNet, ThousandsOfRefusedHellosLogAFewLines) {
  // A secret holder's buggy or hostile node past the preamble: 2,000
  // hellos of another protocol version, then 2,000 without the proof of
  // the secret, on one connection. Each is refused and counted; the log
  // gets the first of each kind and every 1024th (it got 4,000 lines,
  // 354 KB).
  dice::test::log_capture logs;
  router_config cfg;
  cfg.secret = "0123456789abcdef0123456789abcdef";
  auto a = spawn_router(0, 0, cfg);
  listen(0, a, 8080);
  auto refused = std::make_shared<int>(0);
  auto wrong_version0 = dice::counter(dice::trust_event::wrong_version);
  auto auth0 = dice::counter(dice::trust_event::auth_refused);
  as_stranger(1, 0, "a", 8080,
              [=](caf::event_based_actor* self, caf::actor gate) {
                for (int i = 0; i < 4000; ++i) {
                  dice::peer_hello h;
                  h.version = i < 2000 ? 99 : dice::router_protocol_version;
                  h.node = 7;
                  self->request(gate, 10s, dice::hello_atom::value, h)
                    .then([](const dice::peer_hello&) {},
                          [=](caf::error&) {
                            ++*refused;
                          });
                }
              });
  EXPECT_EQ(*refused, 4000);
  EXPECT_TRUE(router_of(a).peers.empty());
  EXPECT_EQ(dice::counter(dice::trust_event::wrong_version) - wrong_version0,
            2000u);
  EXPECT_EQ(dice::counter(dice::trust_event::auth_refused) - auth0, 2000u);
  EXPECT_EQ(logs.count("protocol v99"), 2u);
  EXPECT_EQ(logs.count("sent no proof of the cluster secret"), 2u);
  EXPECT_EQ(logs.count("(1025 such refusals; every 1024th is logged)"), 2u);
}

TEST_F(RouterNet, FinishAndDrainAcrossThreeNodes) {
  auto a = spawn_router(0, 0);
  auto b = spawn_router(1, 1);
  auto c = spawn_router(2, 2);
  auto ma = spawn_member(0, a, 0, {"t"});
  auto mb = spawn_member(1, b, 1, {});
  auto mc = spawn_member(2, c, 2, {});
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  attach(2, c, 0, "a", 8080);
  // Star: c finishes; a relays to b.
  local_send(c, dice::finish{2, "max_step", false});
  EXPECT_EQ(member_of(ma).finishes.size(), 1u);
  EXPECT_EQ(member_of(mb).finishes.size(), 1u);
  EXPECT_EQ(member_of(mc).finishes.size(), 0u); // the sender's own node
  // b publishes its last data, then is done; c is done. a's member must
  // not be released before b's data arrived.
  publish_delta(b, "t", 1);
  local_send(b, dice::done_atom::value, std::uint32_t{1}, mb);
  local_send(c, dice::done_atom::value, std::uint32_t{2}, mc);
  EXPECT_EQ(member_of(mb).done, 0); // a's member is not done yet
  EXPECT_EQ(member_of(mc).done, 0);
  local_send(a, dice::done_atom::value, std::uint32_t{0}, ma);
  EXPECT_EQ(member_of(ma).topics.size(), 1u);
  EXPECT_EQ(member_of(ma).done, 1);
  EXPECT_EQ(member_of(mb).done, 1);
  EXPECT_EQ(member_of(mc).done, 1);
  // A node that joins the finished cluster is told at once.
  auto d = spawn_router(2, 3);
  auto md = spawn_member(2, d, 3, {});
  attach(2, d, 0, "a", 8080);
  ASSERT_EQ(member_of(md).finishes.size(), 1u);
  EXPECT_EQ(member_of(md).finishes[0].sender, 2u);
}

TEST_F(RouterNet, LostPeerIsDroppedAndALonelyNodeStops) {
  dice::test::log_capture logs;
  router_config cfg;
  cfg.expect_peers = true;
  cfg.peer_loss_timeout = 5s;
  auto a = spawn_router(0, 0, cfg);
  auto b = spawn_router(1, 1);
  auto ma = spawn_member(0, a, 0, {"t"});
  spawn_member(1, b, 1, {"t"});
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(router_of(a).peers.size(), 1u);
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
  exec_all();
  EXPECT_TRUE(router_of(a).peers.empty());
  EXPECT_EQ(logs.count("lost peer node 1"), 1u);
  // Without peers for peer_loss_timeout, the node stops with an error.
  advance_time(4s);
  EXPECT_TRUE(member_of(ma).finishes.empty());
  advance_time(1s);
  ASSERT_EQ(member_of(ma).finishes.size(), 1u);
  EXPECT_TRUE(member_of(ma).finishes[0].failed);
}

// Members hear from their router (as the sender) when a peer finished its
// handshake and when it is lost: a collector resends at once on reconnect.
TEST_F(RouterNet, MembersHearWhenAPeerConnectsAndWhenItIsLost) {
  router_config ca;
  ca.roles = {dice::role::learner};
  router_config cb;
  cb.roles = {dice::role::collector};
  auto a = spawn_router(0, 0, ca);
  auto b = spawn_router(1, 1, cb);
  auto ma = spawn_member(0, a, 0, {"t"});
  auto mb = spawn_member(1, b, 1, {"t"});
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(member_of(ma).peer_events.size(), 1u);
  ASSERT_EQ(member_of(mb).peer_events.size(), 1u);
  EXPECT_EQ(member_of(ma).peer_events[0],
            (dice::peer_event{1, {dice::role::collector}, true}));
  EXPECT_EQ(member_of(mb).peer_events[0],
            (dice::peer_event{0, {dice::role::learner}, true}));
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
  exec_all();
  ASSERT_EQ(member_of(ma).peer_events.size(), 2u);
  EXPECT_EQ(member_of(ma).peer_events[1],
            (dice::peer_event{1, {dice::role::collector}, false}));
}

TEST_F(RouterNet, ExitFromARemoteActorIsIgnored) {
  auto a = spawn_router(0, 0);
  auto b = spawn_router(1, 1);
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(router_of(b).peers.size(), 1u);
  auto proxy = router_of(b).peers[0].handle;
  // A remote actor sends an exit to a's gate through its proxy.
  hosts[1]->sys.spawn([=](caf::event_based_actor* self) {
    // (exit_reason::kill cannot be trapped by any CAF actor.)
    self->send_exit(proxy, caf::exit_reason::user_shutdown);
  });
  auto ignored = dice::counter(dice::trust_event::remote_exit_ignored);
  exec_all();
  EXPECT_EQ(router_of(a).peers.size(), 1u);
  EXPECT_EQ(router_of(b).peers.size(), 1u);
  EXPECT_EQ(dice::counter(dice::trust_event::remote_exit_ignored), ignored + 1);
}

// -- cluster secret and strangers (issue 6) -----------------------------------

router_config with_secret(std::string secret) {
  router_config cfg;
  cfg.secret = std::move(secret);
  return cfg;
}

using dice::test::secret_1;
using dice::test::secret_2;

TEST_F(RouterNet, SameSecretConnectsAndForwards) {
  auto a = spawn_router(0, 0, with_secret(secret_1));
  auto b = spawn_router(1, 1, with_secret(secret_1));
  auto ma = spawn_member(0, a, 0, {"t"});
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(router_of(a).peers.size(), 1u);
  ASSERT_EQ(router_of(b).peers.size(), 1u);
  publish_delta(b, "t", 1);
  EXPECT_EQ(member_of(ma).topics.size(), 1u);
}

TEST_F(RouterNet, WrongSecretIsRefusedAndGetsNothing) {
  dice::test::log_capture logs;
  auto refused = dice::counter(dice::trust_event::auth_refused);
  auto a = spawn_router(0, 0, with_secret(secret_1));
  auto b = spawn_router(1, 1, with_secret(secret_2));
  publish_delta(a, "t", 0); // held until someone subscribes to "t"
  auto mb = spawn_member(1, b, 1, {"t"});
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  EXPECT_TRUE(router_of(a).peers.empty());
  EXPECT_TRUE(router_of(b).peers.empty());
  EXPECT_TRUE(member_of(mb).topics.empty());
  EXPECT_EQ(router_of(a).held.count("t"), 1u);
  EXPECT_EQ(dice::counter(dice::trust_event::auth_refused), refused + 1);
  EXPECT_EQ(logs.count("does not know the cluster secret"), 1u);
}

TEST_F(RouterNet, NoSecretIsRefusedAndGetsNothing) {
  dice::test::log_capture logs;
  auto refused = dice::counter(dice::trust_event::auth_refused);
  auto a = spawn_router(0, 0, with_secret(secret_1));
  auto b = spawn_router(1, 1);
  publish_delta(a, "t", 0);
  auto mb = spawn_member(1, b, 1, {"t"});
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  EXPECT_TRUE(router_of(a).peers.empty());
  EXPECT_TRUE(router_of(b).peers.empty());
  EXPECT_TRUE(member_of(mb).topics.empty());
  EXPECT_EQ(router_of(a).held.count("t"), 1u);
  EXPECT_EQ(dice::counter(dice::trust_event::auth_refused), refused + 1);
  EXPECT_EQ(logs.count("refused peer: node 1 sent no proof"), 1u);
}

TEST_F(RouterNet, ANodeWithASecretRefusesAPeerWithoutOne) {
  auto refused = dice::counter(dice::trust_event::auth_refused);
  auto a = spawn_router(0, 0);
  auto b = spawn_router(1, 1, with_secret(secret_1));
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  EXPECT_TRUE(router_of(a).peers.empty());
  EXPECT_TRUE(router_of(b).peers.empty());
  EXPECT_EQ(dice::counter(dice::trust_event::auth_refused), refused + 1);
}

TEST_F(RouterNet, AStrangerWithoutHandshakeIsIgnored) {
  auto rejected = dice::counter(dice::trust_event::stranger_dropped);
  auto a = spawn_router(0, 0, with_secret(secret_1));
  auto ma = spawn_member(0, a, 0, {"t"});
  listen(0, a, 8080);
  // A raw CAF connection to the published gate, no dice handshake.
  as_stranger(1, 0, "a", 8080,
              [=](caf::event_based_actor* self, caf::actor router) {
                dice::context_delta d;
                auto msg = caf::make_message(std::string{"t"}, d);
                self->send(router, dice::forward_atom::value, std::string{"t"},
                           std::uint32_t{9}, msg);
                self->send(router, dice::publish_atom::value, std::string{"t"},
                           std::uint32_t{9}, msg);
                self->send(router, dice::join_atom::value, std::uint32_t{9},
                           dice::role_set{}, caf::actor_cast<caf::actor>(self),
                           std::vector<std::string>{"t"});
                self->send(router, dice::finish{9, "evil", true});
                self->send(router, dice::done_atom::value, std::uint32_t{9});
              });
  EXPECT_TRUE(member_of(ma).topics.empty());
  EXPECT_FALSE(router_of(a).finished);
  EXPECT_EQ(router_of(a).members.size(), 1u);
  EXPECT_TRUE(router_of(a).peers.empty());
  EXPECT_EQ(dice::counter(dice::trust_event::stranger_dropped), rejected + 5);
}

TEST_F(RouterNet, UnknownTopicFromAPeerIsDroppedAndCounted) {
  auto unknown = dice::counter(dice::trust_event::unknown_topic);
  auto a = spawn_router(0, 0);
  auto b = spawn_router(1, 1);
  auto ma = spawn_member(0, a, 0, {"t"});
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(router_of(b).peers.size(), 1u);
  auto proxy = router_of(b).peers[0].handle;
  auto gate_b = gate_of(1, b);
  hosts[1]->sys.spawn([=](caf::event_based_actor*) {
    dice::context_delta d;
    d.sender = 1;
    for (int i = 0; i < 100; ++i) {
      auto topic = "junk" + std::to_string(i);
      caf::send_as(gate_b, proxy, dice::forward_atom::value, topic,
                   std::uint32_t{1}, caf::make_message(topic, d));
    }
  });
  exec_all();
  EXPECT_TRUE(member_of(ma).topics.empty());
  EXPECT_TRUE(router_of(a).held.empty());
  EXPECT_EQ(dice::counter(dice::trust_event::unknown_topic), unknown + 100);
}

// Oversize input from a live, authenticated peer: a chunk that claims a
// 1 TiB model is dropped before anything is allocated, counted, and the node
// keeps serving that peer's ordinary messages.
TEST_F(RouterNet, OversizeSnapshotFromAPeerIsDroppedAndTheNodeGoesOn) {
  auto a = spawn_router(0, 0);
  auto b = spawn_router(1, 1);
  auto ma = spawn_member(0, a, 0, {"model_exchanger", "t"});
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(router_of(b).peers.size(), 1u);
  auto proxy = router_of(b).peers[0].handle;
  auto gate_b = gate_of(1, b);
  hosts[1]->sys.spawn([=](caf::event_based_actor*) {
    dice::snapshot_chunk c;
    c.origin = 1;
    c.transfer = 7;
    c.topic = "model_exchanger";
    c.sender = 1;
    c.seq = 0;
    c.count = 2;
    c.total = std::uint64_t{1} << 40;
    caf::send_as(gate_b, proxy, dice::forward_atom::value, c);
    dice::context_delta d;
    d.sender = 1;
    caf::send_as(gate_b, proxy, dice::forward_atom::value, std::string{"t"},
                 std::uint32_t{1}, caf::make_message(std::string{"t"}, d));
  });
  exec_all();
  EXPECT_EQ(router_of(a).chunks.dropped(), 1u);
  EXPECT_EQ(router_of(a).peers.size(), 1u) << "the node keeps its peer";
  // The ordinary delta that followed still arrived.
  EXPECT_EQ(member_of(ma).topics, std::vector<std::string>{"t"});
}

// -- reconnects (issue 9, item 5) -------------------------------------------

// b notices a lost connection before a does (here b's router is told its peer
// is down while a still holds b, as after a pause that only b's heartbeat
// saw) and re-attaches through the same CAF connection. Before: a answered
// "already connected" as a failed handshake and b never retried.
TEST_F(RouterNet, ReattachBeforeThePeerNoticedTheLossConverges) {
  auto a = spawn_router(0, 0);
  auto b = spawn_router(1, 1);
  auto ma = spawn_member(0, a, 0, {"t"});
  listen(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(router_of(b).peers.size(), 1u);
  auto handle = router_of(b).peers[0].handle;
  hosts[1]->driver->send(
    caf::actor_cast<caf::actor>(b),
    caf::down_msg{handle.address(),
                  caf::make_error(caf::sec::connection_timeout)});
  exec_all();
  EXPECT_TRUE(router_of(b).peers.empty());
  EXPECT_EQ(router_of(a).peers.size(), 1u) << "a has not noticed anything";
  advance_time(100ms); // b's first retry
  ASSERT_EQ(router_of(b).peers.size(), 1u) << "b was refused and gave up";
  EXPECT_EQ(router_of(a).peers.size(), 1u);
  publish_delta(b, "t", 1);
  EXPECT_EQ(member_of(ma).topics.size(), 1u);
}

// Another process claims a node id that is still connected (a restarted
// collector whose old connection a has not seen die yet): it is told to
// retry, and gets in once the old connection is gone. Before: refused for
// good on the first attempt.
TEST_F(RouterNet,
       ANewIncarnationOfAConnectedNodeIsRetriedUntilTheOldOneIsGone) {
  router_config cfg;
  cfg.reconnect_min = 100ms;
  cfg.reconnect_max = 400ms;
  auto a = spawn_router(0, 0, cfg);
  auto ma = spawn_member(0, a, 0, {"t"});
  listen(0, a, 8080);
  auto old = spawn_router(1, 1, cfg);
  attach(1, old, 0, "a", 8080);
  ASSERT_EQ(router_of(a).peers.size(), 1u);
  auto fresh = spawn_router(2, 1, cfg);
  attach(2, fresh, 0, "a", 8080);
  EXPECT_TRUE(router_of(fresh).peers.empty());
  EXPECT_EQ(router_of(fresh).endpoints.size(), 1u);
  // The old incarnation dies; a sees it through its connection.
  caf::anon_send_exit(old, caf::exit_reason::kill);
  exec_all();
  EXPECT_TRUE(router_of(a).peers.empty());
  for (int i = 0; i < 5 && router_of(fresh).peers.empty(); ++i)
    advance_time(400ms);
  ASSERT_EQ(router_of(fresh).peers.size(), 1u) << "the new incarnation gave up";
  publish_delta(fresh, "t", 1);
  EXPECT_EQ(member_of(ma).topics.size(), 1u);
}

// -- handshake backlog (issue 9, item 6) ------------------------------------

dice::model_snapshot big_snapshot(std::size_t bytes, std::int64_t version) {
  dice::snapshot_builder bld;
  std::vector<std::uint8_t> w(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    w[i] = static_cast<std::uint8_t>(i * 31 + version);
  bld.add("w", dice::dtype::uint8, {static_cast<std::int64_t>(bytes)}, w.data(),
          w.size());
  return bld.build(0, 77, version, 0);
}

// A retained snapshot a new peer gets at once travels through the chunker
// like any other large snapshot. Before: packed into the hello (one BASP
// frame, unchunked, with a 4 GiB cliff).
TEST_F(RouterNet, HandshakeBacklogTravelsInChunks) {
  router_config cfg;
  cfg.retained_topics = {"model"};
  cfg.chunk_bytes = 1024;
  auto a = spawn_router(0, 0, cfg);
  listen(0, a, 8080);
  auto x = big_snapshot(10 * 1024 + 7, 3);
  local_send(a, dice::publish_atom::value, std::string{"model"},
             std::uint32_t{0}, caf::make_message(std::string{"model"}, x));
  auto b = spawn_router(1, 1, cfg);
  auto mb = spawn_member(1, b, 1, {"model"});
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(member_of(mb).snapshots.size(), 1u);
  auto& y = member_of(mb).snapshots[0];
  EXPECT_EQ(y.version, 3);
  ASSERT_EQ(y.data.size(), x.data.size());
  EXPECT_TRUE(
    std::equal(x.data.data(), x.data.data() + x.data.size(), y.data.data()));
  EXPECT_EQ(router_of(b).chunks.completed(), 1u)
    << "the backlog did not go through the chunker";
}

// A retained topic needs its last message only. Before: a topic nobody
// listened to kept up to 1024 (each a full model), and a new peer got all.
TEST_F(RouterNet, RetainedTopicKeepsTheLastMessageOnly) {
  router_config cfg;
  cfg.retained_topics = {"model"};
  auto a = spawn_router(0, 0, cfg);
  listen(0, a, 8080);
  for (int i = 1; i <= 5; ++i)
    local_send(a, dice::publish_atom::value, std::string{"model"},
               std::uint32_t{0},
               caf::make_message(std::string{"model"}, big_snapshot(64, i)));
  EXPECT_LE(router_of(a).held["model"].size(), 1u);
  auto b = spawn_router(1, 1);
  auto mb = spawn_member(1, b, 1, {"model"});
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(member_of(mb).snapshots.size(), 1u);
  EXPECT_EQ(member_of(mb).snapshots[0].version, 5);
}

} // namespace
