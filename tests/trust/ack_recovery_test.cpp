// How a collector gets its window back when deltas went missing, on the test
// coordinator: nothing is given up at finish, every delta is resent at its own
// deadline, an ack stopping just below the oldest unacked delta resends it at
// once, and a learner of a group re-acks no further than its group counted.
// Each fixes a way LearnerGroupRun.ClusterSurvivesKillNineOfRankOne lost or
// stalled a delta when a learner of the group died.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_ack.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/security/trust.hpp"

#include "support/exchange_fixture.hpp"

#include <chrono>
#include <functional>

using namespace std::chrono_literals;
using namespace dice;

namespace {

class AckRecoveryTest : public dice::test::exchange_fixture {
 protected:
  // A router that loses what nobody receives yet (no learner subscribed).
  router_actor spawn_forgetful_router() {
    router_config bcfg;
    bcfg.max_held_per_topic = 0;
    auto router = dice::spawn_router(sys, bcfg);
    spawned.push_back(caf::actor_cast<caf::actor>(router));
    run();
    return router;
  }

  // A learner of a group (acks deferred) that runs `each` after every
  // iteration, on its own actor, as a group's sync would.
  role_actor
  spawn_group_learner(const router_actor& router,
                      context_exchanger_options& lopts,
                      std::function<void(context&, context_partition&)> each,
                      std::int64_t max_step) {
    lopts.learner_timeout = 1s;
    lopts.partition = std::make_shared<context_partition>();
    lopts.partition->defer_acks = true;
    middleware m;
    m.name = "count";
    m.after = [each = std::move(each),
               partition = lopts.partition](context& ctx) {
      each(ctx, *partition);
    };
    pipeline p;
    p.use(dice::test::busy_for(1s))
      .use(context_exchanger(lopts))
      .use(std::move(m));
    return spawn_role(router, 0, {role::learner}, std::move(p), max_step);
  }

  static context_delta delta(std::uint32_t sender, std::uint64_t seq) {
    context_delta d;
    d.sender = sender;
    d.incarnation = 7;
    d.seq = seq;
    d.base = 1;
    d.sender_roles = {role::collector};
    d.env_step = 2;
    d.trajectories = {pack(std::vector<int>{1, 2}, 2)};
    d.has_trajectory_end_idx = true;
    return d;
  }
};

// The collector's two deltas went nowhere and its window (2) is full when the
// learner finishes the run. The finish ends its window wait, so its last
// iteration sends a third delta over a full window: it now resends the two
// and sends the third (no eviction while finishing), and the learner counts
// all three. Before, the oldest was evicted and its 3 steps were lost
// (learner 6, collector 9).
TEST_F(AckRecoveryTest, FinishWithAFullWindowResendsInsteadOfEvicting) {
  auto router = spawn_forgetful_router();
  auto cstats = std::make_shared<context_exchange_stats>();
  context_exchanger_options copts;
  copts.max_in_flight = 2;
  copts.resend_timeout = 1h;
  copts.stats = cstats;
  auto c = spawn_role(router, 2, {role::collector},
                      collector_pipe(2, 3, copts));
  start({c});
  ASSERT_EQ(cstats->deltas_sent, 2u); // into the void; the window is full
  context_exchanger_options lopts;
  lopts.stats = std::make_shared<context_exchange_stats>();
  lopts.learner_timeout = 200ms;
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(100ms, lopts),
                      1);
  start({l});
  for (int i = 0; i < 100 && stopped() < 2; ++i)
    advance(100ms);
  stopped();
  ASSERT_EQ(got_.size(), 2u);
  EXPECT_EQ(got_[2].env_step, 9);
  EXPECT_EQ(cstats->deltas_evicted, 0u);
  EXPECT_EQ(got_[0].env_step, got_[2].env_step) << "a delta was given up";
  EXPECT_EQ(got_[0].trajectories_received, 9);
}

// Deltas at 0.6 s and 1.2 s go nowhere (resend timeout 1 s). The first is
// resent at 1.6 s; the second is due at 2.2 s and goes then, not at the next
// period of a timer re-armed at 1.6 s (2.6 s: almost two timeouts late).
TEST_F(AckRecoveryTest, ResendFollowsEachDeltasOwnDeadline) {
  auto router = spawn_forgetful_router();
  auto cstats = std::make_shared<context_exchange_stats>();
  context_exchanger_options copts;
  copts.resend_timeout = 1s;
  copts.skip_n_iter = 1'000'000;
  copts.stats = cstats;
  pipeline p;
  p.use(dice::test::busy_for(600ms))
    .use(dice::test::collect_integers(2, 1, {0}))
    .use(context_exchanger(copts));
  auto c = spawn_role(router, 2, {role::collector}, std::move(p), 4);
  start({c});
  for (int i = 0; i < 21; ++i) // to 2.1 s
    advance(100ms);
  EXPECT_EQ(cstats->deltas_sent, 3u);
  EXPECT_EQ(cstats->deltas_resent, 1u) << "the first, at 1.6 s";
  advance(100ms); // 2.2 s
  EXPECT_EQ(cstats->deltas_resent, 2u) << "the second is due at 2.2 s";
}

