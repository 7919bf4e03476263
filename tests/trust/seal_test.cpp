// Issue 9, item 1 ("one gate, sealed") and item 3 (forged versions), as an
// attacker works: a third CAF node that knows only a node's address
// connects to its published gate with the middleman (no dice handshake, no
// secret) and sends what dice's own actors send, anonymously (caf::anon_send)
// or in its own name; it guesses actor ids (small sequential integers), sends
// exits, kills, errors and link requests. An authenticated peer that forges
// another node's data is covered too. Deterministic: three actor systems on
// CAF's test coordinator joined by the testing network backend.

#include "actors/gate.hpp"
#include "dice/actors/router.hpp"
#include "dice/core/errc.hpp"
#include "dice/messages/context_ack.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/messages/event.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/security/auth.hpp"
#include "dice/security/trust.hpp"
#include "dice/type_ids.hpp"

#include "caf/exit_reason.hpp"
#include "caf/system_messages.hpp"

#include "support/deterministic.hpp"
#include "support/planets.hpp"
#include "support/secret_file.hpp"
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::router_actor;
using dice::router_config;
using dice::trust_event;

/// What the attacker's own actor received (e.g. a stream it subscribed to).
struct loot {
  std::vector<std::string> topics;
  std::vector<dice::context_delta> deltas;
  caf::actor_addr replier;
  std::string nonce;
  /// The attacker's actors that stay alive (stopped when the test ends).
  std::vector<caf::actor> spies;
};

using dice::test::secret_1;

// Planet 0: the learner's router a (node 0) with member ma on "t" and "model",
// its gate published on port 8080. Planet 1: a genuine collector b (node 1)
// attached to a, member mb on "t". Planet 2: the attacker.
class Seal : public dice::test::planets {
 protected:
  void SetUp() override {
    start(router_config{});
  }

  void start(router_config cfg) {
    a = spawn_router(0, 0, cfg);
    ma = spawn_member(0, a, 0, {"t", "model"});
    publish(0, gate_of(0, a), 8080);
    b = spawn_router(1, 1, cfg);
    mb = spawn_member(1, b, 1, {"t"});
    attach(1, b, 0, "a", 8080);
    ASSERT_EQ(router_of(a).peers.size(), 1u);
    ASSERT_EQ(router_of(b).peers.size(), 1u);
  }

  /// Runs `fn` as the attacker (planet 2) against a's published gate.
  void attack(std::function<void(caf::event_based_actor*, caf::actor)> fn) {
    as_stranger(2, 0, "a", 8080, std::move(fn));
  }

  void TearDown() override {
    for (auto& x : got->spies)
      caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
    got->spies.clear();
    planets::TearDown();
  }

  std::uint64_t count(trust_event x) {
    return dice::counter(x);
  }

  router_actor a;
  router_actor b;
  caf::actor ma;
  caf::actor mb;
  std::shared_ptr<loot> got = std::make_shared<loot>();
};

caf::behavior thief(caf::stateful_actor<std::shared_ptr<loot>>* self,
                    std::shared_ptr<loot> got) {
  self->state = got;
  got->spies.push_back(caf::actor_cast<caf::actor>(self));
  return {
    [=](const std::string& topic, const dice::context_delta& d) {
      self->state->topics.push_back(topic);
      self->state->deltas.push_back(d);
    },
  };
}

dice::context_delta forged_delta(std::uint32_t sender, std::int64_t steps) {
  dice::context_delta d;
  d.sender = sender;
  d.incarnation = 1;
  d.seq = 1;
  d.env_step = steps;
  return d;
}

// -- anonymous local control ------------------------------------------------

// Before: the run finished ("cluster stopped in ~0.5 s" over TCP).
TEST_F(Seal, AnonymousFinishIsDroppedAndCounted) {
  auto before = count(trust_event::anonymous_dropped);
  attack([](caf::event_based_actor*, caf::actor gate) {
    caf::anon_send(gate, dice::finish{0, "evil", false});
  });
  EXPECT_FALSE(router_of(a).finished) << "an anonymous finish ended the run";
  EXPECT_TRUE(member_of(ma).finishes.empty());
  EXPECT_TRUE(member_of(mb).finishes.empty());
  EXPECT_EQ(count(trust_event::anonymous_dropped), before + 1);
}

