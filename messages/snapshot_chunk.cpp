#include "dice/messages/snapshot_chunk.hpp"

#include <cstring>

namespace dice {

namespace {

// XXH64 (Yann Collet's xxHash, 64-bit variant): four independent lanes keep
// the multiplier busy, so it runs near memory speed.
constexpr std::uint64_t p1 = 0x9E3779B185EBCA87ULL;
constexpr std::uint64_t p2 = 0xC2B2AE3D27D4EB4FULL;
constexpr std::uint64_t p3 = 0x165667B19E3779F9ULL;
constexpr std::uint64_t p4 = 0x85EBCA77C2B2AE63ULL;
constexpr std::uint64_t p5 = 0x27D4EB2F165667C5ULL;

inline std::uint64_t rotl(std::uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

inline std::uint64_t read64(const std::uint8_t* p) {
  std::uint64_t x;
  std::memcpy(&x, p, 8);
  return x;
}

inline std::uint32_t read32(const std::uint8_t* p) {
  std::uint32_t x;
  std::memcpy(&x, p, 4);
  return x;
}

inline std::uint64_t round(std::uint64_t acc, std::uint64_t input) {
  acc += input * p2;
  acc = rotl(acc, 31);
  return acc * p1;
}

inline std::uint64_t merge(std::uint64_t acc, std::uint64_t val) {
  acc ^= round(0, val);
  return acc * p1 + p4;
}

} // namespace

std::uint64_t checksum64(const void* data, std::size_t n,
                         std::uint64_t seed) noexcept {
  auto p = static_cast<const std::uint8_t*>(data);
  auto end = p + n;
  std::uint64_t h;
  if (n >= 32) {
    auto limit = end - 32;
    std::uint64_t v1 = seed + p1 + p2;
    std::uint64_t v2 = seed + p2;
    std::uint64_t v3 = seed;
    std::uint64_t v4 = seed - p1;
    do {
      v1 = round(v1, read64(p));
      v2 = round(v2, read64(p + 8));
      v3 = round(v3, read64(p + 16));
      v4 = round(v4, read64(p + 24));
      p += 32;
    } while (p <= limit);
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge(h, v1);
    h = merge(h, v2);
    h = merge(h, v3);
    h = merge(h, v4);
  } else {
    h = seed + p5;
  }
  h += static_cast<std::uint64_t>(n);
  while (p + 8 <= end) {
    h ^= round(0, read64(p));
    h = rotl(h, 27) * p1 + p4;
    p += 8;
  }
  if (p + 4 <= end) {
    h ^= static_cast<std::uint64_t>(read32(p)) * p1;
    h = rotl(h, 23) * p2 + p3;
    p += 4;
  }
  while (p < end) {
    h ^= (*p) * p5;
    h = rotl(h, 11) * p1;
    ++p;
  }
  h ^= h >> 33;
  h *= p2;
  h ^= h >> 29;
  h *= p3;
  h ^= h >> 32;
  return h;
}

} // namespace dice
