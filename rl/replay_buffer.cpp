#include "dice/rl/replay_buffer.hpp"

#include "dice/core/errc.hpp"

#include "sum_tree.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>

namespace dice::rl {

caf::error validate(const replay_options& x) {
  auto bad = [](std::string what) {
    return make_error(errc::invalid_config, "replay_options: " + what);
  };
  if (x.capacity == 0)
    return bad("capacity 0");
  if (!(x.alpha >= 0) || !std::isfinite(x.alpha))
    return bad("alpha " + std::to_string(x.alpha));
  if (!(x.beta >= 0 && x.beta <= 1) || !(x.beta_end >= 0 && x.beta_end <= 1))
    return bad("beta outside [0, 1]");
  if (x.beta_steps < 0)
    return bad("beta_steps " + std::to_string(x.beta_steps));
  if (!(x.priority_eps > 0) || !std::isfinite(x.priority_eps))
    return bad("priority_eps " + std::to_string(x.priority_eps));
  return caf::none;
}

replay_buffer::replay_buffer(std::int64_t obs_dim, replay_options opts,
                             std::uint64_t seed)
  : obs_dim_(std::max<std::int64_t>(obs_dim, 1)), opts_(opts), rng_(seed),
    obs_(opts.capacity * static_cast<std::size_t>(obs_dim_)),
    reward_(opts.capacity),
    next_obs_(opts.capacity * static_cast<std::size_t>(obs_dim_)),
    discount_(opts.capacity), action_(opts.capacity), beta_(opts.beta) {
  if (opts_.prioritized)
    tree_ = std::make_unique<detail::sum_tree>(opts_.capacity);
}

replay_buffer::~replay_buffer() = default;

replay_buffer::replay_buffer(replay_buffer&&) noexcept = default;

replay_buffer& replay_buffer::operator=(replay_buffer&&) noexcept = default;

caf::error replay_buffer::add(const transition_batch& xs) {
  if (xs.empty())
    return caf::none;
  if (opts_.capacity == 0)
    return make_error(errc::invalid_config, "replay_buffer: capacity 0");
  if (xs.obs_dim != obs_dim_)
    return make_error(errc::malformed_input,
                      "replay_buffer: batch of obs_dim "
                        + std::to_string(xs.obs_dim) + ", buffer "
                        + std::to_string(obs_dim_));
  if (auto err = validate(xs))
    return err;
  auto d = static_cast<std::size_t>(obs_dim_);
  auto fresh = tree_ ? std::pow(max_priority_, opts_.alpha) : 0.0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto j = next_;
    std::copy_n(xs.obs.begin() + i * d, d, obs_.begin() + j * d);
    std::copy_n(xs.next_obs.begin() + i * d, d, next_obs_.begin() + j * d);
    action_[j] = xs.action[i];
    reward_[j] = xs.reward[i];
    discount_[j] = xs.discount[i];
    // The overwritten transition's priority goes with it.
    if (tree_)
      tree_->set(j, fresh);
    next_ = (next_ + 1) % opts_.capacity;
    if (size_ < opts_.capacity)
      ++size_;
  }
  return caf::none;
}

double replay_buffer::beta() const noexcept {
  if (opts_.beta_steps <= 0)
    return beta_;
  auto frac = std::min(
    1.0, static_cast<double>(samples_) / static_cast<double>(opts_.beta_steps));
  return opts_.beta + frac * (opts_.beta_end - opts_.beta);
}

double replay_buffer::priority(std::size_t i) const {
  if (i >= size_)
    return 0;
  return tree_ ? tree_->get(i) : 1.0;
}

double replay_buffer::total_priority() const {
  return tree_ ? tree_->total() : static_cast<double>(size_);
}

void replay_buffer::draw_uniform(std::int64_t n,
                                 std::vector<std::int64_t>& slots) {
  // One uniform_int_distribution draw per sample, as the examples did: a
  // seeded run samples the same transitions.
  std::uniform_int_distribution<std::size_t> pick{0, size_ - 1};
  for (std::int64_t k = 0; k < n; ++k)
    slots.push_back(static_cast<std::int64_t>(pick(rng_)));
}

