// PPO's trainer middleware (see ppo_agent.hpp).

#include "dice/logging/log.hpp"
#include "dice/pipeline/node_services.hpp"
#include "dice/rl/files.hpp"
#include "dice/rl/ppo_agent.hpp"

#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace dice::rl {

namespace {

using clock_type = std::chrono::steady_clock;

struct ppo_trainer_state {
  ppo_trainer_options opts;
  ppo_learner learner;
  std::shared_ptr<run_outputs> out;
  std::shared_ptr<ppo_trainer_stats> stats;
  node_services* svc = nullptr;
  update_stats last;
  std::int64_t updates = 0;
  std::deque<double> returns; // the last 100 training episodes
  std::int64_t episodes = 0;
  clock_type::time_point last_print = clock_type::now();
  clock_type::time_point last_save = clock_type::now();
  clock_type::time_point start = clock_type::now();
  std::int64_t last_env_step = 0;
  // The cumulative lag count and sum at the last report (window = diff).
  std::int64_t last_lag_count = 0;
  double last_lag_sum = 0;

  ppo_trainer_state(actor_critic net, ppo_trainer_options o)
    : opts(o), learner(std::move(net), o.ppo, o.seed * 31 + 7) {
    // nop
  }

  std::uint32_t node() const {
    return svc != nullptr ? svc->node_id() : 0;
  }

  double train_return_mean() const {
    if (returns.empty())
      return std::numeric_limits<double>::quiet_NaN();
    double sum = 0;
    for (auto r : returns)
      sum += r;
    return sum / static_cast<double>(returns.size());
  }

