// node_report.failed: set for the node whose own step failed, not for a
// peer told to finish, nor for a run that ended by its budget. Programs pick
// their exit code from it instead of parsing stop_reason.

#include "dice/core/node_report.hpp"
#include "dice/pipeline/middleware.hpp"

#include "support/deterministic.hpp"
#include "support/probes.hpp"

#include <chrono>
#include <stdexcept>

using namespace dice;

namespace {

class NodeReport : public dice::test::deterministic {};

middleware throws_at(std::int64_t step) {
  middleware m;
  m.name = "fragile";
  m.before = [step](context& ctx) -> dice::step {
    if (ctx.total_step == step)
      throw std::runtime_error("bad batch");
    return proceed;
  };
  return m;
}

} // namespace

TEST_F(NodeReport, OwnErrorFailsTheNodeAndNotThePeerItStops) {
  auto router = spawn_router();
  // The learner waits (an hour at most: the fake clock never gets there)
  // until the collector's failure finishes the run.
  pipeline lp;
  lp.use(dice::test::busy_for(std::chrono::hours{1}));
  auto learner = spawn_role(router, 0, {role::learner}, std::move(lp));
  pipeline cp;
  cp.use(throws_at(2));
  auto collector = spawn_role(router, 2, {role::collector}, std::move(cp));
  start({learner, collector});
  auto reps = reports();
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_TRUE(reps[2].failed) << reps[2].stop_reason;
  EXPECT_EQ(reps[2].stop_reason.rfind("error: middleware 'fragile' threw", 0),
            0u)
    << reps[2].stop_reason;
  EXPECT_FALSE(reps[0].failed) << reps[0].stop_reason;
  EXPECT_EQ(reps[0].stop_reason.rfind("finish from node 2 (error:", 0), 0u)
    << reps[0].stop_reason;
  EXPECT_EQ(logs.count("bad batch"), 1u);
}

TEST_F(NodeReport, MaxStepIsNoFailure) {
  auto router = spawn_router();
  pipeline p;
  p.use(void_middleware("work"));
  auto node = spawn_role(router, 0, {role::learner}, std::move(p), 3);
  start({node});
  auto reps = reports();
  ASSERT_EQ(reps.size(), 1u);
  EXPECT_EQ(reps[0].stop_reason, "max_step");
  EXPECT_FALSE(reps[0].failed);
}
