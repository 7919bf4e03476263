#include "sum_tree.hpp"

#include <algorithm>
#include <limits>

namespace dice::rl::detail {

namespace {

std::size_t tree_leaves_for(std::size_t size) {
  std::size_t n = 1;
  while (n < size)
    n *= 2;
  return n;
}

} // namespace

sum_tree::sum_tree(std::size_t size)
  : size_(size), leaves_(tree_leaves_for(size)), sum_(2 * leaves_, 0.0),
    min_(2 * leaves_, std::numeric_limits<double>::infinity()) {
  // nop
}

void sum_tree::set(std::size_t i, double value) {
  auto k = leaves_ + i;
  sum_[k] = value;
  min_[k] = value;
  for (k /= 2; k >= 1; k /= 2) {
    sum_[k] = sum_[2 * k] + sum_[2 * k + 1];
    min_[k] = std::min(min_[2 * k], min_[2 * k + 1]);
  }
}

std::size_t sum_tree::find(double mass) const {
  std::size_t k = 1;
  while (k < leaves_) {
    auto left = 2 * k;
    if (mass < sum_[left]) {
      k = left;
    } else {
      mass -= sum_[left];
      k = left + 1;
    }
  }
  // Rounding in the inner sums can walk past the last leaf with mass:
  // stay inside the leaves that exist.
  return std::min(k - leaves_, size_ > 0 ? size_ - 1 : 0);
}

} // namespace dice::rl::detail
