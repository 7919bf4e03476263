#pragma once

// DQN (Mnih et al. 2015) with the usual refinements: double DQN (van
// Hasselt et al. 2016), n-step targets, hard or Polyak target updates,
// gradient-norm clipping and, as an option, prioritized replay. The pieces
// (q_network, td_target, the target updates) stand alone; dqn_learner puts
// them together with Adam and a replay buffer.
//
//   dice::rl::dqn_options opts;
//   dice::rl::dqn_learner learner{dice::rl::q_network{obs_dim, actions,
//                                                      opts.hidden},
//                                 opts, seed};
//   learner.add(batch);                   // from the collectors
//   if (learner.ready())
//     auto loss = learner.update();

#include "dice/rl/epsilon.hpp"
#include "dice/rl/replay_buffer.hpp"
#include "dice/rl/transitions.hpp"

#include "caf/error.hpp"

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace dice::rl {

/// Hyper-parameters of DQN (the defaults solve CartPole-v1).
struct dqn_options {
  /// Widths of the hidden layers of the Q-network (64, 64: Debian's
  /// LibTorch multiplies with the reference BLAS, where a gradient step
  /// costs ~ hidden * batch).
  std::vector<std::int64_t> hidden{64, 64};
  /// Discount factor (collectors' n-step accumulator).
  float gamma = 0.99f;
  /// Steps summed into one TD target (1: plain DQN).
  int nstep = 3;
  /// Adam's learning rate.
  double lr = 1e-3;
  /// Samples per gradient step.
  std::int64_t batch_size = 64;
  /// The replay buffer (capacity 50000, uniform unless prioritized).
  replay_options replay;
  /// Transitions in the buffer before the first gradient step.
  std::size_t learning_starts = 1000;
  /// Gradient steps per new transition that reaches the learner.
  double updates_per_step = 0.5;
  /// Hard target update every this many gradient steps (0: Polyak, `tau`).
  std::int64_t target_update_every = 250;
  /// Polyak factor when `target_update_every` is 0.
  double tau = 0.005;
  /// Select next actions with the online net (double DQN).
  bool double_dqn = true;
  /// Gradient norm clip (0: none).
  double grad_clip = 10.0;
  /// Exploration of the collectors.
  epsilon_schedule epsilon;
};

/// Checks the options (positive widths, batch and learning rate, gamma in
/// [0, 1], nstep >= 1, tau in (0, 1], the replay options, ...);
/// errc::invalid_config says which.
caf::error validate(const dqn_options& x);

/// MLP Q-network obs_dim -> hidden... -> num_actions with ReLU, built by
/// dice::rl::mlp (layers and initial weights in that order). Its
/// parameters have nn.Sequential's names ("0.weight", "0.bias",
/// "2.weight", ...), so a Python nn.Sequential of the same layers loads
/// its state_dict.
class q_network_impl : public torch::nn::Module {
 public:
  /// Builds the layers.
  q_network_impl(std::int64_t obs_dim, std::int64_t num_actions,
                 std::vector<std::int64_t> hidden = {64, 64});

  /// Q-values [B, num_actions] for observations [B, obs_dim].
  torch::Tensor forward(torch::Tensor x);

  /// Floats per observation.
  std::int64_t obs_dim() const noexcept {
    return obs_dim_;
  }

  /// Number of discrete actions.
  std::int64_t num_actions() const noexcept {
    return num_actions_;
  }

  /// Widths of the hidden layers.
  const std::vector<std::int64_t>& hidden() const noexcept {
    return hidden_;
  }

 private:
  std::int64_t obs_dim_;
  std::int64_t num_actions_;
  std::vector<std::int64_t> hidden_;
  torch::nn::Sequential layers_;
  // The Sequential's Linear layers, called directly: its type-erased
  // forward cost about 4 % of a DQN run's env steps/s.
  std::vector<torch::nn::Linear> linears_;
};

/// Shared handle of a q_network_impl (as TORCH_MODULE makes, plus a
/// constructor that takes `{64, 64}` for the widths).
class q_network : public torch::nn::ModuleHolder<q_network_impl> {
 public:
  using torch::nn::ModuleHolder<q_network_impl>::ModuleHolder;

  /// A new network obs_dim -> hidden... -> num_actions.
  q_network(std::int64_t obs_dim, std::int64_t num_actions,
            std::vector<std::int64_t> hidden = {64, 64})
    : ModuleHolder(std::make_shared<q_network_impl>(obs_dim, num_actions,
                                                    std::move(hidden))) {
    // nop
  }
};

/// TD targets r + discount * Q'(s', a*): a* = argmax of `next_q_online`
/// (double DQN) when defined, else of `next_q_target`.
torch::Tensor td_target(const torch::Tensor& reward,
                        const torch::Tensor& discount,
                        const torch::Tensor& next_q_target,
                        const torch::Tensor& next_q_online = {});

/// Copies every parameter and buffer of `src` into `dst` (same names).
void hard_update(torch::nn::Module& dst, const torch::nn::Module& src);

/// dst = (1 - tau) * dst + tau * src, parameter by parameter (Polyak).
void soft_update(torch::nn::Module& dst, const torch::nn::Module& src,
                 double tau);

/// Greedy actions for `n` observations at `obs` [n * obs_dim] (read in
/// place, not copied).
std::vector<std::int64_t> greedy_actions(q_network& net, const float* obs,
                                         std::int64_t n);

/// Greedy actions for the observations in `obs` [n * obs_dim].
std::vector<std::int64_t> greedy_actions(q_network& net,
                                         const std::vector<float>& obs);

/// Epsilon-greedy actions for the observations in `obs` [n * obs_dim]:
/// the greedy actions, then epsilon_greedy's draws from `rng`.
std::vector<std::int64_t> epsilon_greedy_actions(q_network& net,
                                                 const std::vector<float>& obs,
                                                 double epsilon,
                                                 std::mt19937_64& rng);

/// Writes `net`'s state_dict to `path` as a file torch.load reads (a dict
/// of tensors), via a temporary file and a rename.
caf::error save_q_network(q_network& net, const std::string& path);

/// Loads what save_q_network wrote; a missing file is
/// errc::storage_missing, another architecture errc::model_mismatch (and
/// leaves `net` unchanged).
caf::error load_q_network(q_network& net, const std::string& path);

/// Online net, target net, Adam and the replay buffer.
class dqn_learner {
 public:
  /// Runs between backward and the optimizer step, e.g. a learner group's
  /// gradient all-reduce; false abandons the step (no optimizer step).
  using gradient_hook = std::function<bool(torch::nn::Module&)>;

  /// Trains `online` with `opts` (which must pass validate); the target
  /// starts as a copy of it (built first as a new network, drawing from
  /// torch's RNG as the examples did). `seed` seeds replay sampling.
  dqn_learner(q_network online, dqn_options opts, std::uint64_t seed);

  /// Adds transitions to the replay buffer; a batch of another obs_dim or
  /// with actions outside the network's refuses whole
  /// (errc::malformed_input).
  caf::error add(const transition_batch& xs);

  /// True once the buffer holds `learning_starts` transitions (and one).
  bool ready() const noexcept {
    return buffer_.size() >= opts_.learning_starts && buffer_.size() > 0;
  }

  /// One gradient step on a sampled batch; returns the loss (NaN when
  /// the buffer is empty or `reduce` abandoned the step).
  float update(const gradient_hook& reduce = {});

  /// One gradient step on `b` (tests feed a batch by hand). With
  /// prioritized replay the loss is weighted by `b.weights` and the
  /// priorities of `b.indices` become the new |TD errors|; a uniform
  /// learner takes the plain mean loss.
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

  /// The replay buffer (e.g. to set beta by the caller's schedule).
  replay_buffer& buffer() noexcept {
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

  /// The options.
  const dqn_options& options() const noexcept {
    return opts_;
  }

  /// Writes the target network, Adam's moments, the gradient step count
  /// and the replay buffer to `path` via a temporary file and a rename
  /// (the online network is save_q_network's job); errc::storage_failed
  /// when it cannot.
  caf::error save_state(const std::string& path);

  /// Restores what `save_state` wrote. A missing file is
  /// errc::storage_missing; one that does not fit (other widths, capacity,
  /// obs_dim) errc::model_mismatch; a corrupt one errc::malformed_input;
  /// then nothing changes. The sampling RNG keeps this learner's seed.
  caf::error load_state(const std::string& path);

 private:
  dqn_options opts_;
  q_network online_;
  q_network target_;
  torch::optim::Adam opt_;
  replay_buffer buffer_;
  std::int64_t updates_ = 0;
};

} // namespace dice::rl
