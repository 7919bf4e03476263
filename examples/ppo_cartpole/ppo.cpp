#include "ppo.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ppo {

// -- network ------------------------------------------------------------------

namespace {

torch::nn::Linear make_linear(std::int64_t in, std::int64_t out, double gain) {
  torch::nn::Linear l{in, out};
  torch::NoGradGuard no_grad;
  // Orthogonal weights and zero biases (the usual PPO initialization; a
  // near-uniform initial policy comes from the small gain of the head).
  torch::nn::init::orthogonal_(l->weight, gain);
  l->bias.zero_();
  return l;
}

} // namespace

actor_critic_impl::actor_critic_impl(std::int64_t hidden) {
  auto g = std::sqrt(2.0);
  pi1 = register_module("pi1", make_linear(obs_dim, hidden, g));
  pi2 = register_module("pi2", make_linear(hidden, hidden, g));
  pi_out = register_module("pi_out", make_linear(hidden, num_actions, 0.01));
  v1 = register_module("v1", make_linear(obs_dim, hidden, g));
  v2 = register_module("v2", make_linear(hidden, hidden, g));
  v_out = register_module("v_out", make_linear(hidden, 1, 1.0));
}

torch::Tensor actor_critic_impl::logits(const torch::Tensor& obs) {
  return pi_out(torch::tanh(pi2(torch::tanh(pi1(obs)))));
}

torch::Tensor actor_critic_impl::value(const torch::Tensor& obs) {
  return v_out(torch::tanh(v2(torch::tanh(v1(obs))))).squeeze(1);
}

void copy_weights(actor_critic& dst, actor_critic& src) {
  torch::NoGradGuard no_grad;
  auto d = dst->named_parameters(true);
  for (auto& kvp : src->named_parameters(true))
    d[kvp.key()].copy_(kvp.value());
}

// -- collector ----------------------------------------------------------------

segment_collector::segment_collector(std::size_t envs, std::int64_t steps,
                                     std::uint64_t seed)
  : envs_(envs, seed), steps_(std::max<std::int64_t>(steps, 1)),
    rng_(seed * 0x9E3779B97F4A7C15ull + 1), lengths_(envs, 0) {
  // nop
}

collected segment_collector::collect(actor_critic& net, std::uint32_t origin,
                                     std::int64_t version) {
  torch::NoGradGuard no_grad;
  auto n = envs_.size();
  auto T = static_cast<std::size_t>(steps_);
  // Zero-initialized: no byte of a record leaves this process unset.
  std::vector<step_record> steps(n * T, step_record{});
  std::vector<episode_record> episodes;
  collected out;
  std::uniform_real_distribution<float> u{0.0f, 1.0f};
  std::vector<std::int64_t> actions(n);
  std::vector<double> returns(n, 0.0);
  for (std::size_t t = 0; t < T; ++t) {
    auto obs = envs_.obs();
    auto x = torch::from_blob(obs.data(),
                              {static_cast<std::int64_t>(n),
                               static_cast<std::int64_t>(obs_dim)});
    auto logp = torch::log_softmax(net->logits(x), 1).contiguous();
    auto value = net->value(x).contiguous();
    auto* lp = logp.data_ptr<float>();
    auto* v = value.data_ptr<float>();
    for (std::size_t i = 0; i < n; ++i) {
      // Inverse-CDF sampling with our own generator: reproducible per seed.
      float draw = u(rng_);
      float cum = 0;
      std::size_t a = num_actions - 1;
      for (std::size_t k = 0; k + 1 < num_actions; ++k) {
        cum += std::exp(lp[i * num_actions + k]);
        if (draw < cum) {
          a = k;
          break;
        }
      }
      actions[i] = static_cast<std::int64_t>(a);
    }
    envs_.step(actions);
    for (std::size_t i = 0; i < n; ++i) {
      auto& r = steps[i * T + t];
      auto a = static_cast<std::size_t>(actions[i]);
      std::copy(obs.begin() + obs_dim * i, obs.begin() + obs_dim * (i + 1),
                r.obs);
      auto& fin = envs_.final_obs();
      std::copy(fin.begin() + obs_dim * i, fin.begin() + obs_dim * (i + 1),
                r.next_obs);
      r.reward = envs_.rewards()[i];
      r.logp = lp[i * num_actions + a];
      r.value = v[i];
      r.action = static_cast<std::uint8_t>(a);
      r.terminated = envs_.terminated()[i] != 0 ? 1 : 0;
      r.truncated = envs_.truncated()[i] != 0 ? 1 : 0;
      r.has_value = 1;
      ++lengths_[i];
      if (r.terminated || r.truncated) {
        episodes.push_back(episode_record{0.0, lengths_[i]});
        lengths_[i] = 0;
      }
    }
    // vec_cartpole reports the finished returns in env order.
    auto& fr = envs_.finished_returns();
    for (std::size_t j = 0; j < fr.size(); ++j)
      episodes[episodes.size() - fr.size() + j].ret = fr[j];
    out.finished_returns.insert(out.finished_returns.end(), fr.begin(),
                                fr.end());
  }
  for (std::size_t i = 0; i < n; ++i)
    out.trajectory_end_idx.push_back(static_cast<std::int64_t>((i + 1) * T)
                                     - 1);
  out.env_steps = static_cast<std::int64_t>(n * T);
  out.trajectories.push_back(dice::pack(steps, origin, version));
  if (!episodes.empty())
    out.episodes.push_back(dice::pack(episodes, origin, version));
  return out;
}

