// The PPO cluster run: collectors, learner and evaluator as dice role
// actors. Collectors send segments (trajectories, trajectory_end_idx,
// episodes) through context_exchanger; the learner trains on what several
// collectors' deltas merged into and sends its model through
// periodical_model_exchanger; collectors load it from there.

#include "dice/core/errc.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/exchangers/periodical_model_exchanger.hpp"
#include "dice/logging/log.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/runtime/node.hpp"
#include "dice/torch/checkpoint.hpp"
#include "dice/torch/model.hpp"

#include "caf/actor_system.hpp"

#include "options.hpp"
#include "outputs.hpp"
#include "ppo.hpp"
#include "role_pipeline.hpp"
#include "roles.hpp"

#include <deque>
#include <memory>
#include <mutex>

namespace ppo {

// -- model exchangers (declared in roles.hpp) ---------------------------------

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

namespace {

using demo::clock_type;
using demo::fixed;
using demo::json;

constexpr std::uint32_t learner_node = 0;
constexpr std::uint32_t evaluator_node = 1;
constexpr std::uint32_t first_collector_node = 2;

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
  // One pipeline per process (demo::main_role).
  auto role = demo::main_role(roles);
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
    demo::use_role(pipe, {role, true, evaluates}, run, net, id);
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
  auto snap = dice::load_pytorch_checkpoint(checkpoint);
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
