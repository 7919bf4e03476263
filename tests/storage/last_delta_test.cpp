// Nothing in flight is lost at the end of a run, with the storage loader on
// and off: the finishing node's last delta reaches the learner before its
// finish does (so the learner's last iteration runs with it), and a node
// does not quit while loads it started are pending. Deterministic on the
// test coordinator, then repeated on CAF's threaded scheduler.

#include "dice/actors/storage_loader.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include "support/deterministic.hpp"
#include "support/probes.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

namespace {

using namespace std::chrono_literals;
using namespace dice;
namespace fs = std::filesystem;

fs::path scratch_dir(const std::string& what) {
  return fs::temp_directory_path()
    / ("dice-last-delta-" + what + "-" + std::to_string(::getpid()));
}

loader_options loader_opts(const fs::path& dir, std::uint32_t node,
                           bool detached) {
  loader_options opts;
  opts.dirname = dir.string();
  opts.node = node;
  opts.detached = detached;
  // Every delta is stored (these deltas are small and would travel inline):
  // the loader's path is the stored one.
  opts.inline_below = 0;
  return opts;
}

std::string path_name(const testing::TestParamInfo<bool>& info) {
  return info.param ? "Loader" : "Router";
}

// -- deterministic ------------------------------------------------------------

class LastDelta : public dice::test::deterministic,
                  public testing::WithParamInterface<bool> {
 protected:
  LastDelta() : dir(scratch_dir("det")) {}

  ~LastDelta() override {
    fs::remove_all(dir);
  }

  context_exchanger_options exchanger(std::uint32_t node) {
    context_exchanger_options opts;
    if (GetParam()) {
      auto h = spawn_storage_loader(sys, loader_opts(dir, node, false));
      spawned.push_back(caf::actor_cast<caf::actor>(h));
      opts.storage_loader = h;
    }
    return opts;
  }

  fs::path dir;
};

// A collector ends the run after three iterations of 7 items: its third
// delta is the last one and must be in the learner's last iteration (it was
// missing there on the loader path: the finish overtook the stored delta).
TEST_P(LastDelta, CollectorsFinishComesAfterItsLastDelta) {
  auto router = spawn_router();
  auto log = std::make_shared<std::vector<dice::test::seen>>();
  pipeline lp;
  lp.use(context_exchanger(exchanger(0))).use(dice::test::probe(log));
  auto l = spawn_role(router, 0, {role::learner}, std::move(lp));
  pipeline cp;
  cp.use(context_exchanger(exchanger(2)))
    .use(dice::test::collect_integers(2, 7, {6}));
  auto c = spawn_role(router, 2, {role::collector}, std::move(cp), 3);
  start({l, c});
  for (int i = 0; i < 20 && reports().size() < 2; ++i)
    advance(1s);
  ASSERT_FALSE(log->empty());
  EXPECT_EQ(log->back().env_step, 21) << "the learner's last iteration ran "
                                         "without the collector's last delta";
  EXPECT_EQ(state_of(l).rep.trajectories_received, 21);
  EXPECT_EQ(state_of(l).ctx.env_step, 21);
  EXPECT_EQ(logs.count("Timeout"), 0u);
}

// The learner ends the run; each collector's delta of its last iteration
// (made after the finish reached it) still counts at the learner: on the
// loader path the learner must not quit while it loads it.
TEST_P(LastDelta, LearnerWaitsForLoadsItStartedBeforeQuitting) {
  auto router = spawn_router();
  pipeline lp;
  lp.use(context_exchanger(exchanger(0))).use(dice::test::count_train_iter());
  auto l = spawn_role(router, 0, {role::learner}, std::move(lp), 4);
  std::vector<role_actor> cs;
  for (std::uint32_t n = 2; n < 4; ++n) {
    pipeline cp;
    cp.use(context_exchanger(exchanger(n)))
      .use(dice::test::collect_integers(n, 5, {4}));
    cs.push_back(spawn_role(router, n, {role::collector}, std::move(cp)));
  }
  start({l, cs[0], cs[1]});
  std::map<std::uint32_t, node_report> reps;
  for (int i = 0; i < 20 && reps.size() < 3; ++i) {
    for (auto& kvp : reports())
      reps[kvp.first] = kvp.second;
    if (reps.size() < 3)
      advance(1s);
  }
  ASSERT_EQ(reps.size(), 3u);
  EXPECT_GT(reps[2].env_step, 0);
  EXPECT_EQ(reps[0].env_step, reps[2].env_step + reps[3].env_step);
  EXPECT_EQ(reps[0].trajectories_received, reps[2].env_step + reps[3].env_step);
}

INSTANTIATE_TEST_SUITE_P(Paths, LastDelta, testing::Bool(), path_name);

// -- threaded -----------------------------------------------------------------

struct threaded_config : caf::actor_system_config {
  threaded_config() {
    set("logger.verbosity", caf::atom("quiet"));
    set("scheduler.max-threads", 2);
    dice::add_message_types(*this);
  }
};

class LastDeltaThreaded : public testing::TestWithParam<bool> {
 protected:
  LastDeltaThreaded() : dir(scratch_dir("threaded")) {}

