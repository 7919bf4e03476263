// Hostile step and episode payloads: the counts inside an archive are the
// attacker's. Boost's vector loader resizes (and zero-fills) to a count
// before it reads an element; dice's bounded archive checks every column's
// count against the bytes left first, and episodes load in bounded chunks,
// so a claimed count beyond the bytes allocates no more than the bytes.
// Moved from tests/ppo/wire_test.cpp. This binary replaces the global
// operator new to record the largest single allocation made while
// decoding.

#include "dice/core/errc.hpp"
#include "dice/rl/segments.hpp"

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

using namespace dice::rl;

namespace {

const step_layout cartpole{4, 2, 0};

// `bytes` with its last 8 bytes (the last collection's count) set to
// `claimed` and `junk` bytes appended; the payload claims one item.
dice::payload forge(const dice::payload& p, std::uint64_t claimed,
                    std::size_t junk) {
  std::vector<std::uint8_t> bytes(p.bytes.data(),
                                  p.bytes.data() + p.bytes.size());
  std::memcpy(bytes.data() + bytes.size() - sizeof(claimed), &claimed,
              sizeof(claimed));
  bytes.resize(bytes.size() + junk, 0xAB);
  dice::payload x;
  x.bytes = dice::shared_bytes{std::move(bytes)};
  x.count = 1;
  x.origin = 9;
  return x;
}

// Empty CartPole columns: the archive ends with next_obs's count.
dice::payload empty_steps() {
  step_columns x;
  x.layout = cartpole;
  return pack_steps(x);
}

TEST(HostileSteps, ACountBeyondTheBytesAllocatesNoMoreThanTheBytes) {
  constexpr std::size_t junk = 1 << 20;
  // 1 Mi floats claimed (4 MiB) behind 1 MiB of input.
  auto x = forge(empty_steps(), junk, junk);
  largest = 0;
  auto r = unpack_steps(x);
  auto peak = largest.load();
  RecordProperty("largest_allocation", std::to_string(peak));
  ASSERT_FALSE(r);
  EXPECT_TRUE(dice::is(r.error(), dice::errc::malformed_input));
  EXPECT_LE(peak, 2 * junk + 65536) << "largest allocation " << peak;
}

TEST(HostileSteps, ACountTheBytesBackStillFailsTheLengthCheck) {
  constexpr std::size_t junk = 1 << 20;
  // Exactly as many floats as the junk holds: they decode (one column of
  // 1 MiB, as much as the input), then the lengths disagree.
  auto x = forge(empty_steps(), junk / sizeof(float), junk);
  largest = 0;
  auto r = unpack_steps(x);
  auto peak = largest.load();
  ASSERT_FALSE(r);
  EXPECT_TRUE(dice::is(r.error(), dice::errc::malformed_input));
  EXPECT_LE(peak, 2 * junk + 65536) << "largest allocation " << peak;
}

TEST(HostileSteps, APayloadClaimingMoreStepsThanBytesIsRefusedUndecoded) {
  auto p = pack_steps(step_columns{cartpole,
                                   {0},
                                   {-1},
                                   {0},
                                   {0},
                                   {0},
                                   {0},
                                   {0},
                                   {},
                                   {0, 0, 0, 0},
                                   {0, 0, 0, 0}});
  ASSERT_TRUE(unpack_steps(p));
  p.count = p.bytes.size() + 1;
  largest = 0;
  EXPECT_FALSE(unpack_steps(p));
  EXPECT_LE(largest.load(), 4096u);
}

TEST(HostileSteps, EpisodesToo) {
  constexpr std::size_t junk = 1 << 20;
  auto x = forge(dice::pack(std::vector<episode_record>{}), junk, junk);
  largest = 0;
  auto r = dice::unpack<episode_record>(x);
  auto peak = largest.load();
  RecordProperty("largest_allocation", std::to_string(peak));
  ASSERT_FALSE(r);
  EXPECT_LE(peak, 2 * junk + 65536) << "largest allocation " << peak;
}

TEST(HostileSteps, TheLearnerDropsTheForgedPayloadAndKeepsTheRest) {
  step_columns xs;
  xs.layout = cartpole;
  xs.reward.assign(4, 0);
  xs.logp.assign(4, -1);
  xs.value.assign(4, 0);
  xs.terminated.assign(4, 0);
  xs.truncated.assign(4, 0);
  xs.has_value.assign(4, 0);
  xs.discrete_actions.assign(4, 1);
  xs.obs.assign(16, 0);
  xs.next_obs.assign(16, 0);
  auto good = pack_steps(xs, 2, 0);
  auto bad = forge(empty_steps(), 1 << 16, 1 << 16);
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
  step_columns xs;
  xs.layout = step_layout{3, 0, 2};
  constexpr std::size_t n = 3000;
  for (std::size_t i = 0; i < n; ++i)
    xs.reward.push_back(static_cast<float>(i));
  xs.logp.assign(n, 0.5f);
  xs.value.assign(n, 0);
  xs.terminated.assign(n, 0);
  xs.truncated.assign(n, 0);
  xs.has_value.assign(n, 0);
  xs.box_actions.assign(2 * n, 0.25f);
  xs.obs.assign(3 * n, 1);
  xs.next_obs.assign(3 * n, 2);
  auto back = unpack_steps(pack_steps(xs, 1, 1));
  ASSERT_TRUE(back) << dice::render(back.error());
  EXPECT_EQ(back->reward, xs.reward);
  EXPECT_EQ(back->box_actions, xs.box_actions);
  EXPECT_EQ(back->next_obs, xs.next_obs);
}

} // namespace
