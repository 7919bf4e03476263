// dqn_cartpole: distributed DQN on CartPole-v1 with dice, as a user of the
// dice::rl library. A learner (node 0), an evaluator (node 1) and N
// collectors (nodes 2..) exchange context and models like DI-engine's
// distributer middleware: as role actors in one process by default, or one
// node per process when node settings are given (dice-launch, srun, or
// --dice.* options by hand).
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
// Every option: dqn_cartpole --help.

#include <dice/dice.hpp>

namespace {

/// DQN's options (dice::rl::dqn_run_config) with CartPole's defaults.
struct config : dice::rl::dqn_run_config {
  config() {
    title = "DQN CartPole-v1";
    out = "runs/dqn_cartpole";
    stop_value = 475;
    max_env_steps = 500000;
    collectors = 3;
    envs_per_collector = 8;
    make_env = [](std::size_t) {
      return std::make_unique<dice::envs::cartpole>();
    };
  }
};

} // namespace

int main(int argc, char** argv) {
  return dice::run<config>(
    argc, argv, [](dice::node_setup& n, const config& cfg) {
      // The node's Q-network (same seed, same weights on every node), its
      // options and the run's outputs.
      dice::rl::dqn_agent agent{n, cfg};
      // Context and model exchange for the node's role; a learner of a
      // group also gets its membership.
      auto group = dice::rl::use_exchangers(n, agent.model(), cfg.models,
                                            agent.options().reduce);
      switch (n.role()) {
        case dice::role::learner:
          n.use(agent.train(group));
          // Without an evaluator node (2 nodes) rank 0 evaluates, so the
          // stop value still ends the run.
          if (!n.cluster_has(dice::role::evaluator) && n.index() == 0)
            n.use(agent.evaluate());
          break;
        case dice::role::evaluator: n.use(agent.evaluate()); break;
        default: n.use(agent.collect());
      }
    });
}
