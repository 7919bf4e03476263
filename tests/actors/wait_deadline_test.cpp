// A wait's deadline (middleware wait_for::timeout) on the test coordinator's
// fake clock: it counts from its own wait, whatever deadline messages of
// earlier waits are still in flight, and a wait that ends early leaves its
// message for the next wait instead of scheduling one more per wait (each
// scheduled message wakes CAF's clock thread; router_latency_bench).

#include "dice/messages/context_delta.hpp"
#include "dice/pipeline/middleware.hpp"

#include "support/deterministic.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace dice;

const topic<context_delta> go{"go"};

/// How one wait ended, and when (fake clock).
struct ended {
  wait_outcome outcome;
  caf::actor_clock::time_point at;
};

struct waiter_state {
  node_services* svc = nullptr;
  std::int64_t got = 0;
  std::vector<ended> log;
};

/// Iteration k waits for its (k + 1)-th "go" for at most timeouts[k].
middleware waiter(std::shared_ptr<waiter_state> st,
                  std::vector<caf::timespan> timeouts) {
  middleware m;
  m.name = "waiter";
  m.attach = [st](node_services& s) {
    st->svc = &s;
    s.on(go, [st](const context_delta&) {
      ++st->got;
    });
  };
  m.before = [st, timeouts](context& ctx) -> step {
    auto k = ctx.total_step;
    return wait_for{[st, k] {
                      return st->got > k;
                    },
                    timeouts.at(static_cast<std::size_t>(k)),
                    [st](context&, wait_outcome o) {
                      st->log.push_back(ended{o, st->svc->now()});
                      return proceed;
                    }};
  };
  return m;
}

class WaitDeadline : public test::deterministic {
 protected:
  void send_go(const router_actor& router) {
    context_delta d;
    d.sender = 9;
    d.seq = ++seq_;
    publish(router, go.name(), 9, d);
  }

  std::size_t scheduled() {
    return sched.clock().schedule().size();
  }

 private:
  std::uint64_t seq_ = 0;
};

TEST_F(WaitDeadline, AWaitThatEndsEarlyLeavesItsMessageForTheNext) {
  auto router = spawn_router();
  auto st = std::make_shared<waiter_state>();
  constexpr int n = 50;
  pipeline p;
  p.use(waiter(st, std::vector<caf::timespan>(n + 1, 10s)));
  // Iteration n still waits when the test checks: no drain timer yet.
  auto w = spawn_role(router, 1, {role::collector}, std::move(p), n + 1);
  start({w});
  auto before = scheduled();
  for (int i = 0; i < n; ++i)
    send_go(router);
  ASSERT_EQ(st->log.size(), static_cast<std::size_t>(n));
  for (auto& x : st->log)
    EXPECT_EQ(x.outcome, wait_outcome::ready);
  // One deadline message served all 50 waits (before: one each).
  EXPECT_LE(scheduled(), before);
}

TEST_F(WaitDeadline, EachWaitTimesOutAtItsOwnDeadline) {
  auto router = spawn_router();
  auto st = std::make_shared<waiter_state>();
  pipeline p;
  p.use(waiter(st, {10s, 10s, 30s, 2s, 100s, 1s}));
  auto w = spawn_role(router, 1, {role::collector}, std::move(p), 6);
  auto t0 = sched.clock().now();
  auto at = [&](std::size_t i) {
    return st->log.at(i).at - t0;
  };
  start({w});
  // Wait 0 (10 s) ends at 1 s; wait 1 (10 s) starts then: due at 11 s.
  advance(1s);
  send_go(router);
  ASSERT_EQ(st->log.size(), 1u);
  EXPECT_EQ(st->log[0].outcome, wait_outcome::ready);
  advance(9s); // 10 s: wait 0's message arrives, wait 1 goes on waiting
  ASSERT_EQ(st->log.size(), 1u);
  advance(1s);
  ASSERT_EQ(st->log.size(), 2u);
  EXPECT_EQ(st->log[1].outcome, wait_outcome::timed_out);
  EXPECT_EQ(at(1), 11s);
  // Wait 2 (30 s, due at 41 s) ends at 12 s; wait 3's 2 s end before the
  // message in flight: it gets one of its own.
  advance(1s);
  send_go(router); // the "go" wait 1 missed
  send_go(router);
  ASSERT_EQ(st->log.size(), 3u);
  EXPECT_EQ(st->log[2].outcome, wait_outcome::ready);
  advance(2s);
  ASSERT_EQ(st->log.size(), 4u);
  EXPECT_EQ(st->log[3].outcome, wait_outcome::timed_out);
  EXPECT_EQ(at(3), 14s);
  // Wait 4 (100 s from 14 s): wait 2's message at 41 s does not end it.
  advance(27s);
  ASSERT_EQ(st->log.size(), 4u);
  advance(72s);
  ASSERT_EQ(st->log.size(), 4u);
  advance(1s);
  ASSERT_EQ(st->log.size(), 5u);
  EXPECT_EQ(st->log[4].outcome, wait_outcome::timed_out);
  EXPECT_EQ(at(4), 114s);
  // Wait 5 (1 s) ends on its "go" in time: no timeout follows it.
  send_go(router); // the ones waits 3 and 4 missed
  send_go(router);
  ASSERT_EQ(st->log.size(), 5u);
  send_go(router);
  ASSERT_EQ(st->log.size(), 6u);
  EXPECT_EQ(st->log[5].outcome, wait_outcome::ready);
  EXPECT_EQ(at(5), 114s);
  advance(5s);
  EXPECT_EQ(st->log.size(), 6u);
  EXPECT_EQ(reports().at(1).timeouts, 3);
}

} // namespace
