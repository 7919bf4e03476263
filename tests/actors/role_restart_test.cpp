// In-process supervision (--dice.max-restarts): a role actor whose
// middleware throws is started again on the same router with a fresh context,
// rejoins, and counts as a restart; after N restarts the next exception
// ends the run as before. Deterministic (test coordinator, fake clock),
// then DI-engine's test_auto_recover through the public API on a threaded
// actor system.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/runtime/node.hpp"

#include "support/deterministic.hpp"
#include "support/probes.hpp"

#include <chrono>
#include <memory>
#include <stdexcept>

using namespace std::chrono_literals;
using namespace dice;

namespace {

/// Throws at iteration `at` of each of the first `failing` incarnations
/// (counted by `attach`, which runs once per role actor).
middleware flaky(std::shared_ptr<int> incarnations, int failing,
                 std::int64_t at) {
  middleware m;
  m.name = "flaky";
  m.attach = [incarnations](node_services&) {
    ++*incarnations;
  };
  m.before = [=](context& ctx) -> step {
    if (ctx.total_step == at && (failing < 0 || *incarnations <= failing))
      throw std::runtime_error("incarnation " + std::to_string(*incarnations)
                               + " fails on purpose");
    return proceed;
  };
  return m;
}

class RoleRestart : public dice::test::deterministic {
 protected:
  // Learner (node 0) and collector (node 2, 5 iterations of 3 steps, its
  // finish ends the run); the collector's pipeline is rebuilt per
  // incarnation, and its flaky stage throws at iteration 2 of the first
  // `failing` incarnations (-1: of all).
  caf::expected<std::vector<node_report>> run_cluster(int failing,
                                                      std::int64_t restarts) {
    std::vector<local_node> nodes;
    pipeline lp;
    lp.use(context_exchanger()).use(dice::test::count_train_iter());
    nodes.push_back(local_node{0, {role::learner}, std::move(lp), 0});
    auto make = [this, failing] {
      pipeline p;
      p.use(context_exchanger())
        .use(dice::test::busy_for(1s))
        .use(dice::test::collect_integers(2, 3, {2}))
        .use(flaky(incarnations, failing, 2));
      return p;
    };
    nodes.push_back(local_node{2, {role::collector}, make(), 5, make});
    local_run_options opts;
    opts.print_reports = false;
    opts.max_restarts = restarts;
    return run_local(sys, std::move(nodes), opts);
  }

