#pragma once

// What a learner keeps count of while it admits collectors' data: the
// policy lag of every sample and what was received, dropped and refused.
// Torch-free.

#include <cstdint>
#include <string>
#include <vector>

namespace dice::rl {

/// Policy lag (learner version minus behaviour version) of every sample a
/// learner received, as a histogram.
class lag_summary {
 public:
  /// Lags from this value up share the last bucket.
  static constexpr std::int64_t buckets = 64;

  /// Records `n` samples of lag `lag` (>= 0).
  void add(std::int64_t lag, std::int64_t n = 1);

  /// Adds every sample of `other`.
  void merge(const lag_summary& other);

  /// Samples recorded.
  std::int64_t count() const noexcept {
    return count_;
  }

  /// Smallest lag (0 if none).
  std::int64_t min() const noexcept {
    return count_ > 0 ? min_ : 0;
  }

  /// Largest lag (0 if none).
  std::int64_t max() const noexcept {
    return max_;
  }

  /// Mean lag (NaN if none).
  double mean() const noexcept;

  /// Smallest lag with at least `q` of the samples at or below it (lags
  /// past the last bucket report as `buckets`).
  std::int64_t quantile(double q) const noexcept;

  /// Samples with lag k (the last entry: lag >= buckets - 1).
  const std::vector<std::int64_t>& histogram() const noexcept {
    return hist_;
  }

  /// "min/mean/max, p50, p90" in one line.
  std::string str() const;

 private:
  std::vector<std::int64_t> hist_ = std::vector<std::int64_t>(buckets, 0);
  std::int64_t count_ = 0;
  std::int64_t min_ = 0;
  std::int64_t max_ = 0;
  double sum_ = 0;
};

/// What the learner did with the samples it received (cumulative).
struct intake_counters {
  /// Steps in payloads that decoded and checked out.
  std::int64_t steps_received = 0;
  /// Segments (end index to end index) in them.
  std::int64_t segments_received = 0;
  /// Steps dropped because their lag exceeded max_lag.
  std::int64_t steps_dropped_stale = 0;
  /// Segments dropped because their lag exceeded max_lag.
  std::int64_t segments_dropped_stale = 0;
  /// Steps dropped because their payload claims a model version newer than
  /// the learner's (forged, or from before a learner restart).
  std::int64_t steps_dropped_future = 0;
  /// Payloads refused (undecodable, failing `check`, or of another layout).
  std::int64_t payloads_rejected = 0;
  /// Steps in refused payloads (as they claimed).
  std::int64_t steps_rejected = 0;
  /// Merged batches refused whole (trajectory_end_idx inconsistent).
  std::int64_t batches_rejected = 0;
  /// Why the last payload or batch was refused.
  std::string last_error;
};

} // namespace dice::rl
