#include "segment.hpp"

#include "dice/core/errc.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace ppo {

std::string check(const step_record& x) {
  for (std::size_t i = 0; i < obs_dim; ++i)
    if (!std::isfinite(x.obs[i]) || !std::isfinite(x.next_obs[i]))
      return "non-finite observation";
  if (!std::isfinite(x.reward))
    return "non-finite reward";
  // A log-probability is <= 0; -inf would make every importance weight 0
  // or infinite.
  if (!std::isfinite(x.logp) || x.logp > 0)
    return "log-probability not in (-inf, 0]";
  if (x.action >= num_actions)
    return "action " + std::to_string(x.action) + " out of range";
  if (x.terminated > 1 || x.truncated > 1 || x.has_value > 1)
    return "flag not 0 or 1";
  if (x.has_value == 1 && !std::isfinite(x.value))
    return "non-finite value";
  return {};
}

std::string check(const episode_record& x) {
  if (!std::isfinite(x.ret))
    return "non-finite episode return";
  if (x.length < 1)
    return "episode length " + std::to_string(x.length);
  return {};
}

// -- lag_summary --------------------------------------------------------------

void lag_summary::add(std::int64_t lag, std::int64_t n) {
  if (n <= 0)
    return;
  lag = std::max<std::int64_t>(lag, 0);
  if (count_ == 0 || lag < min_)
    min_ = lag;
  max_ = std::max(max_, lag);
  count_ += n;
  sum_ += static_cast<double>(lag) * static_cast<double>(n);
  hist_[static_cast<std::size_t>(std::min(lag, buckets - 1))] += n;
}

void lag_summary::merge(const lag_summary& other) {
  if (other.count_ == 0)
    return;
  if (count_ == 0 || other.min_ < min_)
    min_ = other.min_;
  max_ = std::max(max_, other.max_);
  count_ += other.count_;
  sum_ += other.sum_;
  for (std::size_t i = 0; i < hist_.size(); ++i)
    hist_[i] += other.hist_[i];
}

double lag_summary::mean() const noexcept {
  return count_ > 0 ? sum_ / static_cast<double>(count_)
                    : std::numeric_limits<double>::quiet_NaN();
}

std::int64_t lag_summary::quantile(double q) const noexcept {
  if (count_ == 0)
    return 0;
  auto want = static_cast<std::int64_t>(std::ceil(q * count_));
  std::int64_t seen = 0;
  for (std::size_t i = 0; i < hist_.size(); ++i) {
    seen += hist_[i];
    if (seen >= std::max<std::int64_t>(want, 1))
      return i + 1 == hist_.size() ? buckets : static_cast<std::int64_t>(i);
  }
  return buckets;
}

std::string lag_summary::str() const {
  std::ostringstream os;
  os << min() << "/" << std::fixed << std::setprecision(2)
     << (count_ > 0 ? mean() : 0.0) << "/" << max() << " (p50 " << quantile(0.5)
     << ", p90 " << quantile(0.9) << ")";
  return os.str();
}

// -- cutting segments ---------------------------------------------------------

namespace {

caf::error refuse_batch(intake_counters& counters, std::string why) {
  ++counters.batches_rejected;
  counters.last_error = why;
  return dice::make_error(dice::errc::malformed_input, std::move(why));
}

} // namespace

