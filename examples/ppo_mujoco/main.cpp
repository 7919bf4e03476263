// ppo_mujoco: PPO with a diagonal Gaussian policy on MuJoCo continuous
// control, written against dice::rl like ppo_cartpole: a learner (node 0),
// an evaluator (node 1) and N collectors (nodes 2..) as actors in one
// process by default, or one node per process under dice-launch.
//
//   ppo_mujoco                                # Hopper-v4, 1M env steps
//   ppo_mujoco --env=humanoid-stand --hidden=256
//   ppo_mujoco --eval-only=runs/ppo_mujoco/best.pt
//   dice-launch --workers 4 -- ppo_mujoco     # 0 learner, 1 evaluator,
//                                             # 2..3 collectors
//
// Writes the outputs of every dice::rl program (OUT/metrics.jsonl,
// summary.json, eval_return.png, latest.pt, best.pt); docs/mujoco.md shows
// a learning curve and what it cost.

#include <dice/dice.hpp>
#include <dice/mujoco/hopper.hpp>
#include <dice/mujoco/humanoid_stand.hpp>

namespace {

/// The RL options, PPO's and --env, with defaults for Hopper-v4.
struct config : dice::rl::ppo_run_config {
  /// --env: hopper or humanoid-stand.
  std::string env = "hopper";

  config() {
    out = "runs/ppo_mujoco";
    max_env_steps = 1'000'000;
    eval_every = 10;
    eval_episodes = 5;
    envs_per_collector = 8;
    steps_per_collect = 128;
    collectors = 2;
    // Stable-Baselines3's and CleanRL's PPO defaults for MuJoCo.
    ppo.values.lr = 3e-4;
    ppo.values.epochs = 10;
    ppo.values.minibatch = 64;
    ppo.values.lambda = 0.95f;
    ppo.values.max_grad_norm = 0.5;
    models.periodical = true;
    models.stale_toleration = 2;
    opt_group{custom_options_, "global"}.add(env, "env",
                                             "hopper or humanoid-stand");
    // --env is parsed after this constructor; a config is never copied
    // (CAF's configs are not copyable), so `this` outlives the run.
    make_env = [this](std::size_t) -> std::unique_ptr<dice::env> {
      if (env == "humanoid-stand")
        return std::make_unique<dice::envs::humanoid_stand>();
      return std::make_unique<dice::envs::hopper>();
    };
  }

  std::optional<int> run_instead(caf::actor_system& sys) const override {
    if (env != "hopper" && env != "humanoid-stand") {
      std::cerr << "ppo_mujoco: --env must be hopper or humanoid-stand, not '"
                << env << "'\n";
      return 2;
    }
    return ppo_run_config::run_instead(sys);
  }
};

} // namespace

int main(int argc, char** argv) {
  return dice::run<config>(
    argc, argv, [](dice::node_setup& n, const config& cfg) {
      auto title = cfg.env == "hopper" ? "PPO Hopper-v4"
                                       : "PPO humanoid standing";
      dice::rl::use_ppo(n, cfg, cfg.ppo, cfg.make_env, title);
    });
}
