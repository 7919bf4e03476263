#pragma once

// DQN with LibTorch: Q-network, n-step transitions, replay buffer, TD
// targets, target-network updates and epsilon-greedy acting. Only this
// header and the sources that include it see torch.

#include "options.hpp"
#include <boost/serialization/vector.hpp>
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace dqn {

/// Transitions of one collector iteration, column-wise (what travels in
/// one payload item). `reward` is the n-step discounted return and
/// `discount` is gamma^k for the bootstrap, 0 after a termination.
struct transition_batch {
  /// Observations [n * 4].
  std::vector<float> obs;
  /// Actions [n].
  std::vector<std::uint8_t> action;
  /// n-step discounted rewards [n].
  std::vector<float> reward;
  /// Observations to bootstrap from [n * 4].
  std::vector<float> next_obs;
  /// Bootstrap factors [n].
  std::vector<float> discount;

  /// Number of transitions.
  std::size_t size() const noexcept {
    return action.size();
  }

  /// Boost.Serialization (vectors of arithmetic types go as one block).
  template <class Archive>
  void serialize(Archive& ar, unsigned) {
    ar& obs& action& reward& next_obs& discount;
  }
};

/// Turns per-step experience of N environments into n-step transitions.
/// Steps that are not yet n steps old stay pending until later calls.
class nstep_accumulator {
 public:
  /// Tracks `envs` environments.
  nstep_accumulator(std::size_t envs, int nstep, float gamma);

  /// Records one step of every environment: `obs` before the step,
  /// `next_obs` after it (before any auto-reset). Finished transitions go
  /// to `out`.
  void add(const float* obs, const std::int64_t* actions, const float* rewards,
           const float* next_obs, const std::uint8_t* terminated,
           const std::uint8_t* truncated, transition_batch& out);

 private:
  struct pending {
    float obs[4];
    std::uint8_t action;
    float reward;
  };
  void emit(std::deque<pending>& w, const float* next_obs, bool terminal,
            transition_batch& out);
  int nstep_;
  float gamma_;
  std::vector<std::deque<pending>> windows_;
};

/// A sampled mini-batch as tensors.
struct sample_batch {
  /// [B, 4]
  torch::Tensor obs;
  /// [B] int64
  torch::Tensor action;
  /// [B]
  torch::Tensor reward;
  /// [B, 4]
  torch::Tensor next_obs;
  /// [B]
  torch::Tensor discount;
};

/// Ring buffer of transitions with uniform sampling.
class replay_buffer {
 public:
  /// Holds at most `capacity` transitions.
  replay_buffer(std::size_t capacity, std::uint64_t seed);

  /// Appends (overwriting the oldest when full).
  void add(const transition_batch& xs);

  /// Transitions held.
  std::size_t size() const noexcept {
    return size_;
  }

  /// Draws `n` transitions uniformly with replacement.
  sample_batch sample(std::int64_t n);

  /// Writes the held transitions and the ring position (not the sampling
  /// RNG) to `ar`.
  void save(torch::serialize::OutputArchive& ar) const;

  /// Restores what `save` wrote; throws if it does not fit the capacity.
  void load(torch::serialize::InputArchive& ar);

  /// Takes the transitions and ring position of `other` (same capacity),
  /// keeping this buffer's sampling RNG.
  void restore_from(replay_buffer&& other) {
    size_ = other.size_;
    next_ = other.next_;
    obs_ = std::move(other.obs_);
    reward_ = std::move(other.reward_);
    next_obs_ = std::move(other.next_obs_);
    discount_ = std::move(other.discount_);
    action_ = std::move(other.action_);
  }

 private:
  std::size_t capacity_;
  std::size_t size_ = 0;
  std::size_t next_ = 0;
  std::mt19937_64 rng_;
  std::vector<float> obs_, reward_, next_obs_, discount_;
  std::vector<std::int64_t> action_;
};

/// MLP Q-network: 4 -> hidden -> hidden -> 2.
struct q_network_impl : torch::nn::Module {
  /// Builds the layers.
  explicit q_network_impl(std::int64_t hidden = 128);
  /// Q-values [B, 2] for observations [B, 4].
  torch::Tensor forward(torch::Tensor x);
  /// Layers.
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, out{nullptr};
};
TORCH_MODULE_IMPL(q_network, q_network_impl);

/// TD targets r + discount * Q'(s', a*): a* = argmax of `next_q_online`
/// (double DQN) when defined, else of `next_q_target`.
torch::Tensor td_target(const torch::Tensor& reward,
                        const torch::Tensor& discount,
                        const torch::Tensor& next_q_target,
                        const torch::Tensor& next_q_online = {});

/// Copies every parameter and buffer of `src` into `dst`.
void hard_update(torch::nn::Module& dst, const torch::nn::Module& src);

/// dst = (1 - tau) * dst + tau * src, parameter by parameter.
void soft_update(torch::nn::Module& dst, const torch::nn::Module& src,
                 double tau);

/// Epsilon after `env_steps` environment steps.
double epsilon_at(const dqn_config& cfg, double env_steps);

/// Greedy actions for observations [n * 4].
std::vector<std::int64_t> greedy_actions(q_network& net,
                                         const std::vector<float>& obs);

/// Epsilon-greedy actions for observations [n * 4].
std::vector<std::int64_t> epsilon_greedy_actions(q_network& net,
                                                 const std::vector<float>& obs,
                                                 double eps,
                                                 std::mt19937_64& rng);

/// Returns of `episodes` greedy episodes (run side by side, seeded).
std::vector<double> evaluate_greedy(q_network& net, int episodes,
                                    std::uint64_t seed);

/// Online net, target net, Adam and the replay buffer.
class dqn_learner {
 public:
  /// Trains `online`; the target starts as a copy of it.
  dqn_learner(q_network online, dqn_config cfg, std::uint64_t seed);

  /// Adds transitions to the replay buffer.
  void add(const transition_batch& xs) {
    buffer_.add(xs);
  }

  /// True once the buffer holds `learning_starts` transitions.
  bool ready() const noexcept {
    return buffer_.size() >= cfg_.learning_starts;
  }

  /// Runs between backward and the optimizer step, e.g. a learner group's
  /// gradient all-reduce; false abandons the step (no optimizer step).
  using gradient_hook = std::function<bool(torch::nn::Module&)>;

  /// One gradient step on a sampled batch; returns the loss (NaN when
  /// `reduce` abandoned the step).
  float update(const gradient_hook& reduce = {});

  /// One gradient step on `b` (tests feed a batch by hand).
  float update_on(const sample_batch& b, const gradient_hook& reduce = {});

  /// The optimizer (a learner group broadcasts its state).
  torch::optim::Adam& optimizer() noexcept {
    return opt_;
  }

  /// Sets the gradient step count (a learner group takes its root's).
  void set_updates(std::int64_t n) noexcept {
    updates_ = n;
  }

  /// Gradient steps so far.
  std::int64_t updates() const noexcept {
    return updates_;
  }

  /// The replay buffer.
  const replay_buffer& buffer() const noexcept {
    return buffer_;
  }

  /// The network being trained.
  q_network& online() noexcept {
    return online_;
  }

  /// The target network.
  q_network& target() noexcept {
    return target_;
  }

  /// Writes the target network, Adam's moments, the gradient step count
  /// and the replay buffer to `path` atomically (the online network is
  /// latest.pt's job).
  void save_state(const std::string& path);

  /// Restores what `save_state` wrote; throws on a missing or unfit file.
  void load_state(const std::string& path);

 private:
  dqn_config cfg_;
  q_network online_;
  q_network target_;
  torch::optim::Adam opt_;
  replay_buffer buffer_;
  std::int64_t updates_ = 0;
};

/// Writes `net` to `path` atomically (a temporary file, then rename).
void save_q_network(q_network& net, const std::string& path);

/// Loads `path` into `net`; throws on a missing or unfit file.
void load_q_network(q_network& net, const std::string& path);

} // namespace dqn
