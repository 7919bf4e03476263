// dice::value's encoder: a counting pass that also checks the value, then
// one buffer of exactly that size, one memcpy per array.

#include "dice/messages/value.hpp"
#include "messages/value_format.hpp"

#include <cstring>
#include <new>

namespace dice {

using namespace value_detail;

namespace {

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

} // namespace

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

} // namespace dice