// Before: the router dialled the host the stranger named, and kept redialling.
TEST_F(Seal, AnonymousAttachIsDropped) {
  auto before = count(trust_event::anonymous_dropped);
  attack([](caf::event_based_actor*, caf::actor gate) {
    caf::anon_send(gate, dice::attach_atom::value, std::string{"evil"},
                   std::uint16_t{6666});
  });
  EXPECT_TRUE(router_of(a).endpoints.empty())
    << "the learner now dials a host a stranger named";
  EXPECT_EQ(count(trust_event::anonymous_dropped), before + 1);
}

// Before: the stranger received every delta on "t" (1,091 deltas in 2 s over
// TCP) and with them the senders' incarnations.
TEST_F(Seal, AnonymousSubscribeGetsNothing) {
  auto before = count(trust_event::anonymous_dropped);
  auto got = this->got;
  attack([got](caf::event_based_actor* self, caf::actor gate) {
    auto spy = self->spawn(thief, got);
    caf::anon_send(gate, dice::subscribe_atom::value, std::string{"t"},
                   std::uint32_t{9}, spy);
  });
  publish_delta(1, b, "t", 1, 5);
  EXPECT_EQ(member_of(ma).deltas.size(), 1u);
  EXPECT_TRUE(got->deltas.empty()) << "a stranger receives the cluster's data";
  EXPECT_EQ(count(trust_event::anonymous_dropped), before + 1);
}

// Before: the learner's member got the forged delta (+1,000,000 env_step).
TEST_F(Seal, AnonymousPublishIsDropped) {
  auto before = count(trust_event::anonymous_dropped);
  attack([](caf::event_based_actor*, caf::actor gate) {
    caf::anon_send(
      gate, dice::publish_atom::value, std::string{"t"}, std::uint32_t{1},
      caf::make_message(std::string{"t"}, forged_delta(1, 1'000'000)));
  });
  EXPECT_TRUE(member_of(ma).deltas.empty()) << "a forged delta was delivered";
  EXPECT_EQ(count(trust_event::anonymous_dropped), before + 1);
}

TEST_F(Seal, AnonymousJoinAndDoneAreDropped) {
  auto before = count(trust_event::anonymous_dropped);
  auto got = this->got;
  attack([got](caf::event_based_actor* self, caf::actor gate) {
    auto spy = self->spawn(thief, got);
    caf::anon_send(gate, dice::join_atom::value, std::uint32_t{9},
                   dice::role_set{}, spy, std::vector<std::string>{"t"});
    caf::anon_send(gate, dice::done_atom::value, std::uint32_t{0}, spy);
  });
  publish_delta(1, b, "t", 1, 5);
  EXPECT_EQ(router_of(a).members.size(), 1u);
  EXPECT_TRUE(router_of(a).done.empty());
  EXPECT_TRUE(got->deltas.empty());
  EXPECT_EQ(count(trust_event::anonymous_dropped), before + 2);
}

// Every drop is counted, but a source is logged once: a flood of junk
// cannot flood the log.
TEST_F(Seal, AFloodOfAnonymousMessagesIsLoggedOnce) {
  dice::test::log_capture logs;
  auto before = count(trust_event::anonymous_dropped);
  attack([](caf::event_based_actor*, caf::actor gate) {
    for (int i = 0; i < 100; ++i)
      caf::anon_send(gate, dice::finish{9, "evil", false});
  });
  EXPECT_FALSE(router_of(a).finished);
  EXPECT_EQ(count(trust_event::anonymous_dropped), before + 100);
  EXPECT_EQ(logs.count("from an anonymous sender"), 1u);
}

// A stranger that names itself fares no better (this held before, too).
TEST_F(Seal, NamedStrangerGetsNothing) {
  auto before = count(trust_event::stranger_dropped);
  auto got = this->got;
  attack([got](caf::event_based_actor* self, caf::actor gate) {
    auto spy = self->spawn(thief, got);
    auto msg = caf::make_message(std::string{"t"}, forged_delta(1, 1000));
    self->send(gate, dice::forward_atom::value, std::string{"t"},
               std::uint32_t{1}, msg);
    self->send(gate, dice::publish_atom::value, std::string{"t"},
               std::uint32_t{1}, msg);
    self->send(gate, dice::subscribe_atom::value, std::string{"t"},
               std::uint32_t{9}, spy);
    self->send(gate, dice::finish{9, "evil", true});
    self->send(gate, dice::attach_atom::value, std::string{"evil"},
               std::uint16_t{6666});
  });
  publish_delta(1, b, "t", 1, 5);
  EXPECT_EQ(member_of(ma).deltas.size(), 1u);
  EXPECT_FALSE(router_of(a).finished);
  EXPECT_TRUE(router_of(a).endpoints.empty());
  EXPECT_TRUE(got->deltas.empty());
  EXPECT_EQ(count(trust_event::stranger_dropped), before + 5);
}

