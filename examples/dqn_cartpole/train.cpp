// The distributed DQN run: wires learner, evaluator and collectors as dice
// role actors, and reports progress, metrics, checkpoints and the plot.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/exchangers/learner_hello.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/runtime/node.hpp"
#include "dice/exchangers/periodical_model_exchanger.hpp"
#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/runtime/middleware.hpp"
#include "dice/torch/model.hpp"

#include "caf/actor_system.hpp"

#include "cartpole.hpp"
#include "dqn.hpp"
#include "evals.hpp"
#include "group.hpp"
#include "options.hpp"
#include "outputs.hpp"
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>

namespace dqn {

namespace {

constexpr std::uint32_t learner_node = 0;
constexpr std::uint32_t evaluator_node = 1;
constexpr std::uint32_t first_collector_node = 2;

using demo::clock_type;
using demo::fixed;
using demo::json;

/// What every node of one in-process run shares: the clock, the metrics
/// file, the evaluation history and the progress line.
struct shared_run {
  run_options opts;
  clock_type::time_point start = clock_type::now();
  std::mutex mtx;
  demo::metrics_log metrics;
  std::vector<eval_point> evals;
  double best = -std::numeric_limits<double>::infinity();
  double solve_seconds = -1;
  std::int64_t solve_env_steps = -1;
  // Policy lag over every trajectory the learner received.
  std::int64_t lag_min = std::numeric_limits<std::int64_t>::max();
  std::int64_t lag_max = 0;
  double lag_sum = 0;
  std::int64_t lag_count = 0;
  // Starting point of a resumed run.
  std::int64_t resume_env_step = 0;
  std::int64_t resume_train_iter = 0;
  std::int64_t resume_env_episode = 0;
  // The live progress line (null: none).
  demo::progress_line* progress = nullptr;
  // One node of a multi-process cluster: this process holds only its own
  // node, so outputs carry the node id and nothing is shared with others.
  bool distributed = false;

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

std::string path_in(const run_options& opts, const std::string& name) {
  return demo::path_in(opts.out, name);
}

// -- collector ----------------------------------------------------------------

/// Steps `envs_per_collector` CartPoles `steps_per_collect` times with one
/// batched forward pass per step and emits one transition_batch per
/// iteration, stamped with the model version that acted.
dice::middleware collect_step(std::shared_ptr<shared_run> run, q_network net,
                              std::uint32_t node) {
  struct state {
    std::shared_ptr<shared_run> run;
    q_network net;
    std::uint32_t node;
    vec_cartpole envs;
    nstep_accumulator acc;
    std::mt19937_64 rng;
    std::vector<double> recent_returns;
    // The first iteration writes a metrics line, then one a second.
    clock_type::time_point last_metrics;
    state(std::shared_ptr<shared_run> r, q_network n, std::uint32_t id)
      : run(std::move(r)), net(std::move(n)), node(id),
        envs(run->opts.envs_per_collector, run->opts.seed * 7919 + id),
        acc(run->opts.envs_per_collector, run->opts.algo.nstep,
            run->opts.algo.gamma),
        rng(run->opts.seed * 104729 + id) {
      // nop
    }
  };
  auto st = std::make_shared<state>(std::move(run), std::move(net), node);
  dice::middleware m;
  m.name = "collect";
  m.before = [st](dice::context& ctx) -> dice::step {
    auto& opts = st->run->opts;
    // Exploration follows the global env step; a collector sees only its
    // own, and the others step at about the same pace.
    auto global = static_cast<double>(st->run->resume_env_step)
      + static_cast<double>(ctx.env_step) * opts.collectors;
    auto eps = epsilon_at(opts.algo, global);
    transition_batch batch;
    auto expected = static_cast<std::size_t>(opts.steps_per_collect)
      * opts.envs_per_collector;
    batch.obs.reserve(expected * 4);
    batch.next_obs.reserve(expected * 4);
    std::int64_t episodes = 0;
    for (std::int64_t t = 0; t < opts.steps_per_collect; ++t) {
      auto obs = st->envs.obs();
      auto actions = epsilon_greedy_actions(st->net, obs, eps, st->rng);
      st->envs.step(actions);
      st->acc.add(obs.data(), actions.data(), st->envs.rewards().data(),
                  st->envs.final_obs().data(), st->envs.terminated().data(),
                  st->envs.truncated().data(), batch);
      for (auto r : st->envs.finished_returns()) {
        st->recent_returns.push_back(r);
        ++episodes;
      }
    }
    ctx.env_step += static_cast<std::int64_t>(expected);
    ctx.env_episode += episodes;
    std::vector<transition_batch> items;
    items.push_back(std::move(batch));
    ctx.trajectories = {dice::pack(items, st->node, ctx.model_version)};
    auto now = clock_type::now();
    if (now - st->last_metrics >= std::chrono::seconds{1}) {
      st->last_metrics = now;
      auto mean = demo::take_mean(st->recent_returns);
      st->run->write_metrics(st->node, "collector",
                             {{"env_step", ctx.env_step},
                              {"env_episode", ctx.env_episode},
                              {"train_return_mean", demo::number(mean)},
                              {"epsilon", eps},
                              {"model_version", ctx.model_version},
                              {"train_iter", ctx.train_iter}});
    }
    return dice::proceed;
  };
  return m;
}

// -- learner ------------------------------------------------------------------

/// Feeds ctx.trajectories into the replay buffer, records their policy lag,
/// runs updates_per_step gradient steps per new transition, prints the
/// progress line and writes latest.pt. With a learner group (`group`) the
/// learners agree on the gradient steps and average their gradients; only
/// rank 0 reports and writes latest.pt.
dice::middleware train_step(std::shared_ptr<shared_run> run, q_network net,
                            std::uint32_t node,
                            std::shared_ptr<group_trainer> group = nullptr) {
  struct state {
    std::shared_ptr<shared_run> run;
    dqn_learner learner;
    std::uint32_t node;
    dice::node_services* svc = nullptr;
    std::shared_ptr<group_trainer> group;
    double owed_updates = 0;
    float last_loss = std::numeric_limits<float>::quiet_NaN();
    clock_type::time_point last_print = clock_type::now();
    clock_type::time_point last_save = clock_type::now();
    std::int64_t last_env_step = 0;
    std::int64_t last_train_iter = 0;
    std::int64_t window_lag_min = std::numeric_limits<std::int64_t>::max();
    std::int64_t window_lag_max = 0;
    double window_lag_sum = 0;
    std::int64_t window_lag_count = 0;
    state(std::shared_ptr<shared_run> r, q_network n, std::uint32_t id)
      : run(std::move(r)),
        learner(std::move(n), run->opts.algo, run->opts.seed * 31 + 17),
        node(id) {
      if (run->opts.resume)
        restore();
    }

    // A resumed or restarted learner takes back its replay buffer, target
    // network and Adam state (latest.pt already gave the weights).
    void restore() {
      auto path = path_in(run->opts, "learner.pt");
      if (!std::filesystem::exists(path)) {
        dice::log::warning(node,
                           "no " + path
                             + ": resuming without replay state (empty "
                               "buffer, target = weights, fresh Adam)");
        return;
      }
      try {
        learner.load_state(path);
        dice::log::info(node,
                        "resumed learner state from " + path + ": replay "
                          + std::to_string(learner.buffer().size())
                          + " transitions, " + std::to_string(learner.updates())
                          + " gradient steps, target and Adam");
      } catch (const std::exception& e) {
        dice::log::error(node,
                         "cannot resume from " + path + " (" + e.what()
                           + "): empty replay buffer, fresh target "
                             "and Adam");
      }
    }

    // Order: learner.pt, latest.pt, then latest.json (the counters), each
    // renamed into place; a kill between them leaves counters that are at
    // most one checkpoint older than the weights.
    void save(const dice::context& ctx) {
      try {
        learner.save_state(path_in(run->opts, "learner.pt"));
        save_q_network(learner.online(), path_in(run->opts, "latest.pt"));
        demo::write_json(path_in(run->opts, "latest.json"),
                         {{"env_step", ctx.env_step},
                          {"train_iter", ctx.train_iter},
                          {"env_episode", ctx.env_episode},
                          {"replay", learner.buffer().size()}});
        dice::log::info(node,
                        "checkpoint at env_step " + std::to_string(ctx.env_step)
                          + ", train_iter " + std::to_string(ctx.train_iter)
                          + ", replay "
                          + std::to_string(learner.buffer().size()));
      } catch (const std::exception& e) {
        dice::log::error(
          node, std::string{"cannot write the checkpoint: "} + e.what());
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
      auto iters_per_s = static_cast<double>(ctx.train_iter - last_train_iter)
        / std::max(dt, 1e-9);
      last_env_step = ctx.env_step;
      last_train_iter = ctx.train_iter;
      double lag_mean = window_lag_count > 0
        ? window_lag_sum / window_lag_count
        : std::numeric_limits<double>::quiet_NaN();
      auto lag_lo = window_lag_count > 0 ? window_lag_min : 0;
      run->write_metrics(node, "learner",
                         {{"train_iter", ctx.train_iter},
                          {"env_step", ctx.env_step},
                          {"env_steps_per_s", demo::number(steps_per_s)},
                          {"train_iters_per_s", demo::number(iters_per_s)},
                          {"loss", demo::number(last_loss)},
                          {"buffer", learner.buffer().size()},
                          {"model_version", ctx.model_version},
                          {"lag_min", lag_lo},
                          {"lag_mean", demo::number(lag_mean)},
                          {"lag_max", window_lag_max}});
      if (run->progress != nullptr) {
        auto ev = run->last_eval();
        std::ostringstream os;
        os << "[dqn " << fixed(run->seconds(), 0) << "s] iter "
           << ctx.train_iter << " | env " << ctx.env_step << " | "
           << fixed(steps_per_s, 0) << " env/s | " << fixed(iters_per_s, 0)
           << " it/s | eval " << (std::isnan(ev) ? "-" : fixed(ev)) << " | lag "
           << lag_lo << "/" << fixed(lag_mean) << "/" << window_lag_max;
        run->progress->show(os.str());
      }
      window_lag_min = std::numeric_limits<std::int64_t>::max();
      window_lag_max = 0;
      window_lag_sum = 0;
      window_lag_count = 0;
    }
  };
  auto st = std::make_shared<state>(std::move(run), std::move(net), node);
  st->group = std::move(group);
  if (st->group) {
    st->group->attach(st->learner);
    if (st->run->opts.verify_every > 0)
      st->group->digests.open(
        path_in(st->run->opts, "digests-" + std::to_string(node) + ".txt"));
  }
  dice::middleware m;
  m.name = "train";
  m.attach = [st](dice::node_services& svc) {
    st->svc = &svc;
  };
  m.before = [st](dice::context& ctx) -> dice::step {
    auto& run = *st->run;
    // In a group only rank 0 is "the learner" that reports and saves.
    bool lead = !st->group || st->group->member->rank() == 0;
    if (ctx.total_step == 0) {
      // A restarted learner that joined a running group already has the
      // group's train_iter (its checkpoint is older).
      if (!st->group || st->group->member->generation() == 0)
        ctx.train_iter = run.resume_train_iter;
      // A group counts the resumed steps once.
      if (lead) {
        ctx.env_step += run.resume_env_step;
        ctx.env_episode += run.resume_env_episode;
      }
      // Scripts time a restarted learner by this line.
      dice::log::info(st->node,
                      "learner iterating from env_step "
                        + std::to_string(ctx.env_step) + ", train_iter "
                        + std::to_string(ctx.train_iter));
    }
    auto batches = dice::unpack<transition_batch>(ctx.trajectories);
    if (!batches) {
      dice::log::error(
        st->node, "dropped bad trajectories: " + dice::render(batches.error()));
      return dice::proceed;
    }
    // Lag: how many models this learner sent since the one that acted
    // (a collector's initial, never-loaded model counts as version 0).
    std::size_t fresh = 0;
    // In a group rank 0 alone publishes models, so it alone measures lag.
    if (lead) {
      std::lock_guard<std::mutex> guard{run.mtx};
      for (auto& p : ctx.trajectories) {
        auto lag = std::max<std::int64_t>(ctx.model_version, 0)
          - std::max<std::int64_t>(p.model_version, 0);
        run.lag_min = std::min(run.lag_min, lag);
        run.lag_max = std::max(run.lag_max, lag);
        run.lag_sum += static_cast<double>(lag);
        ++run.lag_count;
        st->window_lag_min = std::min(st->window_lag_min, lag);
        st->window_lag_max = std::max(st->window_lag_max, lag);
        st->window_lag_sum += static_cast<double>(lag);
        ++st->window_lag_count;
      }
    }
    for (auto& b : *batches) {
      st->learner.add(b);
      fresh += b.size();
    }
    if (st->group) {
      auto& opts = run.opts;
      bool stop = st->svc->finished()
        || (opts.max_env_steps > 0 && ctx.env_step >= opts.max_env_steps)
        || (opts.max_seconds > 0 && run.seconds() >= opts.max_seconds);
      auto res = st->group->iterate(ctx, st->learner, opts, fresh, stop);
      if (res.steps > 0)
        st->last_loss = res.loss;
      if (lead)
        st->report(ctx, false);
      if (lead
          && clock_type::now() - st->last_save >= std::chrono::seconds{10}) {
        st->last_save = clock_type::now();
        st->save(ctx);
      }
      if (res.stop && !st->svc->finished())
        st->svc->request_finish(
          opts.max_env_steps > 0 && ctx.env_step >= opts.max_env_steps
            ? "max_env_steps"
            : opts.max_seconds > 0 && run.seconds() >= opts.max_seconds
            ? "max_seconds"
            : "finish");
      return dice::proceed;
    }
    if (st->learner.ready()) {
      st->owed_updates += static_cast<double>(fresh)
        * run.opts.algo.updates_per_step;
      auto n = static_cast<std::int64_t>(st->owed_updates);
      st->owed_updates -= static_cast<double>(n);
      for (std::int64_t i = 0; i < n; ++i)
        st->last_loss = st->learner.update();
      ctx.train_iter += n;
    }
    st->report(ctx, false);
    if (clock_type::now() - st->last_save
        >= std::chrono::duration<double>(run.opts.checkpoint_every)) {
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
    if (st->group) {
      // Count what arrived after the last iteration (the context exchanger
      // merged it just before this hook), then leave: peers stop waiting.
      std::vector<double> extra{0, 1};
      if (st->group->member->group() != nullptr)
        if (!st->group->member->sync(ctx, extra, true))
          dice::log::warning(st->node,
                             "learner group: the last count failed; env_step "
                             "of this report is this learner's view");
      st->group->member->leave();
      // Rank 0, or the survivor that writes the state after rank 0 died.
      if (!st->group->member->writes_last_checkpoint())
        return;
    }
    st->save(ctx);
    st->report(ctx, true);
  };
  return m;
}

// -- evaluator ----------------------------------------------------------------

/// Runs greedy episodes every eval_every learner steps; keeps best.pt and
/// ends the run at the stop value.
dice::middleware eval_step(std::shared_ptr<shared_run> run, q_network net,
                           std::uint32_t node) {
  struct state {
    std::shared_ptr<shared_run> run;
    q_network net;
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
    // On a learner that also evaluates (a 2-node cluster) train_step has
    // already restored the counters.
    if (ctx.total_step == 0 && !st->svc->roles().has(dice::role::learner)) {
      ctx.env_step += run.resume_env_step;
      ctx.train_iter = std::max(ctx.train_iter, run.resume_train_iter);
    }
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
    bool solved = pt.mean >= run.opts.stop_value;
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
                       {"model_version", ctx.model_version},
                       {"eval_return_mean", pt.mean},
                       {"eval_return_min", pt.min},
                       {"eval_return_max", pt.max}});
    demo::report_eval(st->node, pt, best, solved, run.opts.out,
                      [&](const std::string& path) {
                        save_q_network(st->net, path);
                      });
    demo::stop_when_solved(*st->svc, st->node, solved, run.opts.stop_value,
                           pt.seconds);
    return dice::proceed;
  };
  return m;
}

q_network make_net(const run_options& opts, const std::string& resume_from) {
  q_network net{opts.algo.hidden};
  if (!resume_from.empty())
    load_q_network(net, resume_from);
  return net;
}

/// Creates OUT, reads the resume point and opens the metrics file
/// `metrics_name`; returns the checkpoint to start from ("" for none). A
/// resumed run needs OUT/latest.pt only where `need_checkpoint` (the
/// learner): other nodes of a cluster get the learner's model anyway.
caf::expected<std::string>
open_outputs(shared_run& run, const std::string& metrics_name,
             bool need_checkpoint, std::uint32_t node, bool restarted = false) {
  auto& opts = run.opts;
  if (auto err = demo::make_run_dir(opts.out))
    return err;
  std::string resume_from;
  if (opts.resume) {
    resume_from = path_in(opts, "latest.pt");
    if (!std::filesystem::exists(resume_from)) {
      if (need_checkpoint)
        return dice::make_error(dice::errc::invalid_config,
                                "--resume: " + resume_from + " does not exist");
      resume_from.clear();
    }
    // Counters of a file that is missing or not ours read as 0.
    auto latest = demo::read_json(path_in(opts, "latest.json"));
    auto counter = [&](const char* name) {
      auto it = latest.find(name);
      return it != latest.end() && it->is_number_integer()
        ? it->get<std::int64_t>()
        : std::int64_t{0};
    };
    auto env_step = counter("env_step");
    auto train_iter = counter("train_iter");
    auto env_episode = counter("env_episode");
    run.resume_env_step = env_step;
    run.resume_train_iter = train_iter;
    run.resume_env_episode = env_episode;
    // best.pt is only replaced by a model that beats the one it holds.
    auto best = demo::read_json(path_in(opts, "best.json"));
    if (best.contains("eval_return") && best["eval_return"].is_number())
      run.best = best["eval_return"].get<double>();
    dice::log::info(node,
                    "resuming from "
                      + (resume_from.empty() ? std::string{"the learner"}
                                             : resume_from)
                      + " (env_step " + std::to_string(env_step)
                      + ", train_iter " + std::to_string(train_iter)
                      + ", env_episode " + std::to_string(env_episode) + ")");
  }
  if (auto err = run.metrics.open(path_in(opts, metrics_name),
                                  opts.resume || restarted))
    return err;
  return resume_from;
}

/// The learner's model exchanger: per iteration, or periodical (send).
dice::middleware learner_models(q_network net, const run_options& opts) {
  if (!opts.periodical)
    return dice::model_exchanger(dice::model_port_of(net.ptr()));
  dice::periodical_model_exchanger_options send_opts;
  send_opts.mode = dice::exchange_mode::send;
  send_opts.period = opts.model_period;
  return dice::periodical_model_exchanger(dice::model_port_of(net.ptr()),
                                          send_opts);
}

/// A collector's model exchanger: per iteration, or periodical (receive).
dice::middleware collector_models(q_network net, const run_options& opts) {
  auto port = dice::model_port_of(net.ptr());
  if (!opts.periodical)
    return dice::model_exchanger(port);
  dice::periodical_model_exchanger_options recv;
  recv.mode = dice::exchange_mode::receive;
  recv.period = opts.model_period;
  recv.stale_toleration = opts.stale_toleration;
  return dice::periodical_model_exchanger(port, recv);
}

/// Copies what `run` recorded (evaluations, solve point, lag) into `sum`.
void collect_results(shared_run& run, run_summary& sum) {
  std::lock_guard<std::mutex> guard{run.mtx};
  sum.evals = run.evals;
  sum.best_eval = run.best;
  if (!run.evals.empty())
    sum.last_eval = run.evals.back().mean;
  sum.solved = run.solve_seconds >= 0;
  sum.solve_seconds = run.solve_seconds;
  sum.solve_env_steps = run.solve_env_steps;
  if (run.lag_count > 0) {
    sum.lag_min = static_cast<double>(run.lag_min);
    sum.lag_max = static_cast<double>(run.lag_max);
    sum.lag_mean = run.lag_sum / static_cast<double>(run.lag_count);
  }
}

/// The summary as a JSON object (see summary_json).
json summary_object(const run_summary& sum) {
  json j;
  if (!sum.roles.empty()) {
    j["node"] = sum.node;
    j["roles"] = sum.roles;
  }
  j["solved"] = static_cast<int>(sum.solved);
  j["solve_seconds"] = sum.solve_seconds;
  j["solve_env_steps"] = sum.solve_env_steps;
  j["best_eval"] = demo::number(sum.best_eval);
  j["last_eval"] = demo::number(sum.last_eval);
  j["evaluations"] = sum.evals.size();
  j["env_steps"] = sum.env_steps;
  j["train_iters"] = sum.train_iters;
  j["learner_iterations"] = sum.learner_iterations;
  j["seconds"] = sum.seconds;
  j["env_steps_per_s"] = demo::number(sum.env_steps_per_s());
  j["train_iters_per_s"] = demo::number(sum.train_iters_per_s());
  j["lag_min"] = sum.lag_min;
  j["lag_mean"] = sum.lag_mean;
  j["lag_max"] = sum.lag_max;
  j["stop_reason"] = sum.stop_reason;
  j["failed"] = sum.failed;
  return j;
}

/// Writes `sum` as one JSON object to OUT/`name`.
void write_summary(const run_options& opts, const run_summary& sum,
                   const std::string& name) {
  try {
    demo::write_json(path_in(opts, name), summary_object(sum));
  } catch (const std::exception& e) {
    dice::log::error(sum.node,
                     std::string{"cannot write summary: "} + e.what());
  }
}

/// The address a group's learner binds Gloo to and publishes as rank 0:
/// the node's listen address, else its entry in dice.nodes, else loopback.
std::string group_address(const dice::node_config& cfg) {
  if (!cfg.host.empty() && cfg.host != "0.0.0.0" && cfg.host != "::")
    return cfg.host;
  if (cfg.index < cfg.nodes.size() && !cfg.nodes[cfg.index].host.empty())
    return cfg.nodes[cfg.index].host;
  return "127.0.0.1";
}

} // namespace

std::string summary_json(const run_summary& sum) {
  return demo::dump(summary_object(sum));
}

caf::expected<run_summary> run_training(caf::actor_system& sys,
                                        const run_options& opts) {
  auto run = std::make_shared<shared_run>();
  run->opts = opts;
  auto resume = open_outputs(*run, "metrics.jsonl", true, learner_node);
  if (!resume)
    return resume.error();
  auto resume_from = *resume;
  std::optional<demo::progress_line> progress;
  progress.emplace(opts.progress);
  run->progress = opts.progress ? &*progress : nullptr;
  // Role actors run on their own threads (role_config::detached), so a
  // group's learners blocking in collectives hold no worker the others need.
  std::vector<dice::local_node> nodes;
  try {
    torch::manual_seed(opts.seed);
    // Every node holds its own copy of the network; the exchangers keep the
    // copies in step with the learner's.
    auto learner_net = make_net(opts, resume_from);
    auto eval_net = make_net(opts, resume_from);
    hard_update(*eval_net, *learner_net);
    auto add = [&](std::uint32_t id, dice::role r, dice::middleware models,
                   dice::middleware work) {
      dice::pipeline p;
      p.use(dice::context_exchanger())
        .use(std::move(models))
        .use(std::move(work));
      nodes.push_back(dice::local_node{id, {r}, std::move(p)});
    };
    if (opts.learners <= 1) {
      add(learner_node, dice::role::learner, learner_models(learner_net, opts),
          train_step(run, learner_net, learner_node));
    } else {
      // Rank 0 is node 0 (it alone publishes models); ranks 1.. follow the
      // collectors' ids. Each learner is its own node: the group forms
      // through the router and all-reduces over loopback.
      auto mode = opts.reduce == "flat" ? dice::reduce_mode::flat
                                        : dice::reduce_mode::bucketed;
      for (std::uint32_t r = 0; r < opts.learners; ++r) {
        auto id = r == 0 ? learner_node
                         : first_collector_node + opts.collectors + r - 1;
        auto net = learner_net;
        if (r > 0) {
          net = make_net(opts, resume_from);
          hard_update(*net, *learner_net);
        }
        dice::learner_group_member_options mo;
        mo.rank = static_cast<int>(r);
        mo.size = static_cast<int>(opts.learners);
        mo.max_nodes = first_collector_node + opts.collectors + opts.learners;
        mo.mode = mode;
        auto trainer = std::make_shared<group_trainer>();
        trainer->member = std::make_shared<dice::learner_group_member>(mo);
        dice::context_exchanger_options co;
        co.partition = trainer->member->partition();
        dice::pipeline p;
        p.use(trainer->member->make_middleware())
          .use(dice::context_exchanger(co));
        if (r == 0)
          p.use(learner_models(net, opts));
        p.use(train_step(run, net, id, trainer));
        nodes.push_back(
          dice::local_node{id, {dice::role::learner}, std::move(p)});
      }
    }
    add(evaluator_node, dice::role::evaluator,
        dice::model_exchanger(dice::model_port_of(eval_net.ptr())),
        eval_step(run, eval_net, evaluator_node));
    for (std::uint32_t i = 0; i < opts.collectors; ++i) {
      auto id = first_collector_node + i;
      auto net = make_net(opts, resume_from);
      hard_update(*net, *learner_net);
      add(id, dice::role::collector, collector_models(net, opts),
          collect_step(run, net, id));
    }
  } catch (const std::exception& e) {
    return dice::make_error(dice::errc::invalid_config,
                            std::string{"cannot build the nodes: "} + e.what());
  }
  dice::log::info(learner_node,
                  "DQN on CartPole-v1: " + std::to_string(opts.learners)
                    + (opts.learners > 1 ? " learners (one group)" : " learner")
                    + ", 1 evaluator, " + std::to_string(opts.collectors)
                    + " collectors x " + std::to_string(opts.envs_per_collector)
                    + " envs, "
                    + (opts.periodical ? "periodical" : "per-iteration")
                    + " model exchange, seed " + std::to_string(opts.seed)
                    + ", out " + opts.out);
  dice::local_run_options lro;
  lro.print_reports = false;
  if (opts.max_seconds > 0)
    lro.deadline = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(opts.max_seconds + 120));
  run->start = clock_type::now();
  auto reports = dice::run_local(sys, std::move(nodes), lro);
  run->progress = nullptr;
  progress.reset();
  if (!reports)
    return reports.error();
  run_summary sum;
  sum.seconds = run->seconds();
  sum.resumed_env_steps = run->resume_env_step;
  sum.resumed_train_iters = run->resume_train_iter;
  for (auto& rep : *reports) {
    if (rep.node == learner_node) {
      sum.env_steps = rep.env_step;
      sum.train_iters = rep.train_iter;
      sum.learner_iterations = rep.iterations;
      sum.stop_reason = rep.stop_reason;
    }
    // One process, one run: it failed if any of its nodes did.
    sum.failed = sum.failed || rep.failed;
    dice::log::info(rep.node, "report " + dice::to_json(rep));
  }
  collect_results(*run, sum);
  demo::write_eval_plot(opts.out, run->evals, "DQN CartPole-v1",
                        opts.stop_value, opts.plot, evaluator_node);
  write_summary(opts, sum, "summary.json");
  return sum;
}

std::uint32_t default_collectors(std::uint32_t workers,
                                 std::uint32_t learners) {
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < workers; ++i)
    if (dice::default_roles(i, workers, learners).has(dice::role::collector))
      ++n;
  return n;
}

