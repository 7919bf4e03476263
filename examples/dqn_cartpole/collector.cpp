// A DQN collector: steps vectorised CartPoles with epsilon-greedy actions
// and puts one transition_batch per iteration into the context.

#include "dice/pipeline/context.hpp"
#include "dice/pipeline/middleware.hpp"

#include "cartpole.hpp"
#include "evals.hpp"
#include "shared_run.hpp"

#include <chrono>
#include <memory>
#include <random>
#include <vector>

namespace dqn {

using demo::clock_type;

dice::middleware collect_step(std::shared_ptr<shared_run> run, q_network net,
                              std::uint32_t node) {
  struct state {
    std::shared_ptr<shared_run> run;
    q_network net;
    std::uint32_t node;
    vec_cartpole envs;
    nstep_accumulator acc;
    std::mt19937_64 rng;
    std::vector<double> recent_returns;
    // The first iteration writes a metrics line, then one a second.
    clock_type::time_point last_metrics;
    state(std::shared_ptr<shared_run> r, q_network n, std::uint32_t id)
      : run(std::move(r)), net(std::move(n)), node(id),
        envs(run->opts.envs_per_collector, run->opts.seed * 7919 + id),
        acc(run->opts.envs_per_collector, run->opts.algo.nstep,
            run->opts.algo.gamma),
        rng(run->opts.seed * 104729 + id) {
      // nop
    }
  };
  auto st = std::make_shared<state>(std::move(run), std::move(net), node);
  dice::middleware m;
  m.name = "collect";
  m.before = [st](dice::context& ctx) -> dice::step {
    auto& opts = st->run->opts;
    // Exploration follows the global env step; a collector sees only its
    // own, and the others step at about the same pace.
    auto global = static_cast<double>(st->run->resume_env_step)
      + static_cast<double>(ctx.env_step) * opts.collectors;
    auto eps = epsilon_at(opts.algo, global);
    transition_batch batch;
    auto expected = static_cast<std::size_t>(opts.steps_per_collect)
      * opts.envs_per_collector;
    batch.obs.reserve(expected * 4);
    batch.next_obs.reserve(expected * 4);
    std::int64_t episodes = 0;
    for (std::int64_t t = 0; t < opts.steps_per_collect; ++t) {
      auto obs = st->envs.obs();
      auto actions = epsilon_greedy_actions(st->net, obs, eps, st->rng);
      st->envs.step(actions);
      st->acc.add(obs.data(), actions.data(), st->envs.rewards().data(),
                  st->envs.final_obs().data(), st->envs.terminated().data(),
                  st->envs.truncated().data(), batch);
      for (auto r : st->envs.finished_returns()) {
        st->recent_returns.push_back(r);
        ++episodes;
      }
    }
    ctx.env_step += static_cast<std::int64_t>(expected);
    ctx.env_episode += episodes;
    std::vector<transition_batch> items;
    items.push_back(std::move(batch));
    ctx.trajectories = {dice::pack(items, st->node, ctx.model_version)};
    auto now = clock_type::now();
    if (now - st->last_metrics >= std::chrono::seconds{1}) {
      st->last_metrics = now;
      auto mean = demo::take_mean(st->recent_returns);
      st->run->write_metrics(st->node, "collector",
                             {{"env_step", ctx.env_step},
                              {"env_episode", ctx.env_episode},
                              {"train_return_mean", demo::number(mean)},
                              {"epsilon", eps},
                              {"model_version", ctx.model_version},
                              {"train_iter", ctx.train_iter}});
    }
    return dice::proceed;
  };
  return m;
}

} // namespace dqn
