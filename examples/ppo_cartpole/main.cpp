// ppo_cartpole: PPO (clipped surrogate, GAE or V-trace) on CartPole-v1.
// For now one plain loop in one process: collectors produce fixed-length
// segments as payloads with trajectory_end_idx, merged as the context
// exchanger merges them, and the learner trains on them. The cluster run
// (collectors as role actors, models through periodical_model_exchanger)
// wires the same pieces (see docs/ppo.md).
//
//   ppo_cartpole                       # seed 0 until greedy eval >= 475
//   ppo_cartpole --seeds=5             # seeds 0..4, one summary line each
//   ppo_cartpole --lag=4 --vtrace      # collectors 4 versions behind

#include "dice/main.hpp"

#include "dice/log.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include "loop.hpp"

#include <iostream>

namespace {

/// Command-line options (--name=value or --name value).
struct config : caf::actor_system_config {
  ppo::loop_options run;
  std::int64_t seed = 0;
  std::int64_t seeds = 1;
  std::int64_t collectors = 1;
  std::int64_t envs = 8;
  std::int64_t threads = 1;
  std::int64_t epochs = 10;
  double gamma = 0.99;
  double lambda = 0.95;
  double rho_bar = 1.0;
  double c_bar = 1.0;
  bool quiet = false;

  config() {
    auto& a = run.algo;
    opt_group{custom_options_, "global"}
      .add(seed, "seed", "first random seed (0)")
      .add(seeds, "seeds", "run this many seeds, seed, seed+1, ... (1)")
      .add(collectors, "collectors", "collectors merged per batch (1)")
      .add(envs, "envs-per-collector", "CartPoles per collector (8)")
      .add(run.steps_per_segment, "steps", "steps per env per segment (32)")
      .add(run.max_seconds, "max-seconds", "time limit per seed (120)")
      .add(run.max_env_steps, "max-env-steps", "env-step limit (0: none)")
      .add(run.stop_value, "stop-value", "stop at this greedy eval mean (475)")
      .add(run.eval_every, "eval-every", "evaluate every this many updates (4)")
      .add(run.eval_episodes, "eval-episodes", "greedy episodes per eval (10)")
      .add(run.lag, "lag", "collectors act this many versions behind (0)")
      .add(a.vtrace, "vtrace", "V-trace targets instead of GAE")
      .add(a.max_lag, "max-lag", "drop data older than this (-1: keep)")
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
      .add(quiet, "quiet", "only the summary lines");
  }
};

int caf_main(caf::actor_system&, const config& cfg) {
  auto opts = cfg.run;
  opts.collectors = static_cast<std::uint32_t>(
    std::max<std::int64_t>(cfg.collectors, 1));
  opts.envs_per_collector = static_cast<std::uint32_t>(
    std::max<std::int64_t>(cfg.envs, 1));
  opts.algo.epochs = static_cast<int>(cfg.epochs);
  opts.algo.gamma = static_cast<float>(cfg.gamma);
  opts.algo.lambda = static_cast<float>(cfg.lambda);
  opts.algo.rho_bar = static_cast<float>(cfg.rho_bar);
  opts.algo.c_bar = static_cast<float>(cfg.c_bar);
  torch::set_num_threads(
    static_cast<int>(std::max<std::int64_t>(cfg.threads, 1)));
  int solved = 0;
  for (std::int64_t k = 0; k < std::max<std::int64_t>(cfg.seeds, 1); ++k) {
    opts.seed = static_cast<std::uint64_t>(cfg.seed + k);
    std::function<void(const std::string&)> log;
    if (!cfg.quiet)
      log = [](const std::string& line) {
        dice::log::info(0, line);
      };
    auto res = ppo::run_loop(opts, log);
    solved += res.solved ? 1 : 0;
    std::cout << "seed " << opts.seed << ": " << ppo::to_json(res) << '\n'
              << std::flush;
  }
  std::cout << solved << " of " << std::max<std::int64_t>(cfg.seeds, 1)
            << " seeds reached " << opts.stop_value << '\n';
  return 0;
}

} // namespace

DICE_MAIN(config)
