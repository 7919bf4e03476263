#include "dice/rl/transitions.hpp"

#include "dice/core/errc.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dice::rl {

// -- transition_batch ---------------------------------------------------------

void transition_batch::reserve(std::size_t n) {
  auto d = static_cast<std::size_t>(std::max<std::int64_t>(obs_dim, 0));
  obs.reserve(obs.size() + n * d);
  next_obs.reserve(next_obs.size() + n * d);
  action.reserve(action.size() + n);
  reward.reserve(reward.size() + n);
  discount.reserve(discount.size() + n);
}

void transition_batch::clear() noexcept {
  obs.clear();
  action.clear();
  reward.clear();
  next_obs.clear();
  discount.clear();
}

void transition_batch::throw_if_invalid(const transition_batch& x) {
  if (auto err = validate(x))
    throw std::invalid_argument(render(err));
}

namespace {

bool batch_finite(const std::vector<float>& xs) {
  return std::all_of(xs.begin(), xs.end(), [](float x) {
    return std::isfinite(x);
  });
}

// True if `xs` holds exactly n rows of d floats (d >= 1); divides rather
// than multiplies, so no hostile obs_dim can overflow.
bool batch_rows_fit(const std::vector<float>& xs, std::size_t n,
                    std::int64_t d) {
  auto dim = static_cast<std::uint64_t>(d);
  return xs.size() % dim == 0 && xs.size() / dim == n;
}

} // namespace

caf::error validate(const transition_batch& x) {
  auto bad = [](std::string what) {
    return make_error(errc::malformed_input, "transition_batch: " + what);
  };
  auto n = x.action.size();
  if (x.reward.size() != n || x.discount.size() != n)
    return bad(std::to_string(n) + " actions but "
               + std::to_string(x.reward.size()) + " rewards and "
               + std::to_string(x.discount.size()) + " discounts");
  if (x.obs_dim < 0 || (n > 0 && x.obs_dim == 0))
    return bad("obs_dim " + std::to_string(x.obs_dim));
  if (n == 0) {
    if (!x.obs.empty() || !x.next_obs.empty())
      return bad("observations without transitions");
    return caf::none;
  }
  if (!batch_rows_fit(x.obs, n, x.obs_dim)
      || !batch_rows_fit(x.next_obs, n, x.obs_dim))
    return bad(std::to_string(x.obs.size()) + " and "
               + std::to_string(x.next_obs.size()) + " observation floats for "
               + std::to_string(n) + " transitions of obs_dim "
               + std::to_string(x.obs_dim));
  if (!batch_finite(x.obs) || !batch_finite(x.next_obs)
      || !batch_finite(x.reward))
    return bad("non-finite observation or reward");
  if (!std::all_of(x.discount.begin(), x.discount.end(), [](float d) {
        return d >= 0.0f && d <= 1.0f;
      }))
    return bad("discount outside [0, 1]"); // NaN fails both comparisons
  if (!std::all_of(x.action.begin(), x.action.end(), [](std::int64_t a) {
        return a >= 0;
      }))
    return bad("negative action");
  return caf::none;
}

// -- nstep_accumulator --------------------------------------------------------

nstep_accumulator::nstep_accumulator(std::size_t envs, std::int64_t obs_dim,
                                     int nstep, float gamma)
  : obs_dim_(std::max<std::int64_t>(obs_dim, 0)), nstep_(nstep < 1 ? 1 : nstep),
    gamma_(gamma), windows_(envs) {
  auto slots = static_cast<std::size_t>(nstep_);
  for (auto& w : windows_) {
    w.obs.resize(slots * static_cast<std::size_t>(obs_dim_));
    w.action.resize(slots);
    w.reward.resize(slots);
  }
}

void nstep_accumulator::emit(window& w, const float* next_obs, bool terminal,
                             transition_batch& out) {
  auto slots = static_cast<std::size_t>(nstep_);
  auto d = static_cast<std::size_t>(obs_dim_);
  // Summed oldest first, in float, as the examples did (same rounding).
  float ret = 0;
  float g = 1;
  for (std::size_t k = 0; k < w.count; ++k) {
    ret += g * w.reward[(w.head + k) % slots];
    g *= gamma_;
  }
  auto first = w.obs.begin() + static_cast<std::ptrdiff_t>(w.head * d);
  out.obs.insert(out.obs.end(), first, first + static_cast<std::ptrdiff_t>(d));
  out.action.push_back(w.action[w.head]);
  out.reward.push_back(ret);
  out.next_obs.insert(out.next_obs.end(), next_obs, next_obs + d);
  // After a termination there is nothing to bootstrap from; a truncation
  // (time limit) still bootstraps from the last observation.
  out.discount.push_back(terminal ? 0.0f : g);
  w.head = (w.head + 1) % slots;
  --w.count;
}

caf::error nstep_accumulator::add(const float* obs, const std::int64_t* actions,
                                  const float* rewards, const float* next_obs,
                                  const std::uint8_t* terminated,
                                  const std::uint8_t* truncated,
                                  transition_batch& out) {
  if (!out.empty() && out.obs_dim != obs_dim_)
    return make_error(errc::invalid_config,
                      "nstep_accumulator: batch holds obs_dim "
                        + std::to_string(out.obs_dim) + ", accumulator "
                        + std::to_string(obs_dim_));
  out.obs_dim = obs_dim_;
  auto slots = static_cast<std::size_t>(nstep_);
  auto d = static_cast<std::size_t>(obs_dim_);
  for (std::size_t i = 0; i < windows_.size(); ++i) {
    auto& w = windows_[i];
    auto slot = (w.head + w.count) % slots;
    std::copy(obs + d * i, obs + d * (i + 1), w.obs.begin() + slot * d);
    w.action[slot] = actions[i];
    w.reward[slot] = rewards[i];
    ++w.count;
    const float* nxt = next_obs + d * i;
    if (terminated[i] || truncated[i]) {
      // The episode ended: every pending step gets a (shorter) target.
      while (w.count > 0)
        emit(w, nxt, terminated[i] != 0, out);
      w.head = 0;
    } else if (w.count == slots) {
      emit(w, nxt, false, out);
    }
  }
  return caf::none;
}

std::size_t nstep_accumulator::pending() const noexcept {
  std::size_t n = 0;
  for (auto& w : windows_)
    n += w.count;
  return n;
}

void nstep_accumulator::clear() noexcept {
  for (auto& w : windows_) {
    w.head = 0;
    w.count = 0;
  }
}

} // namespace dice::rl
