#include "dice/rl/ppo.hpp"

#include "dice/core/errc.hpp"

#include <algorithm>
#include <exception>
#include <numeric>

namespace dice::rl {

// -- tensors of step columns --------------------------------------------------

torch::Tensor obs_tensor(const step_columns& steps) {
  auto n = static_cast<std::int64_t>(steps.size());
  return torch::from_blob(const_cast<float*>(steps.obs.data()),
                          {n, steps.layout.obs_dim});
}

namespace {

torch::Tensor next_obs_tensor(const step_columns& steps) {
  auto n = static_cast<std::int64_t>(steps.size());
  return torch::from_blob(const_cast<float*>(steps.next_obs.data()),
                          {n, steps.layout.obs_dim});
}

torch::Tensor float_tensor(const std::vector<float>& xs) {
  return torch::from_blob(const_cast<float*>(xs.data()),
                          {static_cast<std::int64_t>(xs.size())});
}

// Where the network's parameters live (the CPU for a network without any).
torch::Device device_of(const actor_critic& net) {
  auto ps = net->parameters();
  return ps.empty() ? torch::Device{torch::kCPU} : ps.front().device();
}

caf::error torch_failed(const char* where, const std::exception& e) {
  return make_error(errc::user_exception,
                    std::string{where} + ": LibTorch threw: " + e.what());
}

} // namespace

torch::Tensor action_tensor(const step_columns& steps) {
  auto n = static_cast<std::int64_t>(steps.size());
  if (steps.layout.discrete())
    return torch::from_blob(
      const_cast<std::int64_t*>(steps.discrete_actions.data()), {n},
      torch::kLong);
  return torch::from_blob(const_cast<float*>(steps.box_actions.data()),
                          {n, steps.layout.act_dim});
}

// -- loss ---------------------------------------------------------------------

loss_terms ppo_loss(const evaluation& e, const loss_inputs& in,
                    const ppo_options& opts) {
  auto ratio = torch::exp(e.log_prob - in.behaviour_logp);
  auto s1 = ratio * in.advantages;
  auto s2 = torch::clamp(ratio, 1.0 - opts.clip, 1.0 + opts.clip)
    * in.advantages;
  loss_terms r;
  r.policy = -torch::min(s1, s2).mean();
  auto err = (e.value - in.value_targets).pow(2);
  if (opts.value_clip > 0) {
    // The value may move at most c from what the behaviour policy
    // estimated; the max keeps the loss pessimistic (PPO2's cliprange_vf).
    auto v_old = in.behaviour_values;
    auto clipped = v_old
      + torch::clamp(e.value - v_old, -opts.value_clip, opts.value_clip);
    err = torch::max(err, (clipped - in.value_targets).pow(2));
  }
  r.value = 0.5 * err.mean();
  r.entropy = e.entropy.mean();
  r.total = r.policy + opts.vf_coef * r.value - opts.ent_coef * r.entropy;
  torch::NoGradGuard no_grad;
  r.clip_fraction = ((ratio - 1.0).abs() > opts.clip)
                      .to(torch::kFloat)
                      .mean()
                      .item<double>();
  r.approx_kl = (in.behaviour_logp - e.log_prob).mean().item<double>();
  return r;
}

// -- learner ------------------------------------------------------------------

ppo_learner::ppo_learner(actor_critic net, ppo_options opts, std::uint64_t seed)
  : opts_(opts), net_(std::move(net)),
    opt_(net_->parameters(), torch::optim::AdamOptions(opts.lr).eps(1e-5)),
    rng_(seed) {
  layout_.obs_dim = net_->obs_dim();
  layout_.num_actions = net_->num_actions();
  layout_.act_dim = net_->act_dim();
}

caf::expected<prepared_batch>
ppo_learner::prepare(const std::vector<dice::payload>& trajectories,
                     const std::vector<std::int64_t>& end_idx,
                     std::int64_t learner_version) {
  intake_options io;
  io.learner_version = learner_version;
  io.max_lag = opts_.max_lag;
  io.layout = layout_;
  auto seg = cut_segments(trajectories, end_idx, io, intake_, lags_);
  if (!seg)
    return seg.error();
  prepared_batch b;
  b.segments = std::move(*seg);
  if (b.segments.size() == 0)
    return b;
  try {
    compute_targets(b);
  } catch (const std::exception& e) {
    return torch_failed("ppo_learner::prepare", e);
  }
  return b;
}

void ppo_learner::compute_targets(prepared_batch& b) {
  auto& steps = b.segments.steps;
  auto n = steps.size();
  auto& in = b.inputs;
  in.reward = steps.reward;
  in.terminated = steps.terminated;
  in.traj_flag = trajectory_flags(b.segments);
  {
    // Values and target log-probs of the network as it is now: V-trace's
    // V and pi (the learner re-evaluates what the collectors sent).
    torch::NoGradGuard no_grad;
    auto dev = device_of(net_);
    auto e = net_->evaluate(obs_tensor(steps).to(dev),
                            action_tensor(steps).to(dev));
    auto v = e.value.to(torch::kCPU).contiguous();
    auto nv = net_->value(next_obs_tensor(steps).to(dev))
                .to(torch::kCPU)
                .contiguous();
    auto lp = e.log_prob.to(torch::kCPU).contiguous();
    in.value.assign(v.data_ptr<float>(), v.data_ptr<float>() + n);
    in.next_value.assign(nv.data_ptr<float>(), nv.data_ptr<float>() + n);
    b.log_rho.resize(n);
    for (std::size_t i = 0; i < n; ++i)
      b.log_rho[i] = lp.data_ptr<float>()[i] - steps.logp[i];
  }
  // Every column has n rows (cut_segments checked them), so neither
  // estimator can fail on lengths here.
  if (opts_.vtrace) {
    vtrace_options vo;
    vo.gamma = opts_.gamma;
    vo.lambda = opts_.lambda;
    vo.rho_bar = opts_.rho_bar;
    vo.c_bar = opts_.c_bar;
    vo.pg_rho_bar = opts_.rho_bar;
    auto vt = vtrace(in, b.log_rho, vo);
    b.advantages = std::move(vt->pg_adv);
    b.value_targets = std::move(vt->vs);
  } else {
    b.advantages = std::move(*gae(in, opts_.gamma, opts_.lambda));
    b.value_targets.resize(n);
    for (std::size_t i = 0; i < n; ++i)
      b.value_targets[i] = b.advantages[i] + in.value[i];
  }
}

caf::expected<update_stats> ppo_learner::train(const prepared_batch& b) {
  auto n = b.segments.size();
  if (b.advantages.size() != n || b.value_targets.size() != n
      || b.inputs.value.size() != n)
    return make_error(errc::invalid_config,
                      "ppo_learner::train: a batch not made by prepare()");
  try {
    return train_impl(b);
  } catch (const std::exception& e) {
    return torch_failed("ppo_learner::train", e);
  }
}

update_stats ppo_learner::train_impl(const prepared_batch& b) {
  update_stats st;
  auto n = static_cast<std::int64_t>(b.segments.size());
  st.samples = n;
  if (n == 0)
    return st;
  auto& steps = b.segments.steps;
  auto dev = device_of(net_);
  auto obs = obs_tensor(steps).to(dev);
  auto actions = action_tensor(steps).to(dev);
  auto blogp = float_tensor(steps.logp).to(dev);
  auto adv = float_tensor(b.advantages).to(dev);
  auto targets = float_tensor(b.value_targets).to(dev);
  // V_old: what the behaviour policy estimated, where it was sent; the
  // learner's own value at preparation elsewhere.
  std::vector<float> old(b.inputs.value);
  for (std::size_t i = 0; i < old.size(); ++i)
    if (steps.has_value[i] != 0)
      old[i] = steps.value[i];
  auto old_values = float_tensor(old).to(dev);
  auto mb = std::max<std::int64_t>(1, std::min(opts_.minibatch, n));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (int epoch = 0; epoch < opts_.epochs; ++epoch) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    for (std::int64_t lo = 0; lo < n; lo += mb) {
      auto hi = std::min(n, lo + mb);
      auto idx = torch::from_blob(order.data() + lo, {hi - lo}, torch::kLong)
                   .to(dev);
      loss_inputs in;
      in.behaviour_logp = blogp.index_select(0, idx);
      in.advantages = adv.index_select(0, idx);
      if (opts_.normalize_adv && hi - lo > 1)
        in.advantages = (in.advantages - in.advantages.mean())
          / (in.advantages.std() + 1e-8);
      in.value_targets = targets.index_select(0, idx);
      in.behaviour_values = old_values.index_select(0, idx);
      auto e = net_->evaluate(obs.index_select(0, idx),
                              actions.index_select(0, idx));
      auto terms = ppo_loss(e, in, opts_);
      opt_.zero_grad();
      terms.total.backward();
      if (opts_.max_grad_norm > 0)
        torch::nn::utils::clip_grad_norm_(net_->parameters(),
                                          opts_.max_grad_norm);
      opt_.step();
      ++st.grad_steps;
      st.policy_loss += terms.policy.item<double>();
      st.value_loss += terms.value.item<double>();
      st.entropy += terms.entropy.item<double>();
      st.clip_fraction += terms.clip_fraction;
      st.approx_kl += terms.approx_kl;
    }
  }
  grad_steps_ += st.grad_steps;
  if (st.grad_steps > 0) {
    auto k = static_cast<double>(st.grad_steps);
    st.policy_loss /= k;
    st.value_loss /= k;
    st.entropy /= k;
    st.clip_fraction /= k;
    st.approx_kl /= k;
  }
  return st;
}

caf::expected<update_stats>
ppo_learner::learn(const std::vector<dice::payload>& trajectories,
                   const std::vector<std::int64_t>& end_idx,
                   std::int64_t learner_version) {
  auto b = prepare(trajectories, end_idx, learner_version);
  if (!b)
    return b.error();
  return train(*b);
}

} // namespace dice::rl
