// Exactly-once context with acks, resend and backpressure, on the test
// coordinator: lost deltas are resent and counted once, a full window makes
// a collector wait instead of producing, the learner's buffer stays bounded,
// and a restarted collector's two incarnations are both counted exactly.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_ack.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/security/trust.hpp"

#include "support/exchange_fixture.hpp"

#include <chrono>

using namespace std::chrono_literals;
using namespace dice;

namespace {

class AcksTest : public dice::test::exchange_fixture {
 protected:
  static std::shared_ptr<context_exchange_stats> make_stats() {
    return std::make_shared<context_exchange_stats>();
  }
};

// The learner is not subscribed yet and the router holds nothing, so the first
// deltas are lost; the collector resends them after the resend timeout and
// the learner counts each once.
TEST_F(AcksTest, LostDeltasAreResentAndCountedOnce) {
  router_config bcfg;
  bcfg.max_held_per_topic = 0; // a router that loses what nobody receives yet
  auto router = dice::spawn_router(sys, bcfg);
  spawned.push_back(caf::actor_cast<caf::actor>(router));
  run();
  auto cstats = make_stats();
  context_exchanger_options copts;
  copts.max_in_flight = 2;
  copts.resend_timeout = 1s;
  copts.stats = cstats;
  auto c = spawn_role(router, 2, {role::collector}, collector_pipe(2, 3, copts),
                      4);
  start({c});
  // Two deltas published into the void, then the window is full.
  EXPECT_EQ(cstats->deltas_sent, 2u);
  EXPECT_EQ(cstats->window_waits, 1u);
  auto lstats = make_stats();
  context_exchanger_options lopts;
  lopts.stats = lstats;
  auto dropped = counter(trust_event::duplicate_dropped);
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(100ms, lopts));
  start({l});
  EXPECT_EQ(lstats->buffered_peak, 0u) << "nothing arrived before the resend";
  for (int i = 0; i < 40 && stopped() < 2; ++i)
    advance(100ms);
  stopped();
  auto reps = got_;
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_EQ(reps[2].env_step, 12);
  EXPECT_EQ(reps[0].env_step, 12);
  EXPECT_EQ(reps[0].trajectories_received, 12);
  EXPECT_EQ(reps[0].deltas_received, 4);
  EXPECT_GE(cstats->deltas_resent, 2u);
  EXPECT_GE(cstats->acks_received, 1u);
  EXPECT_GT(cstats->window_wait_ns, 0);
  // Resends of lost deltas are new to the learner, not duplicates.
  EXPECT_EQ(counter(trust_event::duplicate_dropped), dropped);
}

// A resent delta the learner already applied (its ack was lost) is dropped
// as a duplicate, re-acked, and not counted twice.
TEST_F(AcksTest, ResendOfAnAppliedDeltaIsDroppedAndReacked) {
  auto router = spawn_router();
  auto lstats = make_stats();
  context_exchanger_options lopts;
  lopts.stats = lstats;
  lopts.learner_timeout = 1s;
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(1s, lopts), 2);
  start({l});
  context_delta d;
  d.sender = 2;
  d.incarnation = 7;
  d.seq = 1;
  d.sender_roles = {role::collector};
  d.env_step = 3;
  d.trajectories = {pack(std::vector<int>{1, 2, 3}, 2)};
  d.has_trajectory_end_idx = true;
  auto topic = context_topic(role::collector);
  publish(router, topic, 2, d);
  advance(1s); // merged and acked
  auto acks = lstats->acks_sent.load();
  EXPECT_EQ(acks, 1u);
  auto dropped = counter(trust_event::duplicate_dropped);
  publish(router, topic, 2, d); // the collector never saw the ack: resend
  EXPECT_EQ(counter(trust_event::duplicate_dropped), dropped + 1);
  EXPECT_EQ(lstats->acks_sent, acks + 1) << "a duplicate is acked again";
  for (int i = 0; i < 10 && stopped() < 1; ++i)
    advance(1s);
  stopped();
  auto reps = got_;
  ASSERT_EQ(reps.size(), 1u);
  EXPECT_EQ(reps[0].env_step, 3);
  EXPECT_EQ(reps[0].trajectories_received, 3);
}

// A restarted learner first hears from a collector at seq 41 (an earlier
// learner acked 1..40): it applies and acks it instead of waiting for seq 1,
// which would stall the collector's window for ever.
TEST_F(AcksTest, NewLearnerAcksAStreamThatStartsPastOne) {
  auto router = spawn_router();
  auto lstats = make_stats();
  context_exchanger_options lopts;
  lopts.stats = lstats;
  lopts.learner_timeout = 1s;
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(1s, lopts), 2);
  start({l});
  context_delta d;
  d.sender = 2;
  d.incarnation = 9;
  d.seq = 41;
  d.sender_roles = {role::collector};
  d.env_step = 2;
  d.trajectories = {pack(std::vector<int>{1, 2}, 2)};
  d.has_trajectory_end_idx = true;
  auto topic = context_topic(role::collector);
  publish(router, topic, 2, d);
  advance(1s);
  EXPECT_EQ(lstats->acks_sent, 1u);
  auto dropped = counter(trust_event::duplicate_dropped);
  d.seq = 40; // acked by the earlier learner: not ours
  publish(router, topic, 2, d);
  EXPECT_EQ(counter(trust_event::duplicate_dropped), dropped + 1);
  for (int i = 0; i < 10 && stopped() < 1; ++i)
    advance(1s);
  stopped();
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(got_[0].trajectories_received, 2);
}

