// The PPO cluster's work as middleware (see roles.hpp): what a collector,
// the learner and the evaluator do in each of their iterations.

#include "roles.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/torch/checkpoint.hpp"
#include "dice/torch/model.hpp"

#include "evals.hpp"

#include <deque>
#include <sstream>

namespace ppo {

using demo::clock_type;
using demo::fixed;
using demo::json;

/// Writes `net`'s state_dict as a checkpoint Python's `torch.load` reads
/// (a dict of tensors; dice::save_pytorch_checkpoint, docs/storage.md), through
/// a temporary file and a rename. Throws std::runtime_error.
void save_actor_critic(actor_critic& net, const std::string& path) {
  auto snap = dice::to_snapshot(*net);
  if (!snap)
    throw std::runtime_error(dice::render(snap.error()));
  if (auto err = dice::save_pytorch_checkpoint(*snap, path))
    throw std::runtime_error(dice::render(err));
}

/// A model's version as the PPO learner counts it: learner iterations the
/// weights have seen. The exchanger's id of the model a learner sends after
/// iteration k is k, so the version is id + 1, and 0 for the initial
/// weights (id -1: never loaded). Lag = learner version - this, exactly.
std::int64_t acting_version(const dice::context& ctx) {
  return std::max<std::int64_t>(ctx.model_version, -1) + 1;
}

// -- collector ----------------------------------------------------------------

/// Steps `envs_per_collector` CartPoles `steps_per_segment` times per
/// iteration and puts one segment per env into the context: the steps as a
/// payload stamped with the acting version, their end indices and the
/// finished episodes.
dice::middleware collect_step(std::shared_ptr<shared_run> run, actor_critic net,
                              std::uint32_t node) {
  struct state {
    std::shared_ptr<shared_run> run;
    actor_critic net;
    std::uint32_t node;
    segment_collector col;
    std::vector<double> recent_returns;
    clock_type::time_point last_metrics;
    state(std::shared_ptr<shared_run> r, actor_critic n, std::uint32_t id)
      : run(std::move(r)), net(std::move(n)), node(id),
        col(run->opts.envs_per_collector, run->opts.steps_per_segment,
            run->opts.seed * 7919 + id) {
      // nop
    }
  };
  auto st = std::make_shared<state>(std::move(run), std::move(net), node);
  dice::middleware m;
  m.name = "collect";
  m.before = [st](dice::context& ctx) -> dice::step {
    auto out = st->col.collect(st->net, st->node, acting_version(ctx));
    ctx.env_step += out.env_steps;
    ctx.env_episode += static_cast<std::int64_t>(out.finished_returns.size());
    ctx.trajectories = std::move(out.trajectories);
    ctx.episodes = std::move(out.episodes);
    ctx.trajectory_end_idx = std::move(out.trajectory_end_idx);
    for (auto r : out.finished_returns)
      st->recent_returns.push_back(r);
    auto now = clock_type::now();
    if (now - st->last_metrics >= std::chrono::seconds{1}) {
      st->last_metrics = now;
      auto mean = demo::take_mean(st->recent_returns);
      st->run->write_metrics(st->node, "collector",
                             {{"env_step", ctx.env_step},
                              {"env_episode", ctx.env_episode},
                              {"train_return_mean", demo::number(mean)},
                              {"model_version", acting_version(ctx)},
                              {"train_iter", ctx.train_iter}});
    }
    return dice::proceed;
  };
  return m;
}

// -- learner ------------------------------------------------------------------

/// Trains on every iteration's merged context: cuts the collectors'
/// payloads into segments by trajectory_end_idx, computes GAE or V-trace
/// targets and runs the PPO epochs; reads the finished episodes; reports
/// lag, intake and progress; writes latest.pt.
dice::middleware train_step(std::shared_ptr<shared_run> run, actor_critic net,
                            std::uint32_t node) {
  struct state {
    std::shared_ptr<shared_run> run;
    ppo_learner learner;
    std::uint32_t node;
    dice::node_services* svc = nullptr;
    update_stats last;
    std::deque<double> returns; // the last 100 training episodes
    std::int64_t episodes = 0;
    clock_type::time_point last_print = clock_type::now();
    clock_type::time_point last_save = clock_type::now();
    std::int64_t last_env_step = 0;
    std::int64_t last_train_iter = 0;
    // The cumulative lag count and sum at the last report (window = diff).
    std::int64_t last_lag_count = 0;
    double last_lag_sum = 0;
    state(std::shared_ptr<shared_run> r, actor_critic n, std::uint32_t id)
      : run(std::move(r)),
        learner(std::move(n), run->opts.algo, run->opts.seed * 31 + 7),
        node(id) {
      // nop
    }

    double train_return_mean() const {
      if (returns.empty())
        return std::numeric_limits<double>::quiet_NaN();
      double sum = 0;
      for (auto r : returns)
        sum += r;
      return sum / static_cast<double>(returns.size());
    }

    void save(const dice::context& ctx) {
      try {
        save_actor_critic(learner.net(),
                          demo::path_in(run->opts.out, "latest.pt"));
        demo::write_json(demo::path_in(run->opts.out, "latest.json"),
                         {{"env_step", ctx.env_step},
                          {"train_iter", ctx.train_iter}});
      } catch (const std::exception& e) {
        dice::log::error(node,
                         std::string{"cannot write latest.pt: "} + e.what());
      }
    }

    void report(const dice::context& ctx, bool final_line) {
      auto now = clock_type::now();
      double dt = std::chrono::duration<double>(now - last_print).count();
      if (!final_line && dt < 1.0)
        return;
      last_print = now;
      auto steps_per_s = static_cast<double>(ctx.env_step - last_env_step)
        / std::max(dt, 1e-9);
      last_env_step = ctx.env_step;
      last_train_iter = ctx.train_iter;
      auto& lags = learner.lags();
      auto& in = learner.intake();
      auto sum = lags.count() > 0 ? lags.mean() * lags.count() : 0.0;
      auto window_n = lags.count() - last_lag_count;
      auto window_mean = window_n > 0
        ? (sum - last_lag_sum) / window_n
        : std::numeric_limits<double>::quiet_NaN();
      last_lag_count = lags.count();
      last_lag_sum = sum;
      run->write_metrics(
        node, "learner",
        {{"train_iter", ctx.train_iter},
         {"env_step", ctx.env_step},
         {"env_steps_per_s", demo::number(steps_per_s)},
         {"grad_steps", learner.grad_steps()},
         {"policy_loss", demo::number(last.policy_loss)},
         {"value_loss", demo::number(last.value_loss)},
         {"entropy", demo::number(last.entropy)},
         {"approx_kl", demo::number(last.approx_kl)},
         {"clip_fraction", demo::number(last.clip_fraction)},
         {"train_return_mean", demo::number(train_return_mean())},
         {"lag_mean_window", demo::number(window_mean)},
         {"lag_mean", demo::number(lags.mean())},
         {"lag_p50", lags.quantile(0.5)},
         {"lag_p90", lags.quantile(0.9)},
         {"lag_max", lags.max()},
         {"steps_received", in.steps_received},
         {"steps_dropped_stale", in.steps_dropped_stale},
         {"batches_rejected", in.batches_rejected}});
      if (run->progress != nullptr) {
        auto ev = run->last_eval();
        std::ostringstream os;
        os << "[ppo " << fixed(run->seconds(), 0) << "s] iter "
           << ctx.train_iter << " | env " << ctx.env_step << " | "
           << fixed(steps_per_s, 0) << " env/s | train "
           << fixed(train_return_mean()) << " | eval "
           << (std::isnan(ev) ? "-" : fixed(ev)) << " | lag "
           << (std::isnan(window_mean) ? "-" : fixed(window_mean, 2))
           << " (p90 " << lags.quantile(0.9) << ", max " << lags.max() << ")";
        if (in.steps_dropped_stale > 0)
          os << " | dropped " << in.steps_dropped_stale;
        run->progress->show(os.str());
      }
    }

    void read_episodes(const dice::context& ctx) {
      // A payload that does not decode or check out is skipped; the
      // episodes only feed the training-return statistic.
      for (auto& p : ctx.episodes) {
        auto eps = dice::unpack<episode_record>(p);
        if (!eps)
          continue;
        for (auto& e : *eps) {
          if (!check(e).empty())
            continue;
          ++episodes;
          returns.push_back(e.ret);
          if (returns.size() > 100)
            returns.pop_front();
        }
      }
    }
  };
  auto st = std::make_shared<state>(std::move(run), std::move(net), node);
  dice::middleware m;
  m.name = "train";
  m.attach = [st](dice::node_services& svc) {
    st->svc = &svc;
  };
  m.before = [st](dice::context& ctx) -> dice::step {
    auto& run = *st->run;
    st->read_episodes(ctx);
    if (!ctx.trajectories.empty()) {
      // This iteration's weights have seen `total_step` learner
      // iterations: the version the lag is measured against.
      auto res = st->learner.learn(ctx.trajectories, ctx.trajectory_end_idx,
                                   ctx.total_step);
      if (!res) {
        dice::log::error(
          st->node, "refused a merged batch: " + dice::render(res.error()));
      } else if (res->samples > 0) {
        st->last = *res;
        ++ctx.train_iter;
      }
    }
    st->report(ctx, false);
    if (clock_type::now() - st->last_save >= std::chrono::seconds{10}) {
      st->last_save = clock_type::now();
      st->save(ctx);
    }
    demo::finish_at_limits(*st->svc, ctx.env_step, run.opts.max_env_steps,
                           run.seconds(), run.opts.max_seconds);
    return dice::proceed;
  };
  m.on_stop = [st](dice::context& ctx) {
    st->save(ctx);
    st->report(ctx, true);
    std::lock_guard<std::mutex> guard{st->run->mtx};
    auto& run = *st->run;
    run.learner_done = true;
    run.lags = st->learner.lags();
    run.intake = st->learner.intake();
    run.grad_steps = st->learner.grad_steps();
    run.train_episodes = st->episodes;
    run.train_return_mean = st->train_return_mean();
  };
  return m;
}

// -- evaluator ----------------------------------------------------------------

/// Runs greedy episodes every eval_every learner updates; keeps best.pt and
/// ends the run at the stop value (demo::eval_step with PPO's network).
dice::middleware eval_step(std::shared_ptr<shared_run> run, actor_critic net,
                           std::uint32_t node) {
  auto& opts = run->opts;
  demo::eval_settings s{opts.eval_every, opts.eval_episodes, opts.seed,
                        opts.stop_value, opts.out};
  demo::eval_hooks hooks;
  hooks.play = [net](int episodes, std::uint64_t seed) mutable {
    return evaluate_greedy(net, episodes, seed);
  };
  hooks.save = [net](const std::string& path) mutable {
    save_actor_critic(net, path);
  };
  hooks.version = acting_version;
  // Only a trained model (version > 0) can solve the run: some seeds'
  // initial weights already balance the pole when played greedily (seed 4:
  // 500).
  hooks.trained_to_solve = true;
  return demo::eval_step(std::move(run), node, std::move(s), std::move(hooks));
}

} // namespace ppo
