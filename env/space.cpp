#include "dice/env/space.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace dice {

space space::discrete(std::int64_t n) {
  space x;
  x.kind = space_kind::discrete;
  x.n = n;
  return x;
}

space space::box(std::vector<std::int64_t> shape, float low, float high) {
  space x;
  x.kind = space_kind::box;
  x.shape = std::move(shape);
  auto size = static_cast<std::size_t>(x.flat_size());
  x.low.assign(size, low);
  x.high.assign(size, high);
  return x;
}

space space::box(std::vector<float> low, std::vector<float> high) {
  space x;
  x.kind = space_kind::box;
  x.shape = {static_cast<std::int64_t>(low.size())};
  x.low = std::move(low);
  x.high = std::move(high);
  return x;
}

std::int64_t space::flat_size() const noexcept {
  if (kind == space_kind::discrete)
    return 1;
  std::int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

namespace {

// Python's repr of a float32 bound: "-1.0", "inf", "-inf", "0.05".
std::string py_float(float x) {
  if (std::isinf(x))
    return x < 0 ? "-inf" : "inf";
  std::ostringstream os;
  os << x;
  auto s = os.str();
  if (s.find_first_of(".e") == std::string::npos && s != "nan")
    s += ".0";
  return s;
}

// One bound if all are equal (gymnasium prints the scalar), else "[...]".
std::string bounds(const std::vector<float>& xs) {
  if (!xs.empty() && std::all_of(xs.begin(), xs.end(), [&](float x) {
        return x == xs[0];
      }))
    return py_float(xs[0]);
  std::string s = "[";
  for (std::size_t i = 0; i < xs.size(); ++i)
    s += (i > 0 ? " " : "") + py_float(xs[i]);
  return s + "]";
}

} // namespace

std::string space::to_string() const {
  if (kind == space_kind::discrete)
    return "Discrete(" + std::to_string(n) + ")";
  std::string dims = "(";
  for (std::size_t i = 0; i < shape.size(); ++i)
    dims += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  dims += shape.size() == 1 ? ",)" : ")";
  return "Box(" + bounds(low) + ", " + bounds(high) + ", " + dims
    + ", float32)";
}

bool operator==(const space& x, const space& y) {
  return x.kind == y.kind && x.n == y.n && x.shape == y.shape && x.low == y.low
    && x.high == y.high;
}

} // namespace dice
