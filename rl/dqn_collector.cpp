// DQN's collector: a batch of the user's environments stepped with
// epsilon-greedy actions, one transition_batch per iteration.

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/payload.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/pipeline/node_services.hpp"
#include "dice/rl/dqn_agent.hpp"

#include <chrono>
#include <random>
#include <stdexcept>
#include <vector>

namespace dice::rl {

caf::expected<middleware> dqn_collector(q_network net,
                                        const dqn_run_options& opts,
                                        std::shared_ptr<run_outputs> out,
                                        std::uint32_t node,
                                        std::uint32_t collectors) {
  if (!net)
    return make_error(errc::invalid_config, "dqn_collector: no network");
  if (opts.envs_per_collector < 1 || opts.steps_per_collect < 1)
    return make_error(errc::invalid_config,
                      "dqn_collector: needs at least one env and one step");
  auto envs = vector_env::make(opts.envs_per_collector, opts.make_env,
                               opts.env);
  if (!envs)
    return envs.error();
  if (!envs->action_space().is_discrete())
    return make_error(errc::invalid_config,
                      "dqn_collector: DQN needs a Discrete action space");
  if (static_cast<std::int64_t>(envs->obs_dim()) != net->obs_dim())
    return make_error(
      errc::model_mismatch,
      "dqn_collector: the network takes " + std::to_string(net->obs_dim())
        + " floats, the env observes " + std::to_string(envs->obs_dim()));
  // Seeds as the examples had them: each collector its own streams.
  if (auto err = envs->reset(opts.seed * 7919 + node))
    return err;
  struct state {
    q_network net;
    dqn_run_options opts;
    std::shared_ptr<run_outputs> out;
    std::uint32_t node;
    double collectors;
    vector_env envs;
    nstep_accumulator acc;
    std::mt19937_64 rng;
    std::vector<float> obs;
    std::vector<double> recent_returns;
    node_services* svc = nullptr;
    // The first iteration writes a metrics line, then one a second.
    std::chrono::steady_clock::time_point last_metrics;
  };
  auto obs_dim = static_cast<std::int64_t>(envs->obs_dim());
  auto st = std::make_shared<state>(
    state{std::move(net),
          opts,
          std::move(out),
          node,
          static_cast<double>(std::max<std::uint32_t>(collectors, 1)),
          std::move(*envs),
          nstep_accumulator{opts.envs_per_collector, obs_dim, opts.algo.nstep,
                            opts.algo.gamma},
          std::mt19937_64{opts.seed * 104729 + node},
          {},
          {},
          nullptr,
          {}});
  middleware m;
  m.name = "collect";
  m.attach = [st](node_services& svc) {
    st->svc = &svc;
  };
  m.before = [st](context& ctx) -> step {
    auto& opts = st->opts;
    // Exploration follows the global env step; a collector sees only its
    // own, and the others step at about the same pace.
    auto resumed = st->out ? st->out->resumed().env_step : 0;
    auto global = static_cast<double>(resumed)
      + static_cast<double>(ctx.env_step) * st->collectors;
    auto eps = opts.algo.epsilon.at(global);
    auto expected = static_cast<std::size_t>(opts.steps_per_collect)
      * opts.envs_per_collector;
    transition_batch batch;
    batch.obs_dim = st->acc.obs_dim();
    batch.reserve(expected);
    std::int64_t episodes = 0;
    std::int64_t steps = 0;
    double env_cpu = 0, inference_cpu = 0;
    for (std::int64_t t = 0; t < opts.steps_per_collect; ++t) {
      st->obs = st->envs.obs();
      std::vector<std::int64_t> actions;
      caf::error step_err;
      {
        cpu_span span{inference_cpu};
        actions = epsilon_greedy_actions(st->net, st->obs, eps, st->rng);
      }
      {
        cpu_span span{env_cpu};
        step_err = st->envs.step(actions);
      }
      if (auto err = std::move(step_err))
        // env_error_policy::stop: the node fails with the error, as the PPO
        // collector's does (and a supervisor may restart it); the steps of
        // this iteration were never counted, so nothing counted is lost.
        throw std::runtime_error("an env failed: " + render(err));
      auto& e = st->envs;
      if (auto err = st->acc.add(st->obs.data(), actions.data(),
                                 e.rewards().data(), e.final_obs().data(),
                                 e.terminated().data(), e.truncated().data(),
                                 batch)) {
        log::error(st->node, "collector: " + render(err));
        break;
      }
      steps += static_cast<std::int64_t>(st->envs.size());
      for (auto& ep : e.episodes()) {
        st->recent_returns.push_back(ep.ret);
        ++episodes;
      }
    }
    if (st->out) {
      st->out->add_cpu("env", env_cpu);
      st->out->add_cpu("inference", inference_cpu);
    }
    ctx.env_step += steps;
    ctx.env_episode += episodes;
    std::vector<transition_batch> items;
    items.push_back(std::move(batch));
    ctx.trajectories = {pack(items, st->node, ctx.model_version)};
    auto now = std::chrono::steady_clock::now();
    if (st->out && now - st->last_metrics >= std::chrono::seconds{1}) {
      st->last_metrics = now;
      st->out->metrics(
        st->node, "collector",
        {{"env_step", ctx.env_step},
         {"env_episode", ctx.env_episode},
         {"train_return_mean", number(take_mean(st->recent_returns))},
         {"epsilon", eps},
         {"env_errors", st->envs.errors()},
         {"model_version", ctx.model_version},
         {"train_iter", ctx.train_iter}});
    }
    return proceed;
  };
  return m;
}

} // namespace dice::rl
