// use_ppo: a PPO node for its role in one call (see ppo_agent.hpp).

#include "dice/rl/ppo_agent.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/rl/exchange.hpp"
#include "dice/rl/replay.hpp"
#include "dice/torch/model.hpp"

#include <fstream>
#include <iostream>
#include <mutex>
#include <stdexcept>

namespace dice::rl {

caf::expected<ppo_agent_options> ppo_agent_options_of(const run_config& cfg,
                                                      const ppo_cli& ppo,
                                                      std::string title) {
  if (auto err = cfg.validate())
    return err;
  auto algo = ppo.resolve();
  if (!algo)
    return algo.error();
  ppo_agent_options x;
  x.ppo = *algo;
  x.net.hidden = cfg.hidden_sizes();
  x.net.log_std_init = ppo.log_std;
  x.seed = static_cast<std::uint64_t>(cfg.seed);
  x.collect.envs = cfg.envs_per_collector;
  x.collect.steps = cfg.steps_per_collect;
  x.collect.env = cfg.env_options();
  x.collect.seed = x.seed;
  x.train.ppo = x.ppo;
  x.train.seed = x.seed;
  x.train.max_env_steps = cfg.max_env_steps;
  x.train.max_seconds = cfg.max_seconds;
  x.train.checkpoint_every = cfg.checkpoint_every;
  x.train.resume = cfg.resume;
  x.eval = cfg.eval();
  // Some seeds' initial weights already play well greedily: only a model
  // the learner trained solves the run.
  x.eval.trained_to_solve = true;
  x.outputs = cfg.outputs(std::move(title));
  x.models = cfg.models;
  x.threads = cfg.threads;
  x.record = cfg.record;
  x.record_max_bytes = static_cast<std::uint64_t>(cfg.record_max_bytes);
  return x;
}

namespace {

// The spaces of the env the factory makes first.
std::pair<space, space> ppo_spaces_of(const vector_env::factory& make_env) {
  auto e = make_env ? make_env(0) : nullptr;
  if (!e)
    throw std::runtime_error("the env factory made no env");
  return {e->observation_space(), e->action_space()};
}

// The initial network, the same on every node: torch's generator is global,
// so seeding and building happen under one lock.
actor_critic ppo_initial_net(const ppo_agent_options& opts,
                             const vector_env::factory& make_env) {
  static std::mutex mtx;
  auto [obs, act] = ppo_spaces_of(make_env);
  std::lock_guard<std::mutex> guard{mtx};
  torch::manual_seed(opts.seed);
  auto net = make_actor_critic(obs, act, opts.net);
  if (!net)
    throw std::runtime_error(render(net.error()));
  return *net;
}

middleware ppo_evaluate(const std::shared_ptr<run_outputs>& out,
                        actor_critic net, const ppo_agent_options& opts,
                        const vector_env::factory& make_env, bool on_learner) {
  eval_hooks hooks;
  hooks.make_env = make_env;
  hooks.act = [net](const torch::Tensor& obs) mutable {
    return net->mode(obs);
  };
  hooks.save = [net](const std::string& path) mutable {
    return save_checkpoint(net, path);
  };
  if (on_learner)
    hooks.version = [](const context& ctx) {
      return ctx.train_iter;
    };
  else
    hooks.version = acting_version;
  return evaluator(out, std::move(hooks), opts.eval);
}

// "PPO CartPole-v1: 3 collectors x 4 envs x 64 steps, GAE targets, ...".
std::string describe(const node_setup& n, const ppo_agent_options& opts) {
  auto& p = opts.ppo;
  return opts.outputs.title + ": " + std::to_string(n.collectors())
    + " collectors x " + std::to_string(opts.collect.envs) + " envs x "
    + std::to_string(opts.collect.steps) + " steps, "
    + (p.vtrace ? "V-trace" : "GAE") + " targets"
    + (p.max_lag >= 0 ? ", max lag " + std::to_string(p.max_lag) : "")
    + (opts.models.periodical ? ", model period "
           + std::to_string(opts.models.period) + ", stale toleration "
           + std::to_string(opts.models.stale_toleration)
                              : "")
    + ", seed " + std::to_string(opts.seed) + ", out " + opts.outputs.out;
}

} // namespace

void use_ppo(node_setup& n, const ppo_agent_options& opts,
             const vector_env::factory& make_env) {
  if (n.learners() > 1)
    throw std::runtime_error("use_ppo: a group of learners is not supported");
  torch::set_num_threads(
    static_cast<int>(std::max<std::int64_t>(opts.threads, 1)));
  if (opts.train.max_seconds > 0)
    n.deadline(std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(opts.train.max_seconds + 120)));
  auto net = ppo_initial_net(opts, make_env);
  auto out = run_outputs::of(n, opts.outputs);
  if (n.role() == role::learner && n.restarts() == 0)
    log::info(n.id(), describe(n, opts));
  // --resume, or a node started again: every node starts from the last
  // checkpoint rather than the seed's weights (the learner in ppo_trainer).
  bool resume = opts.train.resume || out->options().resume || n.restarts() > 0;
  auto latest = out->path("latest.pt");
  if (resume && n.role() != role::learner && std::ifstream{latest}.good())
    if (auto err = load_checkpoint(net, latest))
      log::warning(n.id(), "starting from the seed's weights: " + render(err));
  use_exchangers(n, model_port_of(net.ptr()), opts.models);
  switch (n.role()) {
    case role::learner: {
      auto train = opts.train;
      train.ppo = opts.ppo;
      train.resume = resume;
      if (opts.record.empty()) {
        n.use(ppo_trainer(net, train, out));
      } else {
        if (resume)
          throw std::runtime_error("--dice.record: a resumed learner is not "
                                   "recorded (it starts from its initial "
                                   "weights)");
        record_start start;
        start.algo = "ppo";
        start.seed = opts.seed;
        start.node = n.id();
        start.options = ppo_record_options(opts);
        n.use(record_train(ppo_trainer(net, train, out), opts.record,
                           opts.record_max_bytes, std::move(start), net.ptr()));
      }
      // Without an evaluator node the learner evaluates.
      if (!n.cluster_has(role::evaluator))
        n.use(ppo_evaluate(out, net, opts, make_env, true));
      break;
    }
    case role::evaluator:
      n.use(ppo_evaluate(out, net, opts, make_env, false));
      break;
    case role::collector: {
      auto collect = opts.collect;
      collect.seed = opts.collect.seed * 7919 + n.id();
      n.use(ppo_collector(net, make_env, collect, out));
      break;
    }
    default: break;
  }
}

