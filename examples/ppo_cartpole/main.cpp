// ppo_cartpole: asynchronous PPO (clipped surrogate, GAE or V-trace
// targets) on CartPole-v1, written against dice::rl. A learner (node 0), an
// evaluator (node 1) and N collectors (nodes 2..) run as actors in one
// process by default, or one node per process under dice-launch, srun or
// --dice.* options by hand. Collectors send fixed-length segments with
// trajectory_end_idx and finished episodes through the context exchanger;
// models reach them through the periodical model exchanger.
//
//   ppo_cartpole                          # train until greedy eval >= 475
//   ppo_cartpole --vtrace --max-lag=4     # V-trace targets, drop lag > 4
//   ppo_cartpole --eval-only=runs/ppo_cartpole/best.pt
//   dice-launch --workers 5 -- ppo_cartpole   # 5 processes: 0 learner,
//                                             # 1 evaluator, 2..4 collectors
//
// Writes OUT/metrics.jsonl, OUT/summary.json, OUT/eval_return.png (needs
// gnuplot), OUT/latest.pt and OUT/best.pt; as a cluster node,
// OUT/metrics-ID.jsonl and OUT/summary-ID.json instead of the first two.

#include <dice/dice.hpp>

namespace {

/// The RL options (seed, limits, outputs, evaluation, envs, model exchange)
/// and PPO's, with this example's defaults.
struct config : dice::rl::ppo_run_config {
  config() {
    make_env = [](std::size_t) { // seeded when its vector_env is reset
      return std::make_unique<dice::envs::cartpole>();
    };
    title = "PPO CartPole-v1";
    out = "runs/ppo_cartpole";
    max_env_steps = 300000;
    max_seconds = 120;
    stop_value = 475;
    eval_every = 2;
    envs_per_collector = 4;
    steps_per_collect = 64;
    // A collector acts with one model for at most 2 iterations.
    models.periodical = true;
    models.stale_toleration = 2;
    opt_group{custom_options_, "global"}.add(steps_per_collect, "steps",
                                             "steps per env per segment (64)");
  }
};

} // namespace

int main(int argc, char** argv) {
  return dice::run<config>(argc, argv,
                           [](dice::node_setup& n, const config& cfg) {
                             dice::rl::use_ppo(n, cfg);
                           });
}
