// Deterministic multi-node tests: two or three actor systems on CAF's test
// coordinator, connected through the testing network backend
// (io::network::test_multiplexer). No sockets, no real time. (CAF's
// io_dsl.hpp needs CAF's own test engine; this drives the same loop.)

#include "dice/actors/bus.hpp"
#include "dice/errc.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/trust.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/io/middleman.hpp"
#include "caf/io/network/test_multiplexer.hpp"
#include "caf/scheduler/test_coordinator.hpp"
#include "caf/send.hpp"
#include "caf/stateful_actor.hpp"

#include "support/deterministic.hpp"
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::bus_actor;
using dice::bus_config;
using dice::bus_state;

struct planet_config : caf::actor_system_config {
  planet_config() {
    load<caf::io::middleman>();
    dice::add_message_types(*this);
    set("scheduler.policy", caf::atom("testing"));
    set("logger.inline-output", true);
    set("middleman.network-backend", caf::atom("testing"));
    set("middleman.manual-multiplexing", true);
    set("middleman.attach-utility-actors", true);
    set("middleman.heartbeat-interval", caf::timespan{0});
    set("middleman.workers", size_t{0});
  }
};

/// One simulated host: an actor system with the testing backend.
struct planet {
  planet_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched = dynamic_cast<
    caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::io::network::test_multiplexer& mpx = dynamic_cast<
    caf::io::network::test_multiplexer&>(sys.middleman().backend());
};

/// What a member (a stand-in for a role actor) received.
struct member_state {
  std::vector<std::string> topics;
  std::vector<dice::finish> finishes;
  std::vector<dice::peer_event> peer_events;
  int done = 0;
};

using member_actor = caf::stateful_actor<member_state>;

caf::behavior member(member_actor* self) {
  return {
    [=](const std::string& topic, const dice::context_delta&) {
      self->state.topics.push_back(topic);
    },
    [=](const dice::finish& x) {
      self->state.finishes.push_back(x);
    },
    [=](dice::done_atom) {
      ++self->state.done;
    },
    [=](const dice::peer_event& x) {
      self->state.peer_events.push_back(x);
    },
  };
}

class BusNet : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i)
      planets.push_back(std::make_unique<planet>());
  }

  void TearDown() override {
    for (auto& [p, x] : actors)
      caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
    exec_all();
  }

  /// Runs every node until no message, I/O event or timeout moves.
  void exec_all() {
    auto advance = [](std::unique_ptr<planet>& p) {
      return p->sched.try_run_once() || p->mpx.try_read_data()
        || p->mpx.try_exec_runnable() || p->mpx.try_accept_connection();
    };
    while (std::any_of(planets.begin(), planets.end(), advance))
      ; // repeat
  }

  /// Advances every fake clock by `d` and runs until nothing moves.
  void advance_time(caf::timespan d) {
    for (auto& p : planets)
      p->sched.advance_time(d);
    exec_all();
  }

  bus_actor spawn_bus(int i, std::uint32_t node, bus_config cfg = {}) {
    cfg.node = node;
    auto b = planets[i]->sys.spawn(dice::bus, cfg);
    actors.emplace_back(i, caf::actor_cast<caf::actor>(b));
    exec_all();
    return b;
  }

  caf::actor spawn_member(int i, const bus_actor& b, std::uint32_t node,
                          std::vector<std::string> topics) {
    auto m = planets[i]->sys.spawn(member);
    actors.emplace_back(i, m);
    caf::anon_send(b, dice::join_atom::value, node, dice::role_set{}, m,
                   std::move(topics));
    exec_all();
    return m;
  }

  /// Publishes `b` on host `name`:`port` of planet `i`.
  void publish(int i, const bus_actor& b, std::uint16_t port) {
    auto& p = *planets[i];
    p.mpx.provide_acceptor(port, accept_hdl(i, port));
    p.sched.inline_next_enqueue();
    auto res = p.sys.middleman().publish(b, port);
    ASSERT_TRUE(res) << caf::to_string(res.error());
  }

  /// Prepares a connection from planet `client` to `server`:`port`, then
  /// lets the client's bus attach to it.
  void attach(int client, const bus_actor& b, int server,
              const std::string& host, std::uint16_t port) {
    auto srv = caf::io::connection_handle::from_int(++hdl_);
    auto cli = caf::io::connection_handle::from_int(++hdl_);
    planets[server]->mpx.prepare_connection(
      accept_hdl(server, port), srv, planets[client]->mpx, host, port, cli);
    caf::anon_send(b, dice::attach_atom::value, host, port);
    exec_all();
  }

  caf::io::accept_handle accept_hdl(int server, std::uint16_t port) {
    return caf::io::accept_handle::from_int(server * 100000 + port);
  }

  template <class State, class Handle>
  State& state_of(const Handle& h) {
    auto ptr = caf::actor_cast<caf::abstract_actor*>(h);
    return dynamic_cast<caf::stateful_actor<State, typename Handle::base>&>(
             *ptr)
      .state;
  }

  bus_state& bus_of(const bus_actor& b) {
    return state_of<bus_state>(b);
  }

  member_state& member_of(const caf::actor& m) {
    auto ptr = caf::actor_cast<caf::abstract_actor*>(m);
    return dynamic_cast<member_actor&>(*ptr).state;
  }

  void publish_delta(const bus_actor& b, const std::string& topic,
                     std::uint32_t sender) {
    dice::context_delta d;
    d.sender = sender;
    caf::anon_send(b, dice::publish_atom::value, topic, sender,
                   caf::make_message(topic, d));
    exec_all();
  }

  std::vector<std::unique_ptr<planet>> planets;
  std::vector<std::pair<int, caf::actor>> actors;
  std::int64_t hdl_ = 0;
};

