// A user's own item type through dice::pack / dice::unpack, and the refusal
// of corrupt, truncated or inconsistent payloads. LibTorch-free.

#include "dice/core/errc.hpp"
#include "dice/messages/payload.hpp"

#include <boost/serialization/collection_size_type.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>
#include <vector>

// Every allocation of this test binary goes through here (replacing the
// global operator new is allowed): the attack test below asserts on the
// largest one.
namespace {
std::atomic<std::size_t> largest_new{0};
} // namespace

void* operator new(std::size_t n) {
  auto cur = largest_new.load();
  while (n > cur && !largest_new.compare_exchange_weak(cur, n)) {
    // retry
  }
  if (auto p = std::malloc(n == 0 ? 1 : n))
    return p;
  throw std::bad_alloc{};
}

// The replacement operator new above takes its memory from malloc.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept {
  std::free(p);
}

void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
#pragma GCC diagnostic pop

namespace user {

/// What a user of dice would write: a plain struct and a Boost serialize().
struct transition {
  std::vector<float> obs;
  int action = 0;
  float reward = 0;
  bool done = false;
};

bool operator==(const transition& x, const transition& y) {
  return x.obs == y.obs && x.action == y.action && x.reward == y.reward
    && x.done == y.done;
}

} // namespace user

namespace boost::serialization {

template <class Archive>
void serialize(Archive& ar, user::transition& x, const unsigned int) {
  ar& x.obs& x.action& x.reward& x.done;
}

} // namespace boost::serialization

namespace user {

/// An item that takes far more memory (4 KiB) than its encoding (1 byte).
struct wide {
  bool flag = false;
  double values[511] = {};
};

} // namespace user

namespace boost::serialization {

template <class Archive>
void serialize(Archive& ar, user::wide& x, const unsigned int) {
  ar& x.flag;
}

} // namespace boost::serialization

namespace {

using dice::payload;
using user::transition;

std::vector<transition> make_items(int n, int first_action) {
  std::vector<transition> result;
  for (int i = 0; i < n; ++i) {
    auto a = first_action + i;
    result.push_back(transition{{0.5f * a, -1.25f, 3.0f + a, 1e-3f * a},
                                a,
                                a % 2 == 0 ? 1.0f : -0.5f,
                                a % 3 == 0});
  }
  return result;
}

/// What `out` holds before a failed unpack; it must hold exactly this after.
const std::vector<transition> sentinel = make_items(1, 1000);

payload with_bytes(const payload& x, std::vector<std::uint8_t> bytes) {
  auto result = x;
  result.bytes = dice::shared_bytes{std::move(bytes)};
  return result;
}

std::vector<std::uint8_t> bytes_of(const payload& x) {
  return {x.bytes.data(), x.bytes.data() + x.bytes.size()};
}

void expect_malformed(const payload& x, const char* what) {
  auto out = sentinel;
  auto err = dice::unpack_into(x, out);
  EXPECT_TRUE(dice::is(err, dice::errc::malformed_input))
    << what << ": " << dice::render(err);
  EXPECT_EQ(out, sentinel) << what << ": output changed";
  auto all = dice::unpack<transition>(x);
  EXPECT_FALSE(all) << what;
}

TEST(Payload, SinglePayloadRoundTrips) {
  auto items = make_items(3, 0);
  auto p = dice::pack(items, 4, 9);
  EXPECT_EQ(p.count, 3u);
  EXPECT_EQ(p.origin, 4u);
  EXPECT_EQ(p.model_version, 9);
  EXPECT_FALSE(p.bytes.empty());
  auto back = dice::unpack<transition>(p);
  ASSERT_TRUE(back) << dice::render(back.error());
  EXPECT_EQ(*back, items);
}

TEST(Payload, EmptyListRoundTrips) {
  auto p = dice::pack(std::vector<transition>{});
  EXPECT_EQ(p.count, 0u);
  EXPECT_EQ(p.model_version, -1);
  auto back = dice::unpack<transition>(p);
  ASSERT_TRUE(back) << dice::render(back.error());
  EXPECT_TRUE(back->empty());
}

TEST(Payload, ItemWithEmptyVectorRoundTrips) {
  std::vector<transition> items{transition{}, transition{{}, 7, 0.5f, true}};
  auto back = dice::unpack<transition>(dice::pack(items));
  ASSERT_TRUE(back) << dice::render(back.error());
  EXPECT_EQ(*back, items);
}

TEST(Payload, ListOfPayloadsConcatenatesInOrder) {
  auto a = make_items(2, 0);
  auto b = make_items(0, 10);
  auto c = make_items(3, 20);
  std::vector<payload> ps{dice::pack(a, 1), dice::pack(b, 2), dice::pack(c, 3)};
  EXPECT_EQ(dice::item_count(ps), 5u);
  auto back = dice::unpack<transition>(ps);
  ASSERT_TRUE(back) << dice::render(back.error());
  auto expected = a;
  expected.insert(expected.end(), c.begin(), c.end());
  EXPECT_EQ(*back, expected);
  // unpack_into appends after what is already there.
  auto out = sentinel;
  ASSERT_FALSE(dice::unpack_into(ps[2], out));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], sentinel[0]);
  EXPECT_EQ(out[3], c[2]);
}

TEST(Payload, ListWithOneBadPayloadFails) {
  std::vector<payload> ps{dice::pack(make_items(2, 0)),
                          with_bytes(dice::pack(make_items(1, 5)), {1, 2, 3})};
  auto back = dice::unpack<transition>(ps);
  ASSERT_FALSE(back);
  EXPECT_TRUE(dice::is(back.error(), dice::errc::malformed_input));
}

