// dqn_cartpole: distributed DQN on CartPole-v1 with dice. A learner (node
// 0), an evaluator (node 1) and N collectors (nodes 2..) exchange context
// and models like DI-engine's distributer middleware: as role actors in one
// process by default, or one node per process when node settings are given
// (dice-launch, srun, or --dice.* options by hand).
//
//   dqn_cartpole                         # train until eval mean >= 475
//   dqn_cartpole --collectors=4 --seed=3 --out=runs/s3
//   dqn_cartpole --resume                # continue from OUT/latest.pt
//   dqn_cartpole --eval-only=runs/dqn_cartpole/best.pt
//   dice-launch --workers 5 -- dqn_cartpole   # 5 processes: 0 learner,
//                                             # 1 evaluator, 2..4 collectors
//   dqn_cartpole --learners=2             # 2 learners, one data-parallel
//                                         # group (docs/learner_group.md)
//   dice-launch --workers 6 --learners 2 -- dqn_cartpole  # 0,1 learners,
//                                         # 2 evaluator, 3..5 collectors
//
// Writes OUT/metrics.jsonl, OUT/eval_return.png (needs gnuplot),
// OUT/summary.json, OUT/latest.pt and OUT/best.pt; as a cluster node,
// OUT/metrics-ID.jsonl and OUT/summary-ID.json instead of the first and
// third (the learner writes latest.pt, the evaluator best.pt and the plot).

#include "dice/runtime/main.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/runtime/node.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include "evals.hpp"
#include "options.hpp"

#include <cstdio>
#include <iostream>
#include <string>

namespace {

/// Command-line options (CAF's config: --name=value or a caf-application.ini)
/// plus the node settings (dice.*), which make the process a cluster node.
struct config : dice::node_system_config {
  dqn::run_options run;
  std::string eval_only;
  std::string eps_decay = "linear";
  std::int64_t threads = 1;
  std::int64_t nstep = 3;
  std::int64_t buffer_size = 50000;
  std::int64_t learning_starts = 1000;
  std::int64_t seed = 0;
  std::int64_t collectors = 3;
  std::int64_t group_learners = 1;
  std::int64_t envs = 8;
  // CAF 0.17 flags can only be switched on, so the defaults are "off".
  bool quiet = false;
  bool no_plot = false;
  bool no_double = false;