  void read_episodes(const context& ctx) {
    // Episodes feed only the training-return statistic: a payload that does
    // not decode or check out is skipped.
    for (auto& p : ctx.episodes) {
      auto eps = unpack<episode_record>(p);
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

  void save(const context& ctx) {
    if (!out)
      return;
    auto err = save_checkpoint(learner.net(), out->path("latest.pt"));
    if (!err)
      err = write_json(out->path("latest.json"),
                       {{"env_step", ctx.env_step},
                        {"train_iter", ctx.train_iter},
                        {"env_episode", ctx.env_episode}});
    if (err)
      log::error(node(), "cannot write latest.pt: " + render(err));
  }

  void publish_stats() {
    if (!stats)
      return;
    stats->updates = updates;
    stats->last = last;
    stats->lags = learner.lags();
    stats->intake = learner.intake();
    stats->grad_steps = learner.grad_steps();
    stats->episodes = episodes;
    stats->train_return_mean = train_return_mean();
  }

  void report(const context& ctx, bool final_line) {
    auto now = clock_type::now();
    double dt = std::chrono::duration<double>(now - last_print).count();
    if (!out || (!final_line && dt < opts.report_every))
      return;
    last_print = now;
    auto steps_per_s = static_cast<double>(ctx.env_step - last_env_step)
      / std::max(dt, 1e-9);
    last_env_step = ctx.env_step;
    auto& lags = learner.lags();
    auto& in = learner.intake();
    auto sum = lags.count() > 0 ? lags.mean() * lags.count() : 0.0;
    auto window_n = lags.count() - last_lag_count;
    auto window_mean = window_n > 0 ? (sum - last_lag_sum) / window_n
                                    : std::numeric_limits<double>::quiet_NaN();
    last_lag_count = lags.count();
    last_lag_sum = sum;
    out->metrics(node(), "learner",
                 {{"train_iter", ctx.train_iter},
                  {"env_step", ctx.env_step},
                  {"env_steps_per_s", number(steps_per_s)},
                  {"grad_steps", learner.grad_steps()},
                  {"policy_loss", number(last.policy_loss)},
                  {"value_loss", number(last.value_loss)},
                  {"entropy", number(last.entropy)},
                  {"approx_kl", number(last.approx_kl)},
                  {"clip_fraction", number(last.clip_fraction)},
                  {"train_return_mean", number(train_return_mean())},
                  {"lag_mean_window", number(window_mean)},
                  {"lag_mean", number(lags.mean())},
                  {"lag_p50", lags.quantile(0.5)},
                  {"lag_p90", lags.quantile(0.9)},
                  {"lag_max", lags.max()},
                  {"steps_received", in.steps_received},
                  {"steps_dropped_stale", in.steps_dropped_stale},
                  {"batches_rejected", in.batches_rejected}});
    if (final_line)
      return;
    auto ev = out->last_eval();
    std::ostringstream os;
    os << "[" << out->options().title << " " << fixed(out->seconds(), 0)
       << "s] iter " << ctx.train_iter << " | env " << ctx.env_step << " | "
       << fixed(steps_per_s, 0) << " env/s | train "
       << fixed(train_return_mean()) << " | eval "
       << (std::isnan(ev) ? "-" : fixed(ev)) << " | lag "
       << (std::isnan(window_mean) ? "-" : fixed(window_mean, 2)) << " (p90 "
       << lags.quantile(0.9) << ", max " << lags.max() << ")";
    if (in.steps_dropped_stale > 0)
      os << " | dropped " << in.steps_dropped_stale;
    out->progress(os.str());
  }

  // What only the learner knows goes into the run's summary.
  void summarize() {
    if (!out)
      return;
    auto& l = learner.lags();
    auto& in = learner.intake();
    auto hist = l.histogram();
    while (!hist.empty() && hist.back() == 0)
      hist.pop_back();
    bool vtrace = learner.options().vtrace;
    json j{{"grad_steps", learner.grad_steps()},
           {"targets", vtrace ? "vtrace" : "gae"},
           {"lag_mean", number(l.mean())},
           {"lag_min", l.min()},
           {"lag_p50", l.quantile(0.5)},
           {"lag_p90", l.quantile(0.9)},
           {"lag_max", l.max()},
           {"lag_histogram", hist},
           {"steps_received", in.steps_received},
           {"steps_dropped_stale", in.steps_dropped_stale},
           {"segments_dropped_stale", in.segments_dropped_stale},
           {"steps_dropped_future", in.steps_dropped_future},
           {"payloads_rejected", in.payloads_rejected},
           {"batches_rejected", in.batches_rejected},
           {"train_episodes", episodes},
           {"train_return_mean", number(train_return_mean())}};
    std::ostringstream os;
    os << "learner:           " << updates << " updates, "
       << learner.grad_steps() << " gradient steps, "
       << (vtrace ? "V-trace" : "GAE") << " targets\n"
       << "policy lag:        mean " << fixed(l.mean(), 2) << ", p50 "
       << l.quantile(0.5) << ", p90 " << l.quantile(0.9) << ", max " << l.max()
       << " learner iterations\n"
       << "dropped (max lag): " << in.steps_dropped_stale << " steps in "
       << in.segments_dropped_stale << " segments\n";
    out->summarize(node(), std::move(j), os.str());
  }
};

} // namespace

middleware ppo_trainer(actor_critic net, ppo_trainer_options opts,
                       std::shared_ptr<run_outputs> out,
                       std::shared_ptr<ppo_trainer_stats> stats) {
  if (opts.resume && out) {
    // A missing latest.pt starts afresh; one that does not fit is an error.
    auto path = out->path("latest.pt");
    if (std::ifstream{path}.good())
      if (auto err = load_checkpoint(net, path))
        throw std::runtime_error(render(err));
  }
  auto st = std::make_shared<ppo_trainer_state>(std::move(net), opts);
  st->out = std::move(out);
  st->stats = std::move(stats);
  middleware m;
  m.name = "ppo_train";
  m.attach = [st](node_services& svc) {
    st->svc = &svc;
  };
  m.before = [st](context& ctx) -> step {
    if (ctx.total_step == 0 && st->out && st->out->resumed().resumed) {
      auto& r = st->out->resumed();
      ctx.env_step += r.env_step;
      ctx.env_episode += r.env_episode;
      ctx.train_iter = std::max(ctx.train_iter, r.train_iter);
      st->last_env_step = ctx.env_step;
    }
    st->read_episodes(ctx);
    if (!ctx.trajectories.empty()) {
      // This iteration's weights have seen `total_step` learner
      // iterations: the version the lag is measured against.
      double cpu = 0;
      auto res = [&] {
        cpu_span span{cpu};
        return st->learner.learn(ctx.trajectories, ctx.trajectory_end_idx,
                                 ctx.total_step);
      }();
      if (st->out)
        st->out->add_cpu("learner", cpu);
      if (!res) {
        log::error(st->node(),
                   "refused a merged batch: " + render(res.error()));
      } else if (res->samples > 0) {
        st->last = *res;
        ++st->updates;
        ++ctx.train_iter;
      }
    }
    st->publish_stats();
    st->report(ctx, false);
    auto every = st->opts.checkpoint_every;
    if (every > 0
        && clock_type::now() - st->last_save
          >= std::chrono::duration<double>(every)) {
      st->last_save = clock_type::now();
      st->save(ctx);
    }
    auto secs = st->out
      ? st->out->seconds()
      : std::chrono::duration<double>(clock_type::now() - st->start).count();
    finish_at_limits(*st->svc, ctx.env_step, st->opts.max_env_steps, secs,
                     st->opts.max_seconds);
    return proceed;
  };
  m.on_stop = [st](context& ctx) {
    st->save(ctx);
    st->report(ctx, true);
    st->publish_stats();
    st->summarize();
  };
  return m;
}

} // namespace dice::rl