  ~LastDeltaThreaded() override {
    fs::remove_all(dir);
  }

  // One in-process cluster: a learner and two collectors; `collector_steps`
  // ends the run from collector 2, else `learner_steps` from the learner.
  // Returns the learner's env_step minus what the collectors made (0: no
  // loss) and adds a failure for a run that did not complete.
  std::int64_t run_once(std::int64_t learner_steps,
                        std::int64_t collector_steps) {
    threaded_config cfg;
    caf::actor_system sys{cfg};
    auto exchanger = [&](std::uint32_t node) {
      context_exchanger_options opts;
      if (GetParam())
        opts.storage_loader = spawn_storage_loader(
          sys, loader_opts(dir, node, true));
      return context_exchanger(opts);
    };
    std::vector<local_node> nodes;
    pipeline lp;
    lp.use(exchanger(0)).use(dice::test::count_train_iter());
    nodes.push_back(
      local_node{0, {role::learner}, std::move(lp), learner_steps});
    for (std::uint32_t n = 2; n < 4; ++n) {
      pipeline cp;
      cp.use(exchanger(n)).use(dice::test::collect_integers(n, 3, {2}));
      nodes.push_back(local_node{
        n, {role::collector}, std::move(cp), n == 2 ? collector_steps : 0});
    }
    local_run_options opts;
    opts.print_reports = false;
    opts.deadline = 30s;
    auto reps = run_local(sys, std::move(nodes), opts);
    if (!reps) {
      ADD_FAILURE() << render(reps.error());
      return -1;
    }
    if (reps->size() != 3) {
      ADD_FAILURE() << reps->size() << " reports";
      return -1;
    }
    auto& learner = (*reps)[0];
    std::int64_t made = (*reps)[1].env_step + (*reps)[2].env_step;
    EXPECT_EQ(learner.trajectories_received, learner.env_step);
    return learner.env_step - made;
  }

  fs::path dir;
};

TEST_P(LastDeltaThreaded, TwentyRunsEndedByACollectorLoseNothing) {
  int lossy = 0;
  for (int i = 0; i < 20; ++i)
    if (run_once(0, 6) != 0)
      ++lossy;
  EXPECT_EQ(lossy, 0) << "runs that lost a delta, of 20";
}

TEST_P(LastDeltaThreaded, TwentyRunsEndedByTheLearnerLoseNothing) {
  int lossy = 0;
  for (int i = 0; i < 20; ++i)
    if (run_once(6, 0) != 0)
      ++lossy;
  EXPECT_EQ(lossy, 0) << "runs that lost a delta, of 20";
}

INSTANTIATE_TEST_SUITE_P(Paths, LastDeltaThreaded, testing::Bool(), path_name);

} // namespace
