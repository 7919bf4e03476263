// dice::value and its codec: every kind round trips, arrays are read in
// place, and hostile bytes (bad magic, every truncation, lying counts and
// shapes, deep nesting, invalid UTF-8, trailing bytes) are refused with the
// offset and a trust counter, without large allocations. LibTorch-free.

#include "dice/core/errc.hpp"
#include "dice/messages/payload.hpp"
#include "dice/messages/value.hpp"
#include "dice/security/trust.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

// Every plain allocation of this test binary goes through here (replacing
// the global operator new is allowed): tests assert on the largest one.
namespace {
std::atomic<std::size_t> largest_new{0};
// When set, the next allocation is one byte off malloc's alignment (for a
// received buffer that is not aligned); `misaligned` remembers it.
std::atomic<bool> misalign_next{false};
std::atomic<void*> misaligned{nullptr};
} // namespace

// noinline: GCC would otherwise see free() on operator new's pointer and warn.
[[gnu::noinline]] void* operator new(std::size_t n) {
  auto prev = largest_new.load(std::memory_order_relaxed);
  while (
    n > prev
    && !largest_new.compare_exchange_weak(prev, n, std::memory_order_relaxed)) {
    // retry
  }
  if (misalign_next.exchange(false)) {
    auto p = static_cast<char*>(std::malloc(n + 1));
    if (p == nullptr)
      throw std::bad_alloc{};
    misaligned = p + 1;
    return p + 1;
  }
  if (auto p = std::malloc(n == 0 ? 1 : n))
    return p;
  throw std::bad_alloc{};
}

[[gnu::noinline]] void operator delete(void* p) noexcept {
  void* expected = p;
  if (p != nullptr && misaligned.compare_exchange_strong(expected, nullptr))
    p = static_cast<char*>(p) - 1;
  std::free(p);
}

