#pragma once

// What value.cpp, value_encode.cpp and value_decode.cpp share: the wire
// format's constants (messages/value.cpp describes the format) and the
// checks both directions make.

#include "dice/core/errc.hpp"
#include "dice/messages/value.hpp"

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace dice::value_detail {

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
std::size_t utf8_error(const std::uint8_t* s, std::size_t n);

/// utf8_error of a string's bytes.
std::size_t utf8_error(const std::string& s);

// element_size(type) * product(shape) into `out`; false on a negative
// dimension or an overflow (also when a later dimension is 0).
bool array_bytes(dtype type, const std::vector<std::int64_t>& shape,
                 std::uint64_t& out);

/// True if a key repeats.
bool has_duplicate(const std::vector<std::string>& keys);

/// An error of `code` whose text starts with "value: ".
caf::error value_error(errc code, std::string what);

} // namespace dice::value_detail
