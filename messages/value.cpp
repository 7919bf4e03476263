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

#include "dice/core/errc.hpp"
#include "dice/security/trust.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <new>
#include <type_traits>

namespace dice {

namespace {

// Fixed-width fields are copied as they lie in memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "dice::value's wire format is little-endian");

// unpack_values_into moves decoded items into `out` after the last check.
static_assert(std::is_nothrow_move_constructible<value>::value);

constexpr std::uint8_t magic[4] = {'d', 'v', 'l', 1};

// Tags: printable, so a hex dump reads, and a zero-filled buffer is refused.
constexpr std::uint8_t tag_none = 'N', tag_false = 'F', tag_true = 'T',
                       tag_int = 'i', tag_real = 'f', tag_str = 's',
                       tag_bytes = 'b', tag_list = 'l', tag_tuple = 't',
                       tag_dict = 'd', tag_array = 'a';

// The encoder refuses what a decoder with default limits would refuse.
constexpr value_limits defaults{};

constexpr std::uint64_t pad64(std::uint64_t n) {
  return (n + 63) / 64 * 64;
}

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

// First pass: counts bytes (saturating just past the limit) and checks the
// value. Second pass: writes into the buffer of the counted size.
struct measure_sink {
  static constexpr bool checks = true;
  std::uint64_t pos = 0;
  std::uint64_t values = 0;
  void put(const void*, std::uint64_t n) {
    pos = n > max_wire_bytes - std::min(pos, max_wire_bytes)
      ? max_wire_bytes + 1
      : pos + n;
  }
  void pad() {
    pos = pad64(pos);
  }
};

struct write_sink {
  static constexpr bool checks = false;
  std::uint8_t* base;
  std::size_t pos = 0;
  void put(const void* p, std::size_t n) {
    if (n > 0)
      std::memcpy(base + pos, p, n);
    pos += n;
  }
  void pad() {
    auto end = pad64(pos);
    std::memset(base + pos, 0, end - pos);
    pos = end;
  }
};

template <class Sink>
void put_u8(Sink& s, std::uint8_t x) {
  s.put(&x, 1);
}

template <class Sink>
void put_u64(Sink& s, std::uint64_t x) {
  s.put(&x, 8);
}

template <class Sink>
void put_text(Sink& s, const std::string& x) {
  put_u64(s, x.size());
  s.put(x.data(), x.size());
}

template <class Sink>
caf::error emit_node(Sink& s, const value& x, std::size_t depth);

template <class Sink>
caf::error emit_items(Sink& s, std::uint8_t tag, const std::vector<value>& xs,
                      std::size_t depth) {
  put_u8(s, tag);
  put_u64(s, xs.size());
  for (auto& x : xs)
    if (auto err = emit_node(s, x, depth + 1))
      return err;
  return caf::none;
}

template <class Sink>
caf::error check_node(const value& x, std::size_t depth) {
  if (!Sink::checks)
    return caf::none;
  auto bad = [](std::string what) {
    return value_error(errc::malformed_input, std::move(what));
  };
  if (depth > defaults.max_depth)
    return bad("nested deeper than " + std::to_string(defaults.max_depth));
  if (x.kind != value_kind::dict && !x.keys.empty())
    return bad(std::string{"keys on a "} + to_string(x.kind));
  if (x.kind == value_kind::string && utf8_error(x.text) != x.text.size())
    return bad("str is not UTF-8");
  if (x.kind == value_kind::dict) {
    if (x.keys.size() != x.items.size())
      return bad("dict with " + std::to_string(x.keys.size()) + " keys and "
                 + std::to_string(x.items.size()) + " items");
    for (auto& key : x.keys)
      if (utf8_error(key) != key.size())
        return bad("dict key is not UTF-8");
    if (has_duplicate(x.keys))
      return bad("duplicate dict key");
  }
  if (x.kind == value_kind::array) {
    auto& a = x.array;
    std::uint64_t n = 0;
    if (element_size(a.type) == 0)
      return bad("unknown dtype "
                 + std::to_string(static_cast<unsigned>(a.type)));
    if (a.flavor > array_flavor::numpy_scalar)
      return bad("unknown array flavor");
    if (a.shape.size() > defaults.max_ndim)
      return bad(std::to_string(a.shape.size()) + " dimensions");
    if (a.flavor == array_flavor::numpy_scalar && !a.shape.empty())
      return bad("numpy scalar with dimensions");
    if (!array_bytes(a.type, a.shape, n) || n != a.nbytes)
      return bad("array of " + std::to_string(a.nbytes)
                 + " bytes does not match its shape and dtype");
    if (a.data == nullptr && a.nbytes > 0)
      return bad("array without data");
  }
  return caf::none;
}

template <class Sink>
caf::error emit_node(Sink& s, const value& x, std::size_t depth) {
  if (auto err = check_node<Sink>(x, depth))
    return err;
  if constexpr (Sink::checks)
    if (++s.values > defaults.max_values)
      return value_error(errc::too_large,
                         "more than " + std::to_string(defaults.max_values)
                           + " values");
  switch (x.kind) {
    case value_kind::none: put_u8(s, tag_none); break;
    case value_kind::boolean:
      put_u8(s, x.boolean ? tag_true : tag_false);
      break;
    case value_kind::integer:
      put_u8(s, tag_int);
      s.put(&x.integer, 8);
      break;
    case value_kind::real:
      put_u8(s, tag_real);
      s.put(&x.real, 8);
      break;
    case value_kind::string:
    case value_kind::bytes:
      put_u8(s, x.kind == value_kind::string ? tag_str : tag_bytes);
      put_text(s, x.text);
      break;
    case value_kind::list: return emit_items(s, tag_list, x.items, depth);
    case value_kind::tuple: return emit_items(s, tag_tuple, x.items, depth);
    case value_kind::dict:
      put_u8(s, tag_dict);
      put_u64(s, x.items.size());
      for (std::size_t i = 0; i < x.items.size(); ++i) {
        put_text(s, x.keys[i]);
        if (auto err = emit_node(s, x.items[i], depth + 1))
          return err;
      }
      break;
    case value_kind::array: {
      auto& a = x.array;
      std::uint8_t head[3] = {static_cast<std::uint8_t>(a.type),
                              static_cast<std::uint8_t>(a.flavor),
                              static_cast<std::uint8_t>(a.shape.size())};
      put_u8(s, tag_array);
      s.put(head, 3);
      s.put(a.shape.data(), 8 * a.shape.size());
      put_u64(s, a.nbytes);
      s.pad();
      s.put(a.data, a.nbytes); // the one copy of the array's bytes
      break;
    }
    default:
      return value_error(errc::malformed_input,
                         "unknown kind "
                           + std::to_string(static_cast<unsigned>(x.kind)));
  }
  return caf::none;
}

// Both passes over the root `emit_root(sink)` writes.
template <class F>
caf::expected<shared_bytes> encode_root(F emit_root) {
  measure_sink c;
  c.put(magic, 4);
  if (auto err = emit_root(c))
    return err;
  if (c.pos > max_wire_bytes)
    return value_error(errc::too_large,
                       "encoding exceeds " + std::to_string(max_wire_bytes)
                         + " bytes");
  try {
    writable_bytes buf{static_cast<std::size_t>(c.pos)};
    write_sink w{buf.data()};
    w.put(magic, 4);
    emit_root(w);
    return shared_bytes{std::move(buf)};
  } catch (const std::bad_alloc&) {
    return value_error(errc::too_large,
                       "cannot allocate " + std::to_string(c.pos) + " bytes");
  }
}

// A container being decoded: `left` items still to read.
struct open_container {
  value* node;
  std::uint64_t left;
  std::size_t start;
};

class value_decoder {
 public:
  value_decoder(const shared_bytes& bytes, const value_limits& limits)
    : bytes_(bytes), data_(bytes.data()), size_(bytes.size()), limits_(limits) {
  }

