// PPO's collector middleware and its checkpoints (see ppo_agent.hpp).

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/pipeline/node_services.hpp"
#include "dice/rl/files.hpp"
#include "dice/rl/ppo_agent.hpp"
#include "dice/rl/segment_builder.hpp"
#include "dice/torch/model.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <stdexcept>

namespace dice::rl {

std::int64_t acting_version(const context& ctx) noexcept {
  // The model a learner sends after its iteration k has id k and has seen
  // k + 1 updates; id -1 means never loaded: the initial weights.
  return std::max<std::int64_t>(ctx.model_version, -1) + 1;
}

caf::error save_checkpoint(actor_critic& net, const std::string& path) {
  return save_module(*net, path);
}

caf::error load_checkpoint(actor_critic& net, const std::string& path) {
  if (auto err = load_module(*net, path))
    return make_error(errc::invalid_config,
                      "cannot load " + path + ": " + render(err));
  return caf::none;
}

namespace {

using clock_type = std::chrono::steady_clock;

struct ppo_collector_state {
  actor_critic net{nullptr};
  vector_env::factory make_env;
  ppo_collector_options opts;
  std::shared_ptr<run_outputs> out;
  std::shared_ptr<ppo_collector_stats> stats;
  node_services* svc = nullptr;
  std::optional<vector_env> envs;
  std::optional<segment_builder> builder;
  std::mt19937_64 gen;
  // The observations acted on (the vector overwrites its own at step()).
  std::vector<float> obs;
  torch::Tensor low, high;
  std::vector<double> recent_returns;
  // Env failures logged so far (the vector_env counts them all).
  std::uint64_t errors_logged = 0;
  // The first iteration writes a line at once.
  clock_type::time_point last_metrics{};
  // Thread CPU seconds of this iteration in the envs and the policy.
  double env_cpu = 0, inference_cpu = 0;

  // Makes and resets the envs on the first iteration: errors fail the node.
  void start() {
    auto v = vector_env::make(static_cast<std::size_t>(opts.envs), make_env,
                              opts.env);
    if (!v)
      throw std::runtime_error("cannot make the envs: " + render(v.error()));
    auto layout = step_layout::of(v->observation_space(), v->action_space());
    if (!layout)
      throw std::runtime_error(render(layout.error()));
    if (layout->obs_dim != net->obs_dim()
        || layout->num_actions != net->num_actions()
        || layout->act_dim != net->act_dim())
      throw std::runtime_error("the envs' spaces (" + to_string(*layout)
                               + ") do not match the network's");
    auto b = segment_builder::make(static_cast<std::size_t>(opts.envs),
                                   *layout);
    if (!b)
      throw std::runtime_error(render(b.error()));
    if (auto err = v->reset(opts.seed))
      throw std::runtime_error("cannot reset the envs: " + render(err));
    if (!layout->discrete()) {
      low = torch::tensor(v->action_space().low);
      high = torch::tensor(v->action_space().high);
    }
    envs.emplace(std::move(*v));
    builder.emplace(std::move(*b));
  }

  // One vector step: act, step, record.
  void step_once() {
    auto& v = *envs;
    auto n = static_cast<std::int64_t>(v.size());
    obs = v.obs();
    auto x = torch::from_blob(obs.data(),
                              {n, static_cast<std::int64_t>(v.obs_dim())});
    torch::Tensor actions, logp, value, clipped;
    {
      cpu_span span{inference_cpu};
      auto r = net->act(x, gen);
      actions = r.actions.contiguous();
      logp = r.log_prob.to(torch::kFloat).contiguous();
      value = r.value.to(torch::kFloat).contiguous();
      // The env gets the action clipped to its bounds, the learner the one
      // sampled (its log-probability is that of the sample).
      if (!net->discrete())
        clipped = torch::max(torch::min(actions, high), low).contiguous();
    }
    caf::error err;
    step_arrays s;
    {
      cpu_span span{env_cpu};
      if (net->discrete()) {
        s.discrete_actions = actions.data_ptr<std::int64_t>();
        err = v.step(s.discrete_actions);
      } else {
        s.box_actions = actions.data_ptr<float>();
        err = v.step(clipped.data_ptr<float>());
      }
    }
    if (err)
      throw std::runtime_error(render(err));
    s.obs = obs.data();
    s.logp = logp.data_ptr<float>();
    s.value = value.data_ptr<float>();
    s.reward = v.rewards().data();
    s.next_obs = v.final_obs().data();
    s.terminated = v.terminated().data();
    s.truncated = v.truncated().data();
    if (auto add_err = builder->add(s))
      throw std::runtime_error(render(add_err));
  }