TEST(Payload, EmptyBytesAreMalformed) {
  expect_malformed(payload{}, "default payload");
  expect_malformed(payload{dice::shared_bytes{}, 0, 0, -1}, "zero count");
}

TEST(Payload, CorruptBytesAreMalformed) {
  auto p = dice::pack(make_items(2, 0));
  auto bytes = bytes_of(p);
  // The archive starts with a signature; garble it.
  auto bad_sig = bytes;
  for (std::size_t i = 0; i < 12 && i < bad_sig.size(); ++i)
    bad_sig[i] ^= 0x5A;
  expect_malformed(with_bytes(p, bad_sig), "garbled signature");
  std::vector<std::uint8_t> noise(bytes.size());
  for (std::size_t i = 0; i < noise.size(); ++i)
    noise[i] = static_cast<std::uint8_t>(i * 37 + 11);
  expect_malformed(with_bytes(p, noise), "noise");
}

TEST(Payload, EveryTruncationIsMalformed) {
  auto p = dice::pack(make_items(3, 0));
  auto bytes = bytes_of(p);
  ASSERT_GT(bytes.size(), 8u);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto cut = with_bytes(p, {bytes.begin(), bytes.begin() + n});
    auto out = sentinel;
    auto err = dice::unpack_into(cut, out);
    ASSERT_TRUE(dice::is(err, dice::errc::malformed_input))
      << "prefix of " << n << " bytes: " << dice::render(err);
    ASSERT_EQ(out, sentinel) << "prefix of " << n << " bytes";
  }
}

TEST(Payload, CountMismatchIsMalformed) {
  auto p = dice::pack(make_items(3, 0));
  auto more = p;
  more.count = 4;
  expect_malformed(more, "claims more items");
  auto fewer = p;
  fewer.count = 2;
  expect_malformed(fewer, "claims fewer items");
}

/// An archive of `items` whose vector count is replaced by `count` (found
/// as the first byte where archives of n and n + 1 items differ: Boost
/// writes class information before it).
template <class T>
std::vector<std::uint8_t> with_count(const std::vector<T>& items,
                                     std::uint64_t count) {
  auto more = items;
  more.resize(items.size() + 1);
  auto buf = bytes_of(dice::pack(items));
  auto other = bytes_of(dice::pack(more));
  std::size_t pos = 0;
  while (pos < buf.size() && buf[pos] == other[pos])
    ++pos;
  EXPECT_EQ(buf[pos], items.size());
  std::memcpy(&buf[pos], &count, sizeof(count));
  return buf;
}

TEST(Payload, HostileItemCountIsMalformed) {
  // An archive of a vector claiming 2^60 items and holding two: decoding
  // must fail with an error, not crash or exhaust memory.
  auto buf = with_count(make_items(2, 0), std::uint64_t{1} << 60);
  largest_new = 0;
  expect_malformed(payload{dice::shared_bytes{std::move(buf)}, 1, 0, -1},
                   "2^60 items");
  EXPECT_LT(largest_new.load(), std::size_t{1} << 20);
}

// A vector claiming one 4 KiB item per byte of a 64 KiB payload: the count
// passes a check in elements (it is not more than the bytes left), but
// reserving for it took 256 MiB (and zeroed it) before the first item
// failed to decode. What is reserved is limited in bytes now.
TEST(Payload, ElementSizeCountsInTheLimit) {
  constexpr std::size_t claimed = 64 * 1024;
  auto buf = with_count(std::vector<user::wide>(2), claimed);
  // Enough bytes for the count to pass a check in elements, none of them an
  // item (0xFF is no bool: the first item's header is refused).
  buf.resize(buf.size() + claimed, 0xFF);
  payload hostile{dice::shared_bytes{std::move(buf)}, claimed, 0, -1};
  largest_new = 0;
  auto back = dice::unpack<user::wide>(hostile);
  auto largest = largest_new.load();
  ASSERT_FALSE(back);
  EXPECT_TRUE(dice::is(back.error(), dice::errc::malformed_input));
  EXPECT_LE(largest, 16 * hostile.bytes.size())
    << "the decoder allocated " << largest << " bytes at once for a "
    << hostile.bytes.size() << "-byte payload";
  // An honest vector of the same type still decodes.
  std::vector<user::wide> items(300);
  items[100].flag = true;
  auto ok = dice::unpack<user::wide>(dice::pack(items));
  ASSERT_TRUE(ok) << dice::render(ok.error());
  ASSERT_EQ(ok->size(), 300u);
  EXPECT_TRUE((*ok)[100].flag);
  EXPECT_FALSE((*ok)[99].flag);
}

// Raw elements (floats) must be backed by their bytes: a count that fits
// in elements but not in bytes reserves nothing.
TEST(Payload, RawElementsNeedTheirBytes) {
  std::vector<transition> items(1);
  items[0].obs.assign(1024, 1.0f);
  auto good = dice::pack(items);
  auto bytes = bytes_of(good);
  // Keep the claim (1024 floats = 4 KiB) but only 2 KiB of them.
  bytes.resize(bytes.size() - 2048 - 9);
  largest_new = 0;
  expect_malformed(with_bytes(good, bytes), "truncated floats");
  EXPECT_LT(largest_new.load(), std::size_t{4096});
}

} // namespace
