// ppo_cartpole: asynchronous PPO (clipped surrogate, GAE or V-trace
// targets) on CartPole-v1 with dice. A learner (node 0), an evaluator
// (node 1) and N collectors (nodes 2..) run as role actors in one process by
// default, or one node per process when node settings are given
// (dice-launch, srun, or --dice.* options by hand). Collectors send
// fixed-length segments with trajectory_end_idx and finished episodes
// through the context exchanger; models reach them through the periodical
// model exchanger.
//
//   ppo_cartpole                          # train until greedy eval >= 475
//   ppo_cartpole --vtrace --max-lag=4     # V-trace targets, drop lag > 4
//   ppo_cartpole --eval-only=runs/ppo_cartpole/best.pt
//   dice-launch --workers 5 -- ppo_cartpole   # 5 processes: 0 learner,
//                                             # 1 evaluator, 2..4 collectors
//   ppo_cartpole --plain --seeds=5        # the plain loop (no actors),
//                                         # --lag=K simulates policy lag
//
// Writes OUT/metrics.jsonl, OUT/summary.json, OUT/eval_return.png (needs
// gnuplot), OUT/latest.pt and OUT/best.pt; as a cluster node,
// OUT/metrics-ID.jsonl and OUT/summary-ID.json instead of the first two.

#include "dice/runtime/main.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/runtime/node.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include "evals.hpp"
#include "loop.hpp"
#include "options.hpp"

#include <iostream>

namespace {

/// Command-line options (--name=value or --name value) plus the node
/// settings (dice.*), which make the process a cluster node.
struct config : dice::node_system_config {
  ppo::run_options run;
  std::string eval_only;
  std::int64_t seed = 0;
  std::int64_t collectors = 3;
  std::int64_t envs = 4;
  std::int64_t steps = 64;
  std::int64_t threads = 1;
  std::int64_t epochs = 10;
  double gamma = 0.99;
  double lambda = 0.95;
  double rho_bar = 1.0;
  double c_bar = 1.0;
  // CAF 0.17 flags can only be switched on, so the defaults are "off".
  bool quiet = false;
  bool no_plot = false;
  // The plain loop.
  bool plain = false;
  std::int64_t seeds = 1;
  std::int64_t lag = 0;