TEST_F(BusNet, HandshakeAndTopicForwarding) {
  auto a = spawn_bus(0, 0);
  auto b = spawn_bus(1, 1);
  auto ma = spawn_member(0, a, 0, {"t1"});
  auto mb = spawn_member(1, b, 1, {"t2"});
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(bus_of(a).peers.size(), 1u);
  ASSERT_EQ(bus_of(b).peers.size(), 1u);
  EXPECT_EQ(bus_of(a).peers[0].node, 1u);
  EXPECT_EQ(bus_of(b).peers[0].node, 0u);
  EXPECT_EQ(bus_of(b).peers[0].topics, std::vector<std::string>{"t1"});
  // b -> a on a's topic; a -> b on b's topic; nobody gets other topics.
  publish_delta(b, "t1", 1);
  publish_delta(a, "t2", 0);
  publish_delta(a, "t1", 0); // a's own topic: never echoed to its node
  EXPECT_EQ(member_of(ma).topics, std::vector<std::string>{"t1"});
  EXPECT_EQ(member_of(mb).topics, std::vector<std::string>{"t2"});
}

TEST_F(BusNet, OneDeliveryPerSubscription) {
  auto a = spawn_bus(0, 0);
  auto b = spawn_bus(1, 1);
  auto m1 = spawn_member(0, a, 0, {"t"});
  auto m2 = spawn_member(0, a, 0, {"t"});
  // Subscribing again changes nothing.
  caf::anon_send(a, dice::subscribe_atom::value, std::string{"t"},
                 std::uint32_t{0}, m1);
  exec_all();
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  publish_delta(b, "t", 1);
  publish_delta(b, "t", 1);
  EXPECT_EQ(member_of(m1).topics.size(), 2u);
  EXPECT_EQ(member_of(m2).topics.size(), 2u);
}

TEST_F(BusNet, DataSentBeforeTheHandshakeIsHeld) {
  auto a = spawn_bus(0, 0);
  auto b = spawn_bus(1, 1);
  auto ma = spawn_member(0, a, 0, {"t"});
  // b publishes before it knows any peer: held, not dropped.
  publish_delta(b, "t", 1);
  EXPECT_EQ(bus_of(b).held.count("t"), 1u);
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  EXPECT_EQ(member_of(ma).topics, std::vector<std::string>{"t"});
  EXPECT_EQ(bus_of(b).held.count("t"), 0u);
}

TEST_F(BusNet, LateSubscriptionAndRetainedTopics) {
  bus_config cfg;
  cfg.retained_topics = {"model"};
  auto a = spawn_bus(0, 0, cfg);
  auto b = spawn_bus(1, 1);
  auto c = spawn_bus(2, 2);
  spawn_member(1, b, 1, {"model"}); // the first receiver
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  publish_delta(a, "model", 0);
  publish_delta(a, "model", 0);
  // A node that joins later gets the last retained message at once.
  auto mc = spawn_member(2, c, 2, {"model"});
  attach(2, c, 0, "a", 8080);
  EXPECT_EQ(member_of(mc).topics.size(), 1u);
}

