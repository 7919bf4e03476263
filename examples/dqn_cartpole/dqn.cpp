#include "dqn.hpp"

#include "cartpole.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace dqn {

// -- n-step transitions -------------------------------------------------------

nstep_accumulator::nstep_accumulator(std::size_t envs, int nstep, float gamma)
  : nstep_(nstep < 1 ? 1 : nstep), gamma_(gamma), windows_(envs) {
  // nop
}

void nstep_accumulator::emit(std::deque<pending>& w, const float* next_obs,
                             bool terminal, transition_batch& out) {
  auto& first = w.front();
  float ret = 0;
  float g = 1;
  for (auto& p : w) {
    ret += g * p.reward;
    g *= gamma_;
  }
  out.obs.insert(out.obs.end(), first.obs, first.obs + 4);
  out.action.push_back(first.action);
  out.reward.push_back(ret);
  out.next_obs.insert(out.next_obs.end(), next_obs, next_obs + 4);
  // After a termination there is nothing to bootstrap from; a truncation
  // (time limit) still bootstraps from the last observation.
  out.discount.push_back(terminal ? 0.0f : g);
  w.pop_front();
}

void nstep_accumulator::add(const float* obs, const std::int64_t* actions,
                            const float* rewards, const float* next_obs,
                            const std::uint8_t* terminated,
                            const std::uint8_t* truncated,
                            transition_batch& out) {
  for (std::size_t i = 0; i < windows_.size(); ++i) {
    auto& w = windows_[i];
    pending p;
    std::copy(obs + 4 * i, obs + 4 * i + 4, p.obs);
    p.action = static_cast<std::uint8_t>(actions[i]);
    p.reward = rewards[i];
    w.push_back(p);
    const float* nxt = next_obs + 4 * i;
    if (terminated[i] || truncated[i]) {
      // The episode ended: every pending step gets a (shorter) target.
      while (!w.empty())
        emit(w, nxt, terminated[i] != 0, out);
    } else if (static_cast<int>(w.size()) == nstep_) {
      emit(w, nxt, false, out);
    }
  }
}

// -- replay buffer ------------------------------------------------------------

replay_buffer::replay_buffer(std::size_t capacity, std::uint64_t seed)
  : capacity_(capacity), rng_(seed), obs_(capacity * 4), reward_(capacity),
    next_obs_(capacity * 4), discount_(capacity), action_(capacity) {
  // nop
}

void replay_buffer::add(const transition_batch& xs) {
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto j = next_;
    std::copy(xs.obs.begin() + 4 * i, xs.obs.begin() + 4 * i + 4,
              obs_.begin() + 4 * j);
    std::copy(xs.next_obs.begin() + 4 * i, xs.next_obs.begin() + 4 * i + 4,
              next_obs_.begin() + 4 * j);
    action_[j] = xs.action[i];
    reward_[j] = xs.reward[i];
    discount_[j] = xs.discount[i];
    next_ = (next_ + 1) % capacity_;
    if (size_ < capacity_)
      ++size_;
  }
}

namespace {

// A host vector as a tensor that owns a copy (archives keep tensors).
template <class T>
torch::Tensor as_tensor(const std::vector<T>& xs, torch::Dtype dtype) {
  return torch::from_blob(const_cast<T*>(xs.data()),
                          {static_cast<std::int64_t>(xs.size())}, dtype)
    .clone();
}

template <class T>
void from_tensor(torch::serialize::InputArchive& ar, const std::string& key,
                 std::vector<T>& xs) {
  torch::Tensor t;
  ar.read(key, t);
  if (t.numel() != static_cast<std::int64_t>(xs.size())
      || t.element_size() != static_cast<std::int64_t>(sizeof(T)))
    throw std::runtime_error("replay state '" + key
                             + "' does not fit the buffer (other "
                               "--buffer-size?)");
  t = t.contiguous();
  std::memcpy(xs.data(), t.data_ptr(), xs.size() * sizeof(T));
}

} // namespace

void replay_buffer::save(torch::serialize::OutputArchive& ar) const {
  ar.write("replay.capacity",
           torch::tensor(static_cast<std::int64_t>(capacity_)));
  ar.write("replay.size", torch::tensor(static_cast<std::int64_t>(size_)));
  ar.write("replay.next", torch::tensor(static_cast<std::int64_t>(next_)));
  ar.write("replay.obs", as_tensor(obs_, torch::kFloat));
  ar.write("replay.next_obs", as_tensor(next_obs_, torch::kFloat));
  ar.write("replay.reward", as_tensor(reward_, torch::kFloat));
  ar.write("replay.discount", as_tensor(discount_, torch::kFloat));
  ar.write("replay.action", as_tensor(action_, torch::kLong));
}