void use_ppo(node_setup& n, const run_config& cfg, const ppo_cli& ppo,
             const vector_env::factory& make_env, const std::string& title) {
  auto opts = ppo_agent_options_of(cfg, ppo, title);
  if (!opts)
    throw std::runtime_error(render(opts.error()));
  use_ppo(n, *opts, make_env);
}

std::optional<int> ppo_eval_only(const run_config& cfg, const ppo_cli& ppo,
                                 const vector_env::factory& make_env) {
  if (cfg.eval_only.empty())
    return std::nullopt;
  try {
    auto opts = ppo_agent_options_of(cfg, ppo, "eval");
    if (!opts)
      throw std::runtime_error(render(opts.error()));
    torch::set_num_threads(static_cast<int>(cfg.threads));
    auto net = ppo_initial_net(*opts, make_env);
    if (auto err = load_checkpoint(net, cfg.eval_only))
      throw std::runtime_error(render(err));
    auto returns = play_greedy(make_env, static_cast<int>(cfg.eval_episodes),
                               opts->seed,
                               [net](const torch::Tensor& obs) mutable {
                                 return net->mode(obs);
                               });
    if (!returns)
      throw std::runtime_error(render(returns.error()));
    double sum = 0;
    for (std::size_t i = 0; i < returns->size(); ++i) {
      std::cout << "episode " << i << ": return " << (*returns)[i] << '\n';
      sum += (*returns)[i];
    }
    std::cout << "mean return over " << returns->size()
              << " episodes: " << sum / returns->size() << '\n';
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
}

ppo_run_config::ppo_run_config() {
  ppo.add_to(custom_options_);
}

std::optional<int> ppo_run_config::run_instead(caf::actor_system&) const {
  auto opts = make_env
    ? ppo_agent_options_of(*this, ppo, title)
    : caf::expected<ppo_agent_options>{make_error(
      errc::invalid_config, "the program sets no environment (make_env)")};
  if (!opts) {
    std::cerr << dice::render(opts.error()) << '\n';
    return 2;
  }
  torch::set_num_threads(static_cast<int>(threads));
  if (!replay.empty())
    return print_replay(replay_ppo(*this, ppo, make_env), replay);
  return ppo_eval_only(*this, ppo, make_env);
}

void use_ppo(node_setup& n, const ppo_run_config& cfg) {
  use_ppo(n, cfg, cfg.ppo, cfg.make_env, cfg.title);
}

} // namespace dice::rl
