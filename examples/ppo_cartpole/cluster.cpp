// The PPO cluster run: collectors, learner and evaluator as dice role
// actors. Collectors send segments (trajectories, trajectory_end_idx,
// episodes) through context_exchanger; the learner trains on what several
// collectors' deltas merged into and sends its model through
// periodical_model_exchanger; collectors load it from there.

#include "dice/actors/context_exchanger.hpp"
#include "dice/actors/local_cluster.hpp"
#include "dice/actors/model_exchanger.hpp"
#include "dice/actors/node.hpp"
#include "dice/actors/periodical_model_exchanger.hpp"
#include "dice/errc.hpp"
#include "dice/log.hpp"
#include "dice/middleware.hpp"
#include "dice/torch/checkpoint.hpp"
#include "dice/torch/model.hpp"

#include "caf/actor_system.hpp"

#include "options.hpp"
#include "outputs.hpp"
#include "ppo.hpp"

#include <deque>
#include <memory>
#include <mutex>

namespace ppo {

namespace {

using demo::clock_type;
using demo::fixed;
using demo::json;

constexpr std::uint32_t learner_node = 0;
constexpr std::uint32_t evaluator_node = 1;
constexpr std::uint32_t first_collector_node = 2;

/// What the nodes of one process share: clock, metrics file, progress
/// line, evaluations, and what the learner reports at its end.
struct shared_run {
  run_options opts;
  clock_type::time_point start = clock_type::now();
  demo::metrics_log metrics;
  demo::progress_line* progress = nullptr;
  std::mutex mtx;
  std::vector<demo::eval_point> evals;
  double best = -std::numeric_limits<double>::infinity();
  double solve_seconds = -1;
  std::int64_t solve_env_steps = -1;
  // Set by the learner when it stops.
  bool learner_done = false;
  lag_summary lags;
  intake_counters intake;
  std::int64_t grad_steps = 0;
  std::int64_t train_episodes = 0;
  double train_return_mean = std::numeric_limits<double>::quiet_NaN();

  double seconds() const {
    return std::chrono::duration<double>(clock_type::now() - start).count();
  }

  void write_metrics(std::uint32_t node, const std::string& role,
                     const json& fields) {
    metrics.write(seconds(), node, role, fields);
  }