TEST_F(BusNet, ProtocolMismatchIsRefused) {
  dice::test::log_capture logs;
  auto a = spawn_bus(0, 0);
  auto err = std::make_shared<caf::error>();
  planets[0]->sys.spawn([=](caf::event_based_actor* self) {
    dice::peer_hello h;
    h.version = 99;
    h.node = 7;
    self->request(a, 1s, dice::hello_atom::value, h)
      .then([](const dice::peer_hello&) {},
            [=](caf::error& e) {
              *err = e;
            });
  });
  exec_all();
  EXPECT_TRUE(dice::is(*err, dice::errc::handshake_failed))
    << dice::render(*err);
  EXPECT_TRUE(bus_of(a).peers.empty());
  EXPECT_EQ(logs.count("protocol v99"), 1u);
}

TEST_F(BusNet, FinishAndDrainAcrossThreeNodes) {
  auto a = spawn_bus(0, 0);
  auto b = spawn_bus(1, 1);
  auto c = spawn_bus(2, 2);
  auto ma = spawn_member(0, a, 0, {"t"});
  auto mb = spawn_member(1, b, 1, {});
  auto mc = spawn_member(2, c, 2, {});
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  attach(2, c, 0, "a", 8080);
  // Star: c finishes; a relays to b.
  caf::anon_send(c, dice::finish{2, "max_step", false});
  exec_all();
  EXPECT_EQ(member_of(ma).finishes.size(), 1u);
  EXPECT_EQ(member_of(mb).finishes.size(), 1u);
  EXPECT_EQ(member_of(mc).finishes.size(), 0u); // the sender's own node
  // b publishes its last data, then is done; c is done. a's member must
  // not be released before b's data arrived.
  publish_delta(b, "t", 1);
  caf::anon_send(b, dice::done_atom::value, std::uint32_t{1}, mb);
  caf::anon_send(c, dice::done_atom::value, std::uint32_t{2}, mc);
  exec_all();
  EXPECT_EQ(member_of(mb).done, 0); // a's member is not done yet
  EXPECT_EQ(member_of(mc).done, 0);
  caf::anon_send(a, dice::done_atom::value, std::uint32_t{0}, ma);
  exec_all();
  EXPECT_EQ(member_of(ma).topics.size(), 1u);
  EXPECT_EQ(member_of(ma).done, 1);
  EXPECT_EQ(member_of(mb).done, 1);
  EXPECT_EQ(member_of(mc).done, 1);
  // A node that joins the finished cluster is told at once.
  auto d = spawn_bus(2, 3);
  auto md = spawn_member(2, d, 3, {});
  attach(2, d, 0, "a", 8080);
  ASSERT_EQ(member_of(md).finishes.size(), 1u);
  EXPECT_EQ(member_of(md).finishes[0].sender, 2u);
}

TEST_F(BusNet, LostPeerIsDroppedAndALonelyNodeStops) {
  dice::test::log_capture logs;
  bus_config cfg;
  cfg.expect_peers = true;
  cfg.peer_loss_timeout = 5s;
  auto a = spawn_bus(0, 0, cfg);
  auto b = spawn_bus(1, 1);
  auto ma = spawn_member(0, a, 0, {"t"});
  spawn_member(1, b, 1, {"t"});
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(bus_of(a).peers.size(), 1u);
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
  exec_all();
  EXPECT_TRUE(bus_of(a).peers.empty());
  EXPECT_EQ(logs.count("lost peer node 1"), 1u);
  // Without peers for peer_loss_timeout, the node stops with an error.
  advance_time(4s);
  EXPECT_TRUE(member_of(ma).finishes.empty());
  advance_time(1s);
  ASSERT_EQ(member_of(ma).finishes.size(), 1u);
  EXPECT_TRUE(member_of(ma).finishes[0].failed);
}

