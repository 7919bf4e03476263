// The snapshot header a data-plane transfer carries (net/data_meta.hpp):
// it round-trips, and hostile bytes are an error without a crash or an
// allocation larger than the input.

#include "dice/core/errc.hpp"
#include "net/data_meta.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

namespace {

using dice::net::decode_meta;
using dice::net::encode_meta;

dice::model_snapshot header() {
  dice::model_snapshot x;
  x.sender = 3;
  x.incarnation = 0x1234567890abcdefULL;
  x.version = -7;
  x.send_time_ns = 1'700'000'000'000'000'000;
  x.index.push_back({"fc1.weight", dice::dtype::float32, {64, 4}, 0, 1024});
  x.index.push_back({"fc1.bias", dice::dtype::bfloat16, {64}, 1024, 128});
  x.index.push_back({"steps", dice::dtype::int64, {}, 1152, 8});
  return x;
}

// Big-endian 4 bytes.
std::string be32(std::uint32_t x) {
  std::string s(4, '\0');
  for (int i = 3; i >= 0; --i, x >>= 8)
    s[static_cast<std::size_t>(i)] = static_cast<char>(x & 0xff);
  return s;
}

TEST(DataMeta, RoundTripsTopicSenderAndTheWholeIndex) {
  auto x = header();
  auto bytes = encode_meta("model", 3, x);
  auto y = decode_meta(bytes.data(), bytes.size());
  ASSERT_TRUE(y) << dice::render(y.error());
  EXPECT_EQ(y->topic, "model");
  EXPECT_EQ(y->sender, 3u);
  EXPECT_EQ(y->header, x); // data empty on both sides
  auto empty = encode_meta("", 0, dice::model_snapshot{});
  auto z = decode_meta(empty.data(), empty.size());
  ASSERT_TRUE(z);
  EXPECT_TRUE(z->topic.empty());
  EXPECT_TRUE(z->header.index.empty());
}

TEST(DataMeta, EveryCutAndEveryExtraByteIsAnError) {
  auto bytes = encode_meta("model", 3, header());
  for (std::size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(decode_meta(bytes.data(), n)) << "cut at " << n;
  auto longer = bytes + 'x';
  EXPECT_FALSE(decode_meta(longer.data(), longer.size()));
}

TEST(DataMeta, HugeCountsAreRefusedBeforeAnythingIsAllocated) {
  // A topic, an entry count and a rank that claim 4 GiB each, in a few
  // bytes: each is checked against the bytes left first.
  auto topic = be32(0xffffffffu) + std::string(64, '\0');
  EXPECT_FALSE(decode_meta(topic.data(), topic.size()));
  auto fixed = be32(1) + "t" + std::string(4 + 4 + 8 + 8 + 8, '\0');
  auto entries = fixed + be32(0xffffffffu) + std::string(64, '\0');
  EXPECT_FALSE(decode_meta(entries.data(), entries.size()));
  auto rank = fixed + be32(1) + be32(1) + "w" + std::string(1, '\0')
    + be32(0xffffffffu) + std::string(64, '\0');
  EXPECT_FALSE(decode_meta(rank.data(), rank.size()));
  auto unknown = fixed + be32(1) + be32(1) + "w" + std::string(1, '\x7f')
    + be32(0) + std::string(16, '\0');
  auto u = decode_meta(unknown.data(), unknown.size());
  ASSERT_FALSE(u);
  EXPECT_NE(dice::render(u.error()).find("dtype"), std::string::npos);
  std::string too_long(dice::net::max_data_meta_bytes + 1, '\0');
  EXPECT_FALSE(decode_meta(too_long.data(), too_long.size()));
}

TEST(DataMeta, RandomFlipsNeverCrash) {
  auto bytes = encode_meta("model", 3, header());
  std::mt19937 gen{42};
  for (int i = 0; i < 20000; ++i) {
    auto x = bytes;
    auto flips = 1 + gen() % 4;
    for (std::uint32_t k = 0; k < flips; ++k)
      x[gen() % x.size()] = static_cast<char>(gen());
    auto y = decode_meta(x.data(), x.size());
    if (y) { // what decodes has every length inside the input
      EXPECT_LE(y->topic.size(), x.size());
    }
  }
}

} // namespace
