// A node that accepts peers only once its role actor joined its router
// (node_config::accept_once_running, which dice::run sets). Before, a node
// accepted from node::start: a collector whose handshake with the learner's
// node came before the learner's member joined started with no subscription
// of the learner in sight and sent its first delta past it, while another
// subscriber of the topic (the evaluator) kept the router from holding it.
// The learner acked nothing until the 5 s resend, and a run stopped before
// then lost that delta and, with a storage loader, the ones it was still
// loading (CI: StopSignal.SigtermLeavesNoSharedMemorySegmentBehind counted
// 192 of 224 steps).

#include "dice/actors/router.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/finish.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/runtime/node.hpp"
#include "dice/runtime/node_config.hpp"

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "support/loopback_node.hpp"
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace dice;

const topic<context_delta> first_words{"first_words"};

// A node of this test: it starts iterating without waiting for peers.
node_config config_of(std::uint32_t id, role_set roles, bool listen) {
  auto nc = dice::test::loopback_node_config(id, roles, listen);
  nc.min_peers = 0;
  return nc;
}

// Subscribes to `first_words` when it joins and waits in its one iteration
// (at most 10 s) for a delta there.
pipeline wait_for_first_words(std::shared_ptr<std::atomic<int>> got) {
  middleware m;
  m.name = "wait_for_first_words";
  m.attach = [got](node_services& svc) {
    svc.on(first_words, [got](const context_delta&) {
      ++*got;
    });
  };
  m.before = [got](context&) -> step {
    return wait_for{[got] {
                      return got->load() > 0;
                    },
                    10s,
                    [](context&, wait_outcome) {
                      return proceed;
                    }};
  };
  pipeline p;
  p.use(std::move(m));
  return p;
}

// Peers `router` reports within `timeout` (0: none by then).
std::uint32_t peers_of(caf::scoped_actor& self, const router_actor& router,
                       caf::timespan timeout) {
  std::uint32_t n = 0;
  self->request(router, timeout, peers_atom::value, std::uint32_t{1})
    .receive(
      [&](std::uint32_t x) {
        n = x;
      },
      [](caf::error&) {});
  return n;
}

TEST(AcceptOnceRunning, APeersFirstPublicationReachesAMemberThatJoinedLate) {
  node_system_config cfg_l;
  node_system_config cfg_c;
  caf::actor_system sys_l{cfg_l};
  caf::actor_system sys_c{cfg_c};
  auto lc = config_of(0, {role::learner}, true);
  lc.accept_once_running = true;
  auto learner = node::start(sys_l, std::move(lc));
  ASSERT_TRUE(learner) << render(learner.error());
  auto collector = node::start(sys_c, config_of(1, {role::collector}, false));
  ASSERT_TRUE(collector) << render(collector.error());
  caf::scoped_actor self{sys_c};
  // The publishing node's member, itself a subscriber of the topic (as the
  // evaluator of the probe's cluster is): the router delivers instead of
  // holding.
  auto me = caf::actor_cast<caf::actor>(self);
  self
    ->request(collector->router(), 10s, join_atom::value, collector->id(),
              role_set{role::collector}, me,
              std::vector<std::string>{first_words.name()})
    .receive([](const std::vector<finish>&) {},
             [](caf::error& err) {
               FAIL() << render(err);
             });
  self->send(collector->router(), attach_atom::value, std::string{"127.0.0.1"},
             learner->port());
  // The learner's node has not run yet: its listener keeps the connection
  // in the backlog, so no handshake can complete without its subscriptions.
  EXPECT_EQ(peers_of(self, collector->router(), 300ms), 0u)
    << "a handshake completed before the learner's member joined";
  auto got = std::make_shared<std::atomic<int>>(0);
  node_run_options opts;
  opts.print_report = false;
  opts.max_step = 1;
  opts.deadline = 30s;
  caf::expected<node_report> rep{caf::error{}};
  std::thread run{[&] {
    rep = learner->run(wait_for_first_words(got), opts);
  }};
  // The collector starts the moment the learner's node is connected, as a
  // node's start gate does, and publishes at once.
  ASSERT_EQ(peers_of(self, collector->router(), 10s), 1u);
  context_delta d;
  d.sender = collector->id();
  d.env_step = 16;
  self->send(collector->router(), publish_atom::value,
             std::string{first_words.name()}, collector->id(),
             caf::make_message(std::string{first_words.name()}, d));
  // Nothing more from this node: the learner's node need not wait out its
  // drain for it.
  self->send(collector->router(), done_atom::value, collector->id(), me);
  run.join();
  collector->stop();
  learner->stop();
  ASSERT_TRUE(rep) << render(rep.error());
  EXPECT_EQ(got->load(), 1) << "the first publication went past the learner";
}

} // namespace
