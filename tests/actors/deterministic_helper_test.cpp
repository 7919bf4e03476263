// A user's own GoogleTest (no DICE_MAIN, no dice test fixture) runs an
// in-process cluster deterministically with one call, loaders included,
// spawned with their default options (issue 10, item 5).

#include "dice/actors/scheduling.hpp"
#include "dice/actors/storage_loader.hpp"
#include "dice/core/errc.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include "support/probes.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace {

using namespace dice;
namespace fs = std::filesystem;

struct user_config : caf::actor_system_config {
  user_config() {
    set("logger.verbosity", caf::atom("quiet"));
    dice::add_message_types(*this);
  }
};

// A learner and two collectors whose context goes through storage loaders
// (default options: detached); returns the reports.
std::vector<node_report> run_cluster(const fs::path& dir) {
  user_config cfg;
  make_deterministic(cfg);
  caf::actor_system sys{cfg};
  EXPECT_TRUE(deterministic_scheduler(sys));
  auto exchanger = [&](std::uint32_t node) {
    loader_options lo;
    lo.dirname = dir.string();
    lo.node = node;
    context_exchanger_options opts;
    opts.storage_loader = spawn_storage_loader(sys, lo);
    return context_exchanger(opts);
  };
  std::vector<local_node> nodes;
  pipeline lp;
  lp.use(exchanger(0)).use(test::count_train_iter());
  nodes.push_back(local_node{0, {role::learner}, std::move(lp), 0});
  for (std::uint32_t n = 1; n < 3; ++n) {
    pipeline cp;
    cp.use(exchanger(n)).use(test::collect_integers(n, 3, {2}));
    nodes.push_back(
      local_node{n, {role::collector}, std::move(cp), n == 1 ? 25 : 0});
  }
  local_run_options opts;
  opts.print_reports = false;
  auto reps = run_local(sys, std::move(nodes), opts);
  EXPECT_TRUE(reps) << render(reps.error());
  return reps ? *reps : std::vector<node_report>{};
}

TEST(DeterministicHelper, AUsersOwnTestRunsAClusterWithLoadersReproducibly) {
  auto dir = fs::temp_directory_path()
    / ("dice-det-helper-" + std::to_string(::getpid()));
  auto first = run_cluster(dir / "a");
  auto second = run_cluster(dir / "b");
  fs::remove_all(dir);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), 3u);
  // Nothing lost: the learner merged every step the collectors made.
  EXPECT_EQ(first[0].env_step, first[1].env_step + first[2].env_step);
  EXPECT_GT(first[0].env_step, 0);
  // The same run twice: same counters on every node.
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(first[i].env_step, second[i].env_step) << "node " << i;
    EXPECT_EQ(first[i].env_episode, second[i].env_episode) << "node " << i;
    EXPECT_EQ(first[i].train_iter, second[i].train_iter) << "node " << i;
  }
}

} // namespace