[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept {
  operator delete(p);
}

namespace {

using dice::array_flavor;
using dice::dtype;
using dice::errc;
using dice::trust_event;
using dice::value;
using dice::value_array;
using dice::value_kind;

constexpr std::uint64_t header = 4; // magic and version

// An array owning a copy of `n` bytes at `data`.
value array(dtype type, std::vector<std::int64_t> shape, const void* data,
            std::size_t n, array_flavor flavor = array_flavor::numpy) {
  auto buf = std::make_shared<std::vector<std::uint8_t>>(
    static_cast<const std::uint8_t*>(data),
    static_cast<const std::uint8_t*>(data) + n);
  value_array a;
  a.type = type;
  a.shape = std::move(shape);
  a.data = buf->empty() ? nullptr : buf->data();
  a.nbytes = n;
  a.owner = buf;
  a.flavor = flavor;
  return value::of(std::move(a));
}

value floats(std::vector<std::int64_t> shape, std::vector<float> xs) {
  return array(dtype::float32, std::move(shape), xs.data(), 4 * xs.size());
}

value i64(std::int64_t x) {
  return value::of(x);
}

// A bit of everything, nested three levels.
value sample() {
  std::int64_t seven = 7;
  std::uint16_t bf16 = 0x3f80;
  auto info = value::dict(
    {"name", "raw", "none", "pair", "empty"},
    {value::of("héllo ☃ 🎲"), value::of_bytes(std::string{"\0\xff", 2}),
     value::none(), value::tuple({i64(1), value::of(2.5)}),
     value::list({value::list({}), value::dict({}, {}), value::tuple({})})});
  return value::dict(
    {"obs", "action", "reward", "done", "info", "step", "t"},
    {floats({2, 3}, {1, 2, 3, 4, 5, 6}), i64(-3), value::of(1.5),
     value::of(true), std::move(info),
     array(dtype::int64, {}, &seven, 8, array_flavor::numpy_scalar),
     array(dtype::bfloat16, {1}, &bf16, 2, array_flavor::tensor)});
}

dice::shared_bytes encode(const value& x) {
  auto bytes = dice::encode_value(x);
  EXPECT_TRUE(bytes) << dice::render(bytes.error());
  return bytes ? *bytes : dice::shared_bytes{};
}

std::vector<std::uint8_t> bytes_of(const dice::shared_bytes& x) {
  return {x.data(), x.data() + x.size()};
}

// Encodes, checks the size and the decoder's answer, decodes.
value round_trip(const value& x) {
  auto bytes = encode(x);
  EXPECT_EQ(bytes.size(), dice::encoded_size(x));
  auto y = dice::decode_value(bytes);
  EXPECT_TRUE(y) << dice::render(y.error());
  if (!y)
    return {};
  // One encoding per value: the decoded value encodes to the same bytes.
  EXPECT_EQ(encode(*y), bytes);
  return *y;
}

// Hand-built encodings, for bytes the encoder would never write.
struct wire {
  std::vector<std::uint8_t> b{'d', 'v', 'l', 1};
  wire& u8(std::uint8_t x) {
    b.push_back(x);
    return *this;
  }
  wire& u64(std::uint64_t x) {
    for (int i = 0; i < 8; ++i)
      b.push_back(static_cast<std::uint8_t>(x >> (8 * i)));
    return *this;
  }
  wire& text(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  wire& pad() {
    while (b.size() % 64 != 0)
      b.push_back(0);
    return *this;
  }
  dice::shared_bytes bytes() const {
    return dice::shared_bytes{b};
  }
};

// Decodes bytes that must be refused: returns the error's text and checks
// that the rejection counted once.
std::string rejected(const dice::shared_bytes& bytes,
                     const dice::value_limits& limits = {}) {
  auto before = dice::counter(trust_event::payload_rejected);
  auto res = dice::decode_value(bytes, limits);
  if (res) {
    ADD_FAILURE() << "decoded " << bytes.size() << " hostile bytes";
    return {};
  }
  EXPECT_TRUE(dice::is(res.error(), errc::malformed_input))
    << dice::render(res.error());
  EXPECT_EQ(dice::counter(trust_event::payload_rejected), before + 1);
  return dice::render(res.error());
}

std::string rejected(const wire& w, const dice::value_limits& limits = {}) {
  return rejected(w.bytes(), limits);
}

// Encodes a value that must be refused; returns the error.
caf::error refused(const value& x) {
  auto res = dice::encode_value(x);
  if (res) {
    ADD_FAILURE() << "encoded an inconsistent value";
    return {};
  }
  EXPECT_EQ(dice::encoded_size(x), 0u);
  return res.error();
}

TEST(Value, RoundTripsEveryKindNested) {
  auto x = sample();
  auto y = round_trip(x);
  EXPECT_EQ(y, x);
  EXPECT_EQ(y.kind, value_kind::dict);
  EXPECT_EQ(y.keys, x.keys);
  ASSERT_NE(y.find("info"), nullptr);
  auto& info = *y.find("info");
  EXPECT_EQ(info.find("name")->text, "héllo ☃ 🎲");
  EXPECT_EQ(info.find("raw")->kind, value_kind::bytes);
  EXPECT_EQ(info.find("raw")->text, std::string("\0\xff", 2));
  EXPECT_EQ(info.find("none")->kind, value_kind::none);
  EXPECT_EQ(info.find("pair")->kind, value_kind::tuple);
  EXPECT_EQ(y.find("action")->integer, -3);
  EXPECT_TRUE(y.find("done")->boolean);
  EXPECT_EQ(y.find("step")->array.flavor, array_flavor::numpy_scalar);
  EXPECT_EQ(y.find("t")->array.flavor, array_flavor::tensor);
  auto& obs = y.find("obs")->array;
  EXPECT_EQ(obs.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(reinterpret_cast<const float*>(obs.data)[5], 6.0f);
}

TEST(Value, RoundTripsEmptyContainersAndScalars) {
  for (auto& x :
       {value::none(), value::of(false), value::of(true), value::list({}),
        value::tuple({}), value::dict({}, {}), value::of(""),
        value::of_bytes(""), value::list({value::list({value::tuple({})})})})
    EXPECT_EQ(round_trip(x), x) << to_string(x.kind);
  // The smallest encoding: magic and one tag.
  EXPECT_EQ(dice::encoded_size(value::none()), header + 1);
}

TEST(Value, RoundTripsExtremeNumbersBitwise) {
  auto lo = std::numeric_limits<std::int64_t>::min();
  auto hi = std::numeric_limits<std::int64_t>::max();
  for (auto x : {lo, hi, std::int64_t{-1}, std::int64_t{0}})
    EXPECT_EQ(round_trip(i64(x)).integer, x);
  auto nan = std::numeric_limits<double>::quiet_NaN();
  auto inf = std::numeric_limits<double>::infinity();
  for (auto x : {nan, -nan, inf, -inf, -0.0, 1e-310, 0.1}) {
    auto y = round_trip(value::of(x));
    EXPECT_EQ(std::memcmp(&y.real, &x, 8), 0) << x;
    EXPECT_EQ(y, value::of(x)); // bitwise: a NaN equals itself
  }
}

TEST(Value, RoundTripsEveryDtypeAndShape) {
  std::vector<std::uint8_t> raw(64);
  for (std::size_t i = 0; i < raw.size(); ++i)
    raw[i] = static_cast<std::uint8_t>(i * 7 + 1);
  for (int t = 0; t <= static_cast<int>(dtype::boolean); ++t) {
    auto type = static_cast<dtype>(t);
    auto size = dice::element_size(type);
    ASSERT_GT(size, 0u);
    std::vector<std::vector<std::int64_t>> shapes{{},        {0},    {3},
                                                  {2, 0, 5}, {2, 3}, {1, 1, 2}};
    for (auto& shape : shapes) {
      std::size_t n = size;
      for (auto d : shape)
        n *= static_cast<std::size_t>(d);
      for (auto flavor : {array_flavor::numpy, array_flavor::tensor}) {
        auto x = array(type, shape, raw.data(), n, flavor);
        auto y = round_trip(x);
        EXPECT_EQ(y, x) << to_string(type) << " ndim " << shape.size();
        EXPECT_EQ(y.array.type, type);
        EXPECT_EQ(y.array.nbytes, n);
      }
    }
    auto scalar = array(type, {}, raw.data(), size, array_flavor::numpy_scalar);
    EXPECT_EQ(round_trip(scalar), scalar) << to_string(type);
  }
}

TEST(Value, RoundTripsUnicodeStringsAndKeys) {
  std::string s = "ascii, é, ß, 日本語, 🎲, \x7f";
  auto x = value::dict({s, "", "ключ"},
                       {value::of(s), value::of(""), value::of("\u00A0")});
  EXPECT_EQ(round_trip(x), x);
}

TEST(Value, DecodedArraysPointIntoTheBufferAndKeepItAlive) {
  auto x = value::list({floats({3}, {1, 2, 3}), value::of("pad me"),
                        floats({2, 2}, {4, 5, 6, 7}),
                        array(dtype::int8, {3}, "abc", 3)});
  auto bytes = encode(x);
  auto y = dice::decode_value(bytes);
  ASSERT_TRUE(y) << dice::render(y.error());
  for (std::size_t i : {0, 2, 3}) {
    auto& a = (*y).items[i].array;
    EXPECT_GE(a.data, bytes.data());
    EXPECT_LE(a.data + a.nbytes, bytes.data() + bytes.size());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data) % 64, 0u);
    EXPECT_NE(a.owner, nullptr);
  }
  auto copy = *y;
  auto first = (*y).items[0].array.data;
  bytes = dice::shared_bytes{};
  y = value::none();
  // `copy`'s arrays hold the only handle on the received bytes now.
  EXPECT_EQ(copy.items[0].array.data, first);
  EXPECT_EQ(reinterpret_cast<const float*>(copy.items[2].array.data)[3], 7.0f);
  EXPECT_EQ(copy, x);
}

TEST(Value, MisalignedBufferGivesArraysTheirOwnCopy) {
  auto x = value::list({floats({2}, {1, 2}), array(dtype::int8, {1}, "z", 1)});
  auto encoded = bytes_of(encode(x));
  misalign_next = true;
  std::vector<std::uint8_t> odd(encoded.begin(), encoded.end());
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(odd.data()) % 2, 1u);
  dice::shared_bytes bytes{std::move(odd)};
  auto y = dice::decode_value(bytes);
  ASSERT_TRUE(y) << dice::render(y.error());
  EXPECT_EQ(*y, x);
  auto& copied = y->items[0].array;
  EXPECT_TRUE(copied.data < bytes.data()
              || copied.data >= bytes.data() + bytes.size());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(copied.data) % 4, 0u);
  EXPECT_NE(copied.owner, nullptr);
  // A byte is aligned anywhere: viewed in place.
  auto& viewed = y->items[1].array;
  EXPECT_GE(viewed.data, bytes.data());
  EXPECT_LT(viewed.data, bytes.data() + bytes.size());
  bytes = dice::shared_bytes{};
  auto z = *y;
  y = value::none();
  EXPECT_EQ(z, x);
}

