#include "dice/messages/detail/snapshot_chunk.hpp"

// XXH3_state_t's layout, so a stream lives inline (no allocation).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#if defined(__x86_64__) || defined(_M_X64)
// Picks the widest vector unit (SSE2, AVX2, AVX-512) at run time; the hash
// is the same on every path.
#  include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cstring>

namespace dice {

namespace {

// Bytes hashed and then copied at a time: small enough to stay in L1/L2
// between the two, large enough that the per-update overhead vanishes.
constexpr std::size_t block = 32 * 1024;

XXH3_state_t* state_of(unsigned char* raw) noexcept {
  return reinterpret_cast<XXH3_state_t*>(raw);
}

const XXH3_state_t* state_of(const unsigned char* raw) noexcept {
  return reinterpret_cast<const XXH3_state_t*>(raw);
}

} // namespace

std::uint64_t checksum64(const void* data, std::size_t n,
                         std::uint64_t seed) noexcept {
  return XXH3_64bits_withSeed(data, n, seed);
}

std::uint64_t copy_checksum64(void* dst, const void* src, std::size_t n,
                              std::uint64_t seed) noexcept {
  if (n <= block) {
    if (n > 0) // memcpy's pointers must be valid even for 0 bytes
      std::memcpy(dst, src, n);
    return XXH3_64bits_withSeed(src, n, seed);
  }
  checksum64_stream sum{seed};
  sum.copy_update(dst, src, n);
  return sum.digest();
}

checksum64_stream::checksum64_stream(std::uint64_t seed) noexcept {
  static_assert(sizeof(XXH3_state_t) <= sizeof(state_),
                "checksum64_stream::state_ cannot hold XXH3_state_t");
  static_assert(alignof(XXH3_state_t) <= 64,
                "checksum64_stream::state_ is not aligned for XXH3_state_t");
  auto st = state_of(state_);
  std::memset(st, 0, sizeof(XXH3_state_t));
  XXH3_INITSTATE(st);
  XXH3_64bits_reset_withSeed(st, seed);
}

void checksum64_stream::update(const void* data, std::size_t n) noexcept {
  XXH3_64bits_update(state_of(state_), data, n);
}

void checksum64_stream::copy_update(void* dst, const void* src,
                                    std::size_t n) noexcept {
  auto in = static_cast<const std::uint8_t*>(src);
  auto out = static_cast<std::uint8_t*>(dst);
  for (std::size_t i = 0; i < n; i += block) {
    auto k = std::min(block, n - i);
    update(in + i, k);
    std::memcpy(out + i, in + i, k);
  }
}

std::uint64_t checksum64_stream::digest() const noexcept {
  return XXH3_64bits_digest(state_of(state_));
}

} // namespace dice
