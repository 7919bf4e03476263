// The exchangers with DI-engine's `model_loader=` / `storage_loader=`: only
// storage references travel on the router, loaders on both sides store and
// load them off the role actors; a deleted file gives DI-engine's warning
// and the wait goes on.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/exchangers/periodical_model_exchanger.hpp"
#include "dice/storage/storage.hpp"

#include "support/deterministic.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

namespace {

using namespace std::chrono_literals;
using namespace dice;
namespace fs = std::filesystem;

// A model without LibTorch: its "weights" are one snapshot.
struct fake_model : model_port {
  model_snapshot current;
  int loads = 0;
  caf::expected<model_snapshot> snapshot() override {
    return current;
  }
  caf::error load(const model_snapshot& x) override {
    current = x;
    ++loads;
    return caf::none;
  }
};

model_snapshot weights(float value) {
  std::vector<float> xs(256, value);
  snapshot_builder b;
  b.add("w", dtype::float32, {256}, xs.data(), xs.size() * sizeof(float));
  return b.build(0, 0, 0, 0);
}

// Holds a node in its second iteration (so the test sees the state of a
// running node).
middleware gate() {
  middleware m;
  m.name = "gate";
  m.before = [](context& ctx) -> step {
    if (ctx.total_step == 0)
      return proceed;
    return wait_for{[] {
                      return false;
                    },
                    std::chrono::hours{1},
                    [](context&, wait_outcome) -> step {
                      return proceed;
                    }};
  };
  return m;
}

class ExchangerLoaders : public dice::test::deterministic {
 protected:
  ExchangerLoaders() {
    dir = fs::temp_directory_path()
      / ("dice-exchanger-loader-" + std::to_string(::getpid()));
  }

  ~ExchangerLoaders() override {
    fs::remove_all(dir);
  }

  // The loaders of one cluster share a directory: a loader only opens
  // references inside its own (dice::confine).
  loader_options options(std::uint32_t node) {
    loader_options opts;
    opts.dirname = dir.string();
    opts.node = node;
    opts.ttl = 20s;
    opts.detached = false;
    return opts;
  }

  // Items node `node` stored ("dice.<node>.*"); in /dev/shm, those of this
  // process ("dice.<node>.<pid>.*": other tests run beside this one).
  std::size_t files(std::uint32_t node,
                    storage_kind kind = storage_kind::file) {
    auto where = kind == storage_kind::shm ? fs::path{"/dev/shm"} : dir;
    if (!fs::exists(where))
      return 0;
    auto prefix = "dice." + std::to_string(node) + ".";
    if (kind == storage_kind::shm)
      prefix += std::to_string(::getpid()) + ".";
    std::size_t n = 0;
    for (auto& entry : fs::directory_iterator{where})
      if (entry.path().filename().string().rfind(prefix, 0) == 0)
        ++n;
    return n;
  }

  // Loaders with a TTL timer must stop before the fixture's actor system.
  model_loader_actor model_loader(std::uint32_t node) {
    auto h = spawn_model_loader(sys, options(node));
    spawned.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }

  storage_loader_actor storage_loader(std::uint32_t node,
                                      storage_kind kind = storage_kind::file) {
    auto opts = options(node);
    opts.kind = kind;
    auto h = spawn_storage_loader(sys, opts);
    spawned.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }

  fs::path dir;
};

TEST_F(ExchangerLoaders, ModelsTravelAsFileReferences) {
  auto router = spawn_router();
  auto learner_model = std::make_shared<fake_model>();
  learner_model->current = weights(2.5f);
  auto collector_model = std::make_shared<fake_model>();
  collector_model->current = weights(0.f);
  model_exchanger_options lo;
  lo.model_loader = model_loader(0);
  model_exchanger_options co;
  co.model_loader = model_loader(2);
  pipeline lp;
  lp.use(gate()).use(model_exchanger(learner_model, lo));
  pipeline cp;
  cp.use(model_exchanger(collector_model, co));
  auto c = spawn_role(router, 2, {role::collector}, std::move(cp));
  auto l = spawn_role(router, 0, {role::learner}, std::move(lp));
  start({c, l});
  // The learner stored its snapshot in a file; the collector loaded it.
  EXPECT_EQ(files(0), 1u);
  ASSERT_EQ(collector_model->loads, 1);
  EXPECT_EQ(collector_model->current.data, learner_model->current.data);
  EXPECT_EQ(collector_model->current.version, 1);
  EXPECT_EQ(state_of(c).ctx.model_version, 1);
  EXPECT_EQ(logs.count("error"), 0u);
}

TEST_F(ExchangerLoaders, ADeletedModelFileWarnsAndTheWaitGoesOn) {
  auto router = spawn_router();
  auto model = std::make_shared<fake_model>();
  model->current = weights(0.f);
  model_exchanger_options co;
  co.model_loader = model_loader(2);
  co.timeout = 60s;
  pipeline cp;
  cp.use(model_exchanger(model, co));
  auto c = spawn_role(router, 2, {role::collector}, std::move(cp));
  start({c});
  ASSERT_TRUE(state_of(c).pending); // iteration 1 waits for a model
  // A reference to a file the learner's TTL already removed.
  auto x = weights(7.f);
  x.sender = 0;
  x.incarnation = 5;
  x.version = 3;
  storage_options so;
  so.dirname = dir.string();
  auto ref = store(so, x);
  ASSERT_TRUE(ref);
  ASSERT_FALSE(remove_storage(*ref));
  publish(router, model_topic, 0, *ref);
  EXPECT_EQ(logs.count("Model file has been deleted on node 2, maybe you can "
                       "increase the ttl."),
            1u);
  EXPECT_EQ(model->loads, 0);
  EXPECT_TRUE(state_of(c).pending) << "the wait must go on";
  advance(30s);
  EXPECT_TRUE(state_of(c).pending) << "within the same 60 s budget";
  // The next (intact) reference is loaded.
  auto ref2 = store(so, x);
  ASSERT_TRUE(ref2);
  publish(router, model_topic, 0, *ref2);
  EXPECT_EQ(model->loads, 1);
  EXPECT_EQ(model->current.data, x.data);
  EXPECT_EQ(logs.count("Timeout when waiting for new model"), 0u);
  remove_storage(*ref2);
}

TEST_F(ExchangerLoaders, AReferenceWithoutALoaderIsDroppedLoudly) {
  auto router = spawn_router();
  auto model = std::make_shared<fake_model>();
  pipeline cp;
  cp.use(model_exchanger(model));
  auto c = spawn_role(router, 2, {role::collector}, std::move(cp));
  start({c});
  storage_ref ref;
  ref.path = "/nonexistent";
  publish(router, model_topic, 0, ref);
  EXPECT_EQ(logs.count("Storage loader is not defined when data is a storage "
                       "object."),
            1u);
  EXPECT_EQ(state_of(c).rep.models_dropped, 1);
}

TEST_F(ExchangerLoaders, PeriodicalExchangerWithALoaderKeepsIds) {
  auto router = spawn_router();
  auto sender_model = std::make_shared<fake_model>();
  sender_model->current = weights(1.f);
  auto receiver_model = std::make_shared<fake_model>();
  receiver_model->current = weights(0.f);
  periodical_model_exchanger_options so;
  so.mode = exchange_mode::send;
  so.period = 1;
  so.model_loader = model_loader(0);
  periodical_model_exchanger_options ro;
  ro.mode = exchange_mode::receive;
  ro.model_loader = model_loader(2);
  pipeline sp;
  sp.use(gate()).use(periodical_model_exchanger(sender_model, so));
  pipeline rp;
  rp.use(periodical_model_exchanger(receiver_model, ro));
  auto r = spawn_role(router, 2, {role::collector}, std::move(rp));
  auto s = spawn_role(router, 0, {role::learner}, std::move(sp));
  start({r, s});
  // DI-engine's receiver raised TypeError on a bare Storage; here the
  // stored snapshot keeps its id.
  ASSERT_EQ(receiver_model->loads, 1);
  EXPECT_EQ(receiver_model->current.version, 0);
  EXPECT_EQ(receiver_model->current.data, sender_model->current.data);
}

// A collector that puts `items` integers (4 bytes each and more once
// encoded) and 10 env steps into each iteration's context.
middleware collect_ints(std::uint32_t node, int items) {
  middleware m;
  m.name = "collect";
  m.before = [node, items](context& ctx) -> step {
    ctx.env_step += 10;
    ctx.trajectories = {pack(std::vector<int>(items, 1), node)};
    ctx.trajectory_end_idx = {items - 1};
    return proceed;
  };
  return m;
}

// Above loader_options::inline_below (64 KiB): 80,000 bytes of payload.
constexpr int large = 20'000;

TEST_F(ExchangerLoaders, ContextTravelsAsReferencesAndIsSummed) {
  auto router = spawn_router();
  context_exchanger_options co;
  co.storage_loader = storage_loader(2);
  context_exchanger_options lo;
  lo.storage_loader = storage_loader(0);
  pipeline cp;
  cp.use(gate()).use(context_exchanger(co)).use(collect_ints(2, large));
  pipeline lp;
  lp.use(context_exchanger(lo));
  auto l = spawn_role(router, 0, {role::learner}, std::move(lp));
  auto c = spawn_role(router, 2, {role::collector}, std::move(cp));
  start({l, c});
  EXPECT_EQ(files(2), 1u);
  auto& ctx = state_of(l).ctx;
  EXPECT_EQ(ctx.env_step, 10);
  // (renew() already cleared the merged trajectories for the next round.)
  EXPECT_EQ(state_of(l).rep.trajectories_received, large);
  EXPECT_EQ(state_of(l).rep.deltas_received, 1);
}

// Issue 24: a delta below loader_options::inline_below travels as itself
// (one shm segment per 760-byte delta made 984 segments in one run); a
// larger one is still stored. Both are acknowledged alike.
TEST_F(ExchangerLoaders, SmallDeltasTravelInlineAndLargeOnesAreStored) {
  for (auto kind : {storage_kind::file, storage_kind::shm}) {
    SCOPED_TRACE(kind == storage_kind::shm ? "shm" : "file");
    auto router = spawn_router();
    context_exchanger_options lo;
    lo.storage_loader = storage_loader(0, kind);
    pipeline lp;
    lp.use(context_exchanger(lo));
    auto l = spawn_role(router, 0, {role::learner}, std::move(lp));
    std::vector<std::shared_ptr<context_exchange_stats>> stats;
    std::vector<role_actor> cs;
    for (auto [node, items] : {std::pair{2u, 3}, std::pair{3u, large}}) {
      context_exchanger_options co;
      co.storage_loader = storage_loader(node, kind);
      co.stats = stats.emplace_back(std::make_shared<context_exchange_stats>());
      pipeline cp;
      cp.use(gate()).use(context_exchanger(co)).use(collect_ints(node, items));
      cs.push_back(spawn_role(router, node, {role::collector}, std::move(cp)));
    }
    start({l, cs[0], cs[1]});
    EXPECT_EQ(files(2, kind), 0u) << "a small delta made a segment or file";
    EXPECT_EQ(files(3, kind), 1u) << "a large delta must still be stored";
    EXPECT_EQ(state_of(l).ctx.env_step, 20);
    EXPECT_EQ(state_of(l).rep.deltas_received, 2);
    EXPECT_EQ(state_of(l).rep.trajectories_received, 3 + large);
    for (auto& x : stats) {
      EXPECT_EQ(x->deltas_sent, 1u);
      EXPECT_EQ(x->acks_received, 1u) << "each delta is acknowledged";
    }
    for (auto& h : spawned)
      caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
    spawned.clear();
    run();
    EXPECT_EQ(files(3, kind), 0u) << "a stopped loader removes what it kept";
  }
}

} // namespace

