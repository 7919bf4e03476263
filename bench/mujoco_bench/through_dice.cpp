// mujoco_bench dice: Hopper-v4 collectors through dice, the learner
// counting and discarding what arrives.

#include "dice/dice.hpp"
#include "dice/mujoco/hopper.hpp"
#include "dice/torch/model.hpp"

#include "bench_options.hpp"
#include "mujoco_bench.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>

namespace dice::bench::mujoco {

namespace {

using clk = std::chrono::steady_clock;

/// What every model port of this process did (in one process the learner
/// prints the collectors' loads too).
struct port_totals {
  std::atomic<std::int64_t> taken{0}, loaded{0}, snapshots{0}, loads{0};
  std::atomic<std::int64_t> snapshot_ns{0}, load_ns{0};
};

port_totals totals;

/// A model port that counts and times the snapshots it takes (learner:
/// state_dict to bytes) and loads (collectors, evaluator: bytes to the
/// module): the model bytes each way and the two ends of an exchange.
class counting_port : public dice::model_port {
 public:
  explicit counting_port(dice::model_port_ptr inner)
    : inner_(std::move(inner)) {
    // nop
  }

  caf::expected<dice::model_snapshot> snapshot() override {
    auto t0 = clk::now();
    auto x = inner_->snapshot();
    if (x) {
      totals.snapshot_ns += ns_since(t0);
      totals.snapshots += 1;
      totals.taken += static_cast<std::int64_t>(x->data.size());
    }
    return x;
  }

  caf::error load(const dice::model_snapshot& x) override {
    auto t0 = clk::now();
    auto err = inner_->load(x);
    if (!err) {
      totals.load_ns += ns_since(t0);
      totals.loads += 1;
      totals.loaded += static_cast<std::int64_t>(x.data.size());
    }
    return err;
  }

 private:
  static std::int64_t ns_since(clk::time_point t0) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - t0)
      .count();
  }

  dice::model_port_ptr inner_;
};

struct config : dice::rl::ppo_run_config {
  double seconds = 5, warmup = 2;

  config() {
    make_env = [](std::size_t) {
      return std::make_unique<dice::envs::hopper>();
    };
    title = "mujoco_bench";
    collectors = 1;
    envs_per_collector = 8;
    steps_per_collect = 128;
    models.periodical = true;
    models.stale_toleration = 2;
    opt_group{custom_options_, "global"}
      .add(seconds, "seconds", "seconds measured (after --warmup)")
      .add(warmup, "warmup", "seconds before the measurement starts");
  }
};

// What the learner counts from the end of the warm-up.
struct window {
  clk::time_point t;
  std::int64_t env_step = 0, context_bytes = 0, model_bytes = 0, iters = 0;
};

struct learner_state {
  const config* cfg = nullptr;
  std::int64_t model_state_bytes = 0;
  dice::node_services* svc = nullptr;
  clk::time_point start = clk::now();
  std::int64_t context_bytes = 0, iters = 0;
  std::optional<window> w0, w1;
  std::uint32_t collectors = 0;

  window now(const dice::context& ctx) const {
    return {clk::now(), ctx.env_step, context_bytes, totals.taken.load(),
            iters};
  }
};

double mean_ms(std::int64_t ns, std::int64_t n) {
  return n > 0 ? static_cast<double>(ns) / static_cast<double>(n) / 1e6 : 0.0;
}

dice::middleware count_and_discard(std::shared_ptr<learner_state> st) {
  dice::middleware m;
  m.name = "count_and_discard";
  m.attach = [st](dice::node_services& svc) {
    st->svc = &svc;
  };
  m.before = [st](dice::context& ctx) -> dice::step {
    for (auto* list : {&ctx.trajectories, &ctx.episodes})
      for (auto& p : *list)
        st->context_bytes += static_cast<std::int64_t>(p.bytes.size());
    if (!ctx.trajectories.empty()) {
      // One model version per batch, as a training learner sends.
      ++ctx.train_iter;
      ++st->iters;
    }
    ctx.trajectories.clear();
    ctx.trajectory_end_idx.clear();
    ctx.episodes.clear();
    auto elapsed = std::chrono::duration<double>(clk::now() - st->start);
    if (!st->w0 && elapsed.count() >= st->cfg->warmup)
      st->w0 = st->now(ctx);
    if (st->w0 && !st->w1
        && clk::now() - st->w0->t
          >= std::chrono::duration<double>(st->cfg->seconds)) {
      st->w1 = st->now(ctx);
      st->svc->request_finish("measured");
    }
    return dice::proceed;
  };
  m.on_stop = [st](dice::context&) {
    if (!st->w0 || !st->w1) {
      std::fprintf(stderr, "mujoco_bench: the run ended before the window\n");
      return;
    }
    auto& a = *st->w0;
    auto& b = *st->w1;
    auto secs = std::chrono::duration<double>(b.t - a.t).count();
    print_json(
      {{"mode", "dice"},
       {"role", "learner"},
       {"collectors", st->collectors},
       {"envs_per_collector", st->cfg->envs_per_collector},
       {"hidden", st->cfg->hidden},
       {"layers", st->cfg->layers},
       {"model_bytes", st->model_state_bytes},
       {"seconds", secs},
       {"env_steps", b.env_step - a.env_step},
       {"steps_per_s", (b.env_step - a.env_step) / secs},
       {"learner_iters_per_s", (b.iters - a.iters) / secs},
       {"context_bytes_in_per_s", (b.context_bytes - a.context_bytes) / secs},
       {"model_bytes_out_per_s", (b.model_bytes - a.model_bytes) / secs},
       {"snapshot_ms_mean", mean_ms(totals.snapshot_ns, totals.snapshots)},
       {"load_ms_mean", mean_ms(totals.load_ns, totals.loads)}});
  };
  return m;
}

} // namespace

int dice_main(int argc, char** argv) {
  return dice::run<config>(
    argc, argv, [](dice::node_setup& n, const config& cfg) {
      torch::set_num_threads(1);
      auto net = make_policy(cfg.hidden, cfg.layers);
      auto port = std::make_shared<counting_port>(
        dice::model_port_of(net.ptr()));
      dice::rl::use_exchangers(n, port, cfg.models);
      if (n.role() == dice::role::learner) {
        auto st = std::make_shared<learner_state>();
        st->cfg = &cfg;
        st->model_state_bytes = state_bytes(net);
        st->collectors = n.collectors();
        n.use(count_and_discard(st));
      } else if (n.role() == dice::role::collector) {
        dice::rl::ppo_collector_options opts;
        opts.envs = cfg.envs_per_collector;
        opts.steps = cfg.steps_per_collect;
        opts.seed = static_cast<std::uint64_t>(cfg.seed) * 7919 + n.id();
        n.use(dice::rl::ppo_collector(net, cfg.make_env, opts));
      }
      n.print_report(false);
    });
}

} // namespace dice::bench::mujoco
