// DQN's options, --eval-only, the evaluator, and a node's agent and
// composition by role.

#include "dice/rl/dqn_agent.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/rl/exchange.hpp"
#include "dice/rl/replay.hpp"
#include "dice/torch/model.hpp"

#include "caf/config_option_adder.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <stdexcept>

namespace dice::rl {

namespace {

// Floats per observation and number of actions of env 0 of `make`.
caf::expected<std::pair<std::int64_t, std::int64_t>>
dqn_env_shape(const vector_env::factory& make) {
  if (!make)
    return make_error(errc::invalid_config, "DQN: no environment (make_env)");
  std::unique_ptr<env> e;
  try {
    e = make(0);
  } catch (const std::exception& ex) {
    return make_error(errc::invalid_config,
                      std::string{"DQN: cannot make the env: "} + ex.what());
  }
  if (!e)
    return make_error(errc::invalid_config, "DQN: make_env returned null");
  auto obs = e->observation_space();
  auto act = e->action_space();
  if (obs.is_discrete() || !act.is_discrete() || act.n < 1)
    return make_error(errc::invalid_config,
                      "DQN needs a Box observation and Discrete actions, not "
                        + obs.to_string() + " and " + act.to_string());
  return std::make_pair(obs.flat_size(), act.n);
}

} // namespace

// -- dqn_run_config -----------------------------------------------------------

dqn_run_config::dqn_run_config() {
  dqn.add_to(custom_options_);
  opt_group{custom_options_, "global"}
    .add(reduce, "reduce",
         "a learner group's all-reduce: automatic, exchange, bucketed or flat")
    .add(verify_every, "verify-every",
         "a learner group checks that parameters are identical every N "
         "iterations and logs digests to OUT/digests-NODE.txt (0: never)");
}

caf::expected<dqn_run_options> dqn_run_config::resolve() const {
  if (auto err = validate())
    return err;
  auto algo = dqn.resolve(*this);
  if (!algo)
    return algo.error();
  dqn_run_options x;
  if (reduce == "flat")
    x.reduce = reduce_mode::flat;
  else if (reduce == "bucketed")
    x.reduce = reduce_mode::bucketed;
  else if (reduce == "exchange")
    x.reduce = reduce_mode::exchange;
  else if (reduce != "automatic")
    return make_error(errc::invalid_config,
                      "--reduce must be automatic, exchange, bucketed or flat");
  if (learners < 0 || learners > 64)
    return make_error(errc::invalid_config, "--learners must be 1..64");
  if (verify_every < 0)
    return make_error(errc::invalid_config,
                      "--verify-every must be at least 0");
  if (auto shape = dqn_env_shape(make_env); !shape)
    return shape.error();
  x.algo = std::move(*algo);
  x.make_env = make_env;
  x.seed = static_cast<std::uint64_t>(seed);
  x.envs_per_collector = static_cast<std::size_t>(envs_per_collector);
  x.steps_per_collect = steps_per_collect;
  x.env = env_options();
  x.max_env_steps = max_env_steps;
  x.max_seconds = max_seconds;
  x.checkpoint_every = checkpoint_every;
  x.resume = resume;
  x.verify_every = verify_every;
  x.eval = eval();
  x.record = record;
  x.record_max_bytes = static_cast<std::uint64_t>(record_max_bytes);
  return x;
}

std::optional<int> dqn_run_config::run_instead(caf::actor_system&) const {
  auto opts = resolve();
  if (!opts) {
    std::cerr << dice::render(opts.error()) << '\n';
    return 2;
  }
  torch::set_num_threads(static_cast<int>(threads));
  if (!replay.empty())
    return print_replay(replay_dqn(*this), replay);
  if (eval_only.empty())
    return std::nullopt;
  auto shape = dqn_env_shape(make_env);
  q_network net{shape->first, shape->second, opts->algo.hidden};
  if (auto err = load_q_network(net, eval_only)) {
    std::cerr << "cannot load " << eval_only << ": " << dice::render(err)
              << '\n';
    return 1;
  }
  net->eval();
  auto returns = play_greedy(make_env, static_cast<int>(eval_episodes),
                             opts->seed,
                             [net](const torch::Tensor& obs) mutable {
                               return net->forward(obs).argmax(1);
                             });
  if (!returns) {
    std::cerr << dice::render(returns.error()) << '\n';
    return 1;
  }
  double sum = 0;
  for (std::size_t i = 0; i < returns->size(); ++i) {
    std::cout << "episode " << i << ": return " << (*returns)[i] << '\n';
    sum += (*returns)[i];
  }
  std::cout << "mean return over " << returns->size()
            << " episodes: " << sum / static_cast<double>(returns->size())
            << '\n';
  return 0;
}

// -- dqn_evaluator ------------------------------------------------------------

middleware dqn_evaluator(q_network net, const dqn_run_options& opts,
                         std::shared_ptr<run_outputs> out) {
  eval_hooks hooks;
  hooks.make_env = opts.make_env;
  hooks.act = [net](const torch::Tensor& obs) mutable {
    return net->forward(obs).argmax(1);
  };
  hooks.save = [net](const std::string& path) mutable {
    return save_q_network(net, path);
  };
  return evaluator(std::move(out), std::move(hooks), opts.eval);
}

// -- dqn_agent ----------------------------------------------------------------

dqn_agent::dqn_agent(node_setup& n, const dqn_run_config& cfg)
  : node_(n.id()), collectors_(n.collectors()) {
  auto opts = cfg.resolve();
  if (!opts)
    throw std::runtime_error(render(opts.error()));
  opts_ = std::move(*opts);
  auto latest = path_in(cfg.out, "latest.pt");
  // A learner that dice-launch started again resumes from its last
  // checkpoint (no --resume needed); other nodes get its model anyway.
  if (n.role() == role::learner && n.restarts() > 0 && !opts_.resume) {
    if (std::filesystem::exists(latest)) {
      opts_.resume = true;
      log::info(n.id(),
                "restart " + std::to_string(n.restarts())
                  + ": resuming from the last checkpoint");
    } else {
      log::warning(n.id(),
                   "restart " + std::to_string(n.restarts())
                     + ": no checkpoint in " + cfg.out
                     + ", so this learner starts without one: fresh "
                       "weights, train_iter 0, env_step 0, env_episode 0, "
                       "empty replay buffer");
    }
  }
  auto outputs = cfg.outputs(cfg.title);
  outputs.resume = outputs.resume || opts_.resume;
  out_ = run_outputs::of(n, outputs);
  if (opts_.max_seconds > 0)
    n.deadline(std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(opts_.max_seconds + 120)));
  opts_.resume_command = "dice-launch --workers " + std::to_string(n.workers())
    + " --learners " + std::to_string(n.learners())
    + " -- <this program> <the same options> --resume "
      "--out="
    + cfg.out;
  auto shape = dqn_env_shape(opts_.make_env);
  if (n.role() == role::learner && n.index() == 0)
    log::info(n.id(),
              cfg.title + ": " + std::to_string(n.learners()) + " learner(s), "
                + std::to_string(n.collectors()) + " collector(s) x "
                + std::to_string(opts_.envs_per_collector) + " envs, "
                + (cfg.models.periodical ? "periodical" : "per-iteration")
                + " model exchange, obs " + std::to_string(shape->first)
                + ", actions " + std::to_string(shape->second) + ", seed "
                + std::to_string(opts_.seed) + ", out " + cfg.out);
  // Same seed, same construction: every node starts from the learner's
  // weights.
  torch::manual_seed(opts_.seed);
  net_ = q_network{shape->first, shape->second, opts_.algo.hidden};
  // The learner loads its checkpoint itself (dqn_trainer); the others start
  // from it when there is one, until the learner's first model arrives.
  if (opts_.resume && n.role() != role::learner
      && std::filesystem::exists(latest))
    if (auto err = load_q_network(net_, latest))
      log::warning(n.id(), "cannot load " + latest + ": " + render(err));
  port_ = model_port_of(net_.ptr());
}

