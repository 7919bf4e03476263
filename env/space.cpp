#include "dice/env/space.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

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

// -- numpy's printing of float32 values, which gymnasium's repr uses ---------

// C's printf, which rounds the exact binary value as dragon4 does when numpy
// asks for more digits than the shortest form has.
std::string printf_float(const char* fmt, int precision, float x) {
  char buf[128];
  auto n = std::snprintf(buf, sizeof(buf), fmt, precision,
                         static_cast<double>(x));
  return std::string(buf, static_cast<std::size_t>(std::max(n, 0)));
}

// The shortest digits that read back as `x` ("3.4028235e+38", "1e-05"), as
// numpy's dragon4 with unique=True finds them.
std::string shortest_scientific(float x) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x,
                           std::chars_format::scientific);
  return std::string(buf, res.ptr);
}

// The shortest digits in positional notation, zeros filling in up to the
// point ("9990000000000000", "0.05"); no point for whole numbers. With
// `exact_int` the exact digits replace such zeros (dragon4 with min_digits
// 0, as numpy prints array elements: 69373752, not 69373750).
std::string shortest_positional(float x, bool exact_int = false) {
  auto s = shortest_scientific(x);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  auto e = s.find('e');
  auto exp = std::stoi(s.substr(e + 1));
  std::string digits;
  for (std::size_t k = 0; k < e; ++k)
    if (s[k] != '.')
      digits += s[k];
  if (exp < 0)
    return sign + "0." + std::string(static_cast<std::size_t>(-exp - 1), '0')
      + digits;
  auto int_len = static_cast<std::size_t>(exp) + 1;
  if (digits.size() < int_len && exact_int)
    return printf_float("%.*f", 0, x);
  if (digits.size() <= int_len)
    return sign + digits + std::string(int_len - digits.size(), '0');
  return sign + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::string non_finite(float x) {
  if (std::isnan(x))
    return "nan";
  return x < 0 ? "-inf" : "inf";
}

// str(np.float32(x)): positional for 0 and 1e-4 <= |x| < 1e16 with at least
// one fractional digit ("2.0"), else scientific without a trailing point
// ("1e-05").
std::string scalar_str(float x) {
  if (!std::isfinite(x))
    return non_finite(x);
  // numpy compares in double: float32(1e-4) is below 1e-4.
  auto a = std::fabs(static_cast<double>(x));
  if (a != 0 && (a < 1e-4 || a >= 1e16))
    return shortest_scientific(x);
  auto s = shortest_positional(x);
  if (s.find('.') == std::string::npos)
    s += ".0";
  return s;
}

// numpy's FloatingFormat for str(array) with the default options (precision
// 8, floatmode "maxprec", sign "-"): one layout for all elements, so that
// they line up.
class float_format {
 public:
  explicit float_format(const std::vector<float>& xs) {
    std::vector<float> finite;
    for (auto x : xs)
      if (std::isfinite(x))
        finite.push_back(x);
    double max_abs = 0;
    double min_abs = std::numeric_limits<double>::infinity();
    for (auto x : finite)
      if (x != 0) {
        max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
        min_abs = std::min(min_abs, std::fabs(static_cast<double>(x)));
      }
    exp_ = max_abs > 0
      && (max_abs >= 1e8 || min_abs < 1e-4 || max_abs / min_abs > 1e3);
    if (exp_) {
      // Every mantissa gets the most fractional digits any one needs.
      std::size_t exp_digits = 0;
      for (auto x : finite) {
        auto s = positional_or_scientific(x);
        auto e = s.find('e');
        auto dot = s.find('.');
        pad_left_ = std::max(pad_left_, dot);
        precision_ = std::max(precision_, e - dot - 1);
        exp_digits = std::max(exp_digits, s.size() - e - 2);
      }
      pad_right_ = exp_digits + 2 + precision_;
    } else {
      for (auto x : finite) {
        auto s = positional_or_scientific(x);
        auto dot = s.find('.');
        pad_left_ = std::max(pad_left_, dot);
        pad_right_ = std::max(pad_right_, s.size() - dot - 1);
      }
    }
    // "nan" and "inf" may need more room than the digits left of the point.
    if (finite.size() != xs.size()) {
      bool neg_inf = std::any_of(xs.begin(), xs.end(), [](float x) {
        return std::isinf(x) && x < 0;
      });
      auto offset = pad_right_ + 1;
      auto need = std::max<std::size_t>(3, neg_inf ? 4 : 3);
      if (need > offset)
        pad_left_ = std::max(pad_left_, need - offset);
    }
  }

  std::string operator()(float x) const {
    if (!std::isfinite(x)) {
      auto s = non_finite(x);
      auto width = pad_left_ + pad_right_ + 1;
      return std::string(width > s.size() ? width - s.size() : 0, ' ') + s;
    }
    auto s = exp_ ? printf_float("%.*e", static_cast<int>(precision_), x)
                  : positional_or_scientific(x);
    if (exp_ && precision_ == 0)
      s.insert(s.find('e'), "."); // trim='k' keeps the point: "1.e+16"
    auto dot = s.find('.');
    auto left = dot < pad_left_ ? pad_left_ - dot : 0;
    auto frac = exp_ ? pad_right_ : s.size() - dot - 1;
    auto right = exp_ || frac >= pad_right_ ? 0 : pad_right_ - frac;
    return std::string(left, ' ') + s + std::string(right, ' ');
  }

 private:
  // dragon4 with unique=True, precision=8 and trim='.': the shortest digits,
  // at most 8 after the point, trailing zeros dropped but the point kept
  // ("1.", "0.5", "4.8e+00").
  std::string positional_or_scientific(float x) const {
    auto s = exp_ ? shortest_scientific(x) : shortest_positional(x, true);
    auto e = std::min(s.find('e'), s.size());
    auto mantissa = s.substr(0, e);
    auto exponent = s.substr(e);
    auto dot = mantissa.find('.');
    if (dot != std::string::npos && mantissa.size() - dot - 1 > 8) {
      auto r = printf_float(exp_ ? "%.*e" : "%.*f", 8, x);
      e = std::min(r.find('e'), r.size());
      mantissa = r.substr(0, e);
      exponent = r.substr(e);
      while (mantissa.back() == '0')
        mantissa.pop_back();
    }
    if (mantissa.find('.') == std::string::npos)
      mantissa += '.';
    return mantissa + exponent;
  }

  bool exp_ = false;
  std::size_t pad_left_ = 0;
  std::size_t pad_right_ = 0;
  std::size_t precision_ = 0;
};

// Appends `word` to `line`, first moving `line` to `s` if it would pass
// `width` (numpy's _extendLine: no wrap where it would not help).
void extend_line(std::string& s, std::string& line, const std::string& word,
                 std::size_t width, const std::string& indent) {
  if (line.size() + word.size() > width && line.size() > indent.size()) {
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    s += line + "\n";
    line = indent;
  }
  line += word;
}

// numpy's _formatArray: nested brackets, elements separated by a space and
// wrapped at 75 columns, one blank line less per level between blocks.
std::string format_array(const std::vector<float>& xs,
                         const std::vector<std::int64_t>& shape,
                         const float_format& fmt, std::size_t axis,
                         std::size_t offset, const std::string& indent,
                         std::size_t width) {
  if (axis == shape.size())
    return fmt(xs[offset]);
  std::size_t stride = 1;
  for (auto k = axis + 1; k < shape.size(); ++k)
    stride *= static_cast<std::size_t>(shape[k]);
  auto len = static_cast<std::size_t>(shape[axis]);
  auto next_indent = indent + ' ';
  std::string s;
  if (axis + 1 == shape.size()) {
    std::string line = indent;
    for (std::size_t i = 0; i < len; ++i) {
      auto word = format_array(xs, shape, fmt, axis + 1, offset + i * stride,
                               next_indent, width - 1);
      extend_line(s, line, word, width - 1, indent);
      if (i + 1 < len)
        line += ' ';
    }
    s += line;
  } else {
    std::string sep(shape.size() - axis - 1, '\n');
    for (std::size_t i = 0; i < len; ++i) {
      s += indent
        + format_array(xs, shape, fmt, axis + 1, offset + i * stride,
                       next_indent, width - 1);
      if (i + 1 < len)
        s += sep;
    }
  }
  return "[" + s.substr(std::min(indent.size(), s.size())) + "]";
}

// gymnasium's _short_repr: the scalar if all bounds are equal, else str() of
// the array (numpy's summary of arrays over 1000 elements is not copied).
std::string bounds(const std::vector<float>& xs,
                   const std::vector<std::int64_t>& shape) {
  if (xs.empty())
    return "[]";
  // np.min keeps the last of equal values, which tells -0.0 from 0.0.
  if (std::all_of(xs.begin(), xs.end(), [&](float x) {
        return x == xs[0];
      }))
    return scalar_str(xs.back());
  std::size_t size = 1;
  for (auto d : shape)
    size *= static_cast<std::size_t>(std::max<std::int64_t>(d, 0));
  // A shape that does not match the bounds prints them flat.
  auto dims = size == xs.size()
    ? shape
    : std::vector<std::int64_t>{static_cast<std::int64_t>(xs.size())};
  return format_array(xs, dims, float_format{xs}, 0, 0, " ", 75);
}

} // namespace

std::string space::to_string() const {
  if (kind == space_kind::discrete)
    return "Discrete(" + std::to_string(n) + ")";
  std::string dims = "(";
  for (std::size_t i = 0; i < shape.size(); ++i)
    dims += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  dims += shape.size() == 1 ? ",)" : ")";
  return "Box(" + bounds(low, shape) + ", " + bounds(high, shape) + ", " + dims
    + ", float32)";
}

bool operator==(const space& x, const space& y) {
  return x.kind == y.kind && x.n == y.n && x.shape == y.shape && x.low == y.low
    && x.high == y.high;
}

} // namespace dice
