// A learner killed and replaced while a collector keeps producing, on the
// test coordinator, with the storage loader on and off. The deltas sent
// while no learner listened are lost on the router; the replacement must apply
// each of them once when they are resent, even when the collector's next
// new delta reaches it first (deltas carry the lowest unacked seq, `base`:
// the new learner knows where the stream starts instead of guessing from
// the first seq it sees).

#include "actors/role_state.hpp"
#include "dice/actors/storage_loader.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/security/trust.hpp"

#include "support/deterministic.hpp"
#include "support/probes.hpp"
#include <unistd.h>

#include <chrono>
#include <filesystem>

using namespace std::chrono_literals;
using namespace dice;
namespace fs = std::filesystem;

namespace {

class LearnerRestart : public dice::test::deterministic,
                       public testing::WithParamInterface<bool> {
 protected:
  LearnerRestart()
    : dir(fs::temp_directory_path()
          / ("dice-learner-restart-" + std::to_string(::getpid()))) {}

  ~LearnerRestart() override {
    fs::remove_all(dir);
  }

  context_exchanger_options with_loader(context_exchanger_options opts,
                                        std::uint32_t node) {
    if (GetParam()) {
      loader_options lo;
      lo.dirname = dir.string();
      lo.node = node;
      lo.detached = false;
      lo.inline_below = 0; // stored, not inline: the loader's path
      auto h = spawn_storage_loader(sys, lo);
      spawned.push_back(caf::actor_cast<caf::actor>(h));
      opts.storage_loader = h;
    }
    return opts;
  }

  role_actor spawn_learner(const router_actor& b, std::uint64_t incarnation,
                           context_exchanger_options opts) {
    pipeline p;
    p.use(dice::test::busy_for(1s))
      .use(context_exchanger(with_loader(std::move(opts), 0)));
    role_config rc;
    rc.node = 0;
    rc.roles = {role::learner};
    rc.router = b;
    rc.wait_for_start = true;
    rc.incarnation = incarnation;
    rc.report_to = caf::actor_cast<caf::actor>(sink);
    auto result = sys.spawn(role_behavior, std::move(rc), std::move(p));
    spawned.push_back(caf::actor_cast<caf::actor>(result));
    return result;
  }

  fs::path dir;
};

TEST_P(LearnerRestart, ReplacementAppliesEveryDeltaTheDeadOneMissed) {
  router_config bcfg;
  bcfg.max_held_per_topic = 0; // what nobody receives is lost
  auto router = dice::spawn_router(sys, bcfg);
  spawned.push_back(caf::actor_cast<caf::actor>(router));
  run();
  auto cstats = std::make_shared<context_exchange_stats>();
  context_exchanger_options copts;
  copts.skip_n_iter = 1'000'000; // paced by its own work, not the learner
  copts.max_in_flight = 4;
  copts.resend_timeout = 5s;
  copts.stats = cstats;
  pipeline cp;
  cp.use(dice::test::busy_for(1s))
    .use(dice::test::collect_integers(2, 3, {2}))
    .use(context_exchanger(with_loader(copts, 2)));
  auto c = spawn_role(router, 2, {role::collector}, std::move(cp), 16);
  auto a = spawn_learner(router, 1, {});
  start({a, c});
  for (int i = 0; i < 6; ++i)
    advance(1s);
  // Everything the first learner merged is acked and stays its own.
  auto merged_by_a = state_of(a).ctx.env_step;
  EXPECT_GT(merged_by_a, 0);
  caf::anon_send_exit(a, caf::exit_reason::kill);
  run();
  // Two deltas go into the void while no learner listens.
  advance(1s);
  advance(1s);
  auto resent_before = cstats->deltas_resent.load();
  auto b = spawn_learner(router, 2, {});
  start({b});
  // The collector's next new delta reaches the new learner before the
  // resend timer sends the missing ones again.
  std::map<std::uint32_t, node_report> reps;
  for (int i = 0; i < 60 && reps.size() < 2; ++i) {
    advance(1s);
    for (auto& kvp : reports())
      reps[kvp.first] = kvp.second;
  }
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_EQ(reps[2].env_step, 48);
  EXPECT_GT(cstats->deltas_resent, resent_before) << "nothing was resent";
  EXPECT_EQ(reps[0].env_step, reps[2].env_step - merged_by_a)
    << "the new learner lost deltas the dead one never received";
  EXPECT_EQ(reps[0].trajectories_received, reps[0].env_step);
  EXPECT_EQ(cstats->deltas_evicted, 0u);
}

INSTANTIATE_TEST_SUITE_P(Paths, LearnerRestart, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "Loader" : "Router";
                         });

} // namespace
