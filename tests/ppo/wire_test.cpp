// Hostile step payloads: the count inside the archive is the attacker's.
// Boost's vector loader resizes (and zero-fills) to that count before it
// reads an element, and the bounded archive only checks count <= bytes
// left, so a 48-byte record let N bytes of input allocate 48 N (before the
// chunked loader in segment.hpp: 1 MiB of input, a 48 MiB allocation for
// steps and 16 MiB for episodes). This binary replaces the global operator
// new to record the largest single allocation made while decoding.

#include "dice/core/errc.hpp"

#include "segment.hpp"
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

namespace {

std::atomic<std::size_t> largest{0};

} // namespace

// GCC sees malloc/free behind operator new/delete and warns; they match.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t n) {
  auto cur = largest.load(std::memory_order_relaxed);
  while (n > cur && !largest.compare_exchange_weak(cur, n)) {
    // retry
  }
  if (auto* p = std::malloc(n == 0 ? 1 : n))
    return p;
  throw std::bad_alloc{};
}

void operator delete(void* p) noexcept {
  std::free(p);
}

void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

using namespace ppo;

namespace {

// An archive of std::vector<T> whose element count says `claimed` while
// only `junk` bytes follow (the payload itself claims one item).
template <class T>
dice::payload forged(std::uint64_t claimed, std::size_t junk) {
  auto p = dice::pack(std::vector<T>{});
  std::vector<std::uint8_t> bytes(p.bytes.data(),
                                  p.bytes.data() + p.bytes.size());
  // The empty vector's archive ends with its 8-byte element count.
  std::memcpy(bytes.data() + bytes.size() - sizeof(claimed), &claimed,
              sizeof(claimed));
  bytes.resize(bytes.size() + junk, 0xAB);
  dice::payload x;
  x.bytes = dice::shared_bytes{std::move(bytes)};
  x.count = 1;
  x.origin = 9;
  return x;
}

TEST(HostileSteps, ACountBeyondTheBytesAllocatesNoMoreThanTheBytes) {
  constexpr std::size_t junk = 1 << 20;
  auto x = forged<step_record>(junk, junk);
  largest = 0;
  auto r = dice::unpack<step_record>(x);
  auto peak = largest.load();
  RecordProperty("largest_allocation", std::to_string(peak));
  ASSERT_FALSE(r);
  EXPECT_TRUE(dice::is(r.error(), dice::errc::malformed_input));
  // Unbounded: 48 MiB (48 x the input); bounded: what was read, with the
  // vector's doubling growth at most twice the input.
  EXPECT_LE(peak, 2 * junk + 65536) << "largest allocation " << peak;
}

TEST(HostileSteps, EpisodesToo) {
  constexpr std::size_t junk = 1 << 20;
  auto x = forged<episode_record>(junk, junk);
  largest = 0;
  auto r = dice::unpack<episode_record>(x);
  auto peak = largest.load();
  RecordProperty("largest_allocation", std::to_string(peak));
  ASSERT_FALSE(r);
  EXPECT_LE(peak, 2 * junk + 65536) << "largest allocation " << peak;
}

TEST(HostileSteps, TheLearnerDropsTheForgedPayloadAndKeepsTheRest) {
  std::vector<step_record> xs(4, step_record{});
  auto good = dice::pack(xs, 2, 0);
  auto bad = forged<step_record>(1 << 16, 1 << 16);
  intake_options opts;
  intake_counters counters;
  lag_summary lags;
  auto r = cut_segments({bad, good}, {0, 4}, opts, counters, lags);
  ASSERT_TRUE(r) << dice::render(r.error());
  EXPECT_EQ(r->size(), 4u);
  EXPECT_EQ(counters.payloads_rejected, 1);
  EXPECT_NE(counters.last_error.find("node 9"), std::string::npos);
}

TEST(HostileSteps, HonestPayloadsStillRoundTrip) {
  std::vector<step_record> xs(3000, step_record{});
  for (std::size_t i = 0; i < xs.size(); ++i)
    xs[i].reward = static_cast<float>(i);
  auto back = dice::unpack<step_record>(dice::pack(xs, 1, 1));
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), xs.size());
  EXPECT_EQ(std::memcmp(back->data(), xs.data(), xs.size() * sizeof(xs[0])), 0);
}

} // namespace