// -- loss ---------------------------------------------------------------------

loss_terms ppo_loss(const torch::Tensor& logits, const torch::Tensor& values,
                    const torch::Tensor& actions,
                    const torch::Tensor& behaviour_logp,
                    const torch::Tensor& advantages,
                    const torch::Tensor& value_targets, const ppo_config& cfg) {
  auto logp_all = torch::log_softmax(logits, 1);
  auto logp = logp_all.gather(1, actions.unsqueeze(1)).squeeze(1);
  auto ratio = torch::exp(logp - behaviour_logp);
  auto s1 = ratio * advantages;
  auto s2 = torch::clamp(ratio, 1.0 - cfg.clip, 1.0 + cfg.clip) * advantages;
  loss_terms r;
  r.policy = -torch::min(s1, s2).mean();
  r.value = 0.5 * (values - value_targets).pow(2).mean();
  r.entropy = -(torch::exp(logp_all) * logp_all).sum(1).mean();
  r.total = r.policy + cfg.vf_coef * r.value - cfg.ent_coef * r.entropy;
  torch::NoGradGuard no_grad;
  r.clip_fraction = ((ratio - 1.0).abs() > cfg.clip)
                      .to(torch::kFloat)
                      .mean()
                      .item<double>();
  r.approx_kl = (behaviour_logp - logp).mean().item<double>();
  return r;
}

// -- learner ------------------------------------------------------------------

ppo_learner::ppo_learner(actor_critic net, ppo_config cfg, std::uint64_t seed)
  : cfg_(cfg), net_(std::move(net)),
    opt_(net_->parameters(), torch::optim::AdamOptions(cfg.lr).eps(1e-5)),
    rng_(seed) {
  // nop
}

caf::expected<prepared_batch>
ppo_learner::prepare(const std::vector<dice::payload>& trajectories,
                     const std::vector<std::int64_t>& end_idx,
                     std::int64_t learner_version) {
  intake_options io;
  io.learner_version = learner_version;
  io.max_lag = cfg_.max_lag;
  auto seg = cut_segments(trajectories, end_idx, io, intake_, lags_);
  if (!seg)
    return seg.error();
  prepared_batch b;
  b.segments = std::move(*seg);
  auto n = b.segments.size();
  if (n == 0)
    return b;
  auto rows = static_cast<std::int64_t>(n);
  auto obs = torch::empty({rows, static_cast<std::int64_t>(obs_dim)});
  auto next_obs = torch::empty_like(obs);
  auto actions = torch::empty({rows}, torch::kLong);
  auto* o = obs.data_ptr<float>();
  auto* no = next_obs.data_ptr<float>();
  auto* a = actions.data_ptr<std::int64_t>();
  auto& in = b.inputs;
  in.reward.resize(n);
  in.terminated.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto& s = b.segments.steps[i];
    std::copy(s.obs, s.obs + obs_dim, o + obs_dim * i);
    std::copy(s.next_obs, s.next_obs + obs_dim, no + obs_dim * i);
    a[i] = s.action;
    in.reward[i] = s.reward;
    in.terminated[i] = s.terminated;
  }
  in.traj_flag = trajectory_flags(b.segments);
  {
    // Values and target log-probs of the network as it is now: V-trace's
    // V and pi (the learner re-evaluates what the collectors sent).
    torch::NoGradGuard no_grad;
    auto v = net_->value(obs).contiguous();
    auto nv = net_->value(next_obs).contiguous();
    auto lp = torch::log_softmax(net_->logits(obs), 1)
                .gather(1, actions.unsqueeze(1))
                .squeeze(1)
                .contiguous();
    in.value.assign(v.data_ptr<float>(), v.data_ptr<float>() + n);
    in.next_value.assign(nv.data_ptr<float>(), nv.data_ptr<float>() + n);
    b.log_rho.resize(n);
    for (std::size_t i = 0; i < n; ++i)
      b.log_rho[i] = lp.data_ptr<float>()[i] - b.segments.steps[i].logp;
  }
  if (cfg_.vtrace) {
    vtrace_options vo;
    vo.gamma = cfg_.gamma;
    vo.lambda = cfg_.lambda;
    vo.rho_bar = cfg_.rho_bar;
    vo.c_bar = cfg_.c_bar;
    vo.pg_rho_bar = cfg_.rho_bar;
    auto vt = vtrace(in, b.log_rho, vo);
    b.advantages = std::move(vt.pg_adv);
    b.value_targets = std::move(vt.vs);
  } else {
    b.advantages = gae(in, cfg_.gamma, cfg_.lambda);
    b.value_targets.resize(n);
    for (std::size_t i = 0; i < n; ++i)
      b.value_targets[i] = b.advantages[i] + in.value[i];
  }
  return b;
}

