// DQN's learner: replay intake, gradient steps (alone or in a learner
// group, dqn_group.cpp), policy lag, metrics, the progress line,
// checkpoints and resume.

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/payload.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/pipeline/node_services.hpp"
#include "dice/rl/dqn_agent.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <vector>

namespace dice::rl {

// -- dqn_trainer --------------------------------------------------------------

namespace {

using dqn_clock = std::chrono::steady_clock;

// Policy lag (learner model versions behind) over a window and the run.
struct dqn_lag_stats {
  std::int64_t min = std::numeric_limits<std::int64_t>::max();
  std::int64_t max = 0;
  double sum = 0;
  std::int64_t count = 0;

  void add(std::int64_t lag) {
    min = std::min(min, lag);
    max = std::max(max, lag);
    sum += static_cast<double>(lag);
    ++count;
  }

  std::int64_t low() const {
    return count > 0 ? min : 0;
  }

  double mean() const {
    return count > 0 ? sum / static_cast<double>(count)
                     : std::numeric_limits<double>::quiet_NaN();
  }
};

struct dqn_train_state {
  dqn_run_options opts;
  std::shared_ptr<run_outputs> out;
  dqn_learner learner;
  std::unique_ptr<dqn_group> group;
  node_services* svc = nullptr;
  std::uint32_t node = 0;
  double owed = 0;
  float last_loss = std::numeric_limits<float>::quiet_NaN();
  dqn_clock::time_point last_print = dqn_clock::now();
  dqn_clock::time_point last_save = dqn_clock::now();
  std::int64_t last_env_step = 0;
  std::int64_t last_train_iter = 0;
  dqn_lag_stats window;
  dqn_lag_stats total;

  dqn_train_state(dqn_run_options o, std::shared_ptr<run_outputs> x,
                  q_network net)
    : opts(std::move(o)), out(std::move(x)),
      learner(std::move(net), opts.algo, opts.seed * 31 + 17) {
    // nop
  }

  // In a group only rank 0 is "the learner" that reports and measures lag.
  bool lead() const {
    return !group || group->member().rank() == 0;
  }

  // A resumed or restarted learner takes back its replay buffer, target
  // network and Adam state (latest.pt already gave the weights).
  void restore() {
    auto path = out->path("learner.pt");
    if (!std::filesystem::exists(path)) {
      log::warning(node,
                   "no " + path
                     + ": resuming without replay state (empty "
                       "buffer, target = weights, fresh Adam)");
      return;
    }
    if (auto err = learner.load_state(path)) {
      log::error(node,
                 "cannot resume from " + path + " (" + render(err)
                   + "): empty replay buffer, fresh target and Adam");
      return;
    }
    log::info(node,
              "resumed learner state from " + path + ": replay "
                + std::to_string(learner.buffer().size()) + " transitions, "
                + std::to_string(learner.updates())
                + " gradient steps, target and Adam");
  }

  // Order: learner.pt, latest.pt, then latest.json (the counters), each
  // renamed into place; a kill between them leaves counters that are at
  // most one checkpoint older than the weights.
  void save(const context& ctx) {
    auto err = learner.save_state(out->path("learner.pt"));
    if (!err)
      err = save_q_network(learner.online(), out->path("latest.pt"));
    if (!err)
      err = write_json(out->path("latest.json"),
                       {{"env_step", ctx.env_step},
                        {"train_iter", ctx.train_iter},
                        {"env_episode", ctx.env_episode},
                        {"replay", learner.buffer().size()}});
    if (err) {
      log::error(node, "cannot write the checkpoint: " + render(err));
      return;
    }
    log::info(node,
              "checkpoint at env_step " + std::to_string(ctx.env_step)
                + ", train_iter " + std::to_string(ctx.train_iter) + ", replay "
                + std::to_string(learner.buffer().size()));
  }

  void save_if_due(const context& ctx) {
    if (dqn_clock::now() - last_save
        < std::chrono::duration<double>(opts.checkpoint_every))
      return;
    last_save = dqn_clock::now();
    save(ctx);
  }

