// dice::value's wire format, version 1. Little-endian; the first byte of the
// buffer is 64-byte aligned and all padding is counted from it.
//
//   encoding := "dvl" 0x01 node
//   node     := 'N'                                            None
//             | 'F' | 'T'                                      False, True
//             | 'i' i64                                        int
//             | 'f' f64 (IEEE 754 bits)                        float
//             | 's' u64 n, n bytes of UTF-8                    str
//             | 'b' u64 n, n bytes                             bytes
//             | 'l' u64 n, n nodes                             list
//             | 't' u64 n, n nodes                             tuple
//             | 'd' u64 n, n × (u64 k, k bytes of UTF-8, node) dict
//             | 'a' u8 dtype, u8 flavor, u8 ndim, ndim × i64 dim,
//                   u64 nbytes, zeros up to the next multiple of 64,
//                   nbytes bytes (C order)                     array
//
// dtype is dice::dtype's value (float32 0, float64 1, float16 2, bfloat16 3,
// int64 4, int32 5, int16 6, int8 7, uint8 8, bool 9); flavor is
// array_flavor's (numpy 0, tensor 1, numpy_scalar 2, which has ndim 0).
// Each value has exactly one encoding (padding zero, bools as two tags, no
// duplicate dict keys, no trailing bytes), so decoding and encoding again
// gives back the same bytes; the fuzz target checks that.

#include "dice/messages/value.hpp"

#include "messages/value_format.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>

namespace dice {

namespace value_detail {

// Offset of the first byte that is not well-formed UTF-8 (no overlong forms,
// no surrogates, nothing above U+10FFFF: what Python's decoder accepts), or
// `n` when all are.
std::size_t utf8_error(const std::uint8_t* s, std::size_t n) {
  std::size_t i = 0;
  while (i < n) {
    auto c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint8_t lo = 0x80, hi = 0xBF; // range of the second byte
    if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
      len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
      len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
      return i;
    if (n - i < len || s[i + 1] < lo || s[i + 1] > hi)
      return i;
    for (std::size_t k = 2; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80)
        return i;
    i += len;
  }
  return n;
}

std::size_t utf8_error(const std::string& s) {
  return utf8_error(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
}

// element_size(type) * product(shape) into `out`; false on a negative
// dimension or an overflow (also when a later dimension is 0).
bool array_bytes(dtype type, const std::vector<std::int64_t>& shape,
                 std::uint64_t& out) {
  std::uint64_t n = element_size(type);
  for (auto dim : shape) {
    if (dim < 0)
      return false;
    auto d = static_cast<std::uint64_t>(dim);
    if (d != 0 && n > std::numeric_limits<std::uint64_t>::max() / d)
      return false;
    n *= d;
  }
  out = n;
  return true;
}

bool has_duplicate(const std::vector<std::string>& keys) {
  if (keys.size() <= 16) { // the common case: no allocation
    for (std::size_t i = 0; i < keys.size(); ++i)
      for (std::size_t j = i + 1; j < keys.size(); ++j)
        if (keys[i] == keys[j])
          return true;
    return false;
  }
  std::vector<std::string_view> xs(keys.begin(), keys.end());
  std::sort(xs.begin(), xs.end());
  return std::adjacent_find(xs.begin(), xs.end()) != xs.end();
}

caf::error value_error(errc code, std::string what) {
  return make_error(code, "value: " + what);
}

} // namespace value_detail

const char* to_string(value_kind x) noexcept {
  switch (x) {
    case value_kind::none: return "none";
    case value_kind::boolean: return "boolean";
    case value_kind::integer: return "integer";
    case value_kind::real: return "real";
    case value_kind::string: return "string";
    case value_kind::bytes: return "bytes";
    case value_kind::list: return "list";
    case value_kind::tuple: return "tuple";
    case value_kind::dict: return "dict";
    case value_kind::array: return "array";
  }
  return "unknown";
}

value value::of(bool x) {
  value y;
  y.kind = value_kind::boolean;
  y.boolean = x;
  return y;
}

value value::of(std::int64_t x) {
  value y;
  y.kind = value_kind::integer;
  y.integer = x;
  return y;
}

value value::of(double x) {
  value y;
  y.kind = value_kind::real;
  y.real = x;
  return y;
}

value value::of(std::string x) {
  value y;
  y.kind = value_kind::string;
  y.text = std::move(x);
  return y;
}

value value::of_bytes(std::string x) {
  auto y = of(std::move(x));
  y.kind = value_kind::bytes;
  return y;
}

value value::list(std::vector<value> xs) {
  value y;
  y.kind = value_kind::list;
  y.items = std::move(xs);
  return y;
}

value value::tuple(std::vector<value> xs) {
  auto y = list(std::move(xs));
  y.kind = value_kind::tuple;
  return y;
}

value value::dict(std::vector<std::string> keys, std::vector<value> xs) {
  auto y = list(std::move(xs));
  y.kind = value_kind::dict;
  y.keys = std::move(keys);
  return y;
}

value value::of(value_array x) {
  value y;
  y.kind = value_kind::array;
  y.array = std::move(x);
  return y;
}

const value* value::find(std::string_view key) const noexcept {
  if (kind != value_kind::dict)
    return nullptr;
  for (std::size_t i = 0; i < keys.size() && i < items.size(); ++i)
    if (keys[i] == key)
      return &items[i];
  return nullptr;
}

bool operator==(const value& x, const value& y) {
  if (x.kind != y.kind)
    return false;
  switch (x.kind) {
    case value_kind::none: return true;
    case value_kind::boolean: return x.boolean == y.boolean;
    case value_kind::integer: return x.integer == y.integer;
    case value_kind::real: return std::memcmp(&x.real, &y.real, 8) == 0;
    case value_kind::string:
    case value_kind::bytes: return x.text == y.text;
    case value_kind::dict:
      if (x.keys != y.keys)
        return false;
      [[fallthrough]];
    case value_kind::list:
    case value_kind::tuple: return x.items == y.items;
    case value_kind::array: {
      auto& a = x.array;
      auto& b = y.array;
      return a.type == b.type && a.flavor == b.flavor && a.shape == b.shape
        && a.nbytes == b.nbytes
        && (a.nbytes == 0 || std::memcmp(a.data, b.data, a.nbytes) == 0);
    }
  }
  return false;
}

} // namespace dice
