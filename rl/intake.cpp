#include "dice/rl/intake.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace dice::rl {

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

} // namespace dice::rl