  void report(const context& ctx, bool final_line) {
    auto now = dqn_clock::now();
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
    out->metrics(node, "learner",
                 {{"train_iter", ctx.train_iter},
                  {"env_step", ctx.env_step},
                  {"env_steps_per_s", number(steps_per_s)},
                  {"train_iters_per_s", number(iters_per_s)},
                  {"loss", number(last_loss)},
                  {"buffer", learner.buffer().size()},
                  {"model_version", ctx.model_version},
                  {"lag_min", window.low()},
                  {"lag_mean", number(window.mean())},
                  {"lag_max", window.max}});
    auto ev = out->last_eval();
    std::ostringstream os;
    os << "[dqn " << fixed(out->seconds(), 0) << "s] iter " << ctx.train_iter
       << " | env " << ctx.env_step << " | " << fixed(steps_per_s, 0)
       << " env/s | " << fixed(iters_per_s, 0) << " it/s | eval "
       << (std::isnan(ev) ? "-" : fixed(ev)) << " | lag " << window.low() << "/"
       << fixed(window.mean()) << "/" << window.max;
    out->progress(os.str());
    window = dqn_lag_stats{};
  }

  // The first iteration starts from the resume point's counters.
  void start(context& ctx) {
    auto& from = out->resumed();
    // A restarted learner that joined a running group already has the
    // group's train_iter (its checkpoint is older).
    if (!group || group->member().generation() == 0)
      ctx.train_iter = from.train_iter;
    // A group counts the resumed steps once.
    if (lead()) {
      ctx.env_step += from.env_step;
      ctx.env_episode += from.env_episode;
    }
    // Scripts time a restarted learner by this line.
    log::info(node,
              "learner iterating from env_step " + std::to_string(ctx.env_step)
                + ", train_iter " + std::to_string(ctx.train_iter));
  }

  // Feeds the replay buffer; returns the new transitions.
  std::size_t intake(context& ctx) {
    auto batches = unpack<transition_batch>(ctx.trajectories);
    if (!batches) {
      log::error(node, "dropped bad trajectories: " + render(batches.error()));
      return 0;
    }
    // Lag: how many models this learner sent since the one that acted (a
    // collector's initial, never-loaded model counts as version 0). In a
    // group rank 0 alone publishes models, so it alone measures lag.
    if (lead())
      for (auto& p : ctx.trajectories) {
        auto lag = std::max<std::int64_t>(ctx.model_version, 0)
          - std::max<std::int64_t>(p.model_version, 0);
        window.add(lag);
        total.add(lag);
      }
    std::size_t fresh = 0;
    for (auto& b : *batches) {
      if (auto err = learner.add(b)) {
        log::error(node, "dropped a transition batch: " + render(err));
        continue;
      }
      fresh += b.size();
    }
    return fresh;
  }

  void iterate_group(context& ctx, std::size_t fresh) {
    auto seconds = out->seconds();
    bool at_steps = opts.max_env_steps > 0
      && ctx.env_step >= opts.max_env_steps;
    bool at_time = opts.max_seconds > 0 && seconds >= opts.max_seconds;
    double cpu = 0;
    auto res = [&] {
      cpu_span span{cpu};
      return group->iterate(ctx, fresh, svc->finished() || at_steps || at_time);
    }();
    // With its all-reduce: waiting for the group's peers is not CPU.
    out->add_cpu("learner", cpu);
    if (res.steps > 0)
      last_loss = res.loss;
    if (lead()) {
      report(ctx, false);
      save_if_due(ctx);
    }
    if (res.stop && !svc->finished()) {
      at_steps = opts.max_env_steps > 0 && ctx.env_step >= opts.max_env_steps;
      svc->request_finish(at_steps    ? "max_env_steps"
                            : at_time ? "max_seconds"
                                      : "finish");
    }
  }