void replay_buffer::load(torch::serialize::InputArchive& ar) {
  torch::Tensor cap, size, next;
  ar.read("replay.capacity", cap);
  ar.read("replay.size", size);
  ar.read("replay.next", next);
  if (cap.item<std::int64_t>() != static_cast<std::int64_t>(capacity_))
    throw std::runtime_error(
      "replay state holds " + std::to_string(cap.item<std::int64_t>())
      + " slots, this buffer " + std::to_string(capacity_)
      + " (other --buffer-size?)");
  auto n = size.item<std::int64_t>();
  auto at = next.item<std::int64_t>();
  if (n < 0 || at < 0 || static_cast<std::size_t>(n) > capacity_
      || static_cast<std::size_t>(at) >= std::max<std::size_t>(capacity_, 1))
    throw std::runtime_error("replay state: bad size or position");
  from_tensor(ar, "replay.obs", obs_);
  from_tensor(ar, "replay.next_obs", next_obs_);
  from_tensor(ar, "replay.reward", reward_);
  from_tensor(ar, "replay.discount", discount_);
  from_tensor(ar, "replay.action", action_);
  size_ = static_cast<std::size_t>(n);
  next_ = static_cast<std::size_t>(at);
}

sample_batch replay_buffer::sample(std::int64_t n) {
  sample_batch b;
  b.obs = torch::empty({n, 4});
  b.next_obs = torch::empty({n, 4});
  b.action = torch::empty({n}, torch::kLong);
  b.reward = torch::empty({n});
  b.discount = torch::empty({n});
  auto* o = b.obs.data_ptr<float>();
  auto* no = b.next_obs.data_ptr<float>();
  auto* a = b.action.data_ptr<std::int64_t>();
  auto* r = b.reward.data_ptr<float>();
  auto* d = b.discount.data_ptr<float>();
  std::uniform_int_distribution<std::size_t> pick{0, size_ - 1};
  for (std::int64_t k = 0; k < n; ++k) {
    auto j = pick(rng_);
    std::copy(obs_.begin() + 4 * j, obs_.begin() + 4 * j + 4, o + 4 * k);
    std::copy(next_obs_.begin() + 4 * j, next_obs_.begin() + 4 * j + 4,
              no + 4 * k);
    a[k] = action_[j];
    r[k] = reward_[j];
    d[k] = discount_[j];
  }
  return b;
}

// -- network and targets ------------------------------------------------------

q_network_impl::q_network_impl(std::int64_t hidden) {
  fc1 = register_module("fc1", torch::nn::Linear(4, hidden));
  fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
  out = register_module("out", torch::nn::Linear(hidden, 2));
}

torch::Tensor q_network_impl::forward(torch::Tensor x) {
  return out(torch::relu(fc2(torch::relu(fc1(x)))));
}

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

double epsilon_at(const dqn_config& cfg, double env_steps) {
  if (cfg.eps_decay_steps <= 0)
    return cfg.eps_end;
  if (cfg.eps_decay == decay_kind::exponential)
    return cfg.eps_end
      + (cfg.eps_start - cfg.eps_end)
      * std::exp(-env_steps / cfg.eps_decay_steps);
  auto frac = std::min(1.0, env_steps / cfg.eps_decay_steps);
  return cfg.eps_start + frac * (cfg.eps_end - cfg.eps_start);
}

std::vector<std::int64_t> greedy_actions(q_network& net,
                                         const std::vector<float>& obs) {
  torch::NoGradGuard no_grad;
  auto n = static_cast<std::int64_t>(obs.size() / 4);
  // from_blob does not copy: the forward pass reads `obs` in place.
  auto x = torch::from_blob(const_cast<float*>(obs.data()), {n, 4});
  auto a = net->forward(x).argmax(1).contiguous();
  auto* p = a.data_ptr<std::int64_t>();
  return {p, p + n};
}

std::vector<std::int64_t> epsilon_greedy_actions(q_network& net,
                                                 const std::vector<float>& obs,
                                                 double eps,
                                                 std::mt19937_64& rng) {
  auto result = greedy_actions(net, obs);
  std::uniform_real_distribution<double> u{0.0, 1.0};
  std::bernoulli_distribution coin{0.5};
  for (auto& a : result)
    if (u(rng) < eps)
      a = coin(rng) ? 1 : 0;
  return result;
}

