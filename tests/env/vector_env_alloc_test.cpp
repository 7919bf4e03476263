// vector_env::step allocates nothing once the vector is built, also when
// episodes end and envs auto-reset (this binary counts operator new).

// GCC pairs the inlined replacement new and delete below as malloc and free
// of a new'd pointer; they are a matched pair by construction.
#if defined(__GNUC__) && !defined(__clang__)
#  pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include "dice/env/vector_env.hpp"
#include "dice/envs/cartpole.hpp"
#include "dice/envs/pendulum.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>

namespace {

std::atomic<bool> counting{false};
std::atomic<std::size_t> allocations{0};

} // namespace

void* operator new(std::size_t size) {
  if (counting.load(std::memory_order_relaxed))
    allocations.fetch_add(1, std::memory_order_relaxed);
  if (auto* p = std::malloc(size == 0 ? 1 : size))
    return p;
  throw std::bad_alloc{};
}

void operator delete(void* p) noexcept {
  std::free(p);
}

void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace {

// Counts the allocations `f` makes.
template <class F>
std::size_t allocations_in(F f) {
  allocations = 0;
  counting = true;
  f();
  counting = false;
  return allocations.load();
}

TEST(VectorEnvAlloc, TheCounterSeesAllocations) {
  auto n = allocations_in([] {
    auto p = std::make_unique<int>(1);
    EXPECT_EQ(*p, 1);
  });
  EXPECT_EQ(n, 1u);
}

TEST(VectorEnvAlloc, DiscreteStepsAndAutoResetsDoNotAllocate) {
  for (auto mode : {dice::autoreset::same_step, dice::autoreset::next_step}) {
    auto v = dice::vector_env::make(
      8,
      [](std::size_t) {
        return std::make_unique<dice::envs::cartpole>();
      },
      {mode, {}});
    ASSERT_TRUE(v);
    ASSERT_FALSE(v->reset(1));
    std::vector<std::int64_t> right(8, 1); // topples within ~40 steps
    bool ok = true;
    auto n = allocations_in([&] {
      for (int t = 0; t < 500; ++t)
        ok = ok && !v->step(right.data());
    });
    EXPECT_TRUE(ok);
    EXPECT_EQ(n, 0u);
    EXPECT_GT(v->total_episodes(), 50u);
  }
}

TEST(VectorEnvAlloc, BoxStepsAndTimeLimitsDoNotAllocate) {
  auto v = dice::vector_env::make(4, [](std::size_t) {
    return std::make_unique<dice::envs::pendulum>();
  });
  ASSERT_TRUE(v);
  ASSERT_FALSE(v->reset(2));
  std::vector<float> u{1.0f, -1.0f, 0.0f, 2.0f};
  bool ok = true;
  auto n = allocations_in([&] {
    for (int t = 0; t < 450; ++t)
      ok = ok && !v->step(u.data());
  });
  EXPECT_TRUE(ok);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(v->total_episodes(), 8u); // two 200-step episodes each
}

} // namespace
