// The DQN learner: replay buffer, gradient steps (alone or in a learner
// group), policy lag, the progress line and the checkpoints.

#include "dice/logging/log.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/pipeline/middleware.hpp"

#include "evals.hpp"
#include "shared_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

namespace dqn {

using demo::clock_type;
using demo::fixed;

dice::middleware train_step(std::shared_ptr<shared_run> run, q_network net,
                            std::uint32_t node,
                            std::shared_ptr<group_trainer> group) {
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
    demo::finish_at_limits(*st->svc, ctx.env_step, run.opts.max_env_steps,
                           run.seconds(), run.opts.max_seconds);
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

} // namespace dqn