  double last_eval() {
    std::lock_guard<std::mutex> guard{mtx};
    return evals.empty() ? std::numeric_limits<double>::quiet_NaN()
                         : evals.back().mean;
  }
};

/// Writes `net`'s state_dict as a checkpoint Python's `torch.load` reads
/// (a dict of tensors; dice::save_checkpoint, docs/storage.md), through a
/// temporary file and a rename. Throws std::runtime_error.
void save_checkpoint(actor_critic& net, const std::string& path) {
  auto snap = dice::to_snapshot(*net);
  if (!snap)
    throw std::runtime_error(dice::render(snap.error()));
  if (auto err = dice::save_checkpoint(*snap, path))
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
      double mean = std::numeric_limits<double>::quiet_NaN();
      if (!st->recent_returns.empty()) {
        mean = 0;
        for (auto r : st->recent_returns)
          mean += r;
        mean /= static_cast<double>(st->recent_returns.size());
      }
      st->recent_returns.clear();
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
        save_checkpoint(learner.net(),
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
    if (run.opts.max_env_steps > 0 && ctx.env_step >= run.opts.max_env_steps
        && !st->svc->finished())
      st->svc->request_finish("max_env_steps");
    if (run.opts.max_seconds > 0 && run.seconds() >= run.opts.max_seconds
        && !st->svc->finished())
      st->svc->request_finish("max_seconds");
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
/// ends the run at the stop value.
dice::middleware eval_step(std::shared_ptr<shared_run> run, actor_critic net,
                           std::uint32_t node) {
  struct state {
    std::shared_ptr<shared_run> run;
    actor_critic net{nullptr};
    std::uint32_t node = 0;
    dice::node_services* svc = nullptr;
    std::uint64_t evals = 0;
  };
  auto st = std::make_shared<state>();
  st->run = std::move(run);
  st->net = std::move(net);
  st->node = node;
  dice::middleware m;
  m.name = "evaluate";
  m.attach = [st](dice::node_services& svc) {
    st->svc = &svc;
  };
  m.before = [st](dice::context& ctx) -> dice::step {
    auto& run = *st->run;
    if (ctx.last_eval_iter >= 0
        && ctx.train_iter - ctx.last_eval_iter < run.opts.eval_every)
      return dice::proceed;
    auto returns = evaluate_greedy(st->net, run.opts.eval_episodes,
                                   run.opts.seed * 7 + 1000003 * ++st->evals);
    auto pt = demo::make_eval_point(returns, ctx.env_step, ctx.train_iter,
                                    run.seconds());
    ctx.last_eval_iter = ctx.train_iter;
    ctx.last_eval_value = pt.mean;
    ctx.eval_value = pt.mean;
    bool best = false;
    // Only a trained model (version > 0) can solve the run: some seeds' initial
    // weights already balance the pole when played greedily (seed 4: 500).
    bool solved = pt.mean >= run.opts.stop_value && acting_version(ctx) > 0;
    {
      std::lock_guard<std::mutex> guard{run.mtx};
      run.evals.push_back(pt);
      if (pt.mean > run.best) {
        run.best = pt.mean;
        best = true;
      }
      if (solved && run.solve_seconds < 0) {
        run.solve_seconds = pt.seconds;
        run.solve_env_steps = pt.env_step;
      }
    }
    run.write_metrics(st->node, "evaluator",
                      {{"train_iter", pt.train_iter},
                       {"env_step", pt.env_step},
                       {"model_version", acting_version(ctx)},
                       {"eval_return_mean", pt.mean},
                       {"eval_return_min", pt.min},
                       {"eval_return_max", pt.max}});
    dice::log::write(
      best || solved ? dice::log::level::info : dice::log::level::debug,
      st->node,
      "eval at train_iter " + std::to_string(pt.train_iter) + ", env_step "
        + std::to_string(pt.env_step) + ": return " + fixed(pt.mean) + " (min "
        + fixed(pt.min, 0) + ", max " + fixed(pt.max, 0) + ")"
        + (best ? " new best" : ""));
    if (best) {
      try {
        save_checkpoint(st->net, demo::path_in(run.opts.out, "best.pt"));
        demo::write_json(demo::path_in(run.opts.out, "best.json"),
                         {{"eval_return", pt.mean},
                          {"env_step", pt.env_step},
                          {"train_iter", pt.train_iter}});
      } catch (const std::exception& e) {
        dice::log::error(st->node,
                         std::string{"cannot write best.pt: "} + e.what());
      }
    }
    if (solved && !st->svc->finished()) {
      dice::log::info(st->node,
                      "stop value " + fixed(run.opts.stop_value)
                        + " reached after " + fixed(pt.seconds, 2) + " s");
      st->svc->request_finish("stop_value");
    }
    return dice::proceed;
  };
  return m;
}

// -- wiring -------------------------------------------------------------------

/// The learner sends every `model_period` iterations.
dice::middleware learner_models(actor_critic net, const run_options& opts) {
  dice::periodical_model_exchanger_options o;
  o.mode = dice::exchange_mode::send;
  o.period = opts.model_period;
  return dice::periodical_model_exchanger(dice::model_port_of(net.ptr()), o);
}

/// A collector loads models as they come and acts with one for at most
/// `stale_toleration` iterations.
dice::middleware collector_models(actor_critic net, const run_options& opts) {
  dice::periodical_model_exchanger_options o;
  o.mode = dice::exchange_mode::receive;
  o.period = opts.model_period;
  o.stale_toleration = opts.stale_toleration;
  return dice::periodical_model_exchanger(dice::model_port_of(net.ptr()), o);
}

/// Fills what the learner and evaluator recorded into `sum`.
void collect_results(shared_run& run, run_summary& sum) {
  std::lock_guard<std::mutex> guard{run.mtx};
  sum.evals = run.evals;
  if (!run.evals.empty()) {
    sum.best_eval = run.best;
    sum.last_eval = run.evals.back().mean;
  }
  sum.solved = run.solve_seconds >= 0;
  sum.solve_seconds = run.solve_seconds;
  sum.solve_env_steps = run.solve_env_steps;
  sum.vtrace = run.opts.algo.vtrace;
  if (!run.learner_done)
    return;
  auto& l = run.lags;
  sum.lag_mean = l.mean();
  sum.lag_min = l.min();
  sum.lag_max = l.max();
  sum.lag_p50 = l.quantile(0.5);
  sum.lag_p90 = l.quantile(0.9);
  sum.lag_histogram = l.histogram();
  while (!sum.lag_histogram.empty() && sum.lag_histogram.back() == 0)
    sum.lag_histogram.pop_back();
  sum.steps_received = run.intake.steps_received;
  sum.steps_dropped_stale = run.intake.steps_dropped_stale;
  sum.segments_dropped_stale = run.intake.segments_dropped_stale;
  sum.payloads_rejected = run.intake.payloads_rejected;
  sum.batches_rejected = run.intake.batches_rejected;
  sum.grad_steps = run.grad_steps;
  sum.train_episodes = run.train_episodes;
  sum.train_return_mean = run.train_return_mean;
}

json summary_object(const run_summary& x);

void write_summary(const run_options& opts, const run_summary& sum,
                   const std::string& name, std::uint32_t node) {
  try {
    demo::write_json(demo::path_in(opts.out, name), summary_object(sum));
  } catch (const std::exception& e) {
    dice::log::error(node, std::string{"cannot write summary: "} + e.what());
  }
}

caf::error open_outputs(shared_run& run, const std::string& metrics_name) {
  if (auto err = demo::make_run_dir(run.opts.out))
    return err;
  return run.metrics.open(demo::path_in(run.opts.out, metrics_name), false);
}

std::string describe(const run_options& opts) {
  return std::string{opts.algo.vtrace ? "V-trace" : "GAE"} + " targets"
    + (opts.algo.max_lag >= 0 ? ", max lag " + std::to_string(opts.algo.max_lag)
                              : std::string{})
    + ", model period " + std::to_string(opts.model_period)
    + ", stale toleration " + std::to_string(opts.stale_toleration) + ", seed "
    + std::to_string(opts.seed) + ", out " + opts.out;
}

} // namespace

caf::expected<run_summary> run_training(caf::actor_system& sys,
                                        const run_options& opts) {
  auto run = std::make_shared<shared_run>();
  run->opts = opts;
  if (auto err = open_outputs(*run, "metrics.jsonl"))
    return err;
  std::vector<dice::local_node> nodes;
  try {
    torch::manual_seed(opts.seed);
    // Every node holds its own copy of the network; the exchangers keep the
    // copies in step with the learner's.
    actor_critic learner_net{opts.algo.hidden};
    actor_critic eval_net{opts.algo.hidden};
    copy_weights(eval_net, learner_net);
    auto add = [&](std::uint32_t id, dice::role r, dice::middleware models,
                   dice::middleware work) {
      dice::pipeline p;
      p.use(dice::context_exchanger())
        .use(std::move(models))
        .use(std::move(work));
      nodes.push_back(dice::local_node{id, {r}, std::move(p)});
    };
    add(learner_node, dice::role::learner, learner_models(learner_net, opts),
        train_step(run, learner_net, learner_node));
    add(evaluator_node, dice::role::evaluator,
        dice::model_exchanger(dice::model_port_of(eval_net.ptr())),
        eval_step(run, eval_net, evaluator_node));
    for (std::uint32_t i = 0; i < opts.collectors; ++i) {
      auto id = first_collector_node + i;
      actor_critic net{opts.algo.hidden};
      copy_weights(net, learner_net);
      add(id, dice::role::collector, collector_models(net, opts),
          collect_step(run, net, id));
    }
  } catch (const std::exception& e) {
    return dice::make_error(dice::errc::invalid_config,
                            std::string{"cannot build the nodes: "} + e.what());
  }
  dice::log::info(learner_node,
                  "PPO on CartPole-v1: 1 learner, 1 evaluator, "
                    + std::to_string(opts.collectors) + " collectors x "
                    + std::to_string(opts.envs_per_collector) + " envs x "
                    + std::to_string(opts.steps_per_segment) + " steps, "
                    + describe(opts));
  dice::local_run_options lro;
  lro.print_reports = false;
  if (opts.max_seconds > 0)
    lro.deadline = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(opts.max_seconds + 120));
  caf::expected<std::vector<dice::node_report>> reports{caf::error{}};
  {
    demo::progress_line progress{opts.progress};
    run->progress = opts.progress ? &progress : nullptr;
    run->start = clock_type::now();
    reports = dice::run_local(sys, std::move(nodes), lro);
    run->progress = nullptr;
  }
  if (!reports)
    return reports.error();
  run_summary sum;
  sum.seconds = run->seconds();
  for (auto& rep : *reports) {
    if (rep.node == learner_node) {
      sum.env_steps = rep.env_step;
      sum.train_iters = rep.train_iter;
      sum.learner_iterations = rep.iterations;
      sum.stop_reason = rep.stop_reason;
    }
    dice::log::info(rep.node, "report " + dice::to_json(rep));
  }
  collect_results(*run, sum);
  demo::write_eval_plot(opts.out, sum.evals, "PPO CartPole-v1", opts.stop_value,
                        opts.plot, evaluator_node);
  write_summary(opts, sum, "summary.json", learner_node);
  return sum;
}

caf::expected<run_summary> run_node(caf::actor_system& sys,
                                    const run_options& opts,
                                    const dice::node_config& cfg) {
  auto run = std::make_shared<shared_run>();
  run->opts = opts;
  auto roles = cfg.roles.empty() ? dice::default_roles(cfg.index, cfg.workers)
                                 : cfg.roles;
  auto id = cfg.id;
  // One pipeline per process; a node with several roles runs the first of
  // learner, evaluator, collector.
  auto role = roles.has(dice::role::learner) ? dice::role::learner
    : roles.has(dice::role::evaluator)       ? dice::role::evaluator
                                             : dice::role::collector;
  // Without an evaluator node (2 nodes) the learner evaluates.
  bool evaluates = role == dice::role::evaluator
    || (role == dice::role::learner && cfg.workers == 2);
  if (auto err = open_outputs(*run, "metrics-" + std::to_string(id) + ".jsonl"))
    return err;
  auto node = dice::node::start(sys, cfg);
  if (!node)
    return node.error();
  dice::pipeline pipe;
  try {
    // Same seed, same construction: every process starts from the same
    // weights as the learner (the in-process run copies them instead).
    torch::manual_seed(opts.seed);
    actor_critic net{opts.algo.hidden};
    pipe.use(dice::context_exchanger());
    switch (role) {
      case dice::role::learner:
        pipe.use(learner_models(net, opts)).use(train_step(run, net, id));
        if (evaluates)
          pipe.use(eval_step(run, net, id));
        break;
      case dice::role::evaluator:
        pipe.use(dice::model_exchanger(dice::model_port_of(net.ptr())))
          .use(eval_step(run, net, id));
        break;
      default:
        pipe.use(collector_models(net, opts)).use(collect_step(run, net, id));
    }
  } catch (const std::exception& e) {
    node->stop();
    return dice::make_error(dice::errc::invalid_config,
                            std::string{"cannot build the node: "} + e.what());
  }
  dice::log::info(id,
                  "PPO on CartPole-v1: node " + std::to_string(id) + " of "
                    + std::to_string(cfg.workers) + ", "
                    + dice::to_string(dice::role_set{role}) + ", "
                    + describe(opts));
  dice::node_run_options nro;
  if (opts.max_seconds > 0)
    nro.deadline = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(opts.max_seconds + 120));
  caf::expected<dice::node_report> rep{caf::error{}};
  {
    // Only the learner shows the progress line (the others know less).
    bool show = opts.progress && role == dice::role::learner;
    demo::progress_line progress{show};
    run->progress = show ? &progress : nullptr;
    run->start = clock_type::now();
    rep = node->run(std::move(pipe), nro);
    run->progress = nullptr;
  }
  node->stop();
  if (!rep)
    return rep.error();
  run_summary sum;
  sum.node = id;
  sum.roles = dice::to_string(dice::role_set{role});
  sum.seconds = run->seconds();
  sum.env_steps = rep->env_step;
  sum.train_iters = rep->train_iter;
  sum.learner_iterations = role == dice::role::learner ? rep->iterations : 0;
  sum.stop_reason = rep->stop_reason;
  collect_results(*run, sum);
  if (evaluates)
    demo::write_eval_plot(opts.out, sum.evals, "PPO CartPole-v1",
                          opts.stop_value, opts.plot, id);
  write_summary(opts, sum, "summary-" + std::to_string(id) + ".json", id);
  return sum;
}

caf::expected<std::vector<double>> run_eval_only(const std::string& checkpoint,
                                                 const run_options& opts) {
  actor_critic net{opts.algo.hidden};
  // Names, shapes and dtypes are checked before anything is written.
  auto snap = dice::load_checkpoint(checkpoint);
  auto err = snap ? dice::load_snapshot(*net, *snap) : snap.error();
  if (err)
    return dice::make_error(dice::errc::invalid_config,
                            "cannot load " + checkpoint + ": "
                              + dice::render(err));
  return evaluate_greedy(net, opts.eval_episodes, opts.seed);
}

void set_threads(int n) {
  torch::set_num_threads(std::max(n, 1));
}

namespace {

json summary_object(const run_summary& x) {
  json j;
  if (!x.roles.empty()) {
    j["node"] = x.node;
    j["roles"] = x.roles;
  }
  j["solved"] = x.solved;
  j["solve_seconds"] = x.solve_seconds;
  j["solve_env_steps"] = x.solve_env_steps;
  j["best_eval"] = demo::number(x.best_eval);
  j["last_eval"] = demo::number(x.last_eval);
  j["evaluations"] = x.evals.size();
  j["env_steps"] = x.env_steps;
  j["train_iters"] = x.train_iters;
  j["seconds"] = x.seconds;
  j["env_steps_per_s"] = demo::number(x.env_steps_per_s());
  // What only the learner knows (absent from evaluator and collector
  // summaries rather than zero there).
  if (x.roles.empty() || x.roles == "learner") {
    j["grad_steps"] = x.grad_steps;
    j["learner_iterations"] = x.learner_iterations;
    j["targets"] = x.vtrace ? "vtrace" : "gae";
    j["lag_mean"] = demo::number(x.lag_mean);
    j["lag_min"] = x.lag_min;
    j["lag_p50"] = x.lag_p50;
    j["lag_p90"] = x.lag_p90;
    j["lag_max"] = x.lag_max;
    j["lag_histogram"] = x.lag_histogram;
    j["steps_received"] = x.steps_received;
    j["steps_dropped_stale"] = x.steps_dropped_stale;
    j["segments_dropped_stale"] = x.segments_dropped_stale;
    j["payloads_rejected"] = x.payloads_rejected;
    j["batches_rejected"] = x.batches_rejected;
    j["train_episodes"] = x.train_episodes;
    j["train_return_mean"] = demo::number(x.train_return_mean);
  }
  j["stop_reason"] = x.stop_reason;
  return j;
}

} // namespace

std::string to_json(const run_summary& x) {
  return demo::dump(summary_object(x));
}

std::string to_string(const run_summary& x) {
  std::ostringstream os;
  os << "== PPO CartPole-v1";
  if (!x.roles.empty())
    os << ", node " << x.node << " (" << x.roles << ")";
  os << " ==\n";
  if (x.roles == "collector")
    return os.str() + "env steps:         " + std::to_string(x.env_steps) + " ("
      + fixed(x.env_steps_per_s(), 0) + "/s)\nstop reason:       "
      + x.stop_reason + "\nwall time:         " + fixed(x.seconds, 2) + " s\n";
  if (x.roles == "learner" && x.evals.empty())
    os << "evaluations:       on the evaluator node (its summary)\n";
  else
    os << "solved:            "
       << (x.solved ? "yes, after " + fixed(x.solve_seconds, 2) + " s and "
               + std::to_string(x.solve_env_steps) + " env steps"
                    : std::string{"no"})
       << "\nbest / last eval:  " << fixed(x.best_eval) << " / "
       << fixed(x.last_eval) << " (" << x.evals.size() << " evaluations)\n";
  os << "stop reason:       " << x.stop_reason << "\n"
     << "env steps:         " << x.env_steps << " ("
     << fixed(x.env_steps_per_s(), 0) << "/s)\n";
  if (x.roles.empty() || x.roles == "learner")
    os << "learner:           " << x.train_iters << " updates, " << x.grad_steps
       << " gradient steps, " << x.learner_iterations << " iterations, "
       << (x.vtrace ? "V-trace" : "GAE") << " targets\n"
       << "policy lag:        mean " << fixed(x.lag_mean, 2) << ", p50 "
       << x.lag_p50 << ", p90 " << x.lag_p90 << ", max " << x.lag_max
       << " learner iterations\n"
       << "dropped (max lag): " << x.steps_dropped_stale << " steps in "
       << x.segments_dropped_stale << " segments\n";
  os << "wall time:         " << fixed(x.seconds, 2) << " s\n";
  return os.str();
}

} // namespace ppo
