// XXH3-64's long-input loop (xxhash 0.8's accumulate / scramble / merge,
// the AVX2 variant) with the copy folded in. libxxhash has no copying
// entry point, and copying then hashing reads the bytes twice: at 1 MB
// (in cache) XXH3 runs at memcpy speed, so a copy plus its hash cost 2x a
// copy and capped a shared-memory store+load at 0.5x two memcpys. Fused,
// the hash rides on the copy's loads (measured: 1.1-1.3x a memcpy). The
// secret and initial accumulators come from libxxhash's own state, and the
// digest is checked against XXH3_64bits_withSeed in
// tests/storage/copy_hash_test.cpp.
#include "storage/copy_hash.hpp"

#include "dice/messages/detail/snapshot_chunk.hpp"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#  include <immintrin.h>
#  define DICE_COPY_HASH_AVX2 1
#endif

namespace dice::storage_detail {

// Named, not anonymous: storage/ compiles in unity batches.
namespace copy_hash_impl {

// XXH3's constants (xxhash.h, XXH_PRIME*), its stripe and block shape with
// the default 192-byte secret, and its short-input bound (up to 240 bytes
// XXH3 takes other paths: those go through libxxhash).
constexpr std::uint64_t prime32_1 = 0x9E3779B1U;
constexpr std::uint64_t prime64_1 = 0x9E3779B185EBCA87ULL;
constexpr std::size_t stripe = 64;
constexpr std::size_t secret_size = XXH3_SECRET_DEFAULT_SIZE;
constexpr std::size_t stripes_per_block = (secret_size - stripe) / 8;
constexpr std::size_t block = stripes_per_block * stripe;
constexpr std::size_t mid_size_max = 240;
constexpr std::size_t merge_start = 11;
constexpr std::size_t last_acc_start = 7;
static_assert(secret_size == 192 && block == 1024, "xxhash 0.8's layout");

// Bytes copied, then hashed from cache, per step of the plain path.
constexpr std::size_t plain_block = 32 * 1024;

std::uint64_t read64(const void* p) noexcept {
  std::uint64_t x;
  std::memcpy(&x, p, 8);
  return x;
}

std::uint64_t mul128_fold64(std::uint64_t a, std::uint64_t b) noexcept {
  auto p = static_cast<unsigned __int128>(a) * b;
  return static_cast<std::uint64_t>(p) ^ static_cast<std::uint64_t>(p >> 64);
}

std::uint64_t avalanche(std::uint64_t h) noexcept {
  h ^= h >> 37;
  h *= 0x165667919E3779F9ULL;
  return h ^ (h >> 32);
}

#ifdef DICE_COPY_HASH_AVX2

// One 64-byte stripe (already in registers) into the accumulators.
__attribute__((target("avx2"), always_inline)) inline void
accumulate(__m256i acc[2], __m256i d0, __m256i d1,
           const std::uint8_t* secret) noexcept {
  const __m256i data[2] = {d0, d1};
  for (int i = 0; i < 2; ++i) {
    auto key = _mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(secret + 32 * i));
    auto data_key = _mm256_xor_si256(data[i], key);
    auto data_key_lo = _mm256_shuffle_epi32(data_key, _MM_SHUFFLE(0, 3, 0, 1));
    auto product = _mm256_mul_epu32(data_key, data_key_lo);
    auto swapped = _mm256_shuffle_epi32(data[i], _MM_SHUFFLE(1, 0, 3, 2));
    acc[i] = _mm256_add_epi64(product, _mm256_add_epi64(acc[i], swapped));
  }
}

// Copies one stripe at `off` and accumulates it with `secret`.
__attribute__((target("avx2"), always_inline)) inline void
copy_stripe(__m256i acc[2], std::uint8_t* dst, const std::uint8_t* src,
            std::size_t off, const std::uint8_t* secret) noexcept {
  auto d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + off));
  auto d1 = _mm256_loadu_si256(
    reinterpret_cast<const __m256i*>(src + off + 32));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + off), d0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + off + 32), d1);
  accumulate(acc, d0, d1, secret);
}