// -- ids that leave the node
// ----------------------------------------------------

// Before: the challenge was answered by the router, so its id (and with it a
// handle any CAF node can kill) reached the stranger.
TEST_F(Seal, HandshakeRepliesComeFromTheGate) {
  auto got = this->got;
  attack([got](caf::event_based_actor* self, caf::actor gate) {
    self->request(gate, 1s, dice::hello_atom::value, dice::random_nonce())
      .then([=](const std::string& nonce, const std::string&) {
        got->nonce = nonce;
        got->replier = caf::actor_cast<caf::actor_addr>(self->current_sender());
      });
  });
  EXPECT_EQ(got->replier.id(), gate_of(0, a).id())
    << "actor " << got->replier.id() << " answered, not the gate";
  EXPECT_NE(got->replier.id(), a.id());
}

// Nothing but the gate is reachable from another node: after a handshake and
// traffic in both directions, CAF's registry (which resolves the actor ids
// in incoming messages) holds no router and no member.
TEST_F(Seal, NoInternalActorIsReachable) {
  publish_delta(1, b, "t", 1, 5);
  publish_delta(0, a, "t", 0, 5);
  for (int i : {0, 1}) {
    auto& router = i == 0 ? a : b;
    auto& m = i == 0 ? ma : mb;
    auto& reg = hosts[i]->sys.registry();
    EXPECT_EQ(reg.get(router.id()), nullptr) << "router of planet " << i;
    EXPECT_EQ(reg.get(m.id()), nullptr) << "member of planet " << i;
  }
}

// Before: the id leaked (or was guessed) and `send_exit(router, kill)` stopped
// the router; the node ran on without it, silently.
TEST_F(Seal, GuessedRouterIdCannotKillTheRouter) {
  auto aid = a.id();
  attack([=](caf::event_based_actor* self, caf::actor) {
    auto target = guess(2, 0, aid);
    caf::anon_send(target, dice::finish{0, "evil", false});
    self->send_exit(target, caf::exit_reason::user_shutdown);
    caf::anon_send(target, caf::make_error(caf::sec::runtime_error));
    self->send_exit(target, caf::exit_reason::kill);
  });
  ASSERT_TRUE(alive(a)) << "a remote kill stopped the router";
  EXPECT_FALSE(router_of(a).finished);
  EXPECT_EQ(router_of(a).peers.size(), 1u);
}

// `link_to` a remote actor, then die with `kill`: CAF sends the linked
// actor an exit with that reason, which no handler can trap.
TEST_F(Seal, LinkInjectionCannotKillTheRouterOrTheGate) {
  auto aid = a.id();
  attack([=](caf::event_based_actor* self, caf::actor gate) {
    auto target = guess(2, 0, aid);
    self->spawn([=](caf::event_based_actor* k) {
      k->link_to(gate);
      k->link_to(target);
      k->send(k, dice::tick_atom::value);
      return caf::behavior{[=](dice::tick_atom) {
        k->quit(caf::exit_reason::kill);
      }};
    });
  });
  ASSERT_TRUE(alive(a)) << "a linked remote actor's death killed the router";
  EXPECT_TRUE(alive(gate_of(0, a)));
  EXPECT_EQ(router_of(a).peers.size(), 1u);
}

// An error message or a forged down message stops an actor with CAF's
// default handlers; the gate must take neither from a stranger.
TEST_F(Seal, ErrorsAndForgedDownMessagesDoNotStopTheGate) {
  attack([=](caf::event_based_actor* self, caf::actor gate) {
    caf::anon_send(gate, caf::make_error(caf::sec::runtime_error));
    self->send(gate, caf::make_error(caf::sec::runtime_error));
    self->send(gate,
               caf::down_msg{self->address(),
                             caf::make_error(caf::exit_reason::kill)});
    self->send_exit(gate, caf::exit_reason::kill);
  });
  auto gate = gate_of(0, a);
  ASSERT_TRUE(alive(gate)) << "a stranger stopped the published gate";
  // A new peer still gets in.
  auto c = spawn_router(2, 2);
  attach(2, c, 0, "a", 8080);
  EXPECT_EQ(router_of(a).peers.size(), 2u);
}

