#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "caf/binary_deserializer.hpp"
#include "caf/data_processor.hpp"
#include "caf/deserializer.hpp"
#include "caf/error.hpp"
#include "caf/serializer.hpp"
#include "caf/sec.hpp"

namespace dice {

/// Largest byte buffer dice accepts from the wire (CAF 0.17's BASP frames are
/// limited to 4 GiB; anything near that is a bug or an attack).
constexpr std::uint64_t max_wire_bytes = std::uint64_t{2} << 30;

/// An immutable, reference-counted byte buffer. Copies share the bytes, so a
/// snapshot sent to N local receivers exists once in memory; on the wire it
/// is written with one memcpy, never element by element.
class shared_bytes {
public:
  /// An empty buffer.
  shared_bytes() = default;

  /// Takes ownership of `bytes`; they are never modified afterwards.
  explicit shared_bytes(std::vector<std::uint8_t> bytes)
    : ptr_(std::make_shared<const std::vector<std::uint8_t>>(
      std::move(bytes))) {
  }

  /// First byte, or nullptr when empty.
  const std::uint8_t* data() const noexcept {
    return ptr_ ? ptr_->data() : nullptr;
  }

  /// Number of bytes.
  std::size_t size() const noexcept {
    return ptr_ ? ptr_->size() : 0;
  }

  /// True when the buffer holds no bytes.
  bool empty() const noexcept {
    return size() == 0;
  }

  /// How many handles share these bytes (for tests and diagnostics).
  long use_count() const noexcept {
    return ptr_.use_count();
  }

  /// True if both handles point at the very same bytes in memory.
  bool same_buffer(const shared_bytes& other) const noexcept {
    return ptr_ == other.ptr_;
  }

  /// Byte-wise equality.
  friend bool operator==(const shared_bytes& x, const shared_bytes& y) {
    if (x.ptr_ == y.ptr_)
      return true;
    return x.size() == y.size()
           && (x.size() == 0 || std::equal(x.data(), x.data() + x.size(),
                                           y.data()));
  }

  friend bool operator!=(const shared_bytes& x, const shared_bytes& y) {
    return !(x == y);
  }

  /// Writes length + raw bytes (one memcpy).
  friend caf::error inspect(caf::serializer& f, shared_bytes& x) {
    auto n = x.size();
    if (auto err = f.begin_sequence(n))
      return err;
    if (n > 0)
      if (auto err = f.apply_raw(n, const_cast<std::uint8_t*>(x.data())))
        return err;
    return f.end_sequence();
  }

  /// Reads length + raw bytes; refuses lengths above `max_wire_bytes`.
  friend caf::error inspect(caf::deserializer& f, shared_bytes& x) {
    std::size_t n = 0;
    if (auto err = f.begin_sequence(n))
      return err;
    if (n > max_wire_bytes)
      return caf::sec::invalid_argument;
    // A length beyond the bytes actually received means a truncated or
    // hostile frame: refuse it before allocating up to max_wire_bytes for it.
    // (BASP decodes with a binary_deserializer, so the wire gets this check.)
    if (auto bin = dynamic_cast<caf::binary_deserializer*>(&f))
      if (n > bin->remaining())
        return caf::sec::end_of_stream;
    std::vector<std::uint8_t> buf;
    if (n > 0) {
      buf.resize(n);
      if (auto err = f.apply_raw(n, buf.data()))
        return err;
    }
    x = shared_bytes{std::move(buf)};
    return f.end_sequence();
  }

  /// Other inspectors (to_string, ...) see a short summary, not the bytes.
  template <class Inspector>
  friend std::enable_if_t<
    !std::is_base_of<caf::data_processor<caf::serializer>, Inspector>::value
      && !std::is_base_of<caf::data_processor<caf::deserializer>,
                          Inspector>::value,
    typename Inspector::result_type>
  inspect(Inspector& f, shared_bytes& x) {
    auto summary = std::to_string(x.size()) + " bytes";
    return f(summary);
  }

private:
  std::shared_ptr<const std::vector<std::uint8_t>> ptr_;
};

} // namespace dice
