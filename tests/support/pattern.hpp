#pragma once

// Test bytes with a position-dependent pattern.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dice::test {

/// `n` bytes from a linear congruential sequence seeded with `seed`, so a
/// shifted or reordered copy never compares equal.
inline std::vector<std::uint8_t> pattern(std::size_t n,
                                         std::uint32_t seed = 1) {
  std::vector<std::uint8_t> result(n);
  std::uint32_t state = seed;
  for (auto& b : result) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(state >> 24);
  }
  return result;
}

} // namespace dice::test