caf::expected<run_summary> run_node(caf::actor_system& sys,
                                    const run_options& opts,
                                    const dice::node_config& cfg) {
  auto run = std::make_shared<shared_run>();
  run->opts = opts;
  run->distributed = true;
  auto roles = cfg.roles.empty()
    ? dice::default_roles(cfg.index, cfg.workers, cfg.learners)
    : cfg.roles;
  auto id = cfg.id;
  // One pipeline per process; a node with several roles runs the first of
  // learner, evaluator, collector (the exchangers serve one role well).
  auto role = roles.has(dice::role::learner) ? dice::role::learner
    : roles.has(dice::role::evaluator)       ? dice::role::evaluator
                                             : dice::role::collector;
  // Without an evaluator node (a 2-node cluster) the learner evaluates, so
  // the stop value still ends the run.
  // A group's learners are nodes 0..L-1 (their rank is the index), rank 0
  // evaluates when no node is left for an evaluator.
  bool grouped = role == dice::role::learner && cfg.learners > 1;
  int rank = grouped ? static_cast<int>(cfg.index) : 0;
  bool evaluates = role == dice::role::evaluator
    || (role == dice::role::learner && rank == 0
        && cfg.workers <= cfg.learners + 1);
  // A learner that dice-launch started again resumes from its last
  // checkpoint (no --resume needed); other nodes get its model anyway.
  if (cfg.restart_count > 0 && role == dice::role::learner && !opts.resume) {
    if (std::filesystem::exists(path_in(opts, "latest.pt"))) {
      run->opts.resume = true;
      dice::log::info(id,
                      "restart " + std::to_string(cfg.restart_count)
                        + ": resuming from the last checkpoint");
    } else {
      dice::log::warning(id,
                         "restart " + std::to_string(cfg.restart_count)
                           + ": no checkpoint in " + opts.out
                           + ", so this learner starts without one: "
                             "fresh weights, train_iter 0, env_step 0, "
                             "env_episode 0, empty replay buffer");
    }
  }
  auto resume = open_outputs(*run, "metrics-" + std::to_string(id) + ".jsonl",
                             role == dice::role::learner, id,
                             cfg.restart_count > 0);
  if (!resume)
    return resume.error();
  auto node = dice::node::start(sys, cfg);
  if (!node)
    return node.error();
  dice::pipeline pipe;
  std::shared_ptr<group_trainer> trainer;
  try {
    // Same seed, same construction: every process starts from the same
    // weights as the learner (the in-process run copies them instead).
    torch::manual_seed(opts.seed);
    auto net = make_net(opts, *resume);
    // A restarted learner greets collectors that wait for its model (they
    // would otherwise wait for data while it waits for theirs).
    dice::context_exchanger_options co;
    if (grouped) {
      if (cfg.index >= cfg.learners)
        throw std::runtime_error(
          "a learner of a group of " + std::to_string(cfg.learners)
          + " must be one of nodes 0.." + std::to_string(cfg.learners - 1));
      dice::learner_group_member_options mo;
      mo.rank = rank;
      mo.size = static_cast<int>(cfg.learners);
      // Restarted by dice-launch: the group runs on without this learner,
      // which asks to be admitted again.
      mo.rejoin = cfg.restart_count > 0;
      mo.max_nodes = std::max<std::uint32_t>(cfg.workers, cfg.id + 1);
      mo.address = group_address(cfg);
      mo.mode = opts.reduce == "flat" ? dice::reduce_mode::flat
                                      : dice::reduce_mode::bucketed;
      trainer = std::make_shared<group_trainer>();
      trainer->member = std::make_shared<dice::learner_group_member>(mo);
      co.partition = trainer->member->partition();
      pipe.use(trainer->member->make_middleware());
    }
    // Rank 0 alone greets the collectors and publishes models.
    if (role == dice::role::learner && rank == 0)
      pipe.use(dice::learner_hello(dice::model_port_of(net.ptr())));
    pipe.use(dice::context_exchanger(co));
    switch (role) {
      case dice::role::learner:
        if (rank == 0)
          pipe.use(learner_models(net, opts));
        pipe.use(train_step(run, net, id, trainer));
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
                  std::string{"DQN on CartPole-v1: node "} + std::to_string(id)
                    + " of " + std::to_string(cfg.workers) + ", "
                    + dice::to_string(dice::role_set{role})
                    + (role == dice::role::collector ? " with "
                           + std::to_string(opts.envs_per_collector) + " envs"
                                                     : std::string{})
                    + ", seed " + std::to_string(opts.seed) + ", out "
                    + opts.out);
  dice::node_run_options nro;
  // The learner's state lives in its middleware: a fresh role actor would
  // start it over. Its process is what dice-launch --max-restarts restarts.
  nro.max_restarts = 0;
  if (cfg.max_restarts > 0)
    dice::log::warning(id,
                       "dqn_cartpole ignores --dice.max-restarts; use "
                       "dice-launch --max-restarts to restart its nodes");
  if (opts.max_seconds > 0)
    nro.deadline = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(opts.max_seconds + 120));
  std::optional<demo::progress_line> progress;
  progress.emplace(opts.progress);
  run->progress = opts.progress ? &*progress : nullptr;
  run->start = clock_type::now();
  auto rep = node->run(std::move(pipe), nro);
  run->progress = nullptr;
  progress.reset();
  node->stop();
  if (!rep)
    return rep.error();
  if (trainer && trainer->member->rank_zero_lost()
      && trainer->member->writes_last_checkpoint())
    dice::log::error(
      id,
      "the learner group lost rank 0, so the run stopped; this learner "
      "wrote the group's state to "
        + path_in(opts, "latest.pt") + ", learner.pt and latest.json "
        + "(env_step " + std::to_string(rep->env_step) + ", train_iter "
        + std::to_string(rep->train_iter)
        + "). Resume: run the same command again with --resume, e.g. "
          "dice-launch --workers "
        + std::to_string(cfg.workers) + " --learners "
        + std::to_string(cfg.learners)
        + " -- dqn_cartpole <the same options> --resume --out=" + opts.out);
  run_summary sum;
  sum.node = id;
  sum.roles = dice::to_string(dice::role_set{role});
  sum.seconds = run->seconds();
  sum.resumed_env_steps = role == dice::role::collector ? 0
                                                        : run->resume_env_step;
  sum.resumed_train_iters = run->resume_train_iter;
  sum.env_steps = rep->env_step;
  sum.train_iters = rep->train_iter;
  sum.learner_iterations = role == dice::role::learner ? rep->iterations : 0;
  sum.stop_reason = rep->stop_reason;
  sum.failed = rep->failed;
  collect_results(*run, sum);
  if (evaluates)
    demo::write_eval_plot(opts.out, run->evals, "DQN CartPole-v1",
                          opts.stop_value, opts.plot, id);
  write_summary(opts, sum, "summary-" + std::to_string(id) + ".json");
  return sum;
}

