#pragma once

// dice::value: the data a Python program sends (trajectories, episodes,
// events), as a typed tree that C++ reads too, and its codec. Python's
// pickle would run code of the sender's choosing in the receiver; this
// codec only ever builds the types below, within bounds, and refuses
// anything else with the offset where it went wrong.
//
// Why a codec of our own: numpy arrays and tensors must be readable in
// place (64-byte aligned, zero-copy views into the received bytes) and
// every length must be checked against dice's bounds before anything is
// allocated; msgpack-c and Boost archives give neither.

#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/payload.hpp"
#include "dice/messages/shared_bytes.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dice {

/// What a value holds.
enum class value_kind : std::uint8_t {
  none,
  boolean,
  integer,
  real,
  string,
  bytes,
  list,
  tuple,
  dict,
  /// An n-dimensional array (numpy.ndarray or torch.Tensor in Python).
  array,
};

/// Name of a kind for messages ("dict", "array", ...).
const char* to_string(value_kind x) noexcept;

/// How an array looks on the Python side.
enum class array_flavor : std::uint8_t {
  /// numpy.ndarray.
  numpy,
  /// torch.Tensor.
  tensor,
  /// A numpy scalar (numpy.float32(1.5)): a 0-d array read back as a scalar
  /// (its shape is empty).
  numpy_scalar,
};

/// A dense, C-ordered array whose bytes another object owns: encoding reads
/// them in place (one copy, into the payload), decoding points into the
/// received buffer (no copy) and keeps it alive through `owner`.
struct value_array {
  /// Element type.
  dtype type = dtype::float32;
  /// Sizes of the dimensions (empty: a 0-d array of one element).
  std::vector<std::int64_t> shape;
  /// First byte (C order, contiguous); may be null when `nbytes` is 0.
  const std::uint8_t* data = nullptr;
  /// element_size(type) * product(shape).
  std::size_t nbytes = 0;
  /// Keeps `data` alive.
  std::shared_ptr<const void> owner;
  /// What the array was in Python.
  array_flavor flavor = array_flavor::numpy;
};

/// A tree of None, bool, int (64-bit), float (double), str (UTF-8), bytes,
/// list, tuple, dict with str keys (in insertion order) and arrays.
struct value {
  /// What this node holds; only the matching field below is meaningful.
  value_kind kind = value_kind::none;
  /// For boolean.
  bool boolean = false;
  /// For integer.
  std::int64_t integer = 0;
  /// For real.
  double real = 0;
  /// For string and bytes.
  std::string text;
  /// For list and tuple (the items), and dict (the values, in key order).
  std::vector<value> items;
  /// For dict: the keys, one per item.
  std::vector<std::string> keys;
  /// For array.
  value_array array;

  /// None.
  static value none() {
    return value{};
  }
  /// A bool.
  static value of(bool x);
  /// An int.
  static value of(std::int64_t x);
  /// A float.
  static value of(double x);
  /// A str.
  static value of(std::string x);
  /// A str (without this, a string literal would pick `of(bool)`).
  static value of(const char* x) {
    return of(std::string{x});
  }
  /// A bytes object.
  static value of_bytes(std::string x);
  /// A list.
  static value list(std::vector<value> xs);
  /// A tuple.
  static value tuple(std::vector<value> xs);
  /// A dict; `keys` and `xs` have the same length.
  static value dict(std::vector<std::string> keys, std::vector<value> xs);
  /// An array (copies nothing: `x.owner` keeps the bytes).
  static value of(value_array x);

  /// The dict item called `key`, or nullptr (also when not a dict).
  const value* find(std::string_view key) const noexcept;
};

/// Deep equality (arrays by dtype, shape, flavor and bytes; floats bitwise,
/// so a NaN equals itself; dicts in key order).
bool operator==(const value& x, const value& y);

/// Deep inequality.
inline bool operator!=(const value& x, const value& y) {
  return !(x == y);
}

/// Limits a decoder keeps to; the defaults are dice's wire limits.
struct value_limits {
  /// Deepest nesting (the root is depth 1). The decoder keeps no C stack
  /// per level, but a value's destructor and operator== recurse.
  std::size_t max_depth = 64;
  /// Most dimensions of an array.
  std::size_t max_ndim = 32;
  /// Largest encoding accepted.
  std::uint64_t max_bytes = max_wire_bytes;
  /// Most values (every None, number, string, container and array counts
  /// one): a decoded value takes about 176 bytes, so without this a hostile
  /// payload of 1-byte values would decode to 176 times its size. 2^21
  /// values is about 370 MB decoded; a trajectory of 10,000 transitions of
  /// 10 fields has 110,000.
  std::uint64_t max_values = std::uint64_t{1} << 21;
};

/// Encodes `x` into one buffer (64-byte aligned; array data padded to 64
/// bytes so that a decoder can view it in place). Fails with
/// errc::malformed_input on a value no decoder would accept (an
/// inconsistent array, a dict with mismatched or duplicate keys, a str or
/// key that is not UTF-8, deeper or with more dimensions than value_limits'
/// defaults) and errc::too_large beyond max_wire_bytes. The wire format is
/// described at the top of messages/value.cpp.
caf::expected<shared_bytes> encode_value(const value& x);

/// Bytes `encode_value(x)` produces (for planning buffers); 0 when it
/// would fail.
std::size_t encoded_size(const value& x);

/// Decodes what encode_value wrote. Arrays point into `bytes` (no copy)
/// when their data is aligned to their element size, else they get their
/// own copy. Anything malformed, truncated, too deep, too large, or with
/// trailing bytes gives errc::malformed_input naming the offset, counts
/// trust_event::payload_rejected, and allocates no more than a bounded
/// multiple of `bytes.size()` on the way (at most one `value` node,
/// sizeof(value) = 176 bytes on x86-64, per byte received: a list of a
/// million Nones is 1 MB on the wire and 176 MB decoded).
caf::expected<value> decode_value(const shared_bytes& bytes,
                                  const value_limits& limits = {});

/// Packs `items` (one value per item) as a payload of `items.size()` items.
caf::expected<payload> pack_values(const std::vector<value>& items,
                                   std::uint32_t origin = 0,
                                   std::int64_t model_version = -1);

/// Unpacks a payload made by pack_values, appending its items to `out`
/// (unchanged on error: errc::malformed_input, counted like decode_value;
/// also when the item count does not match the payload's).
caf::error unpack_values_into(const payload& x, std::vector<value>& out);

/// Unpacks and concatenates payloads made by pack_values, in order.
caf::expected<std::vector<value>> unpack_values(const std::vector<payload>& xs);

} // namespace dice
