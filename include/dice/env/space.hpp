#pragma once

// Observation and action spaces with gymnasium's meaning: Discrete(n) holds
// the integers 0..n-1, Box(low, high, shape) float32 arrays of that shape
// with per-element bounds (which may be infinite).

#include <cstdint>
#include <string>
#include <vector>

namespace dice {

/// Which of gymnasium's spaces a `space` is.
enum class space_kind : std::uint8_t {
  /// The integers 0..n-1 (gymnasium.spaces.Discrete).
  discrete,
  /// float32 arrays with bounds (gymnasium.spaces.Box).
  box,
};

/// An observation or action space.
struct space {
  /// Discrete or box.
  space_kind kind = space_kind::box;
  /// Discrete: the number of values.
  std::int64_t n = 0;
  /// Box: the shape of one element (row-major).
  std::vector<std::int64_t> shape;
  /// Box: the lower bound of each of the flat_size() values.
  std::vector<float> low;
  /// Box: the upper bound of each of the flat_size() values.
  std::vector<float> high;

  /// Discrete(n).
  static space discrete(std::int64_t n);

  /// Box(low, high, shape): the same bounds for every value.
  static space box(std::vector<std::int64_t> shape, float low, float high);

  /// A one-dimensional box with its own bounds per value.
  static space box(std::vector<float> low, std::vector<float> high);

  /// True for Discrete.
  bool is_discrete() const noexcept {
    return kind == space_kind::discrete;
  }

  /// Floats in one element of a box (the product of the shape); 1 for a
  /// discrete space (one index).
  std::int64_t flat_size() const noexcept;

  /// gymnasium's repr: "Discrete(2)", "Box(-1.0, 1.0, (3,), float32)",
  /// "Box([-1. -1. -8.], [1. 1. 8.], (3,), float32)"; bounds print as numpy's
  /// str() does (except its "..." summary of arrays over 1000 values).
  std::string to_string() const;
};

/// Same kind, size, shape and bounds.
bool operator==(const space& x, const space& y);

/// Not equal.
inline bool operator!=(const space& x, const space& y) {
  return !(x == y);
}

} // namespace dice