caf::expected<std::vector<double>> run_eval_only(const std::string& checkpoint,
                                                 const run_options& opts,
                                                 int episodes) {
  q_network net{opts.algo.hidden};
  try {
    load_q_network(net, checkpoint);
  } catch (const std::exception& e) {
    return dice::make_error(dice::errc::invalid_config,
                            "cannot load " + checkpoint + ": " + e.what());
  }
  net->eval();
  return evaluate_greedy(net, episodes, opts.seed);
}

void set_threads(int n) {
  torch::set_num_threads(std::max(n, 1));
}

std::string to_string(const run_summary& x) {
  std::ostringstream os;
  if (x.roles == "collector")
    // A collector knows only its own steps.
    return "== DQN CartPole-v1, node " + std::to_string(x.node)
      + " (collector) ==\nenv steps:         " + std::to_string(x.env_steps)
      + " (" + fixed(x.env_steps_per_s(), 0) + "/s)\nstop reason:       "
      + x.stop_reason + "\nwall time:         " + fixed(x.seconds, 2) + " s\n";
  os << "== DQN CartPole-v1 summary";
  if (!x.roles.empty())
    os << ", node " << x.node << " (" << x.roles << ")";
  os << " ==\n";
  // A learner in a cluster with an evaluator node never evaluates itself.
  if (x.roles == "learner" && x.evals.empty())
    os << "evaluations:       on the evaluator node (its summary)\n";
  else
    os << "solved:            "
       << (x.solved ? "yes, after " + fixed(x.solve_seconds, 2) + " s and "
               + std::to_string(x.solve_env_steps) + " env steps"
                    : std::string{"no"})
       << "\n"
       << "best / last eval:  " << fixed(x.best_eval) << " / "
       << fixed(x.last_eval) << " (" << x.evals.size() << " evaluations)\n";
  os << "stop reason:       " << x.stop_reason << "\n"
     << "env steps:         " << x.env_steps << " ("
     << fixed(x.env_steps_per_s(), 0) << "/s)\n"
     << "learner:           " << x.train_iters << " gradient steps ("
     << fixed(x.train_iters_per_s(), 0) << "/s), " << x.learner_iterations
     << " iterations ("
     << fixed(x.learner_iterations / std::max(x.seconds, 1e-9), 1) << "/s)\n"
     << "policy lag:        min " << fixed(x.lag_min, 0) << ", mean "
     << fixed(x.lag_mean, 2) << ", max " << fixed(x.lag_max, 0)
     << " model versions\n"
     << "wall time:         " << fixed(x.seconds, 2) << " s\n";
  return os.str();
}

} // namespace dqn