  config() {
    auto& a = run.algo;
    opt_group{custom_options_, "global"}
      .add(collectors, "collectors", "number of collector nodes (3)")
      .add(group_learners, "learners",
           "learner nodes in one data-parallel group, in one process (1; "
           "in a cluster: --dice.learners)")
      .add(run.reduce, "reduce", "a group's all-reduce: bucketed or flat")
      .add(run.verify_every, "verify-every",
           "a group checks that parameters are identical every N "
           "iterations and logs digests to OUT/digests-NODE.txt (0: never)")
      .add(envs, "envs-per-collector", "CartPoles per collector (8)")
      .add(run.steps_per_collect, "steps-per-collect",
           "steps of each env per collector iteration (16)")
      .add(seed, "seed", "random seed (0)")
      .add(run.max_env_steps, "max-env-steps",
           "stop after this many env steps (500000)")
      .add(run.max_seconds, "max-seconds", "stop after this long (0: never)")
      .add(run.stop_value, "stop-value", "stop at this eval mean (475)")
      .add(run.periodical, "periodical",
           "collectors use the periodical model exchanger")
      .add(run.model_period, "model-period",
           "period of the periodical exchanger (1)")
      .add(run.stale_toleration, "stale-toleration",
           "iterations a model may serve with --periodical (4)")
      .add(run.out, "out", "output folder (runs/dqn_cartpole)")
      .add(run.resume, "resume", "continue from OUT/latest.pt")
      .add(run.checkpoint_every, "checkpoint-every",
           "seconds between the learner's checkpoints (10)")
      .add(eval_only, "eval-only", "run greedy episodes with this checkpoint")
      .add(threads, "threads", "LibTorch intra-op threads (1)")
      .add(run.eval_every, "eval-every",
           "evaluate every this many gradient steps (100)")
      .add(run.eval_episodes, "eval-episodes", "episodes per evaluation (10)")
      .add(quiet, "quiet", "no live progress line on stderr")
      .add(no_plot, "no-plot", "do not write OUT/eval_return.png")
      .add(a.hidden, "hidden", "width of the hidden layers (64)")
      .add(nstep, "nstep", "n-step TD targets (3)")
      .add(a.lr, "lr", "Adam learning rate (1e-3)")
      .add(a.batch_size, "batch-size", "samples per gradient step (64)")
      .add(buffer_size, "buffer-size", "replay capacity (50000)")
      .add(learning_starts, "learning-starts",
           "transitions before training (1000)")
      .add(a.updates_per_step, "updates-per-step",
           "gradient steps per new transition (0.5)")
      .add(a.target_update_every, "target-update-every",
           "hard target update period, 0: Polyak (250)")
      .add(a.tau, "tau", "Polyak factor with --target-update-every=0")
      .add(no_double, "no-double-dqn", "plain (not double) DQN targets")
      .add(a.eps_decay_steps, "eps-decay-steps",
           "env steps of the epsilon decay (10000)")
      .add(a.eps_end, "eps-end", "final epsilon (0.05)")
      .add(eps_decay, "eps-decay", "linear or exponential");
  }
};

int caf_main(caf::actor_system& sys, const config& cfg) {
  auto opts = cfg.run;
  opts.collectors = static_cast<std::uint32_t>(
    std::max<std::int64_t>(cfg.collectors, 1));
  opts.envs_per_collector = static_cast<std::uint32_t>(
    std::max<std::int64_t>(cfg.envs, 1));
  opts.seed = static_cast<std::uint64_t>(cfg.seed);
  opts.progress = !cfg.quiet;
  opts.plot = !cfg.no_plot;
  opts.algo.double_dqn = !cfg.no_double;
  if (cfg.group_learners < 1 || cfg.group_learners > 64) {
    std::cerr << "--learners must be 1..64\n";
    return 2;
  }
  opts.learners = static_cast<std::uint32_t>(cfg.group_learners);
  if (opts.reduce != "bucketed" && opts.reduce != "flat") {
    std::cerr << "--reduce must be bucketed or flat\n";
    return 2;
  }
  opts.algo.nstep = static_cast<int>(cfg.nstep);
  opts.algo.buffer_size = static_cast<std::size_t>(cfg.buffer_size);
  opts.algo.learning_starts = static_cast<std::size_t>(cfg.learning_starts);
  if (cfg.eps_decay == "exponential")
    opts.algo.eps_decay = dqn::decay_kind::exponential;
  else if (cfg.eps_decay != "linear") {
    std::cerr << "--eps-decay must be linear or exponential\n";
    return 2;
  }
  dqn::set_threads(static_cast<int>(cfg.threads));
  if (!cfg.eval_only.empty()) {
    return demo::print_eval_only(
      dqn::run_eval_only(cfg.eval_only, opts, opts.eval_episodes));
  }
  auto ncfg = dice::make_node_config(cfg);
  if (!ncfg) {
    dice::log::error(0, "bad node settings: " + dice::render(ncfg.error()));
    return 2;
  }
  // Epsilon follows the estimated global env step (own steps x
  // collectors): in a cluster the collectors are the nodes the default
  // roles make collectors.
  if (ncfg->distributed) {
    opts.learners = ncfg->learners;
    if (ncfg->workers > 1)
      opts.collectors = std::max<std::uint32_t>(
        dqn::default_collectors(ncfg->workers, ncfg->learners), 1);
  }
  auto sum = ncfg->distributed ? dqn::run_node(sys, opts, *ncfg)
                               : dqn::run_training(sys, opts);
  if (!sum) {
    dice::log::error(ncfg->id, "run failed: " + dice::render(sum.error()));
    return 1;
  }
  std::cout << dqn::to_string(*sum) << "outputs in " << opts.out << '\n';
  return sum->failed ? 1 : 0;
}

} // namespace

DICE_MAIN(config)
