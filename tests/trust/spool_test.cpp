// A collector's spool on the test coordinator: deltas a killed incarnation
// had published but nobody acknowledged are republished by the next one,
// under the old incarnation and seqs, and counted exactly once; a learner takes
// an older incarnation's deltas after a newer one's without losing track of
// which incarnation is current.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_ack.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/security/trust.hpp"

#include "caf/event_based_actor.hpp"

#include "support/exchange_fixture.hpp"
#include "support/files.hpp"

#include <chrono>
#include <filesystem>

using namespace std::chrono_literals;
using namespace dice;

namespace {

class SpoolTest : public dice::test::exchange_fixture {
 protected:
  context_exchanger_options collector_opts(std::string dir) {
    context_exchanger_options opts;
    opts.max_in_flight = 3;
    opts.resend_timeout = 1s;
    opts.stats = std::make_shared<context_exchange_stats>();
    opts.spool_dir = std::move(dir);
    return opts;
  }

  static std::size_t files_in(const std::filesystem::path& dir) {
    std::size_t n = 0;
    for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator{dir})
      ++n;
    return n;
  }
};

// Before the spool (spool_dir "-"): the learner got 6 of the 15 steps.
// A router that loses what nobody receives stands for the socket buffer a
// kill -9 takes with it: the first incarnation's 3 deltas reach no one.
TEST_F(SpoolTest, DeltasAKilledCollectorSpooledAreRepublishedAndCountedOnce) {
  dice::test::scratch dir{"spool_killed"};
  router_config bcfg;
  bcfg.max_held_per_topic = 0;
  auto router = dice::spawn_router(sys, bcfg);
  spawned.push_back(caf::actor_cast<caf::actor>(router));
  run();
  auto first = collector_opts(dir.dir.string());
  auto c1 = spawn_incarnation(router, 2, 1, collector_pipe(2, 3, first), 0);
  start({c1});
  EXPECT_EQ(first.stats->deltas_sent, 3u) << "into the void; window full";
  EXPECT_EQ(first.stats->deltas_spooled, 3u);
  caf::anon_send_exit(c1, caf::exit_reason::kill);
  run();
  context_exchanger_options lopts;
  lopts.stats = std::make_shared<context_exchange_stats>();
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(100ms, lopts));
  start({l});
  auto second = collector_opts(dir.dir.string());
  auto c2 = spawn_incarnation(router, 2, 2, collector_pipe(2, 3, second), 2);
  start({c2});
  for (int i = 0; i < 40 && stopped() < 2; ++i)
    advance(100ms);
  stopped();
  ASSERT_EQ(got_.size(), 2u);
  EXPECT_EQ(second.stats->deltas_recovered, 3u);
  EXPECT_EQ(got_[2].env_step, 6) << "the second incarnation's own steps";
  EXPECT_EQ(got_[0].env_step, 9 + 6);
  EXPECT_EQ(got_[0].trajectories_received, 9 + 6);
  EXPECT_EQ(files_in(dir.dir), 0u) << "acknowledged: the spool is empty";
}

// The learner had applied the first incarnation's deltas but not yet
// acknowledged them when it was killed: the republished copies are dropped
// as duplicates and acknowledged, so the spool empties and nothing counts
// twice.
TEST_F(SpoolTest, DeltasTheLearnerAlreadyAppliedAreNotCountedTwice) {
  dice::test::scratch dir{"spool_applied"};
  auto router = spawn_router();
  context_exchanger_options lopts;
  lopts.stats = std::make_shared<context_exchange_stats>();
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(1s, lopts));
  auto first = collector_opts(dir.dir.string());
  auto c1 = spawn_incarnation(router, 2, 1, collector_pipe(2, 3, first), 0);
  start({l, c1});
  EXPECT_EQ(first.stats->deltas_sent, 3u);
  EXPECT_EQ(lopts.stats->acks_sent, 0u) << "the learner has not merged yet";
  caf::anon_send_exit(c1, caf::exit_reason::kill);
  run();
  auto dropped = counter(trust_event::duplicate_dropped);
  auto second = collector_opts(dir.dir.string());
  auto c2 = spawn_incarnation(router, 2, 2, collector_pipe(2, 3, second), 2);
  start({c2});
  EXPECT_EQ(counter(trust_event::duplicate_dropped), dropped + 3);
  for (int i = 0; i < 40 && stopped() < 2; ++i)
    advance(1s);
  stopped();
  ASSERT_EQ(got_.size(), 2u);
  EXPECT_EQ(got_[0].env_step, 9 + 6);
  EXPECT_EQ(got_[0].trajectories_received, 9 + 6);
  EXPECT_EQ(files_in(dir.dir), 0u);
}

// A learner of a group hears the new incarnation (incarnation 20), then a
// republished delta of the old one (incarnation 10): it applies and
// acknowledges it under incarnation 10. Its watermark names the stream that
// last brought new data, so incarnation 20's next delta makes it current again,
// and a resent duplicate of incarnation 10 no longer moves it back (before:
// {10, 5}, so a failover at that moment lost the group's count of incarnation
// 20).
TEST_F(SpoolTest, ALearnerTakesAnOlderIncarnationsDeltasAfterANewerOnes) {
  auto router = spawn_router();
  context_exchanger_options lopts;
  lopts.stats = std::make_shared<context_exchange_stats>();
  lopts.partition = std::make_shared<context_partition>();
  lopts.learner_timeout = 1s;
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(1s, lopts), 3);
  start({l});
  auto acks = std::make_shared<std::vector<context_ack>>();
  auto spy = sys.spawn(
    [acks, router](caf::event_based_actor* self) -> caf::behavior {
      self->send(router, subscribe_atom::value, context_ack_topic(2),
                 std::uint32_t{9}, caf::actor_cast<caf::actor>(self));
      return {[acks](const std::string&, const context_ack& ack) {
        acks->push_back(ack);
      }};
    });
  spawned.push_back(spy);
  run();
  auto delta = [](std::uint64_t incarnation, std::uint64_t seq,
                  std::uint64_t base) {
    context_delta d;
    d.sender = 2;
    d.incarnation = incarnation;
    d.seq = seq;
    d.base = base;
    d.sender_roles = {role::collector};
    d.env_step = 2;
    d.trajectories = {pack(std::vector<int>{1, 2}, 2)};
    d.has_trajectory_end_idx = true;
    return d;
  };
  using mark = std::pair<std::uint64_t, std::uint64_t>;
  auto topic = context_topic(role::collector);
  publish(router, topic, 2, delta(20, 1, 1));
  publish(router, topic, 2, delta(10, 5, 5)); // republished from the spool
  advance(1s);
  bool acked_old = false;
  for (auto& a : *acks)
    acked_old |= a.incarnation == 10 && a.upto == 5;
  EXPECT_TRUE(acked_old) << acks->size() << " acks";
  publish(router, topic, 2, delta(20, 2, 1));
  EXPECT_EQ(lopts.partition->watermark(2), (mark{20, 2}));
  auto dropped = counter(trust_event::duplicate_dropped);
  publish(router, topic, 2, delta(10, 5, 5)); // resent: its ack was lost
  EXPECT_EQ(counter(trust_event::duplicate_dropped), dropped + 1);
  EXPECT_EQ(lopts.partition->watermark(2), (mark{20, 2}));
  for (int i = 0; i < 10 && stopped() < 1; ++i)
    advance(1s);
  stopped();
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(got_[0].env_step, 6);
}

} // namespace