TEST(Value, LargeArrayIsOneBufferAndDecodesWithoutCopy) {
  constexpr std::size_t n = 25'000'000; // 100 MB of float32
  std::vector<float> xs(n);
  xs.front() = 1.5f;
  xs[n / 2] = -2.0f;
  xs.back() = 3.25f;
  value_array a;
  a.type = dtype::float32;
  a.shape = {5000, 5000};
  a.data = reinterpret_cast<const std::uint8_t*>(xs.data());
  a.nbytes = 4 * n;
  auto x = value::of(std::move(a));
  largest_new = 0;
  auto bytes = encode(x);
  // Magic, tag, header, padding to 64, then the data: one buffer of
  // exactly that size (a large writable_bytes is mapped, not `new`ed).
  EXPECT_EQ(bytes.size(), 64 + 4 * n);
  EXPECT_EQ(dice::encoded_size(x), bytes.size());
  auto y = dice::decode_value(bytes);
  ASSERT_TRUE(y) << dice::render(y.error());
  EXPECT_LT(largest_new.load(), std::size_t{1} << 20)
    << "an intermediate copy of the array";
  EXPECT_EQ(y->array.data, bytes.data() + 64); // in place
  EXPECT_EQ(std::memcmp(y->array.data, xs.data(), 4 * n), 0);
}

