// Replaying a DQN or a PPO learner from its record (replay.hpp): the same
// trainer middleware the recorded run used, on the recorded initial
// weights, driven through the recorded iterations.

#include "dice/core/errc.hpp"
#include "dice/rl/replay.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <iomanip>
#include <iostream>

namespace dice::rl {

std::string dqn_record_options(const dqn_run_options& x) {
  auto& a = x.algo;
  nlohmann::json j{{"seed", x.seed},
                   {"hidden", a.hidden},
                   {"gamma", a.gamma},
                   {"nstep", a.nstep},
                   {"lr", a.lr},
                   {"batch_size", a.batch_size},
                   {"buffer_size", a.replay.capacity},
                   {"prioritized", a.replay.prioritized},
                   {"per_alpha", a.replay.alpha},
                   {"per_beta", a.replay.beta},
                   {"per_beta_end", a.replay.beta_end},
                   {"per_beta_steps", a.replay.beta_steps},
                   {"learning_starts", a.learning_starts},
                   {"updates_per_step", a.updates_per_step},
                   {"target_update_every", a.target_update_every},
                   {"tau", a.tau},
                   {"double_dqn", a.double_dqn},
                   {"grad_clip", a.grad_clip}};
  return j.dump();
}

std::string ppo_record_options(const ppo_agent_options& x) {
  auto& p = x.ppo;
  nlohmann::json j{{"seed", x.seed},
                   {"hidden", x.net.hidden},
                   {"log_std", x.net.log_std_init},
                   {"gamma", p.gamma},
                   {"lambda", p.lambda},
                   {"clip", p.clip},
                   {"value_clip", p.value_clip},
                   {"lr", p.lr},
                   {"epochs", p.epochs},
                   {"minibatch", p.minibatch},
                   {"vf_coef", p.vf_coef},
                   {"ent_coef", p.ent_coef},
                   {"max_grad_norm", p.max_grad_norm},
                   {"normalize_adv", p.normalize_adv},
                   {"vtrace", p.vtrace},
                   {"rho_bar", p.rho_bar},
                   {"c_bar", p.c_bar},
                   {"max_lag", p.max_lag}};
  return j.dump();
}

caf::expected<replay_report> replay_dqn(const dqn_run_config& cfg) {
  auto opts = cfg.resolve();
  if (!opts)
    return opts.error();
  auto rec = read_record(cfg.replay);
  if (!rec)
    return rec.error();
  auto e = opts->make_env(0);
  auto obs = e->observation_space();
  auto act = e->action_space();
  q_network net{obs.flat_size(), act.n, opts->algo.hidden};
  if (auto err = prepare_replay(*rec, "dqn", dqn_record_options(*opts), *net))
    return err;
  // The replay's own outputs: the recorded run's folder stays as it was.
  outputs_options o;
  o.out = (std::filesystem::path{cfg.replay} / "replay").string();
  o.title = cfg.title + " replay";
  o.progress = false;
  o.plot = false;
  auto out = run_outputs::make(o);
  if (!out)
    return out.error();
  auto run = *opts;
  run.record.clear();
  run.resume = false;
  run.max_env_steps = 0;
  run.max_seconds = 0;
  auto m = dqn_trainer(net, run, *out);
  if (!m)
    return m.error();
  return replay_learner(*rec, std::move(*m), *net);
}

caf::expected<replay_report> replay_ppo(const run_config& cfg,
                                        const ppo_cli& ppo,
                                        const vector_env::factory& make_env) {
  auto opts = ppo_agent_options_of(cfg, ppo, "replay");
  if (!opts)
    return opts.error();
  auto rec = read_record(cfg.replay);
  if (!rec)
    return rec.error();
  auto e = make_env(0);
  auto net = make_actor_critic(e->observation_space(), e->action_space(),
                               opts->net);
  if (!net)
    return net.error();
  if (auto err = prepare_replay(*rec, "ppo", ppo_record_options(*opts), **net))
    return err;
  auto train = opts->train;
  train.ppo = opts->ppo;
  train.resume = false;
  train.max_env_steps = 0;
  train.max_seconds = 0;
  // No outputs: the recorded run's folder stays as it was.
  return replay_learner(*rec, ppo_trainer(*net, train, nullptr), **net);
}

int print_replay(const caf::expected<replay_report>& x,
                 const std::string& dir) {
  if (!x) {
    std::cerr << "replay of " << dir << " failed: " << render(x.error())
              << '\n';
    return 1;
  }
  std::cout << "replayed " << x->iterations << " iterations (" << x->deltas
            << " deltas, " << x->bytes << " bytes of record"
            << (x->cut ? ", cut by --dice.record-max-bytes" : "") << ") in "
            << x->seconds << " s: all " << x->hashes_checked
            << " weights hashes match, final " << std::hex << x->final_hash
            << std::dec << '\n';
  return 0;
}

} // namespace dice::rl
