#pragma once

// Experience replay for DQN-style learners: a ring buffer of transitions
// with any observation size, sampled uniformly or, as an option, by
// proportional prioritized replay (Schaul et al. 2016, "Prioritized
// Experience Replay"): transition i is drawn with probability
// P(i) = p_i^alpha / sum_k p_k^alpha, p_i = |td_i| + eps, and weighs in the
// loss with w_i = (N * P(i))^-beta / max_k w_k over the N held transitions
// (as OpenAI baselines: the largest weight belongs to the smallest
// priority in the buffer, so a transition's weight does not depend on what
// else was drawn with it).
//
//   dice::rl::replay_options opts;
//   opts.capacity = 100000;
//   opts.prioritized = true;
//   dice::rl::replay_buffer buf{obs_dim, opts, seed};
//   buf.add(batch);
//   auto b = buf.sample(64);          // b.indices, b.weights
//   buf.update_priorities(b.indices, td_errors);

#include "dice/rl/transitions.hpp"

#include "caf/error.hpp"

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace dice::rl {

namespace detail {
class sum_tree;
} // namespace detail

/// How a replay buffer holds and draws transitions.
struct replay_options {
  /// Transitions held at most (the oldest are overwritten).
  std::size_t capacity = 50000;
  /// Draw by priority instead of uniformly.
  bool prioritized = false;
  /// Prioritized: how much the priority counts (0: uniform).
  double alpha = 0.6;
  /// Prioritized: importance-sampling exponent at the start.
  double beta = 0.4;
  /// Prioritized: importance-sampling exponent after `beta_steps` samples.
  double beta_end = 1.0;
  /// Prioritized: `sample` calls over which beta goes linearly from `beta`
  /// to `beta_end` (0: beta stays where the caller puts it, set_beta).
  std::int64_t beta_steps = 0;
  /// Prioritized: added to |td| so that no transition is never drawn.
  double priority_eps = 1e-6;
};

/// Checks the options (capacity >= 1, alpha >= 0, betas in [0, 1],
/// beta_steps >= 0, priority_eps > 0); errc::invalid_config says which.
caf::error validate(const replay_options& x);

/// A sampled mini-batch as tensors (CPU), plus where it came from.
struct sample_batch {
  /// [B, obs_dim]
  torch::Tensor obs;
  /// [B] int64
  torch::Tensor action;
  /// [B]
  torch::Tensor reward;
  /// [B, obs_dim]
  torch::Tensor next_obs;
  /// [B]
  torch::Tensor discount;
  /// [B] importance-sampling weights (all 1 when uniform); undefined in a
  /// batch made by hand means "unweighted".
  torch::Tensor weights;
  /// The buffer slots drawn [B], for update_priorities.
  std::vector<std::int64_t> indices;
};

/// Ring buffer of transitions with uniform or prioritized sampling.
class replay_buffer {
 public:
  /// Holds transitions of `obs_dim` floats per observation as `opts` says
  /// (which must pass validate; a zero capacity refuses every add); `seed`
  /// seeds the sampling RNG.
  replay_buffer(std::int64_t obs_dim, replay_options opts, std::uint64_t seed);

  ~replay_buffer();

  /// Moves the contents and the RNG.
  replay_buffer(replay_buffer&&) noexcept;

  /// Moves the contents and the RNG.
  replay_buffer& operator=(replay_buffer&&) noexcept;

  /// Appends `xs` (overwriting the oldest when full; each new transition
  /// gets the largest priority seen so far). A batch that fails validate or
  /// holds another obs_dim is refused whole.
  caf::error add(const transition_batch& xs);

  /// Transitions held.
  std::size_t size() const noexcept {
    return size_;
  }

  /// Transitions held at most.
  std::size_t capacity() const noexcept {
    return opts_.capacity;
  }

  /// Floats per observation.
  std::int64_t obs_dim() const noexcept {
    return obs_dim_;
  }

  /// The options.
  const replay_options& options() const noexcept {
    return opts_;
  }

  /// Draws `n` transitions with replacement (a batch of 0 rows when the
  /// buffer is empty); a prioritized buffer then advances beta's schedule.
  sample_batch sample(std::int64_t n);

  /// Sets each slot's priority to (|td| + priority_eps)^alpha. Refuses
  /// (changing nothing) slots outside the buffer, non-finite errors or
  /// lengths that differ (errc::invalid_config); does nothing when uniform.
  caf::error update_priorities(const std::vector<std::int64_t>& indices,
                               const std::vector<float>& td_errors);

  /// True when drawing by priority.
  bool prioritized() const noexcept {
    return tree_ != nullptr;
  }

  /// The importance-sampling exponent the next `sample` uses.
  double beta() const noexcept;

  /// Sets the importance-sampling exponent (the caller's own schedule;
  /// with beta_steps > 0 the option's schedule wins).
  void set_beta(double beta) noexcept {
    beta_ = beta;
  }

  /// p_i^alpha of slot `i`: it is drawn with probability
  /// priority(i) / total_priority() (1 when uniform, 0 past size()).
  double priority(std::size_t i) const;

  /// The sum of priority(i) over the held transitions.
  double total_priority() const;

  /// The largest p_i = |td| + priority_eps seen (1 before any update):
  /// new transitions get it, to the alpha.
  double max_priority() const noexcept {
    return max_priority_;
  }

  /// Writes the held transitions, the ring position and, when prioritized,
  /// the priorities and beta's schedule (not the sampling RNG) to `ar`.
  void save(torch::serialize::OutputArchive& ar) const;

  /// Restores what `save` wrote, keeping this buffer's sampling RNG. An
  /// archive of another capacity or obs_dim (errc::model_mismatch) or with
  /// bad contents (errc::malformed_input) changes nothing. A uniform
  /// archive in a prioritized buffer gives every transition priority 1.
  caf::error load(torch::serialize::InputArchive& ar);

  /// Takes the transitions, priorities and ring position of `other` (same
  /// capacity, obs_dim and kind: errc::model_mismatch otherwise), keeping
  /// this buffer's sampling RNG.
  caf::error restore_from(replay_buffer&& other);

 private:
  void draw_uniform(std::int64_t n, std::vector<std::int64_t>& slots);
  void draw_prioritized(std::int64_t n, std::vector<std::int64_t>& slots);
  std::int64_t obs_dim_;
  replay_options opts_;
  std::size_t size_ = 0;
  std::size_t next_ = 0;
  std::mt19937_64 rng_;
  std::vector<float> obs_, reward_, next_obs_, discount_;
  std::vector<std::int64_t> action_;
  // Prioritized only: p_i^alpha per slot, the max raw priority, beta.
  std::unique_ptr<detail::sum_tree> tree_;
  double max_priority_ = 1.0;
  double beta_ = 0;
  std::int64_t samples_ = 0;
};

} // namespace dice::rl