TEST(Value, RefusesBadMagicAndVersion) {
  auto boost = dice::pack(std::vector<int>{1, 2, 3});
  EXPECT_NE(rejected(boost.bytes).find("bad magic at offset 0"),
            std::string::npos);
  EXPECT_NE(rejected(dice::shared_bytes{}).find("bad magic"),
            std::string::npos);
  EXPECT_NE(rejected(dice::shared_bytes{{'d', 'v', 'l'}}).find("bad magic"),
            std::string::npos);
  wire v2;
  v2.b[3] = 2;
  v2.u8('N');
  EXPECT_NE(rejected(v2).find("unknown version 2 at offset 3"),
            std::string::npos);
}

TEST(Value, RefusesEveryTruncation) {
  auto bytes = bytes_of(encode(sample()));
  ASSERT_GT(bytes.size(), 200u);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    std::vector<std::uint8_t> prefix(bytes.begin(), bytes.begin() + n);
    rejected(dice::shared_bytes{std::move(prefix)});
  }
}

TEST(Value, RefusesHugeCountsFastWithoutAllocating) {
  auto huge = std::uint64_t{1} << 60;
  auto t0 = std::chrono::steady_clock::now();
  largest_new = 0;
  for (std::uint8_t tag : {'l', 't', 'd'})
    EXPECT_NE(
      rejected(wire{}.u8(tag).u64(huge).u8('N'))
        .find("1152921504606846976 items claimed, 1 bytes left at offset 4"),
      std::string::npos);
  // A dict needs 9 bytes an item: 2 claimed in 17 bytes is a lie already.
  EXPECT_NE(
    rejected(wire{}.u8('d').u64(2).u64(0).u64(0).u8('N')).find("items claimed"),
    std::string::npos);
  for (std::uint8_t tag : {'s', 'b'})
    EXPECT_NE(rejected(wire{}.u8(tag).u64(huge).u8('x')).find("bytes claimed"),
              std::string::npos);
  auto a = wire{}.u8('a').u8(static_cast<std::uint8_t>(dtype::uint8));
  a.u8(0).u8(1).u64(huge).u64(huge).pad().u8(1);
  EXPECT_NE(rejected(a).find("bytes of array data claimed"), std::string::npos);
  EXPECT_LT(largest_new.load(), std::size_t{1} << 16);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

// A float32 array header with `dims` and `nbytes`, then padding and data.
wire float_array(std::vector<std::int64_t> dims, std::uint64_t nbytes) {
  wire w;
  w.u8('a').u8(0).u8(0).u8(static_cast<std::uint8_t>(dims.size()));
  for (auto d : dims)
    w.u64(static_cast<std::uint64_t>(d));
  w.u64(nbytes).pad();
  w.b.resize(w.b.size() + static_cast<std::size_t>(nbytes));
  return w;
}

TEST(Value, RefusesInconsistentArrays) {
  ASSERT_TRUE(dice::decode_value(float_array({2, 3}, 24).bytes()));
  EXPECT_NE(rejected(float_array({2, 3}, 20))
              .find("array of 20 bytes does not match its shape (24) at "
                    "offset 24"),
            std::string::npos);
  EXPECT_NE(rejected(float_array({3}, 16)).find("does not match"),
            std::string::npos);
  EXPECT_NE(rejected(float_array({-1}, 0)).find("negative or overflowing"),
            std::string::npos);
  // 2^31 * 2^31 * 4 bytes wraps to 0 in 64 bits.
  auto big = std::int64_t{1} << 31;
  EXPECT_NE(rejected(float_array({big, big, 4}, 0))
              .find("negative or overflowing shape at offset 8"),
            std::string::npos);
  EXPECT_NE(rejected(float_array({big, big, big, 0}, 0)).find("overflowing"),
            std::string::npos);
  auto nonzero = float_array({1}, 4);
  nonzero.b[30] = 1; // inside the padding
  EXPECT_NE(rejected(nonzero).find("nonzero padding"), std::string::npos);
  auto dtype10 = float_array({1}, 4);
  dtype10.b[5] = 10;
  EXPECT_NE(rejected(dtype10).find("unknown dtype 10 at offset 5"),
            std::string::npos);
  auto flavor3 = float_array({1}, 4);
  flavor3.b[6] = 3;
  EXPECT_NE(rejected(flavor3).find("unknown array flavor 3 at offset 6"),
            std::string::npos);
  auto scalar = float_array({1}, 4);
  scalar.b[6] = static_cast<std::uint8_t>(array_flavor::numpy_scalar);
  EXPECT_NE(rejected(scalar).find("numpy scalar with dimensions"),
            std::string::npos);
  EXPECT_NE(rejected(float_array(std::vector<std::int64_t>(33, 1), 4))
              .find("33 dimensions"),
            std::string::npos);
  dice::value_limits two_dims;
  two_dims.max_ndim = 2;
  EXPECT_NE(rejected(float_array({1, 1, 1}, 4), two_dims).find("3 dimensions"),
            std::string::npos);
}

// `levels` lists, each holding the next; the innermost is empty.
wire nested(std::size_t levels) {
  wire w;
  for (std::size_t i = 0; i + 1 < levels; ++i)
    w.u8('l').u64(1);
  w.u8('l').u64(0);
  return w;
}

TEST(Value, RefusesNestingDeeperThanTheLimit) {
  EXPECT_TRUE(dice::decode_value(nested(64).bytes()));
  EXPECT_NE(rejected(nested(65))
              .find("nested deeper than 64 at offset "
                    + std::to_string(header + 64 * 9)),
            std::string::npos);
  dice::value_limits three;
  three.max_depth = 3;
  EXPECT_TRUE(dice::decode_value(nested(3).bytes(), three));
  rejected(nested(4), three);
  // A million levels: refused at level 65, the C stack untouched.
  rejected(nested(1'000'000));
  // The decoder itself keeps no C stack per level: beyond 64 on request.
  dice::value_limits deep;
  deep.max_depth = 2000;
  auto y = dice::decode_value(nested(2000).bytes(), deep);
  ASSERT_TRUE(y) << dice::render(y.error());
  EXPECT_EQ(y->items.size(), 1u);
}

TEST(Value, RefusesInvalidUtf8WithItsOffset) {
  // After "ab": an overlong NUL, a surrogate, beyond U+10FFFF, a cut
  // sequence, a lone continuation byte, 0xFF.
  for (std::string bad : {"\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                          "\xE2\x82", "\x80", "\xFF", "\xF0\x9F\x8E"}) {
    EXPECT_NE(rejected(wire{}.u8('s').text("ab" + bad))
                .find("invalid UTF-8 at offset 15"),
              std::string::npos);
    EXPECT_NE(rejected(wire{}.u8('d').u64(1).text("ab" + bad + "c").u8('N'))
                .find("invalid UTF-8 at offset 23"),
              std::string::npos);
    // Bytes are not text: the same bytes pass.
    EXPECT_TRUE(dice::decode_value(wire{}.u8('b').text(bad).bytes()));
  }
}

TEST(Value, RefusesTrailingBytesAndUnknownTags) {
  EXPECT_TRUE(dice::decode_value(wire{}.u8('N').bytes()));
  EXPECT_NE(rejected(wire{}.u8('N').u8('N')).find("trailing bytes at offset 5"),
            std::string::npos);
  EXPECT_NE(rejected(wire{}.u8('N').u8(0)).find("trailing"), std::string::npos);
  for (int tag : {0, 1, int{'x'}, int{'B'}, int{'n'}, 0xff})
    EXPECT_NE(rejected(wire{}.u8(tag))
                .find("unknown tag " + std::to_string(tag) + " at offset 4"),
              std::string::npos);
  // Bools are two tags, nothing else reads as one.
  EXPECT_NE(rejected(wire{}.u8('l').u64(1).u8(2)).find("unknown tag 2"),
            std::string::npos);
}

TEST(Value, RefusesDuplicateKeysAndOversizeInput) {
  EXPECT_NE(rejected(wire{}.u8('d').u64(2).text("a").u8('N').text("a").u8('T'))
              .find("duplicate dict key at offset 4"),
            std::string::npos);
  std::vector<std::string> keys;
  std::vector<value> items;
  for (int i = 0; i < 40; ++i) { // past the small-dict shortcut
    keys.push_back("k" + std::to_string(i % 39));
    items.push_back(value::none());
  }
  wire many;
  many.u8('d').u64(keys.size());
  for (auto& k : keys)
    many.text(k).u8('N');
  rejected(many);
  EXPECT_TRUE(
    dice::is(refused(value::dict(keys, items)), errc::malformed_input));
  dice::value_limits small;
  small.max_bytes = 13;
  auto thirteen = wire{}.u8('i').u64(5);
  EXPECT_TRUE(dice::decode_value(thirteen.bytes(), small));
  EXPECT_NE(rejected(thirteen.u8('N'), small).find("14 bytes, more than 13"),
            std::string::npos);
}

TEST(Value, PackAndUnpackValuesRoundTrip) {
  std::vector<value> xs{sample(), i64(4), value::of("x")};
  auto p = dice::pack_values(xs, 7, 3);
  ASSERT_TRUE(p) << dice::render(p.error());
  EXPECT_EQ(p->count, 3u);
  EXPECT_EQ(p->origin, 7u);
  EXPECT_EQ(p->model_version, 3);
  EXPECT_EQ(p->bytes, encode(value::list(xs)));
  std::vector<value> out{value::of("already here")};
  ASSERT_FALSE(dice::unpack_values_into(*p, out));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[1], xs[0]);
  EXPECT_EQ(out[3], xs[2]);
  auto q = dice::pack_values({value::none()});
  auto empty = dice::pack_values({});
  ASSERT_TRUE(q && empty);
  auto all = dice::unpack_values({*p, *empty, *q});
  ASSERT_TRUE(all) << dice::render(all.error());
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ(all->back(), value::none());
}

TEST(Value, UnpackRefusesCountMismatchAndLeavesOutUnchanged) {
  auto p = dice::pack_values({i64(1), i64(2)});
  ASSERT_TRUE(p);
  std::vector<value> out{value::of("kept")};
  auto check = [&](const dice::payload& x, const std::string& what) {
    auto before = dice::counter(trust_event::payload_rejected);
    auto err = dice::unpack_values_into(x, out);
    EXPECT_TRUE(dice::is(err, errc::malformed_input)) << what;
    EXPECT_NE(dice::render(err).find(what), std::string::npos)
      << dice::render(err);
    EXPECT_EQ(dice::counter(trust_event::payload_rejected), before + 1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], value::of("kept"));
  };
  auto wrong = *p;
  wrong.count = 3;
  check(wrong, "payload holds 2 items but claims 3");
  wrong.count = 1;
  check(wrong, "payload holds 2 items but claims 1");
  auto scalar = *p;
  scalar.bytes = encode(i64(1));
  scalar.count = 1;
  check(scalar, "items must be a list, not integer at offset 4");
  auto cut = *p;
  auto bytes = bytes_of(p->bytes);
  bytes.pop_back();
  cut.bytes = dice::shared_bytes{bytes};
  check(cut, "truncated");
  EXPECT_FALSE(dice::unpack_values({*p, wrong}));
}

