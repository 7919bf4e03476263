// A stopping collector waits, up to its drain timeout (10 s), for a
// learner's ack of its last deltas. Once every learner it was connected to is
// lost none can come: it stops at once, and says what it gave up (issue 24,
// item 5: under dice-launch the wait raced the launcher's own 10 s stop
// timeout and the node was killed, exit 137). On the test coordinator: the
// clock never moves unless a test advances it.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_ack.hpp"
#include "dice/messages/finish.hpp"
#include "dice/messages/peer_event.hpp"

#include "support/exchange_fixture.hpp"

#include <chrono>

using namespace std::chrono_literals;
using namespace dice;

namespace {

class LearnerGone : public dice::test::exchange_fixture {
 protected:
  // Collector node 2 (incarnation 1002) with a window of 2 and no resend
  // timer: it sends deltas 1 and 2, waits, and once the test acks 1 sends 3
  // and ends the run (3 iterations) with 2 and 3 unacked.
  role_actor collector_waiting_for_acks() {
    router = spawn_router();
    stats = std::make_shared<context_exchange_stats>();
    context_exchanger_options opts;
    opts.max_in_flight = 2;
    opts.resend_timeout = 1h;
    opts.stats = stats;
    auto c = spawn_role(router, 2, {role::collector},
                        collector_pipe(2, 3, opts), 3);
    start({c});
    return c;
  }

  // What the node's router says when a peer connects or is lost (the role
  // actor takes peer events from its own router only).
  void peer(const role_actor& c, std::uint32_t node, bool up) {
    caf::send_as(caf::actor_cast<caf::actor>(router), c,
                 peer_event{node, {role::learner}, up});
    run();
  }

  void ack(std::uint32_t learner, std::uint64_t upto) {
    publish(router, context_ack_topic(2), learner,
            context_ack{learner, 2, 1002, upto});
  }

  router_actor router;
  std::shared_ptr<context_exchange_stats> stats;
};

TEST_F(LearnerGone, ACollectorStopsAtOnceWhenItsOnlyLearnerIsLost) {
  auto c = collector_waiting_for_acks();
  ASSERT_EQ(stats->deltas_sent, 2u);
  peer(c, 0, true);
  ack(0, 1);
  ASSERT_EQ(stats->deltas_sent, 3u);
  ASSERT_TRUE(state_of(c).stopped);
  EXPECT_EQ(stopped(), 0u) << "it waits for the ack of deltas 2 and 3";
  // The learner stopped first and its connection closed: no time passes.
  peer(c, 0, false);
  ASSERT_EQ(stopped(), 1u) << "it waited for an ack no learner can send";
  EXPECT_EQ(got_[2].env_step, 9);
  EXPECT_EQ(stats->deltas_abandoned, 2u);
  EXPECT_EQ(logs.count("every learner is gone: stopping without waiting for "
                       "the acknowledgement of 2 deltas (lost)"),
            1u);
  EXPECT_EQ(logs.count("drain timeout"), 0u);
}

TEST_F(LearnerGone, ALearnerLeftWhileAnotherIsConnectedKeepsTheWait) {
  auto c = collector_waiting_for_acks();
  peer(c, 0, true);
  peer(c, 1, true);
  // A reconnect whose up came before the old connection's down.
  peer(c, 0, true);
  peer(c, 0, false);
  ack(0, 1);
  peer(c, 1, false);
  EXPECT_EQ(stopped(), 0u) << "learner 0 is still connected";
  ack(0, 3);
  ASSERT_EQ(stopped(), 1u);
  EXPECT_EQ(stats->deltas_abandoned, 0u);
  EXPECT_EQ(logs.count("every learner is gone"), 0u);
}

// A SIGTERM early in a run: the learner is connected but has acked nothing
// yet (its first delta from this collector was lost before it subscribed).
// The collector quit at once and removed the stored deltas the learner was
// still loading (CI lost 32 of 224 steps so); it must wait for the ack.
TEST_F(LearnerGone, AConnectedLearnerThatHasNotAckedYetIsWaitedFor) {
  auto c = collector_waiting_for_acks();
  peer(c, 0, true);
  ASSERT_EQ(stats->deltas_sent, 2u);
  // The stop, as node::run passes a stop signal on: the window wait ends
  // and delta 3 goes out, 1 and 2 again with it.
  sink->send(c, finish{0, "SIGTERM", false});
  run();
  ASSERT_EQ(stats->deltas_sent, 3u);
  ASSERT_TRUE(state_of(c).stopped);
  EXPECT_EQ(stopped(), 0u) << "it quit before the learner could ack";
  ack(0, 3);
  ASSERT_EQ(stopped(), 1u);
  EXPECT_EQ(got_[2].env_step, 9);
  EXPECT_EQ(stats->deltas_abandoned, 0u);
  EXPECT_EQ(logs.count("drain timeout"), 0u);
}

TEST_F(LearnerGone, WithoutPeerEventsTheDrainTimeoutStillBoundsTheWait) {
  // One process (no connections, so no peer events): unchanged.
  auto c = collector_waiting_for_acks();
  ack(0, 1);
  advance(9s);
  EXPECT_EQ(stopped(), 0u);
  advance(1s);
  ASSERT_EQ(stopped(), 1u);
  EXPECT_EQ(logs.count("acknowledgements still outstanding at the drain "
                       "timeout"),
            1u);
  EXPECT_EQ(stats->deltas_abandoned, 0u);
}

} // namespace