caf::expected<segment_batch>
cut_segments(const std::vector<dice::payload>& trajectories,
             const std::vector<std::int64_t>& end_idx,
             const intake_options& opts, intake_counters& counters,
             lag_summary& lags) {
  // Where each payload's steps sit in the flattened list, by the counts the
  // payloads claim: the context exchanger offsets end indices by the same
  // counts, so they stay meaningful even when a payload turns out bad.
  std::vector<std::int64_t> first(trajectories.size() + 1, 0);
  for (std::size_t p = 0; p < trajectories.size(); ++p) {
    auto n = trajectories[p].count;
    if (n
        > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max()))
      return refuse_batch(counters,
                          "payload claims " + std::to_string(n) + " steps");
    first[p + 1] = first[p] + static_cast<std::int64_t>(n);
  }
  auto total = first.back();
  // The end indices must cut the list cleanly: increasing, inside it, the
  // last step closing the last segment.
  for (std::size_t i = 0; i < end_idx.size(); ++i) {
    auto x = end_idx[i];
    if (x < 0 || x >= total)
      return refuse_batch(counters,
                          "trajectory_end_idx " + std::to_string(x)
                            + " outside the " + std::to_string(total)
                            + " merged steps");
    if (i > 0 && x <= end_idx[i - 1])
      return refuse_batch(counters,
                          "trajectory_end_idx not increasing at position "
                            + std::to_string(i) + " (" + std::to_string(x)
                            + " after " + std::to_string(end_idx[i - 1])
                            + "): indices not offset per collector?");
  }
  if (total > 0 && (end_idx.empty() || end_idx.back() != total - 1))
    return refuse_batch(counters,
                        "the last of " + std::to_string(total)
                          + " steps ends no trajectory");
  // No segment may span two payloads (two collectors, or two iterations of
  // one, acted with different models and envs).
  {
    std::size_t k = 0;
    for (std::size_t p = 0; p < trajectories.size(); ++p) {
      if (first[p + 1] == first[p])
        continue;
      auto last = first[p + 1] - 1;
      while (k < end_idx.size() && end_idx[k] < last)
        ++k;
      if (k == end_idx.size() || end_idx[k] != last)
        return refuse_batch(counters,
                            "payload " + std::to_string(p) + " (from node "
                              + std::to_string(trajectories[p].origin)
                              + ") ends inside a trajectory");
    }
  }
  segment_batch out;
  out.steps.reserve(static_cast<std::size_t>(total));
  std::size_t k = 0; // next end index
  std::vector<step_record> items;
  for (std::size_t p = 0; p < trajectories.size(); ++p) {
    auto& pl = trajectories[p];
    if (pl.count == 0)
      continue;
    auto claimed = static_cast<std::int64_t>(pl.count);
    // This payload's segments: end indices within [first[p], first[p+1]).
    std::vector<std::int64_t> ends;
    while (k < end_idx.size() && end_idx[k] < first[p + 1])
      ends.push_back(end_idx[k++] - first[p]);
    items.clear();
    std::string bad;
    if (auto err = dice::unpack_into(pl, items)) {
      bad = dice::render(err);
    } else {
      for (std::size_t i = 0; i < items.size() && bad.empty(); ++i) {
        auto why = check(items[i]);
        if (!why.empty())
          bad = "step " + std::to_string(i) + ": " + why;
      }
    }
    if (!bad.empty()) {
      ++counters.payloads_rejected;
      counters.steps_rejected += claimed;
      counters.last_error = "payload from node " + std::to_string(pl.origin)
        + " refused: " + bad;
      continue;
    }
    auto version = std::max<std::int64_t>(pl.model_version, 0);
    auto lag = opts.learner_version - version;
    counters.steps_received += claimed;
    counters.segments_received += static_cast<std::int64_t>(ends.size());
    if (lag < 0) {
      counters.steps_dropped_future += claimed;
      continue;
    }
    lags.add(lag, claimed);
    if (opts.max_lag >= 0 && lag > opts.max_lag) {
      counters.steps_dropped_stale += claimed;
      counters.segments_dropped_stale += static_cast<std::int64_t>(ends.size());
      continue;
    }
    std::int64_t start = 0;
    for (auto e : ends) {
      for (auto i = start; i <= e; ++i) {
        out.steps.push_back(items[static_cast<std::size_t>(i)]);
        out.segment_end.push_back(i == e ? 1 : 0);
        out.version.push_back(version);
        out.lag.push_back(lag);
      }
      ++out.segments;
      start = e + 1;
    }
  }
  return out;
}

std::vector<std::uint8_t> trajectory_flags(const segment_batch& b) {
  std::vector<std::uint8_t> flags(b.size());
  for (std::size_t i = 0; i < b.size(); ++i)
    flags[i] = b.segment_end[i] | b.steps[i].terminated | b.steps[i].truncated;
  return flags;
}

std::vector<std::uint8_t>
dingengine_flags(const std::vector<step_record>& steps,
                 const std::vector<std::int64_t>& end_idx) {
  std::vector<std::uint8_t> flags(steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i)
    flags[i] = steps[i].terminated | steps[i].truncated;
  for (auto x : end_idx)
    if (x >= 0 && x < static_cast<std::int64_t>(steps.size()))
      flags[static_cast<std::size_t>(x)] = 1;
  return flags;
}

void merge_context(std::vector<dice::payload>& trajectories,
                   std::vector<std::int64_t>& end_idx,
                   const std::vector<dice::payload>& more,
                   const std::vector<std::int64_t>& more_end_idx, bool offset) {
  auto base = offset ? static_cast<std::int64_t>(dice::item_count(trajectories))
                     : 0;
  trajectories.insert(trajectories.end(), more.begin(), more.end());
  for (auto x : more_end_idx)
    end_idx.push_back(x + base);
}

} // namespace ppo
