// Coalescing (router protocol v9, actors/router_coalesce.cpp), on CAF's test
// coordinator with the testing network backend: forwards that queue for a
// peer while its router is busy go out as one forward_batch, in order, behind
// nothing and ahead of nothing else sent to that peer; an idle link sends at
// once; and a batch gives an attacker nothing a single forward does not.

#include "dice/actors/router.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/detail/forward_batch.hpp"
#include "dice/security/trust.hpp"
#include "dice/type_ids.hpp"

#include "support/planets.hpp"
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using dice::router_actor;
using dice::router_config;
using dice::trust_event;

dice::context_delta delta_of(std::uint32_t sender, std::int64_t steps) {
  dice::context_delta d;
  d.sender = sender;
  d.env_step = steps;
  return d;
}

// Planet 0: router a (node 0) with member ma on "t"; planet 1: router b
// (node 1) attached to a, with member mb; planet 2: an attacker.
class Coalesce : public dice::test::planets {
 protected:
  void start(router_config cfg = {}) {
    a = spawn_router(0, 0, cfg);
    ma = spawn_member(0, a, 0, {"t"});
    publish(0, gate_of(0, a), 8080);
    b = spawn_router(1, 1, cfg);
    mb = spawn_member(1, b, 1, {});
    attach(1, b, 0, "a", 8080);
    ASSERT_EQ(router_of(b).peers.size(), 1u);
  }

  // Node 1's member publishes `n` deltas (env_step first, first + 1, ...)
  // before b runs at all: a burst.
  void burst(int n, std::int64_t first = 1) {
    for (int i = 0; i < n; ++i)
      hosts[1]->driver->send(
        b, dice::publish_atom::value, std::string{"t"}, std::uint32_t{1},
        caf::make_message(std::string{"t"}, delta_of(1, first + i)));
  }

  std::vector<std::int64_t> steps_at_a() {
    std::vector<std::int64_t> result;
    for (auto& d : member_of(ma).deltas)
      result.push_back(d.env_step.value_or(-1));
    return result;
  }

  router_actor a;
  router_actor b;
  caf::actor ma;
  caf::actor mb;
};

std::vector<std::int64_t> one_to(std::int64_t n) {
  std::vector<std::int64_t> xs;
  for (std::int64_t i = 1; i <= n; ++i)
    xs.push_back(i);
  return xs;
}

// Ten deltas published in a burst: the first goes at once (the link was
// idle), the nine that queued behind it go as one batch at b's flush; a
// receives all ten, in order. A lone delta afterwards goes on its own again.
TEST_F(Coalesce, ABurstGoesAsOneBatchInOrder) {
  start();
  auto before = dice::router_stats();
  burst(10);
  exec_all();
  EXPECT_EQ(steps_at_a(), one_to(10));
  auto after = dice::router_stats();
  EXPECT_EQ(after.batches_sent - before.batches_sent, 1u);
  EXPECT_EQ(after.forwards_batched - before.forwards_batched, 9u);
  EXPECT_EQ(after.batches_received - before.batches_received, 1u);
  publish_delta(1, b, "t", 1, 11);
  EXPECT_EQ(steps_at_a(), one_to(11));
  EXPECT_EQ(dice::router_stats().batches_sent, after.batches_sent)
    << "a lone forward on an idle link waited for a batch";
}

// More than a batch holds: sent in batches of at most max_forward_batch,
// nothing lost or reordered.
TEST_F(Coalesce, ALongBurstIsSplitIntoBoundedBatches) {
  start();
  auto before = dice::router_stats();
  auto n = static_cast<int>(2 * dice::max_forward_batch + 7);
  burst(n);
  exec_all();
  EXPECT_EQ(steps_at_a(), one_to(n));
  auto after = dice::router_stats();
  EXPECT_EQ(after.batches_sent - before.batches_sent, 3u);
  EXPECT_EQ(after.forwards_batched - before.forwards_batched,
            static_cast<std::uint64_t>(n - 1));
}

