// Exactly-once context: a delta resent or replayed with a (sender, incarnation,
// seq) the learner already applied is dropped and counted; a new incarnation (a
// restarted collector) starts its sequence afresh.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/security/trust.hpp"

#include "support/deterministic.hpp"
#include "support/probes.hpp"

#include <chrono>
#include <limits>

using namespace std::chrono_literals;
using namespace dice;

namespace {

class ExactlyOnceTest : public dice::test::deterministic {};

TEST_F(ExactlyOnceTest, LearnerDropsResentAndReplayedDeltas) {
  auto router = spawn_router();
  auto log = std::make_shared<std::vector<dice::test::seen>>();
  // A learner busy for 1 s, so every delta below waits in its inbox.
  pipeline p;
  p.use(dice::test::busy_for(1s))
    .use(context_exchanger())
    .use(dice::test::probe(log));
  auto learner = spawn_role(router, 0, {role::learner}, std::move(p), 1);
  start({learner});
  context_delta d;
  d.sender = 2;
  d.incarnation = 11;
  d.seq = 1;
  d.sender_roles = {role::collector};
  d.env_step = 4;
  d.trajectories = {pack(std::vector<int>{1, 2, 3, 4}, 2)};
  d.has_trajectory_end_idx = true;
  auto topic = context_topic(role::collector);
  auto dropped = counter(trust_event::duplicate_dropped);
  publish(router, topic, 2, d); // applied
  publish(router, topic, 2, d); // resent after a reconnect: dropped
  auto next = d;
  next.seq = 2;
  next.env_step = 1;
  next.trajectories = {pack(std::vector<int>{5}, 2)};
  publish(router, topic, 2, next); // applied
  publish(router, topic, 2, d);    // an old one replayed: dropped
  auto restarted = d;
  restarted.incarnation = 12; // the collector restarted: seq 1 again, new
                              // incarnation
  restarted.env_step = 2;
  restarted.trajectories = {pack(std::vector<int>{6, 7}, 2)};
  publish(router, topic, 2, restarted); // applied
  advance(1s);
  ASSERT_EQ(log->size(), 1u);
  EXPECT_EQ(log->front().env_step, 7);
  auto items = unpack<int>(log->front().trajectories);
  ASSERT_TRUE(items);
  EXPECT_EQ(*items, (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(counter(trust_event::duplicate_dropped), dropped + 2);
  EXPECT_EQ(reports()[0].deltas_received, 3);
}

// Counters from the wire are summed with checks: increments whose sum would
// leave the int64 range (undefined behaviour; it wrapped to a negative
// env_step) are refused and counted, in the buffer and in the context.
TEST_F(ExactlyOnceTest, OverflowingIncrementsAreRefused) {
  auto router = spawn_router();
  auto log = std::make_shared<std::vector<dice::test::seen>>();
  pipeline p;
  p.use(dice::test::busy_for(1s))
    .use(context_exchanger())
    .use(dice::test::probe(log));
  auto learner = spawn_role(router, 0, {role::learner}, std::move(p), 2);
  start({learner});
  auto topic = context_topic(role::collector);
  auto delta = [](std::uint64_t seq, std::int64_t steps) {
    context_delta d;
    d.sender = 2;
    d.incarnation = 3;
    d.seq = seq;
    d.base = 1;
    d.sender_roles = {role::collector};
    d.env_step = steps;
    d.env_episode = 1;
    return d;
  };
  auto max = std::numeric_limits<std::int64_t>::max();
  auto rejected = counter(trust_event::message_rejected);
  publish(router, topic, 2, delta(1, max - 1));
  publish(router, topic, 2, delta(2, 5)); // the buffered sum would overflow
  EXPECT_EQ(counter(trust_event::message_rejected), rejected + 1);
  advance(1s);
  ASSERT_EQ(log->size(), 1u);
  EXPECT_EQ(log->back().env_step, max - 1);
  publish(router, topic, 2, delta(3, 5)); // the context's sum would overflow
  advance(1s);
  ASSERT_EQ(log->size(), 2u);
  EXPECT_EQ(log->back().env_step, max - 1);
  EXPECT_EQ(counter(trust_event::message_rejected), rejected + 2);
}

// Sequence numbers and item counts from the wire cannot push a receiver's
// arithmetic past its range: a seq at 2^64-1, a base beyond its seq, a
// payload claiming 2^63 items in 8 bytes and an end index that overflows
// when offset are refused unapplied.
TEST_F(ExactlyOnceTest, HostileSequencesCountsAndOffsetsAreRefused) {
  auto router = spawn_router();
  auto log = std::make_shared<std::vector<dice::test::seen>>();
  pipeline p;
  p.use(dice::test::busy_for(1s))
    .use(context_exchanger())
    .use(dice::test::probe(log));
  auto learner = spawn_role(router, 0, {role::learner}, std::move(p), 1);
  start({learner});
  auto topic = context_topic(role::collector);
  context_delta good;
  good.sender = 2;
  good.incarnation = 3;
  good.seq = 1;
  good.base = 1;
  good.sender_roles = {role::collector};
  good.env_step = 2;
  good.trajectories = {pack(std::vector<int>{1, 2}, 2)};
  good.trajectory_end_idx = {1};
  good.has_trajectory_end_idx = true;
  publish(router, topic, 2, good);
  auto rejected = counter(trust_event::message_rejected);
  auto edge = good;
  edge.sender = 4;
  edge.seq = std::numeric_limits<std::uint64_t>::max();
  edge.base = edge.seq;
  publish(router, topic, 4, edge);
  auto base_beyond = good;
  base_beyond.sender = 5;
  base_beyond.seq = 3;
  base_beyond.base = 9;
  publish(router, topic, 5, base_beyond);
  auto lying = good;
  lying.sender = 6;
  lying.trajectories[0].count = std::uint64_t{1} << 63;
  publish(router, topic, 6, lying);
  auto far = good;
  far.sender = 7;
  far.trajectory_end_idx = {std::numeric_limits<std::int64_t>::max()};
  publish(router, topic, 7, far);
  EXPECT_EQ(counter(trust_event::message_rejected), rejected + 4);
  advance(1s);
  ASSERT_EQ(log->size(), 1u);
  EXPECT_EQ(log->back().env_step, 2);
  EXPECT_EQ(log->back().trajectory_end_idx, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(reports()[0].trajectories_received, 2);
}

} // namespace