TEST(Value, EncodeRefusesInconsistentValues) {
  auto bad = [](const value& x, const std::string& what) {
    auto err = refused(x);
    EXPECT_TRUE(dice::is(err, errc::malformed_input)) << what;
    EXPECT_NE(dice::render(err).find(what), std::string::npos)
      << dice::render(err);
  };
  auto x = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  auto wrong_bytes = x;
  wrong_bytes.array.nbytes = 20;
  bad(wrong_bytes, "does not match its shape");
  auto wrong_shape = x;
  wrong_shape.array.shape = {3, 3};
  bad(wrong_shape, "does not match its shape");
  auto negative = x;
  negative.array.shape = {-2, -3};
  bad(negative, "does not match its shape");
  auto no_data = x;
  no_data.array.data = nullptr;
  bad(no_data, "array without data");
  auto unknown = x;
  unknown.array.type = static_cast<dtype>(42);
  bad(unknown, "unknown dtype 42");
  auto flavor = x;
  flavor.array.flavor = static_cast<array_flavor>(9);
  bad(flavor, "unknown array flavor");
  auto scalar = x;
  scalar.array.flavor = array_flavor::numpy_scalar;
  bad(scalar, "numpy scalar with dimensions");
  bad(value::dict({"a", "b"}, {value::none()}), "dict with 2 keys and 1 items");
  bad(value::dict({"a", "a"}, {value::none(), value::none()}),
      "duplicate dict key");
  bad(value::dict({"\xff"}, {value::none()}), "dict key is not UTF-8");
  bad(value::of("\xC0\x80"), "str is not UTF-8");
  auto keyed = value::list({});
  keyed.keys = {"a"};
  bad(keyed, "keys on a list");
  auto kind = value::none();
  kind.kind = static_cast<value_kind>(99);
  bad(kind, "unknown kind 99");
  // Depth 64 is the decoder's default limit, so the encoder's too; deeper
  // is refused inside a payload as well.
  auto deep = value::list({});
  for (int i = 1; i < 64; ++i)
    deep = value::list({std::move(deep)});
  EXPECT_TRUE(dice::encode_value(deep));
  bad(value::list({deep}), "nested deeper than 64");
  EXPECT_FALSE(dice::pack_values({deep}));
}

