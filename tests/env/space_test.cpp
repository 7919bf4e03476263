// Spaces print as gymnasium's repr (the expected strings are what gymnasium's
// Box.__repr__ and numpy 1.24's str() print for the same bounds), count
// their floats, and compare equal only when everything matches.

#include "dice/env/space.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using dice::space;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float big = std::numeric_limits<float>::max();

TEST(Space, DiscreteReprAndSize) {
  auto s = space::discrete(2);
  EXPECT_TRUE(s.is_discrete());
  EXPECT_EQ(s.n, 2);
  EXPECT_EQ(s.flat_size(), 1);
  EXPECT_EQ(s.to_string(), "Discrete(2)");
}

TEST(Space, UniformBoxPrintsScalarBounds) {
  EXPECT_EQ(space::box({3}, -1, 1).to_string(),
            "Box(-1.0, 1.0, (3,), float32)");
  EXPECT_EQ(space::box({2, 3}, -inf, inf).to_string(),
            "Box(-inf, inf, (2, 3), float32)");
  EXPECT_EQ(space::box({84, 84, 4}, 0, 255).to_string(),
            "Box(0.0, 255.0, (84, 84, 4), float32)");
  // numpy: positional from 1e-4 (compared in double) up to 1e16.
  EXPECT_EQ(space::box({2}, 0.05f, 1e-5f).to_string(),
            "Box(0.05, 1e-05, (2,), float32)");
  EXPECT_EQ(space::box({1}, 1e-4f, 9.99e15f).to_string(),
            "Box(1e-04, 9990000000000000.0, (1,), float32)");
  EXPECT_EQ(space::box({1}, -big, 1e16f).to_string(),
            "Box(-3.4028235e+38, 1e+16, (1,), float32)");
  EXPECT_EQ(space::box({}, 0, 1).to_string(), "Box(0.0, 1.0, (), float32)");
}

TEST(Space, PerValueBoundsPrintAsNumpyArrays) {
  // Pendulum-v1's observation space.
  EXPECT_EQ(space::box({-1, -1, -8}, {1, 1, 8}).to_string(),
            "Box([-1. -1. -8.], [1. 1. 8.], (3,), float32)");
  // Values needing unequal digits are padded to line up.
  EXPECT_EQ(space::box({0, 0.5f}, {1, 1.5f}).to_string(),
            "Box([0.  0.5], [1.  1.5], (2,), float32)");
  // CartPole-v1's: float32 max forces numpy's exponent notation, with the
  // digits of 4.8f's exact value (4.80000019...) up to the longest mantissa.
  EXPECT_EQ(space::box({-4.8f, -big, -0.41887903f, -big},
                       {4.8f, big, 0.41887903f, big})
              .to_string(),
            "Box([-4.8000002e+00 -3.4028235e+38 -4.1887903e-01 "
            "-3.4028235e+38], [4.8000002e+00 3.4028235e+38 4.1887903e-01 "
            "3.4028235e+38], (4,), float32)");
  // Infinities take the width of the widest finite value.
  EXPECT_EQ(space::box({-4.8f, -inf, -0.41887903f, -inf},
                       {4.8f, inf, 0.41887903f, inf})
              .to_string(),
            "Box([-4.8               -inf -0.41887903        -inf], "
            "[4.8               inf 0.41887903        inf], (4,), float32)");
  // A ratio over 1000 between magnitudes switches to exponents, too.
  EXPECT_EQ(space::box({0.001234567f, 1.5f}, {2, 3}).to_string(),
            "Box([1.234567e-03 1.500000e+00], [2. 3.], (2,), float32)");
  EXPECT_EQ(space::box({std::nanf(""), 0}, {1, 1}).to_string(),
            "Box([nan  0.], 1.0, (2,), float32)");
}

TEST(Space, MultiDimensionalBoundsNestAndWrapLikeNumpy) {
  auto s = space::box({2, 3}, 0, 0);
  s.low = {-0.5f, 0.5f, 1.5f, 2.5f, 3.5f, 4.5f};
  s.high = {0, 1, 2, 3, 4, 5};
  EXPECT_EQ(s.to_string(),
            "Box([[-0.5  0.5  1.5]\n [ 2.5  3.5  4.5]], "
            "[[0. 1. 2.]\n [3. 4. 5.]], (2, 3), float32)");
  // Three dimensions: a blank line between the blocks.
  auto t = space::box({2, 1, 2}, 0, 0);
  t.low = {0, 1, 2, 3};
  t.high = {1, 2, 3, 4};
  EXPECT_EQ(t.to_string(),
            "Box([[[0. 1.]]\n\n [[2. 3.]]], "
            "[[[1. 2.]]\n\n [[3. 4.]]], (2, 1, 2), float32)");
  // 40 values wrap at numpy's 75 columns.
  std::vector<float> lo;
  for (int i = 0; i < 40; ++i)
    lo.push_back(1.5f * static_cast<float>(i));
  auto row = space::box(lo, std::vector<float>(40, 100));
  EXPECT_EQ(
    row.to_string(),
    "Box([ 0.   1.5  3.   4.5  6.   7.5  9.  10.5 12.  13.5 15.  16.5 "
    "18.  19.5\n 21.  22.5 24.  25.5 27.  28.5 30.  31.5 33.  34.5 36.  "
    "37.5 39.  40.5\n 42.  43.5 45.  46.5 48.  49.5 51.  52.5 54.  55.5 "
    "57.  58.5], 100.0, (40,), float32)");
}

TEST(Space, FlatSizeIsTheProductOfTheShape) {
  EXPECT_EQ(space::box({3}, -1, 1).flat_size(), 3);
  EXPECT_EQ(space::box({2, 3, 4}, -1, 1).flat_size(), 24);
  EXPECT_EQ(space::box({}, -1, 1).flat_size(), 1); // a scalar
  EXPECT_EQ(space::box({2, 0}, -1, 1).flat_size(), 0);
  auto s = space::box({-1, -2}, {1, 2});
  EXPECT_EQ(s.flat_size(), 2);
  EXPECT_EQ(s.shape, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(space::box({2, 3}, -1, 1).low.size(), 6u);
}

TEST(Space, EqualityComparesKindSizeShapeAndBounds) {
  EXPECT_EQ(space::discrete(2), space::discrete(2));
  EXPECT_NE(space::discrete(2), space::discrete(3));
  EXPECT_EQ(space::box({3}, -1, 1), space::box({3}, -1, 1));
  EXPECT_EQ(space::box({3}, -1, 1), space::box({-1, -1, -1}, {1, 1, 1}));
  EXPECT_NE(space::box({3}, -1, 1), space::box({3}, -1, 2));
  EXPECT_NE(space::box({3}, -1, 1), space::box({-1, -1, -1}, {1, 1, 1.5f}));
  EXPECT_NE(space::box({6}, -1, 1), space::box({2, 3}, -1, 1));
  // A one-value box is not a discrete space of one value.
  EXPECT_NE(space::box({1}, 0, 0), space::discrete(1));
}

} // namespace