// Flood: three collectors that never wait for context against a learner
// that takes 1 s per iteration. Windows hold each collector to 4 unacked
// deltas and the learner's buffer to 3 x 4; nothing is lost or doubled.
TEST_F(AcksTest, WindowBoundsAFloodAndCountsStayExact) {
  auto router = spawn_router();
  auto lstats = make_stats();
  context_exchanger_options lopts;
  lopts.stats = lstats;
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(1s, lopts), 10);
  std::vector<std::shared_ptr<context_exchange_stats>> cstats;
  std::vector<role_actor> cs;
  for (std::uint32_t n = 2; n < 5; ++n) {
    cstats.push_back(make_stats());
    context_exchanger_options copts;
    copts.max_in_flight = 4;
    copts.stats = cstats.back();
    cs.push_back(
      spawn_role(router, n, {role::collector}, collector_pipe(n, 30, copts)));
  }
  start({l, cs[0], cs[1], cs[2]});
  for (int i = 0; i < 30 && stopped() < 4; ++i)
    advance(1s);
  stopped();
  auto reps = got_;
  ASSERT_EQ(reps.size(), 4u);
  std::int64_t produced = 0;
  for (std::uint32_t n = 2; n < 5; ++n)
    produced += reps[n].env_step;
  EXPECT_EQ(reps[0].env_step, produced);
  EXPECT_EQ(reps[0].trajectories_received, produced);
  EXPECT_LE(lstats->buffered_peak, 12u);
  EXPECT_GT(lstats->buffered_peak, 0u);
  EXPECT_EQ(lstats->deltas_refused, 0u);
  for (auto& s : cstats) {
    EXPECT_LE(s->unacked_peak, 4u);
    EXPECT_GT(s->window_waits, 5u);
    // Nearly all of the run was spent waiting for the slow learner.
    EXPECT_GE(s->window_wait_ns, std::chrono::nanoseconds{8s}.count());
    EXPECT_EQ(s->deltas_evicted, 0u);
  }
  // Bounded production: a window of 4 per learner iteration (plus the last).
  for (std::uint32_t n = 2; n < 5; ++n)
    EXPECT_LE(reps[n].iterations, 4 * (10 + 2));
}

// A learner whose buffer cap is below what the windows allow refuses the
// excess; the senders resend it and every transition still counts once.
TEST_F(AcksTest, LearnerCapRefusesExcessAndResendsFillIt) {
  auto router = spawn_router();
  auto lstats = make_stats();
  context_exchanger_options lopts;
  lopts.max_buffered = 2;
  lopts.stats = lstats;
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(1s, lopts), 12);
  std::vector<std::shared_ptr<context_exchange_stats>> cstats;
  std::vector<role_actor> cs;
  for (std::uint32_t n = 2; n < 5; ++n) {
    cstats.push_back(make_stats());
    context_exchanger_options copts;
    copts.max_in_flight = 4;
    copts.resend_timeout = 500ms;
    copts.stats = cstats.back();
    cs.push_back(
      spawn_role(router, n, {role::collector}, collector_pipe(n, 5, copts)));
  }
  start({l, cs[0], cs[1], cs[2]});
  for (int i = 0; i < 60 && stopped() < 4; ++i)
    advance(500ms);
  stopped();
  auto reps = got_;
  ASSERT_EQ(reps.size(), 4u);
  std::int64_t produced = 0;
  std::uint64_t resent = 0;
  for (std::uint32_t n = 2; n < 5; ++n)
    produced += reps[n].env_step;
  for (auto& s : cstats)
    resent += s->deltas_resent;
  EXPECT_GT(lstats->deltas_refused, 0u);
  EXPECT_GT(resent, 0u);
  EXPECT_EQ(reps[0].env_step, produced);
  EXPECT_EQ(reps[0].trajectories_received, produced);
}