// -- item 3: a peer can only speak for itself
// ------------------------------------

dice::model_snapshot snapshot_named(std::uint32_t sender,
                                    std::uint64_t incarnation,
                                    std::int64_t version,
                                    std::size_t bytes = 64) {
  dice::snapshot_builder bld;
  std::vector<std::uint8_t> w(bytes, 7);
  bld.add("w", dice::dtype::uint8, {static_cast<std::int64_t>(bytes)}, w.data(),
          w.size());
  auto x = bld.build(sender, incarnation, version, 0);
  return x;
}

// An authenticated collector forwards a snapshot in the learner's name with
// version 2^62. Before: delivered, and collectors then dropped every genuine
// model as "not newer" (60 s stall per iteration).
TEST_F(Seal, PeerCannotForwardInAnotherNodesName) {
  auto before = count(trust_event::forged_origin);
  auto proxy = router_of(b).peers[0].handle;
  auto gate_b = gate_of(1, b);
  hosts[1]->sys.spawn([=](caf::event_based_actor*) {
    auto x = snapshot_named(0, 77, std::int64_t{1} << 62);
    // In the learner's name on the outside, ...
    caf::send_as(gate_b, proxy, dice::forward_atom::value, std::string{"model"},
                 std::uint32_t{0}, caf::make_message(std::string{"model"}, x));
    // ... or honest on the outside and forged inside.
    caf::send_as(gate_b, proxy, dice::forward_atom::value, std::string{"model"},
                 std::uint32_t{1}, caf::make_message(std::string{"model"}, x));
    // A delta on "t" labelled with another topic inside.
    caf::send_as(gate_b, proxy, dice::forward_atom::value, std::string{"t"},
                 std::uint32_t{1},
                 caf::make_message(std::string{"model"}, forged_delta(1, 1)));
  });
  exec_all();
  EXPECT_TRUE(member_of(ma).snapshots.empty())
    << "a peer's forged snapshot was delivered";
  EXPECT_TRUE(member_of(ma).deltas.empty());
  EXPECT_EQ(count(trust_event::forged_origin), before + 3);
  // Its honest traffic still flows.
  publish_delta(1, b, "t", 1, 5);
  EXPECT_EQ(member_of(ma).deltas.size(), 1u);
}

// A restarted collector republishes its predecessor's deltas from its spool
// under the old incarnation; a peer may do that only in its own name. Node 1
// forwarding node 3's deltas (of an older incarnation, as a spool would hold
// them) is refused outside and inside, and nothing reaches the learner's
// member.
TEST_F(Seal, PeerCannotRepublishAnotherNodesDeltas) {
  auto before = count(trust_event::forged_origin);
  auto proxy = router_of(b).peers[0].handle;
  auto gate_b = gate_of(1, b);
  hosts[1]->sys.spawn([=](caf::event_based_actor*) {
    auto d = forged_delta(3, 1000);
    d.incarnation = 0xA11CE; // an older incarnation of node 3
    d.seq = 7;
    d.base = 7;
    caf::send_as(gate_b, proxy, dice::forward_atom::value, std::string{"t"},
                 std::uint32_t{3}, caf::make_message(std::string{"t"}, d));
    caf::send_as(gate_b, proxy, dice::forward_atom::value, std::string{"t"},
                 std::uint32_t{1}, caf::make_message(std::string{"t"}, d));
  });
  exec_all();
  EXPECT_TRUE(member_of(ma).deltas.empty())
    << "a peer republished another node's delta";
  EXPECT_EQ(count(trust_event::forged_origin), before + 2);
  // Its own republished deltas (any incarnation of its own) still flow.
  publish_delta(1, b, "t", 1, 5);
  EXPECT_EQ(member_of(ma).deltas.size(), 1u);
}

