#include "dice/rl/actor_critic.hpp"

#include "dice/core/errc.hpp"

#include <cmath>
#include <stdexcept>

namespace dice::rl {

namespace {

// Orthogonal weights and zero biases, drawn right after the layer is built:
// the RNG sees default init, orthogonal init, next layer's default init, ...
// as in examples/ppo_cartpole, so a seeded network is today's network.
// (dice::rl::mlp builds every layer first, which would reorder the draws.)
torch::nn::Linear make_linear(std::int64_t in, std::int64_t out, double gain) {
  torch::nn::Linear l{in, out};
  torch::NoGradGuard no_grad;
  torch::nn::init::orthogonal_(l->weight, gain);
  l->bias.zero_();
  return l;
}

// Linear, Tanh, ..., Linear: hidden layers with gain sqrt(2), the last with
// `head_gain`; PyTorch's nn.Sequential names ("0", "2", ...).
torch::nn::Sequential make_mlp(std::int64_t in,
                               const std::vector<std::int64_t>& hidden,
                               std::int64_t out, double head_gain) {
  torch::nn::Sequential seq;
  auto width = in;
  for (auto h : hidden) {
    seq->push_back(make_linear(width, h, std::sqrt(2.0)));
    seq->push_back(torch::nn::Tanh());
    width = h;
  }
  seq->push_back(make_linear(width, out, head_gain));
  return seq;
}

std::string check_options(const actor_critic_options& opts) {
  for (auto h : opts.hidden)
    if (h < 1)
      return "hidden width " + std::to_string(h) + " below 1";
  if (!std::isfinite(opts.log_std_init))
    return "non-finite log_std_init";
  return {};
}

} // namespace

std::string check_spaces(const space& observation_space,
                         const space& action_space) {
  if (observation_space.is_discrete())
    return "observation space " + observation_space.to_string()
      + " is not a Box";
  if (observation_space.flat_size() < 1)
    return "empty observation space " + observation_space.to_string();
  if (action_space.is_discrete() ? action_space.n < 1
                                 : action_space.flat_size() < 1)
    return "empty action space " + action_space.to_string();
  return {};
}

actor_critic_impl::actor_critic_impl(const space& observation_space,
                                     const space& action_space,
                                     const actor_critic_options& opts) {
  auto why = check_spaces(observation_space, action_space);
  if (why.empty())
    why = check_options(opts);
  if (!why.empty())
    throw std::invalid_argument("actor_critic: " + why);
  obs_dim_ = observation_space.flat_size();
  std::int64_t out = 0;
  if (action_space.is_discrete()) {
    num_actions_ = action_space.n;
    out = num_actions_;
  } else {
    act_dim_ = action_space.flat_size();
    out = act_dim_;
  }
  pi = register_module("pi", make_mlp(obs_dim_, opts.hidden, out, 0.01));
  v = register_module("v", make_mlp(obs_dim_, opts.hidden, 1, 1.0));
  if (!discrete())
    log_std = register_parameter("log_std",
                                 torch::full({act_dim_}, opts.log_std_init));
}

torch::Tensor actor_critic_impl::policy_out(const torch::Tensor& obs) {
  return pi->forward(obs);
}

torch::Tensor actor_critic_impl::value(const torch::Tensor& obs) {
  return v->forward(obs).squeeze(1);
}

categorical actor_critic_impl::categorical_policy(const torch::Tensor& obs) {
  return categorical{policy_out(obs)};
}

diag_gaussian actor_critic_impl::gaussian_policy(const torch::Tensor& obs) {
  return diag_gaussian{policy_out(obs), log_std};
}

act_result actor_critic_impl::act(const torch::Tensor& obs,
                                  std::mt19937_64& gen) {
  torch::NoGradGuard no_grad;
  act_result r;
  if (discrete()) {
    auto d = categorical_policy(obs);
    r.actions = d.sample(gen);
    r.log_prob = d.log_prob(r.actions.to(obs.device())).cpu();
  } else {
    auto d = gaussian_policy(obs);
    r.actions = d.sample(gen);
    r.log_prob = d.log_prob(r.actions.to(obs.device())).cpu();
  }
  r.value = value(obs).cpu();
  return r;
}

evaluation actor_critic_impl::evaluate(const torch::Tensor& obs,
                                       const torch::Tensor& actions) {
  evaluation e;
  if (discrete()) {
    auto d = categorical_policy(obs);
    e.log_prob = d.log_prob(actions);
    e.entropy = d.entropy();
  } else {
    auto d = gaussian_policy(obs);
    e.log_prob = d.log_prob(actions);
    e.entropy = d.entropy();
  }
  e.value = value(obs);
  return e;
}

torch::Tensor actor_critic_impl::mode(const torch::Tensor& obs) {
  torch::NoGradGuard no_grad;
  return discrete() ? categorical_policy(obs).mode()
                    : gaussian_policy(obs).mode();
}

caf::expected<actor_critic>
make_actor_critic(const space& observation_space, const space& action_space,
                  const actor_critic_options& opts) {
  auto why = check_spaces(observation_space, action_space);
  if (why.empty())
    why = check_options(opts);
  if (!why.empty())
    return make_error(errc::invalid_config, "actor_critic: " + why);
  return actor_critic{observation_space, action_space, opts};
}

void copy_weights(actor_critic& dst, const actor_critic& src) {
  torch::NoGradGuard no_grad;
  auto d = dst->named_parameters(true);
  for (auto& kvp : src->named_parameters(true))
    d[kvp.key()].copy_(kvp.value());
}

} // namespace dice::rl
