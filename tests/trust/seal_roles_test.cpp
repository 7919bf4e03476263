// Issue 9, item 1 inside a node: a role actor takes messages only from
// actors of its own node that name themselves, and a node whose router is gone
// says so and stops with an error instead of running on headless.

#include "dice/actors/storage_loader.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/security/trust.hpp"

#include "caf/exit_reason.hpp"

#include "support/deterministic.hpp"
#include "support/probes.hpp"
#include <unistd.h>

#include <chrono>
#include <filesystem>

using namespace std::chrono_literals;
using namespace dice;

namespace {

class SealRoles : public dice::test::deterministic {
 protected:
  role_actor spawn_learner(const router_actor& router,
                           std::shared_ptr<std::vector<dice::test::seen>> log) {
    pipeline p;
    context_exchanger_options opts;
    opts.learner_timeout = 1s;
    p.use(context_exchanger(opts)).use(dice::test::probe(log));
    return spawn_role(router, 0, {role::learner}, std::move(p));
  }
};

// Before: the learner took an anonymous finish and stopped, and applied an
// anonymous delta (+1,000,000 env_step).
TEST_F(SealRoles, AnonymousMessagesToARoleActorAreDropped) {
  auto router = spawn_router();
  auto log = std::make_shared<std::vector<dice::test::seen>>();
  auto learner = spawn_learner(router, log);
  start({learner});
  auto before = counter(trust_event::anonymous_dropped);
  context_delta d;
  d.sender = 5;
  d.incarnation = 1;
  d.seq = 1;
  d.env_step = 1'000'000;
  caf::anon_send(learner, context_topic(role::collector), d);
  caf::anon_send(learner, finish{5, "evil", false});
  caf::anon_send(learner, done_atom::value);
  run();
  EXPECT_EQ(counter(trust_event::anonymous_dropped), before + 3);
  for (int i = 0; i < 5 && log->size() < 3; ++i)
    advance(1s);
  ASSERT_GE(log->size(), 3u) << "the learner stopped";
  EXPECT_EQ(log->back().env_step, 0) << "the anonymous delta was applied";
  EXPECT_FALSE(state_of(learner).finishing);
}

// Before: with its router killed, the learner iterated on with no router and no
// log line, and never reported.
TEST_F(SealRoles, ANodeWhoseRouterDiedStopsWithAnError) {
  auto router = spawn_router();
  auto log = std::make_shared<std::vector<dice::test::seen>>();
  auto learner = spawn_learner(router, log);
  start({learner});
  caf::anon_send_exit(router, caf::exit_reason::kill);
  run();
  for (int i = 0; i < 3; ++i)
    advance(1s);
  auto reps = reports();
  ASSERT_EQ(reps.count(0), 1u) << "the learner runs on without its router";
  EXPECT_EQ(reps[0].stop_reason.rfind("error", 0), 0u) << reps[0].stop_reason;
  EXPECT_TRUE(reps[0].failed) << "a node without its router failed";
  EXPECT_EQ(logs.count("router"), 1u);
}

// A collector's storage loader dies (nothing outside the node can reach it,
// but a bug or a local kill can): the node ends the run with an error
// instead of handing deltas to a dead actor.
TEST_F(SealRoles, ANodeWhoseLoaderDiedStopsWithAnError) {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path()
    / ("dice-seal-roles-" + std::to_string(::getpid()));
  auto router = spawn_router();
  loader_options opts;
  opts.dirname = dir.string();
  opts.node = 2;
  opts.detached = false;
  auto loader = spawn_storage_loader(sys, opts);
  pipeline p;
  context_exchanger_options ce;
  ce.storage_loader = loader;
  p.use(dice::test::busy_for(1s)).use(context_exchanger(ce));
  auto c = spawn_role(router, 2, {role::collector}, std::move(p));
  start({c});
  caf::anon_send_exit(loader, caf::exit_reason::kill);
  run();
  for (int i = 0; i < 3; ++i)
    advance(1s);
  auto reps = reports();
  ASSERT_EQ(reps.count(2), 1u) << "the collector runs on without its loader";
  EXPECT_EQ(reps[2].stop_reason.rfind("error: a loader stopped", 0), 0u)
    << reps[2].stop_reason;
  EXPECT_TRUE(reps[2].failed);
  fs::remove_all(dir);
}

} // namespace
