#pragma once

// The PPO cluster's three kinds of work, as middleware for role actors:
// collectors put segments into the context, the learner trains on merged
// context, the evaluator plays greedy episodes. Internal to ppo_cartpole
// (cluster.cpp wires them); torch-using.

#include "dice/pipeline/context.hpp"
#include "dice/pipeline/middleware.hpp"

#include "options.hpp"
#include "outputs.hpp"
#include "ppo.hpp"
#include "run_record.hpp"

#include <limits>
#include <memory>
#include <mutex>
#include <vector>

namespace ppo {

/// What the nodes of one process share besides the clock, metrics file,
/// progress line and evaluations (demo::run_record): the options and what
/// the learner reports at its end.
struct shared_run : demo::run_record {
  run_options opts;
  // Set by the learner when it stops.
  bool learner_done = false;
  lag_summary lags;
  intake_counters intake;
  std::int64_t grad_steps = 0;
  std::int64_t train_episodes = 0;
  double train_return_mean = std::numeric_limits<double>::quiet_NaN();
};

/// Writes `net`'s state_dict as a checkpoint Python's `torch.load` reads
/// (dice::save_pytorch_checkpoint), through a temporary file and a rename.
/// Throws std::runtime_error.
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

/// The learner's model exchanger: sends every `model_period` iterations.
dice::middleware learner_models(actor_critic net, const run_options& opts);

/// A collector's model exchanger: loads models as they come and acts with
/// one for at most `stale_toleration` iterations.
dice::middleware collector_models(actor_critic net, const run_options& opts);

} // namespace ppo