TEST(Value, EncodeRefusesMoreThanTheWireLimitBeforeAllocating) {
  std::uint8_t byte = 0;
  value_array a;
  a.type = dtype::uint8;
  a.shape = {std::int64_t{3} << 30};
  a.data = &byte; // never read: refused by size first
  a.nbytes = std::size_t{3} << 30;
  auto res = dice::encode_value(value::of(std::move(a)));
  ASSERT_FALSE(res);
  EXPECT_TRUE(dice::is(res.error(), errc::too_large))
    << dice::render(res.error());
}

TEST(Value, EqualityIsDeep) {
  EXPECT_EQ(value::of("x").kind, value_kind::string); // not of(bool)
  auto a = floats({2}, {1, 2});
  auto b = floats({2}, {1, 2}); // other bytes, same content
  EXPECT_EQ(a, b);
  auto c = b;
  c.array.flavor = array_flavor::tensor;
  EXPECT_NE(a, c);
  auto d = b;
  d.array.shape = {1, 2};
  EXPECT_NE(a, d);
  EXPECT_NE(a, floats({2}, {1, 3}));
  EXPECT_NE(value::of(0.0), value::of(-0.0));
  EXPECT_NE(i64(1), value::of(1.0));
  EXPECT_NE(value::list({}), value::tuple({}));
  EXPECT_NE(value::of("a"), value::of_bytes("a"));
  EXPECT_NE(value::dict({"a", "b"}, {i64(1), i64(2)}),
            value::dict({"b", "a"}, {i64(2), i64(1)}));
  EXPECT_NE(value::list({i64(1)}), value::list({i64(1), i64(1)}));
  EXPECT_EQ(sample(), sample());
}