  // Iterative (an explicit stack of open containers): no input and no
  // max_depth can exhaust the C stack.
  caf::error run(value& root) {
    if (size_ > limits_.max_bytes)
      return fail(std::to_string(size_) + " bytes, more than "
                    + std::to_string(limits_.max_bytes),
                  0);
    if (size_ < 4 || std::memcmp(data_, magic, 3) != 0)
      return fail("bad magic", 0);
    if (data_[3] != magic[3])
      return fail("unknown version " + std::to_string(data_[3]), 3);
    pos_ = 4;
    std::vector<open_container> stack;
    for (value* slot = &root; slot != nullptr;) {
      auto start = pos_;
      std::uint64_t n = 0;
      if (auto err = read_node(*slot, stack.size() + 1, n))
        return err;
      if (n > 0)
        stack.push_back(open_container{slot, n, start});
      slot = nullptr;
      while (!stack.empty() && stack.back().left == 0) {
        auto& done = *stack.back().node;
        if (done.kind == value_kind::dict && has_duplicate(done.keys))
          return fail("duplicate dict key", stack.back().start);
        stack.pop_back();
      }
      if (stack.empty())
        break;
      auto& top = stack.back();
      --top.left;
      if (top.node->kind == value_kind::dict) {
        std::string key;
        if (auto err = read_text(key, true))
          return err;
        top.node->keys.push_back(std::move(key));
      }
      slot = &top.node->items.emplace_back();
    }
    if (pos_ != size_)
      return fail("trailing bytes", pos_);
    return caf::none;
  }

