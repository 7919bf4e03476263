// The DQN evaluator: demo::eval_step (shared with ppo_cartpole) playing
// greedy episodes with the Q-network, and --eval-only.

#include "dice/core/errc.hpp"
#include "dice/core/role.hpp"

#include "evals.hpp"
#include "shared_run.hpp"

#include <algorithm>
#include <exception>

namespace dqn {

dice::middleware eval_step(std::shared_ptr<shared_run> run, q_network net,
                           std::uint32_t node) {
  auto& opts = run->opts;
  demo::eval_settings s{opts.eval_every, opts.eval_episodes, opts.seed,
                        opts.stop_value, opts.out};
  demo::eval_hooks hooks;
  hooks.play = [net](int episodes, std::uint64_t seed) mutable {
    return evaluate_greedy(net, episodes, seed);
  };
  hooks.save = [net](const std::string& path) mutable {
    save_q_network(net, path);
  };
  hooks.version = [](const dice::context& ctx) {
    return ctx.model_version;
  };
  // On a learner that also evaluates (a 2-node cluster) train_step has
  // already restored the counters.
  hooks.first = [run](dice::context& ctx, dice::node_services& svc) {
    if (svc.roles().has(dice::role::learner))
      return;
    ctx.env_step += run->resume_env_step;
    ctx.train_iter = std::max(ctx.train_iter, run->resume_train_iter);
  };
  return demo::eval_step(std::move(run), node, std::move(s), std::move(hooks));
}

caf::expected<std::vector<double>> run_eval_only(const std::string& checkpoint,
                                                 const run_options& opts,
                                                 int episodes) {
  q_network net{opts.algo.hidden};
  try {
    load_q_network(net, checkpoint);
  } catch (const std::exception& e) {
    return dice::make_error(dice::errc::invalid_config,
                            "cannot load " + checkpoint + ": " + e.what());
  }
  net->eval();
  return evaluate_greedy(net, episodes, opts.seed);
}

} // namespace dqn