// Members hear from their bus (as the sender) when a peer finished its
// handshake and when it is lost: a collector resends at once on reconnect.
TEST_F(BusNet, MembersHearWhenAPeerConnectsAndWhenItIsLost) {
  bus_config ca;
  ca.roles = {dice::role::learner};
  bus_config cb;
  cb.roles = {dice::role::collector};
  auto a = spawn_bus(0, 0, ca);
  auto b = spawn_bus(1, 1, cb);
  auto ma = spawn_member(0, a, 0, {"t"});
  auto mb = spawn_member(1, b, 1, {"t"});
  publish(0, a, 8080);
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

TEST_F(BusNet, ExitFromARemoteActorIsIgnored) {
  auto a = spawn_bus(0, 0);
  auto b = spawn_bus(1, 1);
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(bus_of(b).peers.size(), 1u);
  auto proxy = bus_of(b).peers[0].handle;
  // A remote actor (b's bus) sends an exit to a's bus through its proxy.
  planets[1]->sys.spawn([=](caf::event_based_actor* self) {
    // (exit_reason::kill cannot be trapped by any CAF actor.)
    self->send_exit(proxy, caf::exit_reason::user_shutdown);
  });
  auto ignored = dice::counter(dice::trust_event::remote_exit_ignored);
  exec_all();
  EXPECT_EQ(bus_of(a).peers.size(), 1u);
  EXPECT_EQ(bus_of(b).peers.size(), 1u);
  EXPECT_EQ(dice::counter(dice::trust_event::remote_exit_ignored), ignored + 1);
}

// -- cluster secret and strangers (issue 6) -----------------------------------

bus_config with_secret(std::string secret) {
  bus_config cfg;
  cfg.secret = std::move(secret);
  return cfg;
}

const std::string secret_1 = "0123456789abcdef0123456789abcdef";
const std::string secret_2 = "fedcba9876543210fedcba9876543210";

TEST_F(BusNet, SameSecretConnectsAndForwards) {
  auto a = spawn_bus(0, 0, with_secret(secret_1));
  auto b = spawn_bus(1, 1, with_secret(secret_1));
  auto ma = spawn_member(0, a, 0, {"t"});
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(bus_of(a).peers.size(), 1u);
  ASSERT_EQ(bus_of(b).peers.size(), 1u);
  publish_delta(b, "t", 1);
  EXPECT_EQ(member_of(ma).topics.size(), 1u);
}

TEST_F(BusNet, WrongSecretIsRefusedAndGetsNothing) {
  dice::test::log_capture logs;
  auto refused = dice::counter(dice::trust_event::auth_refused);
  auto a = spawn_bus(0, 0, with_secret(secret_1));
  auto b = spawn_bus(1, 1, with_secret(secret_2));
  publish_delta(a, "t", 0); // held until someone subscribes to "t"
  auto mb = spawn_member(1, b, 1, {"t"});
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  EXPECT_TRUE(bus_of(a).peers.empty());
  EXPECT_TRUE(bus_of(b).peers.empty());
  EXPECT_TRUE(member_of(mb).topics.empty());
  EXPECT_EQ(bus_of(a).held.count("t"), 1u);
  EXPECT_EQ(dice::counter(dice::trust_event::auth_refused), refused + 1);
  EXPECT_EQ(logs.count("does not know the cluster secret"), 1u);
}

TEST_F(BusNet, NoSecretIsRefusedAndGetsNothing) {
  dice::test::log_capture logs;
  auto refused = dice::counter(dice::trust_event::auth_refused);
  auto a = spawn_bus(0, 0, with_secret(secret_1));
  auto b = spawn_bus(1, 1);
  publish_delta(a, "t", 0);
  auto mb = spawn_member(1, b, 1, {"t"});
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  EXPECT_TRUE(bus_of(a).peers.empty());
  EXPECT_TRUE(bus_of(b).peers.empty());
  EXPECT_TRUE(member_of(mb).topics.empty());
  EXPECT_EQ(bus_of(a).held.count("t"), 1u);
  EXPECT_EQ(dice::counter(dice::trust_event::auth_refused), refused + 1);
  EXPECT_EQ(logs.count("refused peer: node 1 sent no proof"), 1u);
}

TEST_F(BusNet, ANodeWithASecretRefusesAPeerWithoutOne) {
  auto refused = dice::counter(dice::trust_event::auth_refused);
  auto a = spawn_bus(0, 0);
  auto b = spawn_bus(1, 1, with_secret(secret_1));
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  EXPECT_TRUE(bus_of(a).peers.empty());
  EXPECT_TRUE(bus_of(b).peers.empty());
  EXPECT_EQ(dice::counter(dice::trust_event::auth_refused), refused + 1);
}

TEST_F(BusNet, AStrangerWithoutHandshakeIsIgnored) {
  auto rejected = dice::counter(dice::trust_event::message_rejected);
  auto a = spawn_bus(0, 0, with_secret(secret_1));
  auto ma = spawn_member(0, a, 0, {"t"});
  publish(0, a, 8080);
  // A raw CAF connection to the published bus, no dice handshake.
  auto srv = caf::io::connection_handle::from_int(++hdl_);
  auto cli = caf::io::connection_handle::from_int(++hdl_);
  planets[0]->mpx.prepare_connection(accept_hdl(0, 8080), srv, planets[1]->mpx,
                                     "a", 8080, cli);
  planets[1]->sys.spawn([=](caf::event_based_actor* self) {
    auto mm = self->system().middleman().actor_handle();
    self
      ->request(mm, 1s, caf::connect_atom::value, std::string{"a"},
                std::uint16_t{8080})
      .then([=](const caf::node_id&, caf::strong_actor_ptr& ptr,
                const std::set<std::string>&) {
        auto bus = caf::actor_cast<caf::actor>(ptr);
        dice::context_delta d;
        auto msg = caf::make_message(std::string{"t"}, d);
        self->send(bus, dice::forward_atom::value, std::string{"t"},
                   std::uint32_t{9}, msg);
        self->send(bus, dice::publish_atom::value, std::string{"t"},
                   std::uint32_t{9}, msg);
        self->send(bus, dice::join_atom::value, std::uint32_t{9},
                   dice::role_set{}, caf::actor_cast<caf::actor>(self),
                   std::vector<std::string>{"t"});
        self->send(bus, dice::finish{9, "evil", true});
        self->send(bus, dice::done_atom::value, std::uint32_t{9});
      });
  });
  exec_all();
  EXPECT_TRUE(member_of(ma).topics.empty());
  EXPECT_FALSE(bus_of(a).finished);
  EXPECT_EQ(bus_of(a).members.size(), 1u);
  EXPECT_TRUE(bus_of(a).peers.empty());
  EXPECT_EQ(dice::counter(dice::trust_event::message_rejected), rejected + 5);
}

TEST_F(BusNet, UnknownTopicFromAPeerIsDroppedAndCounted) {
  auto unknown = dice::counter(dice::trust_event::unknown_topic);
  auto a = spawn_bus(0, 0);
  auto b = spawn_bus(1, 1);
  auto ma = spawn_member(0, a, 0, {"t"});
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(bus_of(b).peers.size(), 1u);
  auto proxy = bus_of(b).peers[0].handle;
  planets[1]->sys.spawn([=](caf::event_based_actor* self) {
    dice::context_delta d;
    for (int i = 0; i < 100; ++i) {
      auto topic = "junk" + std::to_string(i);
      self->send(proxy, dice::forward_atom::value, topic, std::uint32_t{1},
                 caf::make_message(topic, d));
    }
  });
  exec_all();
  EXPECT_TRUE(member_of(ma).topics.empty());
  EXPECT_TRUE(bus_of(a).held.empty());
  EXPECT_EQ(dice::counter(dice::trust_event::unknown_topic), unknown + 100);
}

// Oversize input from a live, authenticated peer: a chunk that claims a
// 1 TiB model is dropped before anything is allocated, counted, and the node
// keeps serving that peer's ordinary messages.
TEST_F(BusNet, OversizeSnapshotFromAPeerIsDroppedAndTheNodeGoesOn) {
  auto a = spawn_bus(0, 0);
  auto b = spawn_bus(1, 1);
  auto ma = spawn_member(0, a, 0, {"model_exchanger", "t"});
  publish(0, a, 8080);
  attach(1, b, 0, "a", 8080);
  ASSERT_EQ(bus_of(b).peers.size(), 1u);
  auto proxy = bus_of(b).peers[0].handle;
  planets[1]->sys.spawn([=](caf::event_based_actor* self) {
    dice::snapshot_chunk c;
    c.origin = 1;
    c.transfer = 7;
    c.topic = "model_exchanger";
    c.sender = 1;
    c.seq = 0;
    c.count = 2;
    c.total = std::uint64_t{1} << 40;
    self->send(proxy, dice::forward_atom::value, c);
    dice::context_delta d;
    self->send(proxy, dice::forward_atom::value, std::string{"t"},
               std::uint32_t{1}, caf::make_message(std::string{"t"}, d));
  });
  exec_all();
  EXPECT_EQ(bus_of(a).chunks.dropped(), 1u);
  EXPECT_EQ(bus_of(a).peers.size(), 1u) << "the node keeps its peer";
  // The ordinary delta that followed still arrived.
  EXPECT_EQ(member_of(ma).topics, std::vector<std::string>{"t"});
}

} // namespace