__attribute__((target("avx2"), always_inline)) inline void
scramble(__m256i acc[2], const std::uint8_t* secret) noexcept {
  const auto prime = _mm256_set1_epi32(static_cast<int>(prime32_1));
  for (int i = 0; i < 2; ++i) {
    auto x = _mm256_xor_si256(acc[i], _mm256_srli_epi64(acc[i], 47));
    auto key = _mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(secret + 32 * i));
    auto data_key = _mm256_xor_si256(x, key);
    auto data_key_hi = _mm256_shuffle_epi32(data_key, _MM_SHUFFLE(0, 3, 0, 1));
    auto lo = _mm256_mul_epu32(data_key, prime);
    auto hi = _mm256_mul_epu32(data_key_hi, prime);
    acc[i] = _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
  }
}

// XXH3_hashLong_64b for n > 240 with the copy folded in; `acc_init` and
// `secret` as XXH3_64bits_reset_withSeed left them.
__attribute__((target("avx2"))) std::uint64_t
copy_hash_avx2(std::uint8_t* dst, const std::uint8_t* src, std::size_t n,
               const std::uint64_t* acc_init,
               const std::uint8_t* secret) noexcept {
  __m256i acc[2] = {
    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc_init)),
    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc_init + 4))};
  auto blocks = (n - 1) / block;
  for (std::size_t b = 0; b < blocks; ++b) {
    for (std::size_t s = 0; s < stripes_per_block; ++s)
      copy_stripe(acc, dst, src, b * block + s * stripe, secret + 8 * s);
    scramble(acc, secret + secret_size - stripe);
  }
  // The last block's whole stripes, then XXH3's last stripe: the final 64
  // bytes (overlapping what came before), read back from `dst`.
  auto base = blocks * block;
  auto stripes = ((n - 1) - base) / stripe;
  for (std::size_t s = 0; s < stripes; ++s)
    copy_stripe(acc, dst, src, base + s * stripe, secret + 8 * s);
  auto copied = base + stripes * stripe;
  std::memcpy(dst + copied, src + copied, n - copied);
  auto last = dst + n - stripe;
  accumulate(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(last)),
             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(last + 32)),
             secret + secret_size - stripe - last_acc_start);
  alignas(32) std::uint64_t a[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(a), acc[0]);
  _mm256_store_si256(reinterpret_cast<__m256i*>(a + 4), acc[1]);
  // XXH3_mergeAccs.
  auto h = static_cast<std::uint64_t>(n) * prime64_1;
  for (std::size_t i = 0; i < 4; ++i) {
    auto key = secret + merge_start + 16 * i;
    h += mul128_fold64(a[2 * i] ^ read64(key), a[2 * i + 1] ^ read64(key + 8));
  }
  return avalanche(h);
}

bool has_avx2() noexcept {
  static const bool yes = __builtin_cpu_supports("avx2") != 0;
  return yes;
}

#endif // DICE_COPY_HASH_AVX2

} // namespace copy_hash_impl

using namespace copy_hash_impl;

std::uint64_t copy_hash_blocks(std::uint8_t* dst, const std::uint8_t* src,
                               std::size_t n, std::uint64_t seed) noexcept {
  checksum64_stream sum{seed};
  for (std::size_t i = 0; i < n; i += plain_block) {
    auto k = std::min(plain_block, n - i);
    std::memcpy(dst + i, src + i, k);
    sum.update(dst + i, k);
  }
  return sum.digest();
}

std::uint64_t copy_hash(std::uint8_t* dst, const std::uint8_t* src,
                        std::size_t n, std::uint64_t seed) noexcept {
#ifdef DICE_COPY_HASH_AVX2
  if (n > mid_size_max && has_avx2()) {
    // The seeded secret and initial accumulators, as libxxhash makes them.
    XXH3_state_t state;
    std::memset(&state, 0, sizeof(state)); // no field left unset
    XXH3_INITSTATE(&state);
    XXH3_64bits_reset_withSeed(&state, seed);
    auto secret = state.extSecret != nullptr ? state.extSecret
                                             : state.customSecret;
    return copy_hash_avx2(dst, src, n, state.acc, secret);
  }
#endif
  return copy_hash_blocks(dst, src, n, seed);
}

} // namespace dice::storage_detail
