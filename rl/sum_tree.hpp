#pragma once

// A sum tree and a min tree over the same leaves (private to dice::rl):
// prefix-sum sampling and the smallest priority in O(log n), what
// proportional prioritized replay needs (Schaul et al. 2016, appendix B.2.1).

#include <cstddef>
#include <vector>

namespace dice::rl::detail {

/// Non-negative values at `size` leaves with their sum and minimum.
class sum_tree {
 public:
  /// `size` leaves, all 0 (and left out of the minimum until set).
  explicit sum_tree(std::size_t size);

  /// Sets leaf `i` to `value` (>= 0).
  void set(std::size_t i, double value);

  /// The value at leaf `i`.
  double get(std::size_t i) const {
    return sum_[leaves_ + i];
  }

  /// The sum of all leaves.
  double total() const {
    return sum_[1];
  }

  /// The smallest value set so far (infinity when none is).
  double min() const {
    return min_[1];
  }

  /// The leaf whose prefix-sum interval holds `mass` (0 <= mass < total()):
  /// the first i with get(0) + ... + get(i) > mass.
  std::size_t find(double mass) const;

  /// Number of leaves.
  std::size_t size() const noexcept {
    return size_;
  }

 private:
  std::size_t size_;
  // Leaves at [leaves_, 2 * leaves_), node k's children at 2k and 2k + 1.
  std::size_t leaves_;
  std::vector<double> sum_;
  std::vector<double> min_;
};

} // namespace dice::rl::detail