  std::shared_ptr<int> incarnations = std::make_shared<int>(0);
};

TEST_F(RoleRestart, ThrowingCollectorComesBackWithAFreshContext) {
  auto reps = run_cluster(2, 2);
  ASSERT_TRUE(reps) << render(reps.error());
  ASSERT_EQ(reps->size(), 2u);
  auto& learner = (*reps)[0];
  auto& collector = (*reps)[1];
  EXPECT_EQ(*incarnations, 3);
  EXPECT_EQ(collector.restarts, 2);
  EXPECT_EQ(collector.stop_reason, "max_step");
  // A fresh context: the last incarnation counts only its own 5 iterations.
  EXPECT_EQ(collector.iterations, 5);
  EXPECT_EQ(collector.env_step, 15);
  // Each failed incarnation published its iterations 0 and 1 (iteration 2
  // threw before its after-parts): 6 + 6 + 15, each once.
  EXPECT_EQ(learner.env_step, 27);
  EXPECT_EQ(learner.trajectories_received, 27);
  EXPECT_EQ(learner.restarts, 0);
  EXPECT_EQ(learner.stop_reason, "finish from node 2 (max_step)");
  EXPECT_EQ(logs.count("restarting the role actor (restart 1 of 2)"), 1u);
  EXPECT_EQ(logs.count("restarting the role actor (restart 2 of 2)"), 1u);
}

TEST_F(RoleRestart, AfterMaxRestartsTheNextExceptionEndsTheRun) {
  auto reps = run_cluster(-1, 2);
  ASSERT_TRUE(reps) << render(reps.error());
  ASSERT_EQ(reps->size(), 2u);
  auto& learner = (*reps)[0];
  auto& collector = (*reps)[1];
  EXPECT_EQ(*incarnations, 3);
  EXPECT_EQ(collector.restarts, 2);
  EXPECT_EQ(collector.stop_reason.rfind("error: middleware 'flaky' threw: "
                                        "incarnation 3 fails on purpose",
                                        0),
            0u)
    << collector.stop_reason;
  EXPECT_EQ(learner.stop_reason.rfind("finish from node 2 (error:", 0), 0u)
    << learner.stop_reason;
  EXPECT_EQ(learner.env_step, 18);
}

TEST_F(RoleRestart, WithoutMaxRestartsAThrowEndsTheRunAsBefore) {
  auto reps = run_cluster(1, 0);
  ASSERT_TRUE(reps) << render(reps.error());
  ASSERT_EQ(reps->size(), 2u);
  EXPECT_EQ(*incarnations, 1);
  EXPECT_EQ((*reps)[1].restarts, 0);
  EXPECT_EQ((*reps)[1].stop_reason.rfind("error: middleware 'flaky'", 0), 0u);
}

// -- DI-engine's test_auto_recover through the public API ------------------

/// A program's config with the node options, as a dice program has.
struct program_config : node_system_config {};

TEST(AutoRecover, MainThatThrowsInItsFirstRunsIsRetriedAndCompletes) {
  program_config cfg;
  const char* argv[] = {"prog", "--dice.max-restarts=3"};
  ASSERT_FALSE(cfg.parse(2, const_cast<char**>(argv)));
  auto ncfg = make_node_config(cfg);
  ASSERT_TRUE(ncfg) << render(ncfg.error());
  ASSERT_EQ(ncfg->max_restarts, 3);
  caf::actor_system sys{cfg};
  // DI-engine re-runs main: here `main` builds the pipeline, and raises in
  // its first two runs.
  auto runs = std::make_shared<int>(0);
  auto main = [runs] {
    pipeline p;
    p.use(dice::test::count_train_iter()).use(flaky(runs, 2, 1));
    return p;
  };
  std::vector<local_node> nodes;
  nodes.push_back(local_node{0, {role::learner}, main(), 4, main});
  local_run_options opts;
  opts.print_reports = false;
  opts.max_restarts = ncfg->max_restarts;
  opts.deadline = 30s;
  auto reps = run_local(sys, std::move(nodes), opts);
  ASSERT_TRUE(reps) << render(reps.error());
  ASSERT_EQ(reps->size(), 1u);
  EXPECT_EQ(*runs, 3);
  EXPECT_EQ((*reps)[0].restarts, 2);
  EXPECT_EQ((*reps)[0].stop_reason, "max_step");
  EXPECT_EQ((*reps)[0].train_iter, 4);
}

TEST(AutoRecover, NodeRunRestartsItsRoleActorToo) {
  program_config cfg;
  const char* argv[] = {"prog", "--dice.max-restarts=1"};
  ASSERT_FALSE(cfg.parse(2, const_cast<char**>(argv)));
  auto ncfg = make_node_config(cfg);
  ASSERT_TRUE(ncfg) << render(ncfg.error());
  ncfg->roles = {role::learner};
  caf::actor_system sys{cfg};
  auto n = node::start(sys, *ncfg);
  ASSERT_TRUE(n) << render(n.error());
  auto runs = std::make_shared<int>(0);
  auto main = [runs] {
    pipeline p;
    p.use(dice::test::count_train_iter()).use(flaky(runs, 1, 1));
    return p;
  };
  node_run_options opts;
  opts.max_step = 3;
  opts.print_report = false;
  opts.deadline = 30s;
  opts.rebuild = main;
  auto rep = n->run(main(), opts);
  n->stop();
  ASSERT_TRUE(rep) << render(rep.error());
  EXPECT_EQ(*runs, 2);
  EXPECT_EQ(rep->restarts, 1);
  EXPECT_EQ(rep->iterations, 3);
  EXPECT_EQ(rep->stop_reason, "max_step");
}

} // namespace