// The learner acknowledges up to 1 again while the collector's oldest
// unacked delta is 2: it took later ones but lacks 2 (a learner of a group
// that took the stream over where its group counted it). The collector
// resends 2 at once instead of after its resend timeout, once per delta and
// only after a quarter of the timeout (an ack crossing a fresh delta is no
// sign of loss); an ack further below resends nothing.
TEST_F(AckRecoveryTest, AnAckJustBelowTheOldestUnackedResendsItAtOnce) {
  auto router = spawn_router();
  auto cstats = std::make_shared<context_exchange_stats>();
  context_exchanger_options copts;
  copts.max_in_flight = 3;
  copts.resend_timeout = 4s;
  copts.stats = cstats;
  auto c = spawn_incarnation(router, 2, 0x42, collector_pipe(2, 3, copts), 0);
  start({c});
  ASSERT_EQ(cstats->deltas_sent, 3u); // window full, nobody acks
  auto topic = context_ack_topic(2);
  publish(router, topic, 0, context_ack{0, 2, 0x42, 1}); // frees 1
  EXPECT_EQ(cstats->deltas_sent, 4u);
  publish(router, topic, 0, context_ack{0, 2, 0x42, 1});
  EXPECT_EQ(cstats->deltas_resent, 0u) << "delta 2 is not a second old";
  advance(1s);
  publish(router, topic, 0, context_ack{0, 2, 0x42, 1});
  EXPECT_EQ(cstats->deltas_resent, 1u) << "delta 2 at once";
  EXPECT_EQ(cstats->deltas_fast_resent, 1u);
  publish(router, topic, 0, context_ack{0, 2, 0x42, 1});
  EXPECT_EQ(cstats->deltas_resent, 1u) << "once per delta";
  publish(router, topic, 0, context_ack{0, 2, 0x42, 2}); // frees 2
  advance(1s);
  publish(router, topic, 0, context_ack{0, 2, 0x42, 1});
  EXPECT_EQ(cstats->deltas_resent, 1u) << "1 is not just below 3";
}

// A learner of a group (acks deferred until the group counted) gets a
// duplicate of a delta it applied but the group has not counted: it must not
// ack it, or a kill before the count loses it (the collector forgets it and
// the learner that takes over settles only to what the group counted).
// Before, a duplicate was acked up to everything applied. After ack_now
// (the count), a duplicate is re-acked; so is one below where a learner
// taking a stream over settled it.
TEST_F(AckRecoveryTest, AGroupLearnerReacksOnlyWhatItsGroupCounted) {
  auto router = spawn_router();
  auto lstats = std::make_shared<context_exchange_stats>();
  context_exchanger_options lopts;
  lopts.stats = lstats;
  // The group's count: after the iteration in which the test sets `count`.
  auto count = std::make_shared<bool>(false);
  auto l = spawn_group_learner(
    router, lopts,
    [count](context&, context_partition& partition) {
      if (*count)
        partition.ack_now();
    },
    4);
  start({l});
  auto topic = context_topic(role::collector);
  publish(router, topic, 2, delta(2, 1));
  advance(1s); // merged, not counted
  advance(1s);
  EXPECT_EQ(lstats->acks_sent, 0u);
  auto dropped = counter(trust_event::duplicate_dropped);
  publish(router, topic, 2, delta(2, 1));
  EXPECT_EQ(counter(trust_event::duplicate_dropped), dropped + 1);
  EXPECT_EQ(lstats->acks_sent, 0u) << "acked what the group never counted";
  *count = true;
  advance(1s);
  advance(1s);
  EXPECT_EQ(lstats->acks_sent, 1u);
  publish(router, topic, 2, delta(2, 1));
  EXPECT_EQ(lstats->acks_sent, 2u) << "counted: re-acked";
  // Taken over from a dead learner: the group counted collector 3 up to 5.
  lopts.partition->settle(3, 7, 5);
  publish(router, topic, 3, delta(3, 4));
  EXPECT_EQ(lstats->acks_sent, 3u) << "settled: re-acked";
  for (int i = 0; i < 10 && stopped() < 1; ++i)
    advance(1s);
  stopped();
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(got_[0].env_step, 2);
}

// A learner of a group gets deltas 1 and 3 of a stream (2 is late): it
// counts 1 only and holds 3 (its watermark, what a learner taking the
// collector over would settle to, is 1). Before, it counted 3 too with the
// watermark still at 1: once 3's resend reached a new owner, it was counted
// twice (LearnerGroupRun.RestartedLearnerRejoinsAndCountsStayExact, 320 env
// steps). When 2 comes, 2 and the held 3 count, once each; a resend of 3 is
// a duplicate.
TEST_F(AckRecoveryTest, AGroupLearnerCountsAStreamInOrderOnly) {
  auto router = spawn_router();
  auto lstats = std::make_shared<context_exchange_stats>();
  context_exchanger_options lopts;
  lopts.stats = lstats;
  auto seen = std::make_shared<std::vector<std::int64_t>>();
  auto l = spawn_group_learner(
    router, lopts,
    [seen](context& ctx, context_partition& partition) {
      seen->push_back(ctx.env_step);
      partition.ack_now();
    },
    6);
  auto partition = lopts.partition;
  start({l});
  auto topic = context_topic(role::collector);
  using mark = std::pair<std::uint64_t, std::uint64_t>;
  publish(router, topic, 2, delta(2, 1));
  publish(router, topic, 2, delta(2, 3)); // 2 is late
  advance(1s);
  advance(1s);
  ASSERT_FALSE(seen->empty());
  EXPECT_EQ(seen->back(), 2) << "counted past the gap";
  EXPECT_EQ(partition->watermark(2), (mark{7, 1}));
  EXPECT_EQ(lstats->deltas_past_gap, 1u);
  publish(router, topic, 2, delta(2, 2));
  advance(1s);
  advance(1s);
  EXPECT_EQ(seen->back(), 6) << "the held delta was not applied";
  EXPECT_EQ(partition->watermark(2), (mark{7, 3}));
  auto dropped = counter(trust_event::duplicate_dropped);
  publish(router, topic, 2, delta(2, 3)); // resent
  EXPECT_EQ(counter(trust_event::duplicate_dropped), dropped + 1);
  for (int i = 0; i < 10 && stopped() < 1; ++i)
    advance(1s);
  stopped();
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(got_[0].env_step, 6);
}

} // namespace
