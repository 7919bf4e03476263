#include "dice/rl/dqn.hpp"

#include "dice/core/errc.hpp"
#include "dice/rl/network.hpp"
#include "dice/torch/model.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace dice::rl {

caf::error validate(const dqn_options& x) {
  auto bad = [](std::string what) {
    return make_error(errc::invalid_config, "dqn_options: " + what);
  };
  if (std::any_of(x.hidden.begin(), x.hidden.end(), [](std::int64_t h) {
        return h <= 0;
      }))
    return bad("a hidden width <= 0");
  if (!(x.gamma >= 0.0f && x.gamma <= 1.0f))
    return bad("gamma outside [0, 1]");
  if (x.nstep < 1)
    return bad("nstep " + std::to_string(x.nstep));
  if (!(x.lr > 0) || !std::isfinite(x.lr))
    return bad("lr " + std::to_string(x.lr));
  if (x.batch_size < 1)
    return bad("batch_size " + std::to_string(x.batch_size));
  if (!(x.updates_per_step >= 0) || !std::isfinite(x.updates_per_step))
    return bad("updates_per_step " + std::to_string(x.updates_per_step));
  if (x.target_update_every < 0)
    return bad("target_update_every " + std::to_string(x.target_update_every));
  if (x.target_update_every == 0 && !(x.tau > 0 && x.tau <= 1))
    return bad("tau outside (0, 1]");
  if (!(x.grad_clip >= 0))
    return bad("grad_clip " + std::to_string(x.grad_clip));
  return validate(x.replay);
}

// -- network ------------------------------------------------------------------

q_network_impl::q_network_impl(std::int64_t obs_dim, std::int64_t num_actions,
                               std::vector<std::int64_t> hidden)
  : obs_dim_(obs_dim), num_actions_(num_actions), hidden_(std::move(hidden)),
    layers_(mlp(obs_dim_, hidden_, num_actions_, activation::relu)) {
  // The layers go in under their own names ("0", "1", ...) rather than
  // the Sequential under one: the state_dict then reads like PyTorch's
  // nn.Sequential ("0.weight"), not "layers.0.weight".
  for (auto& kvp : layers_->named_children()) {
    register_module(kvp.key(), kvp.value());
    if (auto linear = std::dynamic_pointer_cast<torch::nn::LinearImpl>(
          kvp.value()))
      linears_.emplace_back(linear);
  }
}

torch::Tensor q_network_impl::forward(torch::Tensor x) {
  // mlp's layers: Linear, ReLU, ..., Linear (the same ops as the
  // Sequential's forward, so the same results bit for bit).
  for (std::size_t i = 0; i + 1 < linears_.size(); ++i)
    x = torch::relu(linears_[i]->forward(x));
  return linears_.back()->forward(x);
}

// -- targets ------------------------------------------------------------------

torch::Tensor td_target(const torch::Tensor& reward,
                        const torch::Tensor& discount,
                        const torch::Tensor& next_q_target,
                        const torch::Tensor& next_q_online) {
  torch::Tensor next_value;
  if (next_q_online.defined()) {
    auto a = next_q_online.argmax(1, true);
    next_value = next_q_target.gather(1, a).squeeze(1);
  } else {
    next_value = std::get<0>(next_q_target.max(1));
  }
  return reward + discount * next_value;
}

void hard_update(torch::nn::Module& dst, const torch::nn::Module& src) {
  torch::NoGradGuard no_grad;
  auto d = dst.named_parameters(true);
  for (auto& kvp : src.named_parameters(true))
    d[kvp.key()].copy_(kvp.value());
  auto db = dst.named_buffers(true);
  for (auto& kvp : src.named_buffers(true))
    db[kvp.key()].copy_(kvp.value());
}

void soft_update(torch::nn::Module& dst, const torch::nn::Module& src,
                 double tau) {
  torch::NoGradGuard no_grad;
  auto d = dst.named_parameters(true);
  for (auto& kvp : src.named_parameters(true))
    d[kvp.key()].mul_(1.0 - tau).add_(kvp.value(), tau);
}

// -- acting -------------------------------------------------------------------

std::vector<std::int64_t> greedy_actions(q_network& net, const float* obs,
                                         std::int64_t n) {
  torch::NoGradGuard no_grad;
  // from_blob does not copy: the forward pass reads `obs` in place.
  auto x = torch::from_blob(const_cast<float*>(obs), {n, net->obs_dim()});
  return greedy(net->forward(x));
}

std::vector<std::int64_t> greedy_actions(q_network& net,
                                         const std::vector<float>& obs) {
  auto n = static_cast<std::int64_t>(obs.size())
    / std::max<std::int64_t>(net->obs_dim(), 1);
  return greedy_actions(net, obs.data(), n);
}

std::vector<std::int64_t> epsilon_greedy_actions(q_network& net,
                                                 const std::vector<float>& obs,
                                                 double epsilon,
                                                 std::mt19937_64& rng) {
  torch::NoGradGuard no_grad;
  auto n = static_cast<std::int64_t>(obs.size())
    / std::max<std::int64_t>(net->obs_dim(), 1);
  auto x = torch::from_blob(const_cast<float*>(obs.data()),
                            {n, net->obs_dim()});
  return epsilon_greedy(net->forward(x), epsilon, rng);
}

// -- files --------------------------------------------------------------------

caf::error save_q_network(q_network& net, const std::string& path) {
  return save_module(*net, path);
}

caf::error load_q_network(q_network& net, const std::string& path) {
  return load_module(*net, path);
}

} // namespace dice::rl
