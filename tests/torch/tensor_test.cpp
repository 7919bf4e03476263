// Boost serialization of LibTorch tensors and dice::transition: round trips
// for every dtype and layout, and refusal of hostile bytes.

#include "dice/core/errc.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/payload.hpp"
#include "dice/torch/tensor.hpp"
#include "dice/torch/transition.hpp"

#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

// LibTorch's CPU allocator takes tensor buffers from posix_memalign; this
// test binary's definition comes first in symbol lookup, so it sees every
// request (the attack test below asserts on the largest one).
namespace {
std::atomic<std::size_t> largest_aligned_request{0};
} // namespace

extern "C" int posix_memalign(void** ptr, std::size_t align, std::size_t n) {
  using fn = int (*)(void**, std::size_t, std::size_t);
  static auto real = reinterpret_cast<fn>(::dlsym(RTLD_NEXT, "posix_memalign"));
  auto cur = largest_aligned_request.load();
  while (n > cur && !largest_aligned_request.compare_exchange_weak(cur, n)) {
    // retry
  }
  return real(ptr, align, n);
}

namespace {

template <class T>
std::string save(const T& x) {
  std::ostringstream out;
  {
    boost::archive::binary_oarchive ar(out);
    ar << x;
  }
  return out.str();
}

template <class T>
T load(const std::string& bytes) {
  std::istringstream in(bytes);
  boost::archive::binary_iarchive ar(in);
  T result;
  ar >> result;
  return result;
}

/// Same dtype, same shape, same values.
void expect_same(const torch::Tensor& x, const torch::Tensor& y) {
  ASSERT_TRUE(y.defined());
  EXPECT_EQ(x.scalar_type(), y.scalar_type());
  EXPECT_EQ(x.sizes(), y.sizes());
  EXPECT_TRUE(torch::equal(x, y)) << x << "\nvs\n" << y;
}

torch::Tensor round_trip(const torch::Tensor& x) {
  return load<torch::Tensor>(save(x));
}

/// Overwrites `sizeof(T)` bytes of `bytes` at `pos` with `value`.
template <class T>
std::string patched(std::string bytes, std::size_t pos, T value) {
  std::memcpy(&bytes[pos], &value, sizeof(T));
  return bytes;
}

/// Loading `bytes` must throw a std::exception whose text contains `why`
/// (so the test knows which check refused them).
template <class T>
void expect_refused(const std::string& bytes, const std::string& why) {
  try {
    load<T>(bytes);
    ADD_FAILURE() << "loaded without error; expected: " << why;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string{e.what()}.find(why), std::string::npos)
      << "got: " << e.what() << "\nexpected: " << why;
  }
}

// -- tensors ------------------------------------------------------------------

TEST(Tensor, Float32RoundTrips) {
  torch::manual_seed(1);
  auto x = torch::randn({3, 4});
  expect_same(x, round_trip(x));
}

TEST(Tensor, Float64RoundTrips) {
  auto x = torch::randn({2, 5}, torch::kFloat64) * 1e300;
  expect_same(x, round_trip(x));
}

TEST(Tensor, Int64RoundTrips) {
  auto x = torch::arange(-6, 6, torch::kInt64).reshape({3, 2, 2})
    * (std::int64_t{1} << 40);
  expect_same(x, round_trip(x));
}

TEST(Tensor, Uint8RoundTrips) {
  auto x = torch::arange(0, 256, torch::kInt64).to(torch::kUInt8);
  expect_same(x, round_trip(x));
}

TEST(Tensor, BoolRoundTrips) {
  torch::manual_seed(2);
  auto x = torch::rand({7, 3}) > 0.5;
  ASSERT_EQ(x.scalar_type(), torch::kBool);
  expect_same(x, round_trip(x));
}

TEST(Tensor, EverySupportedDtypeRoundTrips) {
  for (auto type : {torch::kFloat32, torch::kFloat64, torch::kFloat16,
                    torch::kBFloat16, torch::kInt64, torch::kInt32,
                    torch::kInt16, torch::kInt8, torch::kUInt8, torch::kBool}) {
    auto x = torch::arange(0, 12, torch::kFloat64).reshape({3, 4}).to(type);
    SCOPED_TRACE(c10::toString(type));
    expect_same(x, round_trip(x));
  }
}

TEST(Tensor, ZeroDimRoundTrips) {
  auto x = torch::tensor(3.5);
  ASSERT_EQ(x.dim(), 0);
  auto y = round_trip(x);
  EXPECT_EQ(y.dim(), 0);
  expect_same(x, y);
  auto i = torch::tensor(std::int64_t{-7});
  expect_same(i, round_trip(i));
}