  void report(const context& ctx) {
    // A failed env was ended and reset (env_error_policy::reset_env): the
    // run goes on, the user learns which env failed where.
    if (envs->errors() > errors_logged) {
      log::warning(svc->node_id(),
                   std::to_string(envs->errors() - errors_logged)
                     + " env failure(s), the last: "
                     + render(envs->last_error()));
      errors_logged = envs->errors();
    }
    if (!out)
      return;
    out->add_cpu("env", env_cpu);
    out->add_cpu("inference", inference_cpu);
    env_cpu = inference_cpu = 0;
    auto now = clock_type::now();
    if (now - last_metrics < std::chrono::duration<double>(opts.metrics_every))
      return;
    last_metrics = now;
    auto mean = take_mean(recent_returns);
    out->metrics(svc->node_id(), "collector",
                 {{"env_step", ctx.env_step},
                  {"env_episode", ctx.env_episode},
                  {"train_return_mean", number(mean)},
                  {"model_version", acting_version(ctx)},
                  {"train_iter", ctx.train_iter},
                  {"env_errors", envs->errors()}});
  }
};

} // namespace

middleware ppo_collector(actor_critic net, vector_env::factory make_env,
                         ppo_collector_options opts,
                         std::shared_ptr<run_outputs> out,
                         std::shared_ptr<ppo_collector_stats> stats) {
  if (opts.envs < 1 || opts.steps < 1)
    throw std::invalid_argument("ppo_collector: envs and steps must be >= 1");
  auto st = std::make_shared<ppo_collector_state>();
  st->net = std::move(net);
  st->make_env = std::move(make_env);
  st->opts = opts;
  st->out = std::move(out);
  st->stats = std::move(stats);
  // The sampling stream of examples/ppo_cartpole's collector for this seed.
  st->gen.seed(opts.seed * 0x9E3779B97F4A7C15ull + 1);
  middleware m;
  m.name = "ppo_collect";
  m.attach = [st](node_services& svc) {
    st->svc = &svc;
  };
  m.before = [st](context& ctx) -> step {
    if (!st->envs)
      st->start();
    torch::NoGradGuard no_grad;
    for (std::int64_t t = 0; t < st->opts.steps; ++t)
      st->step_once();
    auto version = acting_version(ctx);
    auto got = st->builder->finish(st->svc->node_id(), version);
    ctx.env_step += got.env_steps;
    ctx.env_episode += static_cast<std::int64_t>(got.finished_returns.size());
    ctx.trajectories = std::move(got.trajectories);
    ctx.episodes = std::move(got.episodes);
    ctx.trajectory_end_idx = std::move(got.trajectory_end_idx);
    st->recent_returns.insert(st->recent_returns.end(),
                              got.finished_returns.begin(),
                              got.finished_returns.end());
    if (st->stats) {
      auto& s = *st->stats;
      s.env_steps += got.env_steps;
      s.episodes += static_cast<std::int64_t>(got.finished_returns.size());
      s.iterations += 1;
      s.env_errors = static_cast<std::int64_t>(st->envs->errors());
      s.returns.insert(s.returns.end(), got.finished_returns.begin(),
                       got.finished_returns.end());
    }
    st->report(ctx);
    return proceed;
  };
  return m;
}

} // namespace dice::rl