void replay_buffer::draw_prioritized(std::int64_t n,
                                     std::vector<std::int64_t>& slots) {
  // Stratified as in the paper: [0, total) cut into n equal ranges, one
  // uniform draw in each (lower variance than n independent draws, same
  // probabilities).
  auto total = tree_->total();
  auto segment = total / static_cast<double>(n);
  std::uniform_real_distribution<double> u{0.0, 1.0};
  for (std::int64_t k = 0; k < n; ++k) {
    auto mass = std::min((static_cast<double>(k) + u(rng_)) * segment,
                         std::nextafter(total, 0.0));
    auto j = std::min(tree_->find(mass), size_ - 1);
    slots.push_back(static_cast<std::int64_t>(j));
  }
}

sample_batch replay_buffer::sample(std::int64_t n) {
  if (size_ == 0 || n < 0)
    n = 0;
  sample_batch b;
  b.indices.reserve(static_cast<std::size_t>(n));
  if (n > 0) {
    if (tree_)
      draw_prioritized(n, b.indices);
    else
      draw_uniform(n, b.indices);
  }
  b.obs = torch::empty({n, obs_dim_});
  b.next_obs = torch::empty({n, obs_dim_});
  b.action = torch::empty({n}, torch::kLong);
  b.reward = torch::empty({n});
  b.discount = torch::empty({n});
  auto* o = b.obs.data_ptr<float>();
  auto* no = b.next_obs.data_ptr<float>();
  auto* a = b.action.data_ptr<std::int64_t>();
  auto* r = b.reward.data_ptr<float>();
  auto* dc = b.discount.data_ptr<float>();
  auto d = static_cast<std::size_t>(obs_dim_);
  for (std::size_t k = 0; k < b.indices.size(); ++k) {
    auto j = static_cast<std::size_t>(b.indices[k]);
    std::copy_n(obs_.begin() + j * d, d, o + k * d);
    std::copy_n(next_obs_.begin() + j * d, d, no + k * d);
    a[k] = action_[j];
    r[k] = reward_[j];
    dc[k] = discount_[j];
  }
  if (!tree_ || n == 0) {
    b.weights = torch::ones({n});
    return b;
  }
  // w_i / max_k w_k = (N P(i))^-beta / (N P_min)^-beta = (p_i / p_min)^-beta.
  auto beta = this->beta();
  auto p_min = tree_->min();
  b.weights = torch::empty({n});
  auto* w = b.weights.data_ptr<float>();
  for (std::size_t k = 0; k < b.indices.size(); ++k) {
    auto p = tree_->get(static_cast<std::size_t>(b.indices[k]));
    w[k] = static_cast<float>(std::pow(p / p_min, -beta));
  }
  ++samples_;
  return b;
}

caf::error
replay_buffer::update_priorities(const std::vector<std::int64_t>& indices,
                                 const std::vector<float>& td_errors) {
  auto bad = [](std::string what) {
    return make_error(errc::invalid_config, "update_priorities: " + what);
  };
  if (indices.size() != td_errors.size())
    return bad(std::to_string(indices.size()) + " indices, "
               + std::to_string(td_errors.size()) + " errors");
  if (!tree_)
    return caf::none;
  for (std::size_t k = 0; k < indices.size(); ++k) {
    if (indices[k] < 0 || static_cast<std::size_t>(indices[k]) >= size_)
      return bad("slot " + std::to_string(indices[k]) + " of "
                 + std::to_string(size_));
    if (!std::isfinite(td_errors[k]))
      return bad("non-finite td error");
  }
  for (std::size_t k = 0; k < indices.size(); ++k) {
    auto p = std::abs(static_cast<double>(td_errors[k])) + opts_.priority_eps;
    max_priority_ = std::max(max_priority_, p);
    tree_->set(static_cast<std::size_t>(indices[k]), std::pow(p, opts_.alpha));
  }
  return caf::none;
}

caf::error replay_buffer::restore_from(replay_buffer&& other) {
  if (other.opts_.capacity != opts_.capacity || other.obs_dim_ != obs_dim_
      || other.prioritized() != prioritized())
    return make_error(errc::model_mismatch,
                      "replay_buffer: restore_from a buffer of another "
                      "capacity, obs_dim or kind");
  size_ = other.size_;
  next_ = other.next_;
  obs_ = std::move(other.obs_);
  reward_ = std::move(other.reward_);
  next_obs_ = std::move(other.next_obs_);
  discount_ = std::move(other.discount_);
  action_ = std::move(other.action_);
  tree_ = std::move(other.tree_);
  max_priority_ = other.max_priority_;
  beta_ = other.beta_;
  samples_ = other.samples_;
  return caf::none;
}

} // namespace dice::rl