  std::size_t pos() const noexcept {
    return pos_;
  }

 private:
  caf::error fail(std::string what, std::size_t at) const {
    return value_error(errc::malformed_input,
                       std::move(what) + " at offset " + std::to_string(at));
  }

  std::size_t left() const noexcept {
    return size_ - pos_;
  }

  // The next `n` bytes, or nullptr (and nothing consumed) past the end.
  const std::uint8_t* take(std::uint64_t n) {
    if (n > left())
      return nullptr;
    auto p = data_ + pos_;
    pos_ += n;
    return p;
  }

  bool read_u64(std::uint64_t& x) {
    auto p = take(8);
    if (p != nullptr)
      std::memcpy(&x, p, 8);
    return p != nullptr;
  }

  caf::error truncated() const {
    return fail("truncated", pos_);
  }

  caf::error read_text(std::string& out, bool utf8) {
    auto at = pos_;
    std::uint64_t n = 0;
    if (!read_u64(n))
      return truncated();
    auto p = take(n);
    if (p == nullptr)
      return fail(std::to_string(n) + " bytes claimed, "
                    + std::to_string(left()) + " left",
                  at);
    if (auto bad = utf8 ? utf8_error(p, n) : n; bad != n)
      return fail("invalid UTF-8", at + 8 + bad);
    out.assign(reinterpret_cast<const char*>(p), n);
    return caf::none;
  }

  // Reads one node into `x`; a container's item count goes to `n` (its
  // items come next, read by run()).
  caf::error read_node(value& x, std::size_t depth, std::uint64_t& n) {
    auto at = pos_;
    if (depth > limits_.max_depth)
      return fail("nested deeper than " + std::to_string(limits_.max_depth),
                  at);
    if (++nodes_ > limits_.max_values)
      return fail("more than " + std::to_string(limits_.max_values) + " values",
                  at);
    auto p = take(1);
    if (p == nullptr)
      return truncated();
    switch (*p) {
      case tag_none: x.kind = value_kind::none; break;
      case tag_false:
      case tag_true:
        x.kind = value_kind::boolean;
        x.boolean = *p == tag_true;
        break;
      case tag_int:
      case tag_real: {
        auto q = take(8);
        if (q == nullptr)
          return truncated();
        x.kind = *p == tag_int ? value_kind::integer : value_kind::real;
        std::memcpy(*p == tag_int ? static_cast<void*>(&x.integer) : &x.real, q,
                    8);
        break;
      }
      case tag_str:
      case tag_bytes:
        x.kind = *p == tag_str ? value_kind::string : value_kind::bytes;
        return read_text(x.text, *p == tag_str);
      case tag_list:
      case tag_tuple:
      case tag_dict: {
        x.kind = *p == tag_list ? value_kind::list
          : *p == tag_tuple     ? value_kind::tuple
                                : value_kind::dict;
        if (!read_u64(n))
          return truncated();
        // Each item takes at least 1 byte (a dict's 9): a count beyond the
        // bytes left is a lie, refused before anything is allocated.
        auto least = x.kind == value_kind::dict ? 9 : 1;
        if (n > left() / least)
          return fail(std::to_string(n) + " items claimed, "
                        + std::to_string(left()) + " bytes left",
                      at);
        // Nor may the items exceed max_values (a value takes ~176 bytes
        // decoded: 1 byte each on the wire would be a 176x amplification).
        if (n > limits_.max_values - std::min(nodes_, limits_.max_values))
          return fail(std::to_string(n) + " items claimed, more than "
                        + std::to_string(limits_.max_values) + " values",
                      at);
        x.items.reserve(n);
        if (x.kind == value_kind::dict)
          x.keys.reserve(n);
        break;
      }
      case tag_array: x.kind = value_kind::array; return read_array(x.array);
      default: return fail("unknown tag " + std::to_string(*p), at);
    }
    return caf::none;
  }

