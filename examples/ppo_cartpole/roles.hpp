#pragma once

// The PPO cluster's three kinds of work, as middleware for role actors:
// collectors put segments into the context, the learner trains on merged
// context, the evaluator plays greedy episodes. Internal to ppo_cartpole
// (cluster.cpp wires them); torch-using.

#include "dice/core/context.hpp"
#include "dice/runtime/middleware.hpp"

#include "options.hpp"
#include "outputs.hpp"
#include "ppo.hpp"

#include <limits>
#include <memory>
#include <mutex>
#include <vector>

namespace ppo {

/// What the nodes of one process share: clock, metrics file, progress
/// line, evaluations, and what the learner reports at its end.
struct shared_run {
  run_options opts;
  demo::clock_type::time_point start = demo::clock_type::now();
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

  /// Seconds since the start of the run.
  double seconds() const {
    return std::chrono::duration<double>(demo::clock_type::now() - start).count();
  }

  void write_metrics(std::uint32_t node, const std::string& role,
                     const demo::json& fields) {
    metrics.write(seconds(), node, role, fields);
  }

  double last_eval() {
    std::lock_guard<std::mutex> guard{mtx};
    return evals.empty() ? std::numeric_limits<double>::quiet_NaN()
                         : evals.back().mean;
  }
};

/// Writes `net`'s state_dict as a checkpoint Python's `torch.load` reads
/// (dice::save_pytorch_checkpoint), through a temporary file and a rename. Throws
/// std::runtime_error.
void save_actor_critic(actor_critic& net, const std::string& path);

/// Learner iterations the acting model's weights have seen: the
/// exchanger's id + 1, 0 for the initial weights (id -1).
std::int64_t acting_version(const dice::context& ctx);

/// A collector: one segment per env per iteration into the context.
dice::middleware collect_step(std::shared_ptr<shared_run> run, actor_critic net,
                              std::uint32_t node);

/// The learner: trains on every iteration's merged context.
dice::middleware train_step(std::shared_ptr<shared_run> run, actor_critic net,
                            std::uint32_t node);

/// The evaluator: greedy episodes every eval_every updates, best.pt, stop.
dice::middleware eval_step(std::shared_ptr<shared_run> run, actor_critic net,
                           std::uint32_t node);

} // namespace ppo