update_stats ppo_learner::train(const prepared_batch& b) {
  update_stats st;
  auto n = static_cast<std::int64_t>(b.segments.size());
  st.samples = n;
  if (n == 0)
    return st;
  auto obs = torch::empty({n, static_cast<std::int64_t>(obs_dim)});
  auto actions = torch::empty({n}, torch::kLong);
  auto blogp = torch::empty({n});
  for (std::int64_t i = 0; i < n; ++i) {
    auto& s = b.segments.steps[static_cast<std::size_t>(i)];
    std::copy(s.obs, s.obs + obs_dim, obs.data_ptr<float>() + obs_dim * i);
    actions.data_ptr<std::int64_t>()[i] = s.action;
    blogp.data_ptr<float>()[i] = s.logp;
  }
  auto adv = torch::from_blob(const_cast<float*>(b.advantages.data()), {n})
               .clone();
  auto targets = torch::from_blob(const_cast<float*>(b.value_targets.data()),
                                  {n})
                   .clone();
  auto mb = std::max<std::int64_t>(1, std::min(cfg_.minibatch, n));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (int epoch = 0; epoch < cfg_.epochs; ++epoch) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    for (std::int64_t lo = 0; lo < n; lo += mb) {
      auto hi = std::min(n, lo + mb);
      auto idx = torch::from_blob(order.data() + lo, {hi - lo}, torch::kLong);
      auto o = obs.index_select(0, idx);
      auto a = adv.index_select(0, idx);
      if (cfg_.normalize_adv && hi - lo > 1)
        a = (a - a.mean()) / (a.std() + 1e-8);
      auto terms = ppo_loss(net_->logits(o), net_->value(o),
                            actions.index_select(0, idx),
                            blogp.index_select(0, idx), a,
                            targets.index_select(0, idx), cfg_);
      opt_.zero_grad();
      terms.total.backward();
      if (cfg_.max_grad_norm > 0)
        torch::nn::utils::clip_grad_norm_(net_->parameters(),
                                          cfg_.max_grad_norm);
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

// -- evaluation ---------------------------------------------------------------

std::vector<std::int64_t> greedy_actions(actor_critic& net,
                                         const std::vector<float>& obs) {
  torch::NoGradGuard no_grad;
  auto n = static_cast<std::int64_t>(obs.size() / obs_dim);
  auto x = torch::from_blob(const_cast<float*>(obs.data()),
                            {n, static_cast<std::int64_t>(obs_dim)});
  auto a = net->logits(x).argmax(1).contiguous();
  auto* p = a.data_ptr<std::int64_t>();
  return {p, p + n};
}

std::vector<double> evaluate_greedy(actor_critic& net, int episodes,
                                    std::uint64_t seed) {
  dqn::vec_cartpole envs{static_cast<std::size_t>(episodes), seed};
  std::vector<double> returns(static_cast<std::size_t>(episodes), 0.0);
  std::vector<std::uint8_t> done(static_cast<std::size_t>(episodes), 0);
  int left = episodes;
  while (left > 0) {
    envs.step(greedy_actions(net, envs.obs()));
    for (std::size_t i = 0; i < returns.size(); ++i) {
      if (done[i])
        continue;
      returns[i] += envs.rewards()[i];
      if (envs.terminated()[i] || envs.truncated()[i]) {
        done[i] = 1;
        --left;
      }
    }
  }
  return returns;
}

} // namespace ppo