// Item 7: a chunk's origin (and the snapshot's sender) must be the peer that
// forwarded it.
TEST_F(Seal, ChunkFromAnotherOriginIsDropped) {
  auto before = count(trust_event::forged_origin);
  auto proxy = router_of(b).peers[0].handle;
  auto gate_b = gate_of(1, b);
  dice::snapshot_chunker chunker{16};
  auto chunks = chunker.split(7, "model", 0, snapshot_named(0, 77, 5, 40));
  ASSERT_EQ(chunks.size(), 3u);
  hosts[1]->sys.spawn([=](caf::event_based_actor*) {
    for (auto& c : chunks)
      caf::send_as(gate_b, proxy, dice::forward_atom::value, c);
  });
  exec_all();
  EXPECT_TRUE(member_of(ma).snapshots.empty())
    << "a chunk from another origin was reassembled and delivered";
  // Each chunk is dropped (and counted) on its own.
  EXPECT_EQ(count(trust_event::forged_origin), before + 3);
}

// Acks are their own message (protocol v7) and only learners send them. A
// peer that is no learner (here: no roles) acks a collector's deltas in its
// own name: refused. Without the router's check the ack reached the
// collector, which then forgot deltas no learner had (data loss).
TEST_F(Seal, PeerThatIsNoLearnerCannotAck) {
  auto before = count(trust_event::message_rejected);
  auto proxy = router_of(b).peers[0].handle;
  auto gate_b = gate_of(1, b);
  hosts[1]->sys.spawn([=](caf::event_based_actor*) {
    dice::context_ack ack{1, 0, 7, 1000};
    caf::send_as(gate_b, proxy, dice::forward_atom::value, std::string{"t"},
                 std::uint32_t{1}, caf::make_message(std::string{"t"}, ack));
  });
  exec_all();
  EXPECT_TRUE(member_of(ma).acks.empty()) << "a collector's ack was delivered";
  EXPECT_EQ(count(trust_event::message_rejected), before + 1);
}

// A user's event names the node that emitted it; a peer may emit only in its
// own name, and an envelope holding anything but one value is refused.
TEST_F(Seal, PeerEventsAreTakenInTheirSendersNameOnly) {
  auto forged = count(trust_event::forged_origin);
  auto rejected = count(trust_event::message_rejected);
  auto proxy = router_of(b).peers[0].handle;
  auto gate_b = gate_of(1, b);
  hosts[1]->sys.spawn([=](caf::event_based_actor*) {
    auto send = [&](dice::event e) {
      caf::send_as(gate_b, proxy, dice::forward_atom::value, std::string{"t"},
                   std::uint32_t{1},
                   caf::make_message(std::string{"t"}, std::move(e)));
    };
    send(dice::event{1, caf::make_message(std::string{"honest"})});
    send(dice::event{3, caf::make_message(std::string{"forged"})});
    send(dice::event{1, caf::message{}});
  });
  exec_all();
  auto& events = member_of(ma).events;
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].sender, 1u);
  EXPECT_EQ(events[0].content.get_as<std::string>(0), "honest");
  EXPECT_EQ(count(trust_event::forged_origin), forged + 1);
  EXPECT_EQ(count(trust_event::message_rejected), rejected + 1);
}

// Node 1 is a learner: its acks in its own name flow, one naming another
// node does not.
class SealLearnerPeer : public Seal {
 protected:
  void SetUp() override {
    router_config cfg;
    cfg.roles = {dice::role::learner};
    start(cfg);
  }
};

TEST_F(SealLearnerPeer, ALearnersAckFlowsAndAForgedOneDoesNot) {
  auto before = count(trust_event::forged_origin);
  auto proxy = router_of(b).peers[0].handle;
  auto gate_b = gate_of(1, b);
  hosts[1]->sys.spawn([=](caf::event_based_actor*) {
    caf::send_as(gate_b, proxy, dice::forward_atom::value, std::string{"t"},
                 std::uint32_t{1},
                 caf::make_message(std::string{"t"},
                                   dice::context_ack{1, 0, 7, 3}));
    caf::send_as(gate_b, proxy, dice::forward_atom::value, std::string{"t"},
                 std::uint32_t{1},
                 caf::make_message(std::string{"t"},
                                   dice::context_ack{3, 0, 7, 1000}));
  });
  exec_all();
  auto& acks = member_of(ma).acks;
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].upto, 3u);
  EXPECT_EQ(count(trust_event::forged_origin), before + 1);
}

} // namespace