std::vector<double> evaluate_greedy(q_network& net, int episodes,
                                    std::uint64_t seed) {
  // One environment per episode, all stepped together; each counts only its
  // first episode.
  vec_cartpole envs{static_cast<std::size_t>(episodes), seed};
  std::vector<double> returns(episodes, 0.0);
  std::vector<std::uint8_t> done(episodes, 0);
  int left = episodes;
  while (left > 0) {
    envs.step(greedy_actions(net, envs.obs()));
    for (int i = 0; i < episodes; ++i) {
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

// -- learner ------------------------------------------------------------------

dqn_learner::dqn_learner(q_network online, dqn_config cfg, std::uint64_t seed)
  : cfg_(cfg), online_(std::move(online)), target_(cfg.hidden),
    opt_(online_->parameters(), torch::optim::AdamOptions(cfg.lr)),
    buffer_(cfg.buffer_size, seed) {
  hard_update(*target_, *online_);
  target_->eval();
}

float dqn_learner::update(const gradient_hook& reduce) {
  return update_on(buffer_.sample(cfg_.batch_size), reduce);
}

float dqn_learner::update_on(const sample_batch& b,
                             const gradient_hook& reduce) {
  torch::Tensor target;
  {
    torch::NoGradGuard no_grad;
    auto next_q_target = target_->forward(b.next_obs);
    auto next_q_online = cfg_.double_dqn ? online_->forward(b.next_obs)
                                         : torch::Tensor{};
    target = td_target(b.reward, b.discount, next_q_target, next_q_online);
  }
  auto q = online_->forward(b.obs).gather(1, b.action.unsqueeze(1)).squeeze(1);
  auto loss = torch::smooth_l1_loss(q, target);
  opt_.zero_grad();
  loss.backward();
  // Averaged first, then clipped: every rank clips the same gradient.
  if (reduce && !reduce(*online_))
    return std::numeric_limits<float>::quiet_NaN();
  if (cfg_.grad_clip > 0)
    torch::nn::utils::clip_grad_norm_(online_->parameters(), cfg_.grad_clip);
  opt_.step();
  ++updates_;
  if (cfg_.target_update_every > 0) {
    if (updates_ % cfg_.target_update_every == 0)
      hard_update(*target_, *online_);
  } else {
    soft_update(*target_, *online_, cfg_.tau);
  }
  return loss.item<float>();
}

// -- checkpoints --------------------------------------------------------------

void dqn_learner::save_state(const std::string& path) {
  torch::serialize::OutputArchive ar;
  torch::serialize::OutputArchive target;
  target_->save(target);
  ar.write("target", target);
  torch::serialize::OutputArchive adam;
  opt_.save(adam);
  ar.write("adam", adam);
  ar.write("updates", torch::tensor(updates_));
  buffer_.save(ar);
  auto tmp = path + ".tmp";
  ar.save_to(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename " + tmp + " to " + path);
}

void dqn_learner::load_state(const std::string& path) {
  torch::serialize::InputArchive ar;
  ar.load_from(path);
  // Into scratch copies first: a file that does not fit changes nothing.
  q_network target{cfg_.hidden};
  torch::serialize::InputArchive target_ar;
  ar.read("target", target_ar);
  target->load(target_ar);
  for (auto& kvp : target->named_parameters(true)) {
    auto* dst = target_->named_parameters(true).find(kvp.key());
    if (dst == nullptr || dst->sizes() != kvp.value().sizes())
      throw std::runtime_error(path + ": target tensor '" + kvp.key()
                               + "' does not fit (wrong --hidden?)");
  }
  replay_buffer buffer{cfg_.buffer_size, 0};
  buffer.load(ar);
  torch::Tensor updates;
  ar.read("updates", updates);
  torch::serialize::InputArchive adam;
  ar.read("adam", adam);
  opt_.load(adam);
  hard_update(*target_, *target);
  // The sampling RNG keeps this run's seed; only the contents move over.
  buffer_.restore_from(std::move(buffer));
  updates_ = updates.item<std::int64_t>();
}

void save_q_network(q_network& net, const std::string& path) {
  auto tmp = path + ".tmp";
  // torch::save takes the module as a shared_ptr<Module>, not its holder.
  std::shared_ptr<torch::nn::Module> m = net.ptr();
  torch::save(m, tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename " + tmp + " to " + path);
}

void load_q_network(q_network& net, const std::string& path) {
  // torch::load replaces tensors wholesale (set_), shapes included: load
  // into a scratch network and copy only if every shape matches.
  q_network tmp{net->fc1->options.out_features()};
  std::shared_ptr<torch::nn::Module> m = tmp.ptr();
  torch::load(m, path);
  auto want = net->named_parameters(true);
  for (auto& kvp : tmp->named_parameters(true)) {
    auto* dst = want.find(kvp.key());
    if (dst == nullptr || dst->sizes() != kvp.value().sizes())
      throw std::runtime_error(
        path + ": tensor '" + kvp.key()
        + "' does not fit the network (wrong --hidden?)");
  }
  hard_update(*net, *tmp);
}

} // namespace dqn
