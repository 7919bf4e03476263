// Exactly-once context: a delta resent or replayed with a (sender, epoch,
// seq) the learner already applied is dropped and counted; a new epoch (a
// restarted collector) starts its sequence afresh.

#include "dice/actors/context_exchanger.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/trust.hpp"

#include "support/deterministic.hpp"
#include "support/probes.hpp"

#include <chrono>

using namespace std::chrono_literals;
using namespace dice;

namespace {

class ExactlyOnceTest : public dice::test::deterministic {};

TEST_F(ExactlyOnceTest, LearnerDropsResentAndReplayedDeltas) {
  auto bus = spawn_bus();
  auto log = std::make_shared<std::vector<dice::test::seen>>();
  // A learner busy for 1 s, so every delta below waits in its inbox.
  pipeline p;
  p.use(dice::test::busy_for(1s))
    .use(context_exchanger())
    .use(dice::test::probe(log));
  auto learner = spawn_role(bus, 0, {role::learner}, std::move(p), 1);
  start({learner});
  context_delta d;
  d.sender = 2;
  d.epoch = 11;
  d.seq = 1;
  d.sender_roles = {role::collector};
  d.env_step = 4;
  d.trajectories = {pack(std::vector<int>{1, 2, 3, 4}, 2)};
  d.has_trajectory_end_idx = true;
  auto topic = context_topic(role::collector);
  auto dropped = counter(trust_event::duplicate_dropped);
  publish(bus, topic, 2, d); // applied
  publish(bus, topic, 2, d); // resent after a reconnect: dropped
  auto next = d;
  next.seq = 2;
  next.env_step = 1;
  next.trajectories = {pack(std::vector<int>{5}, 2)};
  publish(bus, topic, 2, next); // applied
  publish(bus, topic, 2, d);    // an old one replayed: dropped
  auto restarted = d;
  restarted.epoch = 12; // the collector restarted: seq 1 again, new epoch
  restarted.env_step = 2;
  restarted.trajectories = {pack(std::vector<int>{6, 7}, 2)};
  publish(bus, topic, 2, restarted); // applied
  advance(1s);
  ASSERT_EQ(log->size(), 1u);
  EXPECT_EQ(log->front().env_step, 7);
  auto items = unpack<int>(log->front().trajectories);
  ASSERT_TRUE(items);
  EXPECT_EQ(*items, (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(counter(trust_event::duplicate_dropped), dropped + 2);
  EXPECT_EQ(reports()[0].deltas_received, 3);
}

} // namespace