model_port_ptr dqn_agent::model() const {
  return port_;
}

middleware dqn_agent::train(std::shared_ptr<learner_group_member> member) {
  bool record = !opts_.record.empty();
  if (record && member)
    throw std::runtime_error("--dice.record: a learner group is not recorded "
                             "(one learner only)");
  if (record && opts_.resume)
    throw std::runtime_error("--dice.record: a resumed learner is not "
                             "recorded (it starts from its initial weights)");
  auto m = dqn_trainer(net_, opts_, out_, std::move(member));
  if (!m)
    throw std::runtime_error(render(m.error()));
  if (!record)
    return std::move(*m);
  record_start start;
  start.algo = "dqn";
  start.seed = opts_.seed;
  start.node = node_;
  start.options = dqn_record_options(opts_);
  return record_train(std::move(*m), opts_.record, opts_.record_max_bytes,
                      std::move(start), net_.ptr());
}

middleware dqn_agent::evaluate() {
  return dqn_evaluator(net_, opts_, out_);
}

middleware dqn_agent::collect() {
  auto m = dqn_collector(net_, opts_, out_, node_, collectors_);
  if (!m)
    throw std::runtime_error(render(m.error()));
  return std::move(*m);
}

void use_dqn(node_setup& n, const dqn_run_config& cfg) {
  dqn_agent agent{n, cfg};
  auto member = use_exchangers(n, agent.model(), cfg.models,
                               agent.options().reduce);
  switch (n.role()) {
    case role::learner:
      n.use(agent.train(std::move(member)));
      // Without an evaluator node rank 0 evaluates, so the stop value
      // still ends the run.
      if (!n.cluster_has(role::evaluator) && n.index() == 0)
        n.use(agent.evaluate());
      break;
    case role::evaluator: n.use(agent.evaluate()); break;
    default: n.use(agent.collect());
  }
}

} // namespace dice::rl