// Five deltas, then b's member finishes the run, all before b runs: the
// finish goes to a directly (not as a forward), so it must not overtake the
// four deltas still queued. Without the flush in to_peer, a saw the finish
// after one delta.
TEST_F(Coalesce, NothingOvertakesAQueuedForward) {
  start();
  burst(5);
  hosts[1]->driver->send(b, dice::finish{1, "max_step", false});
  exec_all();
  ASSERT_EQ(member_of(ma).finishes.size(), 1u);
  EXPECT_EQ(member_of(ma).deltas_at_finish, std::vector<std::size_t>{5});
  EXPECT_EQ(steps_at_a(), one_to(5));
}

// --dice.coalesce=false: one BASP message per forward, the same deliveries.
TEST_F(Coalesce, OffSendsEveryForwardAlone) {
  router_config cfg;
  cfg.coalesce = false;
  start(cfg);
  auto before = dice::router_stats();
  burst(10);
  exec_all();
  EXPECT_EQ(steps_at_a(), one_to(10));
  EXPECT_EQ(dice::router_stats().batches_sent, before.batches_sent);
}

// A peer's batch is checked forward by forward: one naming another node is
// dropped as forged, its honest neighbours are delivered. A batch longer
// than max_forward_batch is refused whole.
TEST_F(Coalesce, ABatchIsCheckedForwardByForward) {
  start();
  auto forged = dice::counter(trust_event::forged_origin);
  auto rejected = dice::counter(trust_event::message_rejected);
  auto proxy = router_of(b).peers[0].handle;
  auto gate_b = gate_of(1, b);
  hosts[1]->sys.spawn([=](caf::event_based_actor*) {
    dice::forward_batch x;
    auto put = [&](std::uint32_t outside, std::uint32_t inside,
                   std::int64_t steps) {
      x.items.push_back(dice::forwarded{
        "t", outside,
        caf::make_message(std::string{"t"}, delta_of(inside, steps))});
    };
    put(1, 1, 1);
    put(0, 0, 1000); // in the learner's name
    put(1, 0, 2000); // honest outside, forged inside
    put(1, 1, 2);
    caf::send_as(gate_b, proxy, dice::forward_atom::value, x);
    dice::forward_batch big;
    for (std::size_t i = 0; i <= dice::max_forward_batch; ++i)
      big.items.push_back(dice::forwarded{
        "t", 1, caf::make_message(std::string{"t"}, delta_of(1, 9))});
    caf::send_as(gate_b, proxy, dice::forward_atom::value, big);
  });
  exec_all();
  EXPECT_EQ(steps_at_a(), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(dice::counter(trust_event::forged_origin), forged + 2);
  EXPECT_EQ(dice::counter(trust_event::message_rejected), rejected + 1);
}

// A stranger (no handshake) sends a batch to a's gate: nothing is delivered.
// A flush from anyone but the router itself is dropped and counted.
TEST_F(Coalesce, StrangersBatchesAndFlushesAreDropped) {
  start();
  auto strangers = dice::counter(trust_event::stranger_dropped);
  auto anonymous = dice::counter(trust_event::anonymous_dropped);
  as_stranger(2, 0, "a", 8080,
              [](caf::event_based_actor* self, caf::actor gate) {
                dice::forward_batch x;
                x.items.push_back(dice::forwarded{
                  "t", 2, caf::make_message(std::string{"t"}, delta_of(2, 7))});
                self->send(gate, dice::forward_atom::value, x);
                caf::anon_send(gate, dice::forward_atom::value, x);
              });
  exec_all();
  EXPECT_TRUE(member_of(ma).deltas.empty()) << "a stranger's batch arrived";
  EXPECT_GE(dice::counter(trust_event::stranger_dropped)
              + dice::counter(trust_event::anonymous_dropped),
            strangers + anonymous + 2);
  auto before = dice::counter(trust_event::anonymous_dropped);
  caf::anon_send(a, dice::flush_atom::value);
  exec_all();
  EXPECT_EQ(dice::counter(trust_event::anonymous_dropped), before + 1);
  // The link still works.
  publish_delta(1, b, "t", 1, 3);
  EXPECT_EQ(steps_at_a(), std::vector<std::int64_t>{3});
}

} // namespace