  config() {
    auto& a = run.algo;
    opt_group{custom_options_, "global"}
      .add(collectors, "collectors", "number of collector nodes (3)")
      .add(envs, "envs-per-collector", "CartPoles per collector (4)")
      .add(steps, "steps", "steps per env per segment (64)")
      .add(seed, "seed", "random seed (0)")
      .add(run.max_env_steps, "max-env-steps",
           "stop after this many env steps (300000)")
      .add(run.max_seconds, "max-seconds", "stop after this long (120)")
      .add(run.stop_value, "stop-value", "stop at this greedy eval mean (475)")
      .add(run.model_period, "model-period",
           "learner sends its model every this many iterations (1)")
      .add(run.stale_toleration, "stale-toleration",
           "iterations a collector acts with one model (2)")
      .add(run.out, "out", "output folder (runs/ppo_cartpole)")
      .add(eval_only, "eval-only", "run greedy episodes with this checkpoint")
      .add(run.eval_every, "eval-every",
           "evaluate every this many learner updates (2)")
      .add(run.eval_episodes, "eval-episodes", "greedy episodes per eval (10)")
      .add(quiet, "quiet", "no live progress line on stderr")
      .add(no_plot, "no-plot", "do not write OUT/eval_return.png")
      .add(a.vtrace, "vtrace", "V-trace targets instead of GAE")
      .add(a.max_lag, "max-lag",
           "drop segments more than this many versions old (-1: keep)")
      .add(rho_bar, "rho-bar", "V-trace rho_bar (1)")
      .add(c_bar, "c-bar", "V-trace c_bar (1)")
      .add(a.hidden, "hidden", "hidden width (64)")
      .add(gamma, "gamma", "discount (0.99)")
      .add(lambda, "lambda", "GAE / trace lambda (0.95)")
      .add(a.clip, "clip", "PPO clip range (0.2)")
      .add(a.lr, "lr", "Adam learning rate (1e-3)")
      .add(epochs, "epochs", "passes over each batch (10)")
      .add(a.minibatch, "minibatch", "samples per gradient step (64)")
      .add(a.vf_coef, "vf-coef", "value loss weight (0.5)")
      .add(a.ent_coef, "ent-coef", "entropy bonus weight (0)")
      .add(a.max_grad_norm, "max-grad-norm", "gradient clip (0.5)")
      .add(threads, "threads", "LibTorch intra-op threads (1)")
      .add(plain, "plain",
           "the plain loop instead of the cluster (no actors, no outputs)")
      .add(seeds, "seeds", "--plain: run seeds seed .. seed+N-1 (1)")
      .add(lag, "lag", "--plain: collectors act this many versions behind");
  }
};

/// The plain loop (no actors): one JSON line per seed.
int run_plain(const config& cfg, const ppo::run_options& opts) {
  ppo::loop_options lo;
  lo.algo = opts.algo;
  lo.collectors = opts.collectors;
  lo.envs_per_collector = opts.envs_per_collector;
  lo.steps_per_segment = opts.steps_per_segment;
  lo.max_seconds = opts.max_seconds;
  lo.max_env_steps = opts.max_env_steps;
  lo.stop_value = opts.stop_value;
  lo.eval_every = opts.eval_every;
  lo.eval_episodes = opts.eval_episodes;
  lo.lag = cfg.lag;
  int solved = 0;
  auto n = std::max<std::int64_t>(cfg.seeds, 1);
  for (std::int64_t k = 0; k < n; ++k) {
    lo.seed = static_cast<std::uint64_t>(cfg.seed + k);
    std::function<void(const std::string&)> log;
    if (!cfg.quiet)
      log = [](const std::string& line) {
        dice::log::info(0, line);
      };
    auto res = ppo::run_loop(lo, log);
    solved += res.solved ? 1 : 0;
    std::cout << "seed " << lo.seed << ": " << ppo::to_json(res) << '\n'
              << std::flush;
  }
  std::cout << solved << " of " << n << " seeds reached " << lo.stop_value
            << '\n';
  return 0;
}

int caf_main(caf::actor_system& sys, const config& cfg) {
  auto opts = cfg.run;
  opts.collectors = static_cast<std::uint32_t>(
    std::max<std::int64_t>(cfg.collectors, 1));
  opts.envs_per_collector = static_cast<std::uint32_t>(
    std::max<std::int64_t>(cfg.envs, 1));
  opts.steps_per_segment = std::max<std::int64_t>(cfg.steps, 1);
  opts.seed = static_cast<std::uint64_t>(cfg.seed);
  opts.progress = !cfg.quiet;
  opts.plot = !cfg.no_plot;
  opts.algo.epochs = static_cast<int>(cfg.epochs);
  opts.algo.gamma = static_cast<float>(cfg.gamma);
  opts.algo.lambda = static_cast<float>(cfg.lambda);
  opts.algo.rho_bar = static_cast<float>(cfg.rho_bar);
  opts.algo.c_bar = static_cast<float>(cfg.c_bar);
  ppo::set_threads(static_cast<int>(cfg.threads));
  if (cfg.plain)
    return run_plain(cfg, opts);
  if (!cfg.eval_only.empty()) {
    return demo::print_eval_only(ppo::run_eval_only(cfg.eval_only, opts));
  }
  auto ncfg = dice::make_node_config(cfg);
  if (!ncfg) {
    dice::log::error(0, "bad node settings: " + dice::render(ncfg.error()));
    return 2;
  }
  auto sum = ncfg->distributed ? ppo::run_node(sys, opts, *ncfg)
                               : ppo::run_training(sys, opts);
  if (!sum) {
    dice::log::error(ncfg->id, "run failed: " + dice::render(sum.error()));
    return 1;
  }
  std::cout << ppo::to_string(*sum) << "outputs in " << opts.out << '\n';
  return sum->stop_reason.rfind("error", 0) == 0 ? 1 : 0;
}

} // namespace

DICE_MAIN(config)
