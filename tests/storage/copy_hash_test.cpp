// The shared-memory store and load hash what they copy in the same pass
// (storage/copy_hash.cpp, a fused XXH3 kernel): the digest must be exactly
// libxxhash's one-shot XXH3 at every size and seed, the stored checksum must
// be the one the one-shot chain gives (no format change), and a corrupted
// segment must still be refused on the fused load path.

#include "dice/core/errc.hpp"
#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/storage/storage.hpp"
#include "storage/copy_hash.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

// Named, not anonymous: tests/storage compiles in unity batches.
namespace copy_hash_test {

using namespace dice;

std::vector<std::uint8_t> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937_64 gen{seed};
  std::vector<std::uint8_t> xs(n);
  for (auto& x : xs)
    x = static_cast<std::uint8_t>(gen());
  return xs;
}

model_snapshot sized_snapshot(std::size_t floats, std::uint8_t seed) {
  std::vector<float> xs(floats);
  for (std::size_t i = 0; i < xs.size(); ++i)
    xs[i] = static_cast<float>(i) * 0.125f + seed;
  snapshot_builder b;
  b.add("w", dtype::float32, {static_cast<std::int64_t>(xs.size())}, xs.data(),
        xs.size() * sizeof(float));
  return b.build(3, 99, seed, 1234);
}

std::vector<std::uint8_t> segment_bytes(const storage_ref& ref) {
  std::ifstream in{"/dev/shm" + ref.path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

storage_options shm_options() {
  storage_options so;
  so.kind = storage_kind::shm;
  so.node = 3;
  return so;
}

// Sizes around XXH3's 240-byte short-input bound, its 64-byte stripes and
// 1024-byte blocks, the 32 KiB plain-path block, and the bench's sizes.
const std::size_t sizes[] = {0,         1,     16,      128,     240,
                             241,       255,   256,     1023,    1024,
                             1025,      1087,  1088,    2049,    4097,
                             32 * 1024, 32771, 1 << 20, 1000000, 6800003};

TEST(CopyHash, DigestIsXxh3OfTheWholeBufferAtEverySizeAndSeed) {
  auto src = random_bytes(6800003 + 64, 7);
  std::vector<std::uint8_t> dst(src.size() + 64);
  for (auto n : sizes)
    for (std::uint64_t seed : {0ULL, 1ULL, 0x9E3779B185EBCA87ULL, ~0ULL}) {
      // Odd offsets: neither side is aligned.
      const auto* in = src.data() + 3;
      auto* out = dst.data() + 5;
      std::fill(dst.begin(), dst.end(), std::uint8_t{0xA5});
      auto want = checksum64(in, n, seed);
      EXPECT_EQ(storage_detail::copy_hash(out, in, n, seed), want)
        << n << " bytes, seed " << seed;
      EXPECT_EQ(std::memcmp(out, in, n), 0) << n << " bytes";
      EXPECT_EQ(out[n], 0xA5) << "wrote past " << n << " bytes";
      EXPECT_EQ(out[-1], 0xA5) << "wrote before the buffer";
      EXPECT_EQ(storage_detail::copy_hash_blocks(out, in, n, seed), want)
        << n << " bytes, seed " << seed;
    }
}

TEST(CopyHash, StoredChecksumIsTheOneShotChainOfHeaderAndBody) {
  auto opts = shm_options();
  // Small items go through write(), large ones through a recycled
  // segment's view (the fused kernel): store each twice so the second one
  // reuses the first one's segment.
  for (std::size_t floats : {1000u, 65536u + 7u, 250000u, 1700001u}) {
    for (int round = 0; round < 2; ++round) {
      auto x = sized_snapshot(floats, static_cast<std::uint8_t>(round + 1));
      auto ref = store(opts, x);
      ASSERT_TRUE(ref) << caf::to_string(ref.error());
      auto bytes = segment_bytes(*ref);
      ASSERT_EQ(bytes.size(), ref->size);
      std::uint64_t meta_len = 0;
      std::memcpy(&meta_len, bytes.data() + 8, 8);
      auto head = 16 + static_cast<std::size_t>(meta_len);
      ASSERT_LT(head, bytes.size());
      auto want = checksum64(bytes.data() + head, bytes.size() - head,
                             checksum64(bytes.data(), head, 0));
      EXPECT_EQ(ref->checksum, want) << floats << " floats, round " << round;
      auto y = load_snapshot(*ref);
      ASSERT_TRUE(y) << caf::to_string(y.error());
      EXPECT_EQ(*y, x);
      ASSERT_FALSE(remove_storage(*ref));
    }
  }
}

TEST(CopyHash, ACorruptedLargeSegmentIsRefusedOnLoad) {
  auto opts = shm_options();
  auto x = sized_snapshot(1 << 20, 4);
  // Twice: the second store and its loads take the mapped (fused) paths.
  auto first = store(opts, x);
  ASSERT_TRUE(first);
  ASSERT_TRUE(load_snapshot(*first));
  ASSERT_FALSE(remove_storage(*first));
  auto ref = store(opts, x);
  ASSERT_TRUE(ref);
  ASSERT_TRUE(load_snapshot(*ref)); // maps and keeps a view
  for (std::size_t at : {ref->size / 2, ref->size - 1}) {
    int fd = ::shm_open(ref->path.c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    auto* p = static_cast<std::uint8_t*>(
      ::mmap(nullptr, ref->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
    ASSERT_NE(p, MAP_FAILED);
    p[at] ^= 0x01;
    auto y = load_snapshot(*ref);
    ASSERT_FALSE(y) << "a flipped bit at " << at << " was loaded";
    EXPECT_TRUE(is(y.error(), errc::malformed_input));
    p[at] ^= 0x01; // restored: loads again
    EXPECT_TRUE(load_snapshot(*ref));
    ::munmap(p, ref->size);
  }
  ASSERT_FALSE(remove_storage(*ref));
}

} // namespace copy_hash_test
