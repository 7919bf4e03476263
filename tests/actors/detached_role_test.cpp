// Role actors run on their own thread (issue 10, item 4): a middleware that
// blocks (a gradient step, evaluation episodes, a checkpoint write) never
// holds a worker of CAF's pool, which the router routes on. Deterministic mode
// keeps everything on the test coordinator regardless.

#include "dice/actors/scheduling.hpp"
#include "dice/actors/storage_loader.hpp"
#include "dice/core/errc.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include "support/deterministic.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace {

using namespace std::chrono_literals;
using namespace dice;

struct one_worker_config : caf::actor_system_config {
  one_worker_config() {
    set("logger.verbosity", caf::atom("quiet"));
    // One worker: a role actor that blocks on the pool blocks everything
    // else on it (on a 2-core CI box the default pool has two workers).
    set("scheduler.max-threads", 1);
    dice::add_message_types(*this);
  }
};

// Two nodes that each block in their first iteration until the other one
// is blocked too (a rendezvous, bounded by `limit`).
struct rendezvous {
  std::mutex mtx;
  std::condition_variable cv;
  int arrived = 0;
  int met = 0;

  middleware stage(std::chrono::milliseconds limit) {
    middleware m;
    m.name = "rendezvous";
    m.before = [this, limit](context&) -> step {
      std::unique_lock<std::mutex> guard{mtx};
      ++arrived;
      cv.notify_all();
      if (cv.wait_for(guard, limit, [this] {
            return arrived >= 2;
          }))
        ++met;
      return proceed;
    };
    return m;
  }

  // Runs two such nodes for one iteration each; returns how many met.
  int run(bool detached, std::chrono::milliseconds limit) {
    one_worker_config cfg;
    caf::actor_system sys{cfg};
    std::vector<local_node> nodes;
    for (std::uint32_t n = 0; n < 2; ++n) {
      pipeline p;
      p.use(stage(limit));
      nodes.push_back(local_node{
        n, {n == 0 ? role::learner : role::collector}, std::move(p), 1});
    }
    local_run_options opts;
    opts.print_reports = false;
    opts.deadline = 30s;
    opts.detached_roles = detached;
    auto reps = run_local(sys, std::move(nodes), opts);
    EXPECT_TRUE(reps) << render(reps.error());
    return met;
  }
};

TEST(DetachedRoles, TwoBlockingRoleActorsRunSideBySideOnAOneWorkerPool) {
  rendezvous r;
  EXPECT_EQ(r.run(true, 10s), 2);
}

// What detaching fixes: on the pool, the first blocked role actor holds the
// only worker, so the second one (and the router) cannot run until it gives
// up.
TEST(DetachedRoles, OnThePoolABlockedRoleActorStallsTheOthers) {
  rendezvous r;
  EXPECT_LT(r.run(false, 500ms), 2);
}

class DetachedDeterministic : public dice::test::deterministic {};

// Spawned with the defaults (detached), loaders and role actors still run
// on the test coordinator: their messages wait for `run()`.
TEST_F(DetachedDeterministic, DefaultSpawnsStayOnTheCoordinator) {
  ASSERT_TRUE(deterministic_scheduler(sys));
  loader_options lo;
  lo.dirname = ::testing::TempDir() + "dice-detached-test";
  ASSERT_TRUE(lo.detached);
  auto loader = spawn_storage_loader(sys, lo);
  spawned.push_back(caf::actor_cast<caf::actor>(loader));
  run();
  sink->send(loader, flush_atom::value);
  EXPECT_TRUE(sched.has_job());
  EXPECT_GT(run(), 0u);
  auto b = spawn_router();
  role_config rc;
  rc.node = 7;
  rc.roles = {role::collector};
  rc.router = b;
  rc.wait_for_start = true; // an empty pipeline would iterate forever
  ASSERT_TRUE(rc.detached);
  auto r = dice::spawn_role(sys, rc, pipeline{});
  spawned.push_back(caf::actor_cast<caf::actor>(r));
  EXPECT_TRUE(sched.has_job()); // its join runs on the coordinator
  EXPECT_GT(run(), 0u);
}

TEST(DetachedRoles, AThreadedSystemIsNotDeterministic) {
  one_worker_config cfg;
  caf::actor_system sys{cfg};
  EXPECT_FALSE(deterministic_scheduler(sys));
}

} // namespace