TEST(Value, FindAndToString) {
  auto x = sample();
  ASSERT_NE(x.find("reward"), nullptr);
  EXPECT_EQ(x.find("reward")->real, 1.5);
  EXPECT_EQ(x.find("missing"), nullptr);
  EXPECT_EQ(value::list({}).find("obs"), nullptr);
  EXPECT_STREQ(to_string(value_kind::dict), "dict");
  EXPECT_STREQ(to_string(value_kind::array), "array");
  EXPECT_STREQ(to_string(value_kind::none), "none");
  EXPECT_STREQ(to_string(static_cast<value_kind>(77)), "unknown");
}

} // namespace

namespace {

TEST(Value, RefusesMoreValuesThanTheLimitBeforeAllocatingThem) {
  // A list claiming 2^21 + 1 Nones, one byte each: within the bytes, but
  // decoded it would take ~370 MB; refused at its header.
  constexpr std::uint64_t n = (std::uint64_t{1} << 21) + 1;
  std::vector<std::uint8_t> bytes{'d', 'v', 'l', 1, 'l'};
  for (int i = 0; i < 8; ++i)
    bytes.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  bytes.insert(bytes.end(), n, 'N');
  auto before = dice::counter(dice::trust_event::payload_rejected);
  auto x = dice::decode_value(dice::shared_bytes{bytes});
  ASSERT_FALSE(x);
  EXPECT_NE(
    dice::render(x.error()).find("more than 2097152 values at offset 4"),
    std::string::npos)
    << dice::render(x.error());
  EXPECT_EQ(dice::counter(dice::trust_event::payload_rejected), before + 1);
  // Within the limit it decodes; the encoder refuses what it would refuse.
  dice::value_limits small;
  small.max_values = 4;
  auto three = dice::encode_value(dice::value::list(
    {dice::value::none(), dice::value::none(), dice::value::none()}));
  ASSERT_TRUE(three);
  EXPECT_TRUE(dice::decode_value(*three, small));
  small.max_values = 3;
  EXPECT_FALSE(dice::decode_value(*three, small));
  std::vector<dice::value> many(n);
  auto refused = dice::encode_value(dice::value::list(std::move(many)));
  ASSERT_FALSE(refused);
  EXPECT_NE(dice::render(refused.error()).find("more than 2097152 values"),
            std::string::npos)
    << dice::render(refused.error());
}

} // namespace