TEST(Tensor, EmptyRoundTrips) {
  auto x = torch::empty({0, 3});
  auto y = round_trip(x);
  EXPECT_EQ(y.sizes(), (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(y.scalar_type(), torch::kFloat32);
  auto z = round_trip(torch::empty({4, 0, 2}, torch::kInt64));
  EXPECT_EQ(z.sizes(), (std::vector<std::int64_t>{4, 0, 2}));
  EXPECT_EQ(z.scalar_type(), torch::kInt64);
}

TEST(Tensor, NonContiguousRoundTrips) {
  auto base = torch::arange(0, 24, torch::kFloat32).reshape({4, 6});
  auto transposed = base.t();
  ASSERT_FALSE(transposed.is_contiguous());
  auto y = round_trip(transposed);
  expect_same(transposed, y);
  EXPECT_TRUE(y.is_contiguous());
  auto strided = base.index(
    {torch::indexing::Slice(1, 4, 2), torch::indexing::Slice(0, 6, 3)});
  ASSERT_FALSE(strided.is_contiguous());
  expect_same(strided, round_trip(strided));
  auto expanded = torch::tensor({1, 2, 3}).expand({4, 3});
  ASSERT_FALSE(expanded.is_contiguous());
  expect_same(expanded, round_trip(expanded));
  // A view into the middle of a storage (non-zero storage offset).
  auto row = base[2];
  ASSERT_GT(row.storage_offset(), 0);
  expect_same(row, round_trip(row));
}

TEST(Tensor, RequiresGradIsDropped) {
  auto x = torch::randn({2, 2}, torch::requires_grad());
  auto y = round_trip(x);
  EXPECT_FALSE(y.requires_grad());
  expect_same(x.detach(), y);
}

TEST(Tensor, UndefinedRoundTrips) {
  auto y = round_trip(torch::Tensor{});
  EXPECT_FALSE(y.defined());
}

TEST(Tensor, BytesAreWrittenVerbatimAfterASmallHeader) {
  auto x = torch::arange(0, 1000, torch::kFloat32);
  auto bytes = save(x);
  auto raw = reinterpret_cast<const char*>(x.data_ptr());
  auto n = static_cast<std::size_t>(x.nbytes());
  ASSERT_GE(bytes.size(), n);
  // The archive ends with the tensor's bytes, in one piece.
  EXPECT_EQ(std::memcmp(bytes.data() + bytes.size() - n, raw, n), 0);
  EXPECT_LT(bytes.size() - n, 128u);
}

TEST(Tensor, UnsupportedDtypeThrowsOnSave) {
  auto x = torch::ones({2}, torch::kComplexFloat);
  EXPECT_THROW(save(x), std::invalid_argument);
}

// Layout of a float32 [2, 3] tensor archive, counted from the end: code (1),
// ndim (8), dims (2 x 8), nbytes (8), data (24).
class HostileTensor : public ::testing::Test {
 protected:
  std::string good = save(torch::arange(0, 6, torch::kFloat32).reshape({2, 3}));
  std::size_t data_pos = good.size() - 24;
  std::size_t nbytes_pos = data_pos - 8;
  std::size_t dims_pos = nbytes_pos - 16;
  std::size_t ndim_pos = dims_pos - 8;
  std::size_t code_pos = ndim_pos - 1;

  void SetUp() override {
    // Make sure the layout assumption holds, so the patches hit their field.
    std::int64_t dims[2];
    std::memcpy(dims, &good[dims_pos], sizeof(dims));
    ASSERT_EQ(dims[0], 2);
    ASSERT_EQ(dims[1], 3);
    ASSERT_EQ(static_cast<std::uint8_t>(good[code_pos]),
              static_cast<std::uint8_t>(dice::dtype::float32));
    expect_same(torch::arange(0, 6, torch::kFloat32).reshape({2, 3}),
                load<torch::Tensor>(good));
  }
};

TEST_F(HostileTensor, UnknownDtypeThrows) {
  using tensor = torch::Tensor;
  expect_refused<tensor>(patched(good, code_pos, std::uint8_t{42}),
                         "unknown dtype (42)");
  expect_refused<tensor>(patched(good, code_pos, std::uint8_t{0xFE}),
                         "unknown dtype (254)");
  // The "undefined" code with a shape attached is inconsistent as well.
  expect_refused<tensor>(patched(good, code_pos, std::uint8_t{0xFF}),
                         "undefined tensor with a shape");
}

TEST_F(HostileTensor, TooManyDimsThrow) {
  using tensor = torch::Tensor;
  expect_refused<tensor>(patched(good, ndim_pos, std::uint64_t{1} << 40),
                         "dimensions");
  expect_refused<tensor>(patched(good, ndim_pos, std::uint64_t{65}),
                         "claims 65 dimensions");
}

TEST_F(HostileTensor, NegativeDimThrows) {
  expect_refused<torch::Tensor>(patched(good, dims_pos, std::int64_t{-2}),
                                "negative dimension (-2)");
}

TEST_F(HostileTensor, HugeShapeThrows) {
  auto big = patched(good, dims_pos, std::int64_t{1} << 62);
  big = patched(big, dims_pos + 8, std::int64_t{1} << 62);
  expect_refused<torch::Tensor>(big, "shape larger than the limit");
  // A large shape with a matching byte count: refused by the byte limit.
  auto matching = patched(good, dims_pos, std::int64_t{1} << 30);
  matching = patched(matching, nbytes_pos, (std::uint64_t{1} << 30) * 3 * 4);
  expect_refused<torch::Tensor>(matching, "(limit");
}

TEST_F(HostileTensor, ByteCountMismatchThrows) {
  expect_refused<torch::Tensor>(patched(good, nbytes_pos, std::uint64_t{25}),
                                "claims 25 bytes, its shape and dtype need 24");
  expect_refused<torch::Tensor>(
    patched(good, nbytes_pos, std::uint64_t{1} << 60), "(limit");
}

TEST_F(HostileTensor, EveryTruncationThrows) {
  for (std::size_t n = 0; n < good.size(); ++n)
    EXPECT_THROW(load<torch::Tensor>(good.substr(0, n)), std::exception)
      << "prefix of " << n << " bytes";
}

// A 2 GiB tensor header with no bytes behind it, in a payload: refused
// before LibTorch is asked for the buffer (it used to allocate 2 GiB first,
// then fail on the missing bytes).
TEST(HostileTensorPayload, HeaderClaimingTwoGiBAllocatesNothing) {
  auto good = dice::pack(
    std::vector<torch::Tensor>{torch::arange(0, 2, torch::kFloat32)});
  std::string bytes{reinterpret_cast<const char*>(good.bytes.data()),
                    good.bytes.size()};
  // From the end: dims[0] (8), nbytes (8), data (8).
  auto data_pos = bytes.size() - 8;
  auto nbytes_pos = data_pos - 8;
  auto dim_pos = nbytes_pos - 8;
  std::int64_t dim = 0;
  std::memcpy(&dim, &bytes[dim_pos], 8);
  ASSERT_EQ(dim, 2);
  bytes = patched(bytes, dim_pos, std::int64_t{1} << 29);
  bytes = patched(bytes, nbytes_pos, std::uint64_t{1} << 31);
  bytes.resize(data_pos);
  auto hostile = good;
  hostile.bytes = dice::shared_bytes{
    std::vector<std::uint8_t>{bytes.begin(), bytes.end()}};
  largest_aligned_request = 0;
  auto back = dice::unpack<torch::Tensor>(hostile);
  auto largest = largest_aligned_request.load();
  ASSERT_FALSE(back);
  EXPECT_TRUE(dice::is(back.error(), dice::errc::malformed_input));
  EXPECT_LT(largest, std::size_t{1} << 20)
    << "the decoder asked for " << largest << " bytes for a " << bytes.size()
    << "-byte payload";
}

// -- transitions --------------------------------------------------------------

dice::transition batch(std::int64_t b, double offset) {
  dice::transition t;
  t.set("obs",
        torch::arange(0, b * 4, torch::kFloat32).reshape({b, 4}) + offset)
    .set("action", torch::arange(0, b, torch::kInt64) % 2)
    .set("reward", torch::ones({b}) * offset)
    .set("next_obs", // non-contiguous on purpose
         torch::arange(0, b * 4, torch::kFloat32).reshape({4, b}).t() - offset)
    .set("done", torch::arange(0, b, torch::kInt64) == b - 1);
  return t;
}

TEST(Transition, ConveniencesWork) {
  auto t = batch(3, 0.5);
  EXPECT_EQ(t.size(), 5u);
  EXPECT_FALSE(t.empty());
  EXPECT_TRUE(t.contains("obs"));
  EXPECT_FALSE(t.contains("logit"));
  EXPECT_EQ(t.at("obs").sizes(), (std::vector<std::int64_t>{3, 4}));
  const auto& ct = t;
  EXPECT_EQ(ct.at("action").scalar_type(), torch::kInt64);
  EXPECT_THROW(ct.at("logit"), std::out_of_range);
  EXPECT_THROW(t.at("logit"), std::out_of_range);
  t["logit"] = torch::zeros({3, 2});
  EXPECT_TRUE(t.contains("logit"));
  EXPECT_EQ(t.size(), 6u);
  EXPECT_TRUE(dice::equal(t, t));
  auto u = t;
  u.set("logit", torch::ones({3, 2}));
  EXPECT_FALSE(dice::equal(t, u));
  u.set("logit", torch::zeros({3, 2}, torch::kFloat64));
  EXPECT_FALSE(dice::equal(t, u)) << "dtype differs";
  EXPECT_TRUE(dice::transition{}.empty());
}

TEST(Transition, BoostRoundTripKeepsEveryTensor) {
  auto t = batch(5, 1.5);
  t["undefined"]; // an entry without a tensor
  auto y = load<dice::transition>(save(t));
  ASSERT_EQ(y.size(), t.size());
  EXPECT_FALSE(y.at("undefined").defined());
  EXPECT_TRUE(dice::equal(t, y));
  for (auto& [name, tensor] : t.tensors)
    if (tensor.defined()) {
      SCOPED_TRACE(name);
      expect_same(tensor, y.at(name));
    }
}

TEST(Transition, PacksAndUnpacksThroughAPayload) {
  std::vector<dice::transition> items{batch(4, 0.0), batch(1, 2.0),
                                      dice::transition{}};
  items[1].set("scalar", torch::tensor(7.0));
  auto p = dice::pack(items, 3, 11);
  EXPECT_EQ(p.count, 3u);
  EXPECT_EQ(p.origin, 3u);
  EXPECT_EQ(p.model_version, 11);
  auto back = dice::unpack<dice::transition>(p);
  ASSERT_TRUE(back) << dice::render(back.error());
  ASSERT_EQ(back->size(), items.size());
  for (std::size_t i = 0; i < items.size(); ++i)
    EXPECT_TRUE(dice::equal(items[i], (*back)[i])) << "item " << i;
  EXPECT_EQ((*back)[0].at("obs").sizes(), (std::vector<std::int64_t>{4, 4}));
  // Several payloads concatenate in order.
  auto more = dice::pack(std::vector<dice::transition>{batch(2, 9.0)});
  auto all = dice::unpack<dice::transition>(
    std::vector<dice::payload>{p, more});
  ASSERT_TRUE(all) << dice::render(all.error());
  ASSERT_EQ(all->size(), 4u);
  EXPECT_TRUE(dice::equal((*all)[0], items[0]));
  EXPECT_TRUE(dice::equal((*all)[3], batch(2, 9.0)));
}

TEST(Transition, HostilePayloadIsMalformed) {
  auto p = dice::pack(std::vector<dice::transition>{batch(3, 0.0)});
  std::vector<std::uint8_t> bytes{p.bytes.data(),
                                  p.bytes.data() + p.bytes.size()};
  std::vector<dice::transition> out{batch(1, 5.0)};
  for (std::size_t n = 0; n < bytes.size(); n += 7) {
    auto cut = p;
    cut.bytes = dice::shared_bytes{{bytes.begin(), bytes.begin() + n}};
    auto err = dice::unpack_into(cut, out);
    ASSERT_TRUE(dice::is(err, dice::errc::malformed_input))
      << "prefix of " << n << " bytes: " << dice::render(err);
    ASSERT_EQ(out.size(), 1u);
  }
}

TEST(Transition, OverLongNameThrows) {
  dice::transition t;
  t.set("x", torch::ones({2}));
  auto bytes = save(t);
  // Find the name: its length (uint64 1) followed by 'x'.
  std::string needle(8, '\0');
  needle[0] = 1;
  needle += 'x';
  auto pos = bytes.find(needle);
  ASSERT_NE(pos, std::string::npos);
  ASSERT_NO_THROW(load<dice::transition>(bytes));
  expect_refused<dice::transition>(patched(bytes, pos, std::uint64_t{1} << 40),
                                   "-byte name");
  expect_refused<dice::transition>(
    patched(bytes, pos, std::uint64_t{dice::transition::max_name_size + 1}),
    "4097-byte name");
}

TEST(Transition, DuplicateNameThrows) {
  dice::transition t;
  t.set("a", torch::ones({2})).set("b", torch::zeros({2}));
  auto bytes = save(t);
  std::string needle(8, '\0');
  needle[0] = 1;
  needle += 'b';
  auto pos = bytes.find(needle);
  ASSERT_NE(pos, std::string::npos);
  bytes[pos + 8] = 'a';
  expect_refused<dice::transition>(bytes, "twice");
}

TEST(Transition, HostileEntryCountThrows) {
  dice::transition t;
  t.set("x", torch::ones({2}));
  auto bytes = save(t);
  // The entry count (uint64 1) comes right before the name's length.
  std::string needle(8, '\0');
  needle[0] = 1;
  needle += needle;
  needle += 'x';
  auto pos = bytes.find(needle);
  ASSERT_NE(pos, std::string::npos);
  EXPECT_THROW(
    load<dice::transition>(patched(bytes, pos, std::uint64_t{1} << 62)),
    std::exception);
}

} // namespace