  void iterate_alone(context& ctx, std::size_t fresh) {
    if (learner.ready()) {
      owed += static_cast<double>(fresh) * opts.algo.updates_per_step;
      auto n = static_cast<std::int64_t>(owed);
      owed -= static_cast<double>(n);
      double cpu = 0;
      {
        cpu_span span{cpu};
        for (std::int64_t i = 0; i < n; ++i)
          last_loss = learner.update();
      }
      out->add_cpu("learner", cpu);
      ctx.train_iter += n;
    }
    report(ctx, false);
    save_if_due(ctx);
    finish_at_limits(*svc, ctx.env_step, opts.max_env_steps, out->seconds(),
                     opts.max_seconds);
  }

  void stop(context& ctx) {
    if (group) {
      if (!group->finish(ctx))
        log::warning(node,
                     "learner group: the last count failed; env_step "
                     "of this report is this learner's view");
      // Rank 0, or the survivor that writes the state after rank 0 died.
      if (!group->member().writes_last_checkpoint())
        return;
    }
    save(ctx);
    report(ctx, true);
    auto lag_mean = total.count > 0 ? total.mean() : 0.0;
    out->summarize(node,
                   {{"lag_min", total.low()},
                    {"lag_mean", lag_mean},
                    {"lag_max", total.max}},
                   "learner:           " + std::to_string(ctx.train_iter)
                     + " gradient steps, replay "
                     + std::to_string(learner.buffer().size())
                     + "\npolicy lag:        min " + std::to_string(total.low())
                     + ", mean " + fixed(lag_mean, 2) + ", max "
                     + std::to_string(total.max) + " model versions\n");
    if (group && group->member().rank_zero_lost())
      log::error(node,
                 "the learner group lost rank 0, so the run stopped; this "
                 "learner wrote the group's state to "
                   + out->path("latest.pt") + ", learner.pt and latest.json "
                   + "(env_step " + std::to_string(ctx.env_step)
                   + ", train_iter " + std::to_string(ctx.train_iter)
                   + "). Resume: run the same command again with --resume"
                   + (opts.resume_command.empty()
                        ? std::string{}
                        : ", e.g. " + opts.resume_command));
  }
};

} // namespace

caf::expected<middleware>
dqn_trainer(q_network net, const dqn_run_options& opts,
            std::shared_ptr<run_outputs> out,
            std::shared_ptr<learner_group_member> member) {
  if (!net || !out)
    return make_error(errc::invalid_config,
                      "dqn_trainer: needs a network and outputs");
  if (auto err = validate(opts.algo))
    return err;
  // The weights first: the target and Adam start from them.
  if (opts.resume)
    if (auto err = load_q_network(net, out->path("latest.pt")))
      return err;
  auto st = std::make_shared<dqn_train_state>(opts, std::move(out),
                                              std::move(net));
  if (member)
    st->group = std::make_unique<dqn_group>(std::move(member), st->learner);
  middleware m;
  m.name = "train";
  m.attach = [st](node_services& svc) {
    st->svc = &svc;
    st->node = svc.node_id();
    if (st->opts.resume) {
      auto& from = st->out->resumed();
      log::info(st->node,
                "resuming from " + st->out->path("latest.pt") + " (env_step "
                  + std::to_string(from.env_step) + ", train_iter "
                  + std::to_string(from.train_iter) + ", env_episode "
                  + std::to_string(from.env_episode) + ")");
      st->restore();
    }
    if (st->group)
      st->group->verify(
        st->opts.verify_every,
        st->out->path("digests-" + std::to_string(st->node) + ".txt"));
  };
  m.before = [st](context& ctx) -> step {
    if (ctx.total_step == 0)
      st->start(ctx);
    auto fresh = st->intake(ctx);
    if (st->group)
      st->iterate_group(ctx, fresh);
    else
      st->iterate_alone(ctx, fresh);
    return proceed;
  };
  m.on_stop = [st](context& ctx) {
    st->stop(ctx);
  };
  return m;
}

} // namespace dice::rl