// A loader publishes straight to the router; the node's done waits for the
// loader to flush, so what the last iteration stored still reaches the
// learner before anyone stops.
TEST_F(ExchangerLoaders, TheLastIterationsStoredContextIsNotLost) {
  auto router = spawn_router();
  context_exchanger_options lo;
  lo.storage_loader = storage_loader(0);
  pipeline lp;
  lp.use(context_exchanger(lo));
  auto l = spawn_role(router, 0, {role::learner}, std::move(lp));
  context_exchanger_options co;
  co.storage_loader = storage_loader(2);
  middleware collect;
  collect.name = "collect";
  collect.before = [](context& ctx) -> step {
    ctx.env_step += 7;
    ctx.trajectories = {pack(std::vector<int>{1, 2, 3, 4, 5, 6, 7}, 2)};
    return proceed;
  };
  pipeline cp;
  cp.use(context_exchanger(co)).use(std::move(collect));
  // One iteration, then the collector ends the run: its only delta goes
  // through the loader after its finish.
  auto c = spawn_role(router, 2, {role::collector}, std::move(cp), 1);
  start({l, c});
  auto reps = reports();
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_EQ(reps[2].env_step, 7);
  EXPECT_EQ(reps[0].env_step, 7);
  EXPECT_EQ(reps[0].trajectories_received, 7);
}
