#include "dice/messages/snapshot_chunk.hpp"

#include <algorithm>
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

// The 32-byte stripe loop of XXH64 over [p, p + n), n a multiple of 32.
inline void stripes(std::uint64_t* v, const std::uint8_t* p,
                    std::size_t n) noexcept {
  auto v1 = v[0];
  auto v2 = v[1];
  auto v3 = v[2];
  auto v4 = v[3];
  for (auto end = p + n; p < end; p += 32) {
    v1 = round(v1, read64(p));
    v2 = round(v2, read64(p + 8));
    v3 = round(v3, read64(p + 16));
    v4 = round(v4, read64(p + 24));
  }
  v[0] = v1;
  v[1] = v2;
  v[2] = v3;
  v[3] = v4;
}

inline void init(std::uint64_t* v, std::uint64_t seed) noexcept {
  v[0] = seed + p1 + p2;
  v[1] = seed + p2;
  v[2] = seed;
  v[3] = seed - p1;
}

// XXH64's finish: the lanes (if 32 bytes or more went through them), the
// length, then the last n % 32 bytes at `p`.
std::uint64_t finish(const std::uint64_t* v, std::uint64_t seed,
                     std::uint64_t total, const std::uint8_t* p,
                     std::size_t rest) noexcept {
  std::uint64_t h;
  if (total >= 32) {
    h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
    h = merge(h, v[0]);
    h = merge(h, v[1]);
    h = merge(h, v[2]);
    h = merge(h, v[3]);
  } else {
    h = seed + p5;
  }
  h += total;
  auto end = p + rest;
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

// Bytes hashed and then copied at a time: small enough to stay in L1/L2
// between the two, large enough that the loop overhead vanishes.
constexpr std::size_t block = 32 * 1024;

} // namespace

std::uint64_t checksum64(const void* data, std::size_t n,
                         std::uint64_t seed) noexcept {
  auto p = static_cast<const std::uint8_t*>(data);
  std::uint64_t v[4];
  init(v, seed);
  auto body = n / 32 * 32;
  stripes(v, p, body);
  return finish(v, seed, n, p + body, n - body);
}

std::uint64_t copy_checksum64(void* dst, const void* src, std::size_t n,
                              std::uint64_t seed) noexcept {
  auto in = static_cast<const std::uint8_t*>(src);
  auto out = static_cast<std::uint8_t*>(dst);
  std::uint64_t v[4];
  init(v, seed);
  auto body = n / 32 * 32;
  for (std::size_t i = 0; i < body; i += block) {
    auto k = std::min(block, body - i);
    stripes(v, in + i, k);
    std::memcpy(out + i, in + i, k);
  }
  if (n > body)
    std::memcpy(out + body, in + body, n - body);
  return finish(v, seed, n, in + body, n - body);
}

checksum64_stream::checksum64_stream(std::uint64_t seed) noexcept
  : seed_(seed) {
  init(v_, seed);
}

void checksum64_stream::update(const void* data, std::size_t n) noexcept {
  auto p = static_cast<const std::uint8_t*>(data);
  total_ += n;
  if (tail_len_ > 0) {
    auto k = std::min(n, 32 - tail_len_);
    std::memcpy(tail_ + tail_len_, p, k);
    tail_len_ += k;
    p += k;
    n -= k;
    if (tail_len_ < 32)
      return;
    stripes(v_, tail_, 32);
    tail_len_ = 0;
  }
  auto body = n / 32 * 32;
  stripes(v_, p, body);
  if (n > body) {
    std::memcpy(tail_, p + body, n - body);
    tail_len_ = n - body;
  }
}

std::uint64_t checksum64_stream::digest() const noexcept {
  return finish(v_, seed_, total_, tail_, tail_len_);
}

} // namespace dice
