#include "loop.hpp"

#include "ppo.hpp"
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <memory>

namespace ppo {

namespace {

using clock_type = std::chrono::steady_clock;

} // namespace

loop_result run_loop(const loop_options& opts,
                     const std::function<void(const std::string&)>& log) {
  torch::manual_seed(opts.seed);
  actor_critic net{opts.algo.hidden};
  ppo_learner learner{net, opts.algo, opts.seed * 31 + 7};
  std::vector<segment_collector> collectors;
  for (std::uint32_t i = 0; i < opts.collectors; ++i)
    collectors.emplace_back(opts.envs_per_collector, opts.steps_per_segment,
                            opts.seed * 7919 + i + 1);
  // Models the collectors may act with: the newest `lag + 1` versions, the
  // oldest first (what collectors hold when models reach them late).
  std::deque<std::pair<std::int64_t, actor_critic>> history;
  auto snapshot = [&](std::int64_t version) {
    actor_critic copy{opts.algo.hidden};
    copy_weights(copy, learner.net());
    history.emplace_back(version, copy);
    while (static_cast<std::int64_t>(history.size()) > opts.lag + 1)
      history.pop_front();
  };
  std::int64_t version = 0;
  snapshot(version);
  loop_result res;
  auto start = clock_type::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(clock_type::now() - start).count();
  };
  for (;;) {
    // One batch: every collector's segments, merged with offsets.
    std::vector<dice::payload> trajectories;
    std::vector<std::int64_t> end_idx;
    auto& acting = history.front();
    for (std::uint32_t i = 0; i < opts.collectors; ++i) {
      auto c = collectors[i].collect(acting.second, i + 1, acting.first);
      res.env_steps += c.env_steps;
      merge_context(trajectories, end_idx, c.trajectories,
                    c.trajectory_end_idx);
    }
    auto st = learner.learn(trajectories, end_idx, version);
    if (!st)
      throw std::runtime_error("learner refused its own batch: "
                               + dice::render(st.error()));
    ++version;
    snapshot(version);
    res.updates = version;
    if (version % std::max<std::int64_t>(opts.eval_every, 1) == 0) {
      auto returns = evaluate_greedy(learner.net(), opts.eval_episodes,
                                     opts.seed * 104729 + 3 + version);
      loop_eval ev;
      ev.env_step = res.env_steps;
      ev.version = version;
      ev.seconds = seconds();
      ev.min = returns.empty() ? 0 : returns.front();
      for (auto r : returns) {
        ev.mean += r;
        ev.min = std::min(ev.min, r);
      }
      ev.mean /= std::max<std::size_t>(returns.size(), 1);
      res.evals.push_back(ev);
      res.best_eval = std::max(res.best_eval, ev.mean);
      if (log)
        log(fmt::format("[ppo {:.1f}s] v{} env {} eval {:.1f} (min {:.0f}) pi "
                        "{:.3f} v {:.3f} H {:.3f} kl {:.4f} clip {:.2f} lag {}",
                        ev.seconds, version, ev.env_step, ev.mean, ev.min,
                        st->policy_loss, st->value_loss, st->entropy,
                        st->approx_kl, st->clip_fraction,
                        learner.lags().str()));
      if (ev.mean >= opts.stop_value) {
        res.solved = true;
        res.solve_seconds = ev.seconds;
        res.solve_env_steps = ev.env_step;
        break;
      }
    }
    if (opts.max_seconds > 0 && seconds() >= opts.max_seconds)
      break;
    if (opts.max_env_steps > 0 && res.env_steps >= opts.max_env_steps)
      break;
  }
  res.seconds = seconds();
  res.grad_steps = learner.grad_steps();
  res.lags = learner.lags();
  res.intake = learner.intake();
  return res;
}

std::string to_json(const loop_result& x) {
  // Fields in this order; non-finite numbers (no eval yet) become null.
  nlohmann::ordered_json j{{"solved", x.solved},
                           {"solve_seconds", x.solve_seconds},
                           {"solve_env_steps", x.solve_env_steps},
                           {"best_eval", x.best_eval},
                           {"env_steps", x.env_steps},
                           {"updates", x.updates},
                           {"grad_steps", x.grad_steps},
                           {"seconds", x.seconds},
                           {"lag_mean", x.lags.mean()},
                           {"lag_max", x.lags.max()},
                           {"steps_dropped_stale",
                            x.intake.steps_dropped_stale}};
  return j.dump();
}

} // namespace ppo