// A collector is killed mid-run and restarts with a new incarnation: the
// learner counts what each incarnation sent, once.
TEST_F(AcksTest, RestartedCollectorIsCountedPerIncarnation) {
  auto router = spawn_router();
  auto lstats = make_stats();
  context_exchanger_options lopts;
  lopts.stats = lstats;
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(1s, lopts));
  auto first = make_stats();
  context_exchanger_options copts;
  copts.max_in_flight = 3;
  copts.stats = first;
  auto c = spawn_incarnation(router, 2, 1, collector_pipe(2, 3, copts), 0);
  start({l, c});
  advance(1s);
  advance(1s);
  caf::anon_send_exit(c, caf::exit_reason::kill);
  run();
  auto sent_by_first = static_cast<std::int64_t>(first->deltas_sent) * 3;
  EXPECT_GT(sent_by_first, 0);
  auto second = make_stats();
  copts.stats = second;
  auto c2 = spawn_incarnation(router, 2, 2, collector_pipe(2, 3, copts), 6);
  start({c2});
  for (int i = 0; i < 40 && stopped() < 2; ++i)
    advance(1s);
  stopped();
  auto reps = got_;
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_EQ(reps[2].env_step, 18);
  EXPECT_EQ(reps[0].env_step, sent_by_first + 18);
  EXPECT_EQ(reps[0].trajectories_received, sent_by_first + 18);
}

// The router tells the collector that a learner connected (peer_event): the
// collector resends every unacked delta at once instead of after
// resend_timeout (deltas sent into a dead connection had stalled it 5-10 s).
TEST_F(AcksTest, ALearnerConnectingTriggersAnImmediateResend) {
  router_config bcfg;
  bcfg.max_held_per_topic = 0; // a router that loses what nobody receives yet
  auto router = dice::spawn_router(sys, bcfg);
  spawned.push_back(caf::actor_cast<caf::actor>(router));
  run();
  auto cstats = make_stats();
  context_exchanger_options copts;
  copts.max_in_flight = 3;
  copts.resend_timeout = 5s;
  copts.stats = cstats;
  auto c = spawn_role(router, 2, {role::collector},
                      collector_pipe(2, 3, copts));
  start({c});
  EXPECT_EQ(cstats->deltas_sent, 3u); // into the void; the window is full
  auto lstats = make_stats();
  context_exchanger_options lopts;
  lopts.stats = lstats;
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(100ms, lopts),
                      5);
  start({l});
  EXPECT_EQ(cstats->deltas_resent, 0u);
  // Only the node's own router may say so: the same event from anyone else is
  // refused.
  auto rejected = counter(trust_event::message_rejected);
  caf::anon_send(c, peer_event{0, {role::learner}, true});
  run();
  EXPECT_EQ(cstats->deltas_resent, 0u);
  EXPECT_EQ(counter(trust_event::message_rejected), rejected + 1);
  caf::send_as(caf::actor_cast<caf::actor>(router), c,
               peer_event{0, {role::learner}, true});
  run();
  EXPECT_EQ(cstats->deltas_resent_on_connect, 3u) << "no time has passed";
  EXPECT_EQ(cstats->deltas_resent, 3u);
  for (int i = 0; i < 20 && stopped() < 2; ++i)
    advance(100ms);
  stopped();
  ASSERT_EQ(got_.size(), 2u);
  EXPECT_GE(got_[2].env_step, 9);
  EXPECT_EQ(got_[0].env_step, got_[2].env_step);
  EXPECT_EQ(got_[0].trajectories_received, got_[2].env_step);
}

// Acks are context_ack messages (protocol v7). One for another collector, or
// for seqs this incarnation never sent, frees nothing and is counted; a
// genuine one frees the window. Before the check, an ack up to seq 1000
// emptied the window of deltas no learner had.
TEST_F(AcksTest, AckForAnotherCollectorOrUnsentSeqsIsRefused) {
  auto router = spawn_router();
  auto cstats = make_stats();
  context_exchanger_options copts;
  copts.max_in_flight = 2;
  copts.resend_timeout = 1h;
  copts.stats = cstats;
  auto c = spawn_incarnation(router, 2, 0x42, collector_pipe(2, 3, copts), 0);
  start({c});
  ASSERT_EQ(cstats->deltas_sent, 2u); // the window is full, nobody acks
  auto topic = context_ack_topic(2);
  auto rejected = counter(trust_event::message_rejected);
  publish(router, topic, 0, context_ack{0, 2, 0x42, 1000}); // never sent
  publish(router, topic, 0, context_ack{0, 3, 0x42, 2});    // not ours
  EXPECT_EQ(counter(trust_event::message_rejected), rejected + 2);
  EXPECT_EQ(cstats->acks_received, 0u);
  EXPECT_EQ(cstats->deltas_sent, 2u) << "a forged ack opened the window";
  // A value of another type on the ack topic is no ack either.
  publish(router, topic, 0, context_delta{});
  EXPECT_EQ(counter(trust_event::message_rejected), rejected + 3);
  publish(router, topic, 0, context_ack{0, 2, 0x42, 2});
  EXPECT_EQ(cstats->acks_received, 1u);
  EXPECT_EQ(cstats->deltas_sent, 4u) << "the genuine ack opened the window";
}

} // namespace
