#pragma once

// A copy that hashes what it copies in the same pass: the shared-memory
// store and load copy every byte once and must checksum it too.

#include <cstddef>
#include <cstdint>

namespace dice::storage_detail {

/// Copies `n` bytes from `src` to `dst` and returns checksum64(dst, n, seed)
/// (XXH3-64, the stored items' checksum), reading `src` once: each 64-byte
/// stripe is hashed from the register it was copied through, so the digest
/// is of exactly the bytes written to `dst`. The buffers must not overlap.
std::uint64_t copy_hash(std::uint8_t* dst, const std::uint8_t* src,
                        std::size_t n, std::uint64_t seed) noexcept;

/// copy_hash without the fused kernel (libxxhash on each copied block): the
/// path taken without AVX2, kept callable so tests can compare the two.
std::uint64_t copy_hash_blocks(std::uint8_t* dst, const std::uint8_t* src,
                               std::size_t n, std::uint64_t seed) noexcept;

} // namespace dice::storage_detail