  caf::error read_array(value_array& x) {
    auto at = pos_;
    auto head = take(3);
    if (head == nullptr)
      return truncated();
    x.type = static_cast<dtype>(head[0]);
    x.flavor = static_cast<array_flavor>(head[1]);
    std::size_t ndim = head[2];
    if (element_size(x.type) == 0)
      return fail("unknown dtype " + std::to_string(head[0]), at);
    if (x.flavor > array_flavor::numpy_scalar)
      return fail("unknown array flavor " + std::to_string(head[1]), at + 1);
    if (ndim > limits_.max_ndim)
      return fail(std::to_string(ndim) + " dimensions", at + 2);
    if (x.flavor == array_flavor::numpy_scalar && ndim > 0)
      return fail("numpy scalar with dimensions", at + 2);
    auto dims = take(8 * ndim);
    if (dims == nullptr)
      return truncated();
    x.shape.resize(ndim);
    if (ndim > 0) // a 0-d array's shape has no data() to copy to
      std::memcpy(x.shape.data(), dims, 8 * ndim);
    std::uint64_t expected = 0, nbytes = 0;
    if (!array_bytes(x.type, x.shape, expected))
      return fail("negative or overflowing shape", at + 3);
    if (!read_u64(nbytes))
      return truncated();
    if (nbytes != expected)
      return fail("array of " + std::to_string(nbytes)
                    + " bytes does not match its shape ("
                    + std::to_string(expected) + ")",
                  pos_ - 8);
    auto pad_at = pos_;
    auto pad = take(pad64(pos_) - pos_);
    if (pad == nullptr)
      return truncated();
    if (std::any_of(pad, data_ + pos_, [](auto b) {
          return b != 0;
        }))
      return fail("nonzero padding", pad_at);
    auto p = take(nbytes);
    if (p == nullptr)
      return fail(std::to_string(nbytes) + " bytes of array data claimed, "
                    + std::to_string(left()) + " left",
                  pos_);
    x.nbytes = nbytes;
    if (nbytes == 0)
      return caf::none;
    if (reinterpret_cast<std::uintptr_t>(p) % element_size(x.type) == 0) {
      // A view into the received bytes, which the array keeps alive.
      if (!owner_)
        owner_ = std::make_shared<const shared_bytes>(bytes_);
      x.data = p;
      x.owner = owner_;
    } else {
      writable_bytes copy{nbytes};
      std::memcpy(copy.data(), p, nbytes);
      auto own = std::make_shared<const shared_bytes>(std::move(copy));
      x.data = own->data();
      x.owner = std::move(own);
    }
    return caf::none;
  }

  const shared_bytes& bytes_;
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::uint64_t nodes_ = 0;
  const value_limits& limits_;
  std::shared_ptr<const void> owner_;
};

caf::error decode_root(const shared_bytes& bytes, const value_limits& limits,
                       value& out) {
  value_decoder d{bytes, limits};
  try {
    return d.run(out);
  } catch (const std::exception& e) { // bad_alloc from a string or vector
    return value_error(errc::malformed_input,
                       std::string{"cannot decode ("} + e.what()
                         + ") at offset " + std::to_string(d.pos()));
  }
}

} // namespace

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

caf::expected<shared_bytes> encode_value(const value& x) {
  return encode_root([&](auto& sink) {
    return emit_node(sink, x, 1);
  });
}

std::size_t encoded_size(const value& x) {
  measure_sink c;
  c.put(magic, 4);
  if (emit_node(c, x, 1) || c.pos > max_wire_bytes)
    return 0;
  return static_cast<std::size_t>(c.pos);
}

caf::expected<value> decode_value(const shared_bytes& bytes,
                                  const value_limits& limits) {
  value result;
  if (auto err = decode_root(bytes, limits, result)) {
    dice::count(trust_event::payload_rejected);
    return err;
  }
  return result;
}

caf::expected<payload> pack_values(const std::vector<value>& items,
                                   std::uint32_t origin,
                                   std::int64_t model_version) {
  // The list's header and items, without copying them into a value first.
  auto bytes = encode_root([&](auto& sink) {
    return emit_items(sink, tag_list, items, 1);
  });
  if (!bytes)
    return std::move(bytes.error());
  return payload{std::move(*bytes), items.size(), origin, model_version};
}

caf::error unpack_values_into(const payload& x, std::vector<value>& out) {
  value list;
  auto err = decode_root(x.bytes, {}, list);
  if (!err && list.kind != value_kind::list)
    err = value_error(errc::malformed_input,
                      std::string{"items must be a list, not "}
                        + to_string(list.kind) + " at offset 4");
  if (!err && list.items.size() != x.count)
    err = value_error(errc::malformed_input,
                      "payload holds " + std::to_string(list.items.size())
                        + " items but claims " + std::to_string(x.count)
                        + " at offset 4");
  if (!err) {
    try {
      out.reserve(out.size() + list.items.size());
    } catch (const std::exception&) {
      err = value_error(errc::malformed_input, "cannot allocate the items");
    }
  }
  if (err) {
    dice::count(trust_event::payload_rejected);
    return err;
  }
  // Moves of a value do not throw: `out` gets every item or none.
  std::move(list.items.begin(), list.items.end(), std::back_inserter(out));
  return caf::none;
}

caf::expected<std::vector<value>>
unpack_values(const std::vector<payload>& xs) {
  std::vector<value> result;
  for (auto& x : xs)
    if (auto err = unpack_values_into(x, result))
      return err;
  return result;
}

} // namespace dice
