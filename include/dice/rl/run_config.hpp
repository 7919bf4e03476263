#pragma once

// The options an RL program takes besides the node settings: seed, limits,
// output folder, evaluation, collectors' environments, model exchange and
// network size (`dice::rl::run_config`), and each algorithm's
// hyper-parameters as options (`add_options`). Every option reads
// `--name value` or `--name=value` (dice::run).

#include "dice/env/vector_env.hpp"
#include "dice/rl/dqn.hpp"
#include "dice/rl/evaluator.hpp"
#include "dice/rl/outputs.hpp"
#include "dice/rl/ppo.hpp"
#include "dice/runtime/run.hpp"

#include "caf/config_option_set.hpp"
#include "caf/error.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dice::rl {

/// How collectors get models: every learner iteration (DI-engine's
/// ModelExchanger) or every `period` iterations with `stale_toleration`
/// (PeriodicalModelExchanger).
struct model_exchange_options {
  /// Use the periodical model exchanger.
  bool periodical = false;
  /// Learner iterations between models (periodical).
  std::int64_t period = 1;
  /// Collector iterations one model may serve (periodical).
  std::int64_t stale_toleration = 1;
};

/// The options every RL program takes (see the top of this header). A
/// program derives from it, sets its defaults in its constructor and adds
/// its algorithm's options.
class run_config : public dice::run_config {
 public:
  run_config();

  /// --seed: seeds networks, environments, exploration and sampling.
  std::int64_t seed = 0;
  /// --out: the output folder.
  std::string out = "runs/dice";
  /// --resume: continue from OUT/latest.pt and OUT/latest.json.
  bool resume = false;
  /// --max-env-steps: stop after this many env steps (0: no limit).
  std::int64_t max_env_steps = 0;
  /// --max-seconds: stop after this long (0: no limit).
  double max_seconds = 0;
  /// --stop-value: stop once the greedy eval mean reaches this.
  double stop_value = 1e18;
  /// --eval-every: learner iterations between evaluations.
  std::int64_t eval_every = 100;
  /// --eval-episodes: greedy episodes per evaluation.
  std::int64_t eval_episodes = 10;
  /// --eval-only=FILE: play greedy episodes with a checkpoint and exit.
  std::string eval_only;
  /// --quiet: no live progress line.
  bool quiet = false;
  /// --no-plot: no eval_return.png.
  bool no_plot = false;
  /// --threads: LibTorch intra-op threads per process.
  std::int64_t threads = 1;
  /// --envs-per-collector: environments each collector steps as a batch.
  std::int64_t envs_per_collector = 8;
  /// --steps-per-collect: steps of every env per collector iteration.
  std::int64_t steps_per_collect = 16;
  /// --hidden and --layers: the networks' hidden layers.
  std::int64_t hidden = 64, layers = 2;
  /// --checkpoint-every: seconds between the learner's checkpoints.
  double checkpoint_every = 10;
  /// --on-env-error: "reset" ends a failing env's episode, resets it and
  /// the collector goes on (the failure is logged and counted); "stop"
  /// fails the collector's node with the error, which ends the run unless
  /// --dice.max-restarts (or dice-launch --max-restarts) restarts it.
  std::string on_env_error = "reset";
  /// --periodical, --model-period, --stale-toleration.
  model_exchange_options models;
  /// --dice.record=DIR: the learner records what it applied (replay.hpp).
  std::string record;
  /// --dice.record-max-bytes: the record's bound (0: none).
  std::int64_t record_max_bytes = 0;
  /// --dice.replay=DIR: run the learner alone from that record and exit.
  std::string replay;

  /// The hidden layer widths (`layers` times `hidden`).
  std::vector<std::int64_t> hidden_sizes() const;

  /// The outputs of a run called `title`.
  outputs_options outputs(std::string title) const;

  /// The evaluator's settings.
  eval_options eval() const;

  /// The collectors' vector_env settings (--on-env-error).
  vector_env_options env_options() const;

  /// Checks the options; errc::invalid_config names the bad one.
  caf::error validate() const;
};

/// DQN's options (--nstep, --lr, --batch-size, --buffer-size,
/// --learning-starts, --updates-per-step, --target-update-every, --tau,
/// --no-double-dqn, --eps-decay-steps, --eps-end, --eps-decay,
/// --prioritized, --per-alpha, --per-beta), parsed into `values`.
struct dqn_cli {
  /// Registers the options on a program's option set.
  void add_to(caf::config_option_set& opts);
  /// The options as parsed (with `cfg`'s network size), checked.
  caf::expected<dqn_options> resolve(const run_config& cfg) const;
  /// Defaults (a program may change them in its constructor); parsing
  /// writes here.
  dqn_options values;
  /// --eps-decay: linear or exponential.
  std::string eps_decay = "linear";
  /// --no-double-dqn: plain DQN targets.
  bool no_double = false;
};

/// PPO's options (--vtrace, --max-lag, --rho-bar, --c-bar, --gamma,
/// --lambda, --clip, --value-clip, --lr, --epochs, --minibatch, --vf-coef,
/// --ent-coef, --max-grad-norm, --log-std), parsed into `values`.
struct ppo_cli {
  /// Registers the options on a program's option set.
  void add_to(caf::config_option_set& opts);
  /// The options as parsed, checked.
  caf::expected<ppo_options> resolve() const;
  /// Defaults (a program may change them in its constructor); parsing
  /// writes here.
  ppo_options values;
  /// --log-std: the Gaussian policy's initial log standard deviation.
  double log_std = 0.0;
};

} // namespace dice::rl
